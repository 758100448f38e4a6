"""Catalog tables in (dataset.table + where) and out (output.table), on the local session's catalog.

Tables live in a database whose location is a tmp dir (the session's
warehouse dir is fixed when the shared session starts).
"""

import json
import os
import uuid

import numpy as np
import pytest
import yaml

from spark_dp.cli.config import JobConfig
from spark_dp.cli.main import main as cli_main
from spark_dp.errors import ConfigError, SchemaError
from spark_dp.release import load_release, write_release_table
from spark_dp.release.table import COLUMNS, UNCERTAINTY_COLUMNS, release_rows


@pytest.fixture(scope="module")
def db(spark, tmp_path_factory):
    loc = tmp_path_factory.mktemp("wh")
    name = f"tables_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE DATABASE {name} LOCATION '{loc}/{name}.db'")
    rng = np.random.default_rng(3)
    rows = [(ds, *map(float, rng.normal(size=3) / 3)) for ds in ("2026-11-29", "2026-11-30") for _ in range(50)]
    spark.createDataFrame(rows, "ds string, x1 double, x2 double, x3 double").write.saveAsTable(f"{name}.points")
    yield name
    spark.sql(f"DROP DATABASE {name} CASCADE")


def _config(tmp_path, **sections):
    cfg = {
        "dataset": {"id": "t.points", "table": "db.points", "where": "ds = '2026-11-30'", "columns": ["x1", "x2", "x3"]},
        "task": "second_moment", "mechanism": "analyze_gauss",
        "privacy": {"epsilon": 1.0, "delta": 1e-6, "norm_bound": 1.0, "sampler": "numpy"},
        "ledger": {"uri": f"sqlite:///{tmp_path}/ledger.db", "epsilon_limit": 10.0, "delta_limit": 1e-5},
        "output": {"path": str(tmp_path / "releases")},
    }
    for k, v in sections.items():
        cfg[k] = {**cfg[k], **v} if isinstance(v, dict) else v
    return cfg


def _drop(cfg, section, key):
    cfg[section] = {k: v for k, v in cfg[section].items() if k != key}
    return cfg


@pytest.mark.parametrize("edit, needle", [
    (lambda c: c["dataset"].update(path="x.parquet"), "exactly one of 'dataset.path' and 'dataset.table'"),
    (lambda c: _drop(c, "dataset", "table"), "dataset.path"),
    (lambda c: c["dataset"].update(table="db.points; drop"), "'dataset.table'"),
    (lambda c: c["dataset"].update(table=3), "dataset.table"),
    (lambda c: c["dataset"].update(format="csv"), "'dataset.format' parameter"),  # a table is delta or iceberg
    (lambda c: c["dataset"].update(options={"a": 1}), "'dataset.options' parameter does not apply"),
    (lambda c: c["dataset"].update(where=5), "dataset.where"),
    (lambda c: (_drop(c, "dataset", "table"), c["dataset"].update(path="p.parquet")), "'dataset.where'"),
    (lambda c: c["output"].update(table="not a table"), "'output.table'"),
    (lambda c: c["output"].update(format="delta"), "output.format"),  # delta needs a table
    (lambda c: c["output"].update(table="db.r", format="orc"), "output.format"),
])
def test_bad_table_configs_name_the_key(tmp_path, edit, needle):
    cfg = _config(tmp_path)
    edit(cfg)
    with pytest.raises(ConfigError) as info:
        JobConfig.from_dict(cfg)
    assert needle in str(info.value), str(info.value)


def test_table_config_maps_to_the_table_format(tmp_path):
    c = JobConfig.from_dict(_config(tmp_path, output={"table": "db.releases_cov", "format": "delta"}))
    assert (c.dataset.table, c.dataset.where, c.dataset.format) == ("db.points", "ds = '2026-11-30'", "table")
    assert (c.output.table, c.output.format) == ("db.releases_cov", "delta")
    c = JobConfig.from_dict(_drop(_config(tmp_path), "dataset", "where"))
    assert c.dataset.where is None and c.dataset.options == {}


def test_table_in_and_out_through_the_cli(spark, tmp_path, db, capsys):
    out_table = f"{db}.releases"
    cfg = _config(tmp_path, dataset={"table": f"{db}.points"}, output={"table": out_table, "format": "parquet"},
                  release_id="cov-2026-11-30")
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert cli_main(["release", str(path)]) == 0
    out = json.loads(capsys.readouterr().out)
    rel = load_release(out["path"])
    assert rel.manifest["dataset_id"] == "t.points"

    rows = spark.table(out_table).toPandas()
    assert list(rows.columns) == [*COLUMNS, *UNCERTAINTY_COLUMNS]  # the values, then their error bars
    assert set(rows["release_id"]) == {"cov-2026-11-30"} and len(rows) == 9
    assert set(rows["array"]) == {"matrix"} and rows["k"].isna().all() and rows["l"].isna().all()
    back = np.zeros((3, 3))
    for r in rows.itertuples():
        back[int(r.i), int(r.j)] = r.value
    np.testing.assert_array_equal(back, rel["matrix"])
    low = np.zeros((3, 3))
    for r in rows.itertuples():
        low[int(r.i), int(r.j)] = r.low
    np.testing.assert_array_equal(low, rel.interval("matrix")[0])

    # A re-run returns the stored release and does not append it again.
    assert cli_main(["release", str(path)]) == 0
    assert json.loads(capsys.readouterr().out)["reused"] is True
    assert spark.table(out_table).count() == 9

    # A second release (another day) shares the table.
    cfg2 = {**cfg, "release_id": "cov-2026-11-29", "dataset": {**cfg["dataset"], "where": "ds = '2026-11-29'"}}
    path.write_text(yaml.safe_dump(cfg2))
    assert cli_main(["release", str(path)]) == 0
    capsys.readouterr()
    counts = {r["release_id"]: r["count"] for r in spark.table(out_table).groupBy("release_id").count().collect()}
    assert counts == {"cov-2026-11-30": 9, "cov-2026-11-29": 9}


