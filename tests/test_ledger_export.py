"""``spark-dp ledger --export``: the ledger as a Parquet file or a catalog table (issue #16, item 3).

The export is read back with Spark and matches ``spark-dp ledger --charges
--json`` row for row, and ``spark-dp ledger --json`` per dataset, whether it
went to a Parquet file or to a catalog table. The ledger holds a migrated
schema-2 charge (no lifetime ε, no lineage, a time without offset), periods
under a lifetime cap, a written release (its mechanism read from its
manifest), an unwritten charge, a recorded crash and a charge with its input
lineage.
"""

from __future__ import annotations

import json
import os
from collections import Counter

import pyarrow.parquet as pq
import pytest

from spark_dp.cli.main import main as cli_main
from spark_dp.ledger_table import SCHEMA, _utc
from spark_dp.privacy import Budget, GaussianEvent, LaplaceEvent, open_ledger
from spark_dp.privacy.ledger import SCHEMA_VERSION
from tests.test_ledger_lifetime import _write_schema_2

LINEAGE = {"kind": "table", "tables": [{"name": "spark_catalog.db.t", "provider": "delta", "version": "12",
                                        "version_kind": "delta_version"}]}


@pytest.fixture
def exported(tmp_path):
    uri = f"sqlite:///{tmp_path}/ledger.db"
    _write_schema_2(uri)  # one charge on old@2026-01-01, written at /somewhere/old-1 (no manifest there)
    ledger = open_ledger(uri)
    assert SCHEMA_VERSION >= 4  # charges record their input lineage
    ledger.ensure_lifetime_limit("old", Budget(10.0, 1e-6))
    day = Budget(3.0, 1e-6)
    ledger.charge(release_id="d2", dataset_id="old@2026-01-02", request_sha256="a", events=[GaussianEvent(5.0)],
                  budget=Budget(1.0, 1e-6), limit=day)
    ledger.charge(release_id="d3", dataset_id="old@2026-01-03", request_sha256="b",
                  events=[GaussianEvent(5.0), LaplaceEvent(2.0)], budget=Budget(1.5, 1e-6), limit=day)
    ledger.charge(release_id="plain", dataset_id="plain", request_sha256="c", events=[GaussianEvent(4.0)],
                  budget=Budget(1.0, 1e-6), limit=Budget(5.0, 1e-5), lineage=LINEAGE)
    rel = tmp_path / "releases" / "d2"
    rel.mkdir(parents=True)
    (rel / "manifest.json").write_text(json.dumps({"release_id": "d2", "task": "second_moment",
                                                   "mechanism": "analyze_gauss"}))
    ledger.mark_written("d2", str(rel))
    ledger.record_crash("d3", "driver OOM")
    return uri


