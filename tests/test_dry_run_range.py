"""The dry run's regression figures against releases: the measured factors, the interval kinds and thresholds.

* The factors the dry run states (``REALISTIC_FACTORS``, measured by benchmarks/dry_run_range.py on the ten
  calibration tables with seeds from 1,000) cover a fresh release on a table the benchmark never saw (the made-up
  customers of docs/your_own_table.md, another draw of them) with other seeds, for every mechanism.
* When the dry run says an interval is marked conservative (Analyze Gauss, Wishart) or refused (AdaSSP), a
  release of a design on the far side of that threshold is, and one well inside it is not.
* AdaSSP's threshold counts the constant column, as the algorithm does: a release whose private λ_min bound is 0
  takes its adaptive ridge equal to the threshold the dry run states.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from spark_dp.second_moment._scaling import Scaling
from tests._dry_run_range import MECHANISMS, best_case, design_factor, observed, ratios, session

BOUNDS = {"age": (18.0, 100.0), "income": (0.0, 500.0), "tenure": (0.0, 50.0), "spend": (0.0, 2000.0)}
FEATURES = ("age", "income", "tenure")


def _customers(seed: int, n: int = 20_000):
    """The made-up customers of docs/your_own_table.md (another seed): (x with the constant, y, scaling)."""
    rng = np.random.default_rng(seed)
    age = rng.integers(18, 90, n).astype(float)
    income = np.round(rng.gamma(4.0, 15.0, n), 1)
    tenure = rng.integers(0, 30, n).astype(float)
    spend = np.clip(200 + 4 * age + 2.5 * income + 8 * tenure + rng.normal(0, 80, n), 0, 2000)
    x = np.column_stack([age, income, tenure, np.ones(n)])
    return x, spend, Scaling.of([*FEATURES, "spend"], BOUNDS, constant_at=3)


@pytest.fixture(scope="module")
def dp(spark, tmp_path_factory):
    return session(str(tmp_path_factory.mktemp("dry-range")))


def test_the_stored_factors_cover_a_fresh_release_on_a_table_the_benchmark_never_saw(spark, dp):
    from spark_dp.release.preview import REALISTIC_FACTORS

    data = _customers(seed=11)
    seen = {}
    for key, _, _ in MECHANISMS:
        got = ratios(dp, spark, "customers", key, 1.0, seed=77, data=data, features=FEATURES, label="spend",
                     bounds=BOUNDS, draws=1000)
        f = REALISTIC_FACTORS[key]
        if got["ratios"] is None:  # AdaSSP may refuse its intervals; the dry run states how often that happened
            assert key == "adassp" and f["refused"] > 0
            continue
        for term, r in got["ratios"].items():
            assert f["min"] <= r <= f["max"], (key, term, r, f)
        seen[key] = got["ratios"]
    assert {"analyze_gauss", "wishart"} <= set(seen)
    # the factor grows like c/s^2: the worst term within 0.9-9.5 c/s^2 on the benchmark's tables (the dry run's words)
    worst = max(seen["analyze_gauss"].values()) / design_factor(data)["c_over_s2"]
    assert 0.5 < worst < 10


def _design(n: int, s2: float, seed: int):
    """A design of two bounded features whose mean scaled row x x^T (constant included) has smallest eigenvalue
    about ``s2``: x2 = x1 + a small independent part, both in [-1, 1]; y = x1 + x2 + noise in [-5, 5]."""
    rng = np.random.default_rng(seed)
    bounds = {"x1": (-1.0, 1.0), "x2": (-1.0, 1.0), "y": (-5.0, 5.0)}
    x1 = rng.uniform(-0.9, 0.9, n)
    u = rng.uniform(-1.0, 1.0, n)
    lo, hi = 0.0, 1.0
    for _ in range(60):  # the mixing weight that gives s2 (the smallest eigenvalue grows with it)
        w = (lo + hi) / 2
        x = np.column_stack([x1, np.clip((1 - w) * x1 + w * u, -1, 1), np.ones(n)])
        got = np.linalg.eigvalsh(x.T @ x / n)[0]
        lo, hi = (w, hi) if got < s2 else (lo, w)
    y = np.clip(x[:, 0] + x[:, 1] + rng.normal(0, 0.5, n), -5, 5)
    return x, y, Scaling.of(["x1", "x2", "y"], bounds, constant_at=2), bounds


@pytest.mark.parametrize("mechanism", ["analyze_gauss", "wishart"])
def test_marked_conservative_where_the_dry_run_says_and_not_well_inside(spark, dp, mechanism):
    df = spark.createDataFrame([], "x1 DOUBLE, x2 DOUBLE, y DOUBLE")

    def preview(n):
        return dp.preview.linear_regression(df, ["x1", "x2"], "y", epsilon=1.0, delta=1e-6, mechanism=mechanism,
                                            n=n, bounds={"x1": (-1.0, 1.0), "x2": (-1.0, 1.0), "y": (-5.0, 5.0)})

    t = preview(1_000).accuracy["intervals"]["conservative_when"]["lambda_min_at_most"]
    n = max(5_000, math.ceil(4 * t / 0.2))  # 4 T / n must be a reachable s^2 (at most about 0.27 here)
    p = preview(n)
    iv = p.accuracy["intervals"]
    assert iv["conservative_when"]["s2_at_most_at_n"] == pytest.approx(t / n)
    assert iv["kinds"] == {"coefficients": ["interval"], "intercept": ["interval"]}
    assert any(line.startswith(f"Marked conservative at n = {n:,} when s^2 <= ") for line in iv["summary"])
    if mechanism == "analyze_gauss":  # the exact pivot's set is unbounded about when lambda_min <= sqrt(2) z sigma
        assert t == pytest.approx(math.sqrt(2) * 1.959963984540054 * p.noise_scale)
    for factor, conservative in ((4.0, False), (0.25, True)):
        x, y, scaling, _ = _design(n, factor * t / n, seed=3)
        assert np.linalg.eigvalsh(x.T @ x / n)[0] == pytest.approx(factor * t / n, rel=0.01)
        for seed in (5, 6):
            got = observed((x, y, scaling), ("x1", "x2"), mechanism, "none", 1.0, seed, draws=200)
            assert got["kind"] == "interval" and got["conservative"] is conservative, (factor, seed)


def test_after_the_shift_bound_pivot_or_conservative_where_the_dry_run_says(spark, dp):
    """Analyze Gauss with ``shift`` and bounds, noise only: kind bound where the release's lower bound on lambda_min
    clears 0 (the ridge's bias bounded); below it the exact pivot's interval of the unregularised fit, not marked;
    marked conservative only where that set is unbounded (about lambda_min <= sqrt(2) z sigma). The dry run states
    both thresholds."""
    n = 20_000
    df = spark.createDataFrame([], "x1 DOUBLE, x2 DOUBLE, y DOUBLE")
    p = dp.preview.linear_regression(df, ["x1", "x2"], "y", epsilon=1.0, delta=1e-6, mechanism="analyze_gauss",
                                     postprocess="shift", n=n,
                                     bounds={"x1": (-1.0, 1.0), "x2": (-1.0, 1.0), "y": (-5.0, 5.0)})
    iv = p.accuracy["intervals"]
    t, bound_t = iv["conservative_when"]["lambda_min_at_most"], iv["bound_when"]["lambda_min_above"]
    assert t == pytest.approx(math.sqrt(2) * 1.959963984540054 * p.noise_scale) and 2 * t < bound_t
    assert iv["kinds"]["coefficients"] == ["bound", "interval"] and "exact Gaussian pivot" in iv["rule"]
    assert any(line.startswith(f"Marked conservative at n = {n:,} when s^2 <= ") for line in iv["summary"])
    for lam, kind, conservative in ((4.0 * bound_t, "bound", False), (math.sqrt(t * bound_t), "interval", False),
                                    (t / 4.0, "interval", True)):
        x, y, scaling, _ = _design(n, lam / n, seed=3)
        for seed in (5, 6):
            got = observed((x, y, scaling), ("x1", "x2"), "analyze_gauss", "shift", 1.0, seed, draws=200)
            assert (got["kind"], got["conservative"]) == (kind, conservative), (lam, t, bound_t, seed, got)


def test_adassp_refused_bound_and_fieller_where_the_dry_run_says(spark, dp):
    """Refused below the dry run's refusal threshold; between it and the Fieller threshold the generalised Fieller
    interval or, where it is unbounded, the bias bound; above it the Fieller interval."""
    n = 5_000
    df = spark.createDataFrame([], "x1 DOUBLE, x2 DOUBLE, y DOUBLE")
    p = dp.preview.linear_regression(df, ["x1", "x2"], "y", epsilon=1.0, delta=1e-6, mechanism="adassp", n=n,
                                     bounds={"x1": (-1.0, 1.0), "x2": (-1.0, 1.0), "y": (-5.0, 5.0)})
    iv = p.accuracy["intervals"]
    refused, bound = iv["refused_when"]["lambda_min_below"], iv["bound_when"]["lambda_min_below"]
    assert iv["covers"] == "noise" and "p = 3 columns of X^T X, the constant included" in iv["rule"]
    assert refused < bound and iv["kinds"]["coefficients"] == ["none", "interval", "bound"]
    for lam, kinds in ((refused / 4, {"none"}), (bound, {"bound", "interval"}),
                       (4 * bound, {"interval"})):
        x, y, scaling, _ = _design(n, lam / n, seed=4)
        got = observed((x, y, scaling), ("x1", "x2"), "adassp", "none", 1.0, 8, draws=200)
        assert got["kind"] in kinds, (lam, refused, bound, got["kind"])


def test_adassp_threshold_counts_the_constant_column_as_the_algorithm_does(spark, tmp_path):
    """40 rows: λ_min far below the noise, so the private lower bound is 0 and the adaptive ridge the release takes
    is exactly σ₂√(p ln(2p²/ρ)), p the columns of its X^T X (the constant's included): the dry run's
    ``adaptive_ridge_when − refused_when``. A release through the API with an intercept; without one (raw rows, p = 2),
    the algorithm on the same Gram matrix the release would hand it."""
    from spark_dp.privacy import SeededSampler
    from spark_dp.second_moment.adassp import adassp, adassp_plan
    from tests._samplers import FakeChokepoint

    dp = session(str(tmp_path), sampler=SeededSampler(np.random.default_rng(3)))
    rng = np.random.default_rng(2)
    rows = rng.uniform(-1, 1, (40, 2))
    rows = np.column_stack([rows, rows.sum(axis=1) / 2])
    df = spark.createDataFrame([tuple(map(float, r)) for r in rows], "x1 DOUBLE, x2 DOUBLE, y DOUBLE")
    kw = dict(epsilon=1.0, delta=1e-6, mechanism="adassp")
    bounds = {"x1": (-1.0, 1.0), "x2": (-1.0, 1.0), "y": (-1.0, 1.0)}

    def threshold(**more):
        iv = dp.preview.linear_regression(df, ["x1", "x2"], "y", **kw, **more).accuracy["intervals"]
        return iv["adaptive_ridge_when"]["lambda_min_below"] - iv["refused_when"]["lambda_min_below"]

    rel = dp.linear_regression(df, ["x1", "x2"], "y", bounds=bounds, **kw)
    assert float(rel["lambda"][0]) == pytest.approx(threshold(bounds=bounds), rel=1e-9)
    plan = adassp_plan(epsilon=1.0, delta=1e-6, norm_bound=2.0)
    got = adassp(rows.T @ rows, chokepoint=FakeChokepoint.seeded(4), plan=plan)  # rows within B = 2: not clipped
    assert float(got["lambda"][0]) == pytest.approx(threshold(norm_bound=2.0, fit_intercept=False), rel=1e-9)


def test_best_case_is_what_the_dry_run_prints(spark, dp):
    """The harness reads the dry run's own best case (data units, per term) at the n asked for."""
    got = best_case(dp, spark, FEATURES, "spend", BOUNDS, "analyze_gauss", "none", 1.0, 20_000)
    assert list(got) == [*FEATURES, "intercept"] and all(v > 0 for v in got.values())


def test_a_ridge_without_the_constant_column_gives_the_unregularised_fits_pivot_as_the_dry_run_says():
    """Raw rows through the origin after ``shift``: nothing bounds the ridge's bias (no row count), so the release
    gives the interval of the unregularised fit of the release less its shift: the exact pivot's (not marked) for a
    well-spread design, the bootstrap's marked conservative where that is unbounded; the dry run says so, with the
    pivot's threshold."""
    from spark_dp.release.preview import predict_accuracy
    from spark_dp.second_moment.intervals import regression_intervals
    from spark_dp.second_moment.mechanisms import plan_mechanism
    from spark_dp.second_moment.regression import regression_coefficients
    from tests._samplers import FakeChokepoint

    plan = plan_mechanism("analyze_gauss", d=3, epsilon=1.0, delta=1e-6, norm_bound=1.0, postprocess="shift")
    request = {"dimension": 3, "norm_bound": 1.0, "params": {"postprocess": "shift"}, "delta": 1e-6}
    iv = predict_accuracy("linear_regression", "analyze_gauss", request, plan.privacy, n=20_000)["intervals"]
    t = iv["conservative_when"]["lambda_min_at_most"]
    assert t == pytest.approx(math.sqrt(2) * 1.959963984540054 * float(plan.privacy["noise_scale"]))
    assert iv["kinds"] == {"coefficients": ["interval"]} and "exact pivot" in iv["summary"][0]

    def release(lam_min: float | None, seed: int):
        rng = np.random.default_rng(seed)
        x = rng.uniform(-0.5, 0.5, (20_000, 2))  # lambda_min of X^T X about 1,700, far above the noise (sigma 4.2)
        if lam_min is not None:  # x2 = x1 + a u: lambda_min about a^2 (sum of u^2) / 2, nearly collinear
            x[:, 1] = x[:, 0] + x[:, 1] * math.sqrt(2.0 * lam_min / float(x[:, 1] @ x[:, 1]))
            assert np.linalg.eigvalsh(x.T @ x)[0] == pytest.approx(lam_min, rel=0.2)
        vec = np.column_stack([x, x @ np.array([0.3, -0.2]) + rng.normal(0, 0.05, len(x))])
        released = plan.noise(vec.T @ vec, FakeChokepoint.seeded(seed + 1))
        fit = regression_coefficients(released)[0]
        return regression_intervals("analyze_gauss", plan.privacy, plan.params, released, fit,
                                    scaling=Scaling(("x1", "x2", "y"), (None,) * 3), label_at=2, norm_bound=1.0,
                                    fit_intercept=False, draws=200, rng=np.random.default_rng(7))["coefficients"]

    for seed in (5, 6):
        well = release(None, seed)
        assert well.kind == "interval" and not well.method.startswith("conservative"), well.method
        assert "unregularised fit" in well.method and "exact pivot this is" in well.method, well.method
        near = release(t / 4, seed)
        assert near.kind == "interval" and near.method.startswith("conservative"), near.method
