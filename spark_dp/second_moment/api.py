"""Python API of the second-moment family: second moment, regression, PCA.

Every function validates its request (raising ConfigError/SchemaError before
anything is charged), plans the release's privacy events from public
parameters only (:func:`plan_mechanism`), and hands one
:class:`~spark_dp.release.pipeline.ReleasePlan` to
:func:`~spark_dp.release.pipeline.run_release`: budget dry run → exact summary on Spark → charge →
noise through the chokepoint → atomic write.

Mechanisms (``mechanism``): ``analyze_gauss`` (Dwork et al. 2014),
``jl_ridge``, ``wishart``, ``inverse_wishart`` (Sheffet, arXiv 1507.00056),
and ``adassp`` (Wang 2018; linear regression only).

``postprocess`` (no privacy cost): ``none``; ``psd`` (negative eigenvalues →
0; for the Sheffet mechanisms applied after the shift); ``shift`` — Analyze
Gauss adds c·I, c = 2σ√d ≈ E‖N‖ (the paper's choice); Wishart subtracts its
mean k·B²·I; JL and inverse-Wishart subtract the ridge w²·I.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from pyspark.sql import DataFrame

from spark_dp import _validation as V
from spark_dp import params as P
from spark_dp.aggregates import gram_matrix, vector_dimension
from spark_dp.aggregates._scan import choose_source_paths
from spark_dp.aggregates._vectors import Affine
from spark_dp.aggregates.gram import gram_matrix_parquet
from spark_dp.errors import ConfigError
from spark_dp.privacy import Budget, Chokepoint
from spark_dp.privacy.quantile import NORM_GRID, QuantilePlan, plan_quantile, private_quantile
from spark_dp.release import Release
from spark_dp.release.lineage import input_lineage
from spark_dp.release.pipeline import Noised, ReleasePlan, confidence_of, confidence_request, run_release
from spark_dp.release.uncertainty import Uncertainty
from spark_dp.second_moment._registry import MechanismPlan
from spark_dp.second_moment._scaling import Scaling
from spark_dp.second_moment.intervals import regression_bootstrap
from spark_dp.second_moment.mechanisms import (  # noqa: F401 - re-exported: the API's names for the registry
    MECHANISMS,
    PCA_MECHANISMS,
    REGRESSION_MECHANISMS,
    SECOND_MOMENT_MECHANISMS,
    THEOREM_NEIGHBORS,
    bound_planner,
    default_projection_rows,
    plan_mechanism,
    release_events,
)
from spark_dp.second_moment.mechanisms import PARAMS as SM_PARAMS
from spark_dp.second_moment.pca import principal_components
from spark_dp.second_moment.regression import regression_coefficients, solve_normal_equations
from spark_dp.second_moment.uncertainty import adassp_uncertainty, drop_index, matrix_uncertainty, pca_uncertainty

if TYPE_CHECKING:
    from spark_dp.session import DPSession

DEFAULT_NORM_BOUND_SHARE = 0.1
DEFAULT_NORM_BOUND_QUANTILE = 0.95
#: A regression's rows are clipped with their constant and label, which only reweights them (the linear
#: relation y = xβ + b·c survives scaling the row): a low quantile costs little bias and saves noise
#: (docs/accuracy.md: the median is within 1.1x of the best hand-chosen bound on the worked example).
REGRESSION_NORM_BOUND_QUANTILE = 0.5


def _check_common(owner, epsilon, delta, norm_bound, neighbors, postprocess, nonfinite, max_rows_per_unit, privacy_unit,
                  bounds=None, norm_bound_share=DEFAULT_NORM_BOUND_SHARE,
                  norm_bound_quantile=DEFAULT_NORM_BOUND_QUANTILE):
    epsilon, delta = (P.check(n, v, owner=owner) for n, v in (("epsilon", epsilon), ("delta", delta)))
    norm_bound = P.check("norm_bound_or_auto", norm_bound, owner=owner, key="norm_bound")
    for name, value in (("neighbors", neighbors), ("nonfinite", nonfinite), ("privacy_unit", privacy_unit)):
        P.check(name, value, owner=owner)
    SM_PARAMS.check("postprocess", postprocess, owner=owner)
    bounds = P.check("bounds", bounds, owner=owner)
    share = P.check("norm_bound_share", norm_bound_share, owner=owner)
    quantile = P.check("norm_bound_quantile", norm_bound_quantile, owner=owner)
    return (epsilon, delta, norm_bound, P.check("max_rows_per_unit", max_rows_per_unit, owner=owner), bounds,
            share, quantile)


@dataclass(frozen=True)
class _Vector:
    """What a release's vector is: its columns, public bounds, constant column and norm bound.

    ``norm_bound`` is a number, or ``"auto"`` with ``quantile`` the plan of
    its private choice. The constant column holds 1 with bounds (every
    bounded entry is in [-1, 1]); without bounds (a regression intercept on
    raw columns) it holds B/√d, an equal share of the norm bound.
    """

    columns: list[str] | str
    names: tuple[str, ...]
    bounds: dict[str, tuple[float, float]] | None
    constant_at: int | None
    size: int
    norm_bound: float | str
    quantile: QuantilePlan | None = None

    @property
    def scaled(self) -> bool:
        return self.bounds is not None or self.constant_at is not None

    def constant_value(self, norm_bound: float) -> float:
        return 1.0 if self.bounds is not None else norm_bound / math.sqrt(self.size)

    def scaling(self, norm_bound: float) -> Scaling:
        return Scaling.of(self.names, self.bounds, constant_at=self.constant_at,
                          constant_value=self.constant_value(norm_bound))

    def affine(self, norm_bound: float | None) -> Affine | None:
        """The vector's Affine; ``norm_bound`` None: for the row norms of ``auto`` (no constant without bounds)."""
        if not self.scaled:
            return None
        bounds = tuple((self.bounds or {}).get(c) for c in self.names)
        if norm_bound is None and self.bounds is None:
            return Affine(bounds)
        return Affine(bounds, self.constant_at, self.constant_value(norm_bound or 1.0))

    @property
    def fully_bounded(self) -> bool:
        return self.bounds is not None and all(c in self.bounds for c in self.names)

    def grid(self) -> np.ndarray:
        """The public candidates of ``auto``: 2^(j/4); with every column bounded only those in [√d/256, √d], and √d."""
        if not self.fully_bounded:
            return NORM_GRID
        top = math.sqrt(self.size)
        return np.append(NORM_GRID[(NORM_GRID >= top / 256) & (NORM_GRID < top * (1 - 1e-12))], top)

    def bound_from_quantile(self, q: float) -> float:
        """B from the selected row-norm quantile (rows without the B/√d constant: B² = q²·d/(d − 1))."""
        if self.bounds is None and self.constant_at is not None:
            return q * math.sqrt(self.size / (self.size - 1))
        return q


