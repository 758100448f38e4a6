"""``make demo``: make a small demo dataset, run conf/demo_second_moment.yaml.

Running it twice releases nothing new: the release id is in the ledger, so
the stored release is returned (no new noise, no new charge).
"""

from __future__ import annotations

import os
import shutil
import sys

from spark_dp.cli.example_data import write_example_data
from spark_dp.cli.main import main as cli_main

DEMO_CONFIG = "conf/demo_second_moment.yaml"
DEMO_DATA = "data/demo.parquet"


def make_demo_data(path: str = DEMO_DATA) -> None:
    """Writes the demo dataset to ``path`` and the other example datasets conf/ uses beside it."""
    root = os.path.dirname(path) or "."
    for written in write_example_data(root):
        print(f"example data written to {written}")
    if not os.path.exists(path):
        shutil.copyfile(os.path.join(root, "demo.parquet"), path)


def main() -> int:
    """``make demo``: writes the demo data and runs its release end to end on an embedded local Spark."""
    make_demo_data()
    rc = cli_main(["-v", "release", DEMO_CONFIG])
    if rc != 0:
        return rc
    print("\nbudget of the demo dataset:")
    return cli_main(["ledger", "--uri", "sqlite:///releases/ledger.db", "--dataset", "demo.points"])


if __name__ == "__main__":
    sys.exit(main())
