"""Which row-norm quantile suits a tensor's norm_bound="auto"? numpy only, seeded (docs/accuracy.md, tensor section).

d = 5, k = 2 orthonormal components, n = 20,000 rows r·v_h (+ N(0, 0.05²)), r log-normal; the private online power
method (reuse, L = 5, R = 8) at B = the q-quantile of the row norms (exact quantile: the private selection lands
within a grid step of it); worst component's eigenvector error over 8 seeds.

    PYTHONPATH=. python benchmarks/tensor_norm_quantile.py
"""
import numpy as np

from spark_dp.tensor.private import private_online_power_method, rows_plan
from tests._samplers import FakeChokepoint
from tests._tensor_data import match

d, k, n, L, R = 5, 2, 20000, 5, 8
rng0 = np.random.default_rng(0)
V, _ = np.linalg.qr(rng0.standard_normal((d, k)))
V = V.T
def data(seed, sigma_log):
    rng = np.random.default_rng(seed)
    h = rng.integers(0, k, n)
    r = np.exp(rng.normal(0, sigma_log, n)) * np.where(h == 0, 1.0, 0.7)
    return r[:, None] * V[h] + rng.normal(0, 0.05, (n, d))
def moments_of(X, B):
    nrm = np.linalg.norm(X, axis=1)
    Xc = X * np.minimum(1.0, B / np.maximum(nrm, 1e-300))[:, None]
    def m(U, p):
        P = Xc @ U
        return Xc.T @ (P ** 2), (P ** 3).sum(0), float(len(Xc))
    return m
for sigma_log in (0.3, 1.0):
    print(f"row norms log-normal, sigma={sigma_log}")
    for eps in (0.5, 2.0):
        for q in (0.5, 0.75, 0.9, 0.95, 0.99):
            errs = []
            for seed in range(8):
                X = data(seed, sigma_log)
                B = float(np.quantile(np.linalg.norm(X, axis=1), q))
                plan = rows_plan(epsilon=eps, delta=1e-6, k=k, L=L, R=R, norm_bound=B, mode="reuse")
                dec = private_online_power_method(moments_of(X, B), d=d, k=k, L=L, R=R, plan=plan,
                                                  chokepoint=FakeChokepoint.seeded(seed + 100), rng=np.random.default_rng(seed))
                errs.append(match(dec.eigenvectors, V)[1].max())
            print(f"  eps={eps} q={q}: worst-component error median {np.median(errs):.3f}  (max {np.max(errs):.3f})")
