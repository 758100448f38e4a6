"""Sheffet Section 6 comparison: private regression error against n, per mechanism.

Reproduces the two experiments of Sheffet (arXiv 1507.00056), Section 6, as
far as our excerpt of the paper describes them (the introduction and
preliminaries; Section 6 itself is not in it):

1. ``independent``: "p independent features concatenated with a single
   linear combination of the features" — X ~ N(0, I_p), p = 10,
   y = Xβ + 0.1·noise, ‖β‖ = 3 ("the true β has ‖β‖ ≈ 3"). Paper: Analyze
   Gauss is the best once n is large.
2. ``several``: "the data contains multiple such regressions and therefore
   has small singular values" — our reading: q = 8 independent features Z
   concatenated with K = 3 linear combinations yₖ = Zβₖ + 0.1·noise
   (‖βₖ‖ = 3), and we regress y₃ on [Z, y₁, y₂]. Each yₖ adds one singular
   value of A of order 0.1·√n, and the true coefficient vector is
   β = [β₃, 0, 0] (y₁, y₂ carry no information about y₃ beyond Z), so
   ‖β̂ − β‖ is well defined. Paper: Sheffet's mechanisms beat Analyze Gauss
   unless n is very large.

Rows are scaled into the unit ball (B = 1, the scaling leaves β unchanged),
δ = 1e-6, n ∈ {10³ … 10⁶}, ε ∈ {0.1, 0.25, 0.5, 0.9} (the paper's Analyze
Gauss σ and Sheffet's Wishart theorem are for ε < 1), medians (and
quartiles) over ``--reps`` releases of ‖β̂ − β‖ and of the RMS prediction
error on the data; the data are fixed per (experiment, n), the mechanism's
randomness repeated.

Two variants of every mechanism:

* ours (``exact``): Analyze Gauss with the exact Gaussian σ and Sheffet's
  shift c = 2σ√d ≈ E‖N‖; JL with the exact χ² ridge (r = 400); Wishart
  (Sheffet's k); inverse-Wishart with a public m = 400 under add/remove;
  AdaSSP.
* the paper's (``paper``): ``analyze_gauss_paper`` — σ = B²·√(2 ln(2/δ))/ε
  as Sheffet states it, same shift; ``jl_ridge_paper`` — the published
  w² = (8B²/ε)(√(2r ln(8/δ)) + 2 ln(8/δ)), r = 400; Wishart is the paper's
  bound in both variants; ``inverse_wishart_posterior`` — Sheffet's
  posterior W⁻¹(AᵀA + w²I, n + m₀) with m₀ = d + 2 and n public under his
  replace-one neighbours; its w is our exact χ² profile at m = n + m₀ (group
  privacy of size 2), because the paper's own constant is not in our text.

Each mechanism runs through its real driver-side function in
``spark_dp.second_moment`` on the exact AᵀA (numpy; the Spark kernels are
tested equal to numpy elsewhere). The JL release is drawn as
G·chol(AᵀA)ᵀ + wR_I, which has exactly the distribution of R·[A; wI].

Usage: ``python benchmarks/second_moment_experiments.py [--reps 20] [--out docs] [--quick]``.
The full run takes about 3 minutes of CPU on one core; ``--quick``
(n ≤ 10⁴, one ε, 3 repetitions) a few seconds. Writes
``docs/second_moment_results.json``, ``docs/second_moment_<experiment>.png``
and prints the markdown tables of ``docs/second_moment.md``.
"""

from __future__ import annotations

import argparse
import json
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
from spark_dp.second_moment.inverse_wishart import posterior_dof

DELTA, B, P = 1e-6, 1.0, 10
Q, K_REG = 8, 3  # several regressions: 8 independent features, 3 linear combinations of them
R_JL = M_IW = 400
NS = (1_000, 10_000, 100_000, 1_000_000)
EPSILONS = (0.1, 0.25, 0.5, 0.9)
KINDS = ("independent", "several")
EXACT = ("analyze_gauss", "jl_ridge", "wishart", "inverse_wishart", "adassp")
PAPER = ("analyze_gauss_paper", "jl_ridge_paper", "inverse_wishart_posterior")
MECHANISMS = ("ols",) + EXACT + PAPER


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


def _beta(rng: np.random.Generator, p: int) -> np.ndarray:
    beta = rng.normal(size=p)
    return beta * 3.0 / np.linalg.norm(beta)  # ‖β‖ = 3 as in Sheffet's experiments


