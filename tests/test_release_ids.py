"""One release-id rule and one request digest for every entry point (issue #13, spark_dp/release/ids.py)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import spark_dp
from spark_dp.errors import ConfigError
from spark_dp.privacy import SeededSampler
from spark_dp.release.ids import canonical_sha256, check_release_id, new_release_id

BAD = ["a/b", "../evil", ".hidden", "", 7]


@pytest.mark.parametrize("rid", BAD)
def test_the_rule(rid):
    with pytest.raises(ConfigError, match="'release_id'"):
        check_release_id(rid, owner="x")


def test_new_ids_and_the_digest():
    rid = new_release_id("pca")
    assert re.fullmatch(r"pca-\d{8}T\d{6}-[0-9a-f]{8}", rid) and check_release_id(rid, owner="x") == rid
    assert new_release_id("pca") != rid
    assert canonical_sha256({"a": 1, "b": [1, 2]}) == canonical_sha256({"b": [1, 2], "a": 1})
    assert canonical_sha256({"a": 1}) != canonical_sha256({"a": 2})


@pytest.mark.parametrize("rid", ["a/b", ".hidden"])
def test_every_entry_point_applies_it(spark, tmp_path, rid):
    from spark_dp.sketch.merge import merge_sketches
    from spark_dp.tensor.api import tensor_decomposition

    df = spark.createDataFrame([(1.0, 2.0), (0.5, -1.0)], ["a", "b"])
    dp = spark_dp.DPSession("ids", ledger=f"sqlite:///{tmp_path}/l.db", epsilon_limit=10, delta_limit=1e-5,
                            output=str(tmp_path / "out"), sampler=SeededSampler(np.random.default_rng(0)))
    with pytest.raises(ConfigError, match="'release_id'"):
        dp.second_moment(df, ["a", "b"], epsilon=1, delta=1e-6, norm_bound=1, release_id=rid)
    public = spark_dp.DPSession("ids.public", ledger=f"sqlite:///{tmp_path}/l.db", output=str(tmp_path / "out"))
    with pytest.raises(ConfigError, match="'release_id'"):
        tensor_decomposition(public, df, k=1, mechanism="online_power_method", columns=["a", "b"], norm_bound=1.0,
                             private=False, release_id=rid)
    a = dp.count_sketch(df.selectExpr("cast(a as string) as item"), "item", epsilon=1, delta=1e-6, repetitions=2,
                        buckets=8, release_id="s1")
    b = dp.count_sketch(df.selectExpr("cast(a as string) as item"), "item", epsilon=1, delta=1e-6, repetitions=2,
                        buckets=8, release_id="s2", seeds=a)
    with pytest.raises(ConfigError, match="'release_id'"):
        merge_sketches([a, b], release_id=rid)
    assert dp.budget().releases == 2  # the refusals charged nothing
