"""Release plans: periods, validation, idempotent daily runs, per-period budgets, weekly merges.

The runs go against both ledger backends (``any_ledger_uri``: SQLite and a
real PostgreSQL server) and read a catalog table of the local session,
filtered per day through ``${date}``.
"""

import json
import uuid
from datetime import date, timedelta

import numpy as np
import pytest
import yaml

from spark_dp.cli.main import main as cli_main
from spark_dp.errors import ConfigError
from spark_dp.plans import load_plan, period_bounds, period_key, plan_from_dict, plan_status, run_plan
from spark_dp.privacy import open_ledger
from spark_dp.release import load_release

WEEK = [date(2026, 11, 23) + timedelta(days=i) for i in range(7)]  # ISO week 2026-W48, Mon..Sun


@pytest.fixture(scope="module")
def events_table(spark, tmp_path_factory):
    """db.events: 7 days × 40 rows of (ds, x1, x2, x3, item), in a database under a tmp dir."""
    loc = tmp_path_factory.mktemp("warehouse")
    db = f"plans_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE DATABASE {db} LOCATION '{loc}/{db}.db'")
    rng = np.random.default_rng(7)
    rows = []
    for d in WEEK:
        x = rng.normal(size=(40, 3)) / 3
        items = rng.choice(["a", "b", "c", "d", "e"], size=40, p=[0.5, 0.2, 0.1, 0.1, 0.1])
        rows += [(d.isoformat(), *map(float, r), str(it)) for r, it in zip(x, items, strict=True)]
    spark.createDataFrame(rows, "ds string, x1 double, x2 double, x3 double, item string") \
        .write.mode("overwrite").saveAsTable(f"{db}.events")
    yield f"{db}.events"
    spark.sql(f"DROP DATABASE {db} CASCADE")


def _cov_entry(table, *, epsilon=0.6, name="cov", budget=None):
    return {
        "name": name, "schedule": "daily",
        "budget": budget or {"epsilon": 1.0, "delta": 1e-5, "renew": "per_period"},
        "inline": {
            "dataset": {"id": "shop.events", "table": table, "where": "ds = '${date}'", "columns": ["x1", "x2", "x3"]},
            "task": "second_moment", "mechanism": "analyze_gauss",
            "privacy": {"epsilon": epsilon, "delta": 1e-6, "norm_bound": 1.0, "sampler": "numpy"},
            "ledger": {"uri": "unused"}, "output": {"path": "unused"},
        },
    }


def _sketch_entry(table, *, name="queries"):
    return {
        "name": name, "schedule": "daily",
        "budget": {"epsilon": 3.0, "delta": 1e-5, "renew": "per_period", "period": "weekly"},
        "inline": {
            "dataset": {"id": "shop.queries", "table": table, "where": "ds = '${date}'", "columns": ["item"]},
            "task": "count_sketch", "mechanism": "private_count_sketch",
            "privacy": {"epsilon": 0.4, "delta": 1e-6, "sampler": "numpy"},
            "params": {"repetitions": 3, "buckets": 16},
            "ledger": {"uri": "unused"}, "output": {"path": "unused"},
        },
    }


def _write_plan(tmp_path, ledger_uri, entries, name="shop"):
    raw = {"plan": name, "ledger": {"uri": ledger_uri}, "output": {"path": str(tmp_path / "releases")},
           "entries": entries}
    p = tmp_path / f"plan_{name}.yaml"
    p.write_text(yaml.safe_dump(raw, sort_keys=False))
    return str(p)


# -- periods and validation (no Spark) ---------------------------------------------
def test_period_keys_and_bounds():
    d = date(2026, 11, 30)  # a Monday
    assert period_key("daily", d) == "2026-11-30"
    assert period_key("weekly", d) == "2026-W49"
    assert period_key("monthly", d) == "2026-11"
    assert period_bounds("weekly", d) == (date(2026, 11, 30), date(2026, 12, 6))
    assert period_bounds("monthly", date(2026, 2, 10)) == (date(2026, 2, 1), date(2026, 2, 28))
    assert period_key("weekly", date(2027, 1, 1)) == "2026-W53"  # ISO weeks cross years


