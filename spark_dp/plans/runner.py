"""Running a plan for one date, merging sketches, and reporting per-period budgets.

Every release entry goes through the job path (:func:`spark_dp.cli.job.run_job`:
stored release for a known id, budget dry run before Spark, charge, noise,
atomic write), so the ledger's guarantees and idempotence hold per entry.
Merge entries are post-processing of stored releases and charge nothing.
"""

from __future__ import annotations

import logging
from contextlib import nullcontext
from dataclasses import asdict, dataclass, replace
from datetime import date, timedelta

from spark_dp.errors import BudgetExceededError, ConfigError, ReleaseConflictError, SparkDPError
from spark_dp.plans.plan import Plan, PlanEntry, ledger_dataset_id, period_bounds, period_key, period_start
from spark_dp.privacy.accountant import Budget
from spark_dp.release import Release, load_release, release_exists, storage, write_release

log = logging.getLogger("spark_dp")


@dataclass(frozen=True)
class EntryResult:
    """What ``plan run`` did with one entry.

    ``status``: ``released`` (new release), ``stored`` (the release existed:
    returned, nothing charged), ``not_due``, ``refused`` (the period's budget
    is exhausted; nothing charged or written) or ``failed`` (another error;
    ``message`` says which). A dry run (``run_plan(..., dry_run=True)``) says
    ``would_release``, ``stored``, ``would_refuse`` or ``would_merge`` instead,
    with the entry's :class:`~spark_dp.release.preview.Preview` as a dict in
    ``preview``.
    """

    entry: str
    status: str
    release_id: str | None = None
    path: str | None = None
    ledger_dataset: str | None = None
    epsilon: float | None = None
    delta: float | None = None
    message: str | None = None
    preview: dict | None = None


def run_config(config, *, spark=None, seeds: Release | None = None) -> Release:
    """Runs one job config through the job path (:func:`spark_dp.cli.job.run_job`).

    Args:
        config: a validated :class:`~spark_dp.cli.config.JobConfig`.
        spark: the session (default: :func:`spark_dp.runtime.get_spark` when needed).
        seeds: count_sketch only: reuse this release's hash seeds (so the
            sketches can be merged).
    """
    from spark_dp.cli.job import run_job

    return run_job(config, spark=spark, **({"seeds": seeds} if seeds is not None else {}))


def _days(start: date, end: date) -> list[date]:
    return [start + timedelta(days=i) for i in range((end - start).days + 1)]


def _stored(plan: Plan, entry: PlanEntry, d: date) -> Release | None:
    """The stored release of ``entry`` for ``d``, or None (never charged or never written)."""
    from spark_dp.cli.job import session_for

    config = plan.job_config(entry, d, check_paths=False)
    session = session_for(config)  # held: under a dry run its scratch ledger directory lives as long as it does
    charge = session.ledger.lookup(config.release_id)
    if charge is None or charge.location is None or not release_exists(charge.location):
        return None
    return load_release(charge.location)


def _merge_for(plan: Plan, entry: PlanEntry) -> PlanEntry | None:
    return next((e for e in plan.entries if e.kind == "merge" and e.source == entry.name), None)


def _seed_anchor(plan: Plan, entry: PlanEntry, d: date) -> Release | None:
    """For a merge's source: a stored release of another day of the same merge period (None: fresh seeds).

    Days of a merge period must share hash seeds for their sketches to add
    up. The first day of the period to be released draws fresh seeds; every
    other day reuses them, in whatever order days run (backfills included).
    The anchor matters only for a new release: a re-run returns the stored
    release before any seeds are used. Two days of one period released
    concurrently, before either is stored, would both draw fresh seeds (the
    merge then refuses); run a period's days one after another.
    """
    merge = _merge_for(plan, entry)
    if merge is None or entry.config.get("mechanism") == "histogram":
        return None
    start, end = period_bounds(merge.schedule, d)
    for day in _days(start, end):
        if day == d:
            continue
        rel = _stored(plan, entry, day)
        if rel is not None:
            return rel
    return None


