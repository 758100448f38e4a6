"""Error bars on every release (issue #14 §2): the Uncertainty infrastructure, without Spark.

The pipeline writes each array's ``stderr``/``low``/``high`` into its Parquet
file and the level and method into the manifest; ``load_release`` reads them
back; releases written before (no columns, no block) load as before; the
``confidence`` level is validated once and changes the request digest only
when it is not the default.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow.parquet as pq
import pytest

from spark_dp import DPSession
from spark_dp import params as P
from spark_dp.errors import ConfigError
from spark_dp.privacy import Budget, gaussian_noise_multiplier
from spark_dp.privacy.events import GaussianEvent
from spark_dp.release import load_release
from spark_dp.release.pipeline import Noised, ReleasePlan, confidence_request, run_release
from spark_dp.release.release import NoUncertaintyError, Release, write_release
from spark_dp.release.table import release_rows
from spark_dp.release.uncertainty import Uncertainty, bound, empirical_interval, gaussian_interval, normal_quantile
from tests._samplers import Recorder

EPS, DELTA = 1.0, 1e-6
BOUNDS3 = {"x1": (-1.0, 2.0), "x2": (-1.0, 1.0), "x3": (-2.0, 1.0)}


def _session(tmp_path):
    return DPSession("ds", ledger=f"sqlite:///{tmp_path}/ledger.db", epsilon_limit=10.0, delta_limit=1e-5,
                     output=str(tmp_path / "out"), sampler=Recorder())


def _plan(confidence=0.95, release_id="r1", with_bound=True):
    sigma = gaussian_noise_multiplier(EPS, DELTA)
    level = confidence

    def noise(exact, cp):
        values = cp.gaussian(exact, sigma=sigma, l2_sensitivity=1.0)
        unc = {"values": gaussian_interval(values, sigma, level)}
        if with_bound:
            unc["top"] = bound(values[:1], 3 * sigma, method="a test bound")
        return Noised({"values": values, "top": values[:1].copy(), "plain": np.arange(2.0)}, uncertainty=unc)

    return ReleasePlan(task="test_task", mechanism="gauss", request={"v": 1, **confidence_request(confidence)},
                       events=(GaussianEvent(sigma),), budget=Budget(EPS, DELTA),
                       privacy={"neighbors": "add_remove", "noise_family": "gaussian", "noise_scale": sigma},
                       manifest={}, compute=lambda: np.zeros((2, 3)), noise=noise, release_id=release_id)


def test_gaussian_interval_is_value_plus_minus_z_sigma():
    u = gaussian_interval(np.array([1.0, -2.0]), 2.0, 0.95)
    z = normal_quantile(0.95)
    assert z == pytest.approx(1.959964, abs=1e-6)
    np.testing.assert_allclose(u.low, [1 - 2 * z, -2 - 2 * z])
    np.testing.assert_allclose(u.high, [1 + 2 * z, -2 + 2 * z])
    np.testing.assert_allclose(u.stderr, [2.0, 2.0])
    assert (u.kind, u.covers) == ("interval", "noise")
    assert normal_quantile(0.9) == pytest.approx(1.644854, abs=1e-6)


def test_empirical_interval_pivots_the_error_quantiles():
    draws = np.linspace(-1, 3, 4001)[:, None]  # errors in [-1, 3]
    u = empirical_interval(np.array([10.0]), draws, 0.5, method="m")
    np.testing.assert_allclose([u.low[0], u.high[0]], [10 - 2.0, 10 - 0.0], atol=1e-9)


def test_bad_uncertainties_are_bugs():
    with pytest.raises(ValueError, match="shape"):
        Uncertainty(np.zeros(2), np.zeros(3), None, "m")
    with pytest.raises(ValueError, match="kind"):
        Uncertainty(np.zeros(2), np.zeros(2), None, "m", kind="guess")
    with pytest.raises(ValueError, match="covers"):
        Uncertainty(np.zeros(2), np.zeros(2), None, "m", covers="all")
    with pytest.raises(RuntimeError, match="not a payload array"):
        Noised({"a": np.zeros(2)}, uncertainty={"b": gaussian_interval(np.zeros(2), 1.0, 0.95)})
    with pytest.raises(RuntimeError, match="has shape"):
        Noised({"a": np.zeros(2)}, uncertainty={"a": gaussian_interval(np.zeros(3), 1.0, 0.95)})


def test_round_trip_through_parquet_and_manifest(tmp_path):
    rel = run_release(_session(tmp_path), _plan())
    m = json.load(open(os.path.join(rel.path, "manifest.json")))
    assert m["uncertainty"]["level"] == 0.95
    assert set(m["uncertainty"]["arrays"]) == {"values", "top"}
    assert m["uncertainty"]["arrays"]["top"] == {"method": "a test bound", "kind": "bound", "covers": "noise"}
    table = pq.read_table(os.path.join(rel.path, "values.parquet"))
    assert table.column_names == ["i", "j", "value", "stderr", "low", "high"]
    assert pq.read_table(os.path.join(rel.path, "plain.parquet")).column_names == ["i", "value"]
    assert pq.read_table(os.path.join(rel.path, "top.parquet")).column("stderr").null_count == 3

    back = load_release(rel.path)
    np.testing.assert_array_equal(back["values"], rel["values"])
    for name in ("values", "top"):
        np.testing.assert_array_equal(back.interval(name)[0], rel.interval(name)[0])
        np.testing.assert_array_equal(back.interval(name)[1], rel.interval(name)[1])
        assert back.uncertainty[name].describe() == rel.uncertainty[name].describe()
    np.testing.assert_array_equal(back.stderr("values"), rel.stderr("values"))
    assert back.confidence == 0.95
    low, high = back.interval("values")
    assert low.shape == (2, 3) and np.all(low < back["values"]) and np.all(back["values"] < high)
    rows = release_rows(back)  # the warehouse table's rows carry them too
    v = rows[rows["array"] == "values"]
    np.testing.assert_allclose(v["low"].to_numpy(), low.reshape(-1))
    assert rows[rows["array"] == "plain"]["low"].isna().all()


def test_errors_name_the_array(tmp_path):
    rel = run_release(_session(tmp_path), _plan())
    with pytest.raises(NoUncertaintyError, match=r"Array 'plain' of release 'r1' has no uncertainty "
                                                 r"\(arrays with one: \['top', 'values'\]\)"):
        rel.interval("plain")
    with pytest.raises(KeyError, match="Release 'r1' has no array 'nope'"):
        rel.stderr("nope")
    with pytest.raises(KeyError, match="Array 'top' of release 'r1' has a bound .*not a standard error"):
        rel.stderr("top")


def test_a_release_without_uncertainty_loads_as_before(tmp_path):
    """An older release: no block, files without the columns."""
    old = Release("old-1", {"matrix": np.eye(2), "vector": np.array([3.0])}, {"release_id": "old-1", "privacy": {}})
    path = write_release(old, str(tmp_path))
    m = json.load(open(os.path.join(path, "manifest.json")))
    assert "uncertainty" not in m
    assert pq.read_table(os.path.join(path, "matrix.parquet")).column_names == ["i", "j", "value"]
    back = load_release(path)
    np.testing.assert_array_equal(back["matrix"], np.eye(2))
    np.testing.assert_array_equal(back["vector"], [3.0])
    assert back.uncertainty == {} and back.confidence is None
    with pytest.raises(KeyError, match="has no uncertainty .*the release has none"):
        back.interval("matrix")


def test_a_payload_column_this_reader_does_not_know_is_ignored(tmp_path):
    """Forward compatibility of payload files: a later version's extra column is not taken for an index."""
    import pyarrow as pa

    rel = Release("new-1", {"matrix": np.arange(6.0).reshape(2, 3)}, {"release_id": "new-1", "privacy": {}})
    path = write_release(rel, str(tmp_path))
    f = os.path.join(path, "matrix.parquet")
    table = pq.read_table(f)
    pq.write_table(table.append_column("added_later", pa.array(np.full(table.num_rows, 7.5))), f)
    np.testing.assert_array_equal(load_release(path)["matrix"], np.arange(6.0).reshape(2, 3))


