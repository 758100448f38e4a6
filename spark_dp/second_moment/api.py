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

import dataclasses
import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from pyspark.sql import DataFrame

from spark_dp import _validation as V
from spark_dp import params as P
from spark_dp.aggregates import gram_matrix
from spark_dp.aggregates._scan import choose_source_paths
from spark_dp.aggregates.gram import direct_affine, gram_matrix_parquet
from spark_dp.aggregates.norms import value_counts
from spark_dp.errors import ConfigError
from spark_dp.privacy import Budget, Chokepoint
from spark_dp.privacy.quantile import (
    VALUE_GRID,
    collapse_warning,
    collapsed_columns,
    private_bounds,
    private_quantile,
)
from spark_dp.release import Release
from spark_dp.release.lineage import input_lineage
from spark_dp.release.pipeline import Noised, ReleasePlan, confidence_of, run_release
from spark_dp.second_moment._prepare import (  # noqa: F401 - the defaults are re-exported (config tasks, docs)
    DEFAULT_BOUNDS_SHARE,
    DEFAULT_CLIPPING_SHARE,
    DEFAULT_NORM_BOUND_QUANTILE,
    DEFAULT_NORM_BOUND_SHARE,
    REGRESSION_NORM_BOUND_QUANTILE,
    Prepared,
    Vector,
    auto_privacy,
    mechanism_budget,
    prepare,
)
from spark_dp.second_moment._registry import MechanismPlan
from spark_dp.second_moment.centre import (
    DEFAULT_MEAN_SHARE,
    CentrePlan,
    centred_gram,
    centred_norm_bound,
    mean_uncertainty,
    plan_centre,
    release_mean,
)
from spark_dp.second_moment.clipping import release_clipping
from spark_dp.second_moment.intervals import regression_intervals
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
from spark_dp.second_moment.uncertainty import (
    adassp_uncertainty,
    matrix_offset,
    matrix_uncertainty,
    pca_uncertainty,
)

if TYPE_CHECKING:
    from spark_dp.session import DPSession

log = logging.getLogger("spark_dp")
#: The keyword parameters every family function passes to :func:`prepare` unchanged (API name → prepare's).
_SHARED = {name: name for name in (
    "mechanism", "epsilon", "delta", "norm_bound", "neighbors", "postprocess", "nonfinite", "max_rows_per_unit",
    "privacy_unit", "projection_rows", "dof", "public_n", "prior_dof", "calibration", "row_ids", "projection")}
_SHARED.update(norm_bound_share="share", norm_bound_quantile="quantile", clipping_report="clipping",
               clipping_report_share="clipping_share", bounds_share="bounds_share")


def _shared(args: dict[str, Any]) -> dict[str, Any]:
    """The family function's shared keyword arguments (its ``locals()``), named as :func:`prepare` takes them."""
    return {ours: args[name] for name, ours in _SHARED.items()}


def _prepare_matrix(owner: str, df: DataFrame, columns, dimension, bounds, **kw: Any) -> Prepared:
    """:func:`prepare` for a second moment or PCA: with ``bounds`` the constant column goes last."""
    names = [columns] if isinstance(columns, str) else columns
    return prepare(owner, df, columns, dimension, constant_at=len(names) if bounds is not None else None,
                   bounds=bounds, **kw)