def test_the_export_read_back_with_spark_matches_ledger_json(spark, exported, tmp_path, capsys):
    out = tmp_path / "dash" / "charges.parquet"
    assert cli_main(["ledger", "--uri", exported, "--export", str(out)]) == 0
    assert json.loads(capsys.readouterr().out) == {"export": str(out), "charges": 4}
    assert pq.read_schema(out).equals(SCHEMA, check_metadata=False)
    assert cli_main(["ledger", "--uri", exported, "--charges", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)

    df = spark.read.parquet(str(out))
    cols = [c for c in SCHEMA.names if c != "created_at"]
    back = [{**r.asDict(), "created_at": r["created_epoch"]}
            for r in df.selectExpr(*cols, "CAST(created_at AS DOUBLE) AS created_epoch").orderBy("seq").collect()]
    assert len(back) == len(listed) == 4
    for got, want in zip(back, listed, strict=True):
        assert got["created_at"] == pytest.approx(_utc(want["created_at"]).timestamp(), abs=1e-6)
        assert {k: got[k] for k in cols} == {k: want[k] for k in cols}

    rows = {r["release_id"]: r for r in listed}
    old, d2, d3, plain = rows["old-1"], rows["d2"], rows["d3"], rows["plain"]
    assert (old["dataset"], old["period"], old["lifetime_epsilon"], old["written"]) == ("old", "2026-01-01", None, True)
    assert old["mechanism"] is None  # no manifest at its recorded location
    assert (d2["task"], d2["mechanism"], d2["event_kinds"]) == ("second_moment", "analyze_gauss", ["gaussian"])
    assert d2["lifetime_epsilon"] == pytest.approx(open_ledger(exported).lookup("d2").lifetime_epsilon)
    assert d3["event_kinds"] == ["gaussian", "laplace"] and d3["crash"] == "driver OOM" and not d3["written"]
    assert d3["lifetime_epsilon"] > d2["lifetime_epsilon"] and d3["lifetime_epsilon_limit"] == 10.0
    assert (plain["dataset"], plain["period"], plain["lifetime_epsilon"], plain["lifetime_epsilon_limit"]) == \
        ("plain", None, None, None)
    assert plain["input_kind"] == "table" and json.loads(plain["input"]) == LINEAGE
    assert old["input_kind"] is None and old["input"] is None  # a charge from before lineage

    # Per ledger dataset, the export agrees with `spark-dp ledger --json`.
    assert cli_main(["ledger", "--uri", exported, "--json"]) == 0
    status = {r["dataset_id"]: r for r in json.loads(capsys.readouterr().out)}
    counts = Counter(r["ledger_dataset"] for r in df.select("ledger_dataset").collect())
    assert counts == {k: v["releases"] for k, v in status.items()}
    assert {r["dataset"] for r in listed if r["lifetime_epsilon_limit"]} == {"old"} == \
        {v["lifetime_dataset"] for v in status.values() if v["lifetime_dataset"]}

    # A second export replaces the file atomically (no temporary left behind).
    assert cli_main(["ledger", "--uri", exported, "--export", str(out)]) == 0
    capsys.readouterr()
    assert sorted(p.name for p in out.parent.iterdir()) == ["charges.parquet"]


def test_the_charges_listing_filters_by_dataset_and_prints_text(exported, capsys):
    assert cli_main(["ledger", "--uri", exported, "--charges", "--dataset", "old"]) == 0
    text = capsys.readouterr().out
    assert "d2" in text and "d3" in text and "crashed" in text and "plain" not in text
    assert cli_main(["ledger", "--uri", exported, "--charges", "--json", "--dataset", "old@2026-01-02"]) == 0
    assert [r["release_id"] for r in json.loads(capsys.readouterr().out)] == ["d2"]


def test_the_export_to_a_catalog_table_matches_the_parquet_export(spark, exported, tmp_path, capsys):
    table = f"ledger_export_{os.getpid()}"
    try:
        for _ in range(2):  # a second export replaces the table
            assert cli_main(["ledger", "--uri", exported, "--export", table]) == 0
            assert json.loads(capsys.readouterr().out) == {"export": table, "table": True, "charges": 4}
        assert cli_main(["ledger", "--uri", exported, "--export", str(tmp_path / "c.parquet")]) == 0
        capsys.readouterr()
        cols = [c for c in SCHEMA.names if c != "created_at"]
        key = [*cols, "CAST(created_at AS DOUBLE) AS created_epoch"]
        from_table = [r.asDict() for r in spark.table(table).selectExpr(*key).orderBy("seq").collect()]
        from_file = [r.asDict() for r in spark.read.parquet(str(tmp_path / "c.parquet")).selectExpr(*key)
                     .orderBy("seq").collect()]
        assert len(from_table) == 4 and from_table == from_file
        assert [c.name for c in spark.table(table).schema] == SCHEMA.names
        assert json.loads(next(r for r in from_table if r["release_id"] == "plain")["input"]) == LINEAGE
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {table}")


def test_export_targets_are_told_apart_and_a_bad_table_name_is_refused(exported, capsys):
    from spark_dp.ledger_table import is_table_target

    assert is_table_target("gov.privacy_charges") and is_table_target("main.gov.charges")
    assert not is_table_target("charges.parquet") and not is_table_target("out/charges")
    assert cli_main(["ledger", "--uri", exported, "--export", "bad name!"]) == 2
    assert "'--export' parameter must be a table name" in capsys.readouterr().err
