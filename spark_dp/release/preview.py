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
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy import stats

from spark_dp.errors import BudgetExceededError, ConfigError
from spark_dp.privacy.accountant import compose_epsilon
from spark_dp.privacy.events import Event, event_to_dict

if TYPE_CHECKING:
    from spark_dp.release.pipeline import ReleasePlan
    from spark_dp.session import DPSession

DEFAULT_LEVEL = 0.95
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
        release_id: the given release id (None: the release would make a new one).
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
    accuracy = predict_accuracy(plan.task, plan.mechanism, plan.request, privacy, n=run.n)
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
    if rid is not None and (charge := session.ledger.lookup(rid)) is not None:
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
    location = charge.location or os.path.join(session.output, charge.release_id)
    if not os.path.isfile(os.path.join(location, "manifest.json")):
        return False, (f"Release id {charge.release_id!r} was charged (epsilon={charge.budget.epsilon:g}, "
                       f"delta={charge.budget.delta:g}) but its release was never written; the charge stands. "
                       "Use a new release id.")
    return True, None


def _stored_not_private(session: DPSession, plan: ReleasePlan, rid: str | None) -> tuple[bool, str | None]:
    from spark_dp.release.pipeline import NONPRIVATE_DIR, NONPRIVATE_PREFIX
    from spark_dp.release.release import load_release

    if rid is None:
        return False, None
    root = session.output
    if plan.mode == "nonprivate":
        rid = rid if rid.startswith(NONPRIVATE_PREFIX) else NONPRIVATE_PREFIX + rid
        root = os.path.join(root, NONPRIVATE_DIR)
    path = os.path.join(root, rid)
    if not os.path.isfile(os.path.join(path, "manifest.json")):
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

def _z(level: float) -> float:
    return float(stats.norm.ppf(0.5 + level / 2))


def gaussian_norm_bound(sigma: float, d: int, level: float = DEFAULT_LEVEL) -> float:
    """A bound on ‖E‖₂ for a symmetric d×d E with i.i.d. N(0, σ²) upper triangle, holding w.p. ≈ ``level``.

    E‖E‖₂ ≈ 2σ√d (the semicircle edge; below it for every d we simulated)
    plus Gaussian concentration: ‖E‖₂ is √2σ-Lipschitz in the standard
    normal upper triangle, so P(‖E‖ ≥ E‖E‖ + t) ≤ exp(−t²/(4σ²)),
    t = 2σ√ln(1/(1 − level)). By Weyl's inequality it bounds every
    eigenvalue's error.
    """
    return sigma * (2.0 * math.sqrt(d) + 2.0 * math.sqrt(math.log(1.0 / (1.0 - level))))


def median_noise_quantile(k: int, q: float) -> float:
    """The q-quantile of the median of k i.i.d. N(0, 1) (for even k the mean of the two middle ones: simulated).

    Odd k: P(median ≤ x) = P(Binomial(k, Φ(x)) ≥ (k + 1)/2), solved for x.
    """
    if k % 2 == 1:
        j = (k + 1) // 2  # the j-th order statistic: Φ(X_(j)) ~ Beta(j, k − j + 1)
        return float(stats.norm.ppf(stats.beta.ppf(q, j, k - j + 1)))
    rng = np.random.default_rng(20261202)  # public, data-independent: a simulation of the noise law only
    draws = np.median(rng.standard_normal((20_000, k)), axis=1)
    return float(np.quantile(draws, q))


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, int | float | np.integer | np.floating) and not isinstance(x, bool) else None


def predict_accuracy(task: str, mechanism: str, request: Mapping[str, Any], privacy: Mapping[str, Any], *,
                     n: int | None = None) -> dict[str, Any]:
    """The predicted noise of a release, from its public request and privacy fields (module doc).

    Returns a dict with ``level`` (the interval level: the request's
    ``confidence``, default 0.95), ``predicted`` (False where it cannot be
    said before seeing the data, with ``why``), ``method`` (how it was
    derived) and the task's figures.
    """
    level = float(request.get("confidence", DEFAULT_LEVEL) or DEFAULT_LEVEL)
    norm_bound = request.get("norm_bound")
    if task in ("second_moment", "linear_regression", "pca") and _num(norm_bound) is None:
        return {"level": level, "predicted": False,
                "why": ("norm_bound is chosen from the data (auto): the cost of that step is in the events above, "
                        "but its result — hence the noise scale of the release — is known only after it runs"),
                "method": None}
    fn = _PREDICTORS.get(task)
    if fn is None:
        return {"level": level, "predicted": False, "why": f"no accuracy model for task {task!r}", "method": None}
    return {"level": level, **fn(mechanism, request, dict(privacy), n, level)}


