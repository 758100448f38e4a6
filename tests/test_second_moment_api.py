"""The second-moment family through the Python API on Spark.

Noise-free path (a zero sampler, tests only; releases marked not private)
equals numpy; the one-pass JL projection equals numpy R·A for the same key
and does not depend on partitioning or on duplicate rows' placement; every
mechanism releases end to end; bad requests fail before any charge.
"""

import numpy as np
import pandas as pd
import pytest

from spark_dp.aggregates._vectors import vectorize
from spark_dp.aggregates.jl import jl_block_partial, jl_projection, row_id_frame
from spark_dp.errors import ConfigError, SchemaError
from spark_dp.privacy import NoiseSampler, NumpySampler
from spark_dp.second_moment import api
from spark_dp.session import DPSession

COLS = ["x1", "x2", "x3"]


class ZeroSampler(NoiseSampler):
    """No noise at all: the ε = ∞ path, for exactness tests only."""

    name = "zero"
    private = False

    def gaussian(self, values, sigma, l2_sensitivity):
        return np.asarray(values, dtype=np.float64).copy()

    def standard_normal(self, size):
        return np.zeros(size)


@pytest.fixture(scope="module")
def data(spark):
    rng = np.random.default_rng(21)
    n = 300
    X = rng.normal(size=(n, 3)) * 0.3
    y = X @ np.array([0.8, -0.4, 0.3]) + 0.02 * rng.normal(size=n)
    A = np.column_stack([X, y])
    A = A / np.maximum(1.0, np.linalg.norm(A, axis=1, keepdims=True))  # already inside the unit ball
    pdf = pd.DataFrame({"x1": A[:, 0], "x2": A[:, 1], "x3": A[:, 2], "y": A[:, 3], "name": [f"r{i}" for i in range(n)]})
    return spark.createDataFrame(pdf).cache(), A


def _session(tmp_path, sampler):
    return DPSession("t.sm", ledger=f"sqlite:///{tmp_path}/ledger.db", epsilon_limit=50.0, delta_limit=1e-3,
                     output=str(tmp_path / "rel"), sampler=sampler)


def _charged(session):
    st = session.budget()
    return 0 if st is None else st.releases


def test_noise_free_path_equals_numpy(data, tmp_path):
    df, A = data
    s = _session(tmp_path, ZeroSampler())
    kw = dict(epsilon=1.0, delta=1e-6, norm_bound=1.0)
    m = api.second_moment(s, df, COLS, **kw)["matrix"]
    X = A[:, :3]
    assert np.allclose(m, X.T @ X, atol=1e-10)
    # Wishart with a zero G is exact too
    assert np.allclose(api.second_moment(s, df, COLS, mechanism="wishart", **kw)["matrix"], X.T @ X, atol=1e-10)
    kw["fit_intercept"] = False  # the fit through the origin, compared with numpy's
    rel = api.linear_regression(s, df, COLS, "y", **kw)
    assert np.allclose(rel["coefficients"], np.linalg.lstsq(X, A[:, 3], rcond=None)[0], atol=1e-8)
    assert rel.manifest["solution"]["solver"] == "cholesky" and rel.manifest["label"] == "y"
    rel = api.linear_regression(s, df, COLS, "y", ridge=2.0, **kw)
    assert np.allclose(rel["coefficients"], np.linalg.solve(X.T @ X + 2.0 * np.eye(3), X.T @ A[:, 3]), atol=1e-8)
    rel = api.linear_regression(s, df, COLS, "y", mechanism="adassp", **kw)
    lam = rel["lambda"][0]
    assert np.allclose(rel["coefficients"], np.linalg.solve(X.T @ X + lam * np.eye(3), X.T @ A[:, 3]), atol=1e-8)
    del kw["fit_intercept"]
    rel = api.pca(s, df, COLS, 2, **kw)
    vals, vecs = np.linalg.eigh(X.T @ X)
    assert np.allclose(rel["eigenvalues"], vals[::-1][:2])
    assert np.allclose(np.abs(rel["eigenvectors"] @ vecs[:, ::-1][:, :2]), np.eye(2), atol=1e-8)
    assert rel.privacy["private"] is False