def _vector(owner: str, df: DataFrame, columns, dimension, *, bounds, norm_bound, constant_at, epsilon, share,
            quantile, max_rows_per_unit, neighbors, what: str = "column") -> _Vector:
    """Validates the vector's definition against the schema (no Spark job) and plans ``norm_bound="auto"``."""
    names = (columns,) if isinstance(columns, str) else tuple(columns)
    d = vector_dimension(df, columns, dimension)  # schema check, no Spark job
    if bounds is not None:
        unknown = [c for c in bounds if c not in names]
        if unknown:
            raise ConfigError(f"The 'bounds' parameter of {owner} names {unknown[0]!r}, which is not one of the "
                              f"release's columns {list(names)}.")
        if d != len(names):
            raise ConfigError(f"The 'bounds' parameter of {owner} applies to numeric columns only; give the "
                              "elements of an array or vector column as columns.")
    size = d + (constant_at is not None)
    if norm_bound is None:
        if bounds is None or any(c not in bounds for c in names):
            raise ConfigError(f"The 'norm_bound' parameter of {owner} is required unless every {what} has bounds; "
                              "give a number or 'auto'.")
        norm_bound = math.sqrt(size)
    qplan = None
    if norm_bound == "auto":
        qplan = plan_quantile(epsilon * share, quantile, max_rows_per_unit=max_rows_per_unit, neighbors=neighbors)
    return _Vector(columns, names, bounds, constant_at, size, norm_bound, qplan)


def _mechanism_budget(vec: _Vector, epsilon: float) -> float:
    """The ε the mechanism is calibrated to: all of it, or what ``norm_bound="auto"`` leaves."""
    return epsilon if vec.quantile is None else epsilon - vec.quantile.epsilon


def _auto_privacy(plan_for: Callable[[float], MechanismPlan], epsilon: float, vec: _Vector) -> dict:
    """The manifest privacy fields of an ``auto`` release: the B-dependent numbers are stated after the choice."""
    one, two = plan_for(1.0).privacy, plan_for(2.0).privacy
    later = "chosen with the norm bound: see norm_bound_auto"
    out = {k: (later if one[k] != two.get(k) else v) for k, v in one.items()}
    assert vec.quantile is not None
    return {**out, "epsilon": epsilon, "mechanism_epsilon": _mechanism_budget(vec, epsilon),
            "norm_bound": "auto", "norm_bound_epsilon": vec.quantile.epsilon}


