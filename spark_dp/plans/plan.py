"""Release plans: recurring releases declared in one YAML file.

A plan lists entries; each is a job config (a file or inline) run on a
schedule, with a budget, or a ``merge`` of another entry's sketches::

    plan: sales                      # name: part of every release id
    ledger: {uri: postgresql://dp@ledger-host/dp}   # optional: overrides the configs' ledger.uri
    output: {path: /data/releases}                  # optional: overrides the configs' output.path
    entries:
      - name: cov
        schedule: daily              # daily | weekly | monthly
        budget: {epsilon: 1.0, delta: 1.0e-6, renew: per_period}   # renew: per_period | never
        config: plan_sales_cov_job.yaml                             # relative to the plan file
      - name: queries
        schedule: daily
        budget: {epsilon: 0.5, delta: 1.0e-6, renew: per_period, period: weekly}
        inline: {task: count_sketch, dataset: {id: logs.queries, table: logs.q, where: "ds = '${date}'", ...}, ...}
      - name: queries_weekly
        kind: merge                  # sum of the week's daily sketches: no new privacy cost
        schedule: weekly             # due on Sundays (due: sunday), for the ISO week
        from: queries

**Dates.** ``spark-dp plan run PLAN --date D`` runs the entries due on the
data date D: daily entries every day; weekly ones on their ``due`` weekday
(default ``sunday``, the last day of the ISO week); monthly ones on their
``due`` day of the month (default ``last``). String values of a config may use
``${date}``, ``${period}``, ``${period_start}`` and ``${period_end}`` (ISO
dates of the entry's schedule period containing D); ``$$`` is a literal ``$``.

**Release ids** are ``<plan>.<entry>.<period>`` with period ``2026-11-30``
(daily), ``2026-W48`` (weekly) or ``2026-11`` (monthly), so re-running a day
returns the stored releases (no new noise, no new charge).

**Budgets are explicit.** ``renew: never`` charges the entry to the
dataset's one lifetime budget (ledger dataset id = ``dataset.id``).
``renew: per_period`` charges it to a fresh budget per budget period
(ledger dataset id = ``<dataset.id>@<period>``, e.g. ``sales@2026-W48``;
``budget.period`` defaults to the schedule). The ledger enforces each
period's limit with its usual guarantees (no overspend under concurrency,
no refund, idempotent ids), but a renewing budget alone is not a lifetime
guarantee: a privacy unit whose rows appear in N periods is protected at
the composition of N periods' budgets (docs/scheduling.md). A lifetime cap
bounds that composition: ``budget: {..., renew: per_period, lifetime_epsilon:
10, lifetime_delta: 1.0e-6}`` registers (ε, δ) for ``<dataset.id>`` over all
its periods, and the ledger refuses any charge on any period that would take
the exact composition of all periods' events over it (``plan status`` says
how many more periods fit). Entries on one dataset must state the same
budget. A config used by a plan must not set ``release_id``; its
``ledger.epsilon_limit``/``delta_limit`` (and ``lifetime_*_limit``), if
given, must equal the entry's budget.
"""

from __future__ import annotations

import calendar
import copy
import os
import re
import string
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

from spark_dp import _validation as V
from spark_dp.errors import ConfigError

OWNER = "the plan"
SCHEDULES = ("daily", "weekly", "monthly")
RENEW = ("per_period", "never")
KINDS = ("release", "merge")
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
PLAN_KEYS = ("plan", "ledger", "output", "entries")
ENTRY_KEYS = ("name", "kind", "schedule", "due", "budget", "config", "inline", "from")
BUDGET_KEYS = ("epsilon", "delta", "renew", "period", "lifetime_epsilon", "lifetime_delta")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
_RANK = {"daily": 0, "weekly": 1, "monthly": 2}


# -- periods -------------------------------------------------------------------
def period_bounds(period: str, d: date) -> tuple[date, date]:
    """First and last day of the ``period`` (daily/weekly/monthly) containing ``d``; weeks are ISO (Mon–Sun)."""
    if period == "daily":
        return d, d
    if period == "weekly":
        start = d - timedelta(days=d.weekday())
        return start, start + timedelta(days=6)
    if period == "monthly":
        return d.replace(day=1), d.replace(day=calendar.monthrange(d.year, d.month)[1])
    raise ConfigError(f"Unknown period {period!r}; expected one of {list(SCHEDULES)}.")