def test_jl_projection_equals_numpy_and_ignores_partitioning(spark, data):
    df, A = data
    dup = df.union(df.limit(7))  # 7 duplicated rows
    key = 0x1234_5678_9ABC
    ref_frame, d = vectorize(dup, COLS)
    ids = row_id_frame(ref_frame).toPandas()
    block = np.vstack(ids["__spark_dp_x"].to_numpy())
    assert sorted(ids["count"].tolist())[-7:] == [2] * 7
    ref = jl_block_partial(block, ids["h1"].to_numpy(), ids["h2"].to_numpy(), ids["count"].to_numpy(), r=9, key=key)
    outs = [jl_projection(dup.repartition(p), COLS, r=9, key=key, norm_bound=1.0) for p in (1, 3)]
    assert np.allclose(outs[0], ref, atol=1e-10) and np.allclose(outs[1], ref, atol=1e-10)
    assert not np.allclose(jl_projection(dup, COLS, r=9, key=key + 1, norm_bound=1.0), ref)


def test_jl_partition_row_ids_equal_numpy_for_one_partition(spark, data):
    _, A = data
    one = spark.createDataFrame(pd.DataFrame(A[:50, :3], columns=COLS)).coalesce(1)
    from spark_dp.aggregates.jl import partition_generator

    ref = partition_generator(31, 0).standard_normal((50, 7)).T @ A[:50, :3]
    got = jl_projection(one, COLS, r=7, key=31, norm_bound=1.0, row_ids="partition")
    assert np.allclose(got, ref, atol=1e-12)
    # a different partitioning draws different columns (the documented caveat)
    two = jl_projection(one.repartition(2), COLS, r=7, key=31, norm_bound=1.0, row_ids="partition")
    assert not np.allclose(two, ref)


def test_jl_projection_drops_nonfinite_rows(spark, data):
    df, _ = data
    bad = spark.createDataFrame(pd.DataFrame({"x1": [float("nan"), 0.3], "x2": [0.1, float("inf")], "x3": [0.2, 0.1],
                                              "y": [0.0, 0.0], "name": ["a", "b"]}))
    with_bad = jl_projection(df.union(bad), COLS, r=6, key=99, norm_bound=1.0)
    assert np.allclose(with_bad, jl_projection(df, COLS, r=6, key=99, norm_bound=1.0), atol=1e-12)


def test_jl_projection_of_empty_input_is_zero(spark, data):
    df, _ = data
    assert np.array_equal(jl_projection(df.limit(0), COLS, r=5, key=1, norm_bound=1.0), np.zeros((5, 3)))


@pytest.mark.parametrize("mechanism", ["analyze_gauss", "jl_ridge", "wishart", "inverse_wishart"])
def test_every_mechanism_releases_once(data, tmp_path, mechanism):
    df, A = data
    s = _session(tmp_path, NumpySampler())
    kw = dict(epsilon=1.0, delta=1e-6, norm_bound=1.0, mechanism=mechanism, release_id=f"r-{mechanism}")
    rows = 40 if mechanism == "jl_ridge" else None
    rel = api.linear_regression(s, df, COLS, "y", projection_rows=rows, **kw)
    # the default intercept: the constant column sits before the label
    assert rel["coefficients"].shape == (3,) and rel["intercept"].shape == (1,) and rel["matrix"].shape == (5, 5)
    assert np.all(np.isfinite(rel["coefficients"]))
    pv = rel.privacy
    assert pv["epsilon"] == 1.0 and pv["events"] and pv["theorem_neighbors"]
    if mechanism != "analyze_gauss":
        expected = "chi2_profile" if mechanism in ("jl_ridge", "inverse_wishart") else "epsilon_delta"
        assert pv["events"][0]["type"] == expected and pv["events"][0]["mechanism"] == mechanism
        assert np.all(np.linalg.eigvalsh(rel["matrix"]) > 0)  # PD without post-processing
    again = api.linear_regression(s, df, COLS, "y", projection_rows=rows, **kw)
    assert again.reused and np.array_equal(again["coefficients"], rel["coefficients"])
    assert _charged(s) == 1


