"""Measured coverage of the released error bars: statistic × n × ε × empirical coverage (issue #14 §2).

Each row releases one statistic ``reps`` times from the same exact summary
(known truth) through the mechanism's own noise step with seeded numpy noise
(tests/_coverage.py; no Spark) and reports the fraction of nominal 95 %
intervals (or bounds) that hold the truth. Writes the table between the
``<!-- coverage:begin -->`` / ``<!-- coverage:end -->`` markers of
docs/accuracy.md (``--write``) or prints it.

    PYTHONPATH=$PWD python benchmarks/coverage.py [--reps 1000] [--write]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks._markers import write_between  # noqa: E402
from tests._coverage import (  # noqa: E402
    adassp_coverage,
    input_perturbation_coverage,
    regression_coverage,
    second_moment_coverage,
    sketch_coverage,
    tensor_coverage,
    whitened_coverage,
)

DOC = os.path.join(ROOT, "docs", "accuracy.md")
#: (mechanism, parameters, fit_intercept, bounds, label) of the regression rows
REGRESSION_ROWS = (
    ("analyze_gauss", {}, True, True, "Analyze Gauss"),
    ("analyze_gauss", {"postprocess": "shift"}, True, True, "Analyze Gauss, shift"),
    ("analyze_gauss", {"postprocess": "psd"}, True, True, "Analyze Gauss, psd"),
    ("wishart", {}, True, True, "Wishart"),
    ("wishart", {"postprocess": "psd"}, True, True, "Wishart, psd"),
    ("jl_ridge", {}, True, True, "JL"),
    ("jl_ridge", {"postprocess": "psd"}, True, True, "JL, psd"),
    ("inverse_wishart", {}, True, True, "inverse-Wishart"),
    ("analyze_gauss", {}, False, True, "Analyze Gauss, through the origin"),
    ("wishart", {}, False, True, "Wishart, through the origin"),
    ("analyze_gauss", {}, False, False, "Analyze Gauss, through the origin, raw rows"),
    ("jl_ridge", {}, False, False, "JL, through the origin, raw rows"),
)
BEGIN, END = "<!-- coverage:begin -->", "<!-- coverage:end -->"


def rows(reps: int):
    d = 5
    for n in (1_000, 100_000):
        for eps in (0.5, 1.0, 4.0):
            for mech, kw, label in (("analyze_gauss", {}, "Analyze Gauss"),
                                    ("analyze_gauss", {"postprocess": "psd"}, "Analyze Gauss, psd"),
                                    ("wishart", {}, "Wishart"),
                                    ("jl_ridge", {}, "JL"),
                                    ("inverse_wishart", {}, "inverse-Wishart")):
                if mech == "wishart" and eps > 1:  # Sheffet's Thm 4.1 is for ε ≤ 1 (refused above)
                    continue
                r = reps if mech != "inverse_wishart" else max(reps // 4, 50)
                c = second_moment_coverage(mech, d=d, n=n, epsilon=eps, reps=r, seed=_seed(n, eps), **kw)
                yield (f"second moment entries ({label}, d={d})", c["matrix_kind"], n, eps, r, c["matrix"])
                yield (f"PCA eigenvalues ({label}, k=2)", "bound", n, eps, r, c["eigenvalues"])
                if "subspace" in c:
                    yield (f"PCA top-2 subspace angle ({label})", "bound", n, eps, r, c["subspace"])
    # Public bounds: the release mapped back to the data's units (T·M·Tᵀ), d = 3 columns plus the constant.
    for mech, kw, label in (("analyze_gauss", {}, "Analyze Gauss"), ("wishart", {}, "Wishart"),
                            ("jl_ridge", {}, "JL"), ("inverse_wishart", {}, "inverse-Wishart"),
                            ("jl_ridge", {"postprocess": "psd"}, "JL, psd")):
        r = reps if mech != "inverse_wishart" else max(reps // 4, 50)
        c = second_moment_coverage(mech, d=3, n=1_000, epsilon=1.0, reps=r, seed=1, bounded=True, **kw)
        yield (f"second moment entries, data units ({label}, bounds, d=3)", c["matrix_kind"], 1_000, 1.0, r,
               c["matrix"])
        yield (f"PCA eigenvectors, data units ({label}, bounds, k=2)", "bound", 1_000, 1.0, r, c["eigenvectors"])
    # JL / inverse-Wishart eigenvectors: Davis–Kahan with λ_max(Σ)·‖M − I‖ (informative at a large r or m)
    for mech, kw, label in (("jl_ridge", {"projection_rows": 20_000}, "JL, r=20000"),
                            ("inverse_wishart", {"dof": 20_000}, "inverse-Wishart, m=20000")):
        r = max(reps // 4, 50)
        c = second_moment_coverage(mech, d=3, n=500, epsilon=1.0, reps=r, seed=7, **kw)
        yield (f"PCA eigenvectors ({label}, k=2)", "bound", 500, 1.0, r, c["eigenvectors"])
        yield (f"PCA top-2 subspace angle ({label})", "bound", 500, 1.0, r, c["subspace"])
    # AdaSSP: noise only (it releases no y^T y); λ > 0 at n = 2,000 here, 0 at 20,000
    for n in (2_000, 20_000):
        c = adassp_coverage(p=3, n=n, epsilon=1.0, reps=reps, seed=4)
        for name in ("coefficients", "intercept", "xtx", "xty"):
            # λ > 0: the bias-bounded interval (kind bound) or refused (kind none, not counted)
            kind = "interval" if name in ("xtx", "xty") or n == 20_000 else "bound"
            cov = c.get(name, float("nan"))
            if c.get(f"{name}_refused"):
                cov = f"{cov:.3f} ({c[f'{name}_refused']:.0%} refused)"
            yield (f"AdaSSP {name} (bounds, p=3)", kind, n, 1.0, reps, cov)
    # Regression coefficients (p = 2; public bounds unless "raw rows"): the parametric bootstrap through the
    # mechanism's own noise law (1,000 draws per release; the release uses 2,000). With a constant column the
    # truth is the model's (β, intercept), new errors in every release (noise+sampling); raw rows through the
    # origin have none: noise only, the truth is the non-private fit on the same rows.
    for n in (2_000, 20_000):
        for eps in (0.5, 1.0):
            for mech, kw, intercept, bounded, label in REGRESSION_ROWS:
                r = reps if mech != "inverse_wishart" else max(reps // 4, 50)
                c = regression_coverage(mech, n=n, epsilon=eps, reps=r, seed=_seed(n, eps), draws=1000,
                                        fit_intercept=intercept, bounded=bounded, **kw)
                yield (f"regression coefficients ({label}, p=2, {c['covers']})", "interval", n, eps, r,
                       c["coefficients"])
                if "intercept" in c:
                    yield (f"regression intercept ({label}, {c['covers']})", "interval", n, eps, r, c["intercept"])
    # The noise of sketches and Alg. 3 is data-independent and scales with ε, so their normalised errors (and
    # coverage) do not depend on ε: one ε, more releases.
    for eps in (1.0,):
        for mech, kw, label in (("private_count_sketch", {"k": 5}, "Private CountSketch, median, k=5"),
                                ("private_count_sketch", {"k": 6}, "Private CountSketch, median, k=6"),
                                ("count_min", {"k": 5}, "Count-Min, min, k=5"),
                                ("count_mean", {"k": 5}, "Count-Mean, debiased mean, k=5")):
            c = sketch_coverage(mech, epsilon=eps, reps=2 * reps, seed=1, **kw)
            yield (f"sketch estimate noise ({label})", "interval", "-", eps, 2 * reps, c["estimates"])
            yield (f"heavy-hitter false-positive rate at 0.5 noise scales ({label}): measured vs stated",
                   "rate", "-", eps, 2 * reps,
                   f"{c['false_positive_rate']:.4f} vs {c['false_positive_rate_stated']:.4f}")
    for eps in (1.0,):
        for L in (1, 3):
            c = tensor_coverage(epsilon=eps, restarts=L, reps=reps, seed=1)
            yield (f"tensor eigenvalues (Alg. 3, explicit d=4, k=2, L={L})", c["kind"], "-", eps, reps,
                   c["eigenvalues"])
        c = input_perturbation_coverage(epsilon=eps, reps=max(reps // 4, 50), seed=1)
        yield ("tensor eigenvalues (input perturbation, d=4, k=2, ‖E‖op bound)", c["kind"], "-", eps,
               max(reps // 4, 50), c["eigenvalues"])
        c = whitened_coverage(epsilon=eps, reps=reps, seed=1)
        yield ("tensor eigenvalues (whitened rows, reuse, d=4, k=2, L=1)", c["kind"], 4_000, eps, reps,
               c["eigenvalues"])


def _seed(n: int, eps: float) -> int:
    return int(n) % 9973 + int(eps * 1000)


def table(reps: int) -> str:
    out = ["| statistic | kind | n | ε | releases | empirical coverage |", "|---|---|---|---|---|---|"]
    for stat, kind, n, eps, r, cov in rows(reps):
        cov = f"{cov:.3f}" if isinstance(cov, float) else cov
        out.append(f"| {stat} | {kind} | {n if n == '-' else f'{n:,}'} | {eps:g} | {r} | {cov} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=1000)
    ap.add_argument("--write", action="store_true", help="write the table into docs/accuracy.md")
    args = ap.parse_args()
    t0 = time.time()
    text = table(args.reps)
    text += (f"\n\n(Nominal level 0.95; releases per row as stated; 20 items per sketch release, "
             f"2 components per tensor release; {time.time() - t0:.0f} s.)")
    if not args.write:
        print(text)
        return
    write_between(DOC, BEGIN, END, text)
    print(f"wrote the coverage table into {DOC}")


if __name__ == "__main__":
    main()
