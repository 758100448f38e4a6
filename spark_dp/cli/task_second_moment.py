"""Tasks ``second_moment``, ``linear_regression`` and ``pca`` of the release job.

Config (``params`` keys per task; all optional unless stated)::

    task: linear_regression          # second_moment | linear_regression | pca
    mechanism: wishart               # analyze_gauss | jl_ridge | wishart | inverse_wishart | adassp (regression)
    dataset: {id: ..., path: ..., columns: [x1, x2, x3], label: y,     # label: linear_regression only
              bounds: {x1: [0, 5], x2: [-1, 1], x3: [0, 100], y: [0, 20]}}  # optional: public bounds, data units
                                                                            # (or auto: chosen privately)
    privacy: {epsilon: 1.0, delta: 1.0e-6, norm_bound: 1.0}   # norm_bound: a number, auto, or omitted when every
                                                              # column (label included) has bounds
    params: {postprocess: none, projection_rows: 400, dof: 500, calibration: exact, projection: gram, row_ids: content,
             public_n: 100000, prior_dof: 20,   # inverse_wishart with neighbors: replace (m = public_n + prior_dof)
             ridge: 0.0,            # linear_regression only
             fit_intercept: true,   # linear_regression only; default true with dataset.bounds, false without
             covers: noise,         # linear_regression only: noise | noise+sampling (what the intervals cover)
             norm_bound_share: 0.1, norm_bound_quantile: 0.95,   # norm_bound: auto only (regression: 0.5)
             clipping_report: false, clipping_report_share: 0.05,  # opt-in: the private share of clipped rows
             bounds_share: 0.1,     # dataset.bounds: auto only
             k: 3,                  # pca only (required)
             standardize: none,     # pca only: none | bounds | mean (both need dataset.bounds for every column;
             mean_share: 0.1}       # mean: no privacy.norm_bound; mean_share = the private mean's budget share)

``params.fit_intercept`` defaults to true when ``dataset.bounds`` is given and
to false otherwise (the API's default is true): a config written before
intercepts existed keeps its results, its digest and its release id.
"""

from __future__ import annotations

import math

from spark_dp import _validation as V
from spark_dp import params as P
from spark_dp.cli.tasks import TaskSpec, register
from spark_dp.errors import ConfigError
from spark_dp.privacy.quantile import BoundsPlan, plan_quantile
from spark_dp.second_moment.centre import DEFAULT_MEAN_SHARE, plan_centre
from spark_dp.second_moment.clipping import DEFAULT_SHARE as CLIPPING_SHARE
from spark_dp.second_moment.clipping import check_shares, plan_clipping_report
from spark_dp.second_moment.mechanisms import PARAMS as SM_PARAMS
from spark_dp.second_moment.mechanisms import (
    PCA_MECHANISMS,
    REGRESSION_MECHANISMS,
    SECOND_MOMENT_MECHANISMS,
    bound_planner,
    release_events,
)

OWNER = "the config"

_COMMON_PARAMS = {
    "postprocess": SM_PARAMS.validator("postprocess", OWNER),
    **{name: P.validator(name, OWNER) for name in ("projection_rows", "dof", "public_n", "prior_dof")},
    **{name: SM_PARAMS.validator(name, OWNER) for name in ("calibration", "row_ids", "projection")},
    **{name: P.validator(name, OWNER) for name in ("norm_bound_share", "norm_bound_quantile", "clipping_report",
                                                    "clipping_report_share", "bounds_share")},
}
DEFAULT_SHARE = 0.1  # as the API's (spark_dp.second_moment.api; pyspark-free here)
BOUNDS_SHARE = 0.1  # bounds: auto, as the API's
DEFAULT_QUANTILE = {"second_moment": 0.95, "pca": 0.95, "linear_regression": 0.5}


def _dimension(config) -> int:
    ds = config.dataset
    d = ds.dimension if ds.dimension is not None else len(ds.columns)
    return d + (1 if config.task == "linear_regression" else 0)


def _fit_intercept(config) -> bool:
    """``params.fit_intercept``; default true with ``dataset.bounds``, false without (module docstring)."""
    return config.params.get("fit_intercept", config.dataset.extra.get("bounds") is not None)


