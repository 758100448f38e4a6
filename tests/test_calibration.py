"""Regression error bars on tables nobody tuned on: calibrated, or honestly refused (no Spark, seeded).

A fast, derandomised subset of benchmarks/calibration.py: a synthetic
near-collinear design and a real public table (statsmodels' ``fair``: age,
years married and children correlated 0.67-0.89), released through the
library's own mechanism, fit and interval code (tests/_calibration.py);
statsmodels' ``randhie`` for ``psd`` releases (drawn without the projection)
and a well-conditioned synthetic design that must not be called conservative.
"""

from __future__ import annotations

import numpy as np
import pytest

from spark_dp.release.release import NoUncertaintyError, Release
from spark_dp.report.report import uncertainty_section
from spark_dp.second_moment._scaling import Scaling
from spark_dp.second_moment.adassp import adassp, adassp_plan
from spark_dp.second_moment.uncertainty import adassp_uncertainty
from tests._calibration import MECHANISMS, cell
from tests._samplers import FakeChokepoint


def _collinear(n: int, seed: int = 0):
    """x2 = x1 + a little noise (correlation 0.9995), bounds as a user would set them, the vector and its map."""
    rng = np.random.default_rng(seed)
    x1 = rng.uniform(0.0, 10.0, n)
    x2 = np.clip(x1 + rng.normal(0.0, 0.3, n), 0.0, 10.0)
    y = np.clip(2.0 + 3.0 * x1 + 1.0 * x2 + rng.normal(0.0, 2.0, n), 0.0, 60.0)
    bounds = {"x1": (0.0, 10.0), "x2": (0.0, 10.0), "y": (0.0, 60.0)}
    scaling = Scaling.of(["x1", "x2", "y"], bounds, constant_at=2)
    rows = np.column_stack([x1, x2, np.ones(n), y])
    vec = rows @ np.linalg.inv(scaling.transform()).T
    truth = np.linalg.lstsq(rows[:, :3], y, rcond=None)[0]  # x1, x2, intercept (AdaSSP covers the noise only)
    return vec.T @ vec, scaling, truth


@pytest.mark.parametrize("n, epsilon", [(20_000, 1.0), (100_000, 1.0)])
def test_adassp_on_a_collinear_design_covers_or_refuses(n, epsilon):
    """Before: intervals centred on 2-step iterated Tikhonov kept the adaptive ridge's bias (coverage far below 0.9).
    Since then the generalised Fieller interval of AdaSSP's exact pivot (kind interval; the ridge's bias does not
    enter it), the bias-bounded bootstrap (kind bound) only where the Fieller set is unbounded."""
    gram, scaling, truth = _collinear(n)
    plan = adassp_plan(epsilon=epsilon, delta=1e-6, norm_bound=2.0)
    hits = stated = refused = 0
    reps = 40 if n == 20_000 else 20  # (the Fieller interval's profile takes about 0.2 s a release)
    for r in range(reps):
        res = adassp(gram, chokepoint=FakeChokepoint.seeded(r), plan=plan)
        lam = float(res["lambda"][0])
        assert lam > 0  # the case at issue: the adaptive ridge is on
        u = adassp_uncertainty(res["xtx"], res["xty"], res["coefficients"], plan.sigmas, 0.95, ridge=lam,
                               adaptive=lam, rho=plan.rho, scaling=scaling, rng=np.random.default_rng(r))
        c, i = u["coefficients"], u["intercept"]
        assert c.kind == i.kind and c.kind in ("interval", "bound", "none"), c.kind
        if c.kind == "interval":  # after a ridge, only the Fieller interval, which does not use it
            assert "generalised Fieller" in c.method, c.method
        if c.kind == "none":
            refused += 1
            assert np.isnan(c.low).all() and c.stderr is None and "cannot be bounded" in c.method
            continue
        low, high = np.append(c.low, i.low), np.append(c.high, i.high)
        hits += int(np.sum((low <= truth) & (truth <= high)))
        stated += truth.size
    if n == 20_000:
        assert refused == reps  # the private lower bound on lambda_min is 0: nothing can be shown to hold
    else:
        assert refused == 0 and hits / stated >= 0.9, (refused, hits, stated)  # 20 releases x 3 terms


