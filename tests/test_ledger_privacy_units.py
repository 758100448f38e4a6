"""One privacy unit per ledger dataset (issue #12, item 2).

The ledger composes a dataset's events as guarantees about one neighbouring
pair; a user-level and a row-level release (or add/remove and replace ones)
are guarantees about different pairs and must not be composed as one. The
first charge declares the dataset's unit; later charges and dry runs that it
does not cover are refused before anything is charged. Schema-1 ledgers
(written before this) are migrated in place and keep working.
"""

from __future__ import annotations

import re
import sqlite3

import numpy as np
import pytest

from spark_dp import DPSession
from spark_dp.errors import ConfigError
from spark_dp.privacy import Budget, GaussianEvent, SeededSampler, compose_epsilon, open_ledger
from spark_dp.privacy.ledger import SCHEMA_VERSION, UnitDeclaration

LIMIT = Budget(10.0, 1e-5)
EV = [GaussianEvent(5.0)]
USER4 = UnitDeclaration("user", 4, "add_remove")


def _charge(ledger, rid, unit, dataset="ds"):
    return ledger.charge(release_id=rid, dataset_id=dataset, request_sha256="x", events=EV,
                         budget=Budget(1.0, 1e-6), limit=LIMIT, unit=unit)


@pytest.mark.parametrize("other", [
    UnitDeclaration(None, 1, "add_remove"),  # row level on a user-level dataset
    UnitDeclaration("account", 4, "add_remove"),  # another unit column
    UnitDeclaration("user", 4, "replace"),  # another neighbour relation
    UnitDeclaration(None, 1, "tensor_entry"),
    UnitDeclaration("row", 4, "add_remove"),  # a unit column named row is a unit column, not row level
])
def test_a_release_for_another_unit_or_relation_is_refused(any_ledger_uri, other):
    ledger = open_ledger(any_ledger_uri)
    _charge(ledger, "r1", USER4)
    assert ledger.declared_unit("ds") == USER4
    with pytest.raises(ConfigError, match="declared in the ledger by its first release"):
        ledger.check("ds", EV, LIMIT, unit=other)
    with pytest.raises(ConfigError, match=re.escape(other.describe())):
        _charge(ledger, "r2", other)
    (status,) = ledger.status("ds")
    assert status.releases == 1  # nothing charged
    assert ledger.lookup("r2") is None
    assert status.unit == USER4


def test_the_same_unit_with_another_m_is_covered(any_ledger_uri):
    """Each release bounds its own m rows per unit: every one is DP for one whole unit, so they compose."""
    ledger = open_ledger(any_ledger_uri)
    _charge(ledger, "r1", USER4)
    for i, m in enumerate((1, 10)):
        unit = UnitDeclaration("user", m, "add_remove")
        ledger.check("ds", EV, LIMIT, unit=unit)
        _charge(ledger, f"m{i}", unit)
    (status,) = ledger.status("ds")
    assert status.releases == 3 and status.unit == USER4  # the first release's declaration stands
    assert status.spent_epsilon == pytest.approx(compose_epsilon(EV * 3, LIMIT.delta))


def test_the_declaration_is_shown_by_status_and_json(any_ledger_uri):
    import json

    ledger = open_ledger(any_ledger_uri)
    _charge(ledger, "r1", USER4)
    _charge(ledger, "r2", None, dataset="undeclared")  # a direct ledger user may charge without a unit
    rows = {r["dataset_id"]: r for r in json.loads(ledger.to_json())}
    assert (rows["ds"]["privacy_unit"], rows["ds"]["max_per_unit"], rows["ds"]["neighbors"]) == ("user", 4, "add_remove")
    assert rows["ds"]["privacy_unit_column"] == "user"
    assert rows["undeclared"]["privacy_unit"] is None
    # ... and the next charge with a unit declares it
    _charge(ledger, "r3", UnitDeclaration(None, 1, "replace"), dataset="undeclared")
    assert ledger.declared_unit("undeclared") == UnitDeclaration(None, 1, "replace")


# The schema-1 tables exactly as spark-dp wrote them before schema 2.
_SCHEMA_1 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE datasets (dataset_id TEXT PRIMARY KEY, epsilon_limit DOUBLE PRECISION NOT NULL,
    delta_limit DOUBLE PRECISION NOT NULL, created_at TEXT NOT NULL);
CREATE TABLE charges (seq {serial}, release_id TEXT NOT NULL UNIQUE,
    dataset_id TEXT NOT NULL REFERENCES datasets(dataset_id), request_sha256 TEXT NOT NULL, events TEXT NOT NULL,
    epsilon DOUBLE PRECISION NOT NULL, delta DOUBLE PRECISION NOT NULL, created_at TEXT NOT NULL);
CREATE TABLE releases (release_id TEXT PRIMARY KEY REFERENCES charges(release_id), location TEXT NOT NULL,
    written_at TEXT NOT NULL);
CREATE TABLE limit_changes (seq {serial}, dataset_id TEXT NOT NULL, epsilon_limit DOUBLE PRECISION NOT NULL,
    delta_limit DOUBLE PRECISION NOT NULL, changed_at TEXT NOT NULL);
