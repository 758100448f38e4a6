"""One privacy unit per lifetime group (ledger schema 5).

A lifetime cap composes every period ``<base>@<period>`` of a dataset (and
``<base>``) as guarantees about one neighbouring pair, so the group carries one
declaration: the unit and the neighbour relation (m may differ, as between
releases of one dataset). Checked and set in the charge's transaction on both
backends; a ledger written before the check whose group mixes units is refused
on open, naming the periods, and ``spark-dp audit`` reports it.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import sqlite3

import pytest

from spark_dp.cli.main import main as cli_main
from spark_dp.errors import ConfigError, LedgerError
from spark_dp.privacy import Budget, GaussianEvent, SeededSampler, gaussian_noise_multiplier, open_ledger
from spark_dp.privacy.ledger import SCHEMA_VERSION, UnitDeclaration

DELTA = 1e-6
EV = [GaussianEvent(gaussian_noise_multiplier(1.0, DELTA))]
LIMIT = Budget(5.0, DELTA)
ROW = UnitDeclaration(None, 1, "add_remove")
CUSTOMER = UnitDeclaration("customer_id", 50, "replace")


def _charge(ledger, rid, dataset, unit):
    return ledger.charge(release_id=rid, dataset_id=dataset, request_sha256="x", events=EV,
                         budget=Budget(1.0, DELTA), limit=LIMIT, unit=unit)


@pytest.mark.parametrize("first, second", [(ROW, CUSTOMER), (CUSTOMER, ROW)])
def test_the_sales_example_is_refused_in_either_order_and_nothing_is_charged(any_ledger_uri, first, second):
    ledger = open_ledger(any_ledger_uri)
    ledger.ensure_lifetime_limit("sales", Budget(10.0, DELTA))
    _charge(ledger, "r1", "sales@2026-11-01", first)
    with pytest.raises(ConfigError, match=r"'sales@2026-11-02' is a period of 'sales'.*declared by 'sales@2026-11-01'"):
        ledger.check("sales@2026-11-02", EV, LIMIT, unit=second)  # the dry run refuses too
    with pytest.raises(ConfigError, match=r"'sales@2026-11-02' is a period of 'sales'.*declared by 'sales@2026-11-01'"):
        _charge(ledger, "r2", "sales@2026-11-02", second)
    assert [c.release_id for c in ledger.all_charges()] == ["r1"]
    assert [s.dataset_id for s in ledger.status()] == ["sales@2026-11-01"]  # the refused period was not registered
    assert ledger.lifetime_status("sales").releases == 1
    with pytest.raises(ConfigError, match="period of 'sales'"):  # the base dataset is part of its own group
        _charge(ledger, "r3", "sales", second)
    # One relation difference alone is refused; the same unit and relation with another m is not.
    with pytest.raises(ConfigError, match="period of 'sales'"):
        _charge(ledger, "r4", "sales@2026-11-03",
                UnitDeclaration(first.unit, first.max_per_unit, "replace" if first.neighbors != "replace" else
                                "add_remove"))
    _charge(ledger, "r5", "sales@2026-11-04", UnitDeclaration(first.unit, first.max_per_unit + 2, first.neighbors))
    _charge(ledger, "r6", "salesforce@2026-11-02", second)  # another dataset's group
    assert sorted(c.release_id for c in ledger.all_charges()) == ["r1", "r5", "r6"]


def _first_charger(uri: str, worker: int, bases: list[str], barrier, queue) -> None:
    ledger = open_ledger(uri)
    unit = ROW if worker == 0 else CUSTOMER
    won = []
    for base in bases:
        barrier.wait(timeout=60)  # both processes charge the first period of ``base`` at once
        try:
            _charge(ledger, f"{base}-w{worker}", f"{base}@p{worker}", unit)
            won.append(base)
        except ConfigError:
            pass
    queue.put((worker, won))


def test_racing_first_charges_of_two_periods_with_different_units_cannot_both_win(any_ledger_uri):
    bases = [f"race{i}" for i in range(8)]
    open_ledger(any_ledger_uri)  # create the schema before the race
    ctx = mp.get_context("spawn")
    barrier, queue = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_first_charger, args=(any_ledger_uri, w, bases, barrier, queue)) for w in range(2)]
    for p in procs:
        p.start()
    won = dict(queue.get(timeout=180) for _ in procs)
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    for base in bases:
        assert (base in won[0]) != (base in won[1]), base  # exactly one first charge of each group won
    ledger = open_ledger(any_ledger_uri)
    assert len(ledger.all_charges()) == len(bases)
    assert ledger.unit_conflicts() == []


# Schema 4 exactly as spark-dp wrote it before the lifetime group's declaration (and the lineage key) existed.
_SCHEMA_4 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE datasets (dataset_id TEXT PRIMARY KEY, epsilon_limit DOUBLE PRECISION NOT NULL,
    delta_limit DOUBLE PRECISION NOT NULL, created_at TEXT NOT NULL, privacy_unit TEXT, max_per_unit INTEGER,
    neighbors TEXT);
CREATE TABLE charges (seq {serial}, release_id TEXT NOT NULL UNIQUE,
    dataset_id TEXT NOT NULL REFERENCES datasets(dataset_id), request_sha256 TEXT NOT NULL, events TEXT NOT NULL,
    epsilon DOUBLE PRECISION NOT NULL, delta DOUBLE PRECISION NOT NULL, created_at TEXT NOT NULL,
    lifetime_epsilon DOUBLE PRECISION, input TEXT);
CREATE TABLE releases (release_id TEXT PRIMARY KEY REFERENCES charges(release_id), location TEXT NOT NULL,
    written_at TEXT NOT NULL);
CREATE TABLE limit_changes (seq {serial}, dataset_id TEXT NOT NULL, epsilon_limit DOUBLE PRECISION NOT NULL,
    delta_limit DOUBLE PRECISION NOT NULL, changed_at TEXT NOT NULL, scope TEXT);
CREATE TABLE lifetime_limits (dataset_id TEXT PRIMARY KEY, epsilon_limit DOUBLE PRECISION NOT NULL,
    delta_limit DOUBLE PRECISION NOT NULL, created_at TEXT NOT NULL);
CREATE TABLE crashes (release_id TEXT PRIMARY KEY REFERENCES charges(release_id), reason TEXT NOT NULL,
    recorded_at TEXT NOT NULL);
INSERT INTO meta VALUES ('schema_version', '4');
INSERT INTO lifetime_limits VALUES ('sales', 10.0, 1e-06, '2026-11-01T00:00:00');
INSERT INTO datasets VALUES ('sales@2026-11-01', 5.0, 1e-06, '2026-11-01T00:00:00', 'row', 1, 'add_remove');
INSERT INTO datasets VALUES ('sales@2026-11-02', 5.0, 1e-06, '2026-11-02T00:00:00', 'customer_id', 50, 'replace');
INSERT INTO datasets VALUES ('shop@2026-11-01', 5.0, 1e-06, '2026-11-01T00:00:00', 'user', 3, 'add_remove');
INSERT INTO datasets VALUES ('shop@2026-11-02', 5.0, 1e-06, '2026-11-02T00:00:00', 'user', 7, 'add_remove');
INSERT INTO charges (release_id, dataset_id, request_sha256, events, epsilon, delta, created_at)
    VALUES ('s1', 'sales@2026-11-01', 'x', '%EV%', 1.0, 1e-06, '2026-11-01T00:00:00');
INSERT INTO charges (release_id, dataset_id, request_sha256, events, epsilon, delta, created_at)
    VALUES ('s2', 'sales@2026-11-02', 'x', '%EV%', 1.0, 1e-06, '2026-11-02T00:00:00');
INSERT INTO charges (release_id, dataset_id, request_sha256, events, epsilon, delta, created_at)
    VALUES ('h1', 'shop@2026-11-01', 'x', '%EV%', 1.0, 1e-06, '2026-11-01T00:00:00');
INSERT INTO charges (release_id, dataset_id, request_sha256, events, epsilon, delta, created_at)
    VALUES ('h2', 'shop@2026-11-02', 'x', '%EV%', 1.0, 1e-06, '2026-11-02T00:00:00');
INSERT INTO releases VALUES ('s1', '/elsewhere/s1', '2026-11-01T00:00:01');
INSERT INTO releases VALUES ('s2', '/elsewhere/s2', '2026-11-02T00:00:01');
INSERT INTO releases VALUES ('h1', '/elsewhere/h1', '2026-11-01T00:00:01');
INSERT INTO releases VALUES ('h2', '/elsewhere/h2', '2026-11-02T00:00:01')
"""