def _release(
    session: DPSession, df: DataFrame, vec: _Vector, *, task: str, plan_for: Callable[[float], MechanismPlan],
    request: dict, finish: Callable[[Any, float, MechanismPlan], Noised], release_id, nonfinite, dimension,
    privacy_unit, max_rows_per_unit, config_sha256, extra: dict, source_paths: Sequence[str] | None = None,
) -> Release:
    plan = plan_for(1.0 if vec.quantile is not None else float(vec.norm_bound))

    def exact(norm_bound: float):
        affine = vec.affine(norm_bound)
        if not plan.needs_gram:
            from spark_dp.aggregates.jl import jl_projection

            # The JL projection needs the key, drawn only after the charge: the
            # single pass over the data runs inside noise().
            def project(key: int) -> np.ndarray:
                return jl_projection(df, vec.columns, r=plan.params["projection_rows"], key=key,
                                     norm_bound=norm_bound, nonfinite=nonfinite, dimension=dimension,
                                     privacy_unit=privacy_unit, max_rows_per_unit=max_rows_per_unit,
                                     row_ids=plan.params["row_ids"], affine=affine)

            return project
        # Given, or detected when df is a plain Parquet scan (aggregates/_scan.py); not for rows with an affine map.
        paths = None if affine is not None else choose_source_paths(
            df, vec.columns, source_paths, owner=task,
            unsupported="privacy_unit needs a shuffle" if privacy_unit else None)
        if paths:
            # Same matrix, with the tasks reading the Parquet files themselves
            # (skips the JVM -> Arrow conversion; docs/benchmarks.md).
            return gram_matrix_parquet(paths, vec.columns, norm_bound=norm_bound, nonfinite=nonfinite,
                                       dimension=dimension, privacy_unit=privacy_unit,
                                       max_rows_per_unit=max_rows_per_unit, spark=df.sparkSession)
        return gram_matrix(df, vec.columns, norm_bound=norm_bound, nonfinite=nonfinite, dimension=dimension,
                           privacy_unit=privacy_unit, max_rows_per_unit=max_rows_per_unit, affine=affine)

    def compute():
        if vec.quantile is None:
            return exact(float(vec.norm_bound))
        # norm_bound="auto": the exact row-norm histogram now; B, the Gram pass and the noise after the charge.
        from spark_dp.aggregates.norms import norm_counts

        return norm_counts(df, vec.columns, vec.grid(), nonfinite=nonfinite, dimension=dimension,
                           privacy_unit=privacy_unit, max_rows_per_unit=max_rows_per_unit, affine=vec.affine(None))

    def noise(summary, cp: Chokepoint) -> Noised:
        if vec.quantile is None:
            return finish(plan.noise(summary, cp), float(vec.norm_bound), plan)
        chosen_q = private_quantile(cp, vec.quantile, summary, vec.grid())
        norm_bound = vec.bound_from_quantile(chosen_q)
        chosen = plan_for(norm_bound)
        if list(chosen.events) != list(plan.events):
            raise RuntimeError("bug: the mechanism's events changed with the chosen norm bound")
        noised = finish(chosen.noise(exact(norm_bound), cp), norm_bound, chosen)
        stated = {k: chosen.privacy[k] for k in ("noise_scale", "noise_sigma", "sensitivity") if k in chosen.privacy}
        return Noised(noised.arrays, {**noised.manifest, "norm_bound_auto": {
            **vec.quantile.manifest(), **({"grid": "2^(j/4) in [sqrt(d)/256, sqrt(d)], and sqrt(d) (every column "
                                          "bounded: no row norm exceeds sqrt(d))"} if vec.fully_bounded else {}),
            "selected_quantile": chosen_q, "norm_bound": norm_bound, **stated}})

    privacy = {**plan.privacy, "privacy_unit": privacy_unit or "row", "max_rows_per_unit": max_rows_per_unit}
    if vec.quantile is not None:
        privacy = {**_auto_privacy(plan_for, request["epsilon"], vec), "privacy_unit": privacy_unit or "row",
                   "max_rows_per_unit": max_rows_per_unit}
    events = tuple(release_events(plan_for, vec.norm_bound, vec.quantile))
    return run_release(session, ReleasePlan(
        task=task, mechanism=plan.mechanism, release_id=release_id, request=request, events=events,
        budget=Budget(request["epsilon"], request["delta"]), compute=compute, noise=noise, privacy=privacy,
        manifest=extra, config_sha256=config_sha256, lineage=functools.partial(input_lineage, df),
    ))


def _request(session, task, mechanism, columns, d, params, epsilon, delta, norm_bound, neighbors, nonfinite,
             privacy_unit, max_rows_per_unit, config_sha256, vec: _Vector | None = None, **more):
    # Fields added by issue #14 enter the request only when used, so older requests keep their digest.
    if vec is not None and vec.bounds is not None:
        more["bounds"] = {c: list(b) for c, b in vec.bounds.items()}
    if vec is not None and vec.quantile is not None:
        more["norm_bound_auto"] = {"share": vec.quantile.epsilon / epsilon, "quantile": vec.quantile.alpha}
    return {
        "dataset_id": session.dataset_id, "task": task, "mechanism": mechanism, "columns": columns, "dimension": d,
        "params": params, "epsilon": epsilon, "delta": delta, "norm_bound": norm_bound, "neighbors": neighbors,
        "nonfinite": nonfinite, "privacy_unit": privacy_unit, "max_rows_per_unit": max_rows_per_unit,
        "sampler": session.sampler.name, "config_sha256": config_sha256, **more,
    }


