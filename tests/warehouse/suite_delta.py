"""Delta Lake, for real: spark-dp over Delta tables written and read by the delta-spark jars.

Run by ``tests/test_warehouse.py`` in its own process (see ``conftest.py``).
Covers: path and catalog-table reads with time travel (``versionAsOf``,
``timestampAsOf``, SQL ``VERSION AS OF``) recording the version actually
read in the manifest and the ledger charge; job configs with
``format: delta`` / ``dataset.version`` / ``dataset.timestamp``; re-runs
over a table that moved on (``input_changed``) and with an explicit version;
``output.format: delta`` and ``ledger --export-format delta`` read back equal
to their Parquet counterparts; a daily plan over a Delta table partitioned by
day; a fresh ``spark-dp plan run`` process whose one session gets the jars
of both its entries (a Delta one and, where the line has an Iceberg build,
an Iceberg one) by itself; and a fresh ``spark-dp release`` that gets the
one clear error when the jars cannot be fetched, with nothing charged.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml
from compare import same_rows
from conftest import FORMATS

from spark_dp import DPSession
from spark_dp.cli.main import main as cli_main
from spark_dp.errors import SchemaError
from spark_dp.privacy import open_ledger
from spark_dp.release import lineage as L

KEY = bytes(range(32))  # a lineage key (a ledger holds one; these lineages are compared within one key)

EPS, DELTA = 1.0, 1e-6
ROWS = "x double, y double, ds string"


def _rows(n: int, ds: str, shift: float = 0.0):
    return [((i % 5) / 5 + shift, (i % 3) / 3, ds) for i in range(n)]


@pytest.fixture
def delta_path(spark, tmp_path):
    """A Delta table by path with versions 0 (20 rows) and 1 (10 rows more)."""
    path = str(tmp_path / "events")
    spark.createDataFrame(_rows(20, "2026-11-29"), ROWS).write.format("delta").save(path)
    spark.createDataFrame(_rows(10, "2026-11-30", 0.1), ROWS).write.format("delta").mode("append").save(path)
    return path


def _dp(tmp_path, name="ds"):
    return DPSession(name, ledger=f"sqlite:///{tmp_path}/ledger.db", epsilon_limit=20.0, delta_limit=1e-4,
                     output=str(tmp_path / "out"), sampler="numpy")


def _delta_entry(lineage):
    [entry] = [t for t in lineage["tables"] if t["provider"] == "delta"]
    return entry


def _cli(capsys, *args) -> dict:
    assert cli_main(list(args)) == 0
    return json.loads(capsys.readouterr().out)


def _config(tmp_path, dataset: dict, *, release_id="job-1", output=None, name="job.yaml") -> str:
    cfg = {"release_id": release_id, "task": "second_moment", "mechanism": "analyze_gauss",
           "dataset": {"id": "events", "columns": ["x", "y"], **dataset},
           "privacy": {"epsilon": EPS, "delta": DELTA, "norm_bound": 2.0, "sampler": "numpy"}, "params": {},
           "ledger": {"uri": f"sqlite:///{tmp_path}/jobs.db", "epsilon_limit": 20.0, "delta_limit": 1e-4},
           "output": output or {"path": str(tmp_path / "job-releases")}}
    path = tmp_path / name
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


# -- the version actually read --------------------------------------------------------------------------
def test_a_time_travel_read_by_path_records_the_version_read_not_the_latest(spark, tmp_path, delta_path):
    dp = _dp(tmp_path)
    kw = dict(epsilon=EPS, delta=DELTA, norm_bound=2.0)
    old = dp.second_moment(spark.read.format("delta").option("versionAsOf", 0).load(delta_path), ["x", "y"],
                           release_id="v0", **kw)
    latest = dp.second_moment(spark.read.format("delta").load(delta_path), ["x", "y"], release_id="v1", **kw)
    assert old.manifest["input"] == {"kind": "table", "tables": [
        {"name": None, "provider": "delta", "version": "0", "version_kind": "delta_version"}]}
    assert _delta_entry(latest.manifest["input"])["version"] == "1"
    assert dp.ledger.lookup("v0").lineage == old.manifest["input"]  # the charge records it too
    assert delta_path not in json.dumps(old.manifest["input"])  # no paths
    # timestampAsOf: the version current at that time (Delta's commit times), here version 0
    [(t0,)] = spark.sql(f"DESCRIBE HISTORY delta.`{delta_path}`").filter("version = 0").select("timestamp").collect()
    at = dp.second_moment(spark.read.format("delta").option("timestampAsOf", str(t0)).load(delta_path), ["x", "y"],
                          release_id="t0", **kw)
    assert _delta_entry(at.manifest["input"])["version"] == "0"
    # the no-Spark re-run check computes the same lineage from the log
    assert L.delta_path_lineage(delta_path, {"version": 0}) == old.manifest["input"]
    assert L.delta_path_lineage(delta_path) == latest.manifest["input"]


def test_a_catalog_table_records_the_version_read_with_every_time_travel_form(spark, tmp_path, delta_path):
    name = "default.events_tt"
    spark.sql(f"CREATE TABLE {name} USING delta LOCATION '{delta_path}'")
    try:
        def version(df):
            [entry] = L.input_lineage(df, KEY)["tables"]
            assert entry["name"].endswith(name) and entry["provider"] == "delta"
            return entry["version"]

        assert version(spark.table(name)) == "1"
        assert version(spark.read.option("versionAsOf", 0).table(name)) == "0"
        assert version(spark.sql(f"SELECT * FROM {name} VERSION AS OF 0")) == "0"
        assert version(spark.table(name).filter("ds = '2026-11-30'")) == "1"
        # what the lineage did before: DESCRIBE HISTORY's latest version, wrong for a time-travel read
        assert spark.sql(f"DESCRIBE HISTORY {name} LIMIT 1").collect()[0]["version"] == 1
        lineage = L.input_lineage(spark.read.option("versionAsOf", 0).table(name), KEY)
        assert L.DIGEST not in lineage  # every table versioned: the version says it all
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {name}")


@pytest.mark.parametrize("checkpoint", ["classic", "multi-part", "v2"])
def test_the_version_read_survives_a_log_cleaned_up_after_a_checkpoint(spark, tmp_path, checkpoint):
    """Delta's log clean-up removes the commits before a checkpoint: the versions still readable are still named."""
    path = str(tmp_path / f"cleaned-{checkpoint}")
    props = {"delta.checkpointInterval": "2"}
    if checkpoint == "v2":
        props["delta.checkpointPolicy"] = "v2"
    spark.createDataFrame(_rows(6, "2026-11-29"), ROWS).write.format("delta").save(path)  # version 0
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES (" + ", ".join(f"'{k}' = '{v}'" for k, v in props.items())
              + ")")  # version 1
    if checkpoint == "multi-part":
        spark.conf.set("spark.databricks.delta.checkpoint.partSize", "2")  # actions per part: several parts
    try:
        for i in range(3):  # versions 2, 3, 4: checkpoints at 2 and 4
            spark.createDataFrame(_rows(4, "2026-11-30", 0.1 * (i + 1)), ROWS).write.format("delta") \
                .mode("append").save(path)
    finally:
        spark.conf.unset("spark.databricks.delta.checkpoint.partSize")
    log_dir = os.path.join(path, "_delta_log")
    names = sorted(os.listdir(log_dir))
    marks = {"classic": ".checkpoint.parquet", "multi-part": ".checkpoint.0000000001.", "v2": ".checkpoint."}
    assert any(n.startswith("00000000000000000002" + marks[checkpoint]) for n in names), names
    for name in names:  # what Delta's clean-up does: the commits (and their checksums) before the checkpoint go
        if name.split(".")[0].isdigit() and int(name.split(".")[0]) < 2:
            os.remove(os.path.join(log_dir, name))
    assert not L.delta_path_lineage(path, {"version": 1})
    for version in (2, 3):
        df = spark.read.format("delta").option("versionAsOf", version).load(path)
        assert _delta_entry(L.input_lineage(df, KEY))["version"] == str(version)
        assert L.delta_path_lineage(path, {"version": version}) == L.input_lineage(df, KEY)
    assert _delta_entry(L.input_lineage(spark.read.format("delta").load(path), KEY))["version"] == "4"
    assert _delta_entry(L.delta_path_lineage(path))["version"] == "4"
    assert L.delta_path_lineage(path, {"version": 0}) is None  # gone from the log: Delta cannot read it either
    dp = _dp(tmp_path)
    rel = dp.second_moment(spark.read.format("delta").option("versionAsOf", 3).load(path), ["x", "y"], epsilon=EPS,
                           delta=DELTA, norm_bound=2.0, release_id=f"cleaned-{checkpoint}")
    assert _delta_entry(rel.manifest["input"])["version"] == "3"
    assert dp.ledger.lookup(f"cleaned-{checkpoint}").lineage == rel.manifest["input"]


