"""Lifetime caps over renewing periods (issue #16, item 1).

A dataset ``<base>`` may carry a lifetime cap over itself and all its periods
``<base>@<period>``. Every charge on any period is checked, in the same
serialised transaction, against the period's limit and the exact
composition of every period's events at the lifetime δ; refused otherwise,
nothing charged. Both ledger backends; ledgers of schema 2 are migrated.
The plan test runs a daily plan day after day with a simulated date: it is
refused on exactly the day the accountant predicted, and ``plan status``
predicted that day in advance.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import sqlite3
from datetime import date, timedelta

import numpy as np
import pytest
import yaml

from spark_dp import DPSession
from spark_dp.cli.config import JobConfig
from spark_dp.cli.main import main as cli_main
from spark_dp.errors import BudgetExceededError, ConfigError
from spark_dp.plans import load_plan, plan_from_dict, plan_lifetimes, plan_status, run_plan
from spark_dp.privacy import (
    Budget,
    GaussianEvent,
    LaplaceEvent,
    compose_epsilon,
    gaussian_noise_multiplier,
    open_ledger,
)
from spark_dp.privacy.accountant import periods_within
from spark_dp.privacy.events import EpsilonDeltaEvent
from spark_dp.privacy.ledger import SCHEMA_VERSION, lifetime_dataset

DELTA = 1e-6
Z = gaussian_noise_multiplier(1.0, DELTA)  # one release at (1, 1e-6)
DAY = Budget(1.2, DELTA)  # a period admits one such release, not two
EV = [GaussianEvent(Z)]


def _charge(ledger, rid, dataset, events=EV, limit=DAY):
    return ledger.charge(release_id=rid, dataset_id=dataset, request_sha256="x", events=events,
                         budget=Budget(1.0, DELTA), limit=limit)


def _cap_for(k: int, events=EV, delta=DELTA) -> Budget:
    """A lifetime cap admitting exactly k periods of ``events`` (ε halfway between k and k+1)."""
    lo, hi = compose_epsilon(events * k, delta), compose_epsilon(events * (k + 1), delta)
    return Budget((lo + hi) / 2, delta)


# -- the accountant's count ---------------------------------------------------------
def test_worked_example_of_the_docs():
    """docs/privacy.md: daily ε = 1 at δ = 1e-6 under a lifetime ε = 10 (δ = 1e-6) runs 60 days, basic 10."""
    assert periods_within([], EV, Budget(10.0, 1e-6)) == 60
    assert periods_within([], EV, Budget(10.0, 1e-5)) == 71
    assert compose_epsilon(EV * 60, 1e-6) <= 10.0 < compose_epsilon(EV * 61, 1e-6)


@pytest.mark.parametrize("past, per_period, cap", [
    ([], EV, Budget(4.0, DELTA)),
    (EV * 3, EV * 2, Budget(6.0, DELTA)),
    ([LaplaceEvent(4.0)], [GaussianEvent(6.0), LaplaceEvent(8.0)], Budget(2.5, 1e-5)),  # PLD path
    ([EpsilonDeltaEvent(0.5, 1e-7, "wishart")], [EpsilonDeltaEvent(0.5, 1e-7, "wishart")], Budget(2.0, 1e-5)),
    (EV * 30, EV, Budget(3.0, DELTA)),  # already over: nothing fits
])
def test_periods_within_is_the_brute_force_count(past, per_period, cap):
    k = periods_within(past, per_period, cap)
    brute = 0
    while compose_epsilon([*past, *(per_period * (brute + 1))], cap.delta) <= cap.epsilon:
        brute += 1
    assert k == brute
    if k > 1:  # the bound caps the search
        assert periods_within(past, per_period, cap, max_periods=k - 1) == k - 1


# -- the ledger: both backends ---------------------------------------------------------
def test_every_period_is_checked_against_the_lifetime_cap(any_ledger_uri):
    ledger = open_ledger(any_ledger_uri)
    cap = _cap_for(3)
    assert ledger.ensure_lifetime_limit("shop@2026-01-01", cap) == cap  # registered for the base dataset
    assert ledger.lifetime_limit("shop") == cap and ledger.lifetime_limit("shop@2027-05") == cap
    assert ledger.lifetime_limit("other") is None
    for i in range(3):
        c = _charge(ledger, f"r{i}", f"shop@2026-01-0{i + 1}")
        assert c.lifetime_epsilon == pytest.approx(compose_epsilon(EV * (i + 1), DELTA))
        assert ledger.lookup(f"r{i}").lifetime_epsilon == c.lifetime_epsilon
    # The 4th period has its own fresh per-period budget, but the lifetime cap refuses it: dry run and charge.
    with pytest.raises(BudgetExceededError, match="Lifetime privacy budget of dataset 'shop'"):
        ledger.check("shop@2026-01-04", EV, DAY)
    with pytest.raises(BudgetExceededError, match="Lifetime"):
        _charge(ledger, "r3", "shop@2026-01-04")
    assert ledger.lookup("r3") is None and ledger.status("shop@2026-01-04") == []  # nothing charged or registered
    # The base dataset itself counts against its own lifetime, and a differently named dataset does not.
    with pytest.raises(BudgetExceededError, match="Lifetime"):
        _charge(ledger, "r4", "shop", limit=Budget(5.0, DELTA))
    _charge(ledger, "r5", "shopping@2026-01-04")  # not 'shop@…': another dataset
    _charge(ledger, "r6", "other", limit=Budget(5.0, DELTA))
    lt = ledger.lifetime_status("shop@2026-01-01")
    assert (lt.dataset_id, lt.periods, lt.releases) == ("shop", 3, 3)
    assert lt.spent_epsilon == pytest.approx(compose_epsilon(EV * 3, DELTA)) and lt.spent_epsilon <= cap.epsilon
    assert [s.dataset_id for s in ledger.lifetime_statuses()] == ["shop"]
    assert len(ledger.group_events("shop")) == 3
    rows = {r["dataset_id"]: r for r in json.loads(ledger.to_json())}
    assert rows["shop@2026-01-02"]["lifetime_dataset"] == "shop"
    assert rows["shop@2026-01-02"]["lifetime_epsilon_limit"] == cap.epsilon
    assert rows["other"]["lifetime_dataset"] is None
    # The period's own limit still holds on its own.
    ledger.set_lifetime_limit("shop", Budget(100.0, DELTA))
    with pytest.raises(BudgetExceededError, match="Privacy budget of dataset 'shop@2026-01-01' would be exceeded"):
        _charge(ledger, "r7", "shop@2026-01-01")
    _charge(ledger, "r8", "shop@2026-01-04")


def test_lifetime_caps_change_only_explicitly(any_ledger_uri):
    ledger = open_ledger(any_ledger_uri)
    ledger.ensure_lifetime_limit("shop", Budget(10.0, DELTA))
    ledger.ensure_lifetime_limit("shop@2026-W01", Budget(10.0, DELTA))  # the same cap again: fine
    with pytest.raises(ConfigError, match="--set-lifetime-limit"):
        ledger.ensure_lifetime_limit("shop@2026-W02", Budget(20.0, DELTA))
    ledger.set_lifetime_limit("shop@2026-W02", Budget(20.0, DELTA))
    assert ledger.lifetime_limit("shop") == Budget(20.0, DELTA)
    with ledger._reading() as con:
        changes = con.execute("SELECT dataset_id, epsilon_limit, scope FROM limit_changes ORDER BY seq").fetchall()
    assert [tuple(r) for r in changes] == [("shop", 10.0, "lifetime"), ("shop", 20.0, "lifetime")]


def test_the_ledger_command_sets_and_shows_lifetime_caps(any_ledger_uri, capsys):
    uri = any_ledger_uri
    assert cli_main(["ledger", "--uri", uri, "--set-lifetime-limit", "8", "1e-6"]) == 2
    assert "--set-lifetime-limit needs --dataset" in capsys.readouterr().err
    assert cli_main(["ledger", "--uri", uri, "--dataset", "shop@2026-01-01", "--set-lifetime-limit", "8", "0"]) == 2
    assert "--set-lifetime-limit delta" in capsys.readouterr().err
    assert cli_main(["ledger", "--uri", uri, "--set-lifetime-limit", "8", "1e-6", "--dataset", "shop@2026-01-01",
                     "--set-limit", "1.2", "1e-6"]) == 0
    text = capsys.readouterr().out
    assert "lifetime of dataset" in text and "shop " in text and "shop@2026-01-01" in text
    assert open_ledger(uri).lifetime_limit("shop") == Budget(8.0, 1e-6)
    _charge(open_ledger(uri), "r1", "shop@2026-01-01")
    assert cli_main(["ledger", "--uri", uri, "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert row["lifetime_dataset"] == "shop" and row["lifetime_epsilon_spent"] == pytest.approx(1.0)


def _racer(uri: str, worker: int, attempts: int, cap: Budget, queue) -> None:
    ledger = open_ledger(uri)
    ok = 0
    for a in range(attempts):
        try:  # every attempt on its own period: only the lifetime cap can refuse
            _charge(ledger, f"w{worker}-{a}", f"race@w{worker}-{a}")
            ok += 1
        except BudgetExceededError:
            pass
    queue.put(ok)


def test_racing_processes_on_different_periods_never_overspend_the_lifetime(any_ledger_uri):
    admitted, workers, attempts = 25, 4, 12
    cap = _cap_for(admitted)
    open_ledger(any_ledger_uri).ensure_lifetime_limit("race", cap)
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_racer, args=(any_ledger_uri, w, attempts, cap, queue)) for w in range(workers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    assert sum(queue.get(timeout=10) for _ in procs) == admitted
    lt = open_ledger(any_ledger_uri).lifetime_status("race")
    assert lt.releases == lt.periods == admitted and lt.spent_epsilon <= cap.epsilon


# Schema 2 exactly as spark-dp wrote it before schema 3.
_SCHEMA_2 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE datasets (dataset_id TEXT PRIMARY KEY, epsilon_limit DOUBLE PRECISION NOT NULL,
    delta_limit DOUBLE PRECISION NOT NULL, created_at TEXT NOT NULL, privacy_unit TEXT, max_per_unit INTEGER,
    neighbors TEXT);
CREATE TABLE charges (seq {serial}, release_id TEXT NOT NULL UNIQUE,
    dataset_id TEXT NOT NULL REFERENCES datasets(dataset_id), request_sha256 TEXT NOT NULL, events TEXT NOT NULL,
    epsilon DOUBLE PRECISION NOT NULL, delta DOUBLE PRECISION NOT NULL, created_at TEXT NOT NULL);
CREATE TABLE releases (release_id TEXT PRIMARY KEY REFERENCES charges(release_id), location TEXT NOT NULL,
    written_at TEXT NOT NULL);
CREATE TABLE limit_changes (seq {serial}, dataset_id TEXT NOT NULL, epsilon_limit DOUBLE PRECISION NOT NULL,
    delta_limit DOUBLE PRECISION NOT NULL, changed_at TEXT NOT NULL);
INSERT INTO meta VALUES ('schema_version', '2');
INSERT INTO datasets VALUES ('old@2026-01-01', 1.5, 1e-06, '2026-01-01T00:00:00', 'row', 1, 'add_remove');
INSERT INTO charges (release_id, dataset_id, request_sha256, events, epsilon, delta, created_at)
    VALUES ('old-1', 'old@2026-01-01', 'x', '[{"type": "gaussian", "noise_multiplier": %Z%}]', 1.0, 1e-06,
            '2026-01-01T00:00:00');
INSERT INTO releases VALUES ('old-1', '/somewhere/old-1', '2026-01-01T00:00:01');
INSERT INTO limit_changes (dataset_id, epsilon_limit, delta_limit, changed_at)
    VALUES ('old@2026-01-01', 1.5, 1e-06, '2026-01-01T00:00:00');
"""


