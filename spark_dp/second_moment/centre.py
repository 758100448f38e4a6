"""Mean-centred PCA (``standardize="mean"``): a private mean, then the second moment of the rows centred at it.

What a scikit-learn user gets from ``StandardScaler(with_std=False)`` then
``PCA``, privately, with every column scaled by its public bounds' half-width:

1. **The mean.** With public ``bounds`` for every column, each value is
   clamped to [lo, hi] and mapped to a ∈ [−1, 1] (centre (lo+hi)/2 → 0,
   :mod:`spark_dp.second_moment._scaling`), and a constant 1 is appended.
   The release's one Spark pass (the exact Gram G = Σ rrᵀ of those rows
   r = [a; 1], no row clipped: ‖r‖ ≤ √(d+1)) holds, in its last column, the
   sum s = Σa and the row count n. The vector (s, n) is released with
   Gaussian noise through the chokepoint (one ``GaussianEvent``), and the
   mean is post-processing: μ̂ = clamp(ŝ / max(n̂, 1), −1, 1) per entry.
2. **The centred second moment.** C = Σ (a − μ̂)(a − μ̂)ᵀ over the same rows
   is an exact function of G and μ̂ (C = [I, −μ̂]·G·[I, −μ̂]ᵀ, on the
   driver: no second pass over the data). Every centred row lies in the box
   |aᵢ − μ̂ᵢ| ≤ 1 + |μ̂ᵢ|, so its norm is at most
   B_c = √Σᵢ(1 + |μ̂ᵢ|)², a function of public values (the bounds and the
   released μ̂): the PCA mechanism releases C at norm bound B_c, no row
   clipped. Its eigenpairs are in the standardised coordinates
   (x − mean)/half-width.

Neighbours and sensitivity (both stated in the manifest):

* add/remove one privacy unit of at most m rows (0 … m after the
  ``nonfinite`` policy): (s, n) changes by Σ over its rows of [a; 1], each
  of norm ≤ √(d+1), so Δ₂ = m·√(d+1).
* replace one unit (P rows by Q rows, P, Q ∈ 0 … m): each entry of s moves
  by at most P + Q ≤ 2m and n by |P − Q| ≤ m, so
  ‖Δ‖₂² ≤ d(P+Q)² + (P−Q)² ≤ 4m²d (the maximum over P, Q is at P = Q = m
  for d ≥ 1): Δ₂ = 2m·√d. The count does not move when P = Q.
* the centred matrix given μ̂ (adaptive composition: μ̂ is released first,
  and the same μ̂ is used on both neighbours): the rows' norm bound is B_c,
  so the mechanism's own sensitivity at B_c applies
  (:func:`spark_dp.privacy.second_moment_l2_sensitivity` for Analyze Gauss:
  m·B_c² add/remove, √2·m·B_c² replace; Sheffet's theorems at B_c for the
  others).
* ``nonfinite="zero"`` puts an entry at its bounds' centre (a = 0), a row
  that ``drop`` removes contributes nothing to s, n or C; empty input gives
  ŝ, n̂ of pure noise and μ̂ in [−1, 1] as always.

Budget: one release, one charge. The mean's Gaussian gets a public share
``mean_share`` of the budget in μ-GDP terms: its noise multiplier is
z(ε, δ)/√share, z the exact Gaussian calibration of the whole (ε, δ) (so
for Analyze Gauss, μ_mean² = share·μ² and the matrix gets the rest). The
PCA mechanism is then calibrated to the largest ε′ at which the two events
compose to within (ε, δ), composed exactly by the project's accountant
(:func:`spark_dp.privacy.accountant.compose_epsilon`: μ-GDP for Gaussian
events, dp-accounting's PLD otherwise); a mechanism whose event is a bare
(ε′, δ′) pair (Wishart, the paper calibrations) is planned at δ′ = δ/2, so
the Gaussian's tail fits in the other half. Both noises are drawn through
the chokepoint after the one charge.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np

from spark_dp.errors import ConfigError
from spark_dp.privacy import Chokepoint, GaussianEvent, gaussian_noise_multiplier
from spark_dp.privacy.accountant import compose_epsilon
from spark_dp.privacy.events import EpsilonDeltaEvent
from spark_dp.release.uncertainty import Uncertainty
from spark_dp.second_moment._registry import MechanismPlan

DEFAULT_MEAN_SHARE = 0.1
#: Bisection steps for the mechanism's ε′ (on log ε′ over [ε/1000, ε]): the result errs low (more noise).
_STEPS = 12


def mean_l2_sensitivity(d: int, *, max_rows_per_unit: int = 1, neighbors: str = "add_remove") -> float:
    """L2 sensitivity of (Σa, n) for rows a ∈ [−1, 1]^d, at most m rows per unit (module doc).

    add/remove: m·√(d+1); replace: 2m·√d.
    """
    m = max_rows_per_unit
    if neighbors == "add_remove":
        return m * math.sqrt(d + 1)
    if neighbors == "replace":
        return 2.0 * m * math.sqrt(d)
    raise ValueError(f"unknown neighbour relation {neighbors!r}")


@dataclass(frozen=True)
class CentrePlan:
    """The public plan of the mean's release and of the budget split (module doc)."""

    d: int
    share: float
    event: GaussianEvent
    sensitivity: float
    mechanism_epsilon: float
    mechanism_delta: float
    neighbors: str
    max_rows_per_unit: int

    @property
    def sigma(self) -> float:
        return self.event.noise_multiplier * self.sensitivity

    def manifest(self) -> dict[str, Any]:
        """The manifest's ``privacy.mean`` fields (public)."""
        return {
            "share": self.share, "noise_multiplier": self.event.noise_multiplier, "noise_sigma": self.sigma,
            "sensitivity": self.sensitivity, "sensitivity_norm": "l2 of (sum of the scaled rows, row count)",
            "sensitivity_formula": "m*sqrt(d+1) add/remove, 2*m*sqrt(d) replace (rows in [-1, 1]^d)",
            "mechanism_epsilon": self.mechanism_epsilon, "mechanism_delta": self.mechanism_delta,
            "composition": "exact (mu-GDP for Gaussian events, dp-accounting PLD otherwise); the mean's Gaussian "
                           "has noise multiplier z(epsilon, delta)/sqrt(share), the PCA mechanism the largest "
                           "epsilon at which both compose within the release's (epsilon, delta)",
        }


