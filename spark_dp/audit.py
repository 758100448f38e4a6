"""The ledger audits the releases: ``spark-dp audit --ledger URI OUTPUT_ROOT`` (issue #16, item 2).

A privacy reviewer signs off the ledger's arithmetic; this checks that what
is on disk is what the ledger charged. For every release directory
``<root>/<release_id>/manifest.json``:

* its release id, dataset, events (hence σ/Δ: every Gaussian or Laplace
  event *is* its noise multiplier), (ε, δ), ledger entry and request digest
  match the ledger's charge of that id, and the σ and sensitivity it states
  (``noise_scale`` with ``noise_family``, the deprecated ``noise_sigma``, and ``sensitivity``) are those of a charged
  event (σ/Δ equal to a charged noise multiplier);
* a tensor power method release (``private_power_method``,
  ``input_perturbation``), whose σ is data-dependent (Alg. 3: σ = ν·c·‖u‖∞^p)
  or whose sensitivity the manifest states partly in words, has its noise
  plan recomputed from the manifest's declared parameters (ε, δ, k, L, R,
  calibration, mode, neighbours, B, m): the recomputed ν / σ / Δ / noise
  multiplier must equal the manifest's, and the recomputed events the
  ledger's charge;
* its directory name is its release id and its payload files exist;
* a release with no charge is an **orphan**, unless it is a merge of charged
  releases (``merged_from``: post-processing, charged nothing) whose parts
  are all charged and whose events are exactly theirs.

Releases under ``<root>/nonprivate/`` (explicitly non-private mechanisms)
are not charged by design: they are reported as non-private, not as
orphans, and are an error only if the ledger has a charge for their id or
their manifest claims any privacy. A release directly under the root that
declares itself non-private (``private: false``, no ε, δ or events: Alg. 1
on an explicit, public tensor) is reported the same way; one that claims
any privacy without a charge is an orphan.

For every charge of the ledger: its release was written (a directory in
this root, or recorded as written at a location outside it: another output
root sharing the ledger), or its crash was recorded
(:meth:`~spark_dp.privacy.ledger.Ledger.record_crash`). A charge recorded
as written inside this root whose directory is gone is **missing**; a
charge never written and with no recorded crash is **unwritten**.

For every lifetime group of the ledger whose periods declared different
privacy units or neighbour relations (possible in ledgers written before the
group's declaration was checked): **mixed_units** while no unit has been
chosen for the group (the ledger then refuses to open for releases), a
``units_kept`` note once an administrator chose one
(``spark-dp ledger --keep-unit-of PERIOD``): the mixed releases stay in the
history, the group's later charges are of the chosen unit.

Reads manifests as JSON (no payload is loaded) and the ledger read-only
(open it with ``open_ledger(uri, strict=False)`` to audit a ledger that mixes
units); needs no Spark.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

from spark_dp.errors import ConfigError
from spark_dp.privacy.events import GaussianEvent, LaplaceEvent, event_from_dict, event_to_dict
from spark_dp.privacy.ledger import Charge, Ledger
from spark_dp.release import release_exists, storage
from spark_dp.release.release import noise_of

MANIFEST = "manifest.json"
NONPRIVATE_DIR = "nonprivate"
_REL_TOL = 1e-9

# Problems make the audit fail; notes do not.
PROBLEMS = ("orphan", "mismatch", "missing", "unwritten", "unreadable", "mixed_units")
NOTES = ("nonprivate", "derived", "crashed", "elsewhere", "skipped", "units_kept")


@dataclass(frozen=True)
class Finding:
    """One finding: ``kind`` (a problem or a note), the release id, where, and what."""

    kind: str
    release_id: str | None
    path: str | None
    message: str

    @property
    def problem(self) -> bool:
        return self.kind in PROBLEMS


@dataclass
class AuditReport:
    """What ``spark-dp audit`` found under one output root against one ledger (``problems``: what fails it)."""

    root: str
    ledger: str
    releases: int = 0  # charged releases found and matching
    charges: int = 0
    findings: list[Finding] = field(default_factory=list)

    @property
    def problems(self) -> list[Finding]:
        return [f for f in self.findings if f.problem]

    @property
    def ok(self) -> bool:
        return not self.problems

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for f in self.findings:
            out[f.kind] = out.get(f.kind, 0) + 1
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"root": self.root, "ledger": self.ledger, "ok": self.ok, "releases_matched": self.releases,
                "charges": self.charges, "counts": self.counts(), "findings": [asdict(f) for f in self.findings]}


def _read_manifest(path: str) -> dict[str, Any]:
    manifest = json.loads(storage.read_bytes(storage.join(path, MANIFEST)))
    if not isinstance(manifest, dict):
        raise ValueError("the manifest is not a JSON object")
    return manifest


def _release_dirs(root: str) -> tuple[list[str], list[str]]:
    """Release directories directly under ``root`` (hidden temporaries skipped) and other directories.

    A directory without a manifest is not a release (on an object store: payload of a write that
    crashed before its commit marker, or anything else).
    """
    releases, others = [], []
    for name in storage.list_dirs(root):
        path = storage.join(root, name)
        if name.startswith("."):
            continue
        (releases if release_exists(path) else others).append(path)
    return releases, others


def _close(a: float, b: float) -> bool:
    return math.isclose(float(a), float(b), rel_tol=_REL_TOL, abs_tol=0.0)


def _numbers(value: Any) -> list[float] | None:
    """A number or a list of numbers as a list; None for anything else (descriptions, dicts)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return [float(value)]
    if isinstance(value, list) and value and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                 for v in value):
        return [float(v) for v in value]
    return None