def _write_schema_2(uri: str) -> None:
    script = _SCHEMA_2.replace("%Z%", repr(Z))
    if uri.startswith("sqlite:///"):
        con = sqlite3.connect(uri[len("sqlite:///"):])
        con.executescript(script.replace("{serial}", "INTEGER PRIMARY KEY AUTOINCREMENT"))
        con.close()
        return
    import psycopg

    with psycopg.connect(uri, autocommit=True) as con:
        for stmt in filter(None, (s.strip() for s in script.replace("{serial}", "BIGSERIAL PRIMARY KEY").split(";"))):
            con.execute(stmt)


def test_a_schema_2_ledger_is_migrated_and_its_charges_count_against_a_new_cap(any_ledger_uri):
    assert SCHEMA_VERSION >= 3
    _write_schema_2(any_ledger_uri)
    ledger = open_ledger(any_ledger_uri)  # migrates (2 → 3 → the current schema)
    with ledger._reading() as con:
        assert con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
    old = ledger.lookup("old-1")
    assert old.written and old.lifetime_epsilon is None and old.crash is None and list(old.events) == EV
    assert old.lineage is None
    ledger.ensure_lifetime_limit("old", _cap_for(2))
    _charge(ledger, "new-1", "old@2026-01-02")  # the old charge counts: 2 of 2 periods
    with pytest.raises(BudgetExceededError, match="Lifetime"):
        _charge(ledger, "new-2", "old@2026-01-03")
    assert ledger.lookup("new-1").lifetime_epsilon == pytest.approx(compose_epsilon(EV * 2, DELTA))
    open_ledger(any_ledger_uri)  # a second open does not migrate again
    assert open_ledger(any_ledger_uri).lifetime_status("old").releases == 2