def period_key(period: str, d: date) -> str:
    """``2026-11-30`` (daily), ``2026-W48`` (ISO week, weekly) or ``2026-11`` (monthly)."""
    if period == "daily":
        return d.isoformat()
    if period == "weekly":
        y, w, _ = d.isocalendar()
        return f"{y}-W{w:02d}"
    if period == "monthly":
        return f"{d.year}-{d.month:02d}"
    raise ConfigError(f"Unknown period {period!r}; expected one of {list(SCHEDULES)}.")


def period_start(period: str, key: str) -> date:
    """Inverse of :func:`period_key`: the first day of the period ``key``."""
    try:
        if period == "daily":
            return date.fromisoformat(key)
        if period == "weekly":
            y, w = key.split("-W")
            return date.fromisocalendar(int(y), int(w), 1)
        if period == "monthly":
            y, m = key.split("-")
            return date(int(y), int(m), 1)
    except ValueError:
        pass
    raise ConfigError(f"{key!r} is not a {period} period key.")


def parse_date(text: str) -> date:
    """An ISO date ``YYYY-MM-DD``; ConfigError otherwise."""
    try:
        return date.fromisoformat(str(text))
    except ValueError:
        raise ConfigError(f"The '--date' parameter must be an ISO date YYYY-MM-DD. Got {text!r} instead.") from None


# -- the plan ------------------------------------------------------------------
@dataclass(frozen=True)
class EntryBudget:
    """An entry's budget: (ε, δ) per ``period`` if ``renew`` is ``per_period``, else for the dataset's lifetime."""

    epsilon: float
    delta: float
    renew: str
    period: str
    lifetime_epsilon: float | None = None  # per_period only: a cap over all periods (exact composition)
    lifetime_delta: float | None = None

    @property
    def lifetime(self) -> tuple[float, float] | None:
        return None if self.lifetime_epsilon is None else (self.lifetime_epsilon, self.lifetime_delta)


@dataclass(frozen=True)
class PlanEntry:
    """One recurring release (``kind: release``) or merge of another entry's sketches (``kind: merge``)."""

    name: str
    kind: str
    schedule: str
    due: str | int  # weekly: a weekday; monthly: a day of the month or 'last'
    budget: EntryBudget | None
    config: dict | None  # the raw job config (templates not yet filled), release entries only
    source: str | None  # merge entries: the entry whose releases are summed

    def is_due(self, d: date) -> bool:
        """Whether the entry runs for data date ``d``."""
        if self.schedule == "daily":
            return True
        if self.schedule == "weekly":
            return d.weekday() == WEEKDAYS.index(self.due)
        last = calendar.monthrange(d.year, d.month)[1]
        return d.day == (last if self.due == "last" else min(int(self.due), last))

    def period(self, d: date) -> str:
        return period_key(self.schedule, d)

    def release_id(self, plan: str, d: date) -> str:
        return f"{plan}.{self.name}.{self.period(d)}"


@dataclass(frozen=True)
class Plan:
    """A parsed, validated plan file."""

    name: str
    path: str
    entries: tuple[PlanEntry, ...]
    ledger_uri: str | None = None
    output_path: str | None = None

    def entry(self, name: str) -> PlanEntry:
        for e in self.entries:
            if e.name == name:
                return e
        raise ConfigError(f"Plan {self.name!r} has no entry {name!r}; it has {[e.name for e in self.entries]}.")

    def job_dict(self, entry: PlanEntry, d: date) -> dict:
        """The entry's job config for data date ``d``: templates filled, release id, ledger id and limits set."""
        if entry.kind != "release":
            raise ConfigError(f"Entry {entry.name!r} is a merge; it has no job config.")
        start, end = period_bounds(entry.schedule, d)
        values = {"date": d.isoformat(), "period": entry.period(d), "period_start": start.isoformat(),
                  "period_end": end.isoformat()}
        raw = _fill(copy.deepcopy(entry.config), values, f"entries.{entry.name}")
        raw["release_id"] = entry.release_id(self.name, d)
        raw["dataset"]["id"] = ledger_dataset_id(entry, raw["dataset"]["id"], d)
        raw["ledger"]["epsilon_limit"] = entry.budget.epsilon
        raw["ledger"]["delta_limit"] = entry.budget.delta
        if entry.budget.lifetime is not None:
            raw["ledger"]["lifetime_epsilon_limit"], raw["ledger"]["lifetime_delta_limit"] = entry.budget.lifetime
        if self.ledger_uri is not None:
            raw["ledger"]["uri"] = self.ledger_uri
        if self.output_path is not None:
            raw["output"]["path"] = self.output_path
        return raw

    def job_config(self, entry: PlanEntry, d: date, *, check_paths: bool = True):
        """The validated :class:`~spark_dp.cli.config.JobConfig` of ``entry`` for ``d``."""
        from spark_dp.cli.config import JobConfig

        try:
            return JobConfig.from_dict(self.job_dict(entry, d), check_paths=check_paths)
        except ConfigError as exc:
            raise ConfigError(f"Plan entry {entry.name!r}: {exc}") from None