def _noise_mismatches(privacy: dict[str, Any], events: list) -> list[str]:
    """σ (or the Laplace scale) and the sensitivity stated in the manifest must be a charged event's σ/Δ."""
    out = []
    sens = _numbers(privacy.get("sensitivity"))
    family = noise_of(privacy)[0]  # manifest schema 2 states it; schema 1's noise_scale was Laplace's
    checks = [("noise_sigma", GaussianEvent)] if "noise_sigma" in privacy else []
    if family in ("gaussian", "laplace") and "noise_scale" in privacy:
        checks.append(("noise_scale", GaussianEvent if family == "gaussian" else LaplaceEvent))
    for key, kind in checks:
        scales = _numbers(privacy.get(key))
        if scales is None:
            continue
        charged = [e.noise_multiplier for e in events if isinstance(e, kind)]
        if not charged:
            out.append(f"{key}={privacy[key]!r} but no {kind.__name__} was charged")
            continue
        if sens is None:
            continue  # the sensitivity is a description (per-step tensor noise): σ/Δ not checkable here
        if len(sens) == 1:
            sens = sens * len(scales)
        if len(sens) != len(scales):
            out.append(f"{key} has {len(scales)} values but sensitivity {len(sens)}")
            continue
        for s, d in zip(scales, sens, strict=True):
            if d <= 0 or not any(_close(s / d, z) for z in charged):
                out.append(f"{key}={s!r} with sensitivity={d!r} is sigma/Delta={s / d if d > 0 else float('nan'):.10g},"
                           f" not a charged noise multiplier ({', '.join(f'{z:.10g}' for z in charged)})")
    if "noise_multiplier" in privacy and _numbers(privacy["noise_multiplier"]) is not None and \
            len(_numbers(privacy["noise_multiplier"])) == 1:
        z = _numbers(privacy["noise_multiplier"])[0]
        if not any(_close(z, e.noise_multiplier) for e in events if isinstance(e, GaussianEvent)):
            out.append(f"noise_multiplier={z!r} is not a charged Gaussian noise multiplier")
    return out


def _compare(manifest: dict[str, Any], path: str, charge: Charge) -> list[str]:
    """What in the manifest differs from its ledger charge (empty: it matches)."""
    out = []
    privacy = manifest.get("privacy") or {}
    if manifest.get("dataset_id") != charge.dataset_id:
        out.append(f"dataset_id={manifest.get('dataset_id')!r}, ledger {charge.dataset_id!r}")
    try:
        events = [event_from_dict(e) for e in privacy.get("events") or []]
    except (TypeError, ValueError, KeyError) as exc:
        events = None
        out.append(f"events unreadable ({exc})")
    if events is not None and events != list(charge.events):
        out.append(f"events={privacy.get('events')!r}, ledger {[event_to_dict(e) for e in charge.events]!r}")
    for key, value in (("epsilon", charge.budget.epsilon), ("delta", charge.budget.delta)):
        got = privacy.get(key)
        if not isinstance(got, (int, float)) or isinstance(got, bool) or not _close(got, value):
            out.append(f"{key}={got!r}, ledger {value!r}")
    if privacy.get("ledger_entry") is not None and privacy.get("ledger_entry") != charge.seq:
        out.append(f"ledger_entry={privacy.get('ledger_entry')!r}, ledger {charge.seq!r}")
    if manifest.get("request_sha256") != charge.request_sha256:
        out.append(f"request_sha256={manifest.get('request_sha256')!r}, ledger {charge.request_sha256!r}")
    out += _noise_mismatches(privacy, list(charge.events) if events is None else events)
    out += _tensor_mismatches(manifest, list(charge.events))
    return out


