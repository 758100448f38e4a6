"""Noise tolerance of the robust tensor power method (Alg. 1) as d grows, three noise models.

    .venv/bin/python -m benchmarks.tensor_noise_tolerance     # a few minutes; writes docs/tensor_noise_tolerance.png

After the three cases Wang & Anandkumar discuss under Thm 2.2 (their
Appendix A simulation is not in our copy of the paper, so the noise models
below are our constructions of those cases). T = Σᵢ vᵢ^⊗3 (k = 3, λ = 1,
orthonormal random vᵢ), T̃ = T + ΔT with ‖ΔT‖op = η:

* ``arbitrary``: ΔT = η·sym(w⊗I⊗I)/3 for a unit w ⊥ span(V) — ΔT(I,u,u) ≈
  (η/3)w pulls every iterate towards w by η/3 while the signal towards vᵢ at
  a random start is ~1/d: predicted threshold η* = O(λ_min/d).
* ``round``: a symmetric Gaussian tensor scaled to ‖ΔT‖op = η:
  |ΔT(vᵢ,u,u)| ≈ ‖ΔT(I,u,u)‖/√d, predicted η* = O(λ_min/√d).
* ``weak``: the same Gaussian tensor projected on span(V)⊥ in all three
  modes (ΔT(vᵢ,I,I) = 0), predicted η* = O(λ_min/√k), flat in d.

Success: every vᵢ recovered, ‖vᵢ − v̂_π(i)‖ < 0.2 for a matching π. η* is the
largest η of the grid with success rate ≥ 1/2 (10 trials, L = 10, R = 30).
‖ΔT‖op is estimated by Alg. 1 on ΔT itself (k = 1, 20 restarts).
"""

from __future__ import annotations

import itertools
import sys

import numpy as np

from spark_dp.tensor import robust_tensor_power_method

K = 3
ETAS = np.geomspace(0.005, 2.0, 16)


def _sym(E):
    return sum(E.transpose(p) for p in itertools.permutations(range(3))) / 6.0


def _op_norm(E, gen):
    dec = robust_tensor_power_method(E, 1, L=20, R=30, rng=gen)
    return abs(float(dec.eigenvalues[0]))


def noise(model, d, V, gen):
    """A unit-operator-norm noise tensor of the given model."""
    if model == "arbitrary":
        w = gen.standard_normal(d)
        w -= V.T @ (V @ w)
        w /= np.linalg.norm(w)
        I = np.eye(d)
        return (np.einsum("i,jk->ijk", w, I) + np.einsum("j,ik->ijk", w, I) + np.einsum("k,ij->ijk", w, I)) / 3.0
    E = _sym(gen.standard_normal((d, d, d)))
    if model == "weak":
        P = np.eye(d) - V.T @ V
        E = np.einsum("ia,jb,kc,abc->ijk", P, P, P, E, optimize=True)
    return E / _op_norm(E, gen)


def success(d, model, eta, gen):
    Q, _ = np.linalg.qr(gen.standard_normal((d, K)))
    V = Q.T
    T = np.einsum("ri,rj,rk->ijk", V, V, V) + eta * noise(model, d, V, gen)
    dec = robust_tensor_power_method(T, K, L=10, R=30, rng=gen)
    sims = np.abs(V @ dec.eigenvectors.T)
    idx = np.argmax(sims, axis=1)
    err = np.linalg.norm(V - np.sign(np.sum(V * dec.eigenvectors[idx], axis=1))[:, None] * dec.eigenvectors[idx], axis=1)
    return len(set(idx)) == K and err.max() < 0.2


def main(out: str = "docs/tensor_noise_tolerance.png", trials: int = 10) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    gen = np.random.default_rng(0)  # simulation data, not privacy noise
    dims = [8, 16, 32, 64]
    models = ["arbitrary", "round", "weak"]
    thresholds = {m: [] for m in models}
    fig, axes = plt.subplots(1, 4, figsize=(18, 4))
    for ax, model in zip(axes, models):
        for d in dims:
            rate = [np.mean([success(d, model, eta, gen) for _ in range(trials)]) for eta in ETAS]
            ok = [eta for eta, r in zip(ETAS, rate) if r >= 0.5]
            thresholds[model].append(max(ok) if ok else np.nan)
            ax.semilogx(ETAS, rate, "o-", label=f"d = {d}")
            print(f"{model} d={d}: " + " ".join(f"{r:.1f}" for r in rate), flush=True)
        ax.set_title(f"{model} noise")
        ax.set_xlabel("‖ΔT‖op (λ_min = 1)")
        ax.set_ylabel("success rate")
        ax.legend()
        ax.grid(alpha=0.3)
    ax = axes[3]
    for m, style in zip(models, ("o-", "s-", "^-")):
        ax.loglog(dims, thresholds[m], style, label=f"{m}: η*")
    ax.loglog(dims, [thresholds["arbitrary"][0] * dims[0] / d for d in dims], "k:", label="∝ 1/d")
    ax.loglog(dims, [thresholds["round"][0] * np.sqrt(dims[0] / d) for d in dims], "k--", label="∝ 1/√d")
    ax.set_xlabel("d")
    ax.set_title("largest η with success ≥ 1/2")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print("| d | " + " | ".join(f"η* {m}" for m in models) + " |")
    print("|---|" + "---|" * len(models))
    for i, d in enumerate(dims):
        print(f"| {d} | " + " | ".join(f"{thresholds[m][i]:.3g}" for m in models) + " |")
    print(f"wrote {out}")


if __name__ == "__main__":
    main(*sys.argv[1:2])