def make_data(kind: str, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A = [X y] scaled into the unit ball, and the true β of y on X (unchanged by the scaling)."""
    if kind == "independent":
        X = rng.normal(size=(n, P))
        beta = _beta(rng, P)
        y = X @ beta + 0.1 * rng.normal(size=n)
    elif kind == "several":
        Z = rng.normal(size=(n, Q))
        betas = [_beta(rng, Q) for _ in range(K_REG)]
        ys = [Z @ b + 0.1 * rng.normal(size=n) for b in betas]
        X = np.column_stack([Z] + ys[:-1])
        y = ys[-1]
        beta = np.concatenate([betas[-1], np.zeros(K_REG - 1)])
    else:
        raise ValueError(kind)
    A = np.column_stack([X, y])
    scale = np.max(np.linalg.norm(A, axis=1)) / B
    return A / scale, beta


def release(mech: str, gram: np.ndarray, eps: float, cp: _Chokepoint, n: int) -> np.ndarray:
    d = gram.shape[0]
    if mech == "ols":
        return regression_coefficients(gram)[0]
    if mech in ("analyze_gauss", "analyze_gauss_paper"):
        _, sigma, sens = analyze_gauss_plan(epsilon=eps, delta=DELTA, norm_bound=B,
                                            calibration="paper" if mech.endswith("_paper") else "exact")
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
    elif mech == "inverse_wishart_posterior":  # Sheffet's m = n + m0, n public (replace-one neighbours)
        dof = posterior_dof(n, d + 2)
        ev, w, _ = inverse_wishart_plan(epsilon=eps, delta=DELTA, norm_bound=B, dof=dof, neighbors="replace")
        m = inverse_wishart(gram, chokepoint=cp, event=ev, dof=dof, w=w)
    elif mech == "adassp":
        return adassp(gram, chokepoint=cp, plan=adassp_plan(epsilon=eps, delta=DELTA, norm_bound=B))["coefficients"]
    else:
        raise ValueError(mech)
    return regression_coefficients(m)[0]


def run(reps: int, *, ns=NS, epsilons=EPSILONS, kinds=KINDS, mechanisms=MECHANISMS, seed: int = 2026) -> dict:
    rng = np.random.default_rng(seed)
    cp = _Chokepoint(SeededSampler(np.random.default_rng(seed + 1)))
    results = {}
    for kind in kinds:
        for n in ns:
            A, beta = make_data(kind, n, rng)
            gram = A.T @ A
            p = A.shape[1] - 1
            X, y = A[:, :p], A[:, p]
            for eps in epsilons:
                for mech in mechanisms:
                    errs, preds = [], []
                    for _ in range(reps if mech != "ols" else 1):
                        b = release(mech, gram, eps, cp, n)
                        errs.append(float(np.linalg.norm(b - beta)))  # scaling X and y alike leaves β unchanged
                        preds.append(float(np.sqrt(np.mean((X @ b - y) ** 2))))
                    results[f"{kind}|{n}|{eps}|{mech}"] = {
                        "beta_error_median": float(np.median(errs)), "prediction_rmse_median": float(np.median(preds)),
                        "beta_error_q25": float(np.quantile(errs, 0.25)), "beta_error_q75": float(np.quantile(errs, 0.75)),
                        "prediction_rmse_q25": float(np.quantile(preds, 0.25)),
                        "prediction_rmse_q75": float(np.quantile(preds, 0.75)),
                        "reps": len(errs),
                    }
            print(f"{kind} n={n} done", flush=True)
    return results


def plot(results: dict, out: str, *, ns=NS, epsilons=EPSILONS, kinds=KINDS, mechanisms=MECHANISMS) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"analyze_gauss": "C0", "jl_ridge": "C1", "wishart": "C2", "inverse_wishart": "C3", "adassp": "C4"}
    for kind in kinds:
        fig, axes = plt.subplots(2, len(epsilons), figsize=(4.2 * len(epsilons), 7), sharex=True, squeeze=False)
        for j, eps in enumerate(epsilons):
            for mech in mechanisms:
                be = [results[f"{kind}|{n}|{eps}|{mech}"]["beta_error_median"] for n in ns]
                pe = [results[f"{kind}|{n}|{eps}|{mech}"]["prediction_rmse_median"] for n in ns]
                base = mech.replace("_paper", "").replace("_posterior", "")
                style = dict(color="k", ls=":") if mech == "ols" else dict(
                    color=colors[base], ls="--" if mech in PAPER else "-", marker="s" if mech in PAPER else "o")
                axes[0, j].loglog(ns, be, label=mech, ms=3, **style)
                axes[1, j].loglog(ns, pe, label=mech, ms=3, **style)
            axes[0, j].set_title(f"{kind}: epsilon = {eps}")
            axes[1, j].set_xlabel("n")
        axes[0, 0].set_ylabel("median ||beta_hat - beta||")
        axes[1, 0].set_ylabel("median RMS prediction error")
        axes[0, 0].legend(fontsize=6)
        fig.suptitle("solid: ours (exact calibration); dashed: the paper's calibration / posterior", fontsize=9)
        fig.tight_layout()
        fig.savefig(os.path.join(out, f"second_moment_{kind}.png"), dpi=90)
        plt.close(fig)


def tables(results: dict, *, ns=NS, epsilons=EPSILONS, kinds=KINDS, mechanisms=MECHANISMS,
           metric: str = "beta_error_median") -> str:
    """Markdown tables (one per experiment and ε); the best private mechanism per row in bold."""
    out = []
    for kind in kinds:
        for eps in epsilons:
            out.append(f"**{kind}, epsilon = {eps}** — {metric.replace('_', ' ')} over the releases\n")
            out.append("| n | " + " | ".join(mechanisms) + " |")
            out.append("|---" * (len(mechanisms) + 1) + "|")
            for n in ns:
                vals = {m: results[f"{kind}|{n}|{eps}|{m}"][metric] for m in mechanisms}
                best = min((m for m in mechanisms if m != "ols"), key=vals.get)
                cells = [f"**{vals[m]:.3g}**" if m == best else f"{vals[m]:.3g}" for m in mechanisms]
                out.append(f"| {n:,} | " + " | ".join(cells) + " |")
            out.append("")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--out", default="docs")
    ap.add_argument("--quick", action="store_true", help="n <= 1e4, one epsilon, 3 repetitions (for tests)")
    args = ap.parse_args()
    grid = dict(ns=(1_000, 10_000), epsilons=(0.5,)) if args.quick else {}
    reps = 3 if args.quick else args.reps
    t, c = time.time(), time.process_time()
    results = run(reps, **grid)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "second_moment_results.json"), "w") as fh:
        json.dump(results, fh, indent=1, sort_keys=True)
    plot(results, args.out, **grid)
    print(tables(results, **grid))
    print(tables(results, metric="prediction_rmse_median", **grid))
    print(f"done in {time.time() - t:.0f} s wall, {time.process_time() - c:.0f} s CPU")


if __name__ == "__main__":
    main()
