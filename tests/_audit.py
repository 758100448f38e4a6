"""Privacy audits used across the suite (white-box and black-box).

White-box: noise drawn on a zero input must have the variance that an
independently computed σ says: a two-sided chi-square test on the sum of
squares. 100 draws reject σ/2 (and 2σ) essentially always at α = 1e-6.

Black-box: samples of the release projected on the direction in which two
neighbouring inputs differ; the event {x > t} (t chosen on a pilot sample)
gives a Clopper–Pearson lower bound on ε that must stay below the claim.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats


def chi2_variance_pvalue(noise: np.ndarray, sigma: float) -> float:
    """Two-sided p-value of H0: noise ~ N(0, σ²) i.i.d., from Σ noise²/σ² ~ χ²_n."""
    noise = np.asarray(noise, dtype=np.float64).reshape(-1)
    s = float(np.sum(noise**2) / sigma**2)
    n = noise.size
    return 2 * min(stats.chi2.cdf(s, n), stats.chi2.sf(s, n))


def clopper_pearson(k: int, n: int, alpha: float) -> tuple[float, float]:
    lo = stats.beta.ppf(alpha / 2, k, n - k + 1) if k > 0 else 0.0
    hi = stats.beta.ppf(1 - alpha / 2, k + 1, n - k) if k < n else 1.0
    return float(lo), float(hi)


def empirical_epsilon(x0: np.ndarray, x1: np.ndarray, delta: float, alpha: float = 1e-3) -> float:
    """Lower confidence bound on ε from samples of M(D) (x0) and M(D') (x1), 1-D.

    A 20% pilot picks the threshold t maximising the empirical log-ratio of
    P[x1 > t] to P[x0 > t] (with enough mass to estimate); the rest of the
    samples give Clopper–Pearson bounds, and
    ε_lb = ln((p1_lo − δ) / p0_hi). Both tails are tried (the larger bound
    is returned; α is split between them).
    """
    x0 = np.asarray(x0).reshape(-1)
    x1 = np.asarray(x1).reshape(-1)
    n_pilot = len(x0) // 5
    p0, e0 = x0[:n_pilot], x0[n_pilot:]
    p1, e1 = x1[:n_pilot], x1[n_pilot:]
    best = -math.inf
    for sign in (1.0, -1.0):
        a0, a1 = sign * p0, sign * p1
        qs = np.quantile(a0, np.linspace(0.5, 1 - 200 / len(a0), 60))
        ratios = [(np.mean(a1 > t) + 1e-12) / (np.mean(a0 > t) + 1e-12) for t in qs]
        t = qs[int(np.argmax(ratios))]
        k0 = int(np.sum(sign * e0 > t))
        k1 = int(np.sum(sign * e1 > t))
        _, hi0 = clopper_pearson(k0, len(e0), alpha / 2)
        lo1, _ = clopper_pearson(k1, len(e1), alpha / 2)
        if lo1 - delta > 0 and hi0 > 0:
            best = max(best, math.log((lo1 - delta) / hi0))
    return best


def laplace_scale_pvalue(noise: np.ndarray, b: float) -> float:
    """Two-sided p-value of H0: noise ~ Lap(b) i.i.d., from Σ|X|/b ~ Gamma(n, 1)."""
    noise = np.asarray(noise, dtype=np.float64).reshape(-1)
    s = float(np.sum(np.abs(noise)) / b)
    n = noise.size
    return 2 * min(stats.gamma.cdf(s, n), stats.gamma.sf(s, n))


def empirical_epsilon_scan(x0: np.ndarray, x1: np.ndarray, delta: float, alpha: float = 1e-3,
                           thresholds: int = 400, min_count: int = 10) -> float:
    """Like :func:`empirical_epsilon`, with a wider scan of events {x > t}.

    The 20% pilot scans ``thresholds`` quantiles of the pilot of x1 (down to
    ``min_count`` pilot samples above t), including events that x0 never
    reaches, and picks the t maximising the pilot's own Clopper–Pearson bound
    (a score robust to events with few samples). The held-out 80% then give
    ε_lb = ln((p1_lo − δ)/p0_hi) at level α (split over the two tails). A
    valid lower bound at confidence 1 − α whatever the pilot picked, since
    the held-out samples are independent of the choice.
    """
    x0 = np.asarray(x0, dtype=np.float64).reshape(-1)
    x1 = np.asarray(x1, dtype=np.float64).reshape(-1)
    n_pilot = len(x0) // 5
    p0, e0 = x0[:n_pilot], x0[n_pilot:]
    p1, e1 = x1[:n_pilot], x1[n_pilot:]
    best = -math.inf
    for sign in (1.0, -1.0):
        a0, a1 = np.sort(sign * p0), np.sort(sign * p1)
        ts = np.quantile(a1, np.linspace(0.0, 1 - min_count / len(a1), thresholds))
        k0 = len(a0) - np.searchsorted(a0, ts, side="right")
        k1 = len(a1) - np.searchsorted(a1, ts, side="right")
        hi0 = np.where(k0 < len(a0), stats.beta.ppf(1 - 0.05, k0 + 1, np.maximum(len(a0) - k0, 1)), 1.0)
        lo1 = np.where(k1 > 0, stats.beta.ppf(0.05, np.maximum(k1, 1), len(a1) - k1 + 1), 0.0)
        score = np.where(lo1 - delta > 0, np.log(np.maximum(lo1 - delta, 1e-300) / hi0), -np.inf)
        t = ts[int(np.argmax(score))]
        k0e = int(np.sum(sign * e0 > t))
        k1e = int(np.sum(sign * e1 > t))
        _, hi = clopper_pearson(k0e, len(e0), alpha / 2)
        lo, _ = clopper_pearson(k1e, len(e1), alpha / 2)
        if lo - delta > 0 and hi > 0:
            best = max(best, math.log((lo - delta) / hi))
    return best