def test_a_ledger_newer_than_the_library_is_refused(tmp_path):
    from spark_dp.errors import LedgerError

    uri = f"sqlite:///{tmp_path}/l.db"
    open_ledger(uri)
    con = sqlite3.connect(tmp_path / "l.db")
    con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 1),))
    con.commit()
    con.close()
    with pytest.raises(LedgerError, match="newer"):
        open_ledger(uri)


# -- configs, plans and the session ---------------------------------------------------------
def _job(tmp_path, **ledger):
    (tmp_path / "x.parquet").write_bytes(b"")  # only its existence is checked
    return {"dataset": {"id": "shop", "path": str(tmp_path / "x.parquet"), "columns": ["a"]},
            "task": "second_moment", "mechanism": "analyze_gauss",
            "privacy": {"epsilon": 1.0, "delta": 1e-6, "norm_bound": 1.0},
            "ledger": {"uri": "sqlite:///l.db", **ledger}, "output": {"path": "out"}}


@pytest.mark.parametrize("ledger, needle", [
    ({"lifetime_epsilon_limit": 10.0}, "lifetime_delta_limit"),
    ({"lifetime_epsilon_limit": -1.0, "lifetime_delta_limit": 1e-6}, "ledger.lifetime_epsilon_limit"),
    ({"lifetime_epsilon_limit": 10.0, "lifetime_delta_limit": 1.5}, "ledger.lifetime_delta_limit"),
])
def test_bad_lifetime_limits_in_a_config_name_the_key(tmp_path, ledger, needle):
    with pytest.raises(ConfigError, match=needle):
        JobConfig.from_dict(_job(tmp_path, **ledger))