def ledger_dataset_id(entry: PlanEntry, dataset_id: str, d: date) -> str:
    """The ledger dataset id an entry charges for date ``d``: ``dataset_id`` or ``<dataset_id>@<period>``."""
    b = entry.budget
    return dataset_id if b.renew == "never" else f"{dataset_id}@{period_key(b.period, d)}"


def _fill(obj: Any, values: dict[str, str], where: str) -> Any:
    if isinstance(obj, str):
        try:
            return string.Template(obj).substitute(values)
        except KeyError as exc:
            raise ConfigError(f"Unknown template variable ${{{exc.args[0]}}} in {where}; "
                              f"expected one of {sorted(values)}.") from None
        except ValueError as exc:
            raise ConfigError(f"Bad template in {where}: {exc} (write $$ for a literal $).") from None
    if isinstance(obj, dict):
        return {k: _fill(v, values, f"{where}.{k}") for k, v in obj.items()}
    if isinstance(obj, list):
        return [_fill(v, values, where) for v in obj]
    return obj


def _mapping(value: Any, key: str, keys: tuple[str, ...]) -> dict:
    if not isinstance(value, dict):
        raise ConfigError(f"The {key!r} parameter of {OWNER} must be a mapping. Got {value!r} instead.")
    unknown = sorted(set(value) - set(keys))
    if unknown:
        raise ConfigError(f"Unknown key '{key}.{unknown[0]}' in {OWNER}; expected one of {sorted(keys)}.")
    return value


def _name(key: str, value: Any) -> str:
    value = V.check_str(key, value, owner=OWNER)
    if not _NAME.match(value):
        raise ConfigError(f"The {key!r} parameter of {OWNER} must be letters, digits, '_' or '-'. Got {value!r} instead.")
    return value


