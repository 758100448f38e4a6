"""Demo data for conf/count_sketch_*.yaml: Zipf-distributed queries by users.

    .venv/bin/python -m benchmarks.sketch_data            # writes data/sketch_queries.parquet + candidates

Columns: ``query`` (string, Zipf over a 5,000-query vocabulary), ``query_id``
(int, the query's rank − 1), ``user_id`` (string), ``weight`` (double in
[0, 2], e.g. a dwell time, so that clipping to [−1, 1] shows). Synthetic data, not noise: the
generator is seeded for reproducibility.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

DATA = "data/sketch_queries.parquet"
CANDIDATES = "data/sketch_candidates.txt"


def make_sketch_data(path: str = DATA, candidates: str = CANDIDATES, n: int = 50_000, vocab: int = 5_000,
                     users: int = 5_000, seed: int = 20261130) -> None:
    """Writes the demo rows to ``path`` and the 200 candidate queries q0…q199 to ``candidates``."""
    gen = np.random.default_rng(seed)
    ranks = (gen.zipf(1.2, size=n) - 1) % vocab
    user = gen.integers(0, users, size=n)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    pq.write_table(pa.table({
        "query": [f"q{r}" for r in ranks.tolist()],
        "query_id": ranks.astype(np.int64),
        "user_id": [f"u{u}" for u in user.tolist()],
        "weight": np.round(gen.uniform(0, 2, size=n), 3),
    }), path)
    with open(candidates, "w") as fh:
        fh.write("".join(f"q{r}\n" for r in range(200)))


if __name__ == "__main__":
    make_sketch_data(*sys.argv[1:2])
    print(f"wrote {DATA} and {CANDIDATES}")
