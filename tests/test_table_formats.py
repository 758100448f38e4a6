"""Delta Lake / Iceberg without their jars: the coordinates per Spark line and the config keys, checked before Spark.

The formats themselves run for real in ``tests/warehouse/`` (``tests/test_warehouse.py``), a plan whose
entries read a Delta and an Iceberg table in a fresh process included. Here, the project's own pyspark line
(4.3, no build of either yet) gets the one error in a fresh process, without Spark.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime

import pytest
import yaml

from spark_dp.cli.config import JobConfig
from spark_dp.errors import ConfigError
from spark_dp.runtime import TABLE_FORMAT_PACKAGES, spark_line, table_format_conf
from tests._servers import REPO, spark_env


def _cfg(tmp_path, dataset: dict, output: dict | None = None) -> dict:
    return {"release_id": "r", "task": "second_moment", "mechanism": "analyze_gauss",
            "dataset": {"id": "d", "columns": ["x", "y"], **dataset},
            "privacy": {"epsilon": 1.0, "delta": 1e-6, "norm_bound": 1.0}, "params": {},
            "ledger": {"uri": f"sqlite:///{tmp_path}/l.db", "epsilon_limit": 3.0, "delta_limit": 1e-5},
            "output": output or {"path": str(tmp_path / "out")}}


def test_each_spark_line_gets_the_build_made_for_it():
    conf = table_format_conf(["delta", "iceberg"], spark_version="3.5.8")
    assert conf["spark.jars.packages"] == ("io.delta:delta-spark_2.12:3.3.3,"
                                           "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.1")
    assert conf["spark.sql.extensions"] == ("io.delta.sql.DeltaSparkSessionExtension,"
                                            "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
    assert conf["spark.sql.catalog.spark_catalog"] == "org.apache.spark.sql.delta.catalog.DeltaCatalog"
    assert table_format_conf(["delta"], spark_version="4.1.1")["spark.jars.packages"] == \
        "io.delta:delta-spark_4.1_2.13:4.4.0"
    assert "spark.sql.catalog.spark_catalog" not in table_format_conf(["iceberg"], spark_version="4.0.0")
    assert table_format_conf(["parquet"], spark_version="4.3.0") == {}
    for fmt, builds in TABLE_FORMAT_PACKAGES.items():  # scala 2.12 on 3.5, 2.13 on 4.x, the line in the name
        for line, coords in builds.items():
            assert ("_2.12" in coords) == (line == "3.5") and (line in coords or fmt == "delta" and line == "3.5")


def test_a_spark_line_without_a_release_gets_one_error_naming_what_to_install():
    with pytest.raises(ConfigError, match=r"'delta' needs Delta Lake for Spark 4\.3.*builds for Spark 3\.5, 4\.0, "
                                          r"4\.1, 4\.2\).*pyspark==4\.2\.\*.*spark-dp\[delta\]"):
        table_format_conf(["delta"], spark_version="4.3.0")
    with pytest.raises(ConfigError, match=r"^The format 'iceberg' needs Apache Iceberg for Spark 4\.2, .*builds for "
                                          r"Spark 3\.5, 4\.0, 4\.1\): install one of those \(pip install "
                                          r"'pyspark==4\.1\.\*'\)") as got:
        table_format_conf(["iceberg"], spark_version="4.2.1")
    assert "spark-dp[delta]" not in str(got.value)  # the Delta extra brings no Iceberg
    # Delta has a 4.2 build, Iceberg not: the session carries both, so the line to install has both (4.1)
    with pytest.raises(ConfigError, match=r"^The format 'iceberg' needs .*Spark 4\.2.*a line with builds of 'delta' "
                                          r"and 'iceberg' \(pip install 'pyspark==4\.1\.\*'\)") as got:
        table_format_conf(["iceberg", "delta", "parquet"], spark_version="4.2.0")
    assert "spark-dp[delta]" not in str(got.value)
    # neither has a build: one error naming both
    with pytest.raises(ConfigError, match=r"^The formats 'delta' and 'iceberg' have no release for Spark 4\.3 yet "
                                          r"\(Delta Lake has builds for Spark 3\.5, 4\.0, 4\.1, 4\.2; Apache Iceberg "
                                          r"has builds for Spark 3\.5, 4\.0, 4\.1\).*pyspark==4\.1\.\*"):
        table_format_conf(["delta", "iceberg"], spark_version="4.3.0")
    with pytest.raises(ConfigError, match="'delta' needs Delta Lake for Spark 3.4"):  # older lines: not a build either
        table_format_conf(["delta"], spark_version="3.4.4")


def test_the_line_to_install_is_the_newest_by_number_and_formats_without_a_common_line_say_so(monkeypatch):
    monkeypatch.setitem(TABLE_FORMAT_PACKAGES, "delta", {"4.9": "d:delta-4.9:1", "4.10": "d:delta-4.10:1"})
    with pytest.raises(ConfigError, match=r"builds for Spark 4\.9, 4\.10\).*pyspark==4\.10\.\*"):
        table_format_conf(["delta"], spark_version="4.11.0")
    monkeypatch.setitem(TABLE_FORMAT_PACKAGES, "iceberg", {"3.5": "i:iceberg-3.5:1"})
    with pytest.raises(ConfigError, match=r"no Spark line has builds of all of 'delta', 'iceberg': use them in "
                                          r"separate jobs"):
        table_format_conf(["delta", "iceberg"], spark_version="4.10.0")
    assert table_format_conf(["delta"], spark_version="4.10.1")["spark.jars.packages"] == "d:delta-4.10:1"


def _cli(args: list[str], cwd, env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "spark_dp.cli.main", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_on_the_projects_spark_line_a_job_and_a_plan_get_the_error_before_spark_starts_and_charge_nothing(tmp_path):
    """A fresh ``spark-dp`` process on the project venv's pyspark (4.3, no Delta or Iceberg build yet).

    A release reading a Delta table: one error naming the extra and the line to install. A plan with a Delta
    entry and an Iceberg entry: its one session would carry both, so each entry fails with the error naming
    both formats and the line that has both. No JVM starts (nothing listens for one: no Ivy report on
    stderr), nothing is charged or written.
    """
    line = spark_line()
    assert all(line not in TABLE_FORMAT_PACKAGES[f] for f in ("delta", "iceberg")), \
        f"pyspark {line} has a Delta or Iceberg build now: this test checks a line without one"
    env = spark_env(tmp_path / "local", PYTHONPATH=str(REPO))
    (tmp_path / "events").mkdir()
    ledger = f"sqlite:///{tmp_path}/l.db"
    job = {"release_id": "r", "task": "second_moment", "mechanism": "analyze_gauss",
           "dataset": {"id": "events", "columns": ["x", "y"], "path": str(tmp_path / "events"), "format": "delta",
                       "version": 0},
           "privacy": {"epsilon": 1.0, "delta": 1e-6, "norm_bound": 1.0}, "params": {},
           "ledger": {"uri": ledger, "epsilon_limit": 3.0, "delta_limit": 1e-5}, "output": {"path": str(tmp_path / "out")}}
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    got = _cli(["release", str(tmp_path / "job.yaml")], tmp_path, env)
    assert got.returncode == 2, got.stderr[-3000:]
    [error] = got.stderr.strip().splitlines()  # one line, and nothing from Spark or Ivy
    assert error.startswith(f"spark-dp: error: The format 'delta' needs Delta Lake for Spark {line}")
    assert "pip install 'pyspark==4.2.*'" in error and "pip install 'spark-dp[delta]'" in error

    def entry(name, dataset):
        return {"name": name, "schedule": "daily", "budget": {"epsilon": 1.0, "delta": 1e-5, "renew": "per_period"},
                "inline": {"dataset": {"columns": ["x", "y"], **dataset}, "task": "second_moment",
                           "mechanism": "analyze_gauss", "privacy": {"epsilon": 0.5, "delta": 1e-6, "norm_bound": 1.0},
                           "ledger": {"uri": ledger}, "output": {"path": str(tmp_path / "out")}}}

    plan = {"plan": "wh", "ledger": {"uri": ledger}, "output": {"path": str(tmp_path / "out")}, "entries": [
        entry("d", {"id": "events", "path": str(tmp_path / "events"), "format": "delta", "version": 0}),
        entry("i", {"id": "ice", "table": "local.db.events", "format": "iceberg", "snapshot_id": 1})]}
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(plan))
    got = _cli(["plan", "run", str(tmp_path / "plan.yaml"), "--date", "2026-11-29"], tmp_path, env)
    assert got.returncode == 1, got.stderr[-3000:]
    entries = json.loads(got.stdout)["entries"]
    assert [(e["entry"], e["status"]) for e in entries] == [("d", "failed"), ("i", "failed")]
    lines = got.stderr.strip().splitlines()
    assert all(" INFO spark_dp: plan wh" in x for x in lines if not x.startswith("spark-dp:")), lines  # no Spark
    lines = [x for x in lines if x.startswith("spark-dp:")]
    assert [x.split(": ", 3)[:3] for x in lines] == [["spark-dp", "failed", "entry 'd'"],
                                                     ["spark-dp", "failed", "entry 'i'"]], lines
    for x in lines:
        assert f"The formats 'delta' and 'iceberg' have no release for Spark {line} yet" in x
        assert "pip install 'pyspark==4.1.*'" in x
    from spark_dp.privacy import open_ledger

    assert (tmp_path / "l.db").exists()  # the ledger was opened, and holds no charge
    assert open_ledger(ledger).all_charges() == [] and not (tmp_path / "out").exists()


def test_time_travel_keys_become_the_formats_reader_options(tmp_path):
    cfg = JobConfig.from_dict(_cfg(tmp_path, {"path": str(tmp_path), "format": "delta", "version": 3}))
    assert cfg.dataset.options == {"versionAsOf": "3"} and cfg.dataset.as_of == {"version": 3}
    assert cfg.table_formats == ("delta",)
    cfg = JobConfig.from_dict(_cfg(tmp_path, {"table": "db.t", "format": "delta",
                                              "timestamp": "2026-11-30T12:00:00+01:00"}))
    assert cfg.dataset.options == {"timestampAsOf": "2026-11-30 11:00:00.000000"}  # UTC, as the config says
    cfg = JobConfig.from_dict(_cfg(tmp_path, {"table": "local.db.t", "format": "iceberg",
                                              "timestamp": "2026-11-30 12:00:00"},
                                   {"path": str(tmp_path / "o"), "table": "local.db.r", "format": "iceberg"}))
    noon = int(datetime(2026, 11, 30, 12, tzinfo=UTC).timestamp()) * 1000  # UTC when the time has no offset
    assert cfg.dataset.options == {"as-of-timestamp": str(noon)} and cfg.table_formats == ("iceberg",)
    cfg = JobConfig.from_dict(_cfg(tmp_path, {"table": "local.db.t", "format": "iceberg", "snapshot_id": 42},
                                   {"path": str(tmp_path / "o"), "table": "db.r", "format": "delta"}))
    assert cfg.dataset.options == {"snapshot-id": "42"} and cfg.table_formats == ("delta", "iceberg")
    assert JobConfig.from_dict(_cfg(tmp_path, {"path": str(tmp_path)})).table_formats == ()


@pytest.mark.parametrize("dataset, message", [
    ({"format": "parquet", "version": 1}, "'dataset.version' parameter .* needs 'dataset.format' 'delta'"),
    ({"format": "delta", "snapshot_id": 1}, "'dataset.snapshot_id' parameter .* needs 'dataset.format' 'iceberg'"),
    ({"format": "delta", "version": 1, "timestamp": "2026-11-30"}, "at most one of 'dataset.version'"),
    ({"format": "delta", "version": -1}, "'dataset.version' parameter must be an integer >= 0"),
    ({"format": "delta", "version": True}, "'dataset.version' parameter must be an integer >= 0"),
    ({"format": "delta", "timestamp": "yesterday"}, "'dataset.timestamp' parameter must be an ISO date"),
    ({"format": "iceberg"}, "'dataset.format' parameter"),  # Iceberg is read through a catalog table
])
def test_bad_time_travel_is_refused_naming_the_key(tmp_path, dataset, message):
    with pytest.raises(ConfigError, match=message):
        JobConfig.from_dict(_cfg(tmp_path, {"path": str(tmp_path), **dataset}))


def test_a_table_format_must_be_delta_or_iceberg_and_output_iceberg_needs_a_table(tmp_path):
    with pytest.raises(ConfigError, match="'dataset.format' parameter"):
        JobConfig.from_dict(_cfg(tmp_path, {"table": "db.t", "format": "csv"}))
    with pytest.raises(ConfigError, match="'output.format' parameter"):
        JobConfig.from_dict(_cfg(tmp_path, {"path": str(tmp_path)}, {"path": str(tmp_path / "o"), "format": "iceberg"}))


def test_iceberg_time_travel_options_follow_the_spark_line():
    from spark_dp.runtime import iceberg_time_travel_options

    ms = int(datetime(2026, 11, 30, 6, 0, 0, 250000, tzinfo=UTC).timestamp() * 1000)
    own = {"snapshot-id": "42", "as-of-timestamp": str(ms)}
    for version in ("3.5.7", "4.0.1"):  # Iceberg's own options, as before
        assert iceberg_time_travel_options(own, version) == own
    for version in ("4.1.1", "4.2.0"):  # Spark's, which the Iceberg runtime for 4.1 on reads instead
        assert iceberg_time_travel_options({"snapshot-id": 42}, version) == {"versionAsOf": "42"}
        assert iceberg_time_travel_options({"as-of-timestamp": ms}, version) == \
            {"timestampAsOf": "2026-11-30 06:00:00.250000Z"}  # the instant in UTC, with its zone
    assert iceberg_time_travel_options({"versionAsOf": "3"}, "4.2.0") == {"versionAsOf": "3"}  # Delta's: kept
    assert own == {"snapshot-id": "42", "as-of-timestamp": str(ms)}  # the caller's dict is not changed


def test_the_docs_name_the_builds_spark_dp_adds():
    """README "Supported versions" and docs/storage.md list, per Spark line, the coordinates of TABLE_FORMAT_PACKAGES."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    storage = (REPO / "docs" / "storage.md").read_text(encoding="utf-8")
    for fmt, builds in TABLE_FORMAT_PACKAGES.items():
        for line, coordinates in builds.items():
            _, artifact, version = coordinates.split(":")
            assert f"`{coordinates}`" in storage, coordinates
            row = next(r for r in readme.splitlines() if r.startswith(f"| {line} | delta-spark"))
            assert (f"`{coordinates}`" if fmt == "delta" else f"{version} (`{artifact}`)") in row, (row, coordinates)
