"""One vocabulary across the families (issue #13): names, positions, renamed parameters and keys, manifests."""

from __future__ import annotations

import inspect
import os

import numpy as np
import pytest

from spark_dp import DPSession
from spark_dp.cli.config import JobConfig
from spark_dp.errors import ConfigError, SparkDPDeprecationWarning
from spark_dp.release import load_release
from spark_dp.release.release import noise_of
from tests._samplers import Recorder

COMMON = ("epsilon", "delta", "neighbors", "privacy_unit", "max_rows_per_unit", "release_id")


@pytest.fixture(scope="module")
def items(spark):
    rng = np.random.default_rng(4)
    rows = [(f"u{i % 40}", f"q{int(rng.zipf(1.5)) % 30}", float(rng.normal()), float(rng.normal()),
             float(rng.normal())) for i in range(400)]
    return spark.createDataFrame(rows, ["user", "query", "x1", "x2", "x3"]).cache()


def _session(tmp_path, name="ds"):
    return DPSession(name, ledger=f"sqlite:///{tmp_path}/ledger.db", epsilon_limit=100.0, delta_limit=1e-3,
                     output=str(tmp_path / "out"), sampler=Recorder())


def test_every_family_takes_data_then_columns_and_k_third():
    for name in ("second_moment", "linear_regression", "pca", "count_sketch", "tensor_decomposition"):
        params = list(inspect.signature(getattr(DPSession, name)).parameters)
        assert params[1:3] == ["df" if name != "tensor_decomposition" else "data", "columns"], name
        missing = [p for p in COMMON if p not in params]
        assert not missing, f"{name} lacks {missing}"
    for name in ("pca", "tensor_decomposition"):
        assert list(inspect.signature(getattr(DPSession, name)).parameters)[3] == "k"
    assert "norm_bound" in inspect.signature(DPSession.tensor_decomposition).parameters
    # help() shows the new names only
    sketch = inspect.signature(DPSession.count_sketch).parameters
    assert "column" not in sketch and "max_items_per_unit" not in sketch


def test_renamed_sketch_parameters_warn_and_mean_the_same(items, tmp_path):
    dp = _session(tmp_path)
    kw = dict(epsilon=1.0, delta=1e-6, repetitions=3, buckets=32, privacy_unit="user", release_id="s1")
    new = dp.count_sketch(items, ["query"], max_rows_per_unit=3, **kw)
    with pytest.warns(SparkDPDeprecationWarning, match="'max_items_per_unit' parameter of count_sketch is "
                                                         "deprecated; use 'max_rows_per_unit'"):
        with pytest.warns(SparkDPDeprecationWarning, match="'column' .* use 'columns'"):
            old = dp.count_sketch(items, column="query", max_items_per_unit=3, **kw)
    # The same request (same digest): the stored release comes back, nothing drawn again.
    assert old.reused and len(dp.sampler.draws) == 1
    np.testing.assert_array_equal(old["sketch"], new["sketch"])
    p = new.privacy
    assert p["max_rows_per_unit"] == 3 and p["max_items_per_unit"] == 3  # schema 1's name kept alongside
    with pytest.raises(ConfigError, match="'max_rows_per_unit' parameter of count_sketch only"):
        dp.count_sketch(items, "query", max_rows_per_unit=3, max_items_per_unit=3, **{**kw, "release_id": "s2"})
    with pytest.raises(ConfigError, match="'columns' parameter of count_sketch must name one item column"):
        dp.count_sketch(items, ["query", "user"], **{**kw, "release_id": "s3"})


def test_manifests_state_noise_family_and_scale(items, tmp_path):
    dp = _session(tmp_path)
    rels = {
        "analyze_gauss": dp.second_moment(items, ["x1", "x2"], epsilon=1.0, delta=1e-6, norm_bound=3.0),
        "count_min": dp.count_sketch(items, "query", epsilon=1.0, delta=1e-6, mechanism="count_min",
                                     repetitions=3, buckets=16),
        "wishart": dp.second_moment(items, ["x1", "x2"], epsilon=1.0, delta=1e-6, norm_bound=3.0,
                                    mechanism="wishart"),
        "tensor rows": dp.tensor_decomposition(items, ["x1", "x2", "x3"], 1, epsilon=1.0, delta=1e-6,
                                               norm_bound=3.0, restarts=2, iterations=2, mode="reuse"),
    }
    expect = {"analyze_gauss": "gaussian", "count_min": "laplace", "wishart": "wishart", "tensor rows": "gaussian"}
    for name, rel in rels.items():
        family, scale = noise_of(rel.privacy)
        assert family == expect[name] == rel.privacy["noise_family"], name
        if family in ("gaussian", "laplace"):
            assert scale > 0
        else:
            assert scale is None
        assert load_release(os.path.join(tmp_path, "out", rel.release_id)).manifest["schema_version"] == 2
    assert rels["analyze_gauss"].privacy["noise_sigma"] == rels["analyze_gauss"].privacy["noise_scale"]


def test_schema_one_manifests_still_read():
    assert noise_of({"noise": "gaussian", "noise_sigma": 2.5}) == ("gaussian", 2.5)
    assert noise_of({"noise": "laplace", "noise_scale": 4.0}) == ("laplace", 4.0)
    assert noise_of({"noise": "additive Wishart W_d(B^2 I, k)"}) == (None, None)


def _sketch_config(tmp_path, dataset_extra):
    data = tmp_path / "q.parquet"
    if not data.exists():
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table({"query": ["a", "b"], "user": ["u1", "u2"]}), data)
    return {"dataset": {"id": "logs", "path": str(data), "columns": ["query"], "privacy_unit": "user",
                        **dataset_extra},
            "task": "count_sketch", "mechanism": "private_count_sketch",
            "privacy": {"epsilon": 1.0, "delta": 1e-6}, "params": {"repetitions": 3, "buckets": 16},
            "ledger": {"uri": f"sqlite:///{tmp_path}/l.db"}, "output": {"path": str(tmp_path / "out")}}


def test_renamed_config_key_warns_and_keeps_its_digest(tmp_path):
    raw = _sketch_config(tmp_path, {"max_items_per_unit": 5})
    with pytest.warns(SparkDPDeprecationWarning, match="'dataset.max_items_per_unit' key of the config is "
                                                        "deprecated; use 'dataset.max_rows_per_unit'"):
        old = JobConfig.from_dict(raw)
    new = JobConfig.from_dict(_sketch_config(tmp_path, {"max_rows_per_unit": 5}))
    assert old.dataset.max_rows_per_unit == new.dataset.max_rows_per_unit == 5
    assert old.spec.plan(old) == new.spec.plan(new)
    # the digest is of the config as written: a re-run of an old config keeps its release id valid
    from spark_dp.release.ids import canonical_sha256

    assert old.sha256 == canonical_sha256(raw)
    with pytest.raises(ConfigError, match="Give 'dataset.max_rows_per_unit' only"):
        JobConfig.from_dict(_sketch_config(tmp_path, {"max_items_per_unit": 5, "max_rows_per_unit": 5}))


def test_sketch_config_accepts_replace_neighbours(tmp_path):
    raw = _sketch_config(tmp_path, {"max_rows_per_unit": 2})
    add = JobConfig.from_dict(raw)
    rep = JobConfig.from_dict({**raw, "privacy": {**raw["privacy"], "neighbors": "replace"}})
    z_add, z_rep = add.spec.plan(add)[0].noise_multiplier, rep.spec.plan(rep)[0].noise_multiplier
    assert z_add == z_rep  # same event: σ doubles with Δ, the noise multiplier σ/Δ does not