def test_a_version_that_does_not_exist_is_refused_before_anything_is_charged(spark, tmp_path, delta_path, capsys):
    from spark_dp.aggregates import read_dataset

    with pytest.raises(SchemaError, match="has no version"):
        read_dataset(spark, delta_path, "delta", {"versionAsOf": "7"})
    cfg = _config(tmp_path, {"path": delta_path, "format": "delta", "version": 7})
    assert cli_main(["release", cfg]) != 0
    assert "has no version" in capsys.readouterr().err
    assert not open_ledger(f"sqlite:///{tmp_path}/jobs.db").all_charges()


# -- scheduled re-runs over a table that moved on ------------------------------------------------------
def test_a_rerun_over_a_moved_table_is_flagged_and_an_explicit_version_returns_the_stored_release(
        spark, tmp_path, delta_path, capsys):
    latest = _config(tmp_path, {"path": delta_path, "format": "delta"}, release_id="daily", name="latest.yaml")
    pinned = _config(tmp_path, {"path": delta_path, "format": "delta", "version": 1}, release_id="pinned",
                     name="pinned.yaml")
    first = _cli(capsys, "release", latest)
    first_pinned = _cli(capsys, "release", pinned)
    assert first["reused"] is False and first_pinned["reused"] is False
    ledger = open_ledger(f"sqlite:///{tmp_path}/jobs.db")
    assert _delta_entry(ledger.lookup("daily").lineage)["version"] == "1"
    assert _cli(capsys, "release", latest)["input_changed"] is False  # answered from the ledger and the log

    spark.createDataFrame(_rows(5, "2026-12-01", 0.2), ROWS).write.format("delta").mode("append").save(delta_path)
    again = _cli(capsys, "release", latest)
    assert again["reused"] is True and again["input_changed"] is True  # the table moved on: said so
    stored = _cli(capsys, "release", pinned)
    assert stored["reused"] is True and stored["input_changed"] is False  # version 1 is still version 1
    assert len(ledger.all_charges()) == 2  # no new charge, no new noise
    with open(os.path.join(first_pinned["path"], "manifest.json")) as fh:
        assert _delta_entry(json.load(fh)["input"])["version"] == "1"


