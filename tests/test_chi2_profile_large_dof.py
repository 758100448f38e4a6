"""The χ² privacy profile at large degrees of freedom (issue #12).

scipy's χ² lower tail (Cephes ``igam``) is too small more than 4.5 standard
deviations below the mean once dof ≳ 1e6: for shape h = dof/2 > 200 it sums a
power series capped at 2000 terms that needs ≈ √h/|z| of them (×0.75 at dof
1e8, ×0.35 at 1e9, ×0.125 at 1e10). δ(a) then dropped by up to 18× (ε = 1)
where a tail point crossed z = −4.5, and the calibrated a_max was 8–9% too
small at dof ≥ 1e8.
``spark_dp.privacy.chi2_profile`` now takes the tails at dof ≥ 1e5 from
Temme's uniform asymptotic expansion; here they are checked against mpmath,
and the profile for monotonicity in a and for a feasible, tight a_max up to
dof 1e10, partly against a profile computed from mpmath alone.
"""

import functools
import math

import mpmath as mp  # a dependency of dp-accounting
import numpy as np
import pytest

from spark_dp.privacy.chi2_profile import (
    _chi2_cdf_sf,
    _log_chi2_tails_temme,
    _tail_excess,
    calibrate_a_max,
    chi2_mechanism_pld,
    delta_for_epsilon,
    worst_delta,
)

DOFS = [10**3, 10**6, 10**8, 10**9, 10**10]


def _mp_tail_gamma(x: float, dof: float, lower: bool) -> float:
    """P[Y ≤ x] (lower) or P[Y > x], Y ~ χ²_dof: mpmath's regularised upper gamma at 45 digits (1 − Q below)."""
    with mp.workdps(45):
        q = mp.gammainc(mp.mpf(dof) / 2, mp.mpf(x) / 2, mp.inf, regularized=True)
        return float(1 - q if lower else q)


def _mp_tail_quad(x: float, dof: float, lower: bool) -> float:
    """The same tail: the χ² density integrated by mpmath at 25 digits, in pieces scaled to its decay at x."""
    with mp.workdps(25):
        k, x = mp.mpf(dof), mp.mpf(x)
        h = k / 2
        log_norm = mp.loggamma(h) + mp.log(2)

        def density(y):
            return mp.exp((h - 1) * mp.log(y / 2) - y / 2 - log_norm)

        scale = 1 / (abs((h - 1) / x - mp.mpf(1) / 2) + 1 / mp.sqrt(2 * k))
        steps = [0, 0.5, 1, 2, 4, 8, 16, 32, 64]
        if lower:
            pts = sorted({max(mp.mpf(0), x - scale * t) for t in steps})
        else:
            pts = [x + scale * t for t in steps]
        return float(mp.quad(density, pts))


def _mp_tail(x: float, dof: float, lower: bool) -> float:
    """The mpmath reference: the gamma function up to dof 1e6, the quadrature above (where the former takes ~1 s)."""
    return (_mp_tail_gamma if dof <= 1e6 else _mp_tail_quad)(x, dof, lower)


@functools.cache
def _a_max(epsilon: float, delta: float, dof: int) -> float:
    return calibrate_a_max(epsilon, delta, dof)


def test_mpmath_references_agree():
    for dof, z in [(1e3, -8), (1e6, -5), (1e6, 6)]:
        x = dof + z * math.sqrt(2 * dof)
        assert _mp_tail_quad(x, dof, z < 0) == pytest.approx(_mp_tail_gamma(x, dof, z < 0), rel=1e-15)


