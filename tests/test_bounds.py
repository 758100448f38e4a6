"""Public bounds, the intercept and norm_bound="auto" through the API on Spark (issue #14 §1).

Noise-free (a zero sampler; releases marked not private): with bounds, the
regression's intercept and coefficients equal numpy's OLS with an intercept
on the clamped data, in the data's units; the second moment and PCA come
back in the data's units; NaN rows follow the nonfinite policy exactly as
without bounds. ``auto`` charges its quantile as an event of the same
release. Bad requests fail before any charge. The vector expression's JVM
cost does not grow with the number of bounded columns.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from spark_dp.aggregates import _vectors as V
from spark_dp.errors import ConfigError
from spark_dp.privacy import NumpySampler, SeededSampler
from spark_dp.second_moment import api
from spark_dp.session import DPSession
from tests.test_driver_cost import _wide, py4j_calls

BOUNDS = {"a": (0.0, 5.0), "b": (10.0, 30.0), "y": (-30.0, 30.0)}


class Zero(SeededSampler):
    """No noise (exactness tests only; not private)."""

    def gaussian(self, values, sigma, l2_sensitivity):
        return np.asarray(values, dtype=np.float64).copy()


def bounded_rows(n: int = 400) -> tuple[np.ndarray, np.ndarray]:
    """[a, b] inside BOUNDS and y = 3 + 2a − b/2 + noise, with row 0's a clamped, row 1's b NaN, row 2's y clamped."""
    rng = np.random.default_rng(4)
    X = rng.uniform([0, 10], [5, 30], size=(n, 2))
    y = 3 + 2 * X[:, 0] - 0.5 * X[:, 1] + rng.normal(0, 1, n)
    X[0, 0], X[1, 1], y[2] = 50.0, np.nan, -99.0  # out of bounds (clamped), NaN (dropped), label clamped
    return X, y


@pytest.fixture(scope="module")
def data(spark):
    X, y = bounded_rows()
    pdf = pd.DataFrame({"a": X[:, 0], "b": X[:, 1], "y": y})
    return spark.createDataFrame(pdf).cache(), X, y


def _session(tmp_path, sampler):
    return DPSession("t.bounds", ledger=f"sqlite:///{tmp_path}/ledger.db", epsilon_limit=50.0, delta_limit=1e-3,
                     output=str(tmp_path / "rel"), sampler=sampler)


def _clamped(X, y):
    keep = ~np.isnan(X).any(axis=1)
    Xc = np.column_stack([np.clip(X[:, 0], 0, 5), np.clip(X[:, 1], 10, 30)])[keep]
    return Xc, np.clip(y, -30, 30)[keep]


def test_regression_with_bounds_is_ols_with_intercept_in_data_units(data, tmp_path):
    df, X, y = data
    s = _session(tmp_path, Zero())
    rel = api.linear_regression(s, df, ["a", "b"], "y", epsilon=1.0, delta=1e-6, bounds=BOUNDS)
    Xc, yc = _clamped(X, y)
    ols = np.linalg.lstsq(np.column_stack([Xc, np.ones(len(yc))]), yc, rcond=None)[0]
    assert np.allclose(rel["coefficients"], ols[:2], rtol=1e-9) and np.allclose(rel["intercept"], ols[2:], rtol=1e-9)
    full = np.column_stack([Xc, np.ones(len(yc)), yc])
    assert np.allclose(rel["matrix"], full.T @ full, rtol=1e-9)
    assert rel.privacy["norm_bound"] == pytest.approx(2.0)  # √(2 features + constant + label), nothing clipped
    assert rel.manifest["scaling"]["bounds"] == {k: list(v) for k, v in BOUNDS.items()}
    u = rel.uncertainty["coefficients"]
    assert u.covers == "noise" and "exact Gaussian pivot" in u.method and u.low.shape == (2,)  # the default
    assert "constant variance" not in u.method
    low, high = rel.interval("intercept")
    assert low[0] <= rel["intercept"][0] <= high[0]
    rel = api.linear_regression(s, df, ["a", "b"], "y", epsilon=1.0, delta=1e-6, bounds=BOUNDS,
                                covers="noise+sampling")
    u = rel.uncertainty["coefficients"]
    assert u.covers == "noise+sampling" and "errors of constant variance" in u.method
    assert rel.manifest["uncertainty"]["arrays"]["intercept"]["covers"] == "noise+sampling"
    low, high = rel.interval("intercept")
    assert low[0] <= rel["intercept"][0] <= high[0]  # no noise here: the interval is the sampling error's
    # without an intercept the fit through the origin is solved in the data's units
    rel = api.linear_regression(s, df, ["a", "b"], "y", epsilon=1.0, delta=1e-6, bounds=BOUNDS, fit_intercept=False)
    assert np.allclose(rel["coefficients"], np.linalg.lstsq(Xc, yc, rcond=None)[0], rtol=1e-9)
    assert "intercept" not in rel.arrays