def test_a_table_config_reads_the_version_and_the_timestamp_it_names(spark, tmp_path, delta_path, capsys):
    name = "default.events_cfg"
    spark.sql(f"CREATE TABLE {name} USING delta LOCATION '{delta_path}'")
    try:
        got = _cli(capsys, "release", _config(tmp_path, {"table": name, "format": "delta", "version": 0},
                                               release_id="tv0", name="tv0.yaml"))
        ledger = open_ledger(f"sqlite:///{tmp_path}/jobs.db")
        assert _delta_entry(ledger.lookup("tv0").lineage)["version"] == "0"
        [(t1,)] = spark.sql(f"DESCRIBE HISTORY {name}").filter("version = 1").select("timestamp").collect()
        when = t1.replace(tzinfo=UTC) if t1.tzinfo is None else t1  # the session runs in UTC
        _cli(capsys, "release", _config(tmp_path, {"table": name, "format": "delta",
                                                   "timestamp": when.strftime("%Y-%m-%d %H:%M:%S.%f")},
                                        release_id="tt1", name="tt1.yaml"))
        assert _delta_entry(ledger.lookup("tt1").lineage)["version"] == "1"
        assert got["reused"] is False
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {name}")


def test_a_rerun_over_a_catalog_table_that_moved_on_is_flagged(spark, tmp_path, delta_path, capsys):
    name = "default.events_rerun"
    spark.sql(f"CREATE TABLE {name} USING delta LOCATION '{delta_path}'")
    try:
        latest = _config(tmp_path, {"table": name}, release_id="t-daily", name="t-latest.yaml")
        pinned = _config(tmp_path, {"table": name, "format": "delta", "version": 1}, release_id="t-pinned",
                         name="t-pinned.yaml")
        assert _cli(capsys, "release", latest)["reused"] is False
        assert _cli(capsys, "release", pinned)["reused"] is False
        same = _cli(capsys, "release", latest)
        assert same["reused"] is True and same["input_changed"] is False  # the catalog says: still version 1
        spark.createDataFrame(_rows(5, "2026-12-01", 0.2), ROWS).write.format("delta").mode("append") \
            .save(delta_path)
        moved = _cli(capsys, "release", latest)
        assert moved["reused"] is True and moved["input_changed"] is True
        stored = _cli(capsys, "release", pinned)
        assert stored["reused"] is True and stored["input_changed"] is False
        assert len(open_ledger(f"sqlite:///{tmp_path}/jobs.db").all_charges()) == 2
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {name}")


