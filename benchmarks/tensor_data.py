"""Small generated datasets for the tensor configs (conf/tensor_*.yaml) and benchmarks.

``python -m benchmarks.tensor_data [outdir]`` writes:

* ``tensor_T.npy`` — T = Σᵢ λᵢ vᵢ^⊗3 + symmetric Gaussian noise, d = 20, k = 3
  orthonormal components (λ = 3000, 2000, 1000 so Alg. 3 at ε = 1 recovers
  the top one), noise σ = 0.01;
* ``tensor_rows.parquet`` — 20,000 rows in 8 columns x1..x8 from a
  single-topic-like mixture x = s_h v_h + small noise, whose third moment is
  close to orthogonal of rank 3.

Data generators only (numpy seeds here are data, never privacy noise).
"""

from __future__ import annotations

import itertools
import os
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def explicit_tensor(d: int = 20, k: int = 3, *, lambdas=(3000.0, 2000.0, 1000.0), noise: float = 0.01, seed: int = 1):
    """(T, λ, V) with V of shape (k, d)."""
    gen = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(gen.standard_normal((d, k)))
    lam = np.asarray(lambdas[:k], dtype=float)
    T = np.einsum("r,ir,jr,kr->ijk", lam, Q, Q, Q)
    E = gen.normal(0.0, noise, size=(d, d, d))
    E = sum(E.transpose(p) for p in itertools.permutations(range(3))) / 6.0
    return T + E, lam, Q.T


def mixture_rows(n: int = 20_000, d: int = 8, k: int = 3, *, noise: float = 0.01, seed: int = 2):
    """(X, V, weights): x = s_h v_h + N(0, noise²I), h uniform, s = (1, 0.8, 0.6)."""
    gen = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(gen.standard_normal((d, k)))
    scales = np.linspace(1.0, 0.6, k)
    h = gen.integers(0, k, size=n)
    X = Q[:, h].T * scales[h][:, None] + gen.normal(0.0, noise, size=(n, d))
    return X, Q.T, scales**3 / k


def write_all(outdir: str = "data") -> tuple[str, str]:
    os.makedirs(outdir, exist_ok=True)
    tpath = os.path.join(outdir, "tensor_T.npy")
    rpath = os.path.join(outdir, "tensor_rows.parquet")
    np.save(tpath, explicit_tensor()[0])
    X = mixture_rows()[0]
    pq.write_table(pa.table({f"x{i + 1}": X[:, i] for i in range(X.shape[1])}), rpath)
    return tpath, rpath


if __name__ == "__main__":
    print(write_all(sys.argv[1] if len(sys.argv) > 1 else "data"))