def test_every_mechanism_and_fit_carries_coefficient_intervals(data, tmp_path):
    """Through the origin (with bounds, noise+sampling asked for; raw rows: noise only) and the Sheffet mechanisms:
    each ``coefficients`` (and ``intercept``) interval simulates the release's own noise law (intervals.NoiseLaw)."""
    df, X, y = data
    s = _session(tmp_path, Zero())
    Xc, yc = _clamped(X, y)
    rel = api.linear_regression(s, df, ["a", "b"], "y", epsilon=1.0, delta=1e-6, bounds=BOUNDS, fit_intercept=False,
                                covers="noise+sampling")
    u = rel.uncertainty["coefficients"]
    assert u.covers == "noise+sampling" and "own noise law" in u.method and u.low.shape == (2,)
    low, high = rel.interval("coefficients")  # no noise (Zero): the sampling error's interval around the OLS fit
    assert np.all(low <= rel["coefficients"]) and np.all(rel["coefficients"] <= high)
    rel = api.linear_regression(s, df, ["a", "b"], "y", epsilon=1.0, delta=1e-6, norm_bound=1e4, fit_intercept=False)
    assert rel.uncertainty["coefficients"].covers == "noise"  # no constant column: n is not in the release
    laws = {"wishart": "W(B^2 I, k)", "jl_ridge": "W(AtA + w^2 I, r)/r", "inverse_wishart": "W^-1(AtA + w^2 I, m)"}
    s = _session(tmp_path, SeededSampler(np.random.default_rng(1)))  # their noise: standard normals (Zero has none)
    for mech, law in laws.items():
        for post in ("none", "psd"):
            rel = api.linear_regression(s, df, ["a", "b"], "y", epsilon=1.0, delta=1e-6, bounds=BOUNDS, mechanism=mech,
                                        postprocess=post)
            for name in ("coefficients", "intercept"):
                u = rel.uncertainty[name]
                assert u.covers == "noise" and law in u.method, (mech, post, u.method)
                assert ("mean offset" in u.method) == (post == "none") and np.all(u.low < u.high)


@pytest.mark.parametrize("kw, needle", [
    ({"mechanism": "adassp", "bounds": BOUNDS}, "must be 'noise' for mechanism 'adassp'"),
    ({"norm_bound": 1e4, "fit_intercept": False}, "needs the constant column"),
    ({"bounds": BOUNDS, "covers": "sampling"}, "'covers'"),
])
def test_a_sampling_term_that_cannot_be_given_is_refused_before_any_charge(data, tmp_path, kw, needle):
    df, _, _ = data
    s = _session(tmp_path, Zero())
    with pytest.raises(ConfigError, match=needle):
        api.linear_regression(s, df, ["a", "b"], "y", epsilon=1.0, delta=1e-6, **{"covers": "noise+sampling", **kw})
    assert s.budget() is None  # no release, nothing charged


def test_intercept_without_bounds_uses_an_equal_share_constant(data, tmp_path):
    df, X, y = data
    s = _session(tmp_path, Zero())
    keep = ~np.isnan(X).any(axis=1)
    rows = np.column_stack([X, y])[keep]
    B = 1e4  # above every row: nothing clipped, so the fit is exact OLS with an intercept
    rel = api.linear_regression(s, df, ["a", "b"], "y", epsilon=1.0, delta=1e-6, norm_bound=B)
    ols = np.linalg.lstsq(np.column_stack([rows[:, :2], np.ones(len(rows))]), rows[:, 2], rcond=None)[0]
    assert np.allclose(np.r_[rel["coefficients"], rel["intercept"]], ols, rtol=1e-8)
    assert rel.manifest["scaling"]["constant_column"] == {"index": 2, "value": "B/sqrt(d)"}