# -- releases and the ledger as Delta tables -----------------------------------------------------------
def test_output_delta_and_ledger_export_read_back_equal_to_parquet(spark, tmp_path, delta_path, capsys):
    out_delta = {"path": str(tmp_path / "job-releases"), "table": "default.dp_releases_delta", "format": "delta"}
    try:
        cfg = _config(tmp_path, {"path": delta_path, "format": "delta", "version": 0}, release_id="pub",
                      output=out_delta, name="d.yaml")
        done = _cli(capsys, "release", cfg)
        _cli(capsys, "release", cfg)  # a re-run publishes nothing twice
        from spark_dp import load_release
        from spark_dp.release.table import write_release_table

        assert write_release_table(spark, load_release(done["path"]), "default.dp_releases_parquet", format="parquet")
        detail = spark.sql("DESCRIBE DETAIL default.dp_releases_delta").collect()[0]
        assert detail["format"] == "delta"
        order = ["release_id", "array", "i", "j"]
        d = spark.table("default.dp_releases_delta").toPandas().sort_values(order).reset_index(drop=True)
        p = spark.table("default.dp_releases_parquet").toPandas().sort_values(order).reset_index(drop=True)
        assert len(d) > 0 and set(d["release_id"]) == {"pub"} and d.equals(p)
        np.testing.assert_array_equal(d["value"].to_numpy(), p["value"].to_numpy())

        uri = f"sqlite:///{tmp_path}/jobs.db"
        _cli(capsys, "ledger", "--uri", uri, "--export", str(tmp_path / "ledger.parquet"))
        got = _cli(capsys, "ledger", "--uri", uri, "--export", "default.dp_ledger", "--export-format", "delta")
        assert got["format"] == "delta" and got["charges"] == 1
        assert spark.sql("DESCRIBE DETAIL default.dp_ledger").collect()[0]["format"] == "delta"
        from_file = pq.read_table(tmp_path / "ledger.parquet")
        assert same_rows(spark.table("default.dp_ledger"), from_file)
    finally:
        for t in ("dp_releases_delta", "dp_releases_parquet", "dp_ledger"):
            spark.sql(f"DROP TABLE IF EXISTS default.{t}")