def _release(
    session: DPSession, df: DataFrame, prep: Prepared, *, task: str, request: dict,
    finish: Callable[[Any, float, MechanismPlan, Prepared], Noised], release_id, dimension, config_sha256, extra: dict,
    source_paths: Sequence[str] | None = None, centre: CentrePlan | None = None,
) -> Release:
    """Runs the prepared release: the exact summary (a Gram pass, the JL projection, or with ``auto`` the
    row-norm histogram first), the charge, the noise, then ``finish`` (the family's post-processing).

    ``centre`` (PCA's ``standardize="mean"``): the summary is the exact Gram of [a; 1]; the noise step first
    releases the mean (:mod:`spark_dp.second_moment.centre`), then ``prep.plan_for`` (the mechanism on the d
    centred columns) at the centred rows' bound B_c, and ``finish`` gets the centred release.
    """
    vec, plan_for = prep.vec, prep.plan_for
    nonfinite, privacy_unit, max_rows_per_unit = prep.nonfinite, prep.privacy_unit, prep.max_rows_per_unit
    plan = plan_for(1.0 if vec.quantile is not None else float(vec.norm_bound))
    count = vec.clipping is not None  # the clipping report's counts come from the Gram job itself

    def exact(norm_bound: float, vec: Vector = vec):
        affine = vec.affine(norm_bound, flag=count)
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
        # Given, or detected when df is a plain Parquet scan (aggregates/_scan.py). The tasks insert a constant
        # column themselves (a regression's intercept: a public constant); bounds are applied in Spark.
        paths = None if not direct_affine(affine) else choose_source_paths(
            df, vec.columns, source_paths, owner=task,
            unsupported="privacy_unit needs a shuffle" if privacy_unit else None)
        if paths:
            # Same matrix, with the tasks reading the Parquet files themselves
            # (skips the JVM -> Arrow conversion; docs/benchmarks.md).
            return gram_matrix_parquet(paths, vec.columns, norm_bound=norm_bound, nonfinite=nonfinite,
                                       dimension=dimension, privacy_unit=privacy_unit,
                                       max_rows_per_unit=max_rows_per_unit, spark=df.sparkSession,
                                       count_clipped=count, affine=affine)
        return gram_matrix(df, vec.columns, norm_bound=norm_bound, nonfinite=nonfinite, dimension=dimension,
                           privacy_unit=privacy_unit, max_rows_per_unit=max_rows_per_unit, affine=affine,
                           count_clipped=count)

    def compute():
        if vec.auto_bounds is not None:
            # bounds="auto": the exact per-column value histograms now; the bounds, the Gram pass and the noise
            # after the charge.
            return value_counts(df, vec.names, VALUE_GRID, privacy_unit=privacy_unit,
                                max_rows_per_unit=max_rows_per_unit)
        if vec.quantile is None:
            return exact(float(vec.norm_bound))
        # norm_bound="auto": the exact row-norm histogram now; B, the Gram pass and the noise after the charge.
        from spark_dp.aggregates.norms import norm_counts

        return norm_counts(df, vec.columns, vec.grid(), nonfinite=nonfinite, dimension=dimension,
                           privacy_unit=privacy_unit, max_rows_per_unit=max_rows_per_unit, affine=vec.affine(None))

    def noised_with_report(summary, cp: Chokepoint, norm_bound: float, chosen: MechanismPlan,
                           prep: Prepared = prep) -> Noised:
        """The mechanism's release and, with the clipping report, its counts noised after it (same release)."""
        if not count:
            return finish(chosen.noise(summary, cp), norm_bound, chosen, prep)
        summary, counts = summary
        noised = finish(chosen.noise(summary, cp), norm_bound, chosen, prep)
        assert vec.clipping is not None
        arrays, uncertainty = release_clipping(cp, vec.clipping, counts, confidence_of(request))
        return Noised({**noised.arrays, **arrays}, {**noised.manifest, "clipping_report": {
            **vec.clipping.manifest(), "norm_bound": norm_bound}}, {**noised.uncertainty, **uncertainty})

    def noise(summary, cp: Chokepoint) -> Noised:
        if centre is not None:
            return centred_noise(summary, cp)
        if vec.auto_bounds is not None:
            chosen_bounds = private_bounds(cp, vec.auto_bounds, summary)
            collapsed = collapsed_columns(chosen_bounds)
            warning = {} if not collapsed else {"warning": collapse_warning(vec.auto_bounds, collapsed)}
            if collapsed:
                log.warning("%s", warning["warning"])
            norm_bound = float(vec.norm_bound)
            chosen_vec = vec.with_bounds(chosen_bounds)
            noised = noised_with_report(exact(norm_bound, chosen_vec), cp, norm_bound, plan,
                                        dataclasses.replace(prep, vec=chosen_vec))
            return Noised(noised.arrays, {**noised.manifest, "scaling": chosen_vec.scaling(norm_bound).manifest(),
                                          "bounds_auto": {**vec.auto_bounds.manifest(), "bounds": {
                                              c: list(b) for c, b in chosen_bounds.items()}, **warning}},
                          noised.uncertainty)
        if vec.quantile is None:
            return noised_with_report(summary, cp, float(vec.norm_bound), plan)
        chosen_q = private_quantile(cp, vec.quantile, summary, vec.grid())
        norm_bound = vec.bound_from_quantile(chosen_q)
        chosen = plan_for(norm_bound)
        if list(chosen.events) != list(plan.events):
            raise RuntimeError("bug: the mechanism's events changed with the chosen norm bound")
        noised = noised_with_report(exact(norm_bound), cp, norm_bound, chosen)
        stated = {k: chosen.privacy[k] for k in ("noise_scale", "noise_sigma", "sensitivity") if k in chosen.privacy}
        return Noised(noised.arrays, {**noised.manifest, "norm_bound_auto": {
            **vec.quantile.manifest(), **({"grid": "2^(j/4) in [sqrt(d)/256, sqrt(d)], and sqrt(d) (every column "
                                          "bounded: no row norm exceeds sqrt(d))"} if vec.fully_bounded else {}),
            "selected_quantile": chosen_q, "norm_bound": norm_bound, **stated}}, noised.uncertainty)

    def centred_noise(gram, cp: Chokepoint) -> Noised:
        assert centre is not None
        if vec.constant_at != vec.size - 1 or not vec.fully_bounded:
            raise RuntimeError("bug: centring needs every column bounded and the constant column last")
        mean, _, noisy = release_mean(cp, centre, gram)
        bound = centred_norm_bound(mean)
        chosen = plan_for(bound)
        if list(chosen.events) != list(plan.events):
            raise RuntimeError("bug: the mechanism's events changed with the centred rows' bound")
        noised = finish(chosen.noise(centred_gram(gram, mean), cp), bound, chosen, prep)
        scaling = vec.scaling(float(vec.norm_bound))
        centres = np.array([(b[0] + b[1]) / 2.0 for b in scaling.bounds])
        halves = np.array([(b[1] - b[0]) / 2.0 for b in scaling.bounds])
        stated = {k: chosen.privacy[k] for k in ("noise_scale", "noise_sigma", "sensitivity")
                  if chosen.privacy.get(k) is not None}
        arrays = {**noised.arrays, "mean": centres + halves * mean, "count": noisy[-1:].copy()}
        return Noised(arrays, {**noised.manifest, "centre": {
            "mean": dict(zip(vec.names, (float(v) for v in arrays["mean"]), strict=True)),
            "mean_units": "the data's (also the payload array 'mean', with its bound; 'count' the noisy row count)",
            "norm_bound": bound, "norm_bound_rule": "sqrt(sum_i (1 + |mean_i|)^2), mean in the scaled coordinates "
            "(clamped to [-1, 1]): no centred row is longer", **stated}},
            {**noised.uncertainty, **mean_uncertainty(noisy, centre, centres, halves, confidence_of(request))})

    privacy = {**plan.privacy, "privacy_unit": privacy_unit or "row",
               "privacy_unit_column": privacy_unit, "max_rows_per_unit": max_rows_per_unit}
    if vec.quantile is not None:
        privacy = {**auto_privacy(plan_for, request["epsilon"], vec), "privacy_unit": privacy_unit or "row",
                   "privacy_unit_column": privacy_unit,
                   "max_rows_per_unit": max_rows_per_unit}
    if vec.clipping is not None or vec.auto_bounds is not None:  # the budget split, stated
        privacy = {**privacy, "epsilon": request["epsilon"], "mechanism_epsilon": mechanism_budget(vec, request["epsilon"]),
                   **({} if vec.clipping is None else {"clipping_report_epsilon": vec.clipping.epsilon}),
                   **({} if vec.auto_bounds is None else {"bounds_epsilon": vec.auto_bounds.epsilon})}
    events = tuple(release_events(plan_for, vec.norm_bound, vec.quantile, vec.clipping, vec.auto_bounds))
    if centre is not None:  # the mean's Gaussian first; the mechanism's events do not depend on B (plan_centre)
        one, two = plan_for(1.0).privacy, plan_for(2.0).privacy
        later = "chosen with the centred rows' bound: see centre"
        privacy = {**{k: (later if one[k] != two.get(k) else v) for k, v in one.items()},
                   "privacy_unit": privacy_unit or "row", "privacy_unit_column": privacy_unit,
                   "max_rows_per_unit": max_rows_per_unit, "epsilon": request["epsilon"],
                   "mechanism_epsilon": centre.mechanism_epsilon, "mechanism_delta": centre.mechanism_delta,
                   "mean": centre.manifest()}
        events = (centre.event, *events)
    return run_release(session, ReleasePlan(
        task=task, mechanism=plan.mechanism, release_id=release_id, request=request, events=events,
        budget=Budget(request["epsilon"], request["delta"]), compute=compute, noise=noise, privacy=privacy,
        manifest=extra, config_sha256=config_sha256, lineage=functools.partial(input_lineage, df),
        spark=getattr(df, "sparkSession", None),
    ))