INSERT INTO meta VALUES ('schema_version', '1');
INSERT INTO datasets VALUES ('old', 10.0, 1e-05, '2026-01-01T00:00:00');
INSERT INTO charges (release_id, dataset_id, request_sha256, events, epsilon, delta, created_at)
    VALUES ('old-1', 'old', 'x', '[{"type": "gaussian", "noise_multiplier": 5.0}]', 1.0, 1e-06, '2026-01-01T00:00:00');
"""


def _write_schema_1(uri: str) -> None:
    if uri.startswith("sqlite:///"):
        con = sqlite3.connect(uri[len("sqlite:///"):])
        con.executescript(_SCHEMA_1.replace("{serial}", "INTEGER PRIMARY KEY AUTOINCREMENT"))
        con.close()
        return
    import psycopg

    with psycopg.connect(uri, autocommit=True) as con:
        for stmt in filter(None, (s.strip() for s in _SCHEMA_1.replace("{serial}", "BIGSERIAL PRIMARY KEY").split(";"))):
            con.execute(stmt)


def test_a_schema_1_ledger_is_migrated_and_keeps_working(any_ledger_uri):
    from spark_dp.privacy.events import events_from_json

    assert events_from_json('[{"type": "gaussian", "noise_multiplier": 5.0}]') == EV  # the row above is a real event
    _write_schema_1(any_ledger_uri)
    ledger = open_ledger(any_ledger_uri)  # migrates
    (status,) = ledger.status("old")
    assert status.releases == 1 and status.unit is None
    assert status.spent_epsilon == pytest.approx(compose_epsilon(EV, 1e-5))
    with ledger._reading() as con:
        assert con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
    _charge(ledger, "new-1", USER4, dataset="old")  # the next charge declares the unit
    open_ledger(any_ledger_uri)  # a second open does not migrate again
    (status,) = open_ledger(any_ledger_uri).status("old")
    assert status.releases == 2 and status.unit == USER4
    with pytest.raises(ConfigError):
        _charge(ledger, "new-2", UnitDeclaration(None, 1, "add_remove"), dataset="old")


def test_the_session_refuses_a_row_level_release_on_a_user_level_dataset(spark, tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    df = spark.createDataFrame([(f"u{i % 5}", *map(float, rng.normal(size=3))) for i in range(40)], ["user", "a", "b", "c"])
    dp = DPSession("sales", ledger=f"sqlite:///{tmp_path}/l.db", epsilon_limit=10, delta_limit=1e-5,
                   output=str(tmp_path / "out"), sampler=SeededSampler())
    dp.second_moment(df, ["a", "b", "c"], epsilon=1, delta=1e-6, norm_bound=1, privacy_unit="user", max_rows_per_unit=3)
    spent = dp.budget().spent_epsilon

    import spark_dp.second_moment.api as sm_api

    real_gram = sm_api.gram_matrix

    def no_spark(*a, **k):  # the refusal must come before any Spark work
        raise AssertionError("Spark work started before the privacy-unit check")

    monkeypatch.setattr(sm_api, "gram_matrix", no_spark)
    for kwargs in ({}, {"privacy_unit": "user", "neighbors": "replace"}):
        with pytest.raises(ConfigError, match="declared in the ledger"):
            dp.second_moment(df, ["a", "b", "c"], epsilon=1, delta=1e-6, norm_bound=1, **kwargs)
    with pytest.raises(ConfigError, match="declared in the ledger"):
        dp.count_sketch(df, "user", epsilon=1, delta=1e-6, repetitions=2, buckets=16)
    assert dp.budget().spent_epsilon == spent and dp.budget().releases == 1
    monkeypatch.setattr(sm_api, "gram_matrix", real_gram)
    # the same unit at another m is a normal release
    dp.second_moment(df, ["a", "b", "c"], epsilon=1, delta=1e-6, norm_bound=1, privacy_unit="user", max_rows_per_unit=1)
    assert dp.budget().releases == 2


# -- a unit column may be named like a level: 'row', 'tensor_entry' ------------------------------------------
@pytest.mark.parametrize("name", ["row", "tensor_entry"])
def test_a_unit_column_named_like_a_level_is_a_unit_column(any_ledger_uri, name):
    """None (no unit column) is no column name; the ledger stores a column as column:<name>, levels bare."""
    column, level = UnitDeclaration(name, 3, "add_remove"), UnitDeclaration(None, 1, "add_remove")
    assert column != level and not column.covers(level) and not level.covers(column)
    assert (column.stored, level.stored) == (f"column:{name}", "row")
    assert UnitDeclaration(None, 1, "tensor_entry").stored == "tensor_entry"
    ledger = open_ledger(any_ledger_uri)
    _charge(ledger, "c1", column, dataset="by-column")
    _charge(ledger, "l1", level, dataset="by-row")
    assert ledger.declared_unit("by-column") == column and ledger.declared_unit("by-row") == level
    with pytest.raises(ConfigError, match="declared in the ledger by its first release"):
        _charge(ledger, "c2", level, dataset="by-column")  # row level on the column's dataset
    with pytest.raises(ConfigError, match="declared in the ledger by its first release"):
        _charge(ledger, "l2", column, dataset="by-row")  # the column on the row-level dataset
    assert [s.releases for s in ledger.status()] == [1, 1]


def _as_schema_4(uri: str, units: dict[str, str]) -> None:
    """Rewrites a current ledger as schema 4 stored it: bare unit names (``units``: dataset id -> stored unit)."""
    if uri.startswith("sqlite:///"):
        con = sqlite3.connect(uri[len("sqlite:///"):], isolation_level=None)
        ph = "?"
    else:
        import psycopg

        con, ph = psycopg.connect(uri, autocommit=True), "%s"
    try:
        for ds, unit in units.items():
            con.execute(f"UPDATE datasets SET privacy_unit = {ph} WHERE dataset_id = {ph}", (unit, ds))
        con.execute("UPDATE meta SET value = '4' WHERE key = 'schema_version'")
    finally:
        con.close()


def test_a_schema_4_ledger_keeps_its_levels_and_columns(any_ledger_uri):
    """Schema 4 stored a column's bare name: migrated to column:<name>; 'row' and 'tensor_entry' stay levels."""
    ledger = open_ledger(any_ledger_uri)
    for ds, unit in (("users", USER4), ("rows", UnitDeclaration(None, 1, "replace")),
                     ("tensor", UnitDeclaration(None, 1, "tensor_entry"))):
        _charge(ledger, f"{ds}-1", unit, dataset=ds)
    _as_schema_4(any_ledger_uri, {"users": "user", "rows": "row", "tensor": "tensor_entry"})
    migrated = open_ledger(any_ledger_uri)
    assert migrated.declared_unit("users") == USER4
    assert migrated.declared_unit("rows") == UnitDeclaration(None, 1, "replace")
    assert migrated.declared_unit("tensor") == UnitDeclaration(None, 1, "tensor_entry")
    with migrated._reading() as con:
        assert con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
        stored = dict(con.execute("SELECT dataset_id, privacy_unit FROM datasets").fetchall())
    assert stored == {"users": "column:user", "rows": "row", "tensor": "tensor_entry"}
    assert open_ledger(any_ledger_uri).declared_unit("users") == USER4  # a second open does not prefix again
    with pytest.raises(ConfigError):  # a column named row is not the legacy row-level declaration
        _charge(migrated, "rows-2", UnitDeclaration("row", 1, "replace"), dataset="rows")
    _charge(migrated, "rows-3", UnitDeclaration(None, 5, "replace"), dataset="rows")


