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

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from pyspark.sql import DataFrame

from spark_dp import _validation as V
from spark_dp import params as P
from spark_dp.aggregates import gram_matrix, vector_dimension
from spark_dp.aggregates._scan import choose_source_paths
from spark_dp.aggregates.gram import gram_matrix_parquet
from spark_dp.errors import ConfigError
from spark_dp.privacy import Budget, Chokepoint
from spark_dp.release import Release
from spark_dp.release.pipeline import Noised, ReleasePlan, confidence_of, confidence_request, run_release
from spark_dp.second_moment._registry import MechanismPlan
from spark_dp.second_moment.mechanisms import (  # noqa: F401 - re-exported: the API's names for the registry
    MECHANISMS,
    PCA_MECHANISMS,
    REGRESSION_MECHANISMS,
    SECOND_MOMENT_MECHANISMS,
    THEOREM_NEIGHBORS,
    default_projection_rows,
    plan_mechanism,
)
from spark_dp.second_moment.mechanisms import PARAMS as SM_PARAMS
from spark_dp.second_moment.pca import principal_components
from spark_dp.second_moment.regression import regression_coefficients, solve_normal_equations
from spark_dp.second_moment.uncertainty import adassp_uncertainty, matrix_uncertainty, pca_uncertainty

if TYPE_CHECKING:
    from spark_dp.session import DPSession

def _check_common(owner, epsilon, delta, norm_bound, neighbors, postprocess, nonfinite, max_rows_per_unit, privacy_unit):
    epsilon, delta, norm_bound = (P.check(n, v, owner=owner) for n, v in
                                  (("epsilon", epsilon), ("delta", delta), ("norm_bound", norm_bound)))
    for name, value in (("neighbors", neighbors), ("nonfinite", nonfinite), ("privacy_unit", privacy_unit)):
        P.check(name, value, owner=owner)
    SM_PARAMS.check("postprocess", postprocess, owner=owner)
    return epsilon, delta, norm_bound, P.check("max_rows_per_unit", max_rows_per_unit, owner=owner)


def _release(
    session: DPSession, df: DataFrame, columns: list[str] | str, *, task: str, plan: MechanismPlan, d: int,
    request: dict, finish: Callable[[Any], Noised], release_id, norm_bound, nonfinite, dimension,
    privacy_unit, max_rows_per_unit, config_sha256, extra: dict, source_paths: Sequence[str] | None = None,
) -> Release:
    def compute():
        if not plan.needs_gram:
            from spark_dp.aggregates.jl import jl_projection

            # The JL projection needs the key, drawn only after the charge: the
            # single pass over the data runs inside noise().
            def project(key: int) -> np.ndarray:
                return jl_projection(df, columns, r=plan.params["projection_rows"], key=key, norm_bound=norm_bound,
                                     nonfinite=nonfinite, dimension=dimension, privacy_unit=privacy_unit,
                                     max_rows_per_unit=max_rows_per_unit, row_ids=plan.params["row_ids"])

            return project
        # Given, or detected when df is a plain Parquet scan (aggregates/_scan.py).
        paths = choose_source_paths(df, columns, source_paths, owner=task,
                                    unsupported="privacy_unit needs a shuffle" if privacy_unit else None)
        if paths:
            # Same matrix, with the tasks reading the Parquet files themselves
            # (skips the JVM -> Arrow conversion; docs/benchmarks.md).
            return gram_matrix_parquet(paths, columns, norm_bound=norm_bound, nonfinite=nonfinite,
                                       dimension=dimension, privacy_unit=privacy_unit,
                                       max_rows_per_unit=max_rows_per_unit, spark=df.sparkSession)
        return gram_matrix(df, columns, norm_bound=norm_bound, nonfinite=nonfinite, dimension=dimension,
                           privacy_unit=privacy_unit, max_rows_per_unit=max_rows_per_unit)

    def noise(exact, cp: Chokepoint) -> Noised:
        return finish(plan.noise(exact, cp))

    privacy = {**plan.privacy, "privacy_unit": privacy_unit or "row", "max_rows_per_unit": max_rows_per_unit}
    return run_release(session, ReleasePlan(
        task=task, mechanism=plan.mechanism, release_id=release_id, request=request, events=tuple(plan.events),
        budget=Budget(request["epsilon"], request["delta"]), compute=compute, noise=noise, privacy=privacy,
        manifest=extra, config_sha256=config_sha256,
    ))


def _matrix_uncertainty(plan: MechanismPlan, matrix: np.ndarray, norm_bound: float, request: dict) -> dict:
    """``{"matrix": Uncertainty}`` of a released second-moment matrix (post-processing), or {} where none applies."""
    u = matrix_uncertainty(plan.mechanism, plan.privacy, plan.params, matrix, norm_bound, confidence_of(request))
    return {} if u is None else {"matrix": u}


