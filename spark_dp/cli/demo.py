"""``make demo``: make a small demo dataset, run conf/demo_second_moment.yaml.

Running it twice releases nothing new: the release id is in the ledger, so
the stored release is returned (no new noise, no new charge).
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from spark_dp.cli.main import main as cli_main

DEMO_CONFIG = "conf/demo_second_moment.yaml"
DEMO_DATA = "data/demo.parquet"


def make_demo_data(path: str = DEMO_DATA, n: int = 100_000) -> None:
    """Synthetic correlated points in the unit ball (demo data, not noise)."""
    if os.path.exists(path):
        return
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    gen = np.random.default_rng(20261130)  # demo data generator, not a privacy noise source
    z = gen.normal(size=(n, 3)) @ np.array([[1.0, 0.6, 0.2], [0.0, 0.8, 0.4], [0.0, 0.0, 0.5]])
    z /= np.maximum(1.0, np.linalg.norm(z, axis=1, keepdims=True) / 1.2)
    pq.write_table(pa.table({"x1": z[:, 0], "x2": z[:, 1], "x3": z[:, 2]}), path)
    print(f"demo data: {n} rows written to {path}")


def main() -> int:
    make_demo_data()
    rc = cli_main(["-v", "release", DEMO_CONFIG])
    if rc != 0:
        return rc
    print("\nbudget of the demo dataset:")
    return cli_main(["ledger", "--uri", "sqlite:///releases/ledger.db", "--dataset", "demo.points"])


if __name__ == "__main__":
    sys.exit(main())