TENSOR_AUDITED = ("private_power_method", "input_perturbation")


def _tensor_plan(manifest: dict[str, Any]):
    """The tensor release's noise plan, recomputed from the manifest's declared parameters.

    Returns (plan, [(manifest privacy key, recomputed value), …]); raises
    KeyError/TypeError/ValueError/SparkDPError when the parameters are not there.
    """
    from spark_dp.tensor.input_perturbation import input_perturbation_plan
    from spark_dp.tensor.private import rows_plan, tensor_entry_plan
    from spark_dp.tensor.whiten import whitened_rows_plan

    privacy, params = manifest["privacy"], manifest["params"]
    # bounds / norm_bound "auto": the mechanism is calibrated to what the choice's share leaves
    eps = float(privacy.get("mechanism_epsilon", privacy["epsilon"]))
    delta, calibration = float(privacy["delta"]), params["calibration"]
    k, L, R = int(params["k"]), int(params["restarts"]), int(params["iterations"])
    if privacy.get("neighbors") == "tensor_entry":  # an explicit tensor (Alg. 3, input perturbation)
        if manifest["mechanism"] == "input_perturbation":
            plan = input_perturbation_plan(epsilon=eps, delta=delta, calibration=calibration,
                                           entry_scale=float(params.get("entry_scale", 1.0)))
            return plan, [("noise_scale", plan.sigma), ("noise_multiplier", plan.noise_multiplier)]
        plan = tensor_entry_plan(epsilon=eps, delta=delta, k=k, L=L, R=R, calibration=calibration)
        return plan, [("nu", plan.nu), ("noise_multiplier", plan.noise_multiplier)]
    norm_bound = privacy["norm_bound"] if privacy["norm_bound"] != "auto" else manifest["norm_bound_auto"]["norm_bound"]
    rows = dict(epsilon=eps, delta=delta, k=k, L=L, R=R, norm_bound=float(norm_bound),
                mode=params["mode"], calibration=calibration, neighbors=privacy["neighbors"],
                max_rows_per_unit=int(privacy.get("max_rows_per_unit", 1)))
    if params.get("whiten"):
        plan = whitened_rows_plan(**rows)
        return plan, [("second_moment_sigma", plan.sigma), ("sensitivity.second_moment", plan.sensitivity),
                      ("noise_multiplier", plan.noise_multiplier)]
    plan = rows_plan(**rows)
    return plan, [("noise_scale", plan.sigma), ("sensitivity", plan.sensitivity),
                  ("noise_multiplier", plan.noise_multiplier)]


def _tensor_mismatches(manifest: dict[str, Any], charged: list) -> list[str]:
    """A tensor power method release: its σ (ν, Δ, z) and events recomputed from its declared parameters."""
    if manifest.get("task") != "tensor_decomposition" or manifest.get("mechanism") not in TENSOR_AUDITED:
        return []
    from spark_dp.errors import SparkDPError

    try:
        plan, stated = _tensor_plan(manifest)
    except (KeyError, TypeError, ValueError, SparkDPError) as exc:
        return [f"its noise plan cannot be recomputed from the declared parameters ({type(exc).__name__}: {exc})"]
    out = []
    privacy = manifest["privacy"]
    chosen = manifest.get("norm_bound_auto") if privacy.get("norm_bound") == "auto" else None
    for key, want in stated:
        got: Any = privacy
        for part in key.split("."):
            got = got.get(part) if isinstance(got, dict) else None
        if isinstance(got, str) and chosen is not None:  # norm_bound "auto": stated at the chosen B
            got = chosen.get(key.split(".")[0])
            got = got.get(key.split(".")[1]) if "." in key and isinstance(got, dict) else got
        if got is None:
            continue  # not stated (an older manifest): the events below are checked all the same
        if not isinstance(got, (int, float)) or isinstance(got, bool) or not _close(got, want):
            out.append(f"{key}={got!r}, recomputed from the declared parameters {want!r}")
    charged, problems = _auto_events(privacy, charged)
    out += problems
    want_z = [e.noise_multiplier for e in plan.events]
    got_z = [getattr(e, "noise_multiplier", None) for e in charged]
    if len(want_z) != len(got_z) or not all(g is not None and _close(g, w) for g, w in zip(got_z, want_z)):
        out.append(f"the declared parameters give {len(want_z)} Gaussian events of sigma/Delta={want_z[0]:.10g}; "
                   f"the ledger charged {len(got_z)} ({', '.join(sorted({f'{z:.10g}' for z in got_z if z}))})")
    return out


