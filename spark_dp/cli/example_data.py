"""Generated example datasets for every config in conf/ (synthetic data, not noise).

    python -m spark_dp.cli.example_data [DIR]     # default DIR: data

Writes, under DIR:

* ``demo.parquet`` — 100,000 correlated points x1..x3 (conf/demo_second_moment.yaml);
* ``regression.parquet`` — x1..x3, y = x·β + noise, and a string column
  ``name`` (conf/second_moment_*, linear_regression_*, pca_*);
* ``sketch_queries.parquet`` — Zipf queries by users with weights, and
  ``sketch_candidates.txt`` (conf/count_sketch_*);
* ``tensor_T.npy`` — a symmetric 20×20×20 tensor of rank 3 plus small noise,
  and ``tensor_rows.parquet`` — rows of a 3-component mixture in 8
  dimensions (conf/tensor_*);
* ``baseball_batting.csv`` — synthetic season batting lines in the columns
  and ranges of the Lahman baseball table (``id``, ``year``, ``ab``, ``r``,
  ``h``, ``X2b``, ``X3b``, ``hr``, ``bb``; players with 15–20 seasons, a few
  ``NA`` walks) for conf/examples/baseball_*.yaml. docs/accuracy.md's
  figures were measured on the real table (Lahman baseball database, as
  shipped in the R package plyr as ``baseball``, CC BY-SA 3.0): put that
  CSV at the same path to reproduce them (an existing file is kept).

Every generator is seeded so examples are reproducible: these seeds make
*data*, never privacy noise (which only spark_dp.privacy draws).
"""

from __future__ import annotations

import itertools
import os
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

REGRESSION_BETA = np.array([0.8, -0.4, 0.3])


def demo_points(n: int = 100_000, seed: int = 20261130) -> np.ndarray:
    """Correlated 3-d points, scaled into a ball of radius 1.2."""
    gen = np.random.default_rng(seed)  # synthetic example data, not privacy noise
    z = gen.normal(size=(n, 3)) @ np.array([[1.0, 0.6, 0.2], [0.0, 0.8, 0.4], [0.0, 0.0, 0.5]])
    return z / np.maximum(1.0, np.linalg.norm(z, axis=1, keepdims=True) / 1.2)


def regression_table(n: int = 20_000, seed: int = 8) -> pa.Table:
    """Synthetic regression rows (x1..x3, y = X·beta + small noise) for the example configs."""
    gen = np.random.default_rng(seed)  # synthetic example data, not privacy noise
    X = gen.normal(size=(n, 3)) * 0.3
    y = X @ REGRESSION_BETA + 0.05 * gen.normal(size=n)
    return pa.table({"x1": X[:, 0], "x2": X[:, 1], "x3": X[:, 2], "y": y, "name": [f"n{i}" for i in range(n)]})


def sketch_queries(n: int = 50_000, vocab: int = 5_000, users: int = 5_000, seed: int = 20261130) -> pa.Table:
    """``query`` (Zipf over ``vocab`` strings), ``query_id``, ``user_id``, ``weight`` in [0, 2]."""
    gen = np.random.default_rng(seed)  # synthetic example data, not privacy noise
    ranks = (gen.zipf(1.2, size=n) - 1) % vocab
    user = gen.integers(0, users, size=n)
    return pa.table({
        "query": [f"q{r}" for r in ranks.tolist()],
        "query_id": ranks.astype(np.int64),
        "user_id": [f"u{u}" for u in user.tolist()],
        "weight": np.round(gen.uniform(0, 2, size=n), 3),
    })


def explicit_tensor(d: int = 20, k: int = 3, *, lambdas=(3000.0, 2000.0, 1000.0), noise: float = 0.01, seed: int = 1):
    """(T, λ, V): T = Σᵢ λᵢ vᵢ^⊗3 + symmetric Gaussian noise, V of shape (k, d) orthonormal."""
    gen = np.random.default_rng(seed)  # synthetic example data, not privacy noise
    Q, _ = np.linalg.qr(gen.standard_normal((d, k)))
    lam = np.asarray(lambdas[:k], dtype=float)
    T = np.einsum("r,ir,jr,kr->ijk", lam, Q, Q, Q)
    E = gen.normal(0.0, noise, size=(d, d, d))
    E = sum(E.transpose(p) for p in itertools.permutations(range(3))) / 6.0
    return T + E, lam, Q.T