def test_singular_results_fall_back_not_fail(spark, tmp_path):
    df = spark.createDataFrame(pd.DataFrame({"x1": [0.1, 0.2, 0.3], "x2": [0.0, 0.0, 0.0], "y": [0.2, 0.4, 0.6]}))
    s = _session(tmp_path, ZeroSampler())
    rel = api.linear_regression(s, df, ["x1", "x2"], "y", epsilon=1.0, delta=1e-6, norm_bound=1.0, fit_intercept=False)
    assert rel.manifest["solution"]["solver"] == "psd_pinv"
    assert np.allclose(rel["coefficients"], [2.0, 0.0])
    # an indefinite noisy matrix (Analyze Gauss at tiny n) also yields finite coefficients
    s2 = _session(tmp_path / "b", NumpySampler())
    rel = api.linear_regression(s2, df, ["x1", "x2"], "y", epsilon=0.1, delta=1e-6, norm_bound=1.0)
    assert np.all(np.isfinite(rel["coefficients"]))


BAD = [
    ("label missing", dict(label="nope"), SchemaError, "nope"),
    ("label non-numeric", dict(label="name"), SchemaError, "name"),
    ("label among features", dict(label="x1"), ConfigError, "label"),
    ("r too small", dict(mechanism="jl_ridge", projection_rows=5), ConfigError, "projection_rows"),
    ("IW dof too small", dict(mechanism="inverse_wishart", dof=4), ConfigError, "dof"),
    ("wishart k too small", dict(mechanism="wishart", dof=100), ConfigError, "dof"),
    ("wishart eps > 1", dict(mechanism="wishart", epsilon=2.0), ConfigError, "epsilon"),
    ("paper calibration", dict(mechanism="inverse_wishart", calibration="paper"), ConfigError, "calibration"),
    ("units of many rows", dict(mechanism="jl_ridge", max_rows_per_unit=3), ConfigError, "max_rows_per_unit"),
    ("unknown mechanism", dict(mechanism="laplace"), ConfigError, "mechanism"),
    ("negative ridge", dict(ridge=-1.0), ConfigError, "ridge"),
    ("bad postprocess", dict(postprocess="clip"), ConfigError, "postprocess"),
    ("dof for analyze_gauss", dict(dof=500), ConfigError, "dof"),
    ("projection_rows for wishart", dict(mechanism="wishart", projection_rows=500), ConfigError, "projection_rows"),
    ("row_ids for wishart", dict(mechanism="wishart", row_ids="partition"), ConfigError, "row_ids"),
    ("bad row_ids", dict(mechanism="jl_ridge", row_ids="rand"), ConfigError, "row_ids"),
    ("postprocess with adassp", dict(mechanism="adassp", postprocess="psd"), ConfigError, "postprocess"),
]


@pytest.mark.parametrize("name, over, exc, needle", BAD, ids=[b[0] for b in BAD])
def test_bad_requests_fail_before_any_charge(data, tmp_path, name, over, exc, needle):
    df, _ = data
    s = _session(tmp_path, NumpySampler())
    kw = dict(epsilon=1.0, delta=1e-6, norm_bound=1.0, label="y")
    kw.update(over)
    label = kw.pop("label")
    with pytest.raises(exc, match=needle):
        api.linear_regression(s, df, COLS, label, **kw)
    assert _charged(s) == 0


def test_pca_bad_k_and_adassp_not_for_pca(data, tmp_path):
    df, _ = data
    s = _session(tmp_path, NumpySampler())
    with pytest.raises(ConfigError, match="'k'"):
        api.pca(s, df, COLS, 4, epsilon=1.0, delta=1e-6, norm_bound=1.0)
    with pytest.raises(ConfigError, match="mechanism"):
        api.pca(s, df, COLS, 2, epsilon=1.0, delta=1e-6, norm_bound=1.0, mechanism="adassp")
    assert _charged(s) == 0