def second_moment(
    session: DPSession,
    df: DataFrame,
    columns: Sequence[str],
    *,
    epsilon: float,
    delta: float,
    norm_bound: float | str | None = None,
    mechanism: str = "analyze_gauss",
    bounds: dict[str, tuple[float, float]] | str | None = None,
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
    clipping_report: bool = False,
    clipping_report_share: float = DEFAULT_CLIPPING_SHARE,
    bounds_share: float = DEFAULT_BOUNDS_SHARE,
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
        release_id: idempotency key. A release id seen before returns the
            stored release (no new noise or charge). None: the default id
            from the dataset, this request and the input's lineage
            (:func:`spark_dp.release.ids.default_release_id`), so the same
            call on the same input spends once; give a new id to release
            again on purpose.
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
        clipping_report: also release, privately, how many rows were
            clipped — a value clamped to its ``bounds`` or the row's norm
            above B (opt-in, default False): arrays ``clipping_counts``
            ([clipped rows, rows], Laplace noise) and ``clipped_fraction``
            (their ratio), with intervals, counted in the same Spark job as
            the matrix. Its own Laplace event of the same release at
            ε·``clipping_report_share``; the mechanism gets the rest
            (manifest ``privacy.mechanism_epsilon`` and
            ``clipping_report_epsilon``). Sensitivity and neighbours:
            :mod:`spark_dp.second_moment.clipping`. Not for ``jl_ridge`` with
            ``projection="rows"``.
        clipping_report_share: its share of ε (default 0.05).
        bounds_share: with ``bounds="auto"`` (opt-in), each column's bounds
            are chosen privately from the data instead: two selections by
            the exponential mechanism over the public grid −2^(j/4), 0,
            2^(j/4) (j = −80 … 160; Smith 2011, OpenDP's quantile scores
            and noisy max) at ε·``bounds_share``/(2d) each — the magnitude
            M (0.95 quantile of |x|), then [l, M] or [−M, h] (l, h the 0.05
            / 0.95 quantiles), with public penalties towards 0 and towards
            narrow intervals
            (:func:`spark_dp.privacy.quantile.private_bounds`) — all
            2d charged as one (ε·``bounds_share``, 0) event of the same
            release (basic composition of pure DP; the mechanism gets the
            rest). Every column is then bounded, so ``norm_bound`` may be
            omitted (B = √d; not ``"auto"``). The manifest's ``bounds_auto``
            states the chosen bounds. One more pass over the data (the
            per-column value histograms). Default share 0.1.

    Returns:
        A :class:`Release` with array ``matrix`` of shape (d, d) (in the
        data's units with ``bounds``).
    """
    columns = list(columns) if not isinstance(columns, str) else columns
    prep = _prepare_matrix("second_moment", df, columns, dimension, bounds, allowed=SECOND_MOMENT_MECHANISMS,
                           **_shared(locals()))
    request = prep.request(session, "second_moment", columns, prep.d, params=prep.params, confidence=confidence,
                           config_sha256=config_sha256)

    def finish(released, norm_bound: float, plan: MechanismPlan, prep: Prepared) -> Noised:
        matrix = prep.data_matrix(released, norm_bound)
        return Noised({"matrix": matrix},
                      uncertainty=prep.data_matrix_uncertainty(plan, released, norm_bound, confidence_of(request)))

    return _release(session, df, prep, task="second_moment", request=request, finish=finish, release_id=release_id,
                    dimension=dimension, config_sha256=config_sha256, extra=prep.extra(columns, prep.params),
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
    bounds: dict[str, tuple[float, float]] | str | None = None,
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
    clipping_report: bool = False,
    clipping_report_share: float = DEFAULT_CLIPPING_SHARE,
    bounds_share: float = DEFAULT_BOUNDS_SHARE,
    covers: str = "noise",
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
        covers: what the coefficients' intervals account for. ``"noise"``
            (default): the privacy noise; they hold the coefficients a run
            without privacy would print on the same rows. ``"noise+sampling"``:
            also the sampling error of a model whose errors have one variance
            (needs the constant column: an intercept or ``bounds``; not
            ``adassp``, which releases no yᵀy). Real tables' errors rarely
            have one variance; where many rows make the privacy noise small,
            that interval is the textbook non-robust OLS interval, which held
            as little as 42 % on real tables (docs/accuracy.md).
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
        instead of ``matrix``. ``coefficients`` and ``intercept`` carry
        intervals at ``confidence`` (``Release.interval``) for every
        mechanism and post-processing
        (:mod:`spark_dp.second_moment.intervals`: the parametric bootstrap
        of Ferrando, Wang & Sheldon 2022 through the mechanism's own noise
        law, from the released matrix only), covering what ``covers`` says.
    """
    owner = "linear_regression"
    ridge, label = P.check("ridge", ridge, owner=owner), SM_PARAMS.check("label", label, owner=owner)
    fit_intercept = P.check("fit_intercept", fit_intercept, owner=owner)
    covers = P.check("covers", covers, owner=owner)
    if covers == "noise+sampling" and mechanism == "adassp":
        raise ConfigError(f"The 'covers' parameter of {owner} must be 'noise' for mechanism 'adassp' (it releases no "
                          "y^T y, so the sampling error cannot be estimated). Got 'noise+sampling' instead.")
    if covers == "noise+sampling" and not fit_intercept and bounds is None:
        raise ConfigError(f"The 'covers' parameter of {owner} 'noise+sampling' needs the constant column, which "
                          "holds the row count: set fit_intercept (or give bounds). Got fit_intercept false and no "
                          "bounds.")
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
    prep = prepare(owner, df, all_columns, None, constant_at=constant_at, bounds=bounds, allowed=REGRESSION_MECHANISMS,
                   what="column (the label included)", **_shared(locals()))
    vec = prep.vec
    params = {**prep.params, "ridge": ridge}
    more = {"label": label, **({"fit_intercept": True} if fit_intercept else {}),
            **({"covers": covers} if covers != "noise" else {})}
    request = prep.request(session, "linear_regression", columns, p + 1, params=params, confidence=confidence,
                           config_sha256=config_sha256, **more)

    def finish(result, norm_bound: float, plan: MechanismPlan, prep: Prepared) -> Noised:
        vec = prep.vec
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
                                     confidence_of(request), ridge=ridge + lam, scaling=scaling if vec.scaled else None,
                                     adaptive=lam, rho=float(plan.privacy["rho"]))
            arrays = {"lambda": result["lambda"]}
            if vec.scaled:
                joint = np.block([[xtx, xty[:, None]], [xty[None, :], np.zeros((1, 1))]])
                data = prep.data_matrix(joint, norm_bound, keep_constant=True)
                xtx, xty, beta = data[:-1, :-1], data[:-1, -1], scaling.coefficients(beta, label_at)
            out = {**split(beta), "xtx": xtx, "xty": xty, **arrays}
            return Noised(out, {"solution": {**info, "adaptive_ridge": lam}}, uncertainty=unc)
        def fitted(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray, dict]:
            if fit_intercept or not vec.scaled:
                fit, info = regression_coefficients(matrix, ridge=ridge)
                return fit, (scaling.coefficients(fit, label_at) if vec.scaled else fit), info
            # bounds without an intercept: the no-intercept fit in the data's units
            fit, info = regression_coefficients(prep.data_matrix(matrix, norm_bound), ridge=ridge)
            return fit, fit, info

        fit, beta, info = fitted(result)
        offset = matrix_offset(plan.mechanism, plan.privacy, plan.params, vec.size, norm_bound)
        if offset > 0:
            info = {**info, "ridge_in_release": ridge_in_release(
                offset, split(beta), split(fitted(result - offset * np.eye(vec.size))[1]), plan.mechanism,
                postprocess=plan.params.get("postprocess", "none"), scaled=vec.scaled)}
        uncertainty = regression_intervals(plan.mechanism, plan.privacy, plan.params, result, fit, scaling=scaling,
                                           label_at=label_at, norm_bound=norm_bound, fit_intercept=fit_intercept,
                                           ridge=ridge, level=confidence_of(request), covers=covers)
        matrix = prep.data_matrix(result, norm_bound, keep_constant=True)
        uncertainty.update(prep.data_matrix_uncertainty(plan, result, norm_bound, confidence_of(request),
                                                        keep_constant=True))
        return Noised({**split(beta), "matrix": matrix}, {"solution": info}, uncertainty=uncertainty)

    return _release(session, df, prep, task="linear_regression", request=request, finish=finish,
                    release_id=release_id, dimension=None, config_sha256=config_sha256,
                    extra=prep.extra(columns, params, **more), source_paths=source_paths)


def ridge_in_release(offset: float, released: dict[str, np.ndarray], without: dict[str, np.ndarray], mechanism: str,
                     *, postprocess: str, scaled: bool) -> dict[str, Any]:
    """The manifest's ``solution.ridge_in_release``: how much the ridge o·I kept in the matrix shrank the fit.

    Post-processing of the released matrix (no privacy cost): the same fit on
    the released matrix minus o·I gives the coefficients without the ridge;
    ``shrinkage`` is released / without, per coefficient (1 = unchanged,
    0.5 = halved; negative = the sign flipped). Without the ridge the fit
    can be far noisier (that is why the ridge is there).
    """
    why = {"analyze_gauss": "postprocess 'shift' adds c = 2 sigma sqrt(d) to the diagonal (Sheffet's choice: the "
                            "matrix is then PSD with high probability)",
           "wishart": "the Wishart noise's mean k B^2 stays on the diagonal (postprocess 'shift' removes it)"}.get(
        mechanism, "the mechanism's ridge w^2 stays on the diagonal (postprocess 'shift' removes it)")
    out: dict[str, Any] = {
        "ridge": float(offset), "units": "the scaled vector's (each column mapped to [-1, 1] by its bounds)"
        if scaled else "the clipped rows'", "postprocess": postprocess,
        "note": f"a ridge that shrinks the coefficients towards 0: {why}; the coefficients without it are the same "
                "fit on the released matrix minus the ridge (post-processing, no privacy cost)"}
    for name, value in released.items():
        base = np.asarray(without[name], dtype=np.float64)
        out[f"{name}_without_ridge"] = [float(v) for v in base]
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.asarray(value, dtype=np.float64) / base
        out[f"{name}_shrinkage"] = [float(r) if np.isfinite(r) else None for r in ratio]
    return out


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
    bounds: dict[str, tuple[float, float]] | str | None = None,
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
    clipping_report: bool = False,
    clipping_report_share: float = DEFAULT_CLIPPING_SHARE,
    bounds_share: float = DEFAULT_BOUNDS_SHARE,
    standardize: str = "none",
    mean_share: float | None = None,
) -> Release:
    """Top-k principal components of the private second-moment matrix.

    (Uncentred: the eigenpairs of AᵀA; ``standardize="mean"`` below, or
    data centred beforehand, for covariance PCA.) With ``bounds`` (as for
    :func:`second_moment`) the mechanism runs on the scaled vector and the
    released matrix is mapped back to the data's units exactly; the
    principal directions are those of that matrix, in the original
    coordinates (so columns in large units dominate, as without bounds).

    ``standardize="bounds"`` (needs public ``bounds`` for every column)
    gives what a scikit-learn user expects from scaled PCA instead: the
    eigenpairs of the scaled vector, each column centred at its bounds'
    midpoint and divided by their half-range (so it lies in [-1, 1]); no
    column dominates by its units. Centring at the midpoint is free (public
    bounds). The released ``matrix`` stays in the data's units; the
    manifest's ``standardize`` says which coordinates the eigenpairs are in.

    ``standardize="mean"`` (needs public ``bounds`` for every column; no
    ``norm_bound``) centres at the data's mean instead, released privately,
    and scales by the bounds' half-width: the eigenpairs are those of
    Σ(z − z̄)(z − z̄)ᵀ with z = (x − (lo+hi)/2)/((hi−lo)/2) and z̄ the
    released mean — what scikit-learn's PCA does after scaling by the
    half-width. One release, one charge, one Spark pass: the mean's
    Gaussian gets ``mean_share`` of the budget (μ-GDP terms), the mechanism
    the rest under exact composition; the centred rows' norm bound follows
    from the bounds and the released mean. Neighbours, sensitivities and the
    split: :mod:`spark_dp.second_moment.centre`. Not with
    ``clipping_report`` or ``projection="rows"``.

    Args:
        standardize: ``none`` (default), ``bounds`` or ``mean`` (above).
        mean_share: with ``standardize="mean"`` only, the mean's share of
            the budget in (0, 1) (default 0.1; the mean needs little: its
            error enters the centred matrix only to second order).
        Others: as for :func:`second_moment`.

    Returns:
        A :class:`Release` with ``eigenvalues`` (k,), ``eigenvectors``
        (k, d; row i = component i) and ``matrix`` (d, d); with
        ``standardize="mean"`` also ``mean`` (d,; the data's units) and
        ``count`` (1,; the noisy row count), and ``matrix`` is then
        Σ(x − mean)(x − mean)ᵀ in the data's units.
    """
    columns = list(columns) if not isinstance(columns, str) else columns
    standardize = SM_PARAMS.check("standardize", standardize, owner="pca")
    if standardize != "none" and not (isinstance(bounds, Mapping) and not isinstance(columns, str)
                                      and set(columns) <= set(bounds)):
        raise ConfigError(f"The 'standardize' parameter of pca is {standardize!r}, which needs public 'bounds' for "
                          "every column (each column is scaled by them).")
    if mean_share is not None and standardize != "mean":
        raise ConfigError(f"The 'mean_share' parameter of pca applies to standardize 'mean' only. Got {mean_share!r} "
                          f"with standardize {standardize!r}.")
    if standardize == "mean":
        mean_share = SM_PARAMS.check("mean_share", DEFAULT_MEAN_SHARE if mean_share is None else mean_share,
                                     owner="pca")
        _check_mean_request(norm_bound, clipping_report, projection)
    prep = _prepare_matrix("pca", df, columns, dimension, bounds, allowed=PCA_MECHANISMS, **_shared(locals()))
    k = V.check_int("k", k, owner="pca", low=1, high=prep.d)
    centre = None
    if standardize == "mean":
        shared = _shared(locals())
        mech_kw = {n: shared[n] for n in ("neighbors", "max_rows_per_unit", "postprocess", "projection_rows", "dof",
                                          "public_n", "prior_dof", "calibration", "row_ids", "projection")}

        def planner(eps: float, dlt: float):
            return bound_planner(mechanism, size=prep.d, epsilon=eps, quantile=None, owner="pca", delta=dlt,
                                 **mech_kw)

        centre, plan_for = plan_centre(planner, d=prep.d, epsilon=prep.epsilon, delta=prep.delta, share=mean_share,
                                       neighbors=neighbors, max_rows_per_unit=prep.max_rows_per_unit)
        prep = dataclasses.replace(prep, plan_for=plan_for, params=plan_for(1.0).params)
    params = {**prep.params, "k": k, **({"standardize": standardize} if standardize != "none" else {}),
              **({"mean_share": mean_share} if standardize == "mean" else {})}
    request = prep.request(session, "pca", columns, prep.d, params=params, confidence=confidence,
                           config_sha256=config_sha256)

    def finish(released, norm_bound: float, plan: MechanismPlan, prep: Prepared) -> Noised:
        level = confidence_of(request)
        vec = prep.vec
        if standardize == "mean":  # released: the centred second moment in the standardised coordinates (d, d)
            halves = np.diag(vec.scaling(1.0).scales())
            vals, vecs = principal_components(released, k)
            found, accuracy = pca_uncertainty(plan.mechanism, plan.privacy, plan.params, released, vals, vecs,
                                              norm_bound, level)
            u = matrix_uncertainty(plan.mechanism, plan.privacy, plan.params, released, norm_bound, level,
                                   transform=halves)
            return Noised({"eigenvalues": vals, "eigenvectors": vecs, "matrix": halves @ released @ halves},
                          {"accuracy": accuracy, "standardize": {
                              "how": "mean", "coordinates": "each column centred at its released mean (array "
                              "'mean') and divided by its bounds' half-range ((v - mean) / ((hi-lo)/2)); eigenvalues "
                              "and eigenvectors are in these coordinates (sums over the rows: divide by 'count' for "
                              "variances), the matrix is sum (x - mean)(x - mean)^T in the data's units",
                              "bounds": {c: list(b) for c, b in bounds.items()}}},
                          uncertainty={**({} if u is None else {"matrix": u}), **found})
        matrix = prep.data_matrix(released, norm_bound)
        uncertainty = prep.data_matrix_uncertainty(plan, released, norm_bound, level)
        extra: dict[str, Any] = {}
        if standardize == "bounds":  # the scaled coordinates: the release in the noise's units, constant dropped
            t = np.delete(np.eye(vec.size), vec.constant_at, axis=0)
            vals, vecs = principal_components(t @ released @ t.T, k)
            extra["standardize"] = {
                "how": "bounds", "coordinates": "each column centred at its bounds' midpoint and divided by their "
                "half-range ((v - (lo+hi)/2) / ((hi-lo)/2), in [-1, 1]); eigenvalues and eigenvectors are in these "
                "coordinates, the matrix in the data's units", "bounds": {c: list(b) for c, b in bounds.items()}}
        else:
            vals, vecs = principal_components(matrix, k)
            t = np.delete(vec.scaling(norm_bound).transform(), vec.constant_at, axis=0) if vec.scaled else None
        found, accuracy = pca_uncertainty(plan.mechanism, plan.privacy, plan.params, released, vals, vecs,
                                          norm_bound, level, transform=t)  # Weyl / Davis–Kahan (data units with t)
        return Noised({"eigenvalues": vals, "eigenvectors": vecs, "matrix": matrix}, {"accuracy": accuracy, **extra},
                      uncertainty={**uncertainty, **found})

    return _release(session, df, prep, task="pca", request=request, finish=finish, release_id=release_id,
                    dimension=dimension, config_sha256=config_sha256, extra=prep.extra(columns, params),
                    source_paths=source_paths, centre=centre)


def _check_mean_request(norm_bound, clipping_report, projection) -> None:
    """``standardize="mean"``'s own refusals (ConfigError naming the parameter; nothing charged)."""
    if norm_bound is not None:
        raise ConfigError("The 'norm_bound' parameter of pca must be omitted with standardize 'mean' (the centred "
                          f"rows' bound follows from the bounds and the released mean). Got {norm_bound!r} instead.")
    if clipping_report:
        raise ConfigError("The 'clipping_report' parameter of pca must be false with standardize 'mean' (the clamped "
                          "values are not counted on this path).")
    if projection != "gram":
        raise ConfigError("The 'projection' parameter of pca must be 'gram' with standardize 'mean' (the centred "
                          f"matrix is computed from the exact Gram). Got {projection!r} instead.")