def _size(config) -> int:
    """Length of the vector: the columns plus the constant column (an intercept, or with bounds)."""
    constant = config.dataset.extra.get("bounds") is not None or (
        config.task == "linear_regression" and _fit_intercept(config))
    return _dimension(config) + constant


def _norm_bound(config):
    """The norm bound as the API resolves it: the number, 'auto', or √size with every column bounded."""
    nb = config.privacy.norm_bound
    if nb is not None:
        return nb
    bounds = config.dataset.extra.get("bounds") or {}
    names = list(config.dataset.columns) + ([config.dataset.extra["label"]]
                                            if config.task == "linear_regression" else [])
    if bounds == "auto":
        bounds = dict.fromkeys(names)
    if config.dataset.dimension is not None or any(c not in bounds for c in names):
        raise ConfigError("Missing required key 'privacy.norm_bound' in the config (it may be omitted only when "
                          "dataset.bounds covers every column, the label included; or give 'auto').")
    return math.sqrt(_size(config))


def _plan_for(config):
    p, priv = config.params, config.privacy
    nb = _norm_bound(config)
    quantile = None if nb != "auto" else plan_quantile(
        priv.epsilon * p.get("norm_bound_share", DEFAULT_SHARE), p.get("norm_bound_quantile", DEFAULT_QUANTILE[config.task]),
        max_rows_per_unit=config.dataset.max_rows_per_unit, neighbors=priv.neighbors)
    clipping = None if not p.get("clipping_report", False) else plan_clipping_report(
        priv.epsilon * p.get("clipping_report_share", CLIPPING_SHARE),
        max_rows_per_unit=config.dataset.max_rows_per_unit, neighbors=priv.neighbors)
    if quantile is not None and clipping is not None:
        check_shares(OWNER, p.get("norm_bound_share", DEFAULT_SHARE), p.get("clipping_report_share", CLIPPING_SHARE))
    auto_bounds = None
    if config.dataset.extra.get("bounds") == "auto":
        if nb == "auto":
            raise ConfigError("The 'privacy.norm_bound' parameter of the config may not be 'auto' with dataset.bounds "
                              "'auto' (every column is then bounded: omit it, or give a number).")
        share = p.get("bounds_share", BOUNDS_SHARE)
        check_shares(OWNER, p.get("clipping_report_share", CLIPPING_SHARE) if clipping else 0.0, share,
                     what="params.bounds_share", other="params.clipping_report_share")
        names = list(config.dataset.columns) + ([config.dataset.extra["label"]]
                                                if config.task == "linear_regression" else [])
        auto_bounds = BoundsPlan(priv.epsilon * share, tuple(names), config.dataset.max_rows_per_unit, priv.neighbors)
    reserved = (clipping.epsilon if clipping else 0.0) + (auto_bounds.epsilon if auto_bounds else 0.0)
    plan_for = bound_planner(
        config.mechanism, size=_size(config), epsilon=priv.epsilon - reserved,
        quantile=quantile, owner=OWNER,
        delta=priv.delta, neighbors=priv.neighbors,
        max_rows_per_unit=config.dataset.max_rows_per_unit, postprocess=p.get("postprocess", "none"),
        projection_rows=p.get("projection_rows"), dof=p.get("dof"), public_n=p.get("public_n"), prior_dof=p.get("prior_dof"),
        calibration=p.get("calibration", "exact"),
        row_ids=p.get("row_ids", "content"), projection=p.get("projection", "gram"),
    )
    return plan_for, nb, quantile, clipping, auto_bounds


def _mean_centred(config) -> bool:
    return config.task == "pca" and config.params.get("standardize", "none") == "mean"