def mixture_rows(n: int = 20_000, d: int = 8, k: int = 3, *, noise: float = 0.01, seed: int = 2):
    """(X, V, weights): x = s_h v_h + N(0, noise²I), h uniform, s from 1 down to 0.6."""
    gen = np.random.default_rng(seed)  # synthetic example data, not privacy noise
    Q, _ = np.linalg.qr(gen.standard_normal((d, k)))
    scales = np.linspace(1.0, 0.6, k)
    h = gen.integers(0, k, size=n)
    X = Q[:, h].T * scales[h][:, None] + gen.normal(0.0, noise, size=(n, d))
    return X, Q.T, scales**3 / k


def baseball_batting(players: int = 300, seed: int = 1871) -> pa.Table:
    """Synthetic season batting lines shaped like the Lahman table's (module doc); runs depend on the rest."""
    gen = np.random.default_rng(seed)  # synthetic example data, not privacy noise
    seasons = gen.integers(15, 21, size=players)
    pid = np.repeat(np.arange(players), seasons)
    n = pid.size
    first = gen.integers(1871, 1990, size=players)
    year = first[pid] + np.concatenate([np.arange(s) for s in seasons])
    skill = gen.uniform(0.21, 0.33, size=players)[pid]
    ab = gen.integers(30, 700, size=n)
    h = gen.binomial(ab, skill)
    x2b, x3b, hr = gen.binomial(h, 0.18), gen.binomial(h, 0.03), gen.binomial(h, gen.uniform(0.01, 0.15, n))
    bb = gen.binomial(ab, gen.uniform(0.04, 0.15, n))
    r = np.minimum(gen.poisson(0.22 * h + 0.3 * bb + 0.7 * hr + 0.2 * x2b + 0.5 * x3b), 190)
    walks = pa.array(bb, type=pa.int64(), mask=gen.uniform(size=n) < 0.01)  # a few unrecorded: NA in the CSV
    return pa.table({"id": [f"player{p:03d}" for p in pid.tolist()], "year": year, "ab": ab, "r": r, "h": h,
                     "X2b": x2b, "X3b": x3b, "hr": hr, "bb": walks})


def write_example_data(root: str = "data", *, overwrite: bool = False) -> list[str]:
    """Writes every example dataset under ``root`` (skipping existing files); returns the paths written."""
    os.makedirs(root, exist_ok=True)
    written = []

    def want(name: str) -> str | None:
        path = os.path.join(root, name)
        if overwrite or not os.path.exists(path):
            written.append(path)
            return path
        return None

    if p := want("demo.parquet"):
        z = demo_points()
        pq.write_table(pa.table({"x1": z[:, 0], "x2": z[:, 1], "x3": z[:, 2]}), p)
    if p := want("regression.parquet"):
        pq.write_table(regression_table(), p)
    if p := want("sketch_queries.parquet"):
        pq.write_table(sketch_queries(), p)
    if p := want("sketch_candidates.txt"):
        with open(p, "w") as fh:
            fh.write("".join(f"q{r}\n" for r in range(200)))
    if p := want("tensor_T.npy"):
        np.save(p, explicit_tensor()[0])
    if p := want("tensor_rows.parquet"):
        X = mixture_rows()[0]
        pq.write_table(pa.table({f"x{i + 1}": X[:, i] for i in range(X.shape[1])}), p)
    if p := want("baseball_batting.csv"):
        import pyarrow.csv as pcsv

        pcsv.write_csv(baseball_batting(), p, pcsv.WriteOptions(quoting_style="none"))
        with open(p) as fh:
            text = fh.read()
        with open(p, "w") as fh:  # pyarrow writes a null as an empty field; the configs read "NA" (R's spelling)
            fh.write("\n".join(",".join(f if f else "NA" for f in line.split(",")) if line else line
                               for line in text.split("\n")))
    return written


if __name__ == "__main__":
    for path in write_example_data(sys.argv[1] if len(sys.argv) > 1 else "data"):
        print(f"wrote {path}")
