"""`norm_bound: auto` against the best hand-chosen norm bound on every regression of benchmarks/bounds_baseball.py.

The worked example of docs/accuracy.md compares ``norm_bound: auto`` with a grid of hand-chosen bounds on its
own regression; issue #14 asks the same of other tables of that kind. This runs the comparison on the worked
example's regression and on the three of ``bounds_baseball.OTHER_TABLES`` (no public bounds: raw units, the
intercept column B/√d, rows clipped jointly, Analyze Gauss + ``shift``; ``auto`` spends ε·0.1 on the median of
the row norms, as ``linear_regression`` does by default, and ε·0.9 on the matrix). Releases are simulated in
numpy with the library's pieces, as in bounds_baseball.py; prints median prediction MSEs.

    PYTHONPATH=. python benchmarks/bounds_auto_tables.py [--runs 60] [--seed 7]
"""

from __future__ import annotations

import argparse
import math
import os
import sys

import numpy as np
import pandas as pd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bounds_baseball as bb  # noqa: E402

from spark_dp.privacy import SeededSampler  # noqa: E402
from spark_dp.privacy.quantile import NORM_GRID, plan_quantile, quantile_scores  # noqa: E402
from spark_dp.second_moment._scaling import Scaling  # noqa: E402
from spark_dp.second_moment.analyze_gauss import analyze_gauss_plan  # noqa: E402
from spark_dp.second_moment.regression import regression_coefficients  # noqa: E402

GRID = [25 * 2 ** (j / 2) for j in range(13)]  # 25 … 1600, the worked example's hand-chosen bounds


def raw_release(rows: np.ndarray, n_features: int, norm_bound: float, epsilon: float, rng) -> np.ndarray:
    """One release at norm bound B without bounds: coefficients and intercept in the data's units."""
    d = rows.shape[1] + 1
    c = norm_bound / math.sqrt(d)
    a = np.insert(rows, n_features, c, axis=1)
    a = a * np.minimum(1.0, norm_bound / np.linalg.norm(a, axis=1))[:, None]
    _, sigma, _ = analyze_gauss_plan(epsilon=epsilon, delta=bb.DELTA, norm_bound=norm_bound)
    noisy = a.T @ a + bb._symmetric(rng, d, sigma) + bb._shift(sigma, d) * np.eye(d)
    beta, _ = regression_coefficients(noisy)
    sc = Scaling.of([f"x{i}" for i in range(n_features)] + ["y"], None, constant_at=n_features, constant_value=c)
    return sc.coefficients(beta, d - 1)


def main(runs: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    df = pd.read_csv(bb.DATA)
    tables = {"r on ab, h, X2b, X3b, hr, bb (worked example)": (bb.FEATURES, bb.LABEL, None), **bb.OTHER_TABLES}
    plan = plan_quantile(bb.EPS * 0.1, 0.5)
    for name, (features, label, since) in tables.items():
        sub = df.dropna(subset=list(features) + [label])
        if since is not None:
            sub = sub[sub["year"] >= since]
        X, y = sub[features].to_numpy(float), sub[label].to_numpy(float)
        rows = sub[list(features) + [label]].to_numpy(float)
        p = len(features)
        hand = {b: float(np.median([bb.mse(raw_release(rows, p, b, bb.EPS, rng), X, y) for _ in range(runs)]))
                for b in GRID}
        best = min(hand, key=hand.get)
        counts = np.bincount(np.searchsorted(NORM_GRID, np.linalg.norm(rows, axis=1), side="left"),
                             minlength=NORM_GRID.size + 1)
        autos = []
        for _ in range(runs):
            q = NORM_GRID[SeededSampler(rng).noisy_min_index(quantile_scores(counts, 0.5), plan.scale,
                                                             plan.sensitivity)]
            b = q * math.sqrt((p + 2) / (p + 1))  # the quantile is of [x, y]; the constant column adds its share
            autos.append(bb.mse(raw_release(rows, p, b, bb.EPS * 0.9, rng), X, y))
        auto = float(np.median(autos))
        print(f"{name} ({len(y):,} rows): best hand-chosen B = {best:.0f}, MSE {hand[best]:.1f}; auto MSE {auto:.1f} "
              f"({auto / hand[best]:.2f}x)", flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=60)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    main(a.runs, a.seed)
