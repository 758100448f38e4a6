"""Sheffet Section 6 comparison: private regression error against n, per mechanism.

Reproduces the two experiments of Sheffet (arXiv 1507.00056), Section 6:

1. ``independent``: p independent features, y a linear combination of them
   plus small noise — Analyze Gauss should win once n is large.
2. ``several``: the data hold several regressions (features that are
   near-linear combinations of others, so AᵀA has small singular values) —
   Sheffet's mechanisms should beat Analyze Gauss unless n is very large.

For n ∈ {10³ … 10⁶}, ε ∈ {0.25, 0.5, 1} (δ = 1e-6, B = 1, rows scaled into
the unit ball) it reports medians over ``--reps`` releases of ‖β̂ − β‖ and
the RMS prediction error on the data, for Analyze Gauss (Sheffet's shift
post-processing), JL with ridge (our exact calibration and the published
constant), additive Wishart, inverse-Wishart and AdaSSP, plus non-private
OLS. Each mechanism runs through its real driver-side function in
``spark_dp.second_moment`` on the exact AᵀA (computed in numpy: the Spark
kernels are tested equal to numpy elsewhere). One substitution: the JL
release is drawn as R̃ = G·chol(AᵀA + w²I)ᵀ, which has exactly the
distribution of R·[A; wI] (every row ~ N(0, AᵀA + w²I)) without generating
r·n normals per repetition at n = 10⁶.

Usage: ``python benchmarks/second_moment_experiments.py [--reps 20] [--out docs]``
(a few minutes on one core). Writes ``docs/second_moment_results.json`` and
``docs/second_moment_<experiment>.png``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time

import numpy as np

from spark_dp.privacy import SeededSampler
from spark_dp.second_moment import (
    adassp,
    adassp_plan,
    additive_wishart,
    analyze_gauss,
    analyze_gauss_plan,
    inverse_wishart,
    inverse_wishart_plan,
    jl_ridge,
    jl_ridge_plan,
    regression_coefficients,
    wishart_plan,
)

DELTA, B, P = 1e-6, 1.0, 10
R_JL = M_IW = 400
NS = (1_000, 10_000, 100_000, 1_000_000)
EPSILONS = (0.25, 0.5, 1.0)
MECHANISMS = ("ols", "analyze_gauss", "jl_ridge", "jl_ridge_paper", "wishart", "inverse_wishart", "adassp")


class _Chokepoint:
    """Benchmark stand-in for a charged chokepoint (no ledger): same draws, no accounting."""

    def __init__(self, sampler):
        self.sampler = sampler

    def randomness(self, event):
        return self.sampler

    def gaussian(self, values, *, sigma, l2_sensitivity):
        return self.sampler.gaussian(np.asarray(values, float).reshape(-1), sigma, l2_sensitivity).reshape(np.shape(values))

    def gaussian_symmetric(self, matrix, *, sigma, l2_sensitivity):
        iu = np.triu_indices(matrix.shape[0])
        out = np.zeros_like(matrix)
        out[iu] = self.gaussian(matrix[iu], sigma=sigma, l2_sensitivity=l2_sensitivity)
        return out + np.triu(out, 1).T


def make_data(kind: str, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A = [X y] scaled into the unit ball, and the β that generated y (unchanged by the scaling)."""
    beta = rng.normal(size=P)
    beta *= 3.0 / np.linalg.norm(beta)  # ‖β‖ ≈ 3 as in Sheffet's experiments
    if kind == "independent":
        X = rng.normal(size=(n, P))
    else:  # several regressions: half the features are near-linear combinations of the others
        base = rng.normal(size=(n, P // 2))
        mix = rng.normal(size=(P // 2, P - P // 2))
        X = np.column_stack([base, base @ mix / math.sqrt(P // 2) + 0.01 * rng.normal(size=(n, P - P // 2))])
    y = X @ beta + 0.1 * rng.normal(size=n)
    A = np.column_stack([X, y])
    scale = np.max(np.linalg.norm(A, axis=1)) / B
    return A / scale, beta


def release(mech: str, gram: np.ndarray, eps: float, cp: _Chokepoint) -> np.ndarray:
    d = gram.shape[0]
    if mech == "ols":
        return regression_coefficients(gram)[0]
    if mech == "analyze_gauss":
        _, sigma, sens = analyze_gauss_plan(epsilon=eps, delta=DELTA, norm_bound=B)
        m = analyze_gauss(gram, chokepoint=cp, sigma=sigma, sensitivity=sens, postprocess="shift")
    elif mech in ("jl_ridge", "jl_ridge_paper"):
        ev, w = jl_ridge_plan(epsilon=eps, delta=DELTA, norm_bound=B, r=R_JL,
                              calibration="paper" if mech == "jl_ridge_paper" else "exact")
        chol = np.linalg.cholesky(gram)  if np.all(np.linalg.eigvalsh(gram) > 1e-12) else None
        if chol is None:  # A may be rank-deficient: use an eigen square root of AᵀA
            vals, vecs = np.linalg.eigh(gram)
            chol = vecs * np.sqrt(np.clip(vals, 0, None))
        g = cp.sampler.standard_normal(R_JL * d).reshape(R_JL, d)
        m = jl_ridge(lambda key: g @ chol.T, chokepoint=cp, event=ev, r=R_JL, d=d, w=w)
    elif mech == "wishart":
        ev, k = wishart_plan(d=d, epsilon=eps, delta=DELTA)
        m = additive_wishart(gram, chokepoint=cp, event=ev, k=k, norm_bound=B)
    elif mech == "inverse_wishart":
        ev, w, _ = inverse_wishart_plan(epsilon=eps, delta=DELTA, norm_bound=B, dof=M_IW)
        m = inverse_wishart(gram, chokepoint=cp, event=ev, dof=M_IW, w=w)
    elif mech == "adassp":
        return adassp(gram, chokepoint=cp, plan=adassp_plan(epsilon=eps, delta=DELTA, norm_bound=B))["coefficients"]
    else:
        raise ValueError(mech)
    return regression_coefficients(m)[0]


def run(reps: int, seed: int = 2026) -> dict:
    rng = np.random.default_rng(seed)
    cp = _Chokepoint(SeededSampler(np.random.default_rng(seed + 1)))
    results = {}
    for kind in ("independent", "several"):
        for n in NS:
            A, beta = make_data(kind, n, rng)
            gram = A.T @ A
            X, y = A[:, :P], A[:, P]
            for eps in EPSILONS:
                for mech in MECHANISMS:
                    errs, preds = [], []
                    for _ in range(reps if mech != "ols" else 1):
                        b = release(mech, gram, eps, cp)
                        errs.append(float(np.linalg.norm(b - beta)))  # scaling X and y alike leaves β unchanged
                        preds.append(float(np.sqrt(np.mean((X @ b - y) ** 2))))
                    results[f"{kind}|{n}|{eps}|{mech}"] = {
                        "beta_error_median": float(np.median(errs)), "prediction_rmse_median": float(np.median(preds)),
                        "beta_error_q25": float(np.quantile(errs, 0.25)), "beta_error_q75": float(np.quantile(errs, 0.75)),
                        "reps": len(errs),
                    }
            print(f"{kind} n={n} done", flush=True)
    return results


def plot(results: dict, out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for kind in ("independent", "several"):
        fig, axes = plt.subplots(2, len(EPSILONS), figsize=(4.2 * len(EPSILONS), 7), sharex=True)
        for j, eps in enumerate(EPSILONS):
            for mech in MECHANISMS:
                be = [results[f"{kind}|{n}|{eps}|{mech}"]["beta_error_median"] for n in NS]
                pe = [results[f"{kind}|{n}|{eps}|{mech}"]["prediction_rmse_median"] for n in NS]
                style = "k--" if mech == "ols" else "-o"
                axes[0, j].loglog(NS, be, style, label=mech, ms=3)
                axes[1, j].loglog(NS, pe, style, label=mech, ms=3)
            axes[0, j].set_title(f"{kind}: epsilon = {eps}")
            axes[1, j].set_xlabel("n")
        axes[0, 0].set_ylabel("median ||beta_hat - beta||")
        axes[1, 0].set_ylabel("median RMS prediction error")
        axes[0, 0].legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(os.path.join(out, f"second_moment_{kind}.png"), dpi=90)
        plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--out", default="docs")
    args = ap.parse_args()
    t = time.time()
    results = run(args.reps)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "second_moment_results.json"), "w") as fh:
        json.dump(results, fh, indent=1, sort_keys=True)
    plot(results, args.out)
    print(f"done in {time.time() - t:.0f} s")


if __name__ == "__main__":
    main()