@pytest.mark.parametrize("name", ["row", "tensor_entry"])
def test_the_session_treats_a_column_named_like_a_level_as_a_unit_column(spark, tmp_path, name):
    """privacy_unit='row' bounds each value of the column 'row' to m rows; row level is another declaration."""
    from spark_dp.second_moment import api

    class Exact(SeededSampler):
        def laplace(self, values, scale, l1_sensitivity):
            return np.asarray(values, dtype=np.float64).copy()

    rng = np.random.default_rng(0)
    df = spark.createDataFrame([(f"u{i % 5}", *map(float, rng.normal(0, 0.1, size=2))) for i in range(40)],
                               [name, "a", "b"])
    dp = DPSession("by-level-name", ledger=f"sqlite:///{tmp_path}/l.db", epsilon_limit=10, delta_limit=1e-5,
                   output=str(tmp_path / "out"), sampler=Exact())
    rel = api.second_moment(dp, df, ["a", "b"], epsilon=1, delta=1e-6, norm_bound=1, privacy_unit=name,
                            max_rows_per_unit=2, clipping_report=True)
    assert rel["clipping_counts"][1] == 10  # 5 units of 8 rows, 2 kept each: contribution bounding by the column
    assert rel.privacy["privacy_unit_column"] == name
    assert dp.ledger.declared_unit("by-level-name") == UnitDeclaration(name, 2, "add_remove")
    with pytest.raises(ConfigError, match="declared in the ledger by its first release"):
        api.second_moment(dp, df, ["a", "b"], epsilon=1, delta=1e-6, norm_bound=1)  # row level: refused
    assert dp.budget().releases == 1
    row_level = DPSession("by-row", ledger=f"sqlite:///{tmp_path}/l.db", epsilon_limit=10, delta_limit=1e-5,
                          output=str(tmp_path / "out"), sampler=Exact())
    plain = api.second_moment(row_level, df, ["a", "b"], epsilon=1, delta=1e-6, norm_bound=1, clipping_report=True)
    assert plain["clipping_counts"][1] == 40 and plain.privacy["privacy_unit_column"] is None
    assert plain.privacy["privacy_unit"] == "row"  # for people; privacy_unit_column is the declaration
    with pytest.raises(ConfigError, match="declared in the ledger by its first release"):
        api.second_moment(row_level, df, ["a", "b"], epsilon=1, delta=1e-6, norm_bound=1, privacy_unit=name)
