"""The one release pipeline: every family builds a :class:`ReleasePlan` and hands it to :func:`run_release`.

A plan is a frozen value: what is released (task, mechanism, the request and
its digest), what it costs (events, budget), what the manifest says about its
privacy, and two functions — ``compute()`` the exact summary (Spark work) and
``noise(exact, chokepoint)`` which turns it into a :class:`Noised` (payload
arrays *and* manifest additions, so no step writes into a dict it closed
over). :func:`run_release` is the only code that orders the steps:

private (``mode="private"``)
    release id seen before → the stored release (no new noise, no charge);
    dry-run the events against the budget (raises before any Spark work);
    ``compute()``; charge the ledger; ``noise(exact, chokepoint)`` draws only
    through the chokepoint, and every charged event must be used; write
    atomically; record the release as written.
not private (``mode="public_input"`` / ``"nonprivate"``)
    nothing is charged and the manifest says ``"private": false``.
    ``public_input`` is an algorithm run on public input (e.g. Alg. 1 on an
    explicit tensor). ``nonprivate`` releases exact results from the
    session's dataset (the explicit opt-in ``private=False``): its id starts
    with ``nonprivate-`` and it is written under ``<output>/nonprivate/``, so
    no reader can take it for a private release.

The session is the context (dataset id, ledger, sampler, budget limit,
output root); this module never imports :mod:`spark_dp.session`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from spark_dp._version import __version__
from spark_dp.errors import ReleaseConflictError
from spark_dp.privacy import Budget, Chokepoint
from spark_dp.privacy.events import Event, event_to_dict
from spark_dp.privacy.ledger import UnitDeclaration
from spark_dp.release import storage
from spark_dp.release.ids import canonical_sha256, check_release_id, new_release_id
from spark_dp.release.lineage import input_changed
from spark_dp.release.release import (
    MANIFEST_SCHEMA_VERSION,
    Release,
    load_release,
    release_exists,
    write_release,
)
from spark_dp.release.uncertainty import DEFAULT_CONFIDENCE, Uncertainty, check_level, manifest_block

if TYPE_CHECKING:
    from spark_dp.session import DPSession

log = logging.getLogger("spark_dp")

MODES = ("private", "public_input", "nonprivate")
NONPRIVATE_PREFIX = "nonprivate-"
NONPRIVATE_DIR = "nonprivate"
# Manifest fields the pipeline owns: a plan may not set them.
_OWNED = frozenset({"schema_version", "release_id", "dataset_id", "task", "mechanism", "privacy",
                    "request_sha256", "config_sha256", "created_at", "library_version", "uncertainty", "input"})


@dataclass(frozen=True)
class Noised:
    """What a plan's ``noise`` step returns: the payload arrays, manifest additions and uncertainties.

    ``manifest``: e.g. the solver's info. ``uncertainty``: per array that has
    one (keys: array names), post-processing of the released values and
    public parameters at the plan's ``confidence``
    (:mod:`spark_dp.release.uncertainty`).
    """

    arrays: Mapping[str, np.ndarray]
    manifest: Mapping[str, Any] = field(default_factory=dict)
    uncertainty: Mapping[str, Uncertainty] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, u in self.uncertainty.items():
            if name not in self.arrays:
                raise RuntimeError(f"bug: uncertainty for {name!r}, which is not a payload array")
            if u.shape != np.shape(self.arrays[name]):
                raise RuntimeError(f"bug: uncertainty of {name!r} has shape {u.shape}, "
                                   f"the array {np.shape(self.arrays[name])}")


@dataclass(frozen=True)
class ReleasePlan:
    """One release, fully planned before any data is read.

    Attributes:
        task, mechanism: names recorded in the manifest.
        request: everything that defines the release; hashed into
            ``request_sha256`` (a re-run under the same release id must hash
            the same).
        events: the privacy events of the whole release, all charged at once
            (empty unless ``mode="private"``).
        budget: the (ε, δ) the release claims (None unless private).
        privacy: manifest ``privacy`` fields (neighbours, unit, sensitivity,
            noise scale…); the pipeline adds sampler, events, ledger entry.
        manifest: further manifest fields (``params``, ``columns``, ``policies``…).
        compute: computes the exact summary (the Spark work happens here).
        noise: ``noise(exact, chokepoint) -> Noised``; the chokepoint is None
            for a plan that is not private.
        release_id: idempotency key (None: a new one).
        config_sha256: digest of the job config, if run from one.
        mode: ``private``, ``public_input`` or ``nonprivate`` (module doc).
        lineage: ``lineage(key) -> dict``, what the release is computed from
            (:mod:`spark_dp.release.lineage`); called once per release with
            the ledger's lineage key (file digests are keyed with it), before
            any Spark job, into the manifest's ``input`` and the ledger charge.
            Never part of the request digest (a re-run over changed input
            finds its stored release). None: recorded as unknown.

    The level of the release's intervals (manifest ``uncertainty.level``) is
    the request's ``confidence`` (:func:`confidence_request`: present only
    when it is not the default 0.95, so old release ids still match).
    """

    task: str
    mechanism: str
    request: Mapping[str, Any]
    events: tuple[Event, ...]
    budget: Budget | None
    privacy: Mapping[str, Any]
    manifest: Mapping[str, Any]
    compute: Callable[[], Any]
    noise: Callable[[Any, Chokepoint | None], Noised]
    release_id: str | None = None
    config_sha256: str | None = None
    mode: str = "private"
    lineage: Callable[[bytes], Mapping[str, Any]] | None = None
    request_sha256: str = field(init=False)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise RuntimeError(f"bug: release plan mode {self.mode!r} is not one of {MODES}")
        private = self.mode == "private"
        if private and (not self.events or self.budget is None):
            raise RuntimeError("bug: a private release plan needs its events and budget")
        if not private and (self.events or self.budget is not None):
            raise RuntimeError("bug: a release plan that is not private must not carry privacy events")
        if private and "neighbors" not in self.privacy:
            raise RuntimeError("bug: a release's privacy fields must state its neighbour relation")
        if private and not {"noise_family", "noise_scale"} <= set(self.privacy):
            raise RuntimeError("bug: a release's privacy fields must state noise_family and noise_scale "
                               "(manifest schema 2)")
        check_level(self.confidence)
        if _OWNED & set(self.manifest):
            raise RuntimeError(f"bug: manifest fields {sorted(_OWNED & set(self.manifest))} belong to the pipeline")
        object.__setattr__(self, "events", tuple(self.events))
        for name in ("request", "privacy", "manifest"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))
        object.__setattr__(self, "request_sha256", canonical_sha256(dict(self.request)))

    @property
    def confidence(self) -> float:
        """The level of the release's intervals: the request's ``confidence`` (default 0.95)."""
        return confidence_of(self.request)


def confidence_request(confidence: float) -> dict[str, float]:
    """The request field for ``confidence``: empty for the default (old request digests stay the same)."""
    return {} if confidence == DEFAULT_CONFIDENCE else {"confidence": float(confidence)}


def confidence_of(request: Mapping[str, Any]) -> float:
    """The confidence level a request asks for (default 0.95)."""
    return float(request.get("confidence", DEFAULT_CONFIDENCE))


def unit_of(privacy: Mapping[str, Any]) -> UnitDeclaration:
    """The privacy unit a release protects, from its manifest ``privacy`` fields.

    Every family records ``neighbors``, the per-unit bound
    (``max_rows_per_unit`` or the sketches' ``max_items_per_unit``) and, for
    rows, ``privacy_unit_column``: the unit column's name, or None when each
    row is a unit. ``privacy_unit`` (the column's name, or ``row``) is for
    people only: a column may be named ``row``. Explicit tensors record
    neither (``tensor_entry`` neighbours: each entry is a unit).
    """
    if "neighbors" not in privacy:
        raise RuntimeError("bug: a release's privacy fields must state its neighbour relation")
    if "privacy_unit" in privacy and "privacy_unit_column" not in privacy:
        raise RuntimeError("bug: a release with a privacy_unit must record privacy_unit_column (None: row level)")
    neighbors = str(privacy["neighbors"])
    column = privacy.get("privacy_unit_column")
    m = privacy.get("max_rows_per_unit", privacy.get("max_items_per_unit")) or 1
    return UnitDeclaration(None if column is None else str(column), int(m), neighbors)


def run_release(session: DPSession, plan: ReleasePlan) -> Release:
    """Runs ``plan`` in ``session`` (dataset, ledger, sampler, output): the one release path (module doc).

    Under a dry run (:func:`spark_dp.release.preview.dry_run`, e.g.
    ``DPSession.preview``) it stops here and returns a
    :class:`~spark_dp.release.preview.Preview` of the plan: nothing computed,
    charged or written.
    """
    from spark_dp.release.preview import active_dry_run, preview_release

    if (dry := active_dry_run()) is not None:
        return preview_release(session, plan, dry)  # type: ignore[return-value]
    if plan.mode != "private":
        return _run_not_private(session, plan)
    rid = new_release_id(plan.task) if plan.release_id is None else check_release_id(plan.release_id, owner=plan.task)
    lineage = _lineage(session, plan)  # once per release, before any Spark job (metadata only)
    existing = session.ledger.lookup(rid)
    if existing is not None:
        return note_input_change(stored_release(session, existing, request_sha256=plan.request_sha256), lineage,
                                 existing.lineage)

    storage.check_root(session.output)  # an output that cannot be written fails before the charge
    cp = Chokepoint(
        session.ledger, dataset_id=session.dataset_id, release_id=rid, request_sha256=plan.request_sha256,
        sampler=session.sampler, limit=session.limit, unit=unit_of(plan.privacy),
    )
    cp.check(list(plan.events))  # over budget → raises here, before any Spark work
    exact = plan.compute()
    budget = plan.budget
    assert budget is not None  # __post_init__
    charge = cp.charge(list(plan.events), budget, lineage=lineage)
    log.info("release %s: charged epsilon=%g delta=%g to dataset %s (ledger entry %d)",
             rid, budget.epsilon, budget.delta, session.dataset_id, charge.seq)
    try:
        noised = plan.noise(exact, cp)
        del exact
        if cp.unused_events:
            raise RuntimeError(f"bug: charged events were not used: {cp.unused_events}")
        manifest = _manifest(session, plan, rid, noised, privacy={
            **plan.privacy,
            "sampler": session.sampler.name,
            "private": session.sampler.private,
            "events": [event_to_dict(e) for e in plan.events],
            "ledger_entry": charge.seq,
            "dataset_limit": (session.limit or session.ledger.ensure_dataset(session.dataset_id, None)).to_dict(),
        }, lineage=lineage)
        release = Release(release_id=rid, arrays=dict(noised.arrays), manifest=manifest,
                          uncertainty=dict(noised.uncertainty))
        path = write_release(release, session.output)
    except Exception as exc:
        # The charge stands and nothing was written: say so in the ledger, so `spark-dp audit` can tell a
        # crashed release from a lost one. Only the exception's type: its text may quote data.
        _record_crash(session, rid, f"{type(exc).__name__} after the charge, before the release was written")
        raise
    session.ledger.mark_written(rid, path)
    log.info("release %s written to %s", rid, path)
    return release


def _record_crash(session: DPSession, rid: str, reason: str) -> None:
    try:
        session.ledger.record_crash(rid, reason)
    except Exception:  # noqa: BLE001 - never mask the release's own error
        log.exception("release %s: could not record its crash in the ledger", rid)


def _run_not_private(session: DPSession, plan: ReleasePlan) -> Release:
    """A release that charges nothing (public input, or exact results with the explicit opt-in)."""
    rid = new_release_id(plan.task) if plan.release_id is None else check_release_id(plan.release_id, owner=plan.task)
    root = session.output
    if plan.mode == "nonprivate":
        rid = rid if rid.startswith(NONPRIVATE_PREFIX) else NONPRIVATE_PREFIX + rid
        root = storage.join(session.output, NONPRIVATE_DIR)
    existing = storage.join(root, rid)
    lineage = _lineage(session, plan)
    if release_exists(existing):
        rel = load_release(existing)
        if rel.manifest.get("request_sha256") != plan.request_sha256:
            raise ReleaseConflictError(f"Release id {rid!r} was used for a different request; choose a new release id.")
        rel.reused = True
        return note_input_change(rel, lineage)
    storage.check_root(root)
    log.warning("%s: mechanism %r is NOT differentially private; use it on public data only", plan.task, plan.mechanism)
    noised = plan.noise(plan.compute(), None)
    manifest = _manifest(session, plan, rid, noised, privacy={
        "private": False, "epsilon": None, "delta": None,
        "note": ("NOT DIFFERENTIALLY PRIVATE: exact results computed from the rows of the dataset "
                 "(explicit opt-in private=False); nothing charged" if plan.mode == "nonprivate" else
                 f"not differentially private ({plan.privacy.get('note', 'public input')}); nothing charged"),
    }, lineage=lineage)
    release = Release(release_id=rid, arrays=dict(noised.arrays), manifest=manifest,
                      uncertainty=dict(noised.uncertainty))
    write_release(release, root)
    return release


def _lineage(session: DPSession, plan: ReleasePlan) -> dict[str, Any] | None:
    """The plan's input lineage, keyed by the session's ledger (None: the plan gives none); never fatal."""
    if plan.lineage is None:
        return None
    try:
        return dict(plan.lineage(session.ledger.lineage_key))
    except Exception as exc:  # noqa: BLE001 - lineage is metadata: it must not stop a release
        log.warning("%s: could not compute the input lineage (%s); recorded as unknown", plan.task, type(exc).__name__)
        return {"kind": "unknown"}


def note_input_change(release: Release, lineage: dict[str, Any] | None,
                      charged: dict[str, Any] | None = None) -> Release:
    """Sets ``release.input_changed`` from its stored lineage (manifest, else the charge) and today's; warns if True."""
    stored = release.manifest.get("input") or charged
    release.input_changed = input_changed(stored, lineage)
    if release.input_changed:
        log.warning("release %s: the input changed since it was released (lineage %s, now %s); returning the stored "
                    "release (no new noise, no new charge). Use a new release id for the new input.",
                    release.release_id, stored, lineage)
    return release


def _manifest(session: DPSession, plan: ReleasePlan, rid: str, noised: Noised, *, privacy: dict,
              lineage: dict[str, Any] | None = None) -> dict[str, Any]:
    clash = _OWNED & set(noised.manifest)
    if clash:
        raise RuntimeError(f"bug: manifest fields {sorted(clash)} belong to the pipeline")
    block = manifest_block(noised.uncertainty, plan.confidence)
    return {
        **({"uncertainty": block} if block else {}),
        "schema_version": MANIFEST_SCHEMA_VERSION,
        "release_id": rid,
        "dataset_id": session.dataset_id,
        "task": plan.task,
        "mechanism": plan.mechanism,
        **plan.manifest,
        **noised.manifest,
        "privacy": privacy,
        "request_sha256": plan.request_sha256,
        "config_sha256": plan.config_sha256,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "library_version": __version__,
        **({} if lineage is None else {"input": lineage}),
    }


def stored_release(session: DPSession, charge, *, request_sha256: str | None = None,
                   config_sha256: str | None = None) -> Release:
    """The stored release of ledger ``charge`` (``reused`` set); ReleaseConflictError if it cannot be returned.

    Refuses a charge of another dataset, another request digest or another
    config digest, and a charge whose release was never written. A crash
    between the atomic rename and the ledger's 'written' row left a complete
    release with the same request digest: it is recorded now and returned.
    """
    def conflict() -> ReleaseConflictError:
        return ReleaseConflictError(
            f"Release id {charge.release_id!r} was used for a different request "
            f"(dataset {charge.dataset_id!r}); choose a new release id."
        )

    if charge.dataset_id != session.dataset_id or (
            request_sha256 is not None and charge.request_sha256 != request_sha256):
        raise conflict()
    location = charge.location
    if location is None:
        candidate = storage.join(session.output, charge.release_id)
        if release_exists(candidate) and (
            load_release(candidate).manifest.get("request_sha256") == charge.request_sha256
        ):
            session.ledger.mark_written(charge.release_id, candidate)
            location = candidate
    if location is None or not release_exists(location):
        raise ReleaseConflictError(
            f"Release id {charge.release_id!r} was charged (epsilon={charge.budget.epsilon:g}, "
            f"delta={charge.budget.delta:g}) but its release was never written; the charge stands. "
            "Use a new release id."
        )
    release = load_release(location)
    if config_sha256 is not None and release.manifest.get("config_sha256") != config_sha256:
        raise conflict()
    release.reused = True
    log.info("release %s exists at %s: returning it (no new noise, no new charge)", charge.release_id, location)
    return release
