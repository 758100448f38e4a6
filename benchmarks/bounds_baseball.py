"""Worked example of issue #14: runs on batting statistics with public bounds, ε = 1, δ = 1e-6.

Regresses runs ``r`` on ``ab, h, X2b, X3b, hr, bb`` of ../shared/data/baseball_batting.csv (21,699
player-seasons) with an intercept, at row level and at player level (``id`` the unit, m = 20 rows per
player), and compares with non-private OLS with an intercept on the same rows:

* prediction MSE (runs²) over all rows, median and mean over the runs;
* how often each 95 % interval holds the non-private OLS coefficient;
* ``norm_bound: auto`` (no bounds, raw units) against the best hand-chosen norm bound of a grid.

Every release uses ``postprocess: shift`` (Analyze Gauss + 2σ√d·I, Sheffet's choice), which acts as a
ridge on the scaled fit: without it a few runs in a hundred blow up (the smallest eigenvalue of the scaled
XᵀX, ≈ 59, is below the noise's norm ≈ 2σ√d ≈ 190).

The release is simulated in numpy with the library's own pieces (the scaling and its map back, the
Analyze Gauss σ of the plan, the solver, the bootstrap intervals, the quantile scores and the sampler's
noisy min) so that many runs are cheap; ``tests/test_baseball_example.py`` runs the real config through
Spark. Writes docs/accuracy_baseball.json; docs/accuracy.md quotes it.

    PYTHONPATH=. python benchmarks/bounds_baseball.py [--runs 100]
"""

from __future__ import annotations

import argparse
import json
import math
import os

import numpy as np
import pandas as pd

from spark_dp.privacy import SeededSampler
from spark_dp.privacy.quantile import NORM_GRID, plan_quantile, quantile_scores
from spark_dp.second_moment._scaling import Scaling
from spark_dp.second_moment.analyze_gauss import analyze_gauss_plan
from spark_dp.second_moment.intervals import regression_bootstrap
from spark_dp.second_moment.regression import regression_coefficients

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "..", "shared", "data", "baseball_batting.csv")
FEATURES = ["ab", "h", "X2b", "X3b", "hr", "bb"]
LABEL = "r"
# Public bounds from the game's single-season records (MLB, through 2007), rounded up; not from the data:
# at-bats 716 (J. Rollins 2007), runs 192 (B. Hamilton 1894), hits 262 (I. Suzuki 2004), doubles 67
# (E. Webb 1931), triples 36 (C. Wilson 1912), home runs 73 (B. Bonds 2001), walks 232 (B. Bonds 2004).
BOUNDS = {"ab": (0, 750), "h": (0, 270), "X2b": (0, 70), "X3b": (0, 40), "hr": (0, 75), "bb": (0, 240),
          "r": (0, 200)}
EPS, DELTA, UNIT_ROWS = 1.0, 1e-6, 20


def _symmetric(rng, d, sigma):
    n = np.triu(rng.normal(0.0, sigma, (d, d)))
    return n + np.triu(n, 1).T


def _rows_per_unit(df, m, rng):
    """At most m rows per player, chosen at random (as the library's keyed-hash selection)."""
    key = pd.Series(rng.random(len(df)), index=df.index)
    rank = key.groupby(df["id"]).rank(method="first")
    return df[rank <= m]


def _shift(sigma: float, d: int) -> float:
    """``postprocess: shift``: Analyze Gauss adds c·I, c = 2σ√d (Sheffet's choice; a ridge on the scaled fit)."""
    return 2.0 * sigma * math.sqrt(d)


def bounded_release(rows: np.ndarray, m: int, rng, *, draws=1000):
    """One release with bounds: (coefficients+intercept in data units, low, high)."""
    sc = Scaling.of(FEATURES + [LABEL], BOUNDS, constant_at=len(FEATURES))
    x = np.insert(rows, len(FEATURES), 1.0, axis=1)
    a = np.linalg.solve(sc.transform(), x.T).T
    _, sigma, _ = analyze_gauss_plan(epsilon=EPS, delta=DELTA, norm_bound=math.sqrt(sc.size), max_rows_per_unit=m)
    shift = _shift(sigma, sc.size)
    noisy = a.T @ a + _symmetric(rng, sc.size, sigma) + shift * np.eye(sc.size)
    beta, _ = regression_coefficients(noisy)
    iv = regression_bootstrap(noisy, beta, sigma=sigma, scaling=sc, label_at=sc.size - 1, shift=shift, draws=draws,
                              rng=rng)
    return iv.estimate, iv.low, iv.high