def _auto_events(privacy: dict[str, Any], charged: list) -> tuple[list, list[str]]:
    """The mechanism's charged events without the leading event of ``bounds``/``norm_bound`` "auto", and any
    mismatch of that event with the stated share (bounds_epsilon / norm_bound_epsilon).
    """
    from spark_dp.privacy.quantile import BOUNDS_MECHANISM
    from spark_dp.privacy.quantile import MECHANISM as QUANTILE_MECHANISM

    for key, mechanism in (("bounds_epsilon", BOUNDS_MECHANISM), ("norm_bound_epsilon", QUANTILE_MECHANISM)):
        if key not in privacy:
            continue
        first = charged[0] if charged else None
        if getattr(first, "mechanism", None) != mechanism or not _close(getattr(first, "epsilon", -1.0),
                                                                          float(privacy[key])):
            return charged, [f"{key}={privacy[key]!r} but the ledger's first event is not a {mechanism} event of "
                             "that epsilon"]
        return charged[1:], []
    return charged, []


def _payload_problems(manifest: dict[str, Any], path: str) -> list[str]:
    payload = manifest.get("payload") or {}
    return [f"payload file {info.get('file')!r} of {name!r} is missing" for name, info in payload.items()
            if not isinstance(info, dict) or not storage.is_file(storage.join(path, str(info.get("file"))))]


def audit_releases(ledger: Ledger, root: str) -> AuditReport:
    """Checks every release under ``root`` against ``ledger`` and every charge against ``root``."""
    report = AuditReport(root=root, ledger=ledger.path)
    add = report.findings.append
    charges = {c.release_id: c for c in ledger.all_charges()}
    report.charges = len(charges)
    if not storage.is_dir(root):
        raise ConfigError(f"The output root {root!r} does not exist or is not a directory.")
    found: dict[str, str] = {}  # release id → directory, for the charges' side

    for path, manifest in _manifests(root, add, skip=(NONPRIVATE_DIR,)):
        rid = manifest.get("release_id")
        if not isinstance(rid, str):
            add(Finding("unreadable", None, path, "manifest.json has no release_id"))
            continue
        problems = []
        if storage.basename(path) != rid:
            problems.append(f"directory name {storage.basename(path)!r} is not the release id")
        if rid in found:
            problems.append(f"a second directory for this release id (first: {found[rid]})")
        found.setdefault(rid, path)
        problems += _payload_problems(manifest, path)
        charge = charges.get(rid)
        if charge is None:
            if manifest.get("merged_from"):
                problems += _check_merge(manifest, charges)
                if not problems:
                    add(Finding("derived", rid, path, f"a merge of {len(manifest['merged_from'])} charged releases "
                                                      "(post-processing: charged nothing)"))
                    continue
                add(Finding("mismatch", rid, path, "; ".join(problems)))
                continue
            if not problems and _declares_public(manifest):
                add(Finding("nonprivate", rid, path, "declares itself not differentially private (public input, "
                                                     "e.g. Alg. 1 on an explicit tensor); not charged"))
                continue
            add(Finding("orphan", rid, path, "no ledger charge for this release id"
                        + (f" ({'; '.join(problems)})" if problems else "")))
            continue
        problems += _compare(manifest, path, charge)
        if problems:
            add(Finding("mismatch", rid, path, "; ".join(problems)))
        else:
            report.releases += 1

    npdir = storage.join(root, NONPRIVATE_DIR)
    if storage.is_dir(npdir):
        for path, manifest in _manifests(npdir, add):
            rid = manifest.get("release_id")
            if rid in charges:
                add(Finding("mismatch", rid, path, "a non-private release (under nonprivate/) has a ledger charge"))
            elif not _declares_public(manifest):
                add(Finding("mismatch", rid, path, "under nonprivate/ but its manifest does not say private: false "
                                                   "with no epsilon"))
            else:
                add(Finding("nonprivate", rid, path, "not differentially private by explicit opt-in; not charged"))

    for rid, charge in charges.items():
        if rid in found:
            continue
        where = f"dataset {charge.dataset_id!r}, ledger entry {charge.seq}"
        if charge.crash is not None:
            add(Finding("crashed", rid, None, f"charged ({where}), never written; crash recorded: {charge.crash}"))
        elif charge.location is None:
            add(Finding("unwritten", rid, None, f"charged ({where}) but never written and no crash recorded"))
        elif storage.is_under(charge.location, root):
            add(Finding("missing", rid, charge.location, f"charged ({where}) and recorded as written here, "
                                                         "but the release directory is gone"))
        else:
            add(Finding("elsewhere", rid, charge.location, f"charged ({where}); written outside this root"))

    for conflict in ledger.unit_conflicts():  # periods of one lifetime cap that protect different units
        if conflict.kept is None:
            add(Finding("mixed_units", None, None, f"{conflict.describe()}: the lifetime cap composes them as one "
                        "relation; choose the group's unit with 'spark-dp ledger --keep-unit-of PERIOD'"))
        else:
            add(Finding("units_kept", None, None, f"{conflict.describe()}; the group keeps {conflict.kept!r}'s "
                        "declaration for later charges"))
    return report


