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

Numerics: the χ² tails are scipy's below dof 1e5 and Temme's uniform
asymptotic expansion from there on (``_LARGE_DOF``: scipy's lower tail is up to 8×
too small at dof 1e10), checked against mpmath from dof 1e3 to 1e10 in
``tests/test_chi2_profile_large_dof.py``.

Replace-one neighbours are two add/remove steps; this module does *not*
compose the two PLDs (chaining neighbours is group privacy, not composition
of mechanisms run on the same data). Callers use the group-privacy bound:
(ε, δ) add/remove ⇒ (2ε, (1 + e^ε)δ) replace (``add_remove_target``).
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np
from scipy import special, stats

_GRID = 256

# χ² tails. Below _LARGE_DOF they come from scipy (chdtr/chdtrc, i.e. Cephes
# igam/igamc), which is accurate there. Above, scipy's lower tail is not: for
# shape h = dof/2 > 200 and x more than 4.5 standard deviations below the
# mean, igam sums a power series capped at 2000 terms that needs about √h/|z|
# of them, so P[Y ≤ x] comes out too small. Measured against mpmath just past
# z = −4.5: ×(1 − 3e-8) at dof 1e6, ×0.990 at 1e7, ×0.747 at 1e8, ×0.347 at
# 1e9, ×0.125 at 1e10 (chi2.logcdf is the log of the same number; the upper
# tail is fine). At and above _LARGE_DOF the tails come from Temme's uniform
# asymptotic expansion (_log_chi2_tails_temme).
_LARGE_DOF = 100_000
_TEMME_TERMS = 4  # c₀ … c₃
_TEMME_ORDER = 22  # Taylor coefficients of each c_k in η (used for |η| ≤ _TEMME_SERIES_ETA)
_TEMME_SERIES_ETA = 0.5
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


@functools.cache
def _temme_coefficients() -> tuple[np.ndarray, ...]:
    """Taylor coefficients in η of Temme's c₀(η), …, c₃(η) (DLMF 8.12.8–8.12.11), derived exactly.

    With λ − 1 = s and ½η² = s − ln(1 + s) (η of the sign of s):
    c₀ = 1/s − 1/η and c_k = (1/η)·c′_{k−1} + (−1)^k g_k/s, g_k the Stirling
    coefficients of Γ (1, 1/12, 1/288, −139/51840). s(η) = Σ a_n ηⁿ solves
    s·ds/dη = η(1 + s), i.e. a₁ = 1, (m+1)a_m = a_{m−1} − Σ_{i=2}^{m−1} (m+1−i)a_i a_{m+1−i}.
    Exact rationals throughout (the same series in floating point loses
    digits fast); the 1/η poles of the recursion must cancel, which checks
    the g_k.
    """
    n = _TEMME_ORDER + 2 * _TEMME_TERMS + 2
    a = [Fraction(0), Fraction(1)]
    for m in range(2, n + 2):
        a.append((a[m - 1] - sum((m + 1 - i) * a[i] * a[m + 1 - i] for i in range(2, m))) / (m + 1))
    g = a[1:]  # s = η·G(η)
    h = [Fraction(1)]  # 1/G, so 1/s = h(η)/η
    for k in range(1, n):
        h.append(-sum(g[i] * h[k - i] for i in range(1, k + 1)))
    c = [h[1:]]  # c₀ = (h − 1)/η
    stirling = [Fraction(1), Fraction(1, 12), Fraction(1, 288), Fraction(-139, 51840)]
    for k in range(1, _TEMME_TERMS):
        prev, sign = c[-1], (-1) ** k
        if prev[1] + sign * stirling[k] != 0:  # the 1/η terms must cancel
            raise ArithmeticError("Temme coefficient recursion is inconsistent")
        c.append([(m + 2) * prev[m + 2] + sign * stirling[k] * c[0][m] for m in range(len(prev) - 2)])
    return tuple(np.array([float(v) for v in ck[:_TEMME_ORDER]]) for ck in c)


def _sigma_minus_log1p(s: np.ndarray) -> np.ndarray:
    """s − ln(1 + s) ≥ 0 to full relative precision (s > −1; no cancellation near 0)."""
    out = s - np.log1p(s)
    near = (s >= -0.5) & (s <= 1.0)
    if np.any(near):
        # t = s/(2+s), |t| ≤ 1/3: ln(1+s) = 2·atanh t, s = 2t/(1−t), so
        # s − ln(1+s) = 2t²/(1−t) − 2t³·Σ_{j≥1} t^{2j−2}/(2j+1)
        t = s[near] / (2 + s[near])
        t2 = t * t
        acc = np.zeros_like(t)
        for j in range(19, 0, -1):  # 9^−18/39 < 1e-18
            acc = acc * t2 + 1.0 / (2 * j + 1)
        out[near] = 2 * t2 / (1 - t) - 2 * t * t2 * acc
    return out