def test_a_config_lifetime_limit_reaches_the_ledger_through_the_session(tmp_path):
    from spark_dp.cli.job import session_for

    raw = _job(tmp_path, lifetime_epsilon_limit=10.0, lifetime_delta_limit=1e-6)
    raw["ledger"]["uri"] = f"sqlite:///{tmp_path}/l.db"
    raw["dataset"]["id"] = "shop@2026-01-01"
    config = JobConfig.from_dict(raw)
    assert (config.ledger.lifetime_epsilon_limit, config.ledger.lifetime_delta_limit) == (10.0, 1e-6)
    session = session_for(config)
    assert session.lifetime_limit == Budget(10.0, 1e-6)
    assert open_ledger(raw["ledger"]["uri"]).lifetime_limit("shop") == Budget(10.0, 1e-6)


def test_the_session_registers_its_lifetime_limit_and_refuses_another(tmp_path):
    uri = f"sqlite:///{tmp_path}/l.db"
    dp = DPSession("sales@2026-03", ledger=uri, epsilon_limit=1, delta_limit=1e-6, output=str(tmp_path),
                   lifetime_limit=(5.0, 1e-6))
    assert dp.lifetime_limit == Budget(5.0, 1e-6) and dp.ledger.lifetime_limit("sales") == Budget(5.0, 1e-6)
    DPSession("sales@2026-04", ledger=uri, lifetime_limit=Budget(5.0, 1e-6))  # the same cap: fine
    assert DPSession("sales@2026-05", ledger=uri).lifetime_limit is None  # not given: the ledger's cap still holds
    with pytest.raises(ConfigError, match="lifetime limit epsilon=5"):
        DPSession("sales@2026-05", ledger=uri, lifetime_limit=(6.0, 1e-6))
    for bad, needle in (((0.0, 1e-6), "lifetime_limit epsilon"), ((1.0, 2.0), "lifetime_limit delta"),
                        (3.0, "lifetime_limit")):
        with pytest.raises(ConfigError, match=needle):
            DPSession("x", ledger=uri, lifetime_limit=bad)
    assert lifetime_dataset("sales@2026-05") == "sales" and lifetime_dataset("sales") == "sales"