def test_second_moment_and_pca_come_back_in_data_units(data, tmp_path):
    df, X, y = data
    s = _session(tmp_path, Zero())
    bounds = {"a": BOUNDS["a"], "b": BOUNDS["b"]}
    Xc, _ = _clamped(X, y)
    rel = api.second_moment(s, df, ["a", "b"], epsilon=1.0, delta=1e-6, bounds=bounds)
    m = rel["matrix"]
    assert np.allclose(m, Xc.T @ Xc, rtol=1e-9)
    sd = rel.uncertainty["matrix"].stderr  # the noise T·N·Tᵀ in the data's units: larger for larger units
    assert sd.shape == (2, 2) and sd[1, 1] > sd[0, 0] > 0
    rel = api.pca(s, df, ["a", "b"], 1, epsilon=1.0, delta=1e-6, bounds=bounds)
    vals, vecs = np.linalg.eigh(Xc.T @ Xc)
    assert np.allclose(rel["eigenvalues"], vals[-1:]) and np.allclose(np.abs(rel["eigenvectors"][0]), np.abs(vecs[:, -1]))
    # nonfinite "zero": the NaN entry becomes the centre of its bounds (20), the row is kept
    m0 = api.second_moment(s, df, ["a", "b"], epsilon=1.0, delta=1e-6, bounds=bounds, nonfinite="zero")["matrix"]
    Xz = np.column_stack([np.clip(X[:, 0], 0, 5), np.where(np.isnan(X[:, 1]), 20.0, np.clip(X[:, 1], 10, 30))])
    assert np.allclose(m0, Xz.T @ Xz, rtol=1e-9)


def test_auto_norm_bound_is_an_event_of_the_same_release(data, tmp_path):
    df, X, y = data
    s = _session(tmp_path, NumpySampler())
    rel = api.linear_regression(s, df, ["a", "b"], "y", epsilon=1.0, delta=1e-6, bounds=BOUNDS, norm_bound="auto",
                                norm_bound_share=0.2, norm_bound_quantile=0.9, release_id="auto-1")
    events = rel.privacy["events"]
    assert events[0] == {"type": "epsilon_delta", "epsilon": pytest.approx(0.2), "delta": 0.0,
                         "mechanism": "exponential_quantile"}
    assert [e["type"] for e in events] == ["epsilon_delta", "gaussian"]
    auto = rel.manifest["norm_bound_auto"]
    assert auto["quantile"] == 0.9 and auto["epsilon"] == pytest.approx(0.2)
    # scaled rows have norms in [1, 2]; with n = 399 at ε = 0.2 the choice lands near them
    assert 0.5 <= auto["norm_bound"] <= 4.0
    assert rel.privacy["norm_bound"] == "auto" and rel.privacy["epsilon"] == 1.0
    assert rel.privacy["mechanism_epsilon"] == pytest.approx(0.8)
    st = s.budget()
    assert st.releases == 1 and st.spent_epsilon <= 1.0 + 1e-9
    again = api.linear_regression(s, df, ["a", "b"], "y", epsilon=1.0, delta=1e-6, bounds=BOUNDS, norm_bound="auto",
                                  norm_bound_share=0.2, norm_bound_quantile=0.9, release_id="auto-1")
    assert again.reused and s.budget().releases == 1


@pytest.mark.parametrize("over, needle", [
    (dict(bounds={"a": (0, 5)}), "'norm_bound' parameter of linear_regression is required"),
    (dict(bounds={"zz": (0, 5)}, norm_bound=1.0), "names 'zz'"),
    (dict(bounds={"a": (5, 0)}, norm_bound=1.0), "'bounds' parameter"),
    (dict(norm_bound="big"), "positive float or 'auto'"),
    (dict(norm_bound="auto", norm_bound_share=1.5), "norm_bound_share"),
    (dict(norm_bound="auto", norm_bound_quantile=1.0), "norm_bound_quantile"),
    (dict(fit_intercept=1, norm_bound=1.0), "fit_intercept"),
    (dict(bounds=BOUNDS, fit_intercept=False, mechanism="adassp"), "fit_intercept"),
])
def test_bad_bound_requests_fail_before_any_charge(data, tmp_path, over, needle):
    df, _, _ = data
    s = _session(tmp_path, NumpySampler())
    with pytest.raises(ConfigError, match=needle):
        api.linear_regression(s, df, ["a", "b"], "y", epsilon=1.0, delta=1e-6, **over)
    assert s.budget() is None or s.budget().releases == 0


def test_bounded_vector_round_trips_do_not_grow_with_d(spark):
    counts = {}
    for d in (10, 300):
        df = _wide(spark, d)
        cols = [f"c{i}" for i in range(d)]
        V.schema_of(df)
        affine = V.Affine(tuple((0.0, 1.0) for _ in cols), constant_at=d)
        with py4j_calls() as n:
            _, got = V.vectorize(df, cols, affine=affine)
        assert got == d + 1
        counts[d] = n[0]
    assert counts[300] <= counts[10] + 5, f"JVM round trips grow with d: {counts}"
