"""Delta Lake / Iceberg without their jars: the coordinates per Spark line and the config keys, checked before Spark.

The formats themselves run for real in ``tests/warehouse/`` (``tests/test_warehouse.py``).
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from spark_dp.cli.config import JobConfig
from spark_dp.errors import ConfigError
from spark_dp.runtime import TABLE_FORMAT_PACKAGES, table_format_conf


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
                                          r"4\.1, 4\.2.*pyspark==4\.2.*spark-dp\[delta\]"):
        table_format_conf(["delta"], spark_version="4.3.0")
    with pytest.raises(ConfigError, match="'iceberg' needs Apache Iceberg for Spark 4.2"):
        table_format_conf(["iceberg"], spark_version="4.2.1")


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


def test_a_plan_session_gets_the_jars_of_every_entry(monkeypatch):
    from spark_dp import runtime

    seen = []
    monkeypatch.setattr(runtime, "table_format_conf", lambda formats, **_: seen.append(formats) or {})
    monkeypatch.setattr(runtime.SparkSession, "getActiveSession", staticmethod(lambda: None))
    monkeypatch.delenv("SPARK_REMOTE", raising=False)

    class Builder:  # records what a new session would be built with, starts nothing
        def __getattr__(self, name):
            return lambda *a, **k: self

        def getOrCreate(self):
            return "session"

    monkeypatch.setattr(runtime.SparkSession, "builder", Builder())
    with runtime.formats_needed({"iceberg"}):
        assert runtime.get_spark("x", formats=("delta",)) == "session"
    assert seen == [("delta", "iceberg")]


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