def _daily(budget, *, path="data.parquet"):
    return {"name": "cov", "schedule": "daily", "budget": budget, "inline": {
        "dataset": {"id": "shop.users", "path": path, "columns": ["x1", "x2", "x3"], "privacy_unit": "user"},
        "task": "second_moment", "mechanism": "analyze_gauss",
        "privacy": {"epsilon": 1.0, "delta": DELTA, "norm_bound": 1.0, "sampler": "numpy"},
        "ledger": {"uri": "unused"}, "output": {"path": "unused"}}}


PER_DAY = {"epsilon": 1.2, "delta": DELTA, "renew": "per_period"}


@pytest.mark.parametrize("budget, needle", [
    ({**PER_DAY, "lifetime_epsilon": 10.0}, "entries.cov.budget.lifetime_delta"),
    ({**PER_DAY, "renew": "never", "lifetime_epsilon": 10.0, "lifetime_delta": DELTA},
     "entries.cov.budget.lifetime_epsilon"),
    ({**PER_DAY, "lifetime_epsilon": 0, "lifetime_delta": DELTA}, "entries.cov.budget.lifetime_epsilon"),
    ({**PER_DAY, "lifetime_epsilon": 10, "lifetime_delta": 0}, "entries.cov.budget.lifetime_delta"),
])
def test_bad_lifetime_budgets_in_a_plan_name_the_key(budget, needle):
    with pytest.raises(ConfigError, match=needle):
        plan_from_dict({"plan": "p", "entries": [_daily(budget)]})


def test_a_plan_carries_its_lifetime_cap_into_the_job_config():
    plan = plan_from_dict({"plan": "p", "entries": [_daily({**PER_DAY, "lifetime_epsilon": 10, "lifetime_delta": DELTA})]})
    raw = plan.job_dict(plan.entries[0], date(2026, 1, 5))
    assert raw["dataset"]["id"] == "shop.users@2026-01-05"
    assert (raw["ledger"]["lifetime_epsilon_limit"], raw["ledger"]["lifetime_delta_limit"]) == (10, DELTA)
    entry = _daily({**PER_DAY, "lifetime_epsilon": 10, "lifetime_delta": DELTA})
    entry["inline"]["ledger"]["lifetime_epsilon_limit"] = 12  # a config naming another cap than the plan's
    with pytest.raises(ConfigError, match="lifetime_epsilon_limit"):
        plan_from_dict({"plan": "p", "entries": [entry]})
    other = _daily({**PER_DAY, "lifetime_epsilon": 11, "lifetime_delta": DELTA})
    other["name"] = "cov2"
    with pytest.raises(ConfigError, match="same budget|different budgets"):  # one dataset, one stated budget
        plan_from_dict({"plan": "p", "entries": [_daily({**PER_DAY, "lifetime_epsilon": 10, "lifetime_delta": DELTA}),
                                                 other]})