def plan_centre(planner: Callable[[float, float], Callable[[float], MechanismPlan]], *, d: int, epsilon: float,
                delta: float, share: float, neighbors: str, max_rows_per_unit: int,
                owner: str = "pca") -> tuple[CentrePlan, Callable[[float], MechanismPlan]]:
    """The mean's event and the mechanism's ``plan_for(B)`` at the ε′ that composes with it within (ε, δ).

    ``planner(ε′, δ′)`` returns the mechanism's ``plan_for`` at (ε′, δ′).
    Raises ConfigError (naming ``mean_share``) when no ε′ fits.
    """
    z = gaussian_noise_multiplier(epsilon, delta) / math.sqrt(share)
    event = GaussianEvent(noise_multiplier=z)
    full = planner(epsilon, delta)(1.0).events
    mech_delta = delta / 2.0 if any(isinstance(e, EpsilonDeltaEvent) for e in full) else delta

    def fits(eps: float) -> Callable[[float], MechanismPlan] | None:
        try:
            plan_for = planner(eps, mech_delta)
            events = [event, *plan_for(1.0).events]
        except ConfigError:
            return None
        return plan_for if compose_epsilon(events, delta) <= epsilon else None

    lo, hi = math.log(epsilon / 1000.0), math.log(epsilon)
    best = fits(math.exp(lo))
    if best is None:
        raise ConfigError(f"The 'mean_share' parameter of {owner} leaves the PCA mechanism no budget at "
                          f"epsilon={epsilon:g}, delta={delta:g}. Got {share:g}; give a smaller share or a larger "
                          "epsilon.")
    best_eps = math.exp(lo)
    for _ in range(_STEPS):
        mid = (lo + hi) / 2.0
        got = fits(math.exp(mid))
        if got is None:
            hi = mid
        else:
            lo, best, best_eps = mid, got, math.exp(mid)
    plan_for = best
    if list(plan_for(1.0).events) != list(plan_for(2.0).events):
        raise ConfigError(f"The 'standardize' parameter of {owner} may be 'mean' only for mechanisms whose privacy "
                          "events do not depend on the norm bound (it is chosen after the mean's release).")
    sens = mean_l2_sensitivity(d, max_rows_per_unit=max_rows_per_unit, neighbors=neighbors)
    return CentrePlan(d, share, event, sens, best_eps, mech_delta, neighbors, max_rows_per_unit), plan_for