def _extra(columns, params, norm_bound, nonfinite, privacy_unit, vec: _Vector | None = None, **more):
    clipping = (f"rows scaled to L2 norm <= {norm_bound:g}" if not isinstance(norm_bound, str) else
                "rows scaled to L2 norm <= B, B chosen privately (norm_bound_auto)")
    if vec is not None and vec.scaled:
        more["scaling"] = vec.scaling(1.0 if isinstance(norm_bound, str) else norm_bound).manifest()
        if vec.bounds is None:
            more["scaling"]["constant_column"]["value"] = "B/sqrt(d)"
    return {"columns": columns, "params": params, "policies": {
        "nonfinite": nonfinite if vec is None or vec.bounds is None else
        f"{nonfinite} (with bounds: NaN/inf/null are not clamped; 'zero' sets the scaled entry to the bounds' centre)",
        "clipping": clipping,
        "null_privacy_unit": "rows with a null unit form one unit" if privacy_unit else None,
    }, **more}


def _prepare(owner, df, columns, dimension, *, constant_at, mechanism, allowed, epsilon, delta, norm_bound, bounds,
             neighbors, postprocess, nonfinite, max_rows_per_unit, privacy_unit, share, quantile, what="column",
             **mech_kw):
    """The validation and planning the three family functions share: (ε, δ, vector, plan_for, plan params)."""
    epsilon, delta, norm_bound, max_rows_per_unit, bounds, share, quantile = _check_common(
        owner, epsilon, delta, norm_bound, neighbors, postprocess, nonfinite, max_rows_per_unit, privacy_unit,
        bounds, share, quantile)
    V.check_option("mechanism", mechanism, allowed, owner=owner)
    vec = _vector(owner, df, columns, dimension, bounds=bounds, norm_bound=norm_bound, constant_at=constant_at,
                  epsilon=epsilon, share=share, quantile=quantile, max_rows_per_unit=max_rows_per_unit,
                  neighbors=neighbors, what=what)
    plan_for = bound_planner(mechanism, size=vec.size, epsilon=epsilon, quantile=vec.quantile, owner=owner,
                             delta=delta, neighbors=neighbors, max_rows_per_unit=max_rows_per_unit,
                             postprocess=postprocess, **mech_kw)
    params = plan_for(1.0 if vec.quantile is not None else float(vec.norm_bound)).params
    return epsilon, delta, vec, plan_for, params


def _data_matrix(vec: _Vector, matrix: np.ndarray, norm_bound: float, *, keep_constant: bool = False) -> np.ndarray:
    """A released second moment of the vector in the data's units (exact post-processing); as is when unscaled."""
    if not vec.scaled:
        return matrix
    out = vec.scaling(norm_bound).to_data_units(matrix)
    k = vec.constant_at
    if keep_constant or k is None:
        return out
    return np.delete(np.delete(out, k, axis=0), k, axis=1)


def _data_matrix_uncertainty(vec: _Vector, plan: MechanismPlan, released: np.ndarray, norm_bound: float,
                             postprocess: str, level: float, *, keep_constant: bool = False) -> dict[str, Uncertainty]:
    """``{"matrix": …}`` for the release mapped to the data's units (:func:`.uncertainty.matrix_uncertainty`)."""
    t = vec.scaling(norm_bound).transform() if vec.scaled else None
    u = matrix_uncertainty(plan.mechanism, plan.privacy, plan.params, released, norm_bound, level, transform=t)
    k = vec.constant_at
    return {} if u is None else {"matrix": drop_index(u, k) if vec.scaled and not keep_constant and k is not None
                                 else u}