def raw_release(rows: np.ndarray, norm_bound: float, rng, epsilon=EPS):
    """One release without bounds at norm bound B (constant B/√d, rows clipped): coefficients+intercept."""
    d = rows.shape[1] + 1
    c = norm_bound / math.sqrt(d)
    a = np.insert(rows, len(FEATURES), c, axis=1)
    norms = np.linalg.norm(a, axis=1)
    a = a * np.minimum(1.0, norm_bound / norms)[:, None]
    _, sigma, _ = analyze_gauss_plan(epsilon=epsilon, delta=DELTA, norm_bound=norm_bound)
    beta, _ = regression_coefficients(a.T @ a + _symmetric(rng, d, sigma) + _shift(sigma, d) * np.eye(d))
    sc = Scaling.of(FEATURES + [LABEL], None, constant_at=len(FEATURES), constant_value=c)
    return sc.coefficients(beta, d - 1)


def auto_bound(rows: np.ndarray, rng, *, share=0.1, quantile=0.5):
    """The norm bound ``auto`` picks (exact counts, the quantile scores, the sampler's noisy min)."""
    plan = plan_quantile(EPS * share, quantile)
    counts = np.bincount(np.searchsorted(NORM_GRID, np.linalg.norm(rows, axis=1), side="left"),
                         minlength=NORM_GRID.size + 1)
    q = NORM_GRID[SeededSampler(rng).noisy_min_index(quantile_scores(counts, quantile), plan.scale, plan.sensitivity)]
    d = rows.shape[1] + 1
    return q * math.sqrt(d / (d - 1))


def mse(coefs, X, y):
    return float(np.mean((y - X @ coefs[:-1] - coefs[-1]) ** 2))


def main(runs: int, seed: int = 2026) -> dict:
    rng = np.random.default_rng(seed)
    df = pd.read_csv(DATA)
    X, y = df[FEATURES].to_numpy(float), df[LABEL].to_numpy(float)
    ols = np.linalg.lstsq(np.column_stack([X, np.ones(len(y))]), y, rcond=None)[0]
    ols_mse = mse(np.r_[ols[:-1], ols[-1]], X, y)
    out = {"n_rows": len(y), "n_players": int(df["id"].nunique()), "epsilon": EPS, "delta": DELTA,
           "bounds": BOUNDS, "max_rows_per_unit": UNIT_ROWS, "runs": runs,
           "ols": {"coefficients": ols[:-1].tolist(), "intercept": float(ols[-1]), "mse": ols_mse}}
    for level, m in (("row", 1), ("player", UNIT_ROWS)):
        ests, lows, highs, mses = [], [], [], []
        for _ in range(runs):
            sub = df if m == 1 else _rows_per_unit(df, m, rng)
            est, lo, hi = bounded_release(sub[FEATURES + [LABEL]].to_numpy(float), m, rng)
            ests.append(est), lows.append(lo), highs.append(hi), mses.append(mse(est, X, y))
        ests, lows, highs = np.array(ests), np.array(lows), np.array(highs)
        holds = ((lows <= ols) & (ols <= highs)).mean(axis=0)
        out[level] = {
            "example": {"estimate": ests[0].tolist(), "low": lows[0].tolist(), "high": highs[0].tolist()},
            "mse_median": float(np.median(mses)), "mse_mean": float(np.mean(mses)),
            "mse_ratio_median": float(np.median(mses) / ols_mse),
            "interval_holds_ols": holds.tolist(), "mean_width": (highs - lows).mean(axis=0).tolist(),
        }
    # norm_bound: auto (no bounds, raw units) vs hand-chosen bounds
    rows = df[FEATURES + [LABEL]].to_numpy(float)
    grid = [25.0 * 2 ** (k / 2) for k in range(0, 13)]  # 25 … 1600
    hand = {b: float(np.median([mse(raw_release(rows, b, rng), X, y) for _ in range(runs)])) for b in grid}
    best_b = min(hand, key=hand.get)
    out["auto"] = {"hand_grid_mse_median": {f"{b:g}": v for b, v in hand.items()}, "best_hand_bound": best_b,
                   "best_hand_mse_median": hand[best_b], "quantiles": {}}
    for quantile in (0.25, 0.5, 0.75, 0.95):
        autos, auto_mse = [], []
        for _ in range(runs):
            b = auto_bound(rows, rng, quantile=quantile)
            autos.append(b)
            auto_mse.append(mse(raw_release(rows, b, rng, epsilon=EPS * 0.9), X, y))
        out["auto"]["quantiles"][str(quantile)] = {
            "auto_bound_median": float(np.median(autos)), "auto_mse_median": float(np.median(auto_mse)),
            "auto_over_best": float(np.median(auto_mse) / hand[best_b])}
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=100)
    args = ap.parse_args()
    result = main(args.runs)
    with open(os.path.join(ROOT, "docs", "accuracy_baseball.json"), "w") as fh:
        json.dump(result, fh, indent=1)
    print(json.dumps(result, indent=1))
