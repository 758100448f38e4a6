"""Apache Iceberg, for real: a Hadoop catalog (``local``) in a local warehouse directory, iceberg-spark-runtime.

Run by ``tests/test_warehouse.py`` in its own process (see ``conftest.py``).
Covers: a table read and a snapshot read (``snapshot-id``, ``as-of-timestamp``,
SQL ``VERSION AS OF``) recording the snapshot read in the manifest and the
ledger; job configs with ``dataset.snapshot_id`` / ``dataset.timestamp``;
``output.format: iceberg`` appending (once) rows equal to a Parquet table's;
``ledger --export-format iceberg`` equal to the Parquet export.
"""

from __future__ import annotations

import json
from datetime import UTC

import pyarrow.parquet as pq
import pytest
import yaml
from compare import same_rows

from spark_dp import DPSession, load_release
from spark_dp.cli.main import main as cli_main
from spark_dp.privacy import open_ledger
from spark_dp.release import lineage as L

KEY = bytes(range(32))  # a lineage key (a ledger holds one; these lineages are compared within one key)
from spark_dp.release.table import write_release_table

EPS, DELTA = 1.0, 1e-6
TABLE = "local.db.events"


@pytest.fixture(scope="module")
def snapshots(spark):
    """``local.db.events`` with two snapshots: [(snapshot_id, committed_at), ...] oldest first."""
    spark.sql(f"DROP TABLE IF EXISTS {TABLE}")
    spark.sql(f"CREATE TABLE {TABLE} (x double, y double, ds string) USING iceberg")
    spark.sql(f"INSERT INTO {TABLE} VALUES " + ", ".join(f"({(i % 5) / 5}, {(i % 3) / 3}, '2026-11-29')"
                                                         for i in range(20)))
    spark.sql(f"INSERT INTO {TABLE} VALUES " + ", ".join(f"({(i % 4) / 4}, 0.5, '2026-11-30')" for i in range(10)))
    rows = spark.sql(f"SELECT snapshot_id, committed_at FROM {TABLE}.snapshots ORDER BY committed_at").collect()
    assert len(rows) == 2
    yield [(r[0], r[1]) for r in rows]
    spark.sql(f"DROP TABLE IF EXISTS {TABLE}")


def _version(lineage) -> str:
    [entry] = lineage["tables"]
    assert entry["name"].endswith(TABLE) and entry["provider"] == "iceberg"
    assert entry["version_kind"] == "iceberg_snapshot_id"
    return entry["version"]


def _cli(capsys, *args) -> dict:
    assert cli_main(list(args)) == 0
    return json.loads(capsys.readouterr().out)


def _config(tmp_path, dataset: dict, *, release_id: str, output=None) -> str:
    cfg = {"release_id": release_id, "task": "second_moment", "mechanism": "analyze_gauss",
           "dataset": {"id": "ice", "columns": ["x", "y"], "table": TABLE, "format": "iceberg", **dataset},
           "privacy": {"epsilon": EPS, "delta": DELTA, "norm_bound": 2.0, "sampler": "numpy"}, "params": {},
           "ledger": {"uri": f"sqlite:///{tmp_path}/ice.db", "epsilon_limit": 20.0, "delta_limit": 1e-4},
           "output": output or {"path": str(tmp_path / "rel")}}
    path = tmp_path / f"{release_id}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def _as_of(spark, **options):
    """A reader of ``TABLE`` with Iceberg's time-travel options in the form this Spark line's Iceberg reads."""
    from spark_dp.runtime import iceberg_time_travel_options

    return spark.read.options(**iceberg_time_travel_options(options, spark.version)).table(TABLE)