def test_the_level_is_validated_and_part_of_the_request(tmp_path):
    for bad in (0, 1, 1.5, -0.1, "high", True):
        with pytest.raises(ConfigError, match="'confidence' parameter of pca"):
            P.check("confidence", bad, owner="pca")
    assert confidence_request(0.95) == {}
    assert _plan(0.95).request_sha256 == _plan(0.95, release_id="x").request_sha256
    assert _plan(0.9).request_sha256 != _plan(0.95).request_sha256
    rel = run_release(_session(tmp_path), _plan(0.9, release_id="r90"))
    assert rel.manifest["uncertainty"]["level"] == 0.9 and load_release(rel.path).confidence == 0.9
    z = normal_quantile(0.9)
    np.testing.assert_allclose(rel.interval("values")[1] - rel["values"], z * rel.stderr("values"))


def test_the_report_shows_the_intervals(tmp_path):
    pytest.importorskip("matplotlib")
    from spark_dp.report.report import write_report

    rel = run_release(_session(tmp_path), _plan())
    text = open(write_report(rel.path).path, encoding="utf-8").read()
    assert "## Uncertainty" in text and "Level **95 %**" in text
    assert "### values (interval, covers noise)" in text and "### top (bound, covers noise)" in text
    low, high = rel.interval("values")
    assert f"| (0, 0) | {rel['values'][0, 0]:.6g} | {low[0, 0]:.6g} | {high[0, 0]:.6g} |" in text
    old = write_release(Release("old-2", {"m": np.eye(2)}, {"release_id": "old-2", "privacy": {}}), str(tmp_path))
    assert "carries no error bars" in open(write_report(old).path, encoding="utf-8").read()


