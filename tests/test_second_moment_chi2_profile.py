"""The exact χ² privacy profile of the JL-with-ridge and inverse-Wishart mechanisms.

The closed form δ(ε; a) is checked against a Monte Carlo estimate of the
hockey-stick divergence computed from the *log densities* of the actual
release distributions (scipy's Wishart / inverse-Wishart logpdf on real
neighbouring scale matrices), i.e. independently of the derivation.
"""

import math

import numpy as np
import pytest
from scipy import stats

from spark_dp.privacy.chi2_profile import (
    add_remove_target,
    calibrate_a_max,
    delta_for_epsilon,
    tail_bound_a_max,
    worst_delta,
)


def test_numbers_of_the_note():
    a_max = calibrate_a_max(1.0, 1e-6, 400)
    assert 1 / a_max == pytest.approx(65.3, abs=0.1)  # w² = 65.3·B²
    assert 1 / tail_bound_a_max(1.0, 1e-6, 400) == pytest.approx(89.3, abs=0.1)
    assert delta_for_epsilon(0.5, 0.05, 400)[0] == pytest.approx(0.1216, abs=5e-4)


def test_calibration_is_tight_and_worst_case():
    for eps, delta, r in [(1.0, 1e-6, 400), (0.3, 1e-8, 50), (2.0, 1e-5, 10)]:
        a_max = calibrate_a_max(eps, delta, r)
        assert worst_delta(eps, a_max, r) <= delta
        assert worst_delta(eps, a_max * 1.01, r) > delta  # no slack left
        grid = np.linspace(a_max / 1000, a_max, 2000)
        assert np.max(delta_for_epsilon(eps, grid, r)) <= delta * (1 + 1e-9)


def test_replace_uses_group_privacy():
    eps, delta = add_remove_target(1.0, 1e-6, "replace")
    assert eps == 0.5 and delta == pytest.approx(1e-6 / (1 + math.exp(0.5)))
    assert add_remove_target(1.0, 1e-6, "add_remove") == (1.0, 1e-6)


def _neighbours(d, a, rng):
    """Σ₀ (random PD ⪰ I) and v with vᵀΣ₀⁻¹v = a exactly."""
    m = rng.normal(size=(d, d))
    sigma0 = np.eye(d) + m @ m.T
    v = rng.normal(size=d)
    v *= math.sqrt(a / (v @ np.linalg.solve(sigma0, v)))
    return sigma0, sigma0 + np.outer(v, v)


@pytest.mark.parametrize("a, r, eps", [(0.05, 40, 0.2), (0.3, 8, 0.5), (0.02, 200, 0.1)])
def test_monte_carlo_jl_profile_matches_closed_form(a, r, eps):
    rng = np.random.default_rng(11)
    d = 3
    s0, s1 = _neighbours(d, a, rng)
    n = 20_000
    w1 = stats.wishart.rvs(df=r, scale=s1, size=n, random_state=rng)
    w0 = stats.wishart.rvs(df=r, scale=s0, size=n, random_state=rng)
    lp1 = stats.wishart(df=r, scale=s1).logpdf
    lp0 = stats.wishart(df=r, scale=s0).logpdf
    l1 = lp1(np.moveaxis(w1, 0, -1)) - lp0(np.moveaxis(w1, 0, -1))
    l0 = lp0(np.moveaxis(w0, 0, -1)) - lp1(np.moveaxis(w0, 0, -1))
    mc = max(np.mean(np.clip(1 - np.exp(eps - l1), 0, None)), np.mean(np.clip(1 - np.exp(eps - l0), 0, None)))
    closed = delta_for_epsilon(eps, a, r)[0]
    assert closed > 1e-3  # a regime where Monte Carlo can see δ
    assert mc == pytest.approx(closed, rel=0.08)


@pytest.mark.parametrize("a, m, eps", [(0.05, 40, 0.2), (0.3, 8, 0.5)])
def test_monte_carlo_inverse_wishart_profile_matches_closed_form(a, m, eps):
    rng = np.random.default_rng(12)
    d = 3
    s0, s1 = _neighbours(d, a, rng)
    n = 20_000
    x1 = stats.invwishart.rvs(df=m, scale=s1, size=n, random_state=rng)
    x0 = stats.invwishart.rvs(df=m, scale=s0, size=n, random_state=rng)
    lp1 = stats.invwishart(df=m, scale=s1).logpdf
    lp0 = stats.invwishart(df=m, scale=s0).logpdf
    l1 = lp1(np.moveaxis(x1, 0, -1)) - lp0(np.moveaxis(x1, 0, -1))
    l0 = lp0(np.moveaxis(x0, 0, -1)) - lp1(np.moveaxis(x0, 0, -1))
    mc = max(np.mean(np.clip(1 - np.exp(eps - l1), 0, None)), np.mean(np.clip(1 - np.exp(eps - l0), 0, None)))
    assert mc == pytest.approx(delta_for_epsilon(eps, a, m)[0], rel=0.08)


def test_monte_carlo_detects_a_wrong_profile():
    """The comparison has power: the profile at the wrong r (or a) is rejected."""
    rng = np.random.default_rng(13)
    a, r, eps = 0.05, 40, 0.2
    s0, s1 = _neighbours(3, a, rng)
    w1 = stats.wishart.rvs(df=r, scale=s1, size=20_000, random_state=rng)
    lp1, lp0 = stats.wishart(df=r, scale=s1).logpdf, stats.wishart(df=r, scale=s0).logpdf
    l1 = lp1(np.moveaxis(w1, 0, -1)) - lp0(np.moveaxis(w1, 0, -1))
    mc = np.mean(np.clip(1 - np.exp(eps - l1), 0, None))
    assert mc != pytest.approx(delta_for_epsilon(eps, a, r // 2)[0], rel=0.08)
    assert mc != pytest.approx(delta_for_epsilon(eps, a / 2, r)[0], rel=0.08)


def test_pld_representation_matches_profile_and_composes_tighter():
    from dp_accounting.pld import common
    from dp_accounting.pld import privacy_loss_distribution as pld_lib

    from spark_dp.privacy.chi2_profile import chi2_mechanism_pld

    a = calibrate_a_max(1.0, 1e-6, 400)
    pld = chi2_mechanism_pld(a, 400)
    eps = pld.get_epsilon_for_delta(1e-6)
    assert 1.0 <= eps < 1.0 + 1e-3  # pessimistic, and tight
    for e in (0.5, 1.5):
        assert pld.get_delta_for_epsilon(e) == pytest.approx(delta_for_epsilon(e, a, 400)[0], rel=0.05)
    # the pair at a_max dominates smaller a: δ(ε; a) increases with a at every ε
    grid = np.linspace(a / 50, a, 60)
    for e in (0.0, 0.25, 1.0, 2.0):
        assert np.all(np.diff(delta_for_epsilon(e, grid, 400)) >= -1e-15)
    # composing 10 releases: the profile's PLD vs the bare (ε, δ) point
    comp, point = pld, pld_lib.from_privacy_parameters(common.DifferentialPrivacyParameters(1.0, 1e-6),
                                                         value_discretization_interval=1e-4)
    comp_point = point
    for _ in range(9):
        comp, comp_point = comp.compose(pld), comp_point.compose(point)
    assert comp.get_epsilon_for_delta(1e-5) < 0.4 * comp_point.get_epsilon_for_delta(1e-5)