def second_moment(
    session: DPSession,
    df: DataFrame,
    columns: Sequence[str],
    *,
    epsilon: float,
    delta: float,
    norm_bound: float | str | None = None,
    mechanism: str = "analyze_gauss",
    bounds: dict[str, tuple[float, float]] | None = None,
    release_id: str | None = None,
    confidence: float = 0.95,
    neighbors: str = "add_remove",
    postprocess: str = "none",
    nonfinite: str = "drop",
    dimension: int | None = None,
    privacy_unit: str | None = None,
    max_rows_per_unit: int = 1,
    projection_rows: int | None = None,
    dof: int | None = None,
    public_n: int | None = None,
    prior_dof: int | None = None,
    calibration: str = "exact",
    row_ids: str = "content",
    projection: str = "gram",
    config_sha256: str | None = None,
    source_paths: Sequence[str] | None = None,
    norm_bound_share: float = DEFAULT_NORM_BOUND_SHARE,
    norm_bound_quantile: float = DEFAULT_NORM_BOUND_QUANTILE,
) -> Release:
    """Releases a private AᵀA of the rows of ``df[columns]``.

    Args:
        df: the data.
        columns: numeric columns, or one array/vector column (with
            ``dimension``), in the order of the matrix's rows.
        epsilon, delta: the release's (ε, δ).
        norm_bound: B; rows are clipped to ‖a‖₂ ≤ B. May be omitted when
            every column has ``bounds`` (then B = √d for the d scaled
            entries, the constant column included: no row is clipped).
            ``"auto"``: B is chosen privately from the data — the
            ``norm_bound_quantile`` quantile of the row norms, selected over
            the public grid 2^(j/4) by the exponential mechanism (Smith 2011;
            OpenDP's quantile scores and noisy max; permute-and-flip,
            McKenna & Sheldon 2020) at ε·``norm_bound_share``, charged as
            its own event of the same release (the mechanism gets the rest
            of ε; the manifest's ``norm_bound_auto`` states the choice).
            It costs one extra pass over the data (the row-norm histogram).
        mechanism: ``analyze_gauss``, ``jl_ridge``, ``wishart`` or
            ``inverse_wishart``.
        bounds: public per-column bounds in the data's units,
            ``{column: (lo, hi)}``. Each value is clamped to [lo, hi] and
            mapped to [−1, 1] (centre → 0) in the Spark expression that
            builds the vector, with a constant column 1 appended so that the
            release maps back exactly: ``matrix`` is Σ xxᵀ in the data's
            units (T·M·Tᵀ, see :mod:`spark_dp.second_moment._scaling`),
            computed from the release and the public bounds only. NaN, inf
            and null are not clamped: the ``nonfinite`` policy applies as
            without bounds (``zero`` puts the entry at its bounds' centre).
            Not for array/vector columns. With Analyze Gauss (post-processing
            ``none``) ``matrix`` carries intervals in the data's units: the
            noise mapped back, T·N·Tᵀ, has an exact per-entry sd.
        release_id: idempotency key; a new one is made if None. A release
            id seen before returns the stored release (no new noise or
            charge).
        confidence: the level of the intervals released with every array
            (columns ``stderr``/``low``/``high``; ``Release.interval``),
            in (0, 1); post-processing, no privacy cost.
        neighbors: ``add_remove`` (default) or ``replace``.
        postprocess: ``none``, ``psd`` or ``shift`` (see the module doc).
        nonfinite: ``drop`` (default) or ``zero`` for rows with NaN/inf/null.
        dimension: vector length for an array/vector column.
        privacy_unit, max_rows_per_unit: contribution bounding per unit
            (Sheffet mechanisms: one row per unit).
        projection_rows: r of ``jl_ridge`` (default max(400, 2d)).
        dof: k of ``wishart`` (default Sheffet's minimum) or m of
            ``inverse_wishart`` (default max(400, 2d)).
        public_n, prior_dof: ``inverse_wishart`` only: the paper's posterior
            m = public_n + prior_dof (default prior_dof = d + 2) with n
            public, which needs ``neighbors="replace"``; instead of ``dof``.
        calibration: ``exact`` (default) or ``paper`` (the published
            constants: jl_ridge's w², Analyze Gauss's σ = Δ√(2 ln(2/δ))/ε
            with ε < 1; Wishart's k is the paper's bound either way).
        row_ids: jl_ridge's row ids with ``projection="rows"``: ``content``
            (default, partition-independent) or ``partition`` (no shuffle; see
            :mod:`spark_dp.aggregates.jl`).
        projection: how jl_ridge draws RÃ: ``gram`` (default; one exact Gram
            pass, then RÃ drawn on the driver in its exact distribution, rows
            i.i.d. N(0, AᵀA + w²I) — the same release distribution, ≈ the
            Gram kernel's cost) or ``rows`` (R's columns drawn per data row on
            the executors, as the paper describes it).
        config_sha256: digest of the job config, recorded in the manifest.
        source_paths: the Parquet files ``df`` is a plain read of (as the job
            passes for ``format: parquet``); the exact Gram matrix is then
            computed by the tasks reading them with pyarrow — the same matrix,
            without the JVM → Arrow conversion. Leave None for any other
            DataFrame. The linear_regression and pca functions take it too.
            Ignored with ``bounds`` (the scaling is a Spark expression).
        norm_bound_share: the share of ε spent on ``norm_bound="auto"``
            (default 0.1).
        norm_bound_quantile: the quantile of the row norms it targets
            (default 0.95; rows above it are clipped).

    Returns:
        A :class:`Release` with array ``matrix`` of shape (d, d) (in the
        data's units with ``bounds``).
    """
    owner = "second_moment"
    columns = list(columns) if not isinstance(columns, str) else columns
    names = [columns] if isinstance(columns, str) else columns
    epsilon, delta, vec, plan_for, params = _prepare(
        owner, df, columns, dimension, constant_at=len(names) if bounds is not None else None, mechanism=mechanism,
        allowed=SECOND_MOMENT_MECHANISMS, epsilon=epsilon, delta=delta, norm_bound=norm_bound, bounds=bounds,
        neighbors=neighbors, postprocess=postprocess, nonfinite=nonfinite, max_rows_per_unit=max_rows_per_unit,
        privacy_unit=privacy_unit, share=norm_bound_share, quantile=norm_bound_quantile,
        projection_rows=projection_rows, dof=dof, public_n=public_n, prior_dof=prior_dof, calibration=calibration,
        row_ids=row_ids, projection=projection)
    d = vec.size - (vec.constant_at is not None)
    request = _request(session, "second_moment", mechanism, columns, d, params, epsilon, delta, vec.norm_bound,
                       neighbors, nonfinite, privacy_unit, max_rows_per_unit, config_sha256, vec=vec,
                       **confidence_request(P.check("confidence", confidence, owner=owner)))

    def finish(released, norm_bound: float, plan: MechanismPlan) -> Noised:
        matrix = _data_matrix(vec, released, norm_bound)
        return Noised({"matrix": matrix}, uncertainty=_data_matrix_uncertainty(
            vec, plan, released, norm_bound, postprocess, confidence_of(request)))

    return _release(session, df, vec, task="second_moment", plan_for=plan_for, request=request,
                    finish=finish, release_id=release_id,
                    nonfinite=nonfinite, dimension=dimension, privacy_unit=privacy_unit,
                    max_rows_per_unit=max_rows_per_unit, config_sha256=config_sha256,
                    extra=_extra(columns, params, vec.norm_bound, nonfinite, privacy_unit, vec),
                    source_paths=source_paths)


