"""The chokepoint: nothing is drawn that was not charged first."""

import numpy as np
import pytest

from spark_dp.privacy import (
    Budget,
    Chokepoint,
    EpsilonDeltaEvent,
    GaussianEvent,
    LaplaceEvent,
    SeededSampler,
    UnchargedNoiseError,
    compose_epsilon,
    open_ledger,
)
from tests._audit import chi2_variance_pvalue


def _cp(tmp_path, rid="r"):
    return Chokepoint(open_ledger(f"{tmp_path}/l.db"), dataset_id="ds", release_id=rid, request_sha256="x",
                      sampler=SeededSampler(np.random.default_rng(1)), limit=Budget(50.0, 1e-5))


def test_noise_before_charge_is_refused(tmp_path):
    cp = _cp(tmp_path)
    with pytest.raises(UnchargedNoiseError):
        cp.gaussian(np.zeros(3), sigma=1.0, l2_sensitivity=1.0)
    assert open_ledger(f"{tmp_path}/l.db").lookup("r") is None


def test_each_charged_event_covers_one_draw(tmp_path):
    cp = _cp(tmp_path)
    cp.charge([GaussianEvent(4.0), LaplaceEvent(2.0)], Budget(1.0, 1e-6))
    with pytest.raises(UnchargedNoiseError):  # less noise than charged
        cp.gaussian(np.zeros(3), sigma=3.0, l2_sensitivity=1.0)
    cp.gaussian(np.zeros(3), sigma=8.0, l2_sensitivity=2.0)
    with pytest.raises(UnchargedNoiseError):  # used up
        cp.gaussian(np.zeros(3), sigma=8.0, l2_sensitivity=2.0)
    lap = cp.laplace(np.zeros(2000), scale=2.0, l1_sensitivity=1.0)
    assert np.mean(np.abs(lap)) == pytest.approx(2.0, rel=0.1)
    assert cp.unused_events == []


def test_randomness_needs_the_exact_charged_event(tmp_path):
    cp = _cp(tmp_path)
    ev = EpsilonDeltaEvent(0.5, 1e-7, "wishart")
    cp.charge([ev], Budget(0.5, 1e-7))
    with pytest.raises(UnchargedNoiseError):
        cp.randomness(EpsilonDeltaEvent(0.4, 1e-7, "wishart"))
    sampler = cp.randomness(ev)
    g = sampler.standard_normal(200)
    assert chi2_variance_pvalue(g, 1.0) > 1e-6


def test_symmetric_noise_is_mirrored_upper_triangle(tmp_path):
    cp = _cp(tmp_path)
    cp.charge([GaussianEvent(1.0)], Budget(1.0, 1e-6))
    out = cp.gaussian_symmetric(np.zeros((5, 5)), sigma=1.0, l2_sensitivity=1.0)
    assert np.array_equal(out, out.T) and np.all(out[np.triu_indices(5)] != 0)


def test_charge_twice_is_refused(tmp_path):
    cp = _cp(tmp_path)
    cp.charge([GaussianEvent(1.0)], Budget(1.0, 1e-6))
    with pytest.raises(RuntimeError):
        cp.charge([GaussianEvent(1.0)], Budget(1.0, 1e-6))


def test_epsilon_delta_events_compose_through_pld():
    ev = EpsilonDeltaEvent(0.5, 1e-7, "wishart")
    alone = compose_epsilon([ev], 1e-7)
    assert alone == pytest.approx(0.5, abs=1e-3)
    both = compose_epsilon([ev, ev], 2e-7)
    assert 0.5 < both <= 1.0 + 1e-6  # never worse than basic composition


def test_chi2_profile_event_composes_tighter_than_its_epsilon_delta_point():
    from spark_dp.privacy import Chi2ProfileEvent
    from spark_dp.privacy.chi2_profile import calibrate_a_max
    from spark_dp.privacy.events import events_from_json, events_to_json

    a_max = calibrate_a_max(1.0, 1e-6, 400)
    ev = Chi2ProfileEvent(a_max=a_max, dof=400, mechanism="jl_ridge")
    assert events_from_json(events_to_json([ev])) == [ev]
    alone = compose_epsilon([ev], 1e-6)
    assert alone == pytest.approx(1.0, abs=1e-3)  # the profile's own point (PLD rounding errs up)
    ten = compose_epsilon([ev] * 10, 1e-5)
    basic = compose_epsilon([EpsilonDeltaEvent(1.0, 1e-6)] * 10, 1e-5)
    assert ten < 0.5 * basic
    # order and grouping of identical events do not change the total
    mixed = [ev, GaussianEvent(4.0), ev]
    assert compose_epsilon(mixed, 1e-5) == pytest.approx(compose_epsilon([GaussianEvent(4.0), ev, ev], 1e-5), rel=1e-9)
