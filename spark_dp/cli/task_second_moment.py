"""Tasks ``second_moment``, ``linear_regression`` and ``pca`` of the release job.

Config (``params`` keys per task; all optional unless stated)::

    task: linear_regression          # second_moment | linear_regression | pca
    mechanism: wishart               # analyze_gauss | jl_ridge | wishart | inverse_wishart | adassp (regression)
    dataset: {id: ..., path: ..., columns: [x1, x2, x3], label: y}     # label: linear_regression only
    privacy: {epsilon: 1.0, delta: 1.0e-6, norm_bound: 1.0}
    params: {postprocess: none, projection_rows: 400, dof: 500, calibration: exact, projection: gram, row_ids: content,
             public_n: 100000, prior_dof: 20,   # inverse_wishart with neighbors: replace (m = public_n + prior_dof)
             ridge: 0.0,            # linear_regression only
             k: 3}                  # pca only (required)
"""

from __future__ import annotations

from spark_dp import _validation as V
from spark_dp import params as P
from spark_dp.cli.tasks import TaskSpec, register
from spark_dp.errors import ConfigError
from spark_dp.second_moment.mechanisms import PARAMS as SM_PARAMS
from spark_dp.second_moment.mechanisms import (
    PCA_MECHANISMS,
    REGRESSION_MECHANISMS,
    SECOND_MOMENT_MECHANISMS,
    plan_mechanism,
)

OWNER = "the config"

_COMMON_PARAMS = {
    "postprocess": SM_PARAMS.validator("postprocess", OWNER),
    **{name: P.validator(name, OWNER) for name in ("projection_rows", "dof", "public_n", "prior_dof")},
    **{name: SM_PARAMS.validator(name, OWNER) for name in ("calibration", "row_ids", "projection")},
}


def _dimension(config) -> int:
    ds = config.dataset
    d = ds.dimension if ds.dimension is not None else len(ds.columns)
    return d + (1 if config.task == "linear_regression" else 0)


def _mechanism_plan(config):
    p = config.params
    return plan_mechanism(
        config.mechanism, d=_dimension(config), epsilon=config.privacy.epsilon, delta=config.privacy.delta,
        norm_bound=config.privacy.norm_bound, neighbors=config.privacy.neighbors,
        max_rows_per_unit=config.dataset.max_rows_per_unit, postprocess=p.get("postprocess", "none"),
        projection_rows=p.get("projection_rows"), dof=p.get("dof"), public_n=p.get("public_n"), prior_dof=p.get("prior_dof"),
        calibration=p.get("calibration", "exact"),
        row_ids=p.get("row_ids", "content"), projection=p.get("projection", "gram"), owner=OWNER,
    )


def _plan(config):
    return list(_mechanism_plan(config).events)


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
    if config.task == "pca":
        if "k" not in config.params:
            raise ConfigError("Missing required key 'params.k' in the config (task pca).")
        V.check_int("params.k", config.params["k"], owner=OWNER, low=1, high=_dimension(config))
    _mechanism_plan(config)


def _common_kwargs(config) -> dict:
    p = config.params
    return dict(
        epsilon=config.privacy.epsilon, delta=config.privacy.delta, norm_bound=config.privacy.norm_bound,
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

    return read_dataset(spark, config.dataset.path, config.dataset.format, config.dataset.options)


def _run_second_moment(session, config, spark):
    from spark_dp.second_moment.api import second_moment

    return second_moment(session, _read(config, spark), list(config.dataset.columns),
                         dimension=config.dataset.dimension, **_common_kwargs(config))


def _run_regression(session, config, spark):
    from spark_dp.second_moment.api import linear_regression

    return linear_regression(session, _read(config, spark), list(config.dataset.columns), config.dataset.extra["label"],
                             ridge=config.params.get("ridge", 0.0), **_common_kwargs(config))


def _run_pca(session, config, spark):
    from spark_dp.second_moment.api import pca

    return pca(session, _read(config, spark), list(config.dataset.columns), config.params["k"],
               dimension=config.dataset.dimension, **_common_kwargs(config))


SPEC = register(TaskSpec(
    name="second_moment",
    mechanisms=SECOND_MOMENT_MECHANISMS,
    params=dict(_COMMON_PARAMS),
    plan=_plan,
    run=_run_second_moment,
    check=_check,
))

REGRESSION_SPEC = register(TaskSpec(
    name="linear_regression",
    mechanisms=REGRESSION_MECHANISMS,
    params={**_COMMON_PARAMS, "ridge": P.validator("ridge", OWNER)},
    plan=_plan,
    run=_run_regression,
    dataset_keys={"label": SM_PARAMS.validator("label", OWNER)},
    check=_check,
))

PCA_SPEC = register(TaskSpec(
    name="pca",
    mechanisms=PCA_MECHANISMS,
    params={**_COMMON_PARAMS, "k": P.validator("k", OWNER)},
    plan=_plan,
    run=_run_pca,
    check=_check,
))