def _manifests(directory: str, add, *, skip: tuple[str, ...] = ()):
    """(path, manifest) of each release directory in ``directory``.

    Sub-directories without a manifest (but those named in ``skip``) and
    unreadable manifests are reported through ``add`` instead.
    """
    dirs, others = _release_dirs(directory)
    for path in others:
        if storage.basename(path) not in skip:
            add(Finding("skipped", None, path, "a directory without manifest.json: not a release"))
    for path in dirs:
        try:
            manifest = _read_manifest(path)
        except (OSError, ValueError) as exc:
            add(Finding("unreadable", None, path, f"manifest.json cannot be read: {exc}"))
            continue
        yield path, manifest


def _declares_public(manifest: dict[str, Any]) -> bool:
    """The manifest says the release is not private and claims no privacy at all (nothing to charge)."""
    privacy = manifest.get("privacy") or {}
    return privacy.get("private") is False and privacy.get("epsilon") is None and privacy.get("delta") is None \
        and not privacy.get("events")


def _check_merge(manifest: dict[str, Any], charges: dict[str, Charge]) -> list[str]:
    """A merge release: every part charged, and its events exactly the parts' charged events."""
    parts = manifest.get("merged_from") or []
    missing = [p for p in parts if p not in charges]
    if missing:
        return [f"merge of releases without a ledger charge: {', '.join(map(str, missing))}"]
    expected = [e for p in parts for e in charges[p].events]
    try:
        events = [event_from_dict(e) for e in (manifest.get("privacy") or {}).get("events") or []]
    except (TypeError, ValueError, KeyError) as exc:
        return [f"events unreadable ({exc})"]
    if events != expected:
        return ["its events are not exactly its parts' charged events"]
    return []


def format_report(report: AuditReport) -> str:
    """One line per finding (problems first), then a summary line."""
    order = {k: i for i, k in enumerate(PROBLEMS + NOTES)}
    lines = []
    for f in sorted(report.findings, key=lambda f: (order.get(f.kind, 99), f.release_id or "", f.path or "")):
        lines.append(f"{f.kind.upper():<10} {f.release_id or '-'}  {f.message}" + (f"  [{f.path}]" if f.path else ""))
    counts = report.counts()
    summary = ", ".join(f"{counts[k]} {k}" for k in PROBLEMS + NOTES if counts.get(k))
    lines.append(f"audit {'OK' if report.ok else 'FAILED'}: {report.releases} releases match their charges, "
                 f"{report.charges} charges in the ledger" + (f"; {summary}" if summary else ""))
    return "\n".join(lines)
