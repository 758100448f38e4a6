"""The direct-Parquet fast path without ``source_paths`` (issue 15, item 5; spark_dp/aggregates/_scan.py).

A Parquet catalog table (saveAsTable into a temporary database location) and
a partitioned ``spark.read.parquet`` directory: a plain scan, with column
pruning and partition filters on the table, runs the direct path (logged), and gives the
same exact matrix (the Recorder sampler's input) and the same seeded release
as the Spark-reader path and as ``source_paths`` given explicitly. Filters on
data columns, partition filters on a path-based read (whose inputFiles()
Spark does not prune), derived columns, non-Parquet and local sources fall
back, with the reason logged. Detection starts no Spark job.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
from pyspark.sql import functions as F

from spark_dp import DPSession
from spark_dp.aggregates._scan import _check_plan, _top_level_fields, parquet_scan
from spark_dp.privacy import SeededSampler
from tests._samplers import Recorder

COLS = ["a", "b", "c"]


@pytest.fixture(scope="module")
def sources(spark, tmp_path_factory):
    base = tmp_path_factory.mktemp("fastpath")
    # Quarter-integers: every sum is exact in any order, so the paths must agree bit for bit.
    rows = [(float(i % 7) / 4, float((i * 3) % 5) / 4 - 0.5, float(i % 2), f"r{i}", i % 3) for i in range(60)]
    rows[5] = (float("nan"), 1.0, 0.0, "nan", 2)  # dropped by nonfinite="drop" on every path
    rows[8] = (None, 0.5, 1.0, "null", 1)
    df = spark.createDataFrame(rows, "a double, b double, c double, name string, p int")
    spark.sql(f"CREATE DATABASE fastpath_db LOCATION '{base / 'warehouse'}'")
    df.write.format("parquet").partitionBy("p").saveAsTable("fastpath_db.events")
    df.write.partitionBy("p").parquet(str(base / "pp"))
    yield {"table": "fastpath_db.events", "dir": str(base / "pp"), "base": base}
    spark.sql("DROP DATABASE fastpath_db CASCADE")


def _release(tmp_path, tag, df, **kw):
    recorder = Recorder(SeededSampler(np.random.default_rng(7)))
    session = DPSession("t.fastpath", ledger=f"sqlite:///{tmp_path}/{tag}.db", epsilon_limit=10.0, delta_limit=1e-3,
                        output=str(tmp_path / tag), sampler=recorder)
    rel = session.second_moment(df, COLS, epsilon=1.0, delta=1e-6, norm_bound=100.0, **kw)
    return recorder.draws[0].values, rel.arrays["matrix"]


def _spark_reader(monkeypatch):
    import spark_dp.second_moment.api as api

    monkeypatch.setattr(api, "choose_source_paths", lambda *a, **k: None)


def _path_log(caplog):
    lines = [r.getMessage() for r in caplog.records if r.name == "spark_dp"
             and ("Parquet path" in r.getMessage() or "Spark reader path" in r.getMessage())]
    assert lines, "no path log line"
    return lines[-1]


@pytest.mark.parametrize("frame", ["table", "table_partition_filter", "read"])
def test_plain_scan_takes_the_direct_path_with_the_same_matrix(spark, sources, tmp_path, caplog, monkeypatch, frame):
    df = {
        "table": lambda: spark.table(sources["table"]),
        "table_partition_filter": lambda: spark.table(sources["table"]).where("p = 1"),
        "read": lambda: spark.read.parquet(sources["dir"]).select("c", "b", "a", "name"),
    }[frame]()
    files = parquet_scan(df, COLS).files
    assert files and all(f.endswith(".parquet") for f in files)
    if frame == "table_partition_filter":  # the partition filter pruned the files
        assert len(files) < len(parquet_scan(spark.table(sources["table"]), COLS).files)
        assert all("/p=1/" in f for f in files)

    with caplog.at_level(logging.INFO, logger="spark_dp"):
        auto_exact, auto = _release(tmp_path, "auto", df)
    assert "direct Parquet path, detected" in _path_log(caplog)
    explicit_exact, explicit = _release(tmp_path, "explicit", df, source_paths=files)
    _spark_reader(monkeypatch)
    reader_exact, reader = _release(tmp_path, "reader", df)
    assert np.array_equal(auto_exact, reader_exact) and np.array_equal(auto_exact, explicit_exact)
    assert np.array_equal(auto, reader) and np.array_equal(auto, explicit)
    # and it is the matrix of the rows the frame holds
    A = np.array([r for r in df.select(*COLS).collect() if all(v is not None and np.isfinite(v) for v in r)])
    want = A.T @ A
    assert np.array_equal(auto_exact, want[np.triu_indices(3)])


@pytest.mark.parametrize("case, reason", [
    ("data_filter", "filter on data columns"),
    ("read_partition_filter", "partition filter on a path-based read"),
    ("derived", "derives or renames"),
    ("renamed", "derives or renames"),
    ("local", "not one file scan"),
    ("csv", "not Parquet"),
    ("union", "not one file scan"),
    ("limit", "has a"),
])
def test_anything_else_falls_back_to_the_spark_reader(spark, sources, tmp_path, caplog, case, reason):
    table = spark.table(sources["table"])
    if case == "csv":
        spark.table(sources["table"]).select(*COLS).write.csv(str(tmp_path / "csv"))
    df = {
        "data_filter": lambda: table.where("a > 0.5"),
        "read_partition_filter": lambda: spark.read.parquet(sources["dir"]).where(F.col("p").isin(0, 2)),
        "derived": lambda: table.withColumn("a", F.col("a") * 2),
        "renamed": lambda: table.select(F.col("b").alias("a"), F.col("a").alias("b"), "c"),
        "local": lambda: spark.createDataFrame(table.select(*COLS).toPandas()),
        "csv": lambda: spark.read.csv(str(tmp_path / "csv"), schema="a double, b double, c double"),
        "union": lambda: table.union(table),
        "limit": lambda: table.limit(10),
    }[case]()
    scan = parquet_scan(df, COLS)
    assert scan.files is None and reason in scan.reason, scan
    with caplog.at_level(logging.INFO, logger="spark_dp"):
        exact, _ = _release(tmp_path, case, df)
    line = _path_log(caplog)
    assert "Spark reader path" in line and reason in line
    A = np.array([r for r in df.select(*COLS).collect() if all(v is not None and np.isfinite(v) for v in r)])
    assert np.array_equal(exact, (A.T @ A)[np.triu_indices(3)])


def test_a_raw_partition_column_is_not_read_from_the_files(spark, sources):
    scan = parquet_scan(spark.table(sources["table"]), ["a", "p"])
    assert scan.files is None and "'p' is not a data column" in scan.reason


def test_detection_starts_no_spark_job(spark, sources):
    tracker = spark.sparkContext.statusTracker()
    df = spark.table(sources["table"]).where("p = 2")
    before = set(tracker.getJobIdsForGroup(None))
    assert parquet_scan(df, COLS).files
    assert set(tracker.getJobIdsForGroup(None)) == before


def test_plan_parsing():
    assert _top_level_fields("struct<a:double,`b c`:array<struct<x:int,y:int>>,d:decimal(10,2)>") == ["a", "b c", "d"]
    scan = ("+- *(1) ColumnarToRow\n   +- FileScan parquet t[a#1,b#2,p#3] Batched: true, DataFilters: [], "
            "Format: Parquet, Location: {index}(1 paths)[file:/x], PartitionFilters: [], PushedFilters: [], "
            "ReadSchema: struct<a:double,b:double>\n")
    plan = "== Physical Plan ==\n*(1) Project [a#1, b#2]\n" + scan
    assert _check_plan(plan.format(index="InMemoryFileIndex"), ["a", "b"]) is None
    assert "TahoeLogFileIndex" in _check_plan(plan.format(index="TahoeLogFileIndex"), ["a", "b"])
    assert "derives" in _check_plan(plan.replace("Project [a#1, b#2]", "Project [(a#1 + 1.0) AS a#5, b#2]")
                                    .format(index="InMemoryFileIndex"), ["a", "b"])


def test_wide_frames_are_detected_and_the_explain_limits_restored(spark, tmp_path):
    # explain abbreviates ReadSchema at 100 characters (ten double columns) and field lists at 25 fields;
    # before the check raised both for its explain, every frame of d >= 10 fell back to the Spark reader.
    cols = [f"column_{i:02d}" for i in range(40)]
    path = str(tmp_path / "wide")
    spark.range(20).select(*[(F.col("id") * i).cast("double").alias(c) for i, c in enumerate(cols)]).write.parquet(path)
    spark.conf.set("spark.sql.debug.maxToStringFields", "30")
    try:
        df = spark.read.parquet(path)
        for chosen in (cols, cols[::-1], cols[5:17]):
            scan = parquet_scan(df, chosen)
            assert scan.files and scan.reason.startswith("a plain Parquet scan"), scan.reason
        assert parquet_scan(df.where("column_03 > 1"), cols).files is None
        assert spark.conf.get("spark.sql.debug.maxToStringFields") == "30"
        assert spark.conf.get("spark.sql.maxMetadataStringLength", None) in (None, "100")
    finally:
        spark.conf.unset("spark.sql.debug.maxToStringFields")


def test_an_abbreviated_read_schema_falls_back_with_its_reason():
    plan = ("== Physical Plan ==\n*(1) ColumnarToRow\n+- FileScan parquet [a#1,b#2] Batched: true, DataFilters: [], "
            "Format: Parquet, Location: InMemoryFileIndex(1 paths)[file:/x], PartitionFilters: [], PushedFilters: [], "
            "ReadSchema: struct<a:double,b:do...\n")
    assert "abbreviated" in _check_plan(plan, ["a", "b"])


@pytest.mark.parametrize("nonfinite, clipping_report", [("drop", False), ("zero", True)])
def test_regression_intercept_takes_the_direct_path_with_the_same_release(spark, sources, tmp_path, caplog,
                                                                         monkeypatch, nonfinite, clipping_report):
    # fit_intercept=True (the default) inserts the public constant B/sqrt(d) column: the tasks insert it themselves
    # (issue #17), so the plain scan no longer falls back to the Spark reader, and the exact matrix and the seeded
    # release are the reader's bit for bit (quarter-integers and the constant 100/2 = 50: every sum is exact).
    df = spark.table(sources["table"])

    def regression(tag):
        recorder = Recorder(SeededSampler(np.random.default_rng(7)))
        session = DPSession("t.fastpath", ledger=f"sqlite:///{tmp_path}/{tag}.db", epsilon_limit=10.0,
                            delta_limit=1e-3, output=str(tmp_path / tag), sampler=recorder)
        rel = session.linear_regression(df, ["a", "b"], "c", epsilon=1.0, delta=1e-6, norm_bound=100.0,
                                        nonfinite=nonfinite, clipping_report=clipping_report)
        return [d.values for d in recorder.draws], rel.arrays

    with caplog.at_level(logging.INFO, logger="spark_dp"):
        direct_exact, direct = regression("direct")
    assert "direct Parquet path, detected" in _path_log(caplog)
    _spark_reader(monkeypatch)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="spark_dp"):
        reader_exact, reader = regression("reader")
    assert not any("Parquet path" in r.getMessage() for r in caplog.records)
    assert len(direct_exact) == len(reader_exact) == 1 + clipping_report
    assert all(np.array_equal(a, b) for a, b in zip(direct_exact, reader_exact, strict=True))
    assert direct.keys() == reader.keys() and "intercept" in direct
    assert all(np.array_equal(direct[k], reader[k]) for k in direct)
    # the matrix of [a, b, 50, c] over the kept rows (the constant before the label, as the Spark expression puts it)
    rows = [r for r in df.select("a", "b", "c").collect()]
    if nonfinite == "drop":
        rows = [r for r in rows if all(v is not None and np.isfinite(v) for v in r)]
    A = np.array([[0.0 if v is None or not np.isfinite(v) else v for v in r] for r in rows])
    A = np.insert(A, 2, 50.0, axis=1)
    assert np.array_equal(direct_exact[0], (A.T @ A)[np.triu_indices(4)])