def _log_chi2_tails_temme(x: np.ndarray, dof: float) -> tuple[np.ndarray, np.ndarray]:
    """(ln P[Y ≤ x], ln P[Y > x]), Y ~ χ²_dof, by Temme's uniform asymptotic expansion.

    DLMF 8.12.3/8.12.4 with h = dof/2, λ = x/dof, ½η² = λ − 1 − ln λ, w = η√h:
    P[Y > x] = Φ(−w) + R, P[Y ≤ x] = Φ(w) − R, R = φ(w)/√h · Σ_{k<4} c_k(η) h^{−k}.
    Evaluated in log space (ln Φ from ``log_ndtr``, R as a relative correction),
    so tails far below 1e-308 keep their logarithm. c_k from the exact Taylor
    series for |η| ≤ 0.5; beyond, the closed forms of c₀, c₁, c₂ (c₃ dropped:
    there w ≥ 0.5√h and the tail is below e^{−h/8}).

    Checked against mpmath (its incomplete gamma function, or the χ² density
    integrated at 25 digits) in ``tests/test_chi2_profile_large_dof.py``:
    relative error of the smaller tail below 1e-13 for dof from 1e3 to 1e10
    at z = (x − dof)/√(2·dof) ∈ [−9, 9] (largest seen 3e-14, at dof 1e3),
    for the float64 x given. (A caller's rounding of x itself is amplified by
    d ln P/d ln x ≈ |z|·√(dof/2), about 4e5 at dof 1e10.)
    """
    x = np.asarray(x, dtype=np.float64)
    h = 0.5 * dof
    with np.errstate(all="ignore"):
        s = (x - dof) / dof  # λ − 1, exact numerator near the mean
        eta = np.sign(s) * np.sqrt(2 * _sigma_minus_log1p(np.maximum(s, -1.0)))
        coeffs = _temme_coefficients()
        series = np.abs(eta) <= _TEMME_SERIES_ETA
        total = np.zeros_like(x)
        for k in range(_TEMME_TERMS - 1, -1, -1):  # Horner in 1/h
            total = total / h + np.polynomial.polynomial.polyval(eta, coeffs[k])
        far = ~series
        if np.any(far):
            sf_, ef = s[far], eta[far]
            c0 = 1 / sf_ - 1 / ef
            c1 = 1 / ef**3 - 1 / sf_**3 - 1 / sf_**2 - 1 / (12 * sf_)
            c2 = -3 / ef**5 + (1 + sf_) * (3 / sf_**5 + 2 / sf_**4 + 1 / (12 * sf_**3)) + 1 / (288 * sf_)
            total[far] = c0 + (c1 + c2 / h) / h
        w = eta * math.sqrt(h)
        log_phi = -0.5 * w * w - _HALF_LOG_2PI - 0.5 * math.log(h)  # ln φ(w)/√h
        l_upper, l_lower = special.log_ndtr(-w), special.log_ndtr(w)
        log_sf = l_upper + np.log1p(np.exp(log_phi - l_upper) * total)
        log_cdf = l_lower + np.log1p(-np.exp(log_phi - l_lower) * total)
    # |w| so large that φ(w)/Φ(∓w) is inf/inf: the correction is moot there
    log_sf = np.where(np.isnan(log_sf), l_upper, log_sf)
    log_cdf = np.where(np.isnan(log_cdf), l_lower, log_cdf)
    log_cdf = np.where(x <= 0, -np.inf, np.where(x == np.inf, 0.0, log_cdf))
    log_sf = np.where(x <= 0, 0.0, np.where(x == np.inf, -np.inf, log_sf))
    return log_cdf, log_sf


def _chi2_cdf_sf(x: np.ndarray, dof: float) -> tuple[np.ndarray, np.ndarray]:
    """(P[Y ≤ x], P[Y > x]), Y ~ χ²_dof: scipy below _LARGE_DOF, Temme's expansion at and above."""
    if dof >= _LARGE_DOF:
        log_cdf, log_sf = _log_chi2_tails_temme(x, dof)
        return np.exp(log_cdf), np.exp(log_sf)
    return special.chdtr(dof, x), special.chdtrc(dof, x)


def _excess(log_p: np.ndarray, log_q: np.ndarray, epsilon: float) -> np.ndarray:
    """p − e^ε·q from ln p and ln q, as p·(−expm1(ε + ln q − ln p)); 0 where p = 0, no overflow or 0·∞."""
    with np.errstate(invalid="ignore", over="ignore"):
        out = np.exp(log_p) * -np.expm1(epsilon + log_q - log_p)
    return np.where(np.isneginf(log_p), 0.0, out)