def test_adassp_on_a_real_collinear_table_covers_or_refuses():
    """statsmodels' ``fair`` (6,366 rows, 8 features), eps = 1: before, per-term coverage down to 0.xx."""
    got = cell("fair", "AdaSSP", "adassp", "none", epsilon=1.0, reps=20, draws=400)
    assert set(got.kinds) <= {"bound", "none", "interval"}
    if got.refused < 1.0:
        assert got.worst >= 0.9, got
    assert got.refused == 1.0 or "bound" in got.kinds or "interval" in got.kinds


@pytest.mark.parametrize("label, mechanism, post", [(a, b, c) for a, b, c, _ in MECHANISMS])
def test_stderr_agrees_with_the_interval(label, mechanism, post):
    """stderr <= 2 x half-width / z for every mechanism on a real table (before: up to 500x on collinear ones)."""
    # AdaSSP refuses on this table up to eps = 4 (nothing to compare): its bias-bounded intervals on randhie
    table = "randhie" if mechanism == "adassp" else "fair"
    got = cell(table, label, mechanism, post, epsilon=1.0, reps=3, draws=400, seed=1)
    assert got.refused < 1.0, got
    assert got.stderr_ratio <= 2.0, (label, got.stderr_ratio)


def test_a_refused_interval_prints_no_numbers():
    from spark_dp.second_moment.uncertainty import no_interval

    u = no_interval((2,), "no interval: the reason")
    rel = Release(release_id="r1", arrays={"coefficients": np.array([1.0, 2.0])},
                  manifest={"uncertainty": {"level": 0.95, "arrays": {"coefficients": u.describe()}}},
                  path=None, uncertainty={"coefficients": u})
    with pytest.raises(NoUncertaintyError, match="has no interval: no interval: the reason"):
        rel.interval("coefficients")
    with pytest.raises(NoUncertaintyError, match="the reason"):
        rel.stderr("coefficients")
    text = "\n".join(uncertainty_section(rel))
    assert "Refused: no interval: the reason" in text and "| entry |" not in text
    assert u.describe()["kind"] == "none"


@pytest.mark.parametrize("label, mechanism, post", [("Wishart", "wishart", "none"), ("JL, psd", "jl_ridge", "psd"),
                                                    ("Analyze Gauss", "analyze_gauss", "none")])
def test_a_user_ridge_gets_an_interval_without_its_bias(label, mechanism, post):
    """A user ridge of 2,000 (scaled units) on randhie: the ridge fit is biased; the interval covers the truth."""
    got = cell("randhie", label, mechanism, post, epsilon=1.0, reps=20, draws=400, seed=2, ridge=2_000.0)
    assert got.refused == 0.0 and got.worst >= 0.85, got


def _independent(n: int, seed: int = 0):
    """Two independent uniform features and a label with unit-variance errors: a well-conditioned design."""
    rng = np.random.default_rng(seed)
    x1, x2 = rng.uniform(0.0, 10.0, n), rng.uniform(0.0, 10.0, n)
    y = np.clip(2.0 + 3.0 * x1 - 1.0 * x2 + rng.normal(0.0, 1.0, n), -20.0, 60.0)
    bounds = {"x1": (0.0, 10.0), "x2": (0.0, 10.0), "y": (-20.0, 60.0)}
    return np.column_stack([x1, x2, np.ones(n)]), y, Scaling.of(["x1", "x2", "y"], bounds, constant_at=2)


@pytest.mark.parametrize("label, mechanism, post", [("Analyze Gauss", "analyze_gauss", "none"),
                                                    ("Analyze Gauss, shift", "analyze_gauss", "shift"),
                                                    ("Wishart", "wishart", "none")])
def test_an_interval_the_noise_swamps_says_it_is_conservative(label, mechanism, post):
    """``fair`` at eps = 1: the noise exceeds X^T X's smallest eigenvalue, every interval held (1.00). Before, they
    claimed a calibrated 95 % (kind interval, no word of it); now the method says "conservative" first. Analyze
    Gauss gives the exact pivot's interval (not marked) where that set is bounded, after the shift too (of the
    release less its shift, where the shift's bias cannot be bounded): in one release of the eight here, whose
    interval held too."""
    got = cell("fair", label, mechanism, post, epsilon=1.0, reps=8, draws=400, seed=3)
    assert got.refused == 0.0 and got.kinds == ("interval",), got
    if mechanism == "analyze_gauss":
        assert 0.5 <= got.conservative < 1.0 and got.worst == 1.0, got
    else:
        assert got.conservative == 1.0 and got.worst == 1.0, got


