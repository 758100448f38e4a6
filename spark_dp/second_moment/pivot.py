"""Regression intervals from the exact Gaussian pivot of a release of noisy sums (privacy noise only).

A release of Analyze Gauss holds A = XᵀX + E and b = Xᵀy + e, where E is
symmetric with entries N(0, σ²) (the diagonal too) and e ~ N(0, σ_y² I) is
independent of E (the label's column of the same symmetric noise). At the
true coefficients β — the non-private fit of the same rows, XᵀX β = Xᵀy —
the pivot

    g(β) = b − Aβ = e − Eβ

is exactly Gaussian with mean 0 and covariance

    Σ(β) = σ_y² I + σ² (‖β‖² I + ββᵀ − diag(β_i²)),

whatever X is: (Eβ)_i = Σ_j E_ij β_j, and E_ij = E_ji is the only entry two
rows share. Nothing in it depends on how well X is conditioned, which the
parametric bootstrap (:mod:`.intervals`) does through its world built from
the noisy A: on a near-collinear table (log expenditure nearly collinear
with the constant) the releases whose noise lifted XᵀX's smallest
eigenvalue got bootstrap intervals that held one term in 68 % of them.

For a coefficient in the data's units, t = wᵀβ + w₀ (an affine map of β,
:meth:`.Scaling.coefficients`), the interval is Fieller's (Fieller 1954;
the "generalised" form for a variance that depends on the unknown): the
values t for which

    (t − t̂)² ≤ z² · dᵀ Σ(β_t) d,  d = A⁻ᵀ w,  t̂ = wᵀA⁻¹b + w₀,

where β_t is the coefficient vector on the line from β̂ = A⁻¹b towards t
along which the pivot's quadratic form grows least (u = A⁻¹Σd / dᵀΣd, with
Σ at that end point; three rounds). Along a fixed line dᵀΣ(β̂ + s u)d is a
quadratic in s, so each end point solves a quadratic exactly: where its
leading coefficient 1 − z²·v₂ is ≤ 0 the set is unbounded (the noise on
XᵀX is as large as the design's signal in that direction — Fieller's
unbounded case) and :func:`fieller_intervals` says so instead of giving a
number. The standard error is the interval's half-width ÷ z.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Rounds of re-evaluating Σ at the end point (the direction of the profile line); the end points move by well
#: under 1 % of the width after the second on the calibration tables.
ROUNDS = 3

METHOD = ("exact Gaussian pivot (Fieller's interval): at the true coefficients b, X^T y - X^T X b of the release "
          "is exactly normal with a covariance known from the noise scale and b (sigma_y^2 I + sigma^2 (|b|^2 I + "
          "b b^T - diag(b^2))); each coefficient's interval is the values whose pivot along its profile line lies "
          "within z standard deviations, the variance taken at that value; it does not rely on the noisy X^T X "
          "being close to the true one; stderr is the half-width / z")


@dataclass(frozen=True)
class PivotIntervals:
    """Per output entry: estimate, low, high (data units), and whether the entry's Fieller set is bounded."""

    estimate: np.ndarray
    low: np.ndarray
    high: np.ndarray
    bounded: np.ndarray


def pivot_variance_terms(d: np.ndarray, beta: np.ndarray, u: np.ndarray, sigma: float,
                         sigma_y: float) -> tuple[float, float, float]:
    """(v₀, v₁, v₂) with dᵀΣ(β + s·u)d = v₀ + v₁ s + v₂ s² (module doc's Σ)."""
    d2 = d * d
    dd = float(d2.sum())
    db, du = float(d @ beta), float(d @ u)
    v0 = sigma_y**2 * dd + sigma**2 * (float(beta @ beta) * dd + db * db - float(d2 @ (beta * beta)))
    v1 = sigma**2 * (2.0 * float(beta @ u) * dd + 2.0 * db * du - 2.0 * float(d2 @ (beta * u)))
    v2 = sigma**2 * (float(u @ u) * dd + du * du - float(d2 @ (u * u)))
    return v0, v1, v2