def _entry_noise(mechanism: str, request: Mapping[str, Any], privacy: Mapping[str, Any]) -> dict[str, Any] | None:
    """Per-entry noise of the released d×d second moment (None: data-dependent)."""
    d = int(request["dimension"])
    B = float(request["norm_bound"])
    if mechanism == "analyze_gauss":
        s = float(privacy["noise_scale"])
        return {"distribution": "gaussian", "stderr": s, "stderr_diagonal": s, "bias_diagonal": 0.0, "sigma": s,
                "method": "Analyze Gauss adds i.i.d. N(0, sigma^2) to each entry of the upper triangle (mirrored)"}
    if mechanism == "wishart":
        k = int(privacy["dof"])
        return {"distribution": "wishart (normal approximation)", "stderr": B * B * math.sqrt(k),
                "stderr_diagonal": B * B * math.sqrt(2 * k), "bias_diagonal": k * B * B,
                "sigma": B * B * math.sqrt(k),
                "method": (f"W ~ W_d(B^2 I, k), k = {k}: off-diagonal entries have variance k B^4, diagonal 2k B^4 "
                           "and mean k B^2 (removed by postprocess 'shift')")}
    if mechanism == "adassp":
        s1, s2, s3 = (float(x) for x in privacy["noise_scale"])
        return {"distribution": "gaussian", "stderr": s2, "stderr_diagonal": s2, "bias_diagonal": 0.0, "sigma": s2,
                "stderr_xty": s3, "stderr_lambda_min": s1,
                "method": "AdaSSP: N(0, s2^2) on each entry of X^T X, N(0, s3^2) on X^T y, N(0, s1^2) on lambda_min"}
    del d
    return None


def _relative_noise(mechanism: str, privacy: Mapping[str, Any]) -> dict[str, Any]:
    """JL / inverse-Wishart: the noise scales with the data; what is known is relative."""
    if mechanism == "jl_ridge":
        r, w2 = int(privacy["projection_rows"]), float(privacy["ridge_w"]) ** 2
        rows, what = r, "projection rows r"
    else:
        r, w2 = int(privacy["dof"]), float(privacy["ridge_w2"])
        rows, what = r, "degrees of freedom m"
    return {"predicted": False,
            "why": (f"the noise of {mechanism} scales with the data's own second moment: entry (i, j) has variance "
                    f"about (S_ij^2 + S_ii S_jj)/{what} with S = A^T A + w^2 I, so only relative sizes are known"),
            "relative_stderr_diagonal": math.sqrt(2.0 / rows),
            "ridge_bias_diagonal": w2,
            "method": (f"Wishart law of the release around S (r = {rows}); w^2 = {w2:.6g} is added to the diagonal "
                       "(removed by postprocess 'shift')")}


def _second_moment(mechanism, request, privacy, n, level) -> dict[str, Any]:
    d = int(request["dimension"])
    e = _entry_noise(mechanism, request, privacy)
    if e is None:
        return {"what": "entries of the d x d matrix", **_relative_noise(mechanism, privacy)}
    z = _z(level)
    out = {"predicted": True, "what": "entries of the d x d matrix", "method": e["method"],
           "per_entry": {"stderr": e["stderr"], "half_width": z * e["stderr"],
                         "stderr_diagonal": e["stderr_diagonal"], "half_width_diagonal": z * e["stderr_diagonal"],
                         "bias_diagonal": e["bias_diagonal"], "distribution": e["distribution"]},
           "noise_spectral_norm": gaussian_norm_bound(e["sigma"], d, level) if mechanism == "analyze_gauss" else
           e["sigma"] * (2.0 * math.sqrt(d)) + e["sigma"] * d / math.sqrt(int(privacy["dof"])),
           "noise_spectral_norm_method": ("2 sigma sqrt(d) + 2 sigma sqrt(ln(1/(1-level))) (semicircle edge + "
                                          "Gaussian concentration)" if mechanism == "analyze_gauss" else
                                          "Marchenko-Pastur edge of W - k B^2 I: B^2 (2 sqrt(k d) + d)")}
    if request.get("params", {}).get("postprocess") == "shift" and mechanism == "analyze_gauss":
        out["per_entry"]["bias_diagonal"] = 2.0 * e["sigma"] * math.sqrt(d)
        out["note"] = "postprocess 'shift' adds 2 sigma sqrt(d) to the diagonal"
    if n is not None:
        signal = n * float(request["norm_bound"]) ** 2 / d
        out["relative_to_signal"] = {"n": n, "typical_entry": signal, "ratio": e["stderr"] / signal,
                                     "assumption": "rows at the norm bound, spread evenly over the d coordinates: "
                                                   "a diagonal entry of A^T A is about n B^2 / d"}
    return out


