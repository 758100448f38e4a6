"""Exact (ε, δ) profile of the JL-with-ridge and inverse-Wishart mechanisms.

Both mechanisms release one draw of a Wishart-type matrix whose scale is
Σ = AᵀA + w²I (JL: (RÃ)ᵀ(RÃ) ~ W_d(Σ, r); inverse-Wishart: X ~ W⁻¹_d(Σ, m)).
For add/remove neighbours (one row v, ‖v‖₂ ≤ B) write Σ₀ = w²I + AᵀA,
Σ₁ = Σ₀ + vvᵀ and a = vᵀΣ₀⁻¹v ∈ [0, a_max], a_max = B²/w². With the matrix
determinant lemma and Sherman–Morrison the privacy loss of the JL release is

    L = −(r/2)·ln(1+a) + S/(2(1+a)),   S ~ (a + a²)·χ²_r under P₁, a·χ²_r under P₀,

so the hockey-stick divergence has the closed form (``delta_for_epsilon``)

    δ(ε; a) = max( P[Y > 2c/a] − e^ε·P[Y > 2(1+a)c/a],
                   P[Y < 2(1+a)c′/a] − e^ε·P[Y < 2c′/a] ),   Y ~ χ²_r,

c = ε + (r/2)ln(1+a), c′ = (r/2)ln(1+a) − ε (second term 0 if c′ ≤ 0). The
inverse-Wishart loss is the same with P₀ and P₁ swapped (r → m), so the same
function applies. Derivation: ``/work/shared/notes/gaussian-sampling-mechanisms.md``
(checked here and in ``docs/privacy.md``; tested by Monte Carlo
of the log-density ratio in ``tests/test_second_moment_chi2_profile.py``).

Calibration (``calibrate_a_max``): bisection on a_max so that the *worst case
over a grid* of a ∈ (0, a_max] has δ(ε; a) ≤ δ; the ridge is then
w = B/√a_max. Rounding errs toward more noise (the feasible end of the
bracket is returned).

Replace-one neighbours are two add/remove steps; this module does *not*
compose the two PLDs (chaining neighbours is group privacy, not composition
of mechanisms run on the same data). Callers use the group-privacy bound:
(ε, δ) add/remove ⇒ (2ε, (1 + e^ε)δ) replace (``add_remove_target``).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

_GRID = 256


def delta_for_epsilon(epsilon: float, a: float | np.ndarray, dof: int) -> np.ndarray:
    """δ(ε; a): the exact hockey-stick divergence (both directions) at ε.

    Args:
        epsilon: ε ≥ 0.
        a: vᵀΣ₀⁻¹v, scalar or array, each ≥ 0.
        dof: r (JL projection rows) or m (inverse-Wishart degrees of freedom).

    Returns:
        δ for each a (0 where a = 0).
    """
    a = np.atleast_1d(np.asarray(a, dtype=np.float64))
    out = np.zeros_like(a)
    pos = a > 0
    ap = a[pos]
    ee = math.exp(epsilon)
    half_r_log = 0.5 * dof * np.log1p(ap)
    # Direction P₁ vs P₀: event {L > ε}.
    c = epsilon + half_r_log
    d1 = stats.chi2.sf(2 * c / ap, dof) - ee * stats.chi2.sf(2 * (1 + ap) * c / ap, dof)
    # Direction P₀ vs P₁: event {L < −ε}.
    cp = half_r_log - epsilon
    d2 = np.where(
        cp > 0,
        stats.chi2.cdf(2 * (1 + ap) * np.maximum(cp, 0) / ap, dof) - ee * stats.chi2.cdf(2 * np.maximum(cp, 0) / ap, dof),
        0.0,
    )
    out[pos] = np.maximum(np.maximum(d1, d2), 0.0)
    return out


def worst_delta(epsilon: float, a_max: float, dof: int, *, grid: int = _GRID) -> float:
    """max over a ∈ (0, a_max] (geometric grid plus a_max itself) of δ(ε; a)."""
    grid_a = np.concatenate([a_max * np.geomspace(1e-4, 1.0, grid), [a_max]])
    return float(np.max(delta_for_epsilon(epsilon, grid_a, dof)))


def calibrate_a_max(epsilon: float, delta: float, dof: int, *, iterations: int = 80) -> float:
    """Largest a_max (to bisection precision, rounded down) with worst-case δ(ε) ≤ δ.

    Args:
        epsilon, delta: the add/remove target.
        dof: r or m.

    Returns:
        a_max > 0; the ridge is w² = B²/a_max.
    """
    if not (epsilon > 0 and math.isfinite(epsilon)) or not (0 < delta < 1) or dof < 1:
        raise ValueError(f"need finite epsilon > 0, 0 < delta < 1, dof >= 1; got {epsilon}, {delta}, {dof}")
    lo, hi = 0.0, 1.0
    while worst_delta(epsilon, hi, dof) <= delta:  # widen until infeasible
        lo, hi = hi, hi * 2
        if hi > 1e12:
            return lo
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        if worst_delta(epsilon, mid, dof) <= delta:
            lo = mid
        else:
            hi = mid
    if lo <= 0:
        raise ArithmeticError("could not calibrate a_max")
    return lo


def add_remove_target(epsilon: float, delta: float, neighbors: str) -> tuple[float, float]:
    """The add/remove (ε, δ) that implies the request under ``neighbors``.

    ``replace``: group privacy of size 2, (ε', δ') add/remove ⇒
    (2ε', (1 + e^ε')δ') replace, so ε' = ε/2, δ' = δ/(1 + e^{ε/2}).
    """
    if neighbors == "add_remove":
        return epsilon, delta
    if neighbors == "replace":
        return epsilon / 2, delta / (1 + math.exp(epsilon / 2))
    raise ValueError(f"unknown neighbour relation {neighbors!r}")


def tail_bound_a_max(epsilon: float, delta: float, dof: int) -> float:
    """The sufficient condition (r/4)a² + a(√(r t) + t) ≤ ε, t = ln(1/δ) (Laurent–Massart).

    About 1.4× more conservative than the exact profile; reported for
    comparison only.
    """
    t = math.log(1 / delta)
    b = math.sqrt(dof * t) + t
    qa = dof / 4
    return (-b + math.sqrt(b * b + 4 * qa * epsilon)) / (2 * qa)


def chi2_mechanism_pld(a: float, dof: int, *, discretization: float = 1e-4, tail_mass: float = 1e-15):
    """Pessimistic privacy-loss distribution of the χ² mechanism at a (a proposal).

    A tighter composable representation than an (ε, δ) point: the PLD of the
    pair (P₁, P₀) at a = a_max, built from the exact loss distributions
    (under P₁: L = −(r/2)ln(1+a) + (a/2)Y; under P₀, for ln P₀/P₁:
    (r/2)ln(1+a) − (a/(2(1+a)))Y; Y ~ χ²_r), losses rounded *up* to the
    grid and the far upper tail sent to infinity (dp-accounting's
    pessimistic convention). It is a valid representation when the pair at
    a_max dominates every a ≤ a_max (δ(ε; a) increasing in a, which
    ``tests/test_second_moment_chi2_profile.py`` checks on a grid). The
    ledger composes :class:`~spark_dp.privacy.events.Chi2ProfileEvent` with it.
    """
    from dp_accounting.pld import pld_pmf
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    half = 0.5 * dof * math.log1p(a)

    def pmf(loss_to_y, y_increasing: bool):
        # loss range covering all but tail_mass of Y
        y_lo, y_hi = stats.chi2.ppf(tail_mass, dof), stats.chi2.isf(tail_mass, dof)
        l_a, l_b = sorted((loss_to_y[1](y_lo), loss_to_y[1](y_hi)))
        ks = np.arange(math.floor(l_a / discretization), math.ceil(l_b / discretization) + 1)
        edges = ks * discretization  # mass of (edge − Δ, edge] goes to edge
        ys = loss_to_y[0](edges)
        cdf_y = stats.chi2.cdf(ys, dof)
        cdf_l = cdf_y if y_increasing else 1.0 - cdf_y  # P[L ≤ edge]
        probs = np.diff(np.concatenate([[0.0], cdf_l]))  # lowest bin also takes the lower tail
        inf_mass = max(0.0, 1.0 - cdf_l[-1])
        return pld_pmf.create_pmf({int(k): float(p) for k, p in zip(ks, probs) if p > 0}, discretization,
                                  inf_mass, pessimistic_estimate=True)

    # under P₁: L = −half + (a/2)Y   → Y = 2(L + half)/a (increasing)
    remove = pmf((lambda l: 2 * (l + half) / a, lambda y: -half + 0.5 * a * y), True)
    # under P₀: L' = half − (a/(2(1+a)))Y → Y = 2(1+a)(half − L')/a (decreasing)
    add = pmf((lambda l: 2 * (1 + a) * (half - l) / a, lambda y: half - a * y / (2 * (1 + a))), False)
    return pld_lib.PrivacyLossDistribution(remove, add)