def write_schema_4(uri: str) -> None:
    """A schema 4 ledger as today's code wrote it: 'sales' mixes units over its periods, 'shop' does not."""
    from spark_dp.privacy.events import events_to_json

    script = _SCHEMA_4.replace("%EV%", events_to_json(EV))
    if uri.startswith("sqlite:///"):
        con = sqlite3.connect(uri[len("sqlite:///"):])
        con.executescript(script.replace("{serial}", "INTEGER PRIMARY KEY AUTOINCREMENT"))
        con.close()
        return
    import psycopg

    with psycopg.connect(uri, autocommit=True) as con:
        for stmt in filter(None, (s.strip() for s in script.replace("{serial}", "BIGSERIAL PRIMARY KEY").split(";"))):
            con.execute(stmt)


def test_a_ledger_mixing_units_in_a_group_is_refused_with_the_period_names(any_ledger_uri, tmp_path, capsys):
    uri = any_ledger_uri
    write_schema_4(uri)
    for _ in range(2):  # every open refuses, not only the migrating one
        with pytest.raises(LedgerError) as err:
            open_ledger(uri)
        msg = str(err.value)
        assert "'sales@2026-11-01' (unit 'row', neighbours 'add_remove')" in msg
        assert "'sales@2026-11-02' (unit 'customer_id', neighbours 'replace')" in msg
        assert "--keep-unit-of" in msg and "shop" not in msg  # what to do; the agreeing group is not named
    ledger = open_ledger(uri, strict=False)  # for audits: migrated, still checked on every charge
    with ledger._reading() as con:
        assert con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
    assert len(ledger.lineage_key) == 32
    [conflict] = ledger.unit_conflicts()
    assert conflict.group == "sales" and conflict.kept is None
    assert [ds for ds, _ in conflict.periods] == ["sales@2026-11-01", "sales@2026-11-02"]
    with pytest.raises(LedgerError, match="'sales' mixes"):  # no charge on the mixed group, whatever its unit
        _charge(ledger, "s3", "sales@2026-11-03", ROW)
    # The agreeing group was declared by the migration (m differs, unit and relation agree): checked from now on.
    _charge(ledger, "h3", "shop@2026-11-03", UnitDeclaration("user", 5, "add_remove"))
    with pytest.raises(ConfigError, match="declared by 'shop@2026-11-01'"):
        _charge(ledger, "h4", "shop@2026-11-04", ROW)

    out = tmp_path / "out"
    out.mkdir()
    assert cli_main(["audit", "--ledger", uri, str(out), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    [mixed] = [f for f in report["findings"] if f["kind"] == "mixed_units"]
    assert "'sales@2026-11-01'" in mixed["message"] and "'sales@2026-11-02'" in mixed["message"]

    assert cli_main(["ledger", "--uri", uri]) == 2  # the ledger command refuses it too, one line
    assert "sales@2026-11-02" in capsys.readouterr().err
    assert cli_main(["ledger", "--uri", uri, "--keep-unit-of", "sales@2026-11-02"]) == 0  # the explicit choice
    capsys.readouterr()
    ledger = open_ledger(uri)  # opens now
    assert ledger.unit_conflicts()[0].kept == "sales@2026-11-02"
    with pytest.raises(ConfigError, match="declared by 'sales@2026-11-02'"):
        _charge(ledger, "s4", "sales@2026-11-01", ROW)
    _charge(ledger, "s5", "sales@2026-11-03", CUSTOMER)
    with pytest.raises(LedgerError, match="declared unit already"):
        ledger.keep_group_unit("sales@2026-11-01")
    assert cli_main(["audit", "--ledger", uri, str(out), "--json"]) == 1  # s5, h3 unwritten; the mix is a note
    report = json.loads(capsys.readouterr().out)
    assert report["counts"].get("mixed_units") is None and report["counts"]["units_kept"] == 1


def test_the_public_api_refuses_the_sales_example_before_any_spark_work(spark, tmp_path, monkeypatch):
    """As a user would call it: sales@2026-11-01 row level, then sales@2026-11-02 by customer_id, m = 50, replace.

    The session's dry run refuses the second period before any Spark job (``gram_matrix`` would raise).
    """
    import numpy as np

    import spark_dp.second_moment.api as sm_api
    from spark_dp import DPSession

    rng = np.random.default_rng(0)
    df = spark.createDataFrame([(f"c{i % 5}", *map(float, rng.normal(size=2) / 4)) for i in range(30)],
                               ["customer_id", "a", "b"])

    def session(period):
        return DPSession(f"sales@{period}", ledger=f"sqlite:///{tmp_path}/l.db", epsilon_limit=5, delta_limit=1e-5,
                         lifetime_limit=(10, 1e-5), output=str(tmp_path / "out"), sampler=SeededSampler())

    first = session("2026-11-01")  # its row-level release, charged as the pipeline charges it (no Spark needed here)
    _charge(first.ledger, "first", "sales@2026-11-01", ROW)

    def no_spark(*a, **k):  # the refusal must come before any Spark work
        raise AssertionError("Spark work started before the lifetime group's unit check")

    monkeypatch.setattr(sm_api, "gram_matrix", no_spark)
    with pytest.raises(ConfigError, match="period of 'sales'"):
        session("2026-11-02").second_moment(df, ["a", "b"], epsilon=1, delta=1e-6, norm_bound=1,
                                            privacy_unit="customer_id", max_rows_per_unit=50, neighbors="replace")
    ledger = open_ledger(f"sqlite:///{tmp_path}/l.db")
    assert ledger.lifetime_status("sales").releases == 1 and len(ledger.all_charges()) == 1