def _centre_plan(config):
    """``params.standardize: mean``: the mean's plan and the mechanism's on the d centred columns (as the API's)."""
    p, priv = config.params, config.privacy
    if priv.norm_bound is not None:
        raise ConfigError("The 'privacy.norm_bound' parameter of the config must be omitted with params.standardize "
                          "'mean' (the centred rows' bound follows from the bounds and the released mean).")
    for key, bad in (("clipping_report", p.get("clipping_report", False)),
                     ("projection", p.get("projection", "gram") != "gram")):
        if bad:
            raise ConfigError(f"The 'params.{key}' parameter of the config is not supported with params.standardize "
                              "'mean' (clipping_report false, projection gram).")
    d = _dimension(config)

    def planner(eps: float, dlt: float):
        return bound_planner(
            config.mechanism, size=d, epsilon=eps, quantile=None, owner=OWNER, delta=dlt, neighbors=priv.neighbors,
            max_rows_per_unit=config.dataset.max_rows_per_unit, postprocess=p.get("postprocess", "none"),
            projection_rows=p.get("projection_rows"), dof=p.get("dof"), public_n=p.get("public_n"),
            prior_dof=p.get("prior_dof"), calibration=p.get("calibration", "exact"),
            row_ids=p.get("row_ids", "content"), projection=p.get("projection", "gram"))

    return plan_centre(planner, d=d, epsilon=priv.epsilon, delta=priv.delta,
                       share=p.get("mean_share", DEFAULT_MEAN_SHARE), neighbors=priv.neighbors,
                       max_rows_per_unit=config.dataset.max_rows_per_unit, owner=OWNER)


def _plan(config):
    if _mean_centred(config):  # the mean's Gaussian, then the mechanism's events (as the API charges them)
        _plan_for(config)  # the shared checks (bounds, mechanism parameters at d + 1)
        centre, plan_for = _centre_plan(config)
        return [centre.event, *plan_for(1.0).events]
    return release_events(*_plan_for(config))


def _check(config) -> None:
    """Cross-key checks before Spark starts (the plan raises for bad mechanism parameters)."""
    if config.task == "linear_regression":
        label = config.dataset.extra.get("label")
        if label is None:
            raise ConfigError("Missing required key 'dataset.label' in the config (task linear_regression).")
        if label in config.dataset.columns:
            raise ConfigError(f"The 'dataset.label' parameter of the config must not be one of dataset.columns. Got {label!r} instead.")
        if config.dataset.dimension is not None:
            raise ConfigError("The 'dataset.dimension' parameter of the config is not supported for linear_regression "
                              "(give the features as numeric columns).")
        if config.params.get("covers", "noise") == "noise+sampling":
            if config.mechanism == "adassp":
                raise ConfigError("The 'params.covers' parameter of the config must be 'noise' for mechanism 'adassp' "
                                  "(it releases no y^T y, so the sampling error cannot be estimated). Got "
                                  "'noise+sampling' instead.")
            if not _fit_intercept(config) and config.dataset.extra.get("bounds") is None:
                raise ConfigError("The 'params.covers' parameter of the config 'noise+sampling' needs the constant "
                                  "column, which holds the row count: set params.fit_intercept (or give "
                                  "dataset.bounds).")
    if config.task == "pca":
        if "k" not in config.params:
            raise ConfigError("Missing required key 'params.k' in the config (task pca).")
        V.check_int("params.k", config.params["k"], owner=OWNER, low=1, high=_dimension(config))
        std = config.params.get("standardize", "none")
        if std != "none" and not (isinstance(config.dataset.extra.get("bounds"), dict)
                                  and set(config.dataset.columns) <= set(config.dataset.extra["bounds"])):
            raise ConfigError(f"The 'params.standardize' parameter of the config is {std!r}, which needs public "
                              "'dataset.bounds' for every column.")
    if "mean_share" in config.params and not _mean_centred(config):
        raise ConfigError("The 'params.mean_share' parameter of the config applies to task pca with "
                          "params.standardize 'mean' only.")
    bounds = config.dataset.extra.get("bounds")
    if bounds is not None and bounds != "auto":
        names = list(config.dataset.columns) + [config.dataset.extra.get("label")]
        unknown = [c for c in bounds if c not in names]
        if unknown:
            raise ConfigError(f"The 'dataset.bounds' parameter of the config names {unknown[0]!r}, which is not one "
                              "of dataset.columns (or dataset.label).")
    _plan(config)