def linear_regression(
    session: DPSession,
    df: DataFrame,
    columns: Sequence[str],
    label: str,
    *,
    epsilon: float,
    delta: float,
    norm_bound: float | str | None = None,
    mechanism: str = "analyze_gauss",
    ridge: float = 0.0,
    bounds: dict[str, tuple[float, float]] | None = None,
    fit_intercept: bool = True,
    release_id: str | None = None,
    confidence: float = 0.95,
    neighbors: str = "add_remove",
    postprocess: str = "none",
    nonfinite: str = "drop",
    privacy_unit: str | None = None,
    max_rows_per_unit: int = 1,
    projection_rows: int | None = None,
    dof: int | None = None,
    public_n: int | None = None,
    prior_dof: int | None = None,
    calibration: str = "exact",
    row_ids: str = "content",
    projection: str = "gram",
    config_sha256: str | None = None,
    source_paths: Sequence[str] | None = None,
    norm_bound_share: float = DEFAULT_NORM_BOUND_SHARE,
    norm_bound_quantile: float = REGRESSION_NORM_BOUND_QUANTILE,
) -> Release:
    """Private OLS/ridge coefficients of ``label`` on ``columns``, with an intercept by default.

    The mechanism releases a private [X 1 y]ᵀ[X 1 y] (rows clipped to
    ‖·‖₂ ≤ B); β̂ solves (M_XX + ridge·I)β = M_Xy with the fallback of
    :mod:`spark_dp.second_moment.regression`. ``adassp`` runs Wang's
    Algorithm 2 instead (its adaptive ridge is added to ``ridge``'s none).

    Intercept (``fit_intercept=True``, the default): the constant-column
    construction — a column of constants sits between the features and the
    label, so the intercept is one more coefficient of the same release. Its
    cost: one more row and column of noise (d + 1 entries) and a share of the
    norm bound — with ``bounds`` the constant is 1 and B² grows from p + 1 to
    p + 2 (σ ∝ B², so the noise grows by (p + 2)/(p + 1)); without bounds the
    constant is B/√(p + 2), an equal share of B, so rows whose [x, y] norm
    exceeds B·√((p + 1)/(p + 2)) are now clipped. No extra privacy budget.
    ``fit_intercept=False`` fits through the origin (the only fit before intercepts existed).

    Args:
        columns: numeric feature columns (p of them).
        label: the numeric label column (must not be in ``columns``).
        ridge: λ ≥ 0 added to the diagonal of M_XX (post-processing; with
            ``bounds`` on the scaled coefficients, the intercept's included).
        bounds: as for :func:`second_moment`, for the features and the label;
            the fit runs on the scaled vector and ``coefficients`` and
            ``intercept`` are mapped back to the data's units exactly (an
            affine change of variables; without an intercept the fit through
            the origin is solved on ``matrix`` in the data's units).
        fit_intercept: fit an intercept (default True).
        norm_bound: as for :func:`second_moment`; may be omitted when every
            feature and the label have ``bounds`` (then B = √(p + 2)).
            ``"auto"`` targets the median row norm by default
            (``norm_bound_quantile=0.5``; see ``REGRESSION_NORM_BOUND_QUANTILE``).
        Others: as for :func:`second_moment`.

    Returns:
        A :class:`Release` with ``coefficients`` (p,; in ``columns`` order,
        the data's units), ``intercept`` (1,; with ``fit_intercept``) and
        ``matrix`` (label last; with the constant column of ones before the
        label when there is one, in the data's units); for ``adassp``,
        ``coefficients``, ``intercept``, ``xtx``, ``xty`` and ``lambda``
        instead of ``matrix``. With the constant column (an intercept or
        ``bounds``) and ``analyze_gauss`` (post-processing ``none`` or
        ``shift``), ``coefficients`` and ``intercept`` carry intervals at
        ``confidence`` (``Release.interval``) that cover the privacy noise
        and the sampling error
        (:mod:`spark_dp.second_moment.intervals`: the parametric bootstrap
        of Ferrando, Wang & Sheldon 2022, from the released matrix only).
    """
    owner = "linear_regression"
    ridge, label = P.check("ridge", ridge, owner=owner), SM_PARAMS.check("label", label, owner=owner)
    fit_intercept = P.check("fit_intercept", fit_intercept, owner=owner)
    if isinstance(columns, str):
        columns = [columns]
    columns = list(columns)
    if label in columns:
        raise ConfigError(f"The 'label' parameter of {owner} must not be one of the feature columns. Got {label!r} instead.")
    if mechanism == "adassp" and bounds is not None and not fit_intercept:
        raise ConfigError(f"The 'fit_intercept' parameter of {owner} must be true for mechanism 'adassp' with bounds "
                          "(its coefficients map back to the data's units through the intercept column).")
    all_columns = columns + [label]
    p = len(columns)
    constant_at = p if (fit_intercept or bounds is not None) else None  # before the label: the label stays last
    epsilon, delta, vec, plan_for, params = _prepare(
        owner, df, all_columns, None, constant_at=constant_at, mechanism=mechanism, allowed=REGRESSION_MECHANISMS,
        epsilon=epsilon, delta=delta, norm_bound=norm_bound, bounds=bounds, neighbors=neighbors,
        postprocess=postprocess, nonfinite=nonfinite, max_rows_per_unit=max_rows_per_unit, privacy_unit=privacy_unit,
        share=norm_bound_share, quantile=norm_bound_quantile, what="column (the label included)",
        projection_rows=projection_rows, dof=dof, public_n=public_n, prior_dof=prior_dof, calibration=calibration,
        row_ids=row_ids, projection=projection)
    params = {**params, "ridge": ridge}
    more = {"label": label, **({"fit_intercept": True} if fit_intercept else {})}
    request = _request(session, "linear_regression", mechanism, columns, p + 1, params, epsilon, delta,
                       vec.norm_bound, neighbors, nonfinite, privacy_unit, max_rows_per_unit, config_sha256,
                       vec=vec, **more, **confidence_request(P.check("confidence", confidence, owner=owner)))

    def finish(result, norm_bound: float, plan: MechanismPlan) -> Noised:
        scaling = vec.scaling(norm_bound)
        label_at = vec.size - 1

        def split(coefs: np.ndarray) -> dict[str, np.ndarray]:
            if not fit_intercept:
                return {"coefficients": coefs}
            return {"coefficients": np.delete(coefs, p), "intercept": coefs[p:p + 1]}

        if mechanism == "adassp":
            info, lam = result["info"], float(result["lambda"][0])
            beta, xtx, xty = result["coefficients"], result["xtx"], result["xty"]
            if ridge:  # the user's ridge on top of the adaptive one (post-processing)
                beta, info = solve_normal_equations(xtx, xty, ridge=ridge + lam)
            unc = adassp_uncertainty(result["xtx"], result["xty"], beta, plan.privacy["noise_scale"],
                                     confidence_of(request), ridge=ridge + lam, scaling=scaling if vec.scaled else None)
            arrays = {"lambda": result["lambda"]}
            if vec.scaled:
                joint = np.block([[xtx, xty[:, None]], [xty[None, :], np.zeros((1, 1))]])
                data = _data_matrix(vec, joint, norm_bound, keep_constant=True)
                xtx, xty, beta = data[:-1, :-1], data[:-1, -1], scaling.coefficients(beta, label_at)
            out = {**split(beta), "xtx": xtx, "xty": xty, **arrays}
            return Noised(out, {"solution": {**info, "adaptive_ridge": lam}}, uncertainty=unc)
        uncertainty: dict[str, Uncertainty] = {}
        if fit_intercept or not vec.scaled:
            beta, info = regression_coefficients(result, ridge=ridge)
            if vec.scaled:
                uncertainty = _intervals(result, beta, plan, scaling, label_at, ridge, postprocess,
                                         confidence_of(request))
                beta = scaling.coefficients(beta, label_at)
        else:  # bounds without an intercept: the no-intercept fit in the data's units
            beta, info = regression_coefficients(_data_matrix(vec, result, norm_bound), ridge=ridge)
        matrix = _data_matrix(vec, result, norm_bound, keep_constant=True)
        uncertainty.update(_data_matrix_uncertainty(vec, plan, result, norm_bound, postprocess, confidence_of(request),
                                                    keep_constant=True))
        return Noised({**split(beta), "matrix": matrix}, {"solution": info}, uncertainty=uncertainty)

    return _release(session, df, vec, task="linear_regression", plan_for=plan_for, request=request, finish=finish,
                    release_id=release_id, nonfinite=nonfinite, dimension=None,
                    privacy_unit=privacy_unit, max_rows_per_unit=max_rows_per_unit, config_sha256=config_sha256,
                    extra=_extra(columns, params, vec.norm_bound, nonfinite, privacy_unit, vec, **more),
                    source_paths=source_paths)