# -- a daily plan over a Delta table partitioned by day -------------------------------------------------
def test_a_daily_plan_over_a_delta_table_partitioned_by_day(spark, tmp_path, capsys):
    root = str(tmp_path / "shop_events")
    for day in ("2026-11-29", "2026-11-30"):
        spark.createDataFrame(_rows(12, day), ROWS).write.format("delta").mode("append").partitionBy("ds").save(root)
    spark.sql(f"CREATE TABLE default.shop_events USING delta LOCATION '{root}'")
    plan = {
        "plan": "shop", "ledger": {"uri": f"sqlite:///{tmp_path}/plan.db"}, "output": {"path": str(tmp_path / "rel")},
        "entries": [{
            "name": "cov", "schedule": "daily", "budget": {"epsilon": 1.0, "delta": 1e-5, "renew": "per_period"},
            "inline": {
                "dataset": {"id": "shop.events", "table": "default.shop_events", "format": "delta",
                            "where": "ds = '${date}'", "columns": ["x", "y"]},
                "task": "second_moment", "mechanism": "analyze_gauss",
                "privacy": {"epsilon": 0.5, "delta": 1e-6, "norm_bound": 2.0, "sampler": "numpy"},
                "ledger": {"uri": f"sqlite:///{tmp_path}/plan.db"},
                "output": {"path": str(tmp_path / "rel"), "table": "default.shop_cov", "format": "delta"}}}]}
    plan_path = tmp_path / "plan.yaml"
    plan_path.write_text(yaml.safe_dump(plan))
    try:
        _cli(capsys, "plan", "run", str(plan_path), "--date", "2026-11-29")
        spark.createDataFrame(_rows(12, "2026-11-30", 0.3), ROWS).write.format("delta").mode("append") \
            .partitionBy("ds").save(root)  # version 2: the next day's rows arrive
        _cli(capsys, "plan", "run", str(plan_path), "--date", "2026-11-30")
        ledger = open_ledger(f"sqlite:///{tmp_path}/plan.db")
        versions = {c.release_id: _delta_entry(c.lineage)["version"] for c in ledger.all_charges()}
        assert versions == {"shop.cov.2026-11-29": "1", "shop.cov.2026-11-30": "2"}
        assert {c.dataset_id for c in ledger.all_charges()} == {"shop.events@2026-11-29", "shop.events@2026-11-30"}
        table = spark.table("default.shop_cov")
        assert {r[0] for r in table.select("release_id").distinct().collect()} == set(versions)
        assert spark.sql("DESCRIBE DETAIL default.shop_cov").collect()[0]["format"] == "delta"
        _cli(capsys, "plan", "run", str(plan_path), "--date", "2026-11-29")  # re-run: stored, nothing new
        assert len(ledger.all_charges()) == 2 and table.count() == spark.table("default.shop_cov").count()
    finally:
        for t in ("shop_events", "shop_cov"):
            spark.sql(f"DROP TABLE IF EXISTS default.{t}")


# -- a fresh process: spark-dp arranges the jars, or says what to install -----------------------------------
def _fresh_env(workdir, conf=None, **ivy) -> dict[str, str]:
    from ivy import submit_args

    env = dict(os.environ)
    env["PYSPARK_SUBMIT_ARGS"] = submit_args(str(workdir), conf=conf, **ivy)
    env["SPARK_DP_MASTER"] = "local[1]"
    return env