def test_due_dates_and_release_ids(tmp_path):
    plan = plan_from_dict({"plan": "p", "entries": [
        _cov_entry("db.t"), _sketch_entry("db.t"),
        {"name": "w", "kind": "merge", "schedule": "weekly", "from": "queries"},
        {"name": "m", "kind": "merge", "schedule": "monthly", "due": 15, "from": "cov"},
    ][:3]})
    cov, _, w = plan.entries
    assert all(cov.is_due(d) for d in WEEK)
    assert [w.is_due(d) for d in WEEK] == [False] * 6 + [True]  # default: Sunday, last day of the ISO week
    assert cov.release_id("p", WEEK[0]) == "p.cov.2026-11-23"
    assert w.release_id("p", WEEK[6]) == "p.w.2026-W48"
    raw = plan.job_dict(cov, WEEK[2])
    assert raw["release_id"] == "p.cov.2026-11-25"
    assert raw["dataset"]["id"] == "shop.events@2026-11-25"  # per-period budget: its own ledger dataset
    assert raw["dataset"]["where"] == "ds = '2026-11-25'"
    assert (raw["ledger"]["epsilon_limit"], raw["ledger"]["delta_limit"]) == (1.0, 1e-5)
    q = plan.job_dict(plan.entry("queries"), WEEK[2])
    assert q["dataset"]["id"] == "shop.queries@2026-W48"  # budget renews weekly, releases daily


def _bad(entries, **top):
    return {"plan": "p", "entries": entries, **top}


@pytest.mark.parametrize("raw, needle", [
    (_bad([{**_cov_entry("db.t"), "budget": {"epsilon": 1.0, "delta": 1e-5}}]), "entries.cov.budget.renew"),
    (_bad([{**_cov_entry("db.t"), "budget": {"epsilon": 1.0, "delta": 1e-5, "renew": "sometimes"}}]),
     "entries.cov.budget.renew"),
    (_bad([{**_cov_entry("db.t"), "budget": {"epsilon": -1, "delta": 1e-5, "renew": "never"}}]),
     "entries.cov.budget.epsilon"),
    (_bad([{**_cov_entry("db.t"), "budget": {"epsilon": 1, "delta": 1e-5, "renew": "per_period", "period": "x"}}]),
     "entries.cov.budget.period"),
    (_bad([{**_cov_entry("db.t"), "schedule": "weekly",
            "budget": {"epsilon": 1, "delta": 1e-5, "renew": "per_period", "period": "daily"}}]),
     "entries.cov.budget.period"),
    (_bad([{**_cov_entry("db.t"), "schedule": "hourly"}]), "entries.cov.schedule"),
    (_bad([{**_cov_entry("db.t"), "schedule": "weekly", "due": "funday"}]), "entries.cov.due"),
    (_bad([{**_cov_entry("db.t"), "config": "x.yaml"}]), "exactly one of 'entries.cov.config'"),
    (_bad([{**_cov_entry("db.t"), "colour": 1}]), "entries[0].colour"),
    (_bad([_cov_entry("db.t"), _cov_entry("db.t")]), "appears twice"),
    (_bad([_cov_entry("db.t"), _cov_entry("db.t", name="cov2", budget={"epsilon": 2.0, "delta": 1e-5,
                                                                        "renew": "per_period"})]),
     "different budgets"),
    (_bad([_cov_entry("db.t"), {"name": "w", "kind": "merge", "schedule": "weekly", "from": "cov"}]),
     "count_sketch"),
    (_bad([_sketch_entry("db.t"), {"name": "w", "kind": "merge", "schedule": "daily", "from": "queries"}]),
     "entries.w.schedule"),
    (_bad([_sketch_entry("db.t"), {"name": "w", "kind": "merge", "schedule": "weekly", "from": "nope"}]),
     "entries.w.from"),
    (_bad([_sketch_entry("db.t"), {"name": "w", "kind": "merge", "schedule": "weekly", "from": "queries",
                                   "budget": {"epsilon": 1, "delta": 1e-6, "renew": "never"}}]),
     "entries.w.budget"),
    (_bad([{**_cov_entry("db.t"), "inline": {**_cov_entry("db.t")["inline"], "release_id": "x"}}]), "release_id"),
    (_bad([{**_cov_entry("db.t"), "inline": {**_cov_entry("db.t")["inline"],
                                             "ledger": {"uri": "u", "epsilon_limit": 5, "delta_limit": 1e-5}}}]),
     "ledger.epsilon_limit"),
    (_bad([]), "'entries'"),
    ({"entries": [_cov_entry("db.t")]}, "'plan'"),
    (_bad([_cov_entry("db.t")], plan="bad name"), "'plan'"),
])
def test_bad_plans_name_the_key(raw, needle):
    with pytest.raises(ConfigError, match=None) as info:
        plan_from_dict(raw)
    assert needle in str(info.value), str(info.value)
    assert "\n" not in str(info.value)


