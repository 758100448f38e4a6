"""Demo data for conf/count_sketch_*.yaml (see spark_dp/cli/example_data.py).

    .venv/bin/python -m benchmarks.sketch_data [PATH]    # writes data/sketch_queries.parquet + candidates
"""

from __future__ import annotations

import os
import sys

import pyarrow.parquet as pq

from spark_dp.cli.example_data import sketch_queries

DATA = "data/sketch_queries.parquet"
CANDIDATES = "data/sketch_candidates.txt"


def make_sketch_data(path: str = DATA, candidates: str = CANDIDATES, n: int = 50_000, vocab: int = 5_000,
                     users: int = 5_000, seed: int = 20261130) -> None:
    """Writes the demo rows to ``path`` and the 200 candidate queries q0…q199 to ``candidates``."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    pq.write_table(sketch_queries(n=n, vocab=vocab, users=users, seed=seed), path)
    with open(candidates, "w") as fh:
        fh.write("".join(f"q{r}\n" for r in range(200)))


if __name__ == "__main__":
    make_sketch_data(*sys.argv[1:2])
    print(f"wrote {sys.argv[1] if len(sys.argv) > 1 else DATA} and {CANDIDATES}")
