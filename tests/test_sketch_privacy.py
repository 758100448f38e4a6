"""White-box and black-box privacy audits of the sketch mechanisms.

σ and b are computed independently of the code under test: straight from
``dp_accounting.get_sigma_gaussian`` and the sensitivities stated in the
docstrings (√k·m for CountSketch/Count-Mean, k·m in L1 for Count-Min, m for
the histogram), not through spark_dp's calibration or sensitivity functions.
Each audit is shown to catch a deliberately under-noised sampler.
"""

import math

import dp_accounting
import numpy as np
import pytest

import spark_dp
from spark_dp.aggregates.sketch import sketch_table
from spark_dp.privacy import Budget, Chokepoint, NumpySampler, SecureSampler, SeededSampler, open_ledger
from spark_dp.sketch import plan_sketch, release_table
from spark_dp.sketch.api import count_sketch
from tests._audit import chi2_variance_pvalue, empirical_epsilon, laplace_scale_pvalue
from tests._samplers import UnderNoised

EPS, DELTA = 1.0, 1e-6
Z = dp_accounting.get_sigma_gaussian(EPS, DELTA)


def _release_zero(tmp_path, mechanism, sampler, k, b, m=1, C=None):
    ledger = open_ledger(f"sqlite:///{tmp_path}/audit.db")
    plan = plan_sketch(mechanism, epsilon=EPS, delta=DELTA, repetitions=k, max_items_per_unit=m, unit_l2_bound=C)
    cp = Chokepoint(ledger, dataset_id="audit", release_id=f"r-{mechanism}-{sampler.name}-{id(sampler)}",
                    request_sha256="x", sampler=sampler, limit=Budget(100.0, 1e-5))
    cp.charge(plan.events, plan.budget)
    shape = (b,) if mechanism == "histogram" else (k, b)
    out = release_table(plan, np.zeros(shape), cp)
    assert not cp.unused_events
    return out


GAUSSIAN_CASES = [  # mechanism, k, b, m, C, σ computed independently
    ("private_count_sketch", 5, 30, 1, None, Z * math.sqrt(5)),
    ("private_count_sketch", 3, 50, 4, None, Z * math.sqrt(3) * 4),
    ("private_count_sketch", 3, 50, 4, 2.0, Z * math.sqrt(3) * 2.0),  # per-unit clipping in sketch space
    ("count_mean", 5, 30, 2, None, Z * math.sqrt(5) * 2),
    ("histogram", 1, 150, 3, None, Z * 3),
]


@pytest.mark.parametrize("sampler", [SecureSampler(), NumpySampler(), SeededSampler(np.random.default_rng(7))],
                         ids=["secure", "numpy", "seeded"])
@pytest.mark.parametrize("mechanism, k, b, m, C, sigma", GAUSSIAN_CASES)
def test_white_box_gaussian_noise_has_the_claimed_sigma(tmp_path, sampler, mechanism, k, b, m, C, sigma):
    noise = _release_zero(tmp_path, mechanism, sampler, k, b, m, C)
    assert noise.size == k * b if mechanism != "histogram" else noise.size == b
    assert chi2_variance_pvalue(noise, sigma) > 1e-6
    assert chi2_variance_pvalue(noise, sigma / 2) < 1e-6  # the test has power
    assert chi2_variance_pvalue(noise, sigma * 2) < 1e-6


@pytest.mark.parametrize("sampler", [SecureSampler(), NumpySampler()], ids=["secure", "numpy"])
def test_white_box_count_min_laplace_scale(tmp_path, sampler):
    k, b, m = 4, 50, 2
    noise = _release_zero(tmp_path, "count_min", sampler, k, b, m)
    scale = k * m / EPS
    assert laplace_scale_pvalue(noise, scale) > 1e-6
    assert laplace_scale_pvalue(noise, scale / 2) < 1e-6 and laplace_scale_pvalue(noise, scale * 2) < 1e-6


@pytest.mark.parametrize("mechanism", ["private_count_sketch", "count_min", "histogram"])
def test_white_box_catches_an_under_noised_sampler(tmp_path, mechanism):
    k, b = (1, 200) if mechanism == "histogram" else (4, 50)
    noise = _release_zero(tmp_path, mechanism, UnderNoised(), k, b)
    if mechanism == "count_min":
        assert laplace_scale_pvalue(noise, k / EPS) < 1e-6
    else:
        assert chi2_variance_pvalue(noise, Z * math.sqrt(k)) < 1e-6


def test_white_box_on_the_released_table_of_an_empty_input(spark, tmp_path):
    """End to end through DPSession: an empty input releases pure noise of the claimed σ."""
    df = spark.createDataFrame([], "item string, user string")
    sess = spark_dp.DPSession("audit.empty", ledger=f"sqlite:///{tmp_path}/l.db", epsilon_limit=10.0,
                              delta_limit=1e-5, output=str(tmp_path / "out"), sampler="numpy")
    rel = count_sketch(sess, df, "item", epsilon=EPS, delta=DELTA, repetitions=3, buckets=64,
                       privacy_unit="user", max_rows_per_unit=5)
    sigma = Z * math.sqrt(3) * 5
    assert rel.privacy["noise_sigma"] == pytest.approx(sigma, rel=1e-9)
    assert chi2_variance_pvalue(rel["sketch"], sigma) > 1e-6
    assert chi2_variance_pvalue(rel["sketch"], sigma / 2) < 1e-6