def _request(session, task, mechanism, columns, d, params, epsilon, delta, norm_bound, neighbors, nonfinite,
             privacy_unit, max_rows_per_unit, config_sha256, **more):
    return {
        "dataset_id": session.dataset_id, "task": task, "mechanism": mechanism, "columns": columns, "dimension": d,
        "params": params, "epsilon": epsilon, "delta": delta, "norm_bound": norm_bound, "neighbors": neighbors,
        "nonfinite": nonfinite, "privacy_unit": privacy_unit, "max_rows_per_unit": max_rows_per_unit,
        "sampler": session.sampler.name, "config_sha256": config_sha256, **more,
    }


def _extra(columns, params, norm_bound, nonfinite, privacy_unit, **more):
    return {"columns": columns, "params": params, "policies": {
        "nonfinite": nonfinite, "clipping": f"rows scaled to L2 norm <= {norm_bound:g}",
        "null_privacy_unit": "rows with a null unit form one unit" if privacy_unit else None,
    }, **more}


def second_moment(
    session: DPSession,
    df: DataFrame,
    columns: Sequence[str],
    *,
    epsilon: float,
    delta: float,
    norm_bound: float,
    mechanism: str = "analyze_gauss",
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
) -> Release:
    """Releases a private AᵀA of the rows of ``df[columns]``.

    Args:
        df: the data.
        columns: numeric columns, or one array/vector column (with
            ``dimension``), in the order of the matrix's rows.
        epsilon, delta: the release's (ε, δ).
        norm_bound: B; rows are clipped to ‖a‖₂ ≤ B.
        mechanism: ``analyze_gauss``, ``jl_ridge``, ``wishart`` or
            ``inverse_wishart``.
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

    Returns:
        A :class:`Release` with array ``matrix`` of shape (d, d).
    """
    owner = "second_moment"
    epsilon, delta, norm_bound, max_rows_per_unit = _check_common(
        owner, epsilon, delta, norm_bound, neighbors, postprocess, nonfinite, max_rows_per_unit, privacy_unit)
    V.check_option("mechanism", mechanism, SECOND_MOMENT_MECHANISMS, owner=owner)
    columns = list(columns) if not isinstance(columns, str) else columns
    d = vector_dimension(df, columns, dimension)  # schema check, no Spark job
    plan = plan_mechanism(mechanism, d=d, epsilon=epsilon, delta=delta, norm_bound=norm_bound, neighbors=neighbors,
                          max_rows_per_unit=max_rows_per_unit, postprocess=postprocess, projection_rows=projection_rows,
                          dof=dof, public_n=public_n, prior_dof=prior_dof, calibration=calibration, row_ids=row_ids, projection=projection, owner=owner)
    request = _request(session, "second_moment", mechanism, columns, d, plan.params, epsilon, delta, norm_bound,
                       neighbors, nonfinite, privacy_unit, max_rows_per_unit, config_sha256,
                       **confidence_request(P.check("confidence", confidence, owner=owner)))
    return _release(session, df, columns, task="second_moment", plan=plan, d=d, request=request,
                    finish=lambda m: Noised({"matrix": m}, uncertainty=_matrix_uncertainty(plan, m, norm_bound, request)),
                    release_id=release_id, norm_bound=norm_bound,
                    nonfinite=nonfinite, dimension=dimension, privacy_unit=privacy_unit,
                    max_rows_per_unit=max_rows_per_unit, config_sha256=config_sha256,
                    extra=_extra(columns, plan.params, norm_bound, nonfinite, privacy_unit), source_paths=source_paths)