def test_a_well_conditioned_design_is_not_called_conservative():
    """The flag is not said of every release: 20,000 rows of independent features at eps = 1 are calibrated."""
    got = cell("independent", "Analyze Gauss", "analyze_gauss", "none", epsilon=1.0, reps=40, draws=400, seed=4,
               data=_independent(20_000))
    assert got.conservative == 0.0 and got.worst >= 0.85, got  # 40 releases: a binomial sd of 0.035


def test_psd_intervals_draw_without_the_projection():
    """``randhie`` with ``psd`` (seeded): projected draws clipped the bootstrap's world, whose small eigenvalues
    the release biases low, far more often than the release, and shrank the interval (a term held 0.88 here)."""
    got = cell("randhie", "Analyze Gauss, psd", "analyze_gauss", "psd", epsilon=1.0, reps=60, draws=400, seed=1)
    assert got.refused == 0.0 and got.worst >= 0.9, got


def test_the_sampling_term_says_it_assumes_constant_error_variance():
    """What ``noise+sampling`` (asked for) rests on is said in the method; the default covers the noise only."""
    from spark_dp.second_moment.intervals import regression_intervals
    from spark_dp.second_moment.mechanisms import plan_mechanism
    from spark_dp.second_moment.regression import regression_coefficients

    x, y, scaling = _independent(5_000)
    plan = plan_mechanism("analyze_gauss", d=4, epsilon=1.0, delta=1e-6, norm_bound=2.0)
    vec = np.column_stack([x, y]) @ np.linalg.inv(scaling.transform()).T
    released = plan.noise(vec.T @ vec, FakeChokepoint.seeded(0))
    fit = regression_coefficients(released)[0]
    got = regression_intervals("analyze_gauss", plan.privacy, plan.params, released, fit, scaling=scaling, label_at=3,
                               norm_bound=2.0, fit_intercept=True, draws=200, rng=np.random.default_rng(0),
                               covers="noise+sampling")
    for u in got.values():
        assert u.covers == "noise+sampling" and "errors of constant variance" in u.method, u.method
        assert "42 %" in u.method  # the measured failure of the constant-variance term is said
    got = regression_intervals("analyze_gauss", plan.privacy, plan.params, released, fit, scaling=scaling, label_at=3,
                               norm_bound=2.0, fit_intercept=True, draws=200, rng=np.random.default_rng(0))
    for u in got.values():
        assert u.covers == "noise" and "constant variance" not in u.method, u.method
        assert "16 real tables" in u.method  # the default's measured coverage, not the synthetic harness's


def test_a_jl_interval_without_the_mark_says_what_its_level_is_over():
    """JL's unmarked intervals: in settings where most releases are marked conservative, the few that are not held
    the worst term in 81-86 % of them (benchmarks/jl_mark_boundary.py), a selection by the release's noise that an
    exact interval does not survive either (its ``--tails``). That the level is over a table's releases, with those
    numbers, is said in the method of every unmarked JL interval, and not of a marked one (whose prefix says
    conservative) nor of another mechanism's."""
    from spark_dp.second_moment.intervals import JL_UNMARKED, design_floor, regression_intervals
    from spark_dp.second_moment.mechanisms import plan_mechanism
    from spark_dp.second_moment.regression import regression_coefficients

    def methods(mechanism: str, n: int, data) -> tuple[str, float]:
        x, y, scaling = data
        plan = plan_mechanism(mechanism, d=4, epsilon=1.0, delta=1e-6, norm_bound=2.0)
        vec = np.column_stack([x, y]) @ np.linalg.inv(scaling.transform()).T
        released = plan.noise(vec.T @ vec, FakeChokepoint.seeded(n))
        fit = regression_coefficients(released)[0]
        got = regression_intervals(mechanism, plan.privacy, plan.params, released, fit, scaling=scaling, label_at=3,
                                   norm_bound=2.0, fit_intercept=True, draws=200, rng=np.random.default_rng(0))
        floor, _ = design_floor(mechanism, plan.privacy, plan.params, released, norm_bound=2.0, label_at=3)
        return got["coefficients"].method, floor

    method, floor = methods("jl_ridge", 0, _independent(20_000))
    assert floor > 0 and method.endswith(JL_UNMARKED) and "81-86 %" in method, (floor, method)
    assert "over the releases of a table" in method and "exact pivot held 67-73 %" in method
    method, floor = methods("jl_ridge", 1, _independent(300))
    assert floor <= 0 and method.startswith("conservative") and JL_UNMARKED not in method, (floor, method)
    method, floor = methods("analyze_gauss", 0, _independent(20_000))
    assert JL_UNMARKED not in method