def _result(entry: PlanEntry, release: Release, ledger_ds: str | None) -> EntryResult:
    return EntryResult(entry.name, "stored" if release.reused else "released", release.release_id, release.path,
                       ledger_ds, release.privacy.get("epsilon"), release.privacy.get("delta"))


def run_merge(plan: Plan, entry: PlanEntry, d: date) -> Release:
    """Sums the source entry's sketches over ``entry``'s period containing ``d`` (no charge).

    Raises:
        ConfigError: a day of the period has no stored release, or the parts do not match.
    """
    from spark_dp.sketch.merge import merge_sketches

    source = plan.entry(entry.source)
    start, end = period_bounds(entry.schedule, d)
    rid = entry.release_id(plan.name, d)
    probe = plan.job_config(source, start, check_paths=False)
    root = probe.output.path
    final = storage.join(root, rid)
    if release_exists(final):
        rel = load_release(final)
        rel.reused = True
        return rel
    parts, missing = [], []
    for day in _days(start, end):
        rel = _stored(plan, source, day)
        (parts.append(rel) if rel is not None else missing.append(day.isoformat()))
    if missing:
        raise ConfigError(f"Merge {entry.name!r} for {period_key(entry.schedule, d)} needs a release of "
                          f"{source.name!r} for every day; missing: {', '.join(missing)}.")
    base_id = source.config["dataset"]["id"]
    ledger_ids = [p.manifest["dataset_id"] for p in parts]
    # Per-period budgets give each day its own ledger dataset id; the parts are about one dataset.
    same = [replace(p, manifest={**p.manifest, "dataset_id": base_id}) for p in parts]
    merged = merge_sketches(same, release_id=rid)
    merged.manifest["plan"] = {"plan": plan.name, "entry": entry.name, "period": period_key(entry.schedule, d),
                               "from": source.name, "parts_ledger_datasets": ledger_ids,
                               "charged": "nothing (post-processing of the parts)"}
    write_release(merged, root)
    log.info("merge %s: %d releases of %s summed into %s (no charge)", entry.name, len(parts), source.name, final)
    return merged


def _preview_result(entry: PlanEntry, config, *, spark, seeds: Release | None) -> EntryResult:
    """A dry run of one release entry (:func:`spark_dp.cli.job.preview_job`, joining the plan's dry run)."""
    from spark_dp.cli.job import preview_job

    p = preview_job(config, spark=spark, **({"seeds": seeds} if seeds is not None else {}))
    status = "would_refuse" if p.would_refuse else ("stored" if p.stored else "would_release")
    return EntryResult(entry.name, status, p.release_id, None, config.dataset.id, p.cost["epsilon"],
                       p.cost["delta"], p.reason, preview=p.to_dict())


def run_plan(plan: Plan, d: date, *, spark=None, entries: list[str] | None = None,
             dry_run: bool = False) -> list[EntryResult]:
    """Runs the entries of ``plan`` due on data date ``d`` (release entries first, then merges).

    Every due entry's config is built and validated before anything runs,
    so a bad plan fails before Spark starts and before any charge. A budget
    refusal of one entry does not stop the others.

    Args:
        plan: a loaded plan.
        d: the data date.
        spark: the session (default: obtained when a release needs it).
        entries: only these entries (default: all).
        dry_run: preview every due entry instead (:mod:`spark_dp.release.preview`):
            what it would cost — each entry checked after the earlier ones'
            charges — and how accurate it would be; nothing is read but the
            inputs' schemas, nothing is charged or written (merges included).
    """
    from spark_dp.release.preview import dry_run as dry_run_context

    chosen = [plan.entry(n) for n in entries] if entries else list(plan.entries)
    due = [e for e in chosen if e.is_due(d)]
    configs = {e.name: plan.job_config(e, d) for e in due if e.kind == "release"}
    results = [EntryResult(e.name, "not_due") for e in chosen if not e.is_due(d)]
    ordered = [e for e in due if e.kind == "release"] + [e for e in due if e.kind == "merge"]
    from spark_dp.runtime import formats_needed

    formats = {f for c in configs.values() for f in c.table_formats}  # one session serves every entry
    with dry_run_context() if dry_run else nullcontext(), formats_needed(formats):
        results += _run_entries(plan, d, ordered, configs, spark=spark, dry=dry_run)
    order = {e.name: i for i, e in enumerate(chosen)}
    return sorted(results, key=lambda r: order[r.entry])