def _regression(mechanism, request, privacy, n, level) -> dict[str, Any]:
    d = int(request["dimension"])  # features + label
    p = d - 1
    B = float(request["norm_bound"])
    ns = [n] if n is not None else list(N_GRID)
    e = _entry_noise(mechanism, request, privacy)
    if e is None:
        r = int(privacy.get("projection_rows") or privacy.get("dof"))
        return {"what": "coefficients", "predicted": False,
                "why": (f"the noise of {mechanism} scales with the data: the coefficients vary about as OLS "
                        f"coefficients fitted to r = {r} rows drawn from the data's second moment (plus the ridge "
                        "w^2), i.e. about sqrt(n/r) times the sampling standard error"),
                "noise_vs_sampling_stderr": [{"n": m, "factor": math.sqrt(m / r)} for m in ns],
                "method": "Wishart law of the release around A^T A + w^2 I (first order)"}
    c = B * B / d  # per-row second moment of one coordinate, rows at the bound spread evenly
    s_xx, s_xy = e["stderr"], e.get("stderr_xty", e["stderr"])
    z = _z(level)
    table = []
    for m in ns:
        se = s_xy / (m * c)
        table.append({"n": m, "stderr": se, "half_width": z * se, "stderr_per_unit_norm_beta": s_xx / (m * c)})
    n_stable = 2.0 * s_xx * math.sqrt(p) / c
    return {
        "what": "coefficients", "predicted": True, "per_coefficient": table,
        "n_for_stable_solve": n_stable,
        "method": ("first order: beta_hat - beta = (X^T X)^-1 (e_xy - E_xx beta), with X^T X about n c I, "
                   f"c = B^2/d = {c:.6g} (rows at the norm bound spread evenly over the d = {d} columns, label "
                   "included); stderr at beta = 0, add stderr_per_unit_norm_beta x ||beta|| in quadrature; "
                   "privacy noise only (sampling error comes on top); n_for_stable_solve: n at which the noise's "
                   "spectral norm (about 2 s sqrt(p)) equals n c, below it the solve is dominated by noise"),
        "noise": {"distribution": e["distribution"], "entry_stderr_xtx": s_xx, "entry_stderr_xty": s_xy},
    }


def _pca(mechanism, request, privacy, n, level) -> dict[str, Any]:
    d = int(request["dimension"])
    e = _entry_noise(mechanism, request, privacy)
    if e is None:
        return {"what": "eigenvalues", **_relative_noise(mechanism, privacy)}
    if mechanism == "analyze_gauss":
        bound, how = gaussian_norm_bound(e["sigma"], d, level), "2 sigma sqrt(d) + 2 sigma sqrt(ln(1/(1-level)))"
    else:
        k = int(privacy["dof"])
        B2 = float(request["norm_bound"]) ** 2
        bound, how = B2 * (2.0 * math.sqrt(k * d) + d), "Marchenko-Pastur edge of W - k B^2 I: B^2 (2 sqrt(k d) + d)"
    out = {"what": "eigenvalues", "predicted": True, "kind": "bound",
           "eigenvalue_error_bound": bound,
           "method": f"Weyl: |lambda_i(released) - lambda_i(exact)| <= ||E||_2 <= {how}",
           "subspace_angle": ("Davis-Kahan: sin(angle) <= 2 ||E||_2 / gap, gap = the exact eigengap after the "
                              "k-th eigenvalue (data-dependent)")}
    if n is not None:
        signal = n * float(request["norm_bound"]) ** 2 / d
        out["relative_to_signal"] = {"n": n, "typical_eigenvalue": signal, "ratio": bound / signal,
                                     "assumption": "an eigenvalue of A^T A about n B^2 / d"}
    return out


