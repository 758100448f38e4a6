"""Dry runs: what a release would cost and how accurate it would be, without reading data or spending budget.

A dry run runs the *same* family call as the release inside :func:`dry_run`.
Every family validates its request, plans the release from public parameters
(schema, bounds, ε, δ) and hands its frozen
:class:`~spark_dp.release.pipeline.ReleasePlan` to
:func:`~spark_dp.release.pipeline.run_release`; under a dry run that function
stops before ``compute()`` and returns a :class:`Preview` built from the plan
alone (:func:`preview_release`). So the previewed σ, events and
sensitivities are the plan's own values — the ones the release would record
in its manifest — not a re-derivation. Nothing is charged or written: the
ledger is only read (:meth:`~spark_dp.privacy.ledger.Ledger.check`, a
read-only transaction), and a refusal (over budget, a privacy unit the
dataset's ledger does not cover, a release id used for another request) is
reported as ``would_refuse`` with its reason instead of raised. Bad requests
still raise, as they would for the release.

Predicted accuracy (:func:`predict_accuracy`) is post-processing of public
parameters only: σ, the noise family, d, k, r, the bounds, and an optional
guess of n from the user. Where the noise depends on the data (JL, inverse
Wishart, whitened tensors, a ``norm_bound`` chosen from the data) the
prediction says so and gives what is known (relative sizes, or nothing).
With public bounds the second-moment family's prediction is in the data's
units where the release's error bars do not depend on the data (Analyze
Gauss, Wishart: :func:`_data_units`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from spark_dp.errors import BudgetExceededError, ConfigError
from spark_dp.privacy.accountant import compose_epsilon
from spark_dp.privacy.events import Event, event_to_dict
from spark_dp.release.uncertainty import normal_quantile

if TYPE_CHECKING:
    from spark_dp.release.pipeline import ReleasePlan
    from spark_dp.session import DPSession

# n of the regression accuracy table when the user gives no guess.
N_GRID = (1_000, 10_000, 100_000, 1_000_000, 10_000_000)


@dataclass
class DryRun:
    """One dry run (possibly of several releases, e.g. a day's plan): its options and what it saw so far.

    ``pending`` holds, per ledger dataset, the events of the releases already
    previewed in this dry run that would be charged: a later release of the
    same dry run is checked as if they had been (a plan's entries are charged
    one after the other).
    """

    n: int | None = None
    pending: dict[str, list[Event]] = field(default_factory=dict)
    previews: list[Preview] = field(default_factory=list)


_ACTIVE: ContextVar[DryRun | None] = ContextVar("spark_dp_dry_run", default=None)


@contextmanager
def dry_run(*, n: int | None = None) -> Iterator[DryRun]:
    """Within the block, every release stops before reading data and returns a :class:`Preview`.

    Args:
        n: the user's guess of the number of rows (or privacy units), used by
            the accuracy predictions that depend on it; None gives a table
            over :data:`N_GRID` where that applies.
    """
    if n is not None and (isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1):
        raise ConfigError(f"The 'n' parameter of preview must be a positive integer (a guess of the number of "
                          f"rows). Got {n!r} instead.")
    run = DryRun(n=None if n is None else int(n))
    token = _ACTIVE.set(run)
    try:
        yield run
    finally:
        _ACTIVE.reset(token)


def active_dry_run() -> DryRun | None:
    """The dry run in force in this context (None: releases run for real)."""
    return _ACTIVE.get()


@dataclass(frozen=True)
class Preview:
    """What a release would do, from its plan alone (nothing read, charged or written).

    Attributes:
        task, mechanism, dataset_id: as the release's manifest would say.
        release_id: the release's id: the given one, or for a private release the default one
            (:func:`~spark_dp.release.ids.default_release_id`; None: a non-private release would make a new one).
        request_sha256: the request digest the release would record.
        private: False for a release that charges nothing (public input / the
            explicit non-private opt-in).
        stored: the release id was seen before with this request: the release
            would return the stored release (no noise, no charge).
        would_refuse, reason: the release would be refused before any Spark
            work (over the budget or the lifetime cap, a privacy unit the
            dataset's ledger does not cover, an unregistered dataset without
            a limit, a release id used for another request); ``reason`` is the
            refusal's message.
        epsilon, delta: the release's (ε, δ) (None when not private).
        events: the privacy events it would charge (ledger form).
        cost: the (ε, δ) the ledger would record (0 for a stored release).
        budget: the dataset's limit, ε spent and remaining before and after
            the release (exact composition at the limit's δ), and the lifetime
            cap's, if one is registered.
        privacy: the plan's privacy fields — neighbours, unit, sensitivity,
            noise family and scale — exactly as the manifest would record them.
        accuracy: the predicted accuracy (:func:`predict_accuracy`).
        notes: anything the numbers above do not say.
    """

    task: str
    mechanism: str
    dataset_id: str
    release_id: str | None
    request_sha256: str
    private: bool
    stored: bool
    would_refuse: bool
    reason: str | None
    epsilon: float | None
    delta: float | None
    events: list[dict]
    cost: dict[str, float]
    budget: dict[str, Any] | None
    privacy: dict[str, Any]
    accuracy: dict[str, Any]
    notes: list[str] = field(default_factory=list)

    @property
    def noise_scale(self) -> Any:
        """The manifest's ``privacy.noise_scale`` the release would record (σ or b; None if data-dependent)."""
        return self.privacy.get("noise_scale")

    @property
    def noise_family(self) -> str | None:
        """The manifest's ``privacy.noise_family`` (``gaussian``, ``laplace``, ``wishart``, …)."""
        return self.privacy.get("noise_family")

    @property
    def sensitivity(self) -> Any:
        """The manifest's ``privacy.sensitivity`` (Δ; a list or a description for multi-part releases)."""
        return self.privacy.get("sensitivity")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (``json.dumps(preview.to_dict())``)."""
        return _jsonable({"dry_run": True, **asdict(self)})


def _jsonable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return _jsonable(value.tolist())
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating | float):
        v = float(value)
        return v if math.isfinite(v) else str(v)
    return value


# -- the pipeline's dry-run branch ------------------------------------------------

def preview_release(session: DPSession, plan: ReleasePlan, run: DryRun) -> Preview:
    """The preview of ``plan`` in ``session``: the steps of run_release up to its budget check, read-only."""
    from spark_dp.release.ids import check_release_id

    rid = None if plan.release_id is None else check_release_id(plan.release_id, owner=plan.task)
    privacy = dict(plan.privacy)
    accuracy = predict_accuracy(plan.task, plan.mechanism, plan.request, privacy, plan.manifest, n=run.n)
    common = dict(task=plan.task, mechanism=plan.mechanism, dataset_id=session.dataset_id, release_id=rid,
                  request_sha256=plan.request_sha256, privacy=privacy, accuracy=accuracy)
    if plan.mode != "private":
        stored, refuse = _stored_not_private(session, plan, rid)
        preview = Preview(**common, private=False, stored=stored, would_refuse=refuse is not None, reason=refuse,
                          epsilon=None, delta=None, events=[], cost={"epsilon": 0.0, "delta": 0.0}, budget=None,
                          notes=["not differentially private: nothing would be charged" +
                                 ("; written under <output>/nonprivate/" if plan.mode == "nonprivate" else "")])
        run.previews.append(preview)
        return preview

    from spark_dp.release.pipeline import unit_of

    budget = plan.budget
    assert budget is not None  # ReleasePlan.__post_init__
    events = list(plan.events)
    notes: list[str] = []
    stored, refuse = False, None
    if rid is None:  # the id the release would get: the default one (metadata only, no Spark job)
        from spark_dp.release.pipeline import _lineage, _release_id

        rid = _release_id(session, plan, _lineage(session, plan))
        common["release_id"] = rid
    if (charge := session.ledger.lookup(rid)) is not None:
        stored, refuse = _stored_status(session, charge, plan.request_sha256)
    pending = run.pending.get(session.dataset_id, [])
    if pending:
        notes.append(f"checked after {len(pending)} event(s) of earlier releases of this dry run on the same dataset")
    if not stored and refuse is None:
        try:
            session.ledger.check(session.dataset_id, [*pending, *events], session.limit, unit=unit_of(privacy))
        except (BudgetExceededError, ConfigError) as exc:
            refuse = str(exc)
    charged = not stored and refuse is None
    if charged:
        run.pending.setdefault(session.dataset_id, []).extend(events)
    preview = Preview(
        **common, private=True, stored=stored, would_refuse=refuse is not None, reason=refuse,
        epsilon=budget.epsilon, delta=budget.delta, events=[event_to_dict(e) for e in events],
        cost={"epsilon": budget.epsilon if charged else 0.0, "delta": budget.delta if charged else 0.0},
        budget=_budget(session, pending, events if charged else []), notes=notes,
    )
    run.previews.append(preview)
    return preview


def _stored_status(session: DPSession, charge, request_sha256: str) -> tuple[bool, str | None]:
    """(stored, refusal) for a release id the ledger has seen: the checks of ``stored_release``, read-only."""
    if charge.dataset_id != session.dataset_id or charge.request_sha256 != request_sha256:
        return False, (f"Release id {charge.release_id!r} was used for a different request (dataset "
                       f"{charge.dataset_id!r}); choose a new release id.")
    from spark_dp.release import release_exists, storage

    location = charge.location or storage.join(session.output, charge.release_id)
    if not release_exists(location):
        return False, (f"Release id {charge.release_id!r} was charged (epsilon={charge.budget.epsilon:g}, "
                       f"delta={charge.budget.delta:g}) but its release was never written; the charge stands. "
                       "Use a new release id.")
    return True, None


def _stored_not_private(session: DPSession, plan: ReleasePlan, rid: str | None) -> tuple[bool, str | None]:
    from spark_dp.release import storage
    from spark_dp.release.pipeline import NONPRIVATE_DIR, NONPRIVATE_PREFIX
    from spark_dp.release.release import load_release, release_exists

    if rid is None:
        return False, None
    root = session.output
    if plan.mode == "nonprivate":
        rid = rid if rid.startswith(NONPRIVATE_PREFIX) else NONPRIVATE_PREFIX + rid
        root = storage.join(root, NONPRIVATE_DIR)
    path = storage.join(root, rid)
    if not release_exists(path):
        return False, None
    if load_release(path).manifest.get("request_sha256") != plan.request_sha256:
        return False, f"Release id {rid!r} was used for a different request; choose a new release id."
    return True, None


def _budget(session: DPSession, pending: Sequence[Event], new: Sequence[Event]) -> dict[str, Any] | None:
    """Limit, spent and remaining ε before and after (exact composition at the limit's δ), and the lifetime cap's."""
    ledger, ds = session.ledger, session.dataset_id
    rows = ledger.status(ds)
    limit = rows[0].limit if rows else session.limit
    if limit is None:
        return None
    past = [e for c in ledger.charges(ds) for e in c.events] + list(pending)
    before, after = compose_epsilon(past, limit.delta), compose_epsilon([*past, *new], limit.delta)
    out: dict[str, Any] = {
        "limit": {"epsilon": limit.epsilon, "delta": limit.delta}, "registered": bool(rows),
        "epsilon_spent_before": before, "epsilon_remaining_before": max(0.0, limit.epsilon - before),
        "epsilon_spent_after": after, "epsilon_remaining_after": max(0.0, limit.epsilon - after),
        "lifetime": None,
    }
    lifetime = ledger.lifetime_status(ds)
    if lifetime is not None:
        group = [*ledger.group_events(ds), *pending]
        lb, la = compose_epsilon(group, lifetime.limit.delta), compose_epsilon([*group, *new], lifetime.limit.delta)
        out["lifetime"] = {"dataset": lifetime.dataset_id,
                           "limit": {"epsilon": lifetime.limit.epsilon, "delta": lifetime.limit.delta},
                           "epsilon_spent_before": lb, "epsilon_remaining_before": max(0.0, lifetime.limit.epsilon - lb),
                           "epsilon_spent_after": la, "epsilon_remaining_after": max(0.0, lifetime.limit.epsilon - la)}
    return out


# -- predicted accuracy -----------------------------------------------------------

def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float | np.integer | np.floating) and not isinstance(x, bool) else None


def predict_accuracy(task: str, mechanism: str, request: Mapping[str, Any], privacy: Mapping[str, Any],
                     manifest: Mapping[str, Any] | None = None, *, n: int | None = None) -> dict[str, Any]:
    """The predicted noise of a release (:func:`_predict_accuracy`), and of its clipping report if it has one."""
    got = _predict_accuracy(task, mechanism, request, privacy, manifest, n=n)
    clip = request.get("clipping_report")
    if clip is None:
        return got
    from spark_dp.second_moment.clipping import laplace_half_width, plan_clipping_report

    plan = plan_clipping_report(float(request["epsilon"]) * float(clip["share"]),
                                max_rows_per_unit=int(request.get("max_rows_per_unit") or 1),
                                neighbors=request.get("neighbors", "add_remove"))
    half = laplace_half_width(plan.scale, got["level"])
    return {**got, "clipping_report": {
        "count_half_width": half, "laplace_scale": plan.scale, "epsilon": plan.epsilon,
        "fraction_half_width_at_n": None if n is None else half / n,
        "method": "the Laplace interval of the clipped-row count, b·ln(1/(1 − level)); divided by n for the "
                  "fraction (data-independent: predicted exactly)"}}


def _predict_accuracy(task: str, mechanism: str, request: Mapping[str, Any], privacy: Mapping[str, Any],
                      manifest: Mapping[str, Any] | None = None, *, n: int | None = None) -> dict[str, Any]:
    """The predicted noise of a release, from its public request, privacy and manifest fields (module doc).

    Returns a dict with ``level`` (the interval level: the request's
    ``confidence``, default 0.95), ``predicted`` (False where it cannot be
    said before seeing the data, with ``why``), ``method`` (how it was
    derived) and the task's figures. Where the release's own error bars do
    not depend on the data, the prediction calls the same functions
    (:mod:`spark_dp.second_moment.uncertainty`, :mod:`spark_dp.sketch.uncertainty`,
    :func:`spark_dp.tensor.private.eigenvalue_uncertainty`), so the predicted
    half-widths are the release's.
    """
    from spark_dp.release.pipeline import confidence_of

    level = confidence_of(request)
    norm_bound = request.get("norm_bound")
    if task == "pca" and (request.get("params") or {}).get("standardize") == "mean":
        return _centred_pca(request, privacy, level, n)
    if (task in ("second_moment", "linear_regression", "pca") and _num(norm_bound) is None
            or task == "tensor_decomposition" and norm_bound == "auto"):
        return {"level": level, "predicted": False,
                "why": ("norm_bound is chosen from the data (auto): the cost of that step is in the events above, "
                        "but its result — hence the noise scale of the release — is known only after it runs"),
                "method": None}
    fn = _PREDICTORS.get(task)
    if fn is None:
        return {"level": level, "predicted": False, "why": f"no accuracy model for task {task!r}", "method": None}
    got = fn(mechanism, request, dict(privacy), dict(manifest or {}), n, level)
    scaling = (manifest or {}).get("scaling") or {}
    # the coefficients' interval kinds do not depend on the units: shown first wherever the figures are
    lead = {"intervals": got.pop("intervals")} if "intervals" in got else {}
    if scaling.get("bounds") and (exact := _data_units(task, mechanism, request, privacy, scaling, level, got)):
        return {"level": level, **lead, "predicted": True, **exact, "in_scaled_units": got}
    if scaling.get("bounds"):
        # With public bounds the mechanism runs on the vector scaled into [-1, 1] and the release maps its
        # values (and their intervals) back to the data's units; the figures below are in the scaled units.
        # (An intercept alone adds a constant column and scales nothing else: the prediction stands.)
        return {"level": level, **lead, "predicted": False,
                "why": ("bounds given: the release's values and intervals are in the data's units (the noise mapped "
                        "back through the public scaling T); with this mechanism (its noise scales with the data) or "
                        "bounds chosen from the data the prediction is in the scaled [-1, 1] units only"),
                "method": got.get("method"), "in_scaled_units": got}
    return {"level": level, **lead, **got}


def _public_scaling(task: str, request: Mapping[str, Any], scaling: Mapping[str, Any]):
    """The release's public affine map (:class:`~spark_dp.second_moment._scaling.Scaling`) from the manifest's
    ``scaling`` and the request, or None where it is not public before the release (``bounds: auto``).
    """
    from spark_dp.second_moment._scaling import Scaling

    bounds, constant = scaling.get("bounds"), scaling.get("constant_column") or {}
    columns = request.get("columns")
    if (not isinstance(bounds, dict) or not bounds or "index" not in constant or not isinstance(columns, list)
            or not isinstance(constant.get("value"), int | float)):
        return None
    names = columns + [request["label"]] if task == "linear_regression" else columns
    return Scaling.of(names, {c: tuple(b) for c, b in bounds.items()}, constant_at=int(constant["index"]),
                      constant_value=float(constant["value"]))


def _data_units(task: str, mechanism: str, request: Mapping[str, Any], privacy: Mapping[str, Any],
                scaling: Mapping[str, Any], level: float, scaled: Mapping[str, Any]) -> dict[str, Any] | None:
    """The prediction in the data's units with public bounds, where the release's error bars do not depend on the
    data (Analyze Gauss and Wishart: additive noise; AdaSSP's X^T X and X^T y); None otherwise.

    The release maps its matrix back by the public affine map T (T·M·Tᵀ) and
    computes the intervals of the mapped noise with
    :func:`~spark_dp.second_moment.uncertainty.matrix_uncertainty` (``transform=T``)
    and PCA's Weyl bound with :func:`~spark_dp.second_moment.uncertainty.pca_uncertainty`;
    the preview calls the same functions on the plan's public fields, so
    the matrix half-widths and the eigenvalue bound *are* the release's. The
    regression coefficients' noise depends on the data's XᵀX: their table is
    the scaled-unit first-order prediction mapped through the exact linear
    map of the coefficients (approximate, as that prediction is).
    """
    if mechanism not in ("analyze_gauss", "wishart", "adassp"):
        return None
    sc = _public_scaling(task, request, scaling)
    if sc is None or sc.size > 64:  # wide bounded matrices: the per-entry prediction is not listed
        return None
    from spark_dp.second_moment.uncertainty import (
        adassp_sums_uncertainty,
        drop_index,
        matrix_uncertainty,
        pca_uncertainty,
    )

    B, params, t, k = float(request["norm_bound"]), request.get("params", {}), sc.transform(), sc.constant_at
    zeros = np.zeros((sc.size, sc.size))
    if mechanism == "adassp":  # X^T X and X^T y: the release's own exact Gaussian intervals in the data's units
        q = sc.size - 1
        sums = adassp_sums_uncertainty(zeros[:q, :q], zeros[:q, q], privacy["noise_scale"], level, transform=t)
        out = {"units": "the data's (bounds given: the noise mapped back through the public scaling T, exact)"}
        for name, u in sums.items():
            out[f"stderr_{name}"] = u.stderr.tolist()
            out[f"half_width_{name}"] = ((u.high - u.low) / 2).tolist()
        out["method"] = sums["xtx"].method + " (the release's own function on the plan's public fields: exact)"
        if request.get("fit_intercept") and scaled.get("per_coefficient"):
            out["coefficients"] = _coefficients_in_data_units(sc, scaled, level)
        return out
    u = matrix_uncertainty(mechanism, privacy, params, zeros, B, level, transform=t)
    if task != "linear_regression":
        u = drop_index(u, k)
    out: dict[str, Any] = {
        "units": "the data's (bounds given: the noise mapped back through the public scaling T, exact)",
        "stderr_matrix": u.stderr.tolist() if u.stderr is not None else None,
        "half_width_matrix": ((u.high - u.low) / 2).tolist(), "kind": u.kind,
        "matrix": "with the constant column (label last)" if task == "linear_regression" else "the data columns",
        "method": u.method + " (the release's own function on the plan's public fields: exact)"}
    if task == "pca":
        d, kk = sc.size - 1, int(params.get("k", 1))
        _, acc = pca_uncertainty(mechanism, privacy, params, zeros, np.zeros(kk), np.eye(kk, d), B, level,
                                 transform=np.delete(t, k, axis=0))
        out["eigenvalue_error_bound"] = acc["noise_spectral_norm_bound"]
        out["eigenvalue_bound_method"] = ("Weyl in the data's units: |lambda_i(released) - lambda_i(exact)| <= "
                                          "||T'||_2^2 (|c| + r), the release's own bound (exact)")
    if task == "linear_regression" and request.get("fit_intercept") and scaled.get("per_coefficient"):
        out["coefficients"] = _coefficients_in_data_units(sc, scaled, level)
    elif task == "linear_regression":
        out["coefficients"] = {"exact": False, "per_coefficient": None, "why": (
            "fit through the origin, solved in the data's units on the mapped matrix: its noise depends on the "
            "data's X^T X; the scaled-unit figures are under in_scaled_units")}
    return out


def _coefficients_in_data_units(sc, scaled: Mapping[str, Any], level: float) -> dict[str, Any]:
    """The first-order coefficient table mapped to the data's units (exact linear map; approximate prediction).

    The coefficients in the data's units are a linear function J·β_s (plus a
    constant) of those fitted on the scaled vector (the label's row of T has
    no other entry), so under the scaled prediction's assumption (errors of
    β_s uncorrelated with sd s) coefficient j has sd s·‖J_j‖.
    """
    label_at = sc.size - 1
    base = sc.coefficients(np.zeros(label_at), label_at)
    jac = np.stack([sc.coefficients(e, label_at) - base for e in np.eye(label_at)], axis=1)
    norms = np.linalg.norm(jac, axis=1)
    k = sc.constant_at
    names = [c for c in sc.columns if c != sc.columns[-1]]
    z = normal_quantile(level)

    def row(entry):
        sd = entry["stderr"] * norms
        return {"n": entry["n"], "stderr": dict(zip(names + ["intercept"], np.delete(sd, k).tolist()
                                                    + [float(sd[k])], strict=True)),
                "half_width": dict(zip(names + ["intercept"], (z * np.delete(sd, k)).tolist()
                                       + [float(z * sd[k])], strict=True))}

    realistic = scaled.get("realistic")
    return {"exact": False, "best_case": True, "warning": BEST_CASE_WARNING,
            **({"realistic": realistic} if realistic else {}),
            "per_coefficient": [_with_realistic(row(e), realistic) for e in scaled["per_coefficient"]],
            "method": ("the scaled-unit first-order prediction (in_scaled_units, at beta = 0; its design assumption "
                       "X^T X about n c I is data-dependent, so this is approximate) mapped through the exact linear "
                       "map of the coefficients to the data's units (sd times the row norms of its Jacobian); "
                       "privacy noise only, as the release's own intervals by default (covers noise; with covers "
                       "noise+sampling they add the sampling error), which depend on the data")}


def _entry_half_widths(mechanism: str, request: Mapping[str, Any], privacy: Mapping[str, Any],
                       level: float) -> dict[str, Any] | None:
    """The release's own per-entry intervals of a d×d second moment, where they do not depend on the data."""
    from spark_dp.second_moment.uncertainty import matrix_uncertainty, spectral_error

    d, B = int(request["dimension"]), float(request["norm_bound"])
    params = request.get("params", {})
    if mechanism not in ("analyze_gauss", "wishart"):
        return None
    u = matrix_uncertainty(mechanism, privacy, params, np.zeros((d, d)), B, level)
    # a PSD projection's bound has no standard error: the noise's own (before the projection) is stated instead
    sd = u.stderr if u.stderr is not None else matrix_uncertainty(
        mechanism, privacy, {**params, "postprocess": "none"}, np.zeros((d, d)), B, level).stderr
    c, r = spectral_error(mechanism, privacy, params, d, B, level)
    off = (0, 1) if d > 1 else (0, 0)
    return {"half_width": float(u.high[off] - u.low[off]) / 2, "stderr": float(sd[off]),
            "half_width_diagonal": float(u.high[0, 0] - u.low[0, 0]) / 2, "stderr_diagonal": float(sd[0, 0]),
            "kind": u.kind, "method": u.method + ("" if u.stderr is not None else
                                                  "; stderr: the noise's before the projection"),
            "noise_spectral_norm_bound": r, "shift": c}


def _relative_noise(mechanism: str, privacy: Mapping[str, Any]) -> dict[str, Any]:
    """JL / inverse-Wishart: the noise scales with the data; what is known is relative."""
    rows = int(privacy["projection_rows"] if mechanism == "jl_ridge" else privacy["dof"])
    what = "projection rows r" if mechanism == "jl_ridge" else "degrees of freedom m"
    return {"predicted": False,
            "why": (f"the noise of {mechanism} scales with the data's own second moment: entry (i, j) has variance "
                    f"about (S_ij^2 + S_ii S_jj)/{what} with S = A^T A + w^2 I, so only relative sizes are known"),
            "relative_stderr_diagonal": math.sqrt(2.0 / rows), "ridge_bias_diagonal": float(privacy["ridge_w2"]
                                                                                          if "ridge_w2" in privacy
                                                                                          else privacy["ridge_w"] ** 2),
            "method": f"Wishart law of the release around S ({what} = {rows}); removed by postprocess 'shift'"}


def _relative_entry_interval(mechanism: str, request: Mapping[str, Any], privacy: Mapping[str, Any],
                             level: float) -> dict[str, Any]:
    """JL / inverse-Wishart: the release's own diagonal interval as factors of the released S_ii (data-free).

    The diagonal pivot is exact and scale-free (r·S_ii/Σ_ii ~ χ²_r, resp.
    (m−d−1)·Σ_ii/S_ii ~ χ²_{m−d+1}; :func:`multiplicative_entry_interval`),
    so the interval of Σ_ii = (AᵀA)_ii + w² is [f_lo·S_ii, f_hi·S_ii] with
    S_ii the released diagonal with the ridge kept; the off-diagonal
    entries' intervals depend on the released correlation and are not
    predicted.
    """
    from scipy import stats

    a = (1.0 - level) / 2.0
    if mechanism == "jl_ridge":
        r = int(privacy["projection_rows"])
        q_lo, q_hi = stats.chi2.ppf([a, 1.0 - a], r)
        lo, hi, law = r / q_hi, r / q_lo, f"r S_ii / Sigma_ii ~ chi2_{r}"
    else:
        m, d = int(privacy["dof"]), int(request["dimension"])
        q_lo, q_hi = stats.chi2.ppf([a, 1.0 - a], m - d + 1)
        lo, hi, law = q_lo / (m - d - 1), q_hi / (m - d - 1), f"(m-d-1) Sigma_ii / S_ii ~ chi2_{m - d + 1}"
    return {"relative_interval_diagonal": {
        "low_factor": float(lo), "high_factor": float(hi), "kind": "interval",
        "method": (f"exact pivot {law}: the release's own interval of the diagonal A^T A_ii + w^2 is "
                   "[low_factor, high_factor] times the released diagonal with the ridge kept (add the ridge back after "
                   "postprocess 'shift'); subtract the ridge for A^T A_ii (w^2, or w^2 (T T^T)_ii in the data's "
                   "units with bounds). Off-diagonal intervals depend on the "
                   "released correlation (a simulated pivot) and are not predicted")}}


#: What the regression's predicted coefficient noise is: a floor under the most favourable design, not a forecast.
BEST_CASE_WARNING = (
    "best case: the prediction assumes the most favourable design for the norm bound (every row at the norm bound, "
    "spread evenly over uncorrelated columns; with bounds, every value at one of its bounds). A real design's "
    "coefficients are noisier by a factor that grows like c/s^2, s^2 the smallest eigenvalue of its mean scaled row "
    "x x^T (the constant column included) and c that of the best case (on ten real tables the median term was "
    "0.1-1.05 c/s^2, the worst 0.9-9.5 c/s^2): a dry run reads no data, so it cannot know s; 'realistic' gives what "
    "real tables measured. The release's own intervals measure it")


#: How much wider real releases' coefficient intervals were than the dry run's best case, per mechanism (key:
#: ``mechanism`` or ``mechanism/postprocess``): one release's 95 % half-width ÷ the best case at the table's n, per
#: term, over the ten real tables of the calibration harness (benchmarks/calibration.py; bounds from each column's
#: documented meaning), ε = 0.3, 1, 4 (Wishart ≤ 1) and 5 seeded releases each — min and max (rounded outward),
#: 5 %, median and 95 % — with the share of releases whose intervals were refused (AdaSSP's kind none, left out of
#: the ratios) and the share of the others marked conservative (kind bound, or a method saying so first). Made by
#: ``benchmarks/dry_run_range.py`` (docs/accuracy.md, "Dry run", has the command and the table). The ratio is about
#: c/s² of the table's design (the slope of log ratio on log c/s² over the tables is about 1): data a dry run cannot
#: see, hence a measured range and not a prediction (per table the median term was 0.1–1.05 c/s², the worst
#: 0.9–9.5 c/s²).
REALISTIC_FACTORS: dict[str, dict[str, float]] = {
    "analyze_gauss": {"min": 2.2, "p05": 4.4, "median": 48.0, "p95": 15000.0, "max": 260000.0,
                      "refused": 0.0, "conservative": 0.33},
    "analyze_gauss/shift": {"min": 2.2, "p05": 4.3, "median": 50.0, "p95": 20000.0, "max": 1900000.0,
                            "refused": 0.0, "conservative": 0.69},
    "analyze_gauss/psd": {"min": 2.2, "p05": 4.4, "median": 61.0, "p95": 130000.0, "max": 1700000.0,
                          "refused": 0.0, "conservative": 0.47},
    "wishart": {"min": 5.5, "p05": 17.0, "median": 190.0, "p95": 4300.0, "max": 76000.0,
                "refused": 0.0, "conservative": 0.95},
    "wishart/psd": {"min": 4.8, "p05": 15.0, "median": 130.0, "p95": 7700.0, "max": 70000.0,
                    "refused": 0.0, "conservative": 0.95},
    "adassp": {"min": 3.1, "p05": 5.6, "median": 24.0, "p95": 3100.0, "max": 37000.0,
               "refused": 0.53, "conservative": 0.04},  # the Fieller intervals (kind bound only where unbounded)
}
REALISTIC_SOURCE = ("one release's 95 % half-width / the best case, per term, on the ten real tables of the "
                    "calibration harness (n 3,000-327,346, 2-9 features, bounds from each column's documented "
                    "meaning), epsilon 0.3, 1 and 4, 5 seeded releases each (benchmarks/dry_run_range.py)")


def _factor_key(mechanism: str, params: Mapping[str, Any]) -> str:
    post = params.get("postprocess") or "none"
    if mechanism == "analyze_gauss" and (post == "shift" or float(params.get("ridge") or 0.0) > 0):
        post = "shift"  # a user ridge takes the same bias-bounded path as the shift
    key = f"{mechanism}/{post}" if post != "none" else mechanism
    return key if key in REALISTIC_FACTORS else mechanism


def _realistic(mechanism: str, params: Mapping[str, Any], c: float) -> dict[str, Any] | None:
    """The measured factors of ``mechanism`` (:data:`REALISTIC_FACTORS`) and what they mean; None: not measured."""
    key = _factor_key(mechanism, params)
    f = REALISTIC_FACTORS.get(key)
    if f is None:
        return None
    return {"factor": {k: f[k] for k in ("min", "p05", "median", "p95", "max")}, "measured_as": key,
            "measured_on": REALISTIC_SOURCE, "c": c,
            "meaning": (f"cannot be known before the data is seen: a real table's intervals are wider than the best "
                        "case by a factor that grows like c/s^2 (on real tables the median term 0.1-1.05 c/s^2, "
                        "the worst 0.9-9.5 c/s^2), s^2 the smallest eigenvalue of its mean scaled row x x^T (constant "
                        f"column included; c = {c:.3g} in the best case, near 0 for nearly collinear columns or "
                        f"columns that fill a small part of their bounds). Measured for {key} on real tables: "
                        f"x{f['min']:g} to x{f['max']:g}, median x{f['median']:g}, 90 % of the terms within "
                        f"x{f['p05']:g}-x{f['p95']:g}; a range seen, not a bound")}


def _with_realistic(row: dict[str, Any], realistic: Mapping[str, Any] | None) -> dict[str, Any]:
    """``row`` with ``half_width_measured``: its best-case half-width times each measured factor."""
    if realistic is None:
        return row
    hw = row["half_width"]
    scale = (lambda f: {k: v * f for k, v in hw.items()}) if isinstance(hw, Mapping) else (lambda f: hw * f)
    return {**row, "half_width_measured": {k: scale(f) for k, f in realistic["factor"].items()}}


def _typical(request: Mapping[str, Any], n: int) -> float:
    """A diagonal entry / eigenvalue of AᵀA for n rows at the norm bound spread evenly over the d columns."""
    return n * float(request["norm_bound"]) ** 2 / int(request["dimension"])


def _regression_size(request: Mapping[str, Any]) -> int:
    """The size of the vector the mechanism sees: features, the constant column (an intercept or bounds), label."""
    constant = bool(request.get("fit_intercept")) or request.get("bounds") is not None
    return int(request["dimension"]) + constant


def _second_moment(mechanism, request, privacy, manifest, n, level) -> dict[str, Any]:
    e = _entry_half_widths(mechanism, request, privacy, level)
    if e is None:
        return {"what": "entries of the d x d matrix", **_relative_noise(mechanism, privacy),
                **_relative_entry_interval(mechanism, request, privacy, level)}
    out = {"what": "entries of the d x d matrix", "predicted": True, "method": e["method"], "kind": e["kind"],
           "per_entry": {k: e[k] for k in ("half_width", "stderr", "half_width_diagonal", "stderr_diagonal")},
           "noise_spectral_norm_bound": e["noise_spectral_norm_bound"]}
    if n is not None:
        out["relative_to_signal"] = {"n": n, "typical_entry": _typical(request, n),
                                     "ratio": e["stderr"] / _typical(request, n),
                                     "assumption": "rows at the norm bound, spread evenly over the d coordinates"}
    return out


def _regression(mechanism, request, privacy, manifest, n, level) -> dict[str, Any]:
    d = int(request["dimension"])  # features + label
    size = _regression_size(request)
    p = size - 1  # the columns of X^T X: the features, and the constant column when there is one
    ns = [n] if n is not None else list(N_GRID)
    c = _typical(request, 1)  # per-row second moment of one coordinate
    intervals = _regression_interval_kinds(mechanism, request, privacy, n, c)
    if mechanism == "adassp":
        s_xx, s_xy = (float(x) for x in privacy["noise_scale"][1:])
        noise = {"distribution": "gaussian", "entry_stderr_xtx": s_xx, "entry_stderr_xty": s_xy}
    else:
        e = _entry_half_widths(mechanism, request, privacy, level)
        if e is None:
            r = int(privacy.get("projection_rows") or privacy.get("dof"))
            return {"intervals": intervals, "what": "coefficients", "predicted": False,
                    "why": (f"the noise of {mechanism} scales with the data: the coefficients vary about as OLS "
                            f"coefficients fitted to r = {r} rows drawn from the data's second moment (plus the "
                            "ridge w^2), i.e. about sqrt(n/r) times the sampling standard error"),
                    "noise_vs_sampling_stderr": [{"n": m, "factor": math.sqrt(m / r)} for m in ns],
                    "method": "Wishart law of the release around A^T A + w^2 I (first order)"}
        s_xx = s_xy = e["stderr"]
        noise = {"distribution": mechanism, "entry_stderr_xtx": s_xx, "entry_stderr_xty": s_xy}
    z = normal_quantile(level)
    realistic = _realistic(mechanism, request.get("params") or {}, c)
    table = [_with_realistic({"n": m, "stderr": s_xy / (m * c), "half_width": z * s_xy / (m * c),
                              "stderr_per_unit_norm_beta": s_xx / (m * c)}, realistic) for m in ns]
    return {
        "intervals": intervals,
        "what": "coefficients", "predicted": True, "best_case": True, "warning": BEST_CASE_WARNING,
        **({"realistic": realistic} if realistic else {}),
        "per_coefficient": table,
        "n_for_stable_solve": 2.0 * s_xx * math.sqrt(p) / c,
        "method": ("first order: beta_hat - beta = (X^T X)^-1 (e_xy - E_xx beta), with X^T X about n c I, "
                   f"c = B^2/d = {c:.6g} (rows at the norm bound spread evenly over the d = {d} columns, label "
                   "included); stderr at beta = 0, add stderr_per_unit_norm_beta x ||beta|| in quadrature; "
                   "privacy noise only (sampling error comes on top); n_for_stable_solve: n at which the noise's "
                   f"spectral norm (about 2 s sqrt(p), p = {p} columns of X^T X) equals n c, below it the solve is "
                   "dominated by noise"),
        "noise": noise,
    }


def _design_threshold(mechanism: str, privacy: Mapping[str, Any], params: Mapping[str, Any], size: int,
                      norm_bound: float) -> float:
    """T: the release marks its coefficient intervals conservative when λ_min of the scaled XᵀX (constant column
    included) is at most about T — where :func:`~spark_dp.second_moment.intervals.design_floor`, the release's own
    lower bound on λ_min, reaches 0 for a release whose noise took its mean (inf: every release).

    Computed by that function on two such releases (its bound is affine in λ_min): Analyze Gauss 2σ(√(size − 1) +
    √ln 2000), Wishart the 0.999 bound r on its noise's spectral norm (about), JL / inverse-Wishart (θ_hi − 1)·w².
    Before any ``psd`` projection: after one that clipped an eigenvalue, the additive bound doubles.
    """
    from spark_dp.second_moment.intervals import NoiseLaw, design_floor

    plain = {**params, "postprocess": "none"}
    if mechanism == "analyze_gauss":  # the manifest's old name, which design_floor reads (plans carry both)
        privacy = {"noise_sigma": privacy.get("noise_scale"), **privacy}
    mean = NoiseLaw.of(mechanism, privacy, plain, norm_bound, size).mean

    def floor(lam: float) -> float:
        return design_floor(mechanism, privacy, plain, (lam + mean) * np.eye(size), norm_bound=norm_bound,
                            label_at=size - 1)[0]

    f0 = floor(0.0)
    x = max(1.0, abs(f0))
    slope = (floor(x) - f0) / x
    return math.inf if slope <= 1e-12 else max(-f0 / slope, 0.0)


def _regression_interval_kinds(mechanism: str, request: Mapping[str, Any], privacy: Mapping[str, Any],
                               n: int | None, c: float) -> dict[str, Any]:
    """Which intervals the release's coefficients will carry, and when they are refused or marked conservative.

    The release decides from λ_min of its scaled XᵀX (the data's; a dry run cannot see it) with the thresholds of
    :mod:`spark_dp.second_moment.intervals` (``design_floor``, the Analyze Gauss ridge's ``gaussian_lambda_floor``)
    and :func:`spark_dp.second_moment.uncertainty.adassp_uncertainty` (AdaSSP, whose p counts the constant column
    as its algorithm does). In user words, λ_min = n·s², s² the smallest eigenvalue of the mean scaled row x xᵀ
    (c in the best case). ``summary`` leads (the text dry run shows it); ``rule`` is the whole rule (``--verbose``).
    """
    params = request.get("params") or {}
    ridge = float(params.get("ridge") or 0.0)
    post = params.get("postprocess") or "none"
    size = _regression_size(request)
    constant = size > int(request["dimension"])
    intercept = bool(request.get("fit_intercept"))
    arrays = ["coefficients", "intercept"] if intercept else ["coefficients"]
    covers = "noise + sampling" if request.get("covers") == "noise+sampling" and constant else "noise"
    B = float(request["norm_bound"])
    measured = REALISTIC_FACTORS.get(_factor_key(mechanism, params))
    scaled = ("into [-1, 1] by their bounds" if request.get("bounds") is not None else
              "as the mechanism sees them (clipped to the norm bound)")
    what = (f"s^2 = the smallest eigenvalue of the mean of x x^T over your rows, x a row's features scaled {scaled}"
            f"{', with the constant column' if constant else ''}: c = {c:.3g} in the best case, near 0 for nearly "
            "collinear columns or columns that fill a small part of their bounds")
    above = " (the factor above)" if mechanism in ("analyze_gauss", "wishart", "adassp") else ""

    def at_n(t: float) -> str:
        if not math.isfinite(t):
            return "in every release"
        if n is None:
            return f"when n s^2 <= {t:.4g} (give --n for your row count)"
        if n * c <= t:
            return f"at n = {n:,} even in the best case: expect it"
        return (f"at n = {n:,} when s^2 <= {t / n:.3g}, i.e. when your table is about x{n * c / t:.3g} or more "
                f"from the best case{above}")

    out: dict[str, Any] = {"covers": covers}
    if mechanism == "adassp":
        s1, s2 = (float(x) for x in privacy["noise_scale"][:2])
        delta, rho = float(request["delta"]), float(privacy["rho"])
        q = size - 1  # AdaSSP's p: the columns of its X^T X, the constant's included (spark_dp.second_moment.adassp)
        margin = s1 * math.sqrt(math.log(6.0 / delta))
        threshold = s2 * math.sqrt(q * math.log(2.0 * q * q / rho))
        # The Fieller set is unbounded where Q's limit along the released X^T X's weakest direction is <= 2 z^2,
        # about where that direction's eigenvalue is <= 2 z sigma_2; the noise (spectral norm about 2 sigma_2 sqrt(p))
        # can bring the true lambda_min that far down.
        from spark_dp.release.pipeline import confidence_of

        z = normal_quantile(confidence_of(request))
        fieller = 2.0 * z * s2 + 2.0 * s2 * math.sqrt(q)
        bounded = request.get("bounds") is not None and constant
        fallback = "bound" if bounded else "none"
        out.update(kinds={a: ["none", "interval", "bound"] if bounded else ["none", "interval"] for a in arrays},
                   refused_when={"lambda_min_below": margin, "s2_below_at_n": None if n is None else margin / n},
                   bound_when={"lambda_min_below": fieller} if bounded else None,
                   adaptive_ridge_when={"lambda_min_below": threshold + margin},
                   headline=(f"{' and '.join(arrays)}: refused (kind none, no interval) when the design is too close "
                             "to collinear for the noise, otherwise the generalised Fieller interval of AdaSSP's "
                             "exact pivot (kind interval, privacy noise only), except near the refusal, where the "
                             "noise can hide the design's weakest direction: then "
                             + ("a bound on the ridge's bias (kind bound, conservative)" if bounded else
                                "refused too (without bounds nothing bounds the ridge's bias)")))
        out["summary"] = [
            out["headline"] + ".",
            f"Refused {at_n(margin)}.",
            f"Kind {fallback} possible {at_n(fieller)}.",
        ]
        out["rule"] = (
            "kind none (refused, the reason in the method) when AdaSSP's private lower bound on lambda_min of the "
            f"scaled X^T X is 0, i.e. about when lambda_min < {margin:.6g} (sigma_1 sqrt(ln(6/delta))); otherwise "
            "kind interval (the generalised Fieller interval of the pivot X^T y_hat - X^T X_hat b, which does not use "
            "the adaptive ridge), except where that interval is unbounded: the released X^T X's weakest direction "
            f"is within about 2 z sigma_2 of 0, possible when lambda_min < {fieller:.6g} (2 z sigma_2 + 2 sigma_2 "
            f"sqrt(p), p = {q} columns of X^T X{', the constant included' if constant else ''}), where it is "
            + ("kind bound (the bias of AdaSSP's adaptive ridge bounded, from its private lower bound on lambda_min)"
               if bounded else "kind none (no public bounds on every column: nothing bounds the ridge's bias)")
            + f". The adaptive ridge is on when lambda_min < about {threshold + margin:.6g}. lambda_min = n s^2, "
            + what)
    else:
        t = _design_threshold(mechanism, privacy, params, size, B)
        psd = post == "psd"
        ridged = mechanism == "analyze_gauss" and post in ("none", "shift") and (post == "shift" or ridge > 0)
        # Analyze Gauss without a ridge, noise only: the exact pivot's interval, the bootstrap's (marked
        # conservative) only where the pivot's set is unbounded — about when lambda_min <= sqrt(2) z sigma
        # (spark_dp.second_moment.pivot), where the release's own lower bound is <= 0 as well.
        pivot = (mechanism == "analyze_gauss" and post in ("none", "psd") and ridge == 0 and covers == "noise"
                 and (intercept or not constant))
        # After the shift or a ridge whose bias cannot be bounded (the release's lower bound on lambda_min <= 0, or
        # no constant column), noise only: the exact pivot of the release less its shift, as without a ridge.
        ridge_pivot = ridged and covers == "noise" and (intercept or not constant)
        bound_t = t if ridged and constant and intercept else None  # kind bound above it
        if pivot or ridge_pivot:
            from spark_dp.release.pipeline import confidence_of

            t = math.sqrt(2.0) * normal_quantile(confidence_of(request)) * float(privacy["noise_scale"])
        unbounded = ridged and not constant and not ridge_pivot  # no row count bounds the ridge's bias
        if unbounded:
            t = math.inf
        out["conservative_when"] = {"lambda_min_at_most": t, "lambda_min_at_most_after_psd_clip": (
                                        (t if pivot else 2.0 * t) if psd else None),
                                    "s2_at_most_at_n": None if n is None else t / n}
        if bound_t is not None:
            out["kinds"] = {a: ["bound", "interval"] for a in arrays}
            out["bound_when"] = {"lambda_min_above": bound_t}
            fallback = ("the exact pivot's interval of the unregularised fit of the same release (kind interval), "
                        "marked conservative only where that interval is unbounded" if ridge_pivot else
                        "the interval of the unregularised fit of the same release, marked conservative")
            out["headline"] = (f"{' and '.join(arrays)}: kind bound (the ridge's bias bounded; conservative by "
                               f"construction) when the design is well spread for the noise, otherwise {fallback}")
            out["summary"] = [out["headline"] + ".", f"The unregularised fit's interval {at_n(bound_t)}."]
            if ridge_pivot:
                out["summary"].append(f"Marked conservative {at_n(t)}.")
        elif ridge_pivot:
            out["kinds"] = {a: ["interval"] for a in arrays}
            out["headline"] = (f"{' and '.join(arrays)}: kind interval ({covers}): without the constant column "
                               "nothing bounds the ridge's bias, so the exact pivot's interval of the unregularised "
                               "fit of the same release; marked conservative where that interval is unbounded")
            out["summary"] = [out["headline"] + ".", f"Marked conservative {at_n(t)}."]
        else:
            out["kinds"] = {a: ["interval"] for a in arrays}
            out["headline"] = (f"{' and '.join(arrays)}: kind interval ({covers}); marked conservative (wider than "
                               "the level needs) when the privacy noise may swamp the design's weakest direction")
            out["summary"] = [out["headline"] + ".",
                              f"Marked conservative {at_n(t)}" + ("; twice that s^2 if the PSD projection clips an "
                                                                  "eigenvalue." if psd and not pivot else ".")]
        out["rule"] = ((
            "the interval is the exact Gaussian pivot's (Fieller's: X^T y - X^T X b is exactly normal at the true b); "
            "where that set is unbounded for a coefficient, about when the released lambda_min of the scaled X^T X "
            f"(the constant column included) is <= sqrt(2) z sigma = {t:.6g}, the parametric bootstrap's instead, "
            "marked 'conservative' (its own lower bound on lambda_min, spark_dp.second_moment.intervals."
            "design_floor, is <= 0 there)" + (
                ", as after a PSD projection that clipped an eigenvalue" if psd else "")
            + ". lambda_min = n s^2, " + what) if pivot else (
            ("after the shift or a ridge: " + (
                "where the release's lower bound on lambda_min of its scaled X^T X (the constant column included; "
                "spark_dp.second_moment.intervals.design_floor: the released X^T X minus 2 sigma (sqrt(p) + "
                "sqrt(ln 2000)), p its columns) is > 0, kind bound (the ridge's bias bounded), for a release whose "
                f"noise takes its mean lambda_min > {bound_t:.6g}; otherwise " if bound_t is not None else
                "without the constant column nothing bounds the ridge's bias, so ")
             + "the interval of the unregularised fit of the release less its shift, which has Analyze Gauss's "
             "noise without a ridge: the exact Gaussian pivot's (Fieller's), and where that set is unbounded for a "
             f"coefficient, about when the released lambda_min is <= sqrt(2) z sigma = {t:.6g}, the parametric "
             "bootstrap's, marked 'conservative'. lambda_min = n s^2, " + what) if ridge_pivot else (
            "the release computes a lower bound on lambda_min of its scaled X^T X (the constant column included) "
            "from the released matrix, holding with probability 0.999 (spark_dp.second_moment.intervals.design_floor: "
            + {"analyze_gauss": "the released X^T X minus 2 sigma (sqrt(p) + sqrt(ln 2000)), p its columns",
               "wishart": "the released X^T X minus the Wishart mean c and the 0.999 bound r on its spectral norm",
               }.get(mechanism, "the released X^T X over theta_hi, the 0.999 upper end of the multiplicative noise's "
                               "eigenvalues, minus the ridge w^2")
            + "); where it is <= 0 the method begins with 'conservative'"
            + (" and, after the shift or a ridge, the interval is the unregularised fit's (else kind bound)"
               if "bound" in out["kinds"][arrays[0]] else "")
            + (". Without the constant column the release bounds no row count, so after the shift or a ridge the "
               "interval is always the unregularised fit's, marked conservative" if unbounded else
               f". For a release whose noise takes its mean that is lambda_min <= {t:.6g}")
            + (" (doubled when the PSD projection clipped an eigenvalue)" if psd else "")
            + ". lambda_min = n s^2, " + what)))
    if measured is not None:
        out["measured"] = {"refused": measured["refused"], "conservative": measured["conservative"],
                           "on": REALISTIC_SOURCE}
        key = _factor_key(mechanism, params)
        out["summary"].append(
            "On ten real tables (epsilon 0.3-4): " + (
                f"{100 * measured['refused']:.0f} % of the {key} releases refused their intervals; of the others "
                f"{100 * measured['conservative']:.0f} % were kind bound." if mechanism == "adassp" else
                f"{100 * measured['conservative']:.0f} % of the {key} releases were marked conservative"
                + (" or kind bound." if "bound" in out["kinds"][arrays[0]] else ".")))
    return out


def _pca(mechanism, request, privacy, manifest, n, level) -> dict[str, Any]:
    e = _entry_half_widths(mechanism, request, privacy, level)
    if e is None:
        return {"what": "eigenvalues", **_relative_noise(mechanism, privacy)}
    bound = e["noise_spectral_norm_bound"]
    out = {"what": "eigenvalues", "predicted": True, "kind": "bound", "eigenvalue_error_bound": bound,
           "method": ("Weyl: |lambda_i(released) - lambda_i(exact)| <= ||E||_2, the release's own high-probability "
                      "bound on the noise's spectral norm (spark_dp.second_moment.uncertainty.spectral_error)"),
           "subspace_angle": ("Davis-Kahan: sin(angle) <= ||E||_2 / (gap - ||E||_2), gap = the eigengap after the "
                              "k-th eigenvalue (data-dependent; the release states it)")}
    if n is not None:
        out["relative_to_signal"] = {"n": n, "typical_eigenvalue": _typical(request, n),
                                     "ratio": bound / _typical(request, n),
                                     "assumption": "an eigenvalue of A^T A about n B^2 / d"}
    return out


def _centred_pca(request, privacy, level, n) -> dict[str, Any]:
    """PCA centred at a private mean: the mean's noise is public; the matrix's depends on the released mean."""
    from statistics import NormalDist

    mean = privacy.get("mean") or {}
    sigma = float(mean.get("noise_sigma", "nan"))
    d = int(request.get("dimension") or 0)
    z = NormalDist().inv_cdf(0.5 + level / 2.0)
    return {"level": level, "predicted": False, "what": "eigenvalues", "method": None, "why": (
        "standardize 'mean': the centred rows' norm bound B_c = sqrt(sum (1 + |mean_i|)^2) comes from the released "
        f"mean, between sqrt(d) = {math.sqrt(d):.4g} (mean at the bounds' midpoint) and 2 sqrt(d) = "
        f"{2 * math.sqrt(d):.4g}, so the matrix's noise scale is known only after the release (its sensitivity "
        "grows with B_c^2); the mean's own noise is below"),
        "mean": {"noise_sigma": sigma, "count_half_width": z * sigma,
                 "mean_stderr_scaled_at_n": None if n is None else sigma * math.sqrt(2.0) / n,
                 "note": "the mean in the scaled coordinates ([-1, 1] per column) has stderr about "
                         "sigma sqrt(1 + mean^2) / n <= sigma sqrt(2) / n"}}


def _sketch(mechanism, request, privacy, manifest, n, level) -> dict[str, Any]:
    from spark_dp.sketch.uncertainty import estimate_noise

    params = request.get("params", {})
    k = int(params.get("repetitions") or 1)
    b = params.get("buckets")
    estimator = "histogram" if mechanism == "histogram" else manifest.get("sketch", {}).get("estimator")
    if estimator is None:
        return {"what": "frequency estimates", "predicted": False, "why": "no estimator recorded", "method": None}
    family, scale = str(privacy["noise_family"]), float(privacy["noise_scale"])
    ws = manifest.get("sketch", {}).get("weight_scaling")  # weight bounds: the release reports M × the mechanism's
    if ws is not None:
        scale *= float(ws["scale"])
    lo, hi, sd = estimate_noise(estimator, family, scale, k, level, b)
    hashed = mechanism != "histogram"
    out = {"what": ("the noise part of each frequency estimate: a LOWER LIMIT on its error that assumes no hash "
                    "collisions (the release's intervals add the collisions, read from the released table)"
                    if hashed else "the noise of each frequency estimate (a histogram has no collisions: exact)"),
           "predicted": True, "per_estimate": {"low": lo, "high": hi, "stderr": sd, "estimator": estimator},
           "lower_limit": hashed,
           "method": ("the estimator's noise law over k counters (spark_dp.sketch.uncertainty.estimate_noise, as "
                      "spark-dp estimate's noise part)")}
    if ws is not None:
        out["units"] = (f"the weight's ({ws['column']!r} clamped to {ws['bounds']}; the mechanism's noise times "
                        f"M = {ws['scale']:g}, exact)")
    hh = manifest.get("heavy_hitters") or {}
    if hh.get("false_positive_rate") is not None:
        out["heavy_hitter_threshold"] = {"threshold": hh.get("threshold"),
                                         "false_positive_rate_per_absent_item": hh["false_positive_rate"],
                                         "note": "noise alone, assuming no hash collisions: a lower limit (the "
                                                 "release's false_positive_rate_bound includes collisions)"}
    if params.get("heavy_hitters", {}).get("levels"):
        out["note"] = "every level of the dyadic stack has the same per-counter noise"
    out["estimate_intervals"] = _sketch_estimate_intervals(mechanism, request, k, b, level)
    return out


def _sketch_estimate_intervals(mechanism: str, request: Mapping[str, Any], k: int, b, level: float) -> dict[str, Any]:
    """What the release's estimate intervals will be: refused (kind none, with the reason) or not, data-free."""
    from spark_dp.sketch.uncertainty import planned_refusal

    if mechanism == "histogram":
        return {"kind": "interval", "covers": "noise", "refused": False, "reason": None}
    weight = request.get("weight")
    bounds = (request.get("bounds") or {}).get(weight) if weight is not None else None
    nonnegative = weight is None or (bounds is not None and float(bounds[0]) >= 0.0)
    if b is None:
        return {"kind": None, "refused": None, "reason": "the number of buckets is not known before the release"}
    reason = planned_refusal(mechanism, k, int(b), level, nonnegative)
    return {"kind": "none" if reason else "bound", "covers": "noise+collisions", "refused": reason is not None,
            "reason": reason, "method": ("the refusal rules of spark_dp.sketch.uncertainty.refusal, which depend on "
                                         "the mechanism, k, b, the level and the weights' sign only")}


def _tensor(mechanism, request, privacy, manifest, n, level) -> dict[str, Any]:
    from spark_dp.tensor.private import eigenvalue_uncertainty

    params = request.get("params", {})
    if privacy.get("whiten"):
        return {"what": "eigenvalues", "predicted": False,
                "why": "whitening uses the released second moment: the power passes' noise scale depends on it",
                "method": None, "second_moment_sigma": privacy.get("second_moment_sigma")}
    if mechanism == "input_perturbation":
        s = float(privacy["noise_scale"])
        return {"what": "tensor entries", "predicted": True,
                "per_entry": {"stderr": s, "half_width": normal_quantile(level) * s},
                "method": "N(0, (sigma w)^2) on each unique entry (w = 1, 2, 6 by multiplicity)"}
    L = int(params.get("restarts", 1))
    if "nu" in privacy:  # explicit tensor: sigma_i = nu c ||v_i||_inf^3 <= nu c
        s, bounded = float(privacy["nu"]) * float(privacy.get("entry_scale", 1.0)), True
    else:
        s = _num(privacy.get("noise_scale"))
        if s is None:
            return {"what": "eigenvalues", "predicted": False, "why": "the noise scale depends on the data",
                    "method": None}
        rpr = params.get("rows_per_round")
        s, bounded = (s / rpr if rpr else s), False
    u = eigenvalue_uncertainty(np.zeros(1), np.array([s]), restarts=L, level=level, source="planned")
    return {"what": "eigenvalues", "predicted": True, "kind": "bound" if bounded else u.kind,
            "per_eigenvalue": {"stderr" + ("_at_most" if bounded else ""): s,
                               "half_width" + ("_at_most" if bounded else ""): float(u.high[0])},
            "method": u.method + ("; sigma_i = nu c ||v_i||_inf^3 <= nu c" if bounded else "")}


_PREDICTORS = {"second_moment": _second_moment, "linear_regression": _regression, "pca": _pca,
               "count_sketch": _sketch, "tensor_decomposition": _tensor}