def release_mean(cp: Chokepoint, plan: CentrePlan, gram: np.ndarray) -> tuple[np.ndarray, float, np.ndarray]:
    """Noises (Σa, n) — the last column of the exact Gram of [a; 1] — through the chokepoint.

    Returns (μ̂ in the scaled coordinates, clamped to [−1, 1]; n̂; the noisy (Σa, n)).
    """
    gram = np.asarray(gram, dtype=np.float64)
    if gram.shape != (plan.d + 1, plan.d + 1):
        raise ValueError(f"bug: expected the ({plan.d + 1}, {plan.d + 1}) Gram of [a; 1], got {gram.shape}")
    noisy = cp.gaussian(gram[:, -1], sigma=plan.sigma, l2_sensitivity=plan.sensitivity)
    return scaled_mean(noisy), float(noisy[-1]), noisy


def scaled_mean(noisy: np.ndarray) -> np.ndarray:
    """μ̂ = clamp(ŝ / max(n̂, 1), −1, 1) (post-processing; also for bootstrap draws, rows of a 2-D ``noisy``)."""
    noisy = np.asarray(noisy, dtype=np.float64)
    count = np.maximum(noisy[..., -1:], 1.0)
    return np.clip(noisy[..., :-1] / count, -1.0, 1.0)


def centred_gram(gram: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """Σ (a − c·μ)(a − c·μ)ᵀ over the rows [a; c] of the Gram ``gram`` (c = 1, or 0 for a zeroed row): exact."""
    gram = np.asarray(gram, dtype=np.float64)
    t = np.hstack([np.eye(len(mean)), -np.asarray(mean, dtype=np.float64)[:, None]])
    out = t @ gram @ t.T
    return 0.5 * (out + out.T)


def centred_norm_bound(mean: np.ndarray) -> float:
    """B_c = √Σ(1 + |μᵢ|)²: no row a ∈ [−1, 1]^d centred at μ is longer (module doc)."""
    return float(math.sqrt(float(np.sum((1.0 + np.abs(np.asarray(mean, dtype=np.float64))) ** 2))))


def mean_uncertainty(noisy: np.ndarray, plan: CentrePlan, centres: np.ndarray, halves: np.ndarray,
                     level: float) -> dict[str, Uncertainty]:
    """Bounds on the released ``mean`` (data units) and the ``count``'s interval, from public values only.

    The count: n̂ ± z·σ (z the normal quantile at ``level``). The mean of
    column i is the ratio sᵢ/n of two values released with noise N(0, σ²):
    with probability ≥ ``level`` both lie within z′·σ of their release
    (z′ at 1 − (1 − level)/4: a union bound over the two), and the ratio is
    then between the extremes of (ŝᵢ ± z′σ)/(n̂ ± z′σ), clipped to the bounds
    (the whole range when n̂ − z′σ < 1: the count's noise then dominates).
    A ``bound`` (conservative per entry); the standard error is the delta
    method's σ√(1 + μ̂ᵢ²)/max(n̂, 1) in the data's units. Covers the noise
    (the mean of these rows), not the sampling error of a population mean.
    """
    sigma = plan.sigma
    noisy = np.asarray(noisy, dtype=np.float64)
    s_hat, n_hat = noisy[:-1], float(noisy[-1])
    z = NormalDist().inv_cdf(0.5 + level / 2.0)
    z2 = NormalDist().inv_cdf(1.0 - (1.0 - level) / 4.0)
    n_lo, n_hi = n_hat - z2 * sigma, n_hat + z2 * sigma
    if n_lo < 1.0:
        low, high = -np.ones_like(s_hat), np.ones_like(s_hat)
    else:
        s_lo, s_hi = s_hat - z2 * sigma, s_hat + z2 * sigma
        low = np.clip(np.minimum(s_lo / n_lo, s_lo / n_hi), -1.0, 1.0)
        high = np.clip(np.maximum(s_hi / n_lo, s_hi / n_hi), -1.0, 1.0)
    mean = scaled_mean(noisy)
    stderr = halves * sigma * np.sqrt(1.0 + mean**2) / max(n_hat, 1.0)
    count = np.array([n_hat])
    return {
        "mean": Uncertainty(centres + halves * low, centres + halves * high, stderr, (
            "bound: (sum, count) each within z' sigma of their release (union bound, z' at 1 - (1-level)/4), the "
            "ratio's extremes over that box, clipped to the bounds; stderr by the delta method"), kind="bound",
            covers="noise"),
        "count": Uncertainty(count - z * sigma, count + z * sigma, np.array([sigma]),
                             "Gaussian noise of the count: released +- z sigma", covers="noise"),
    }