def _entry(raw: Any, i: int, base_dir: str) -> PlanEntry:
    raw = _mapping(raw, f"entries[{i}]", ENTRY_KEYS)
    if raw.get("name") is None:
        raise ConfigError(f"Missing required key 'entries[{i}].name' in {OWNER}.")
    name = _name(f"entries[{i}].name", raw["name"])
    key = f"entries.{name}"
    kind = V.check_option(f"{key}.kind", raw.get("kind", "release"), KINDS, owner=OWNER)
    if raw.get("schedule") is None:
        raise ConfigError(f"Missing required key '{key}.schedule' in {OWNER}.")
    schedule = V.check_option(f"{key}.schedule", raw["schedule"], SCHEDULES, owner=OWNER)
    due: str | int = raw.get("due")  # not 'on': YAML 1.1 reads a key 'on' as the boolean true
    if schedule == "daily":
        if due is not None:
            raise ConfigError(f"The '{key}.due' parameter does not apply to a daily schedule.")
        due = ""
    elif schedule == "weekly":
        due = V.check_option(f"{key}.due", "sunday" if due is None else due, WEEKDAYS, owner=OWNER)
    elif due is None or due == "last":
        due = "last"
    else:
        due = V.check_int(f"{key}.due", due, owner=OWNER, low=1, high=31)

    if kind == "merge":
        for k in ("budget", "config", "inline"):
            if raw.get(k) is not None:
                raise ConfigError(f"The '{key}.{k}' parameter does not apply to a merge entry (it costs no budget).")
        if raw.get("from") is None:
            raise ConfigError(f"Missing required key '{key}.from' in {OWNER} (the entry whose sketches are merged).")
        return PlanEntry(name, kind, schedule, due, None, None, _name(f"{key}.from", raw["from"]))

    if raw.get("from") is not None:
        raise ConfigError(f"The '{key}.from' parameter applies to merge entries only.")
    if raw.get("budget") is None:
        raise ConfigError(f"Missing required key '{key}.budget' in {OWNER} (epsilon, delta, renew).")
    b = _mapping(raw["budget"], f"{key}.budget", BUDGET_KEYS)
    for k in ("epsilon", "delta", "renew"):
        if b.get(k) is None:
            raise ConfigError(f"Missing required key '{key}.budget.{k}' in {OWNER} "
                              "(renewal is never implicit: say per_period or never).")
    renew = V.check_option(f"{key}.budget.renew", b["renew"], RENEW, owner=OWNER)
    bperiod = b.get("period")
    if renew == "never" and bperiod is not None:
        raise ConfigError(f"The '{key}.budget.period' parameter applies to renew: per_period only.")
    bperiod = V.check_option(f"{key}.budget.period", bperiod or schedule, SCHEDULES, owner=OWNER)
    if _RANK[bperiod] < _RANK[schedule]:
        raise ConfigError(f"The '{key}.budget.period' parameter must be the schedule's period or longer "
                          f"(schedule {schedule!r}). Got {bperiod!r} instead.")
    if (b.get("lifetime_epsilon") is None) != (b.get("lifetime_delta") is None):
        raise ConfigError(f"Give both '{key}.budget.lifetime_epsilon' and '{key}.budget.lifetime_delta', or neither.")
    if renew == "never" and b.get("lifetime_epsilon") is not None:
        raise ConfigError(f"The '{key}.budget.lifetime_epsilon' parameter applies to renew: per_period only "
                          "(with renew: never the budget is the lifetime limit).")
    budget = EntryBudget(
        epsilon=V.check_real(f"{key}.budget.epsilon", b["epsilon"], owner=OWNER, low=0, low_open=True),
        delta=V.check_real(f"{key}.budget.delta", b["delta"], owner=OWNER, low=0, high=1, low_open=True,
                           high_open=True),
        renew=renew, period=bperiod,
        lifetime_epsilon=None if b.get("lifetime_epsilon") is None else V.check_real(
            f"{key}.budget.lifetime_epsilon", b["lifetime_epsilon"], owner=OWNER, low=0, low_open=True),
        lifetime_delta=None if b.get("lifetime_delta") is None else V.check_real(
            f"{key}.budget.lifetime_delta", b["lifetime_delta"], owner=OWNER, low=0, high=1, low_open=True,
            high_open=True),
    )
    has_cfg, has_inline = raw.get("config") is not None, raw.get("inline") is not None
    if has_cfg == has_inline:
        raise ConfigError(f"Give exactly one of '{key}.config' (a job config file) and '{key}.inline' in {OWNER}.")
    if has_cfg:
        path = V.check_str(f"{key}.config", raw["config"], owner=OWNER)
        path = path if os.path.isabs(path) else os.path.join(base_dir, path)
        config = _read_yaml(path, what="Job config")
    else:
        config = raw["inline"]
    if not isinstance(config, dict):
        raise ConfigError(f"The job config of '{key}' must be a mapping. Got {type(config).__name__} instead.")
    for sec in ("dataset", "ledger", "output"):
        if not isinstance(config.get(sec), dict):
            raise ConfigError(f"Plan entry {name!r}: the {sec!r} section of the job config must be a mapping.")
    if config.get("release_id") is not None:
        raise ConfigError(f"Plan entry {name!r}: remove 'release_id' from its job config; the plan derives "
                          "release ids from plan, entry and period.")
    if not isinstance(config["dataset"].get("id"), str) or "$" in config["dataset"]["id"] or "@" in config["dataset"]["id"]:
        raise ConfigError(f"Plan entry {name!r}: 'dataset.id' must be a fixed string without '$' or '@' "
                          "(the plan adds '@<period>' for renewing budgets).")
    lg = config["ledger"]
    for k, v in (("epsilon_limit", budget.epsilon), ("delta_limit", budget.delta),
                 ("lifetime_epsilon_limit", budget.lifetime_epsilon), ("lifetime_delta_limit", budget.lifetime_delta)):
        if lg.get(k) is not None and lg[k] != v:
            raise ConfigError(f"Plan entry {name!r}: 'ledger.{k}' = {lg[k]!r} in its job config differs from "
                              f"the entry's budget ({v!r}); the plan's budget is the limit, remove it"
                              + (" (a lifetime cap goes in the entry's budget: lifetime_epsilon, lifetime_delta)."
                                 if k.startswith("lifetime") else "."))
    return PlanEntry(name, kind, schedule, due, budget, copy.deepcopy(config), None)