def pca(
    session: DPSession,
    df: DataFrame,
    columns: Sequence[str],
    k: int,
    *,
    epsilon: float,
    delta: float,
    norm_bound: float | str | None = None,
    mechanism: str = "analyze_gauss",
    bounds: dict[str, tuple[float, float]] | None = None,
    release_id: str | None = None,
    confidence: float = 0.95,
    neighbors: str = "add_remove",
    postprocess: str = "none",
    nonfinite: str = "drop",
    dimension: int | None = None,
    privacy_unit: str | None = None,
    max_rows_per_unit: int = 1,
    projection_rows: int | None = None,
    dof: int | None = None,
    public_n: int | None = None,
    prior_dof: int | None = None,
    calibration: str = "exact",
    row_ids: str = "content",
    projection: str = "gram",
    config_sha256: str | None = None,
    source_paths: Sequence[str] | None = None,
    norm_bound_share: float = DEFAULT_NORM_BOUND_SHARE,
    norm_bound_quantile: float = DEFAULT_NORM_BOUND_QUANTILE,
) -> Release:
    """Top-k principal components of the private second-moment matrix.

    (Uncentred: the eigenpairs of AᵀA; centre the data first, or add a
    constant column, for covariance PCA.) With ``bounds`` (as for
    :func:`second_moment`) the mechanism runs on the scaled vector and the
    released matrix is mapped back to the data's units exactly; the
    principal directions are those of that matrix, in the original
    coordinates (so columns in large units dominate, as without bounds).

    Returns:
        A :class:`Release` with ``eigenvalues`` (k,), ``eigenvectors``
        (k, d; row i = component i) and ``matrix`` (d, d).
    """
    owner = "pca"
    columns = list(columns) if not isinstance(columns, str) else columns
    names = [columns] if isinstance(columns, str) else columns
    epsilon, delta, vec, plan_for, params = _prepare(
        owner, df, columns, dimension, constant_at=len(names) if bounds is not None else None, mechanism=mechanism,
        allowed=PCA_MECHANISMS, epsilon=epsilon, delta=delta, norm_bound=norm_bound, bounds=bounds,
        neighbors=neighbors, postprocess=postprocess, nonfinite=nonfinite, max_rows_per_unit=max_rows_per_unit,
        privacy_unit=privacy_unit, share=norm_bound_share, quantile=norm_bound_quantile,
        projection_rows=projection_rows, dof=dof, public_n=public_n, prior_dof=prior_dof, calibration=calibration,
        row_ids=row_ids, projection=projection)
    d = vec.size - (vec.constant_at is not None)
    k = V.check_int("k", k, owner=owner, low=1, high=d)
    params = {**params, "k": k}
    request = _request(session, "pca", mechanism, columns, d, params, epsilon, delta, vec.norm_bound, neighbors,
                       nonfinite, privacy_unit, max_rows_per_unit, config_sha256, vec=vec,
                       **confidence_request(P.check("confidence", confidence, owner=owner)))

    def finish(released, norm_bound: float, plan: MechanismPlan) -> Noised:
        matrix = _data_matrix(vec, released, norm_bound)
        vals, vecs = principal_components(matrix, k)
        level = confidence_of(request)
        uncertainty = _data_matrix_uncertainty(vec, plan, released, norm_bound, postprocess, level)
        t = np.delete(vec.scaling(norm_bound).transform(), vec.constant_at, axis=0) if vec.scaled else None
        bounds, accuracy = pca_uncertainty(plan.mechanism, plan.privacy, plan.params, released, vals, vecs,
                                           norm_bound, level, transform=t)  # Weyl / Davis–Kahan (data units with t)
        return Noised({"eigenvalues": vals, "eigenvectors": vecs, "matrix": matrix}, {"accuracy": accuracy},
                      uncertainty={**uncertainty, **bounds})

    return _release(session, df, vec, task="pca", plan_for=plan_for, request=request, finish=finish,
                    release_id=release_id, nonfinite=nonfinite, dimension=dimension,
                    privacy_unit=privacy_unit, max_rows_per_unit=max_rows_per_unit, config_sha256=config_sha256,
                    extra=_extra(columns, params, vec.norm_bound, nonfinite, privacy_unit, vec),
                    source_paths=source_paths)


def _intervals(matrix, beta, plan: MechanismPlan, scaling: Scaling, label_at: int, ridge: float,
               postprocess: str, level: float) -> dict[str, Uncertainty]:
    """Bootstrap intervals of ``coefficients`` and ``intercept`` (data units) for Analyze Gauss (:mod:`.intervals`)."""
    if plan.mechanism != "analyze_gauss" or postprocess not in ("none", "shift"):
        return {}
    sigma = float(plan.privacy["noise_sigma"])
    shift = 2.0 * sigma * math.sqrt(matrix.shape[0]) if postprocess == "shift" else 0.0
    got = regression_bootstrap(matrix, beta, sigma=sigma, scaling=scaling, label_at=label_at, shift=shift,
                               ridge=ridge, level=level)
    k = scaling.constant_at  # the intercept's entry (intervals are computed with the constant column only)
    part = {"coefficients": np.delete(np.arange(got.estimate.size), k), "intercept": np.array([k])}
    return {name: Uncertainty(low=got.low[idx], high=got.high[idx], stderr=got.stderr[idx], method=got.method,
                              covers=got.covers) for name, idx in part.items()}