def pivot_covariance(beta: np.ndarray, sigma: float, sigma_y: float) -> np.ndarray:
    """Σ(β), the covariance of b − Aβ at β (module doc)."""
    p = beta.size
    return (sigma_y**2 + sigma**2 * float(beta @ beta)) * np.eye(p) + sigma**2 * (np.outer(beta, beta)
                                                                                 - np.diag(beta * beta))


def _end(a: np.ndarray, beta: np.ndarray, d: np.ndarray, sign: float, *, sigma: float, sigma_y: float,
         c: float) -> float | None:
    """The signed distance s from t̂ to one end of the Fieller set along the profile line (None: unbounded)."""
    at = beta
    s = 0.0
    for _ in range(ROUNDS):
        sd = pivot_covariance(at, sigma, sigma_y) @ d
        v = float(d @ sd)
        if not v > 0:
            return None
        u = np.linalg.solve(a, sd) / v  # w^T u = d^T A u = 1: u moves t by one unit
        v0, v1, v2 = pivot_variance_terms(d, beta, u, sigma, sigma_y)
        lead = 1.0 - c * v2
        if lead <= 0:
            return None
        disc = (c * v1) ** 2 + 4.0 * lead * c * v0
        s = (c * v1 + sign * np.sqrt(max(disc, 0.0))) / (2.0 * lead)
        at = beta + s * u
    return float(s)


def fieller_intervals(xtx: np.ndarray, xty: np.ndarray, *, sigma: float, sigma_y: float | None = None,
                      weights: np.ndarray, offset: np.ndarray, level: float = 0.95) -> PivotIntervals:
    """Fieller intervals for t_j = weights[j]ᵀβ + offset[j] (module doc), from a release A = ``xtx``, b = ``xty``.

    Args:
        xtx, xty: the released XᵀX (p × p, symmetric noise N(0, σ²) on every entry) and Xᵀy (noise N(0, σ_y²)).
        sigma, sigma_y: the noise scales (``sigma_y`` defaults to ``sigma``).
        weights, offset: the affine map to the reported values, shape (k, p) and (k,).
        level: the nominal coverage.
    """
    from spark_dp.release.uncertainty import normal_quantile

    sigma_y = sigma if sigma_y is None else sigma_y
    a = 0.5 * (xtx + xtx.T)
    c = normal_quantile(level) ** 2
    try:
        beta = np.linalg.solve(a, xty)
    except np.linalg.LinAlgError:  # a singular release (data content, not an error): every set is unbounded
        est = weights @ (np.linalg.pinv(a) @ xty) + offset
        return PivotIntervals(estimate=est, low=np.full(est.shape, -np.inf), high=np.full(est.shape, np.inf),
                              bounded=np.zeros(est.shape, dtype=bool))
    est = weights @ beta + offset
    low, high = np.full(est.shape, -np.inf), np.full(est.shape, np.inf)
    bounded = np.zeros(est.shape, dtype=bool)
    for j, w in enumerate(weights):
        d = np.linalg.solve(a.T, w)
        lo = _end(a, beta, d, -1.0, sigma=sigma, sigma_y=sigma_y, c=c)
        hi = _end(a, beta, d, 1.0, sigma=sigma, sigma_y=sigma_y, c=c)
        if lo is not None and hi is not None:
            low[j], high[j], bounded[j] = est[j] + lo, est[j] + hi, True
    return PivotIntervals(estimate=est, low=low, high=high, bounded=bounded)


def affine_map(coefficients, p: int) -> tuple[np.ndarray, np.ndarray]:
    """(W, w₀) with ``coefficients(β) = W β + w₀`` for every β ∈ R^p (checked at a random point)."""
    w0 = np.asarray(coefficients(np.zeros(p)), dtype=np.float64)
    basis = np.asarray(coefficients(np.eye(p)), dtype=np.float64)  # rows: coefficients(e_i)
    weights = (basis - w0).T
    probe = np.random.default_rng(0).standard_normal(p)
    got = np.asarray(coefficients(probe), dtype=np.float64)
    if not np.allclose(got, weights @ probe + w0, rtol=1e-9, atol=1e-9 * (1.0 + np.abs(got).max())):
        raise ValueError("the map to the data's units is not affine")
    return weights, w0