def test_templates_and_job_configs_are_checked_before_running(tmp_path):
    entry = _cov_entry("db.t")
    entry["inline"]["dataset"]["where"] = "ds = '${day}'"
    plan = plan_from_dict(_bad([entry], ledger={"uri": f"sqlite:///{tmp_path}/l.db"}))
    with pytest.raises(ConfigError, match=r"\$\{day\}"):
        run_plan(plan, WEEK[0])
    entry = _cov_entry("db.t")
    entry["inline"]["privacy"]["epsilon"] = -1
    plan = plan_from_dict(_bad([entry], ledger={"uri": f"sqlite:///{tmp_path}/l.db"}))
    with pytest.raises(ConfigError, match="Plan entry 'cov'.*privacy.epsilon"):
        run_plan(plan, WEEK[0])
    assert not (tmp_path / "l.db").exists()  # nothing was charged: the ledger was never opened for writing


def test_config_files_are_read_relative_to_the_plan(tmp_path, capsys):
    job = _cov_entry("db.t")["inline"]
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    entry = {k: v for k, v in _cov_entry("db.t").items() if k != "inline"} | {"config": "job.yaml"}
    plan = load_plan(_write_plan(tmp_path, f"sqlite:///{tmp_path}/l.db", [entry]))
    assert plan.entries[0].config["task"] == "second_moment"
    assert cli_main(["plan", "run", plan.path, "--date", "2026-13-01"]) == 2
    assert "--date" in capsys.readouterr().err