def _spark_dp(args, env, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "spark_dp.cli.main", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def _resolved(coordinates: str) -> str:
    """How Spark's Ivy report names ``group:artifact:version`` once it resolved it."""
    group, artifact, version = coordinates.split(":")
    return f"{group}#{artifact};{version}"


def _plan_entry(name: str, dataset: dict, tmp_path) -> dict:
    return {"name": name, "schedule": "daily", "budget": {"epsilon": 1.0, "delta": 1e-5, "renew": "per_period"},
            "inline": {"dataset": {"columns": ["x", "y"], **dataset}, "task": "second_moment",
                       "mechanism": "analyze_gauss",
                       "privacy": {"epsilon": 0.5, "delta": 1e-6, "norm_bound": 2.0, "sampler": "numpy"},
                       "ledger": {"uri": f"sqlite:///{tmp_path}/fresh.db"}, "output": {"path": str(tmp_path / "fresh")}}}


def test_a_fresh_plan_process_gets_the_jars_of_every_entry_and_records_the_versions_read(
        spark, warehouse, tmp_path, delta_path):
    """``spark-dp plan run`` in a new process: one session, made by spark-dp, for a Delta entry and an Iceberg one.

    The plan's first entry (Delta, by path, version 0) starts the session: it must already carry the Iceberg
    runtime the second entry (a snapshot of an Iceberg table in the Hadoop catalog ``local``) needs. Both
    releases are written, and their manifests and charges name the version and the snapshot read, not the
    latest. On a line without an Iceberg build (4.2) the plan has the Delta entry alone.
    """
    from spark_dp.runtime import TABLE_FORMAT_PACKAGES, spark_line

    iceberg = "iceberg" in FORMATS
    entries = [_plan_entry("d", {"id": "events", "path": delta_path, "format": "delta", "version": 0}, tmp_path)]
    conf = {"spark.databricks.delta.snapshotPartitions": "1"}  # as the suite's session: Delta's log replay in 1 task
    if iceberg:
        table = "local.db.plan_events"
        spark.sql(f"CREATE TABLE {table} (x double, y double, ds string) USING iceberg")
        spark.createDataFrame(_rows(8, "2026-11-29"), ROWS).writeTo(table).append()
        spark.createDataFrame(_rows(4, "2026-11-30", 0.1), ROWS).writeTo(table).append()
        [s0, s1] = [r[0] for r in spark.sql(f"SELECT snapshot_id FROM {table}.snapshots ORDER BY committed_at")
                    .collect()]
        entries.append(_plan_entry("i", {"id": "ice", "table": table, "format": "iceberg", "snapshot_id": s0},
                                   tmp_path))
        conf.update({"spark.sql.catalog.local": "org.apache.iceberg.spark.SparkCatalog",  # the user's catalog
                     "spark.sql.catalog.local.type": "hadoop", "spark.sql.catalog.local.warehouse": warehouse})
    plan = tmp_path / "fresh-plan.yaml"
    plan.write_text(yaml.safe_dump({"plan": "fresh", "ledger": {"uri": f"sqlite:///{tmp_path}/fresh.db"},
                                    "output": {"path": str(tmp_path / "fresh")}, "entries": entries}))
    try:
        got = _spark_dp(["plan", "run", str(plan), "--date", "2026-11-29"], _fresh_env(tmp_path / "ivy-ok", conf),
                        tmp_path)
    finally:
        if iceberg:
            spark.sql(f"DROP TABLE IF EXISTS {table}")
    assert got.returncode == 0, got.stderr[-3000:]
    line = spark_line()
    for fmt in ("delta", "iceberg") if iceberg else ("delta",):  # Spark resolved the coordinates spark-dp chose
        assert _resolved(TABLE_FORMAT_PACKAGES[fmt][line]) in got.stderr, fmt
    done = json.loads(got.stdout[got.stdout.index("\n{") + 1:])  # after Ivy's own stdout lines
    assert [(e["entry"], e["status"]) for e in done["entries"]] == [("d", "released")] + ([("i", "released")]
                                                                                         if iceberg else [])
    ledger = open_ledger(f"sqlite:///{tmp_path}/fresh.db")
    inputs = {}
    for e in done["entries"]:
        with open(os.path.join(e["path"], "manifest.json")) as fh:
            inputs[e["entry"]] = json.load(fh)["input"]
        assert ledger.lookup(e["release_id"]).lineage == inputs[e["entry"]]  # the charge records it too
    assert _delta_entry(inputs["d"])["version"] == "0"  # not the latest (1)
    if iceberg:
        [read] = inputs["i"]["tables"]
        assert read["name"].endswith(table) and (read["provider"], read["version_kind"]) == \
            ("iceberg", "iceberg_snapshot_id")
        assert read["version"] == str(s0) != str(s1)


def test_a_machine_that_cannot_fetch_the_jars_gets_one_clear_error_and_nothing_is_charged(tmp_path, delta_path):
    """``spark-dp release`` in a new process with an empty Ivy cache and a repository nobody answers (port 9)."""
    from spark_dp.runtime import TABLE_FORMAT_PACKAGES, spark_line

    coordinates = TABLE_FORMAT_PACKAGES["delta"][spark_line()]  # the build for the installed pyspark's line
    offline = _config(tmp_path, {"path": delta_path, "format": "delta", "version": 0}, release_id="offline",
                      name="offline.yaml")
    t0 = time.monotonic()
    bad = _spark_dp(["release", offline], _fresh_env(tmp_path / "ivy-offline", ivy=str(tmp_path / "empty-ivy"),
                                                     maven="http://127.0.0.1:9/maven2/"), tmp_path)
    assert bad.returncode != 0
    errors = [line for line in bad.stderr.splitlines() if line.startswith("spark-dp: error")]
    assert len(errors) == 1, bad.stderr[-3000:]
    assert coordinates in errors[0] and "nothing was charged" in errors[0]
    assert not open_ledger(f"sqlite:///{tmp_path}/jobs.db").all_charges()
    assert time.monotonic() - t0 < 120


def _has_iceberg_build() -> bool:
    from spark_dp.runtime import TABLE_FORMAT_PACKAGES, spark_line

    return spark_line() in TABLE_FORMAT_PACKAGES["iceberg"]


if not _has_iceberg_build():  # collected on the lines without an Iceberg build only (4.2: spark42 and delta)
    def test_on_a_line_without_an_iceberg_build_an_iceberg_job_gets_the_error_naming_the_line_to_use(tmp_path):
        """A fresh ``spark-dp release`` reading an Iceberg snapshot: one error, before Spark starts, nothing charged."""
        from spark_dp.runtime import spark_line

        cfg = _config(tmp_path, {"table": "local.db.events", "format": "iceberg", "snapshot_id": 1},
                      release_id="ice", name="ice.yaml")
        got = _spark_dp(["release", cfg], _fresh_env(tmp_path / "ivy-ice"), tmp_path)
        assert got.returncode == 2, got.stderr[-3000:]
        [error] = got.stderr.strip().splitlines()  # nothing from Spark or Ivy: no JVM started
        assert error.startswith(f"spark-dp: error: The format 'iceberg' needs Apache Iceberg for Spark {spark_line()}")
        assert "pip install 'pyspark==4.1.*'" in error and "spark-dp[delta]" not in error
        assert not open_ledger(f"sqlite:///{tmp_path}/jobs.db").all_charges()


def test_the_session_was_made_with_the_coordinates_for_this_spark_line(spark):
    from spark_dp.runtime import TABLE_FORMAT_PACKAGES, spark_line

    packages = spark.conf.get("spark.jars.packages").split(",")
    assert TABLE_FORMAT_PACKAGES["delta"][spark_line(spark.version)] in packages
    assert "io.delta.sql.DeltaSparkSessionExtension" in spark.conf.get("spark.sql.extensions")
    assert spark.conf.get("spark.sql.catalog.spark_catalog") == "org.apache.spark.sql.delta.catalog.DeltaCatalog"


def test_delta_s_python_api_works_on_the_jars_spark_dp_chose(spark, tmp_path, delta_path):
    """spark-dp needs only the jars, which carry Delta's Python API; ``spark-dp[delta]`` adds the delta-spark package.

    The session puts the jar on ``sys.path`` ahead of site-packages, so
    ``delta`` imported after the session starts is the jar's copy; imported
    before it (the extra's venv, in a fresh process), the package's.
    """
    from importlib.metadata import PackageNotFoundError, version

    import delta
    from delta.tables import DeltaTable

    assert ".jar" in delta.__file__  # the copy in the jar spark-dp chose
    assert sorted(r[0] for r in DeltaTable.forPath(spark, delta_path).history().select("version").collect()) == [0, 1]
    if os.environ.get("SPARK_DP_TEST_ENTRY") != "delta":  # every other matrix entry runs the suite without it
        with pytest.raises(PackageNotFoundError):
            version("delta-spark")
        return
    assert version("delta-spark").startswith("4.4.") and version("pyspark") == "4.2.0"
    script = (  # the package's delta.tables, imported before the session, on the jars spark-dp adds
        "import delta, delta.tables, sys\n"
        "from spark_dp.runtime import get_spark\n"
        "spark = get_spark('api', formats=('delta',))\n"
        f"h = delta.tables.DeltaTable.forPath(spark, {delta_path!r}).history().select('version').collect()\n"
        "print('API', delta.__file__, sorted(r[0] for r in h))\n")
    got = subprocess.run([sys.executable, "-c", script], env=_fresh_env(tmp_path / "ivy-api"), cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, got.stderr[-3000:]
    [line] = [x for x in got.stdout.splitlines() if x.startswith("API ")]
    assert "site-packages" in line and line.endswith("[0, 1]"), line