def _read_yaml(path: str, *, what: str) -> Any:
    import yaml

    from spark_dp.cli.config import _Loader

    if not os.path.isfile(path):
        raise ConfigError(f"{what} file {path!r} does not exist.")
    try:
        with open(path) as fh:
            return yaml.load(fh, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise ConfigError(f"{what} file {path!r} is not valid YAML: {getattr(exc, 'problem', exc)}.") from None


def plan_from_dict(raw: Any, *, path: str = "<inline>", base_dir: str = ".") -> Plan:
    """Validates a parsed plan; raises ConfigError naming the first bad key."""
    raw = _mapping(raw, "plan file", PLAN_KEYS)
    if raw.get("plan") is None:
        raise ConfigError(f"Missing required key 'plan' (the plan's name) in {OWNER}.")
    name = _name("plan", raw["plan"])
    ledger_uri = output_path = None
    if raw.get("ledger") is not None:
        lg = _mapping(raw["ledger"], "ledger", ("uri",))
        ledger_uri = V.check_str("ledger.uri", lg.get("uri"), owner=OWNER)
    if raw.get("output") is not None:
        out = _mapping(raw["output"], "output", ("path",))
        output_path = V.check_str("output.path", out.get("path"), owner=OWNER)
    entries_raw = raw.get("entries")
    if not isinstance(entries_raw, list) or not entries_raw:
        raise ConfigError(f"The 'entries' parameter of {OWNER} must be a non-empty list. Got {entries_raw!r} instead.")
    entries = tuple(_entry(e, i, base_dir) for i, e in enumerate(entries_raw))
    names = [e.name for e in entries]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup:
        raise ConfigError(f"Entry name {dup!r} appears twice in {OWNER}.")
    by_name = {e.name: e for e in entries}
    fed: dict[str, str] = {}
    for e in entries:
        if e.kind != "merge":
            continue
        src = by_name.get(e.source)
        if src is None or src.kind != "release":
            raise ConfigError(f"The 'entries.{e.name}.from' parameter must name a release entry of the plan. "
                              f"Got {e.source!r} instead.")
        if src.config.get("task") != "count_sketch":
            raise ConfigError(f"The 'entries.{e.name}.from' entry {e.source!r} must be a count_sketch task "
                              "(only sketches add up).")
        if _RANK[src.schedule] >= _RANK[e.schedule]:
            raise ConfigError(f"The 'entries.{e.name}.schedule' must be longer than its source's "
                              f"({src.schedule!r}). Got {e.schedule!r} instead.")
        if e.source in fed:
            raise ConfigError(f"Entry {e.source!r} feeds two merges ({fed[e.source]!r}, {e.name!r}); "
                              "its hash seeds can follow only one merge period.")
        fed[e.source] = e.name
    # Entries on one dataset share one budget (same limit, renewal and period): one statement of its guarantee.
    budgets: dict[str, tuple[str, EntryBudget]] = {}
    for e in entries:
        if e.kind != "release":
            continue
        ds = e.config["dataset"]["id"]
        if ds in budgets and budgets[ds][1] != e.budget:
            raise ConfigError(f"Entries {budgets[ds][0]!r} and {e.name!r} release about dataset {ds!r} with "
                              "different budgets (epsilon, delta, renew, period); entries on one dataset share one "
                              "budget, state it identically.")
        budgets.setdefault(ds, (e.name, e.budget))
    return Plan(name, path, entries, ledger_uri, output_path)


def load_plan(path: str) -> Plan:
    """Reads and validates a plan file (job configs named in it are read relative to it)."""
    raw = _read_yaml(path, what="Plan")
    return plan_from_dict(raw, path=path, base_dir=os.path.dirname(os.path.abspath(path)))