def _tail_excess(x_p: np.ndarray, x_q: np.ndarray, epsilon: float, dof: float, *, upper: bool) -> np.ndarray:
    """T(x_p) − e^ε·T(x_q) for the χ²_dof tail T = P[Y > ·] (upper) or P[Y ≤ ·].

    Below _LARGE_DOF: scipy's tails, differenced as they are (the values this
    module always gave). At and above: the difference of Temme's log tails
    through ``_excess``.
    """
    if dof < _LARGE_DOF:
        tail = special.chdtrc if upper else special.chdtr
        return tail(dof, x_p) - math.exp(epsilon) * tail(dof, x_q)
    log_cdf, log_sf = _log_chi2_tails_temme(np.concatenate([x_p, x_q]), dof)
    logs = log_sf if upper else log_cdf
    return _excess(logs[: x_p.size], logs[x_p.size :], epsilon)


def delta_for_epsilon(epsilon: float, a: float | np.ndarray, dof: int) -> np.ndarray:
    """δ(ε; a): the exact hockey-stick divergence (both directions) at ε.

    Args:
        epsilon: ε ≥ 0.
        a: vᵀΣ₀⁻¹v, scalar or array, each ≥ 0.
        dof: r (JL projection rows) or m (inverse-Wishart degrees of freedom).

    Returns:
        δ for each a (0 where a = 0).

    At dof ≥ 1e5 the χ² tails come from Temme's expansion and each
    difference P − e^ε·Q is formed from ln P and ln Q (``_tail_excess``):
    scipy's lower tail is up to 8× too small there (×0.125 at dof 1e10, see
    ``_LARGE_DOF``), which inflated the second term, made δ(a) drop by up to
    18× at ε = 1 (72× at ε = 0.25) where a tail point crossed z = −4.5, and
    left the calibrated a_max 8–9% below the exact one at dof ≥ 1e8. Below
    1e5 the values are scipy's, bit for bit as before.
    """
    a = np.atleast_1d(np.asarray(a, dtype=np.float64))
    out = np.zeros_like(a)
    pos = a > 0
    ap = a[pos]
    half_r_log = 0.5 * dof * np.log1p(ap)
    # Direction P₁ vs P₀: event {L > ε}.
    c = epsilon + half_r_log
    d1 = _tail_excess(2 * c / ap, 2 * (1 + ap) * c / ap, epsilon, dof, upper=True)
    # Direction P₀ vs P₁: event {L < −ε} (empty when c′ ≤ 0).
    cp = np.maximum(half_r_log - epsilon, 0.0)
    d2 = np.where(cp > 0, _tail_excess(2 * (1 + ap) * cp / ap, 2 * cp / ap, epsilon, dof, upper=False), 0.0)
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
        # loss range covering all but about tail_mass of Y (scipy's quantiles are a
        # little off at dof ≥ 1e8; they only set the range: whatever falls outside
        # goes to the lowest bin or to +∞, pessimistically, either way)
        y_lo, y_hi = stats.chi2.ppf(tail_mass, dof), stats.chi2.isf(tail_mass, dof)
        l_a, l_b = sorted((loss_to_y[1](y_lo), loss_to_y[1](y_hi)))
        ks = np.arange(math.floor(l_a / discretization), math.ceil(l_b / discretization) + 1)
        edges = ks * discretization  # mass of (edge − Δ, edge] goes to edge
        ys = loss_to_y[0](edges)
        cdf_y, sf_y = _chi2_cdf_sf(ys, dof)  # scipy's lower tail is too small at large dof
        cdf_l = cdf_y if y_increasing else sf_y  # P[L ≤ edge]
        probs = np.diff(np.concatenate([[0.0], cdf_l]))  # lowest bin also takes the lower tail
        inf_mass = max(0.0, 1.0 - cdf_l[-1])
        return pld_pmf.create_pmf({int(k): float(p) for k, p in zip(ks, probs) if p > 0}, discretization,
                                  inf_mass, pessimistic_estimate=True)

    # under P₁: L = −half + (a/2)Y   → Y = 2(L + half)/a (increasing)
    remove = pmf((lambda l: 2 * (l + half) / a, lambda y: -half + 0.5 * a * y), True)
    # under P₀: L' = half − (a/(2(1+a)))Y → Y = 2(1+a)(half − L')/a (decreasing)
    add = pmf((lambda l: 2 * (1 + a) * (half - l) / a, lambda y: half - a * y / (2 * (1 + a))), False)
    return pld_lib.PrivacyLossDistribution(remove, add)
