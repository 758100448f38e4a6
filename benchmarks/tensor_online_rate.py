"""Alg. 2 (online power method, fresh mode): error against rows per round n.

    .venv/bin/python -m benchmarks.tensor_online_rate      # ~1 min; writes docs/tensor_online_rate.png

Rows x = s_h v_h + g, h ~ (0.5, 0.3, 0.2), s = (1, 0.9, 0.8), orthonormal
v_h in d = 10, g ~ N(0, 0.3² I). The population moment E[x^⊗3] =
Σ w s³ v^⊗3 + 3·0.09·sym(E[x]⊗I) is computed exactly and decomposed by
Alg. 1; its top eigenpair (λ*, v*) is the target. Each round of Alg. 2 reads
n fresh rows (a numpy stream standing in for Spark passes: the algorithm code
is the same `online_tensor_power_method`). Error ‖v̂₁ − v*‖ and |λ̂₁ − λ*|,
median of 10 runs, should fall like 1/√n.
"""

from __future__ import annotations

import sys

import numpy as np

from spark_dp.tensor import online_tensor_power_method, robust_tensor_power_method

D, W, S, NOISE = 10, np.array([0.5, 0.3, 0.2]), np.array([1.0, 0.9, 0.8]), 0.3


def population(V):
    m = (W * S) @ V  # E[x]
    T = np.einsum("h,hi,hj,hk->ijk", W * S**3, V, V, V)
    I = np.eye(D)
    cross = np.einsum("i,jk->ijk", m, I) + np.einsum("j,ik->ijk", m, I) + np.einsum("k,ij->ijk", m, I)
    return T + NOISE**2 * cross


def main(out: str = "docs/tensor_online_rate.png", trials: int = 10) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    gen = np.random.default_rng(0)  # simulation data and starts, not privacy noise
    Q, _ = np.linalg.qr(gen.standard_normal((D, 3)))
    V = Q.T
    ref = robust_tensor_power_method(population(V), 1, L=20, R=50, rng=gen)
    v_star, lam_star = ref.eigenvectors[0], ref.eigenvalues[0]
    ns = [100, 300, 1000, 3000, 10_000, 30_000, 100_000]
    R, L = 10, 8
    rows = []
    for n in ns:
        ev, el = [], []
        for _ in range(trials):
            def moments(U, p, n=n):
                h = gen.choice(3, size=n, p=W)
                X = S[h][:, None] * V[h] + gen.normal(0.0, NOISE, size=(n, D))
                P = X @ U
                return X.T @ P**2, (P**3).sum(0), float(n)

            dec = online_tensor_power_method(moments, d=D, k=1, L=L, R=R, rng=gen)
            v = dec.eigenvectors[0]
            ev.append(min(np.linalg.norm(v - v_star), np.linalg.norm(v + v_star)))
            el.append(abs(dec.eigenvalues[0] - lam_star))
        rows.append((n, float(np.median(ev)), float(np.median(el))))
        print(f"| {n} | {R * n} | {rows[-1][1]:.4f} | {rows[-1][2]:.4f} |", flush=True)
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.loglog(ns, [r[1] for r in rows], "o-", label="‖v̂₁ − v*‖")
    ax.loglog(ns, [r[2] for r in rows], "s-", label="|λ̂₁ − λ*|")
    ax.loglog(ns, [rows[0][1] * np.sqrt(ns[0] / n) for n in ns], "k:", label="∝ 1/√n")
    ax.set_xlabel("rows per round n (fresh mode, R = 10 rounds)")
    ax.set_title("Alg. 2, d = 10, k = 3 mixture, median of 10")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    main(*sys.argv[1:2])