def linear_regression(
    session: DPSession,
    df: DataFrame,
    columns: Sequence[str],
    label: str,
    *,
    epsilon: float,
    delta: float,
    norm_bound: float,
    mechanism: str = "analyze_gauss",
    ridge: float = 0.0,
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
) -> Release:
    """Private OLS/ridge coefficients of ``label`` on ``columns`` (no intercept).

    The mechanism releases a private [X y]ᵀ[X y] (rows [x, y] clipped to
    ‖·‖₂ ≤ B); β̂ solves (M_XX + ridge·I)β = M_Xy with the fallback of
    :mod:`spark_dp.second_moment.regression`. ``adassp`` runs Wang's
    Algorithm 2 instead (its adaptive ridge is added to ``ridge``'s none).
    Add a constant column to ``columns`` for an intercept.

    Args:
        columns: numeric feature columns (p of them).
        label: the numeric label column (must not be in ``columns``).
        ridge: λ ≥ 0 added to the diagonal of M_XX (post-processing).
        Others: as for :func:`second_moment`.

    Returns:
        A :class:`Release` with ``coefficients`` (p,) and ``matrix``
        (p+1, p+1; label last); for ``adassp``, ``coefficients``, ``xtx``,
        ``xty`` and ``lambda`` instead of ``matrix``.
    """
    owner = "linear_regression"
    epsilon, delta, norm_bound, max_rows_per_unit = _check_common(
        owner, epsilon, delta, norm_bound, neighbors, postprocess, nonfinite, max_rows_per_unit, privacy_unit)
    V.check_option("mechanism", mechanism, REGRESSION_MECHANISMS, owner=owner)
    ridge, label = P.check("ridge", ridge, owner=owner), SM_PARAMS.check("label", label, owner=owner)
    if isinstance(columns, str):
        columns = [columns]
    columns = list(columns)
    if label in columns:
        raise ConfigError(f"The 'label' parameter of {owner} must not be one of the feature columns. Got {label!r} instead.")
    all_columns = columns + [label]
    d = vector_dimension(df, all_columns)  # label missing / non-numeric → SchemaError, no Spark job
    plan = plan_mechanism(mechanism, d=d, epsilon=epsilon, delta=delta, norm_bound=norm_bound, neighbors=neighbors,
                          max_rows_per_unit=max_rows_per_unit, postprocess=postprocess, projection_rows=projection_rows,
                          dof=dof, public_n=public_n, prior_dof=prior_dof, calibration=calibration, row_ids=row_ids, projection=projection, owner=owner)
    params = {**plan.params, "ridge": ridge}
    request = _request(session, "linear_regression", mechanism, columns, d, params, epsilon, delta, norm_bound,
                       neighbors, nonfinite, privacy_unit, max_rows_per_unit, config_sha256, label=label,
                       **confidence_request(P.check("confidence", confidence, owner=owner)))

    def finish(result) -> Noised:
        if mechanism == "adassp":
            arrays = {name: value for name, value in result.items() if name != "info"}
            info, lam = result["info"], float(result["lambda"][0])
            if ridge:  # the user's ridge on top of the adaptive one (post-processing)
                arrays["coefficients"], info = solve_normal_equations(result["xtx"], result["xty"], ridge=ridge + lam)
            return Noised(arrays, {"solution": {**info, "adaptive_ridge": lam}},
                          uncertainty=adassp_uncertainty(arrays, plan.privacy["noise_scale"], confidence_of(request)))
        beta, info = regression_coefficients(result, ridge=ridge)
        return Noised({"coefficients": beta, "matrix": result}, {"solution": info},
                      uncertainty=_matrix_uncertainty(plan, result, norm_bound, request))

    return _release(session, df, all_columns, task="linear_regression", plan=plan, d=d, request=request, finish=finish,
                    release_id=release_id, norm_bound=norm_bound, nonfinite=nonfinite, dimension=None,
                    privacy_unit=privacy_unit, max_rows_per_unit=max_rows_per_unit, config_sha256=config_sha256,
                    extra=_extra(columns, params, norm_bound, nonfinite, privacy_unit, label=label),
                    source_paths=source_paths)


def pca(
    session: DPSession,
    df: DataFrame,
    columns: Sequence[str],
    k: int,
    *,
    epsilon: float,
    delta: float,
    norm_bound: float,
    mechanism: str = "analyze_gauss",
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
) -> Release:
    """Top-k principal components of the private second-moment matrix.

    (Uncentred: the eigenpairs of AᵀA; centre the data first, or add a
    constant column, for covariance PCA.)

    Returns:
        A :class:`Release` with ``eigenvalues`` (k,), ``eigenvectors``
        (k, d; row i = component i) and ``matrix`` (d, d).
    """
    owner = "pca"
    epsilon, delta, norm_bound, max_rows_per_unit = _check_common(
        owner, epsilon, delta, norm_bound, neighbors, postprocess, nonfinite, max_rows_per_unit, privacy_unit)
    V.check_option("mechanism", mechanism, PCA_MECHANISMS, owner=owner)
    columns = list(columns) if not isinstance(columns, str) else columns
    d = vector_dimension(df, columns, dimension)
    k = V.check_int("k", k, owner=owner, low=1, high=d)
    plan = plan_mechanism(mechanism, d=d, epsilon=epsilon, delta=delta, norm_bound=norm_bound, neighbors=neighbors,
                          max_rows_per_unit=max_rows_per_unit, postprocess=postprocess, projection_rows=projection_rows,
                          dof=dof, public_n=public_n, prior_dof=prior_dof, calibration=calibration, row_ids=row_ids, projection=projection, owner=owner)
    params = {**plan.params, "k": k}
    request = _request(session, "pca", mechanism, columns, d, params, epsilon, delta, norm_bound, neighbors, nonfinite,
                       privacy_unit, max_rows_per_unit, config_sha256,
                       **confidence_request(P.check("confidence", confidence, owner=owner)))

    def finish(matrix) -> Noised:
        vals, vecs = principal_components(matrix, k)
        bounds, accuracy = pca_uncertainty(plan.mechanism, plan.privacy, plan.params, matrix, vals, vecs, norm_bound,
                                           confidence_of(request))
        return Noised({"eigenvalues": vals, "eigenvectors": vecs, "matrix": matrix}, {"accuracy": accuracy},
                      uncertainty={**_matrix_uncertainty(plan, matrix, norm_bound, request), **bounds})

    return _release(session, df, columns, task="pca", plan=plan, d=d, request=request, finish=finish,
                    release_id=release_id, norm_bound=norm_bound, nonfinite=nonfinite, dimension=dimension,
                    privacy_unit=privacy_unit, max_rows_per_unit=max_rows_per_unit, config_sha256=config_sha256,
                    extra=_extra(columns, params, norm_bound, nonfinite, privacy_unit), source_paths=source_paths)
