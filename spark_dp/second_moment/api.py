"""Python API of the second-moment family: second moment, regression, PCA.

Every function validates its request (raising ConfigError/SchemaError before
anything is charged), plans the release's privacy events from public
parameters only (:func:`plan_mechanism`), and goes through
``session.run_release``: budget dry run → exact summary on Spark → charge →
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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from pyspark.sql import DataFrame

from spark_dp import _validation as V
from spark_dp.aggregates import NONFINITE_POLICIES, gram_matrix, vector_dimension
from spark_dp.aggregates.gram import gram_matrix_parquet
from spark_dp.aggregates.jl import ROW_IDS
from spark_dp.errors import ConfigError
from spark_dp.privacy import NEIGHBORS, Budget, Chokepoint
from spark_dp.release import Release
from spark_dp.second_moment.adassp import adassp, adassp_plan
from spark_dp.second_moment.analyze_gauss import PAPER_FORMULA as AG_PAPER_FORMULA
from spark_dp.second_moment.analyze_gauss import POSTPROCESS, analyze_gauss, analyze_gauss_plan
from spark_dp.second_moment.inverse_wishart import inverse_wishart, inverse_wishart_plan, posterior_dof
from spark_dp.second_moment.jl_ridge import CALIBRATIONS, PROJECTIONS, jl_ridge, jl_ridge_from_gram, jl_ridge_plan
from spark_dp.second_moment.pca import principal_components
from spark_dp.second_moment.regression import regression_coefficients, solve_normal_equations
from spark_dp.second_moment.wishart import additive_wishart, wishart_plan

if TYPE_CHECKING:
    from spark_dp.session import DPSession

SECOND_MOMENT_MECHANISMS = ("analyze_gauss", "jl_ridge", "wishart", "inverse_wishart")
REGRESSION_MECHANISMS = SECOND_MOMENT_MECHANISMS + ("adassp",)
PCA_MECHANISMS = SECOND_MOMENT_MECHANISMS
DEFAULT_PROJECTION_ROWS = 400
THEOREM_NEIGHBORS = {
    "analyze_gauss": "as requested (sensitivity of A^T A for the relation)",
    "jl_ridge": "add/remove one row (exact chi-square profile); replace via group privacy of size 2",
    "wishart": "replace one row (Sheffet Thm 4.1); implies add/remove since the release depends on A^T A only",
    "inverse_wishart": "add/remove one row with public dof m (exact chi-square profile); replace via group privacy "
                       "of size 2; the paper's m = n + m0 (public_n) needs n public: replace-one only",
    "adassp": "as requested (sensitivities of lambda_min, X^T X and X^T y for the relation)",
}


# What the secure-sampler argument covers for the JL release, stated in every JL manifest
# (docs/privacy.md, "Floating point and the JL projection").
JL_FLOATING_POINT = {
    "gram": ("The Gaussian matrix Z comes from the session sampler (secure: exact discrete Gaussian on a 2^-30 grid), "
             "so the sampling-side floating-point attacks (Mironov 2012; Jin et al. 2022: the irregular set of "
             "doubles a floating-point sampler can return) do not apply. The release is not x + noise but "
             "L Z^T Z L^T / r computed in floating point; the privacy proof is for exact arithmetic and the "
             "rounding of those products is not covered by it (no attack on it is known)."),
    "rows": ("R's data columns are Box-Muller floating-point normals from Philox on the executors, NOT the secure "
             "sampler: the secure-sampler argument does not cover them. Use projection 'gram' (the default) when "
             "floating-point attacks are in the threat model."),
}


def default_projection_rows(d: int) -> int:
    """Default r (JL) and m (inverse-Wishart): max(400, 2d)."""
    return max(DEFAULT_PROJECTION_ROWS, 2 * d)


@dataclass
class MechanismPlan:
    """The public plan of one release: events, privacy fields, and how to noise."""

    mechanism: str
    events: list
    privacy: dict[str, Any]
    params: dict[str, Any]
    noise: Callable[..., Any] = field(repr=False)
    needs_gram: bool = True


def plan_mechanism(
    mechanism: str, *, d: int, epsilon: float, delta: float, norm_bound: float, neighbors: str = "add_remove",
    max_rows_per_unit: int = 1, postprocess: str = "none", projection_rows: int | None = None, dof: int | None = None,
    public_n: int | None = None, prior_dof: int | None = None,
    calibration: str = "exact", row_ids: str = "content", projection: str = "gram", owner: str = "second_moment",
) -> MechanismPlan:
    """Validates the mechanism's parameters against d and plans its events.

    Raises ConfigError (naming the parameter) for: max_rows_per_unit > 1 with
    a Sheffet mechanism, r or m < d + 2, a Wishart k below Sheffet's bound
    for (ε, δ), ε > 1 for Wishart, ``calibration="paper"`` for
    inverse_wishart or adassp (no paper constant we can cite) or with
    ε ≥ 1 for analyze_gauss, ``public_n``/``prior_dof`` other than for
    inverse_wishart, ``public_n`` with add/remove neighbours or with ``dof``.

    ``public_n`` (inverse_wishart): the paper's posterior m = n + m₀ with n
    public (given by the user, recorded in the manifest) and m₀ =
    ``prior_dof`` (default d + 2); Sheffet's neighbours (replace one row).
    """
    V.check_option("calibration", calibration, CALIBRATIONS, owner=owner)
    V.check_option("row_ids", row_ids, ROW_IDS, owner=owner)
    V.check_option("projection", projection, PROJECTIONS, owner=owner)
    if row_ids != "content" and mechanism != "jl_ridge":
        raise ConfigError(f"The 'row_ids' parameter of {owner} applies to mechanism 'jl_ridge' only. Got {row_ids!r} for {mechanism!r}.")
    if projection != "gram" and mechanism != "jl_ridge":
        raise ConfigError(f"The 'projection' parameter of {owner} applies to mechanism 'jl_ridge' only. Got {projection!r} for {mechanism!r}.")
    if row_ids != "content" and projection != "rows":
        raise ConfigError(f"The 'row_ids' parameter of {owner} applies to projection 'rows' only (the default "
                          f"projection 'gram' draws no per-row randomness). Got {row_ids!r} with projection {projection!r}.")
    if calibration == "paper" and mechanism not in ("jl_ridge", "analyze_gauss", "wishart"):
        raise ConfigError(f"The 'calibration' parameter of {owner} may be 'paper' only for mechanisms 'analyze_gauss', "
                          f"'jl_ridge' and 'wishart' (no published constant to reproduce for {mechanism!r}). "
                          f"Got {calibration!r} for {mechanism!r}.")
    if projection_rows is not None and mechanism != "jl_ridge":
        raise ConfigError(f"The 'projection_rows' parameter of {owner} applies to mechanism 'jl_ridge' only. Got {projection_rows} for {mechanism!r}.")
    if dof is not None and mechanism not in ("wishart", "inverse_wishart"):
        raise ConfigError(f"The 'dof' parameter of {owner} applies to mechanisms 'wishart' and 'inverse_wishart' only. Got {dof} for {mechanism!r}.")
    for pname_, pval_ in (("public_n", public_n), ("prior_dof", prior_dof)):
        if pval_ is not None and mechanism != "inverse_wishart":
            raise ConfigError(f"The {pname_!r} parameter of {owner} applies to mechanism 'inverse_wishart' only. Got {pval_} for {mechanism!r}.")
    if prior_dof is not None and public_n is None:
        raise ConfigError(f"The 'prior_dof' parameter of {owner} needs 'public_n' (the posterior has m = public_n + prior_dof). "
                          f"Got prior_dof={prior_dof} without public_n.")
    if public_n is not None:
        public_n = V.check_int("public_n", public_n, owner=owner, low=1)
        if neighbors != "replace":
            raise ConfigError(f"The 'public_n' parameter of {owner} needs neighbors 'replace' (n is public only when "
                              f"neighbours replace a row, as in Sheffet's theorem). Got neighbors {neighbors!r}.")
        if dof is not None:
            raise ConfigError(f"The 'dof' parameter of {owner} must not be given with 'public_n' (m = public_n + prior_dof). Got {dof}.")
        prior_dof = V.check_int("prior_dof", d + 2 if prior_dof is None else prior_dof, owner=owner, low=d)
        dof = posterior_dof(public_n, prior_dof)
    if mechanism not in ("analyze_gauss", "adassp") and max_rows_per_unit != 1:
        raise ConfigError(
            f"The 'max_rows_per_unit' parameter of {owner} must be 1 for mechanism {mechanism!r} "
            f"(its privacy proof is for one row per unit). Got {max_rows_per_unit} instead."
        )
    base = {"epsilon": epsilon, "delta": delta, "neighbors": neighbors, "norm_bound": norm_bound,
            "privacy_unit_rows": max_rows_per_unit, "theorem_neighbors": THEOREM_NEIGHBORS[mechanism]}
    if mechanism == "analyze_gauss":
        event, sigma, sens = analyze_gauss_plan(epsilon=epsilon, delta=delta, norm_bound=norm_bound,
                                                neighbors=neighbors, max_rows_per_unit=max_rows_per_unit,
                                                calibration=calibration, owner=owner)

        def noise(gram, cp):
            return analyze_gauss(gram, chokepoint=cp, sigma=sigma, sensitivity=sens, postprocess=postprocess)

        privacy = {**base, "sensitivity": sens, "sensitivity_norm": "l2 of the upper triangle of A^T A",
                   "noise": "gaussian", "noise_sigma": sigma, "noise_multiplier": event.noise_multiplier,
                   "calibration": "exact (Balle & Wang 2018)" if calibration == "exact" else AG_PAPER_FORMULA,
                   "event_representation": "GaussianEvent at the noise multiplier used (what the release guarantees)"}
        return MechanismPlan(mechanism, [event], privacy, {"postprocess": postprocess, "calibration": calibration}, noise)
    if mechanism == "adassp":
        if postprocess != "none":
            raise ConfigError(f"The 'postprocess' parameter of {owner} must be 'none' for mechanism 'adassp' "
                              f"(it releases no second-moment matrix to post-process). Got {postprocess!r} instead.")
        plan = adassp_plan(epsilon=epsilon, delta=delta, norm_bound=norm_bound, neighbors=neighbors,
                           max_rows_per_unit=max_rows_per_unit)
        privacy = {**base, "noise": "gaussian x3 (lambda_min, X^T X, X^T y)", "noise_sigma": list(plan.sigmas),
                   "sensitivity": list(plan.sensitivities),
                   "calibration": "exact composition of three equal Gaussian releases (mu-GDP)",
                   "rho": plan.rho, "clipping": "rows [x, y] jointly to L2 norm <= B"}
        return MechanismPlan(mechanism, list(plan.events), privacy, {},
                             lambda gram, cp: adassp(gram, chokepoint=cp, plan=plan))
    if mechanism == "wishart":
        event, k = wishart_plan(d=d, epsilon=epsilon, delta=delta, dof=dof, owner=owner)

        def noise(gram, cp):
            return additive_wishart(gram, chokepoint=cp, event=event, k=k, norm_bound=norm_bound, postprocess=postprocess)

        privacy = {**base, "noise": "additive Wishart W_d(B^2 I, k)", "dof": k,
                   "calibration": f"{calibration}: Sheffet Thm 4.1, k >= d + 28 ln(4/delta)/epsilon^2 "
                                  "(the paper's bound; no exact profile is known, so both modes plan the same k)",
                   "event_representation": "EpsilonDeltaEvent (tail bound; no tighter profile known)"}
        return MechanismPlan(mechanism, [event], privacy, {"postprocess": postprocess, "dof": k,
                                                           "calibration": calibration}, noise)
    r = default_projection_rows(d) if (projection_rows if mechanism == "jl_ridge" else dof) is None else int(
        projection_rows if mechanism == "jl_ridge" else dof)
    pname = "projection_rows" if mechanism == "jl_ridge" else "dof"
    if r < d + 2:
        raise ConfigError(
            f"The {pname!r} parameter of {owner} must be at least d + 2 = {d + 2} for mechanism {mechanism!r} "
            f"(the release must be positive definite). Got {r} instead."
        )
    if mechanism == "jl_ridge":
        event, w = jl_ridge_plan(epsilon=epsilon, delta=delta, norm_bound=norm_bound, r=r, neighbors=neighbors,
                                 calibration=calibration)

        if projection == "gram":

            def noise(gram, cp):
                return jl_ridge_from_gram(gram, chokepoint=cp, event=event, r=r, w=w, postprocess=postprocess)
        else:

            def noise(project, cp):
                return jl_ridge(project, chokepoint=cp, event=event, r=r, d=d, w=w, postprocess=postprocess)

        privacy = {**base, "noise": "Gaussian JL projection of [A; wI]", "projection_rows": r, "ridge_w": w,
                   "ridge_w2": w * w,
                   "calibration": ("exact chi-square privacy profile, worst case over a <= B^2/w^2"
                                   if calibration == "exact" else "paper: w^2 = (8B^2/eps)(sqrt(2r ln(8/delta)) + 2 ln(8/delta))"),
                   "event_representation": type(event).__name__ + (
                       " (exact chi-square PLD, composed tightly)" if type(event).__name__ == "Chi2ProfileEvent"
                       else " at the calibrated (epsilon, delta)")}
        if projection == "gram":
            privacy["projection"] = ("gram: R·Ã drawn in its exact distribution, rows i.i.d. N(0, A^T A + w^2 I), "
                                     "from the exact A^T A (one pass; R is never drawn)")
            privacy["randomness"] = ("Z (r x d) i.i.d. N(0,1) from the session sampler after the charge (secure: "
                                     "OpenDP discrete Gaussian on the 2^-30 grid, OS entropy; the source of the "
                                     "Wishart mechanisms); release (Z L^T)^T (Z L^T)/r with L L^T = A^T A + w^2 I")
            privacy["floating_point"] = JL_FLOATING_POINT["gram"]
        else:
            privacy["projection"] = "rows: R's columns drawn per data row on the executors"
            privacy["randomness"] = ("R's data columns: Philox4x32-10 keyed by a 64-bit secret drawn after the charge, "
                                     "Box-Muller floating-point normals, one counter per row (see row_ids); "
                                     "ridge columns: the session sampler")
            privacy["floating_point"] = JL_FLOATING_POINT["rows"]
            privacy["row_ids"] = ("content hash (partition-independent)" if row_ids == "content"
                                  else "partition id and position (depends on the input's partitioning)")
        return MechanismPlan(mechanism, [event], privacy, {"postprocess": postprocess, "projection_rows": r,
                                                           "calibration": calibration, "projection": projection,
                                                           "row_ids": row_ids},
                             noise, needs_gram=projection == "gram")
    if mechanism == "inverse_wishart":
        event, w, _ = inverse_wishart_plan(epsilon=epsilon, delta=delta, norm_bound=norm_bound, dof=r, neighbors=neighbors)

        def noise(gram, cp):
            return inverse_wishart(gram, chokepoint=cp, event=event, dof=r, w=w, postprocess=postprocess)

        privacy = {**base, "noise": "inverse-Wishart posterior sample W^-1(A^T A + w^2 I, m), rescaled by m - d - 1",
                   "dof": r, "ridge_w": w, "ridge_w2": w * w,
                   "dof_rule": ("public dof m" if public_n is None else
                                "Sheffet's posterior m = n + m0 with n public (public_n, given by the user; "
                                "not checked against the data) under replace-one neighbours"),
                   "public_n": public_n, "prior_dof": prior_dof,
                   "calibration": "exact chi-square privacy profile, worst case over a <= B^2/w^2",
                   "event_representation": type(event).__name__ + (
                       " (exact chi-square PLD, composed tightly)" if type(event).__name__ == "Chi2ProfileEvent"
                       else " at the calibrated (epsilon, delta)")}
        iw_params = {"postprocess": postprocess, "dof": r}
        if public_n is not None:
            iw_params.update(public_n=public_n, prior_dof=prior_dof)
        return MechanismPlan(mechanism, [event], privacy, iw_params, noise)
    raise ConfigError(f"unknown mechanism {mechanism!r}")


def _check_common(owner, epsilon, delta, norm_bound, neighbors, postprocess, nonfinite, max_rows_per_unit, privacy_unit):
    epsilon = V.check_real("epsilon", epsilon, owner=owner, low=0, low_open=True)
    delta = V.check_real("delta", delta, owner=owner, low=0, high=1, low_open=True, high_open=True)
    norm_bound = V.check_real("norm_bound", norm_bound, owner=owner, low=0, low_open=True)
    V.check_option("neighbors", neighbors, NEIGHBORS, owner=owner)
    V.check_option("postprocess", postprocess, POSTPROCESS, owner=owner)
    V.check_option("nonfinite", nonfinite, NONFINITE_POLICIES, owner=owner)
    max_rows_per_unit = V.check_int("max_rows_per_unit", max_rows_per_unit, owner=owner, low=1)
    if privacy_unit is not None:
        V.check_str("privacy_unit", privacy_unit, owner=owner)
    return epsilon, delta, norm_bound, max_rows_per_unit


def _release(
    session: DPSession, df: DataFrame, columns: list[str] | str, *, task: str, plan: MechanismPlan, d: int,
    request: dict, finish: Callable[[Any, dict], dict[str, np.ndarray]], release_id, norm_bound, nonfinite, dimension,
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
        if source_paths:
            # Same matrix, with the tasks reading the Parquet files themselves
            # (skips the JVM -> Arrow conversion; docs/benchmarks.md).
            return gram_matrix_parquet(source_paths, columns, norm_bound=norm_bound, nonfinite=nonfinite,
                                       dimension=dimension, privacy_unit=privacy_unit,
                                       max_rows_per_unit=max_rows_per_unit, spark=df.sparkSession)
        return gram_matrix(df, columns, norm_bound=norm_bound, nonfinite=nonfinite, dimension=dimension,
                           privacy_unit=privacy_unit, max_rows_per_unit=max_rows_per_unit)

    def noise(exact, cp: Chokepoint) -> dict[str, np.ndarray]:
        return finish(plan.noise(exact, cp), extra)

    privacy = {**plan.privacy, "privacy_unit": privacy_unit or "row", "max_rows_per_unit": max_rows_per_unit}
    return session.run_release(
        task=task, mechanism=plan.mechanism, release_id=release_id, request=request, events=plan.events,
        budget=Budget(request["epsilon"], request["delta"]), compute=compute, noise=noise, privacy=privacy,
        extra=extra, config_sha256=config_sha256,
    )


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
                       neighbors, nonfinite, privacy_unit, max_rows_per_unit, config_sha256)
    return _release(session, df, columns, task="second_moment", plan=plan, d=d, request=request,
                    finish=lambda m, extra: {"matrix": m}, release_id=release_id, norm_bound=norm_bound,
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
    ridge = V.check_real("ridge", ridge, owner=owner, low=0)
    label = V.check_str("label", label, owner=owner)
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
                       neighbors, nonfinite, privacy_unit, max_rows_per_unit, config_sha256, label=label)

    def finish(result, extra):
        if mechanism == "adassp":
            info = result.pop("info")
            lam = float(result["lambda"][0])
            if ridge:  # the user's ridge on top of the adaptive one (post-processing)
                result["coefficients"], info = solve_normal_equations(result["xtx"], result["xty"], ridge=ridge + lam)
            extra["solution"] = {**info, "adaptive_ridge": lam}
            return result
        beta, info = regression_coefficients(result, ridge=ridge)
        extra["solution"] = info
        return {"coefficients": beta, "matrix": result}

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
                       privacy_unit, max_rows_per_unit, config_sha256)

    def finish(matrix, extra):
        vals, vecs = principal_components(matrix, k)
        return {"eigenvalues": vals, "eigenvectors": vecs, "matrix": matrix}

    return _release(session, df, columns, task="pca", plan=plan, d=d, request=request, finish=finish,
                    release_id=release_id, norm_bound=norm_bound, nonfinite=nonfinite, dimension=dimension,
                    privacy_unit=privacy_unit, max_rows_per_unit=max_rows_per_unit, config_sha256=config_sha256,
                    extra=_extra(columns, params, norm_bound, nonfinite, privacy_unit), source_paths=source_paths)