def test_tails_match_mpmath_from_dof_1e3_to_1e10():
    """Temme's expansion: relative error < 1e-13 at dof 1e3 … 1e10, |z| ≤ 9 (as the docstring states)."""
    z_full = (-9, -7, -5, -4.6, -4.4, -2, 0, 2, 4.6, 7, 9)
    z_few = (-8, -4.6, 5)  # the quadrature costs ≈ 0.1 s a point
    for dof, zs in [(1e3, z_full), (1e4, z_full), (1e5, z_full), (1e6, z_full),
                    (1e8, z_few), (1e9, z_few), (1e10, z_few)]:
        x = dof + np.asarray(zs, dtype=float) * math.sqrt(2 * dof)
        temme, used = _log_chi2_tails_temme(x, dof), _chi2_cdf_sf(x, dof)
        for i, z in enumerate(zs):
            side = 0 if z < 0 else 1  # the smaller tail: P[Y ≤ x] below the mean, P[Y > x] above
            ref = _mp_tail(x[i], dof, lower=z < 0)
            assert math.exp(temme[side][i]) == pytest.approx(ref, rel=1e-13), (dof, z)
            assert used[side][i] == pytest.approx(ref, rel=1e-12), (dof, z)  # what the module uses (scipy below 1e5)
            assert math.exp(temme[1 - side][i]) == pytest.approx(1 - ref, rel=1e-15, abs=1e-16), (dof, z)
    # far outside: logs stay finite where the tails underflow, and the ends are exact
    lc, ls = _log_chi2_tails_temme(np.array([0.0, 1e9, 2e10, 1e12, np.inf]), 1e10)
    assert lc[0] == -np.inf and ls[0] == 0.0 and lc[-1] == 0.0 and ls[-1] == -np.inf
    assert np.all(np.isfinite(lc[1:4])) and np.all(np.isfinite(ls[1:4])) and ls[2] < -1e8 and lc[1] < -1e9


@pytest.mark.parametrize("dof", DOFS)
def test_delta_increases_with_a(dof):
    """δ(ε; a) is non-decreasing in a (what the calibration and the PLD at a_max rely on)."""
    a_max = _a_max(1.0, 1e-6, dof)
    grid = np.geomspace(a_max / 100, 2 * a_max, 200)
    for eps in (0.0, 0.25, 1.0, 2.0):
        d = delta_for_epsilon(eps, grid, dof)
        assert d[-1] > 0
        assert np.all(np.diff(d) >= -1e-9 * d[1:]), (dof, eps, np.min(np.diff(d) / np.maximum(d[1:], 1e-300)))


@pytest.mark.parametrize("dof", DOFS)
def test_calibration_is_feasible_and_tight(dof):
    for eps, delta in [(1.0, 1e-6), (0.5, 1e-9)]:
        a_max = _a_max(eps, delta, dof)
        assert worst_delta(eps, a_max, dof) <= delta
        assert worst_delta(eps, 1.01 * a_max, dof) > delta  # no slack left


def _mp_delta_terms(eps: float, a: float, dof: int) -> tuple[float, float]:
    """The two directions of δ(ε; a) from mpmath's tails alone."""
    c = eps + 0.5 * dof * math.log1p(a)
    cp = 0.5 * dof * math.log1p(a) - eps
    d1 = _mp_tail(2 * c / a, dof, False) - math.exp(eps) * _mp_tail(2 * (1 + a) * c / a, dof, False)
    d2 = _mp_tail(2 * (1 + a) * cp / a, dof, True) - math.exp(eps) * _mp_tail(2 * cp / a, dof, True)
    return d1, d2


@pytest.mark.parametrize("dof", [10**8, 10**10])
def test_calibrated_a_max_against_an_mpmath_profile(dof):
    """Feasible and tight under a profile that does not use the module's tails (the old code left δ ≈ 1.5e-7)."""
    eps, delta = 1.0, 1e-6
    a_max = _a_max(eps, delta, dof)
    assert max(_mp_delta_terms(eps, a_max, dof)) <= delta * (1 + 1e-9)
    assert max(_mp_delta_terms(eps, 1.01 * a_max, dof)) > delta


def test_pld_add_side_uses_the_accurate_lower_tail():
    """The PLD's P₀-vs-P₁ side (built from the χ² cdf) matches that direction of the closed form at dof 1e10."""
    dof = 10**10
    a = _a_max(1.0, 1e-6, dof)
    pld = chi2_mechanism_pld(a, dof)
    half = 0.5 * dof * math.log1p(a)
    for eps in (1.0, 1.5):
        cp = half - eps
        d2 = float(_tail_excess(np.array([2 * (1 + a) * cp / a]), np.array([2 * cp / a]), eps, dof, upper=False)[0])
        add = pld._pmf_add.get_delta_for_epsilon(eps)  # dp-accounting keeps no public accessor for one side
        assert d2 <= add <= 1.05 * d2  # pessimistic and tight (the old code gave 1.5e-12 for 8.8e-12 at ε = 1.5)