# -- runs against a table, on both ledger backends -----------------------------------
def test_daily_plan_is_idempotent_and_refuses_when_the_period_is_spent(spark, tmp_path, events_table,
                                                                         any_ledger_uri, capsys):
    entries = [_cov_entry(events_table), _cov_entry(events_table, name="cov_again", epsilon=1.0)]
    path = _write_plan(tmp_path, any_ledger_uri, entries)

    assert cli_main(["plan", "run", path, "--date", WEEK[0].isoformat(), "--entry", "cov"]) == 0
    first = json.loads(capsys.readouterr().out)["entries"]
    assert [(r["entry"], r["status"]) for r in first] == [("cov", "released")]
    assert first[0]["release_id"] == "shop.cov.2026-11-23"
    assert first[0]["ledger_dataset"] == "shop.events@2026-11-23"
    rel = load_release(first[0]["path"])
    assert rel["matrix"].shape == (3, 3) and rel.manifest["dataset_id"] == "shop.events@2026-11-23"

    # Re-running the day returns the stored release: same payload, no second charge.
    assert cli_main(["plan", "run", path, "--date", WEEK[0].isoformat(), "--entry", "cov"]) == 0
    again = json.loads(capsys.readouterr().out)["entries"][0]
    assert again["status"] == "stored" and again["path"] == first[0]["path"]
    np.testing.assert_array_equal(load_release(again["path"])["matrix"], rel["matrix"])
    ledger = open_ledger(any_ledger_uri)
    assert ledger.status("shop.events@2026-11-23")[0].releases == 1

    # A second entry on the same day (1.0 composed with 0.6 at delta 1e-5 is 1.04 > the day's 1.0): refused, nothing written or charged;
    # the stored release is still answered. Exit code 3 says "refused".
    assert cli_main(["plan", "run", path, "--date", WEEK[0].isoformat()]) == 3
    out, err = capsys.readouterr()
    res = {r["entry"]: r for r in json.loads(out)["entries"]}
    assert res["cov"]["status"] == "stored"
    assert res["cov_again"]["status"] == "refused" and "would be exceeded" in res["cov_again"]["message"]
    assert "refused: entry 'cov_again'" in err
    assert ledger.status("shop.events@2026-11-23")[0].releases == 1
    assert not (tmp_path / "releases" / "shop.cov_again.2026-11-23").exists()

    # The next day is a new period with a fresh budget (stated in the plan: renew per_period).
    assert cli_main(["plan", "run", path, "--date", WEEK[1].isoformat(), "--entry", "cov"]) == 0
    assert json.loads(capsys.readouterr().out)["entries"][0]["status"] == "released"

    rows = {r.ledger_dataset: r for r in plan_status(load_plan(path), on=WEEK[2])}
    assert set(rows) == {"shop.events@2026-11-23", "shop.events@2026-11-24", "shop.events@2026-11-25"}
    day1 = rows["shop.events@2026-11-23"]
    assert day1.releases == 1 and day1.epsilon_limit == 1.0 and day1.renew == "per_period"
    assert 0.5 < day1.epsilon_spent < 0.6 and abs(day1.epsilon_left - (1.0 - day1.epsilon_spent)) < 1e-9
    assert rows["shop.events@2026-11-25"].releases == 0 and rows["shop.events@2026-11-25"].epsilon_left == 1.0
    assert cli_main(["plan", "status", path]) == 0
    text = capsys.readouterr().out
    assert "shop.events@2026-11-23" in text and "per_period" in text and "cov,cov_again" in text
    # The ledger command reads either backend (a PostgreSQL URI has no file to check).
    assert cli_main(["ledger", "--uri", any_ledger_uri, "--dataset", "shop.events@2026-11-24", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["releases"] == 1
    # The ledger audits the plan's output root: the refused entry left neither a charge nor a release.
    assert cli_main(["audit", "--ledger", any_ledger_uri, str(tmp_path / "releases")]) == 0


def test_lifetime_budget_does_not_renew(spark, tmp_path, events_table, capsys):
    uri = f"sqlite:///{tmp_path}/ledger.db"
    path = _write_plan(tmp_path, uri, [_cov_entry(events_table, epsilon=0.9, budget={"epsilon": 1.0, "delta": 1e-5,
                                                                                     "renew": "never"})])
    assert cli_main(["plan", "run", path, "--date", WEEK[0].isoformat()]) == 0
    capsys.readouterr()
    assert cli_main(["plan", "run", path, "--date", WEEK[1].isoformat()]) == 3  # the lifetime budget is spent
    res = json.loads(capsys.readouterr().out)["entries"][0]
    assert res["status"] == "refused" and res["ledger_dataset"] == "shop.events"
    [row] = plan_status(load_plan(path))
    assert row.ledger_dataset == "shop.events" and row.releases == 1 and row.renew == "never"


def test_weekly_merge_sums_the_dailies_at_no_new_cost(spark, tmp_path, events_table, any_ledger_uri, capsys):
    entries = [_sketch_entry(events_table),
               {"name": "queries_weekly", "kind": "merge", "schedule": "weekly", "from": "queries"}]
    path = _write_plan(tmp_path, any_ledger_uri, entries)
    plan = load_plan(path)

    # Sunday with days missing: the dailies run for Sunday, the merge names the missing days.
    res = {r.entry: r for r in run_plan(plan, WEEK[6])}
    assert res["queries"].status == "released"
    assert res["queries_weekly"].status == "failed" and "2026-11-23" in res["queries_weekly"].message
    for d in WEEK[:6]:
        [r] = [x for x in run_plan(plan, d) if x.entry == "queries"]
        assert r.status == "released"
        assert [x.status for x in run_plan(plan, d) if x.entry == "queries_weekly"] == ["not_due"]
    ledger = open_ledger(any_ledger_uri)
    before = ledger.status("shop.queries@2026-W48")[0]
    assert before.releases == 7 and before.spent_epsilon <= 3.0

    res = {r.entry: r for r in run_plan(plan, WEEK[6])}
    assert res["queries"].status == "stored"
    weekly = res["queries_weekly"]
    assert weekly.status == "released" and weekly.release_id == "shop.queries_weekly.2026-W48"
    assert ledger.status("shop.queries@2026-W48")[0].releases == 7  # the merge charged nothing
    assert ledger.status("shop.queries@2026-W48")[0].spent_epsilon == before.spent_epsilon

    dailies = [load_release(str(tmp_path / "releases" / f"shop.queries.{d.isoformat()}")) for d in WEEK]
    seeds = [r["seeds"] for r in dailies]
    assert all(np.array_equal(s, seeds[0]) for s in seeds)  # the first day's seeds, reused all week
    merged = load_release(weekly.path)
    np.testing.assert_allclose(merged["sketch"], np.sum([r["sketch"] for r in dailies], axis=0))
    assert merged.manifest["merged_from"] == [r.release_id for r in dailies]
    assert merged.manifest["plan"]["parts_ledger_datasets"] == ["shop.queries@2026-W48"] * 7
    assert merged.privacy["epsilon"] > max(r.privacy["epsilon"] for r in dailies)  # composed, stated honestly

    # Re-running Sunday returns the stored weekly sketch.
    again = {r.entry: r for r in run_plan(plan, WEEK[6])}
    assert again["queries_weekly"].status == "stored" and again["queries_weekly"].path == weekly.path
    # The audit accepts the weekly sum as a merge of charged releases (it charged nothing itself).
    capsys.readouterr()
    assert cli_main(["audit", "--ledger", any_ledger_uri, str(tmp_path / "releases"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["releases_matched"] == 7 and report["counts"] == {"derived": 1}


def test_shipped_plans_are_valid():
    import glob
    import os

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths = sorted(glob.glob(os.path.join(root, "conf", "plan_*.yaml")))
    assert paths
    for path in paths:
        plan = load_plan(path)
        for e in plan.entries:
            if e.kind == "release":
                cfg = plan.job_config(e, WEEK[6], check_paths=False)
                assert cfg.release_id == f"{plan.name}.{e.name}.{e.period(WEEK[6])}"


def test_spark_tag_is_added_and_removed(spark):
    from spark_dp.cli.job import spark_tag

    with spark_tag(spark, "spark-dp:t,1"):
        assert "spark-dp:t;1" in spark.getTags()  # commas are not allowed in tags
        spark.range(3).count()
    assert "spark-dp:t;1" not in spark.getTags()
