"""The driver's work before a release's first job does not grow with d (issue #17, step 2).

Counts JVM round trips (py4j commands) on the classic session rather than
timing anything: building the vector column at d = 300 must cost no more
round trips than at d = 10 (one SQL ``array(...)`` expression, the schema
read once per DataFrame). Not a timing test.
"""

from __future__ import annotations

import contextlib
import gc

import numpy as np
import pytest

from spark_dp.aggregates import _vectors as V
from spark_dp.errors import ConfigError, SchemaError


@contextlib.contextmanager
def py4j_calls():
    import threading

    import py4j.clientserver as cs

    orig = cs.ClientServerConnection.send_command
    n = [0]
    caller = threading.get_ident()

    def counting(self, command):
        # Only this thread's calls: a full suite leaves other threads (progress bars, listeners from earlier
        # tests) that talk to the JVM at any time.
        if threading.get_ident() == caller:
            n[0] += 1
        return orig(self, command)

    # Py4J frees a Java object when its Python proxy is collected, with a JVM call from whichever thread
    # collects: collect the earlier tests' garbage now and none while counting.
    gc.collect()
    gc.disable()
    cs.ClientServerConnection.send_command = counting
    try:
        yield n
    finally:
        cs.ClientServerConnection.send_command = orig
        gc.enable()


def _wide(spark, d):
    return spark.range(10).selectExpr(*[f"rand({i}) AS c{i}" for i in range(d)], "id % 3 AS u")


@pytest.mark.parametrize("unit", [None, "u"])
def test_vector_frame_round_trips_do_not_grow_with_d(spark, unit):
    counts = {}
    for d in (10, 300):
        df = _wide(spark, d)
        cols = [f"c{i}" for i in range(d)]
        V.schema_of(df)  # the caller's one schema read (the release reads it once to validate)
        with py4j_calls() as n:
            frame, got = V.vectorize(df, cols, privacy_unit=unit, max_rows_per_unit=2)
        assert got == d
        counts[d] = n[0]
    assert counts[300] <= counts[10] + 5, f"JVM round trips grow with d: {counts}"


def test_schema_is_read_once_per_dataframe(spark):
    df = _wide(spark, 50)
    cols = [f"c{i}" for i in range(50)]
    V.vector_columns(df, cols)
    with py4j_calls() as n:
        fields, d = V.vector_columns(df, cols, None)
        V.check_unit(df, "u", 1)
    assert (d, n[0]) == (50, 0)
    assert [f.name for f in fields] == cols


def test_one_expression_handles_awkward_names_and_nulls(spark):
    names = ["a.b", "c`d", "e f", "ü"]
    df = spark.createDataFrame([(1, 2.5, None, 4), (None, -1.0, 3, 0)], names)
    frame, d = V.vectorize(df, names)
    rows = [r[0] for r in frame.collect()]
    assert d == 4
    np.testing.assert_array_equal(np.array(rows[0]), [1.0, 2.5, np.nan, 4.0])
    np.testing.assert_array_equal(np.array(rows[1]), [np.nan, -1.0, 3.0, 0.0])
    raw, _ = V.vector_frame(df, names)
    assert [r[0] for r in raw.collect()][1][0] is None  # the kernels' path keeps nulls for the executors


def test_schema_errors_are_unchanged(spark):
    df = spark.createDataFrame([(1.0, "x", [1.0, 2.0])], ["a", "s", "arr"])
    with pytest.raises(SchemaError, match="'missing' not found"):
        V.vector_columns(df, ["a", "missing"])
    with pytest.raises(SchemaError, match="'s' has type string"):
        V.vector_columns(df, ["a", "s"])
    with pytest.raises(ConfigError, match="'dimension' parameter is required"):
        V.vector_columns(df, ["arr"])
    with pytest.raises(ConfigError, match="does not match"):
        V.vector_columns(df, ["a"], 2)
    with pytest.raises(ConfigError, match="max_rows_per_unit"):
        V.check_unit(df, "a", 0)
    assert V.vector_columns(df, ["arr"], 2)[1] == 2


@pytest.mark.parametrize("source", ["range", "parquet"])
def test_whole_release_round_trips_do_not_grow_with_d(spark, tmp_path, source):
    """The default ``second_moment`` path, fast-path detection and lineage included (a regression caught once:
    detecting a plain Parquet scan selected the d columns by name, d round trips more per release)."""
    import spark_dp

    dp = spark_dp.DPSession("driver-cost", ledger=f"sqlite:///{tmp_path}/ledger.db", epsilon_limit=100.0,
                            delta_limit=0.5, output=str(tmp_path / "out"), sampler="numpy")
    counts = {}
    for d in (10, 150):
        df = _wide(spark, d)
        if source == "parquet":
            df.write.parquet(str(tmp_path / f"wide{d}"))
            df = spark.read.parquet(str(tmp_path / f"wide{d}"))
        cols = [f"c{i}" for i in range(d)]
        # explicit ids: the same call without one would return the stored release (no new release to measure)
        dp.second_moment(df, cols, epsilon=1.0, delta=1e-9, norm_bound=1.0, release_id=f"warm-{source}-{d}")
        with py4j_calls() as n:
            dp.second_moment(df, cols, epsilon=1.0, delta=1e-9, norm_bound=1.0, release_id=f"measured-{source}-{d}")
        counts[d] = n[0]
    assert counts[150] <= counts[10] + 20, f"JVM round trips of a release grow with d: {counts}"