@pytest.fixture(scope="module")
def neighbours(spark):
    """Exact tables of D and D' = D + one unit with m = 3 rows of one item (its items all collide)."""
    k, b, m = 5, 64, 3
    seeds = [101, 202, 303, 404, 505]
    rows = [(f"i{j % 17}", f"u{j % 30}") for j in range(60)]  # 2 rows per unit: bounding keeps them all
    d0 = spark.createDataFrame(rows, "item string, user string")
    d1 = spark.createDataFrame(rows + [("x", "new")] * 3, "item string, user string")
    kw = dict(seeds=seeds, buckets=b, privacy_unit="user", max_items_per_unit=m)
    t0, t1 = sketch_table(d0, "item", **kw), sketch_table(d1, "item", **kw)
    c0 = sketch_table(d0, "item", signed=False, **kw)
    c1 = sketch_table(d1, "item", signed=False, **kw)
    return k, m, t0, t1, c0, c1


def test_neighbouring_tables_differ_by_the_stated_sensitivity(neighbours):
    k, m, t0, t1, c0, c1 = neighbours
    assert np.linalg.norm(t1 - t0) == pytest.approx(math.sqrt(k) * m)  # worst case reached
    assert np.abs(c1 - c0).sum() == pytest.approx(k * m)


def _projections(sampler, plan, t0, t1, n):
    """n releases of M(D) and M(D'), projected on the unit direction of T(D') − T(D).

    Only the counters where the tables differ are drawn: the other coordinates'
    noise is independent of the projection.
    """
    diff = (t1 - t0).reshape(-1)
    idx = np.flatnonzero(diff)
    u = diff[idx] / np.linalg.norm(diff[idx])
    a0, a1 = t0.reshape(-1)[idx], t1.reshape(-1)[idx]
    draw = sampler.gaussian if plan.noise == "gaussian" else sampler.laplace
    x0 = draw(np.tile(a0, n), plan.scale, plan.sensitivity).reshape(n, -1) @ u - a0 @ u
    x1 = draw(np.tile(a1, n), plan.scale, plan.sensitivity).reshape(n, -1) @ u - a0 @ u
    return x0, x1


def test_black_box_private_count_sketch(neighbours):
    k, m, t0, t1, _, _ = neighbours
    plan = plan_sketch("private_count_sketch", epsilon=EPS, delta=DELTA, repetitions=k, max_items_per_unit=m)
    x0, x1 = _projections(NumpySampler(), plan, t0, t1, 300_000)
    assert empirical_epsilon(x0, x1, DELTA) < EPS
    x0, x1 = _projections(UnderNoised(), plan, t0, t1, 300_000)
    assert empirical_epsilon(x0, x1, DELTA) > EPS


def test_black_box_count_min_one_counter(spark):
    """Count-Min with k = 1: one counter moves by m; Laplace b = m/ε must give ε̂ < ε (δ = 0)."""
    m = 3
    rows = [("a", "u1"), ("b", "u2")]
    d0 = spark.createDataFrame(rows, "item string, user string")
    d1 = spark.createDataFrame(rows + [("a", "new")] * 5, "item string, user string")  # bounded to m rows
    kw = dict(seeds=[9], buckets=8, signed=False, privacy_unit="user", max_items_per_unit=m)
    c0, c1 = sketch_table(d0, "item", **kw), sketch_table(d1, "item", **kw)
    assert np.abs(c1 - c0).sum() == m
    plan = plan_sketch("count_min", epsilon=EPS, delta=DELTA, repetitions=1, max_items_per_unit=m)
    x0, x1 = _projections(NumpySampler(), plan, c0, c1, 300_000)
    assert empirical_epsilon(x0, x1, 0.0) < EPS
    x0, x1 = _projections(UnderNoised(), plan, c0, c1, 300_000)
    assert empirical_epsilon(x0, x1, 0.0) > EPS


@pytest.mark.parametrize("sampler, scale", [(NumpySampler(), 1.0), (UnderNoised(), 0.5)], ids=["numpy", "halved"])
def test_white_box_dyadic_stack(tmp_path, sampler, scale):
    """The (L, k, b) dyadic stack is one Gaussian release with σ = z·√(L·k)·m."""
    from spark_dp.sketch import private_count_sketch
    from spark_dp.sketch.dyadic import plan_dyadic

    L, k, b, m = 4, 3, 20, 2
    plan = plan_dyadic(epsilon=EPS, delta=DELTA, repetitions=k, levels=L, max_items_per_unit=m)
    cp = Chokepoint(open_ledger(f"sqlite:///{tmp_path}/a.db"), dataset_id="audit", release_id="dy", request_sha256="x",
                    sampler=sampler, limit=Budget(100.0, 1e-5))
    cp.charge(plan.events, plan.budget)
    noise = private_count_sketch(np.zeros((L, k, b)), chokepoint=cp, sigma=plan.scale, sensitivity=plan.sensitivity)
    sigma = Z * math.sqrt(L * k) * m
    if scale == 1.0:
        assert chi2_variance_pvalue(noise, sigma) > 1e-6 and chi2_variance_pvalue(noise, sigma / 2) < 1e-6
    else:
        assert chi2_variance_pvalue(noise, sigma) < 1e-6