def _run_entries(plan: Plan, d: date, ordered: list[PlanEntry], configs: dict, *, spark, dry: bool) -> list[EntryResult]:
    results: list[EntryResult] = []
    for i, e in enumerate(ordered, 1):
        log.info("plan %s, %s: entry %d/%d %r (%s)", plan.name, d.isoformat(), i, len(ordered), e.name, e.kind)
        try:
            if e.kind == "merge":
                if dry:  # post-processing of the period's stored sketches: charges nothing
                    results.append(EntryResult(e.name, "would_merge", e.release_id(plan.name, d), epsilon=0.0,
                                               delta=0.0, message="sums stored releases: nothing charged"))
                    continue
                rel = run_merge(plan, e, d)
                results.append(_result(e, rel, None))
                continue
            config = configs[e.name]
            anchor = _seed_anchor(plan, e, d)
            if dry:
                results.append(_preview_result(e, config, spark=spark, seeds=anchor))
                continue
            rel = run_config(config, spark=spark, seeds=anchor)
            results.append(_result(e, rel, config.dataset.id))
        except BudgetExceededError as exc:
            results.append(EntryResult(e.name, "refused", e.release_id(plan.name, d),
                                       ledger_dataset=configs[e.name].dataset.id, message=str(exc)))
        except (ConfigError, ReleaseConflictError, SparkDPError) as exc:
            results.append(EntryResult(e.name, "failed", e.release_id(plan.name, d), message=str(exc)))
        log.info("plan %s, %s: entry %r %s", plan.name, d.isoformat(), e.name, results[-1].status)
    return results


@dataclass(frozen=True)
class PeriodStatus:
    """Spent and left of one ledger dataset (a period's budget, or a lifetime one)."""

    dataset: str
    ledger_dataset: str
    period: str | None
    renew: str
    entries: tuple[str, ...]
    releases: int
    epsilon_spent: float
    epsilon_limit: float
    epsilon_left: float
    delta_limit: float

    def to_dict(self) -> dict:
        return asdict(self)


def plan_status(plan: Plan, *, on: date | None = None) -> list[PeriodStatus]:
    """Spent/left per period for every dataset of the plan (from the ledger).

    Lists every period the ledger has for each dataset, plus the period
    containing ``on`` (also when nothing was spent in it yet).
    """
    import re

    from spark_dp.privacy import open_ledger

    ref = on or date.today()
    groups: dict[tuple[str, str], list[PlanEntry]] = {}
    uris: dict[tuple[str, str], str] = {}
    for e in plan.entries:
        if e.kind != "release":
            continue
        cfg = plan.job_dict(e, ref)
        base = e.config["dataset"]["id"]
        key = (cfg["ledger"]["uri"], base)
        groups.setdefault(key, []).append(e)
        uris[key] = cfg["ledger"]["uri"]
    out: list[PeriodStatus] = []
    for (uri, base), ents in groups.items():
        b = ents[0].budget
        ledger = open_ledger(uri)
        if b.renew == "never":
            wanted = {base: None}
        else:
            pat = re.compile(re.escape(base) + r"@(\d{4}-(?:W\d{2}|\d{2}(?:-\d{2})?))$")
            wanted = {s.dataset_id: m.group(1) for s in ledger.status() if (m := pat.match(s.dataset_id))}
            if on is not None:
                wanted.setdefault(ledger_dataset_id(ents[0], base, on), period_key(b.period, on))
        for ds_id in sorted(wanted):
            rows = ledger.status(ds_id)
            if rows:
                s = rows[0]
                spent, limit, n = s.spent_epsilon, s.limit, s.releases
                left, eps_lim, d_lim = s.remaining_epsilon, limit.epsilon, limit.delta
            else:
                spent, n, left, eps_lim, d_lim = 0.0, 0, b.epsilon, b.epsilon, b.delta
            out.append(PeriodStatus(base, ds_id, wanted[ds_id], b.renew, tuple(e.name for e in ents), n,
                                    spent, eps_lim, left, d_lim))
    return out