def _sketch(mechanism, request, privacy, n, level) -> dict[str, Any]:
    params = request.get("params", {})
    k = int(params.get("repetitions") or 1)
    b = params.get("buckets")
    scale = float(privacy["noise_scale"])
    a = (1.0 - level) / 2
    if mechanism in ("private_count_sketch",):
        lo, hi = scale * median_noise_quantile(k, a), scale * median_noise_quantile(k, 1 - a)
        method = (f"median of k = {k} counters, each + N(0, sigma^2): the order statistic's law "
                  "(Beta quantiles of Phi) for odd k, simulated for even k")
        sd = scale * float(np.std(np.median(np.random.default_rng(7).standard_normal((20_000, k)), axis=1)))
    elif mechanism == "count_min":
        # min of k i.i.d. Laplace(b): P(min <= x) = 1 - (1 - F(x))^k
        def q(u: float) -> float:
            return float(stats.laplace.ppf(1 - (1 - u) ** (1 / k), scale=scale))
        lo, hi = q(a), q(1 - a)
        sd = None
        method = f"min of k = {k} counters, each + Laplace(b): P(min <= x) = 1 - (1 - F(x))^k (biased low)"
    elif mechanism == "count_mean":
        bb = int(b)
        sd = scale * math.sqrt(bb / ((bb - 1) * k))
        lo, hi = -_z(level) * sd, _z(level) * sd
        method = (f"debiased mean (b mean_i X_i - N_hat)/(b - 1) over k = {k} counters: variance "
                  "sigma^2 b / ((b - 1) k), N_hat sharing the item's counters")
    else:  # histogram
        sd = scale
        lo, hi = -_z(level) * sd, _z(level) * sd
        method = "each count + N(0, sigma^2)"
    thr = params.get("heavy_hitters", {}).get("threshold")
    out = {"what": "the noise of each frequency estimate (hash collisions add to it for sketches)",
           "predicted": True, "per_estimate": {"low": lo, "high": hi, "stderr": sd}, "method": method}
    if thr is not None and mechanism == "private_count_sketch" and k % 2 == 1:
        j = (k + 1) // 2
        # P(median of the noise >= threshold) for an item that is absent (no collisions)
        fp = float(stats.beta.sf(stats.norm.cdf(float(thr) / scale), j, k - j + 1))
        out["heavy_hitter_threshold"] = {"threshold": float(thr), "false_positive_rate_per_absent_item": fp}
    if request.get("params", {}).get("heavy_hitters", {}).get("levels"):
        out["note"] = "every level of the dyadic stack has the same per-counter noise"
    return out


def _tensor(mechanism, request, privacy, n, level) -> dict[str, Any]:
    params = request.get("params", {})
    z = _z(level)
    if privacy.get("whiten"):
        return {"what": "eigenvalues", "predicted": False,
                "why": "whitening uses the released second moment: the power passes' noise scale depends on it",
                "method": None, "second_moment_sigma": privacy.get("second_moment_sigma")}
    if mechanism == "input_perturbation":
        s = float(privacy["noise_scale"])
        return {"what": "tensor entries", "predicted": True, "per_entry": {"stderr": s, "half_width": z * s},
                "method": "N(0, (sigma w)^2) on each unique entry (w = 1, 2, 6 by multiplicity); eigenvalue error "
                          "at most the noise tensor's spectral norm (data-independent, not computed here)"}
    if "nu" in privacy:  # explicit tensor, Alg. 3: sigma = nu c ||u||_inf^3 <= nu c for the eigenvalue estimate
        s = float(privacy["nu"]) * float(privacy.get("entry_scale", 1.0))
        return {"what": "eigenvalues", "predicted": True, "kind": "bound",
                "per_eigenvalue": {"stderr_at_most": s, "half_width_at_most": z * s},
                "method": "Alg. 3: each eigenvalue estimate + N(0, (nu c ||u||_inf^3)^2), ||u||_inf <= 1"}
    s = _num(privacy.get("noise_scale"))
    if s is None:
        return {"what": "eigenvalues", "predicted": False, "why": "the noise scale depends on the data",
                "method": None}
    rpr = params.get("rows_per_round")
    se = s / rpr if rpr else s
    return {"what": "eigenvalues", "predicted": True,
            "per_eigenvalue": {"stderr": se, "half_width": z * se},
            "power_step_entry_stderr": se,
            "method": ("each eigenvalue is one released sum over a pass's rows + N(0, sigma^2)"
                       + (f", divided by rows_per_round = {rpr}" if rpr else
                          " (eigenvalues of the sums: they grow with the rows per pass)"))}


_PREDICTORS = {"second_moment": _second_moment, "linear_regression": _regression, "pca": _pca,
               "count_sketch": _sketch, "tensor_decomposition": _tensor}