def test_a_table_and_its_snapshots_record_the_snapshot_read(spark, snapshots, tmp_path):
    from spark_dp.runtime import spark_line

    (s0, t0), (s1, _) = snapshots
    assert _version(L.input_lineage(spark.table(TABLE), KEY)) == str(s1)
    assert _version(L.input_lineage(_as_of(spark, **{"snapshot-id": s0}), KEY)) == str(s0)
    ms = int(t0.replace(tzinfo=UTC).timestamp() * 1000) if t0.tzinfo is None else int(t0.timestamp() * 1000)
    assert _version(L.input_lineage(_as_of(spark, **{"as-of-timestamp": ms}), KEY)) == str(s0)
    assert _as_of(spark, **{"snapshot-id": s0}).count() == 20 and _as_of(spark, **{"as-of-timestamp": ms}).count() == 20
    assert _version(L.input_lineage(spark.sql(f"SELECT * FROM {TABLE} VERSION AS OF {s0}"), KEY)) == str(s0)
    assert spark.sql(f"SELECT * FROM {TABLE} VERSION AS OF {s0}").count() == 20
    if tuple(map(int, spark_line(spark.version).split("."))) >= (4, 1):  # why the options are rewritten there
        with pytest.raises(Exception, match="no longer supported"):
            spark.read.option("snapshot-id", s0).table(TABLE).count()
    # The API: the version read goes into the manifest and the ledger charge.
    dp = DPSession("ice-api", ledger=f"sqlite:///{tmp_path}/api.db", epsilon_limit=5.0, delta_limit=1e-4,
                   output=str(tmp_path / "api"), sampler="numpy")
    rel = dp.second_moment(_as_of(spark, **{"snapshot-id": s0}), ["x", "y"], epsilon=EPS, delta=DELTA,
                           norm_bound=2.0, release_id="ice-s0")
    assert _version(rel.manifest["input"]) == str(s0) and dp.ledger.lookup("ice-s0").lineage == rel.manifest["input"]


def test_configs_read_the_snapshot_and_the_time_they_name(spark, snapshots, tmp_path, capsys):
    (s0, t0), (s1, t1) = snapshots
    _cli(capsys, "release", _config(tmp_path, {"snapshot_id": s0}, release_id="cfg-s0"))
    t1_utc = t1.replace(tzinfo=UTC) if t1.tzinfo is None else t1.astimezone(UTC)
    _cli(capsys, "release", _config(tmp_path, {"timestamp": t1_utc.strftime("%Y-%m-%d %H:%M:%S.%f")},
                                    release_id="cfg-t1"))
    _cli(capsys, "release", _config(tmp_path, {}, release_id="cfg-now"))
    ledger = open_ledger(f"sqlite:///{tmp_path}/ice.db")
    assert _version(ledger.lookup("cfg-s0").lineage) == str(s0)
    assert _version(ledger.lookup("cfg-t1").lineage) == str(s1)
    assert _version(ledger.lookup("cfg-now").lineage) == str(s1)


def test_output_iceberg_and_ledger_export_read_back_equal_to_parquet(spark, snapshots, tmp_path, capsys):
    (s0, _), _ = snapshots
    out = {"path": str(tmp_path / "rel"), "table": "local.db.dp_releases", "format": "iceberg"}
    try:
        cfg = _config(tmp_path, {"snapshot_id": s0}, release_id="pub-ice", output=out)
        done = _cli(capsys, "release", cfg)
        _cli(capsys, "release", cfg)  # the re-run appends nothing
        assert write_release_table(spark, load_release(done["path"]), "default.dp_releases_pq", format="parquet")
        assert spark.sql("SHOW TBLPROPERTIES local.db.dp_releases").filter("key = 'format'").collect()[0][1] \
            .startswith("iceberg")
        order = ["release_id", "array", "i", "j"]
        ice = spark.table("local.db.dp_releases").toPandas().sort_values(order).reset_index(drop=True)
        pq_rows = spark.table("default.dp_releases_pq").toPandas().sort_values(order).reset_index(drop=True)
        assert len(ice) > 0 and set(ice["release_id"]) == {"pub-ice"} and ice.equals(pq_rows)

        uri = f"sqlite:///{tmp_path}/ice.db"
        _cli(capsys, "ledger", "--uri", uri, "--export", str(tmp_path / "ledger.parquet"))
        got = _cli(capsys, "ledger", "--uri", uri, "--export", "local.db.dp_ledger", "--export-format", "iceberg")
        assert got["charges"] == 1
        from_file = pq.read_table(tmp_path / "ledger.parquet")
        assert same_rows(spark.table("local.db.dp_ledger"), from_file)
    finally:
        for t in ("local.db.dp_releases", "default.dp_releases_pq", "local.db.dp_ledger"):
            spark.sql(f"DROP TABLE IF EXISTS {t}")


def test_the_session_was_made_with_the_iceberg_runtime_for_this_spark_line(spark):
    from spark_dp.runtime import TABLE_FORMAT_PACKAGES, spark_line

    assert TABLE_FORMAT_PACKAGES["iceberg"][spark_line(spark.version)] in spark.conf.get("spark.jars.packages")
    assert "IcebergSparkSessionExtensions" in spark.conf.get("spark.sql.extensions")