@dataclass(frozen=True)
class LifetimeForecast:
    """A dataset's lifetime cap over its renewing periods: spent, and how many more periods fit.

    ``periods_left`` is computed by the accountant, not estimated: the
    largest k such that the exact composition of every event charged so far
    plus k more periods each spending exactly what ``template_period`` spent
    stays within the cap (:func:`~spark_dp.privacy.accountant.periods_within`,
    the ledger's own check). Run one period after another at that spend and
    the ledger refuses exactly ``first_refused_period``. ``periods_left_at_least``
    says the search stopped at its bound (``MAX_PERIODS``). If the template
    period is still in progress, later releases in it lower the count.
    """

    dataset: str
    entries: tuple[str, ...]
    epsilon_limit: float
    delta_limit: float
    epsilon_spent: float
    epsilon_left: float
    periods_charged: int
    releases: int
    template_period: str | None  # the period with the latest charge (None: nothing charged yet)
    per_period_epsilon: float | None  # its events composed alone, at the lifetime delta
    periods_left: int | None  # None: nothing charged yet, so no per-period spend to extrapolate
    periods_left_at_least: bool
    first_refused_period: str | None

    def to_dict(self) -> dict:
        return asdict(self)


def _next_period(period: str, key: str, n: int) -> str:
    """The period key ``n`` periods after ``key``."""
    start = period_start(period, key)
    if period == "daily":
        return period_key(period, start + timedelta(days=n))
    if period == "weekly":
        return period_key(period, start + timedelta(weeks=n))
    months = start.year * 12 + start.month - 1 + n
    return period_key(period, date(months // 12, months % 12 + 1, 1))


def plan_lifetimes(plan: Plan) -> list[LifetimeForecast]:
    """Lifetime spent and periods left for every dataset of the plan with a lifetime cap."""
    from spark_dp.privacy import open_ledger
    from spark_dp.privacy.accountant import MAX_PERIODS, compose_epsilon, periods_within
    from spark_dp.privacy.ledger import lifetime_dataset

    groups: dict[tuple[str, str], list[PlanEntry]] = {}
    for e in plan.entries:
        if e.kind != "release" or e.budget.lifetime is None:
            continue
        uri = plan.job_dict(e, date.today())["ledger"]["uri"]
        groups.setdefault((uri, e.config["dataset"]["id"]), []).append(e)
    out: list[LifetimeForecast] = []
    for (uri, base), ents in groups.items():
        b = ents[0].budget
        ledger = open_ledger(uri)
        registered = ledger.lifetime_limit(base)
        cap = registered or Budget(*b.lifetime)  # before the first run: the plan's cap, not yet registered
        charges = [c for c in ledger.all_charges() if lifetime_dataset(c.dataset_id) == base]
        past = [ev for c in charges for ev in c.events]
        spent = compose_epsilon(past, cap.delta)
        template = per_eps = left = refused = None
        at_least = False
        periodic = [c for c in charges if c.dataset_id != base]
        if periodic:
            template_ds = periodic[-1].dataset_id
            template = template_ds.split("@", 1)[1]
            per_period = [ev for c in charges if c.dataset_id == template_ds for ev in c.events]
            per_eps = compose_epsilon(per_period, cap.delta)
            left = periods_within(past, per_period, cap)
            at_least = left >= MAX_PERIODS
            refused = None if at_least else _next_period(b.period, template, left + 1)
        out.append(LifetimeForecast(
            base, tuple(e.name for e in ents), cap.epsilon, cap.delta, spent, max(0.0, cap.epsilon - spent),
            len({c.dataset_id for c in charges}), len(charges), template, per_eps, left, at_least, refused))
    return out