def test_every_family_releases_its_error_bars(spark, tmp_path):
    """The wiring, on a tiny frame: each family's release carries the uncertainty its method states."""
    rng = np.random.default_rng(1)
    df = spark.createDataFrame([(f"q{int(rng.integers(0, 5))}", *map(float, rng.normal(size=3) / 3))
                                for _ in range(60)], ["q", "x1", "x2", "x3"])
    dp = DPSession("fam", ledger=f"sqlite:///{tmp_path}/l.db", epsilon_limit=50.0, delta_limit=1e-3,
                   output=str(tmp_path / "out"), sampler=Recorder())
    kw = dict(epsilon=1.0, delta=1e-6)
    sm = dp.second_moment(df, ["x1", "x2", "x3"], norm_bound=1.0, confidence=0.9, **kw)
    assert sm.confidence == 0.9 and sm.manifest["request_sha256"]
    assert "exact" in sm.uncertainty["matrix"].method and sm.interval("matrix")[0].shape == (3, 3)
    p = dp.pca(df, ["x1", "x2", "x3"], 2, norm_bound=1.0, **kw)
    assert {u.kind for u in (p.uncertainty["eigenvalues"], p.uncertainty["eigenvectors"])} == {"bound"}
    assert 0 <= p.manifest["accuracy"]["subspace_sin_theta_bound"] <= 1
    # AdaSSP: xtx/xty exact (in the data's units with the intercept column), coefficients and intercept from
    # the bootstrap with its two noise scales (noise only: it releases no y^T y)
    reg = dp.linear_regression(df, ["x1", "x2"], "x3", norm_bound=1.0, mechanism="adassp", fit_intercept=False, **kw)
    assert set(reg.uncertainty) == {"xtx", "xty", "coefficients"}
    reg = dp.linear_regression(df, ["x1", "x2"], "x3", mechanism="adassp", bounds=BOUNDS3, **kw)
    assert set(reg.uncertainty) == {"xtx", "xty", "coefficients", "intercept"} and "lambda" not in reg.uncertainty
    assert reg.uncertainty["intercept"].covers == "noise" and "mapped" in reg.uncertainty["xtx"].method
    # with bounds every mechanism's matrix maps back with its intervals, and PCA's bounds are in data units
    for mech in ("wishart", "jl_ridge", "inverse_wishart"):
        m = dp.second_moment(df, ["x1", "x2", "x3"], mechanism=mech, bounds=BOUNDS3, **kw)
        low, high = m.interval("matrix")
        assert low.shape == (3, 3) and np.all(low <= high) and m.stderr("matrix").shape == (3, 3), mech
        pb = dp.pca(df, ["x1", "x2", "x3"], 2, mechanism=mech, bounds=BOUNDS3, **kw)
        assert {"matrix", "eigenvalues", "eigenvectors"} <= set(pb.uncertainty), mech
        assert "subspace_sin_theta_bound" in pb.manifest["accuracy"], mech
    reg = dp.linear_regression(df, ["x1", "x2"], "x3", norm_bound=1.0, **kw)  # the default intercept
    assert {"coefficients", "intercept"} <= set(reg.uncertainty)
    assert reg.uncertainty["intercept"].covers == "noise"  # the default
    sk = dp.count_sketch(df, "q", repetitions=3, buckets=16, **kw)
    assert "sketch" in sk.uncertainty and 0 < sk.manifest["heavy_hitters"]["false_positive_rate"] < 1
    from spark_dp.sketch import estimate_intervals

    est, low, high = estimate_intervals(load_release(sk.path), ["q0", "q1"], collisions=False)  # the noise part
    assert np.all(low < est) and np.all(est < high)
    from spark_dp.sketch.uncertainty import estimate_bounds

    got = estimate_bounds(load_release(sk.path), ["q0", "q1"])  # 3 x 16 counters: too few to bound collisions
    assert got.kind == "none" and np.isnan(got.low).all() and "too few" in got.method
    assert sk.manifest["sketch"]["estimate_intervals"]["kind"] == "none"
    assert sk.manifest["heavy_hitters"]["false_positive_rate_bound"] is None
    t = dp.tensor_decomposition(df, ["x1", "x2", "x3"], 1, norm_bound=1.0, restarts=1, iterations=2, mode="reuse",
                                **kw)
    assert t.uncertainty["eigenvalues"].kind == "interval" and t.stderr("eigenvalues")[0] == t.privacy["noise_scale"]
    back = load_release(t.path)
    np.testing.assert_array_equal(back.interval("eigenvalues")[1], t.interval("eigenvalues")[1])