def test_a_table_from_before_error_bars_gets_the_values_without_them(spark, tmp_path, db):
    from spark_dp.release.release import Release
    from spark_dp.release.table import _DDL
    from spark_dp.release.uncertainty import gaussian_interval

    old = f"{db}.old_releases"
    spark.createDataFrame([], _DDL.split(", stderr")[0]).write.format("parquet").saveAsTable(old)
    m = np.eye(2)
    rel = Release("r-old", {"matrix": m}, {"dataset_id": "d", "task": "second_moment", "mechanism": "analyze_gauss",
                                           "created_at": "now", "uncertainty": {"level": 0.95, "arrays": {}}},
                  uncertainty={"matrix": gaussian_interval(m, 1.0, 0.95)})
    assert write_release_table(spark, rel, old)
    got = spark.table(old)
    assert got.columns == list(COLUMNS) and got.count() == 4


def test_where_selects_rows(spark, tmp_path, db):
    """The filter really applies: the exact summary of one day differs from both days'."""
    from spark_dp.aggregates import gram_matrix, read_dataset

    one = read_dataset(spark, f"{db}.points", "table", {"where": "ds = '2026-11-30'"})
    both = read_dataset(spark, f"{db}.points", "table", {})
    assert one.count() == 50 and both.count() == 100
    g1 = gram_matrix(one, ["x1", "x2", "x3"], norm_bound=10.0)
    g2 = gram_matrix(both, ["x1", "x2", "x3"], norm_bound=10.0)
    x = np.array(one.select("x1", "x2", "x3").collect())
    np.testing.assert_allclose(np.asarray(g1), x.T @ x, rtol=1e-10)
    assert not np.allclose(np.asarray(g1), np.asarray(g2))


def test_missing_table_and_bad_filter_are_schema_errors_before_any_charge(spark, tmp_path, db, capsys):
    cfg = _config(tmp_path, dataset={"table": f"{db}.nope"})
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert cli_main(["release", str(path)]) == 2
    assert "Input table" in capsys.readouterr().err
    cfg = _config(tmp_path, dataset={"table": f"{db}.points", "where": "no_such_col = 1"})
    path.write_text(yaml.safe_dump(cfg))
    assert cli_main(["release", str(path)]) == 2
    assert "dataset.where" in capsys.readouterr().err
    from spark_dp.privacy import open_ledger

    assert open_ledger(cfg["ledger"]["uri"]).status() == []  # nothing charged, nothing registered
    assert not os.path.exists(tmp_path / "releases")


def test_release_rows_and_wrong_tables(spark, db, tmp_path):
    from spark_dp.release import Release

    rel = Release("r1", {"v": np.arange(3.0), "t": np.ones((2, 2, 2))},
                  {"dataset_id": "d", "task": "x", "mechanism": "y", "created_at": "now"})
    df = release_rows(rel)
    assert len(df) == 3 + 8 and df["l"].isna().all()
    assert df[df.array == "v"]["j"].isna().all() and df[df.array == "t"]["k"].notna().all()
    with pytest.raises(SchemaError, match="at most 4"):
        release_rows(Release("r2", {"big": np.zeros((1, 1, 1, 1, 1))}, {}))
    spark.createDataFrame([(1,)], "a int").write.saveAsTable(f"{db}.other")
    with pytest.raises(SchemaError, match="not a spark-dp release table"):
        write_release_table(spark, rel, f"{db}.other")
    with pytest.raises(ConfigError, match="output.format"):
        write_release_table(spark, rel, f"{db}.x", format="csv")
    assert write_release_table(spark, rel, f"{db}.mixed") is True
    assert write_release_table(spark, rel, f"{db}.mixed") is False
    assert spark.table(f"{db}.mixed").count() == 11


def test_delta_without_the_delta_runtime_is_a_clean_error(spark, db):
    """This session has no Delta jars: the table writer says so (Delta itself: tests/warehouse/suite_delta.py)."""
    from spark_dp.release import Release

    rel = Release("r-delta", {"v": np.arange(2.0)}, {"dataset_id": "d", "task": "x", "mechanism": "y"})
    with pytest.raises(ConfigError, match="needs the Delta Lake jars"):
        write_release_table(spark, rel, f"{db}.delta_out", format="delta")
    assert not spark.catalog.tableExists(f"{db}.delta_out")