def _common_kwargs(config) -> dict:
    p = config.params
    return dict(
        epsilon=config.privacy.epsilon, delta=config.privacy.delta, norm_bound=config.privacy.norm_bound,
        bounds=config.dataset.extra.get("bounds"),
        norm_bound_share=p.get("norm_bound_share", DEFAULT_SHARE),
        norm_bound_quantile=p.get("norm_bound_quantile", DEFAULT_QUANTILE[config.task]),
        clipping_report=p.get("clipping_report", False),
        clipping_report_share=p.get("clipping_report_share", CLIPPING_SHARE),
        bounds_share=p.get("bounds_share", BOUNDS_SHARE),
        mechanism=config.mechanism, release_id=config.release_id, confidence=config.output.confidence, neighbors=config.privacy.neighbors,
        postprocess=p.get("postprocess", "none"), nonfinite=config.dataset.nonfinite,
        privacy_unit=config.dataset.privacy_unit, max_rows_per_unit=config.dataset.max_rows_per_unit,
        projection_rows=p.get("projection_rows"), dof=p.get("dof"), public_n=p.get("public_n"), prior_dof=p.get("prior_dof"),
        calibration=p.get("calibration", "exact"),
        row_ids=p.get("row_ids", "content"), projection=p.get("projection", "gram"),
        config_sha256=config.sha256,
        # A plain Parquet read: let the tasks read the files themselves (same matrix, faster).
        source_paths=[config.dataset.path] if (config.dataset.format == "parquet" and config.dataset.path
                                               and not config.dataset.options) else None,
    )


def _read(config, spark):
    from spark_dp.aggregates import read_dataset

    return read_dataset(spark, config.dataset.path, config.dataset.format, config.dataset.options,
                        schema=config.dataset.schema)


def _run_second_moment(session, config, spark):
    from spark_dp.second_moment.api import second_moment

    return second_moment(session, _read(config, spark), list(config.dataset.columns),
                         dimension=config.dataset.dimension, **_common_kwargs(config))


def _run_regression(session, config, spark):
    from spark_dp.second_moment.api import linear_regression

    return linear_regression(session, _read(config, spark), list(config.dataset.columns), config.dataset.extra["label"],
                             ridge=config.params.get("ridge", 0.0), fit_intercept=_fit_intercept(config),
                             covers=config.params.get("covers", "noise"), **_common_kwargs(config))


def _run_pca(session, config, spark):
    from spark_dp.second_moment.api import pca

    return pca(session, _read(config, spark), list(config.dataset.columns), config.params["k"],
               dimension=config.dataset.dimension, standardize=config.params.get("standardize", "none"),
               **({"mean_share": config.params["mean_share"]} if "mean_share" in config.params else {}),
               **_common_kwargs(config))


SPEC = register(TaskSpec(
    name="second_moment",
    mechanisms=SECOND_MOMENT_MECHANISMS,
    params=dict(_COMMON_PARAMS),
    plan=_plan,
    run=_run_second_moment,
    dataset_keys={"bounds": P.validator("bounds", OWNER)},
    check=_check,
    requires_norm_bound=False,
    norm_bound_auto=True,
))

REGRESSION_SPEC = register(TaskSpec(
    name="linear_regression",
    mechanisms=REGRESSION_MECHANISMS,
    params={**_COMMON_PARAMS, "ridge": P.validator("ridge", OWNER), "fit_intercept": P.validator("fit_intercept", OWNER),
            "covers": P.validator("covers", OWNER)},
    plan=_plan,
    run=_run_regression,
    dataset_keys={"label": SM_PARAMS.validator("label", OWNER), "bounds": P.validator("bounds", OWNER)},
    check=_check,
    requires_norm_bound=False,
    norm_bound_auto=True,
))

PCA_SPEC = register(TaskSpec(
    name="pca",
    mechanisms=PCA_MECHANISMS,
    params={**_COMMON_PARAMS, "k": P.validator("k", OWNER), "standardize": SM_PARAMS.validator("standardize", OWNER),
            "mean_share": SM_PARAMS.validator("mean_share", OWNER)},
    plan=_plan,
    run=_run_pca,
    dataset_keys={"bounds": P.validator("bounds", OWNER)},
    check=_check,
    requires_norm_bound=False,
    norm_bound_auto=True,
))