# -- done when: the plan is refused on exactly the predicted day ---------------------------------
def test_a_daily_plan_is_refused_on_exactly_the_day_plan_status_predicted(spark, tmp_path, capsys):
    """The same users every day (the input does not change): the unit is in every period.

    Each day's release costs ε = 1 at δ = 1e-6 within a per-day budget of
    1.2; the lifetime cap ε = 2.7 at δ = 1e-6 admits six days by exact
    composition (basic composition would admit 2).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(3)
    x = rng.normal(size=(30, 3)) / 3
    pq.write_table(pa.table({"user": [f"u{i % 10}" for i in range(30)], "x1": x[:, 0], "x2": x[:, 1],
                             "x3": x[:, 2]}), tmp_path / "users.parquet")
    uri = f"sqlite:///{tmp_path}/ledger.db"
    raw = {"plan": "shop", "ledger": {"uri": uri}, "output": {"path": str(tmp_path / "releases")},
           "entries": [_daily({**PER_DAY, "lifetime_epsilon": 2.7, "lifetime_delta": DELTA},
                              path=str(tmp_path / "users.parquet"))]}
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    plan = load_plan(str(path))

    [before] = plan_lifetimes(plan)  # nothing run yet: the plan's cap, no per-period spend to extrapolate
    assert before.periods_left is None and before.epsilon_spent == 0 and before.epsilon_limit == 2.7

    start = date(2026, 1, 1)
    [day1] = run_plan(plan, start)
    assert day1.status == "released"
    assert cli_main(["plan", "status", str(path), "--json"]) == 0
    [forecast] = json.loads(capsys.readouterr().out)["lifetime"]
    predicted = date.fromisoformat(forecast["first_refused_period"])
    assert forecast["dataset"] == "shop.users" and forecast["template_period"] == "2026-01-01"
    assert forecast["periods_left"] >= 2 and not forecast["periods_left_at_least"]
    assert predicted == start + timedelta(days=forecast["periods_left"] + 1)
    assert forecast["periods_left"] + 1 > 2  # more days than basic composition's floor(2.7 / 1)

    d = start
    while True:
        d += timedelta(days=1)
        assert d <= predicted, "ran past the predicted day without a refusal"
        [res] = run_plan(plan, d)
        if res.status == "refused":
            break
        assert res.status == "released"
        [fc] = plan_lifetimes(plan)  # the prediction does not move as the days run
        assert date.fromisoformat(fc.first_refused_period) == predicted
    assert d == predicted
    assert "Lifetime privacy budget of dataset 'shop.users'" in res.message
    assert not (tmp_path / "releases" / f"shop.cov.{d.isoformat()}").exists()
    ledger = open_ledger(uri)
    lt = ledger.lifetime_status("shop.users")
    assert lt.releases == (predicted - start).days and lt.spent_epsilon <= 2.7
    assert ledger.status(f"shop.users@{d.isoformat()}") == []  # nothing charged on the refused day
    [after] = plan_lifetimes(plan)
    assert after.periods_left == 0 and after.first_refused_period == d.isoformat()
    # The text status shows the lifetime table; the period rows are unchanged.
    assert cli_main(["plan", "status", str(path)]) == 0
    text = capsys.readouterr().out
    assert "lifetime of dataset" in text and d.isoformat() in text
    # The ledger audits the plan's output root: every release charged, every charge written (the refused day: neither).
    assert cli_main(["audit", "--ledger", uri, str(tmp_path / "releases")]) == 0
    assert "audit OK" in capsys.readouterr().out
    assert {r.ledger_dataset for r in plan_status(plan)} == {f"shop.users@{(start + timedelta(days=i)).isoformat()}"
                                                             for i in range(lt.releases)}
