"""Task ``tensor_decomposition``: eigenpairs of a symmetric third-order tensor (Wang & Anandkumar 2016).

The dataset is an explicit tensor (``format: tensor``, a ``.npy`` file of
shape (d, d, d); neighbours ``tensor_entry``) or rows in a Spark format whose
third moment Σ x^⊗3 is decomposed without forming it (neighbours
``add_remove`` / ``replace``; ``privacy.norm_bound`` required unless
``dataset.bounds`` gives public bounds ``[lo, hi]`` in the data's units for
every column: then B = √d, and the decomposition is that of the rows clamped
and scaled into [-1, 1], with ``directions`` in the data's units, as
:func:`spark_dp.tensor.api.tensor_decomposition` describes). For a plain
Parquet dataset in ``reuse`` mode the tasks read the files themselves and
keep the prepared rows between rounds in files the Python workers of a host
share (``params.worker_cache_bytes`` caps that cache per host; 0 turns it off).

``dataset.bounds: auto`` (rows, private mechanism) chooses every column's
bounds privately at ``params.bounds_share`` of ε (default 0.1) and
``privacy.norm_bound: auto`` the norm bound at ``params.norm_bound_share``
(default 0.1; ``params.norm_bound_quantile``, default 0.95): one more event
each, planned here as the API plans it (the second-moment tasks' keys).
"""

from __future__ import annotations

import math

import numpy as np

from spark_dp import params as P
from spark_dp.cli.tasks import TaskSpec, register
from spark_dp.errors import ConfigError, SchemaError
from spark_dp.params import FORMATS
from spark_dp.privacy.quantile import BoundsPlan, plan_quantile
from spark_dp.tensor.mechanisms import (
    EXPLICIT_ONLY,
    PRIVATE,
    ROWS_ONLY,
    TENSOR_MECHANISMS,
    TENSOR_NEIGHBORS,
    TensorRequest,
    plan_events,
)
from spark_dp.tensor.mechanisms import PARAMS as TENSOR_PARAMS

OWNER = "the config"
DEFAULTS = {"restarts": 20, "iterations": 30, "mode": "fresh", "rows_per_round": None, "calibration": "exact",
            "whiten": False, "bounds_share": 0.1, "norm_bound_share": 0.1,
            "norm_bound_quantile": 0.95}  # as the API's (spark_dp.second_moment._prepare; pyspark-free here)


PARAMS = {
    **{name: P.validator(name, OWNER) for name in ("k", "restarts", "iterations", "rows_per_round", "whiten",
                                                    "bounds_share", "norm_bound_share", "norm_bound_quantile")},
    **{name: TENSOR_PARAMS.validator(name, OWNER) for name in ("mode", "calibration", "worker_cache_bytes")},
}


def _p(config, key):
    return config.params.get(key, DEFAULTS.get(key))


def _explicit(config) -> bool:
    return config.dataset.format == "tensor"


def _tensor_shape(path: str) -> tuple[int, ...]:
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False).shape  # header only
    except (ValueError, OSError) as exc:
        raise SchemaError(f"Input path {path!r} is not a .npy array file: {exc}") from None


def _check(config) -> None:
    """Cross-key checks, before Spark starts and before anything is charged."""
    mech = config.mechanism
    if "k" not in config.params:
        raise ConfigError("Missing required key 'params.k' in the config.")
    k = config.params["k"]
    if _explicit(config):
        if mech in ROWS_ONLY:
            raise ConfigError(f"The 'mechanism' {mech!r} needs rows; 'dataset.format' is 'tensor'.")
        for key in ("mode", "rows_per_round"):
            if key in config.params:
                raise ConfigError(f"The 'params.{key}' parameter applies to rows only; remove it for an explicit "
                                  "tensor (dataset.format: tensor).")
        if _p(config, "whiten"):
            raise ConfigError("The 'params.whiten' parameter must be false for an explicit tensor (no second moment "
                              "to whiten with). Got true instead.")
        if mech in PRIVATE and config.privacy.neighbors != "tensor_entry":
            raise ConfigError(
                "The 'privacy.neighbors' parameter must be 'tensor_entry' for an explicit tensor "
                f"(dataset.format: tensor). Got {config.privacy.neighbors!r} instead."
            )
        shape = _tensor_shape(config.dataset.path)
        if len(shape) != 3 or not shape[0] == shape[1] == shape[2]:
            raise SchemaError(f"The tensor in {config.dataset.path!r} must have shape (d, d, d). Got shape {shape} instead.")
        d = shape[0]
    else:
        if mech in EXPLICIT_ONLY:
            raise ConfigError(f"The 'mechanism' {mech!r} needs an explicit tensor ('dataset.format: tensor').")
        if mech not in PRIVATE and config.privacy.mode != "none":
            raise ConfigError(f"The 'mechanism' {mech!r} is NOT differentially private: on the dataset's rows it "
                              "releases exact results. Set 'privacy.mode: none' to run it on public data (no budget, "
                              "written under <output.path>/nonprivate/), or use 'private_power_method'.")
        if config.privacy.neighbors == "tensor_entry":
            raise ConfigError("The 'privacy.neighbors' parameter must be 'add_remove' or 'replace' for rows. Got 'tensor_entry' instead.")
        if "entry_scale" in config.privacy.extra:
            raise ConfigError("The 'privacy.entry_scale' parameter applies to explicit tensors only; rows are "
                              "bounded by 'privacy.norm_bound'.")
        _norm_bound(config)
        d = config.dataset.dimension or len(config.dataset.columns)
    if config.dataset.extra.get("bounds") is not None and _explicit(config):
        raise ConfigError("The 'dataset.bounds' parameter applies to rows (numeric columns) only; an explicit tensor "
                          "(dataset.format: tensor) is bounded by 'privacy.entry_scale'.")
    if config.privacy.mode == "none" and (mech in PRIVATE or _explicit(config)):
        raise ConfigError("The 'privacy.mode' parameter may be 'none' only for a non-private mechanism on rows "
                          f"(online_power_method). Got mechanism {mech!r}"
                          + (" on an explicit tensor." if _explicit(config) else "."))
    if k > d:
        raise ConfigError(f"The 'params.k' parameter of {OWNER} must be an int in the range [1, {d}] "
                          f"(at most the dimension d = {d}). Got {k} instead.")
    _plan(config)  # calibration errors (epsilon too small, paper epsilon_0 >= 1) surface here


def _norm_bound(config) -> float | str | None:
    """``privacy.norm_bound`` (a number or ``auto``), or √d when ``dataset.bounds`` covers every column or is
    ``auto`` (rows; as the API resolves it).
    """
    bounds = config.dataset.extra.get("bounds")
    if _explicit(config) and config.privacy.norm_bound == "auto":
        raise ConfigError("The 'privacy.norm_bound' parameter of the config may be 'auto' for rows only; an explicit "
                          "tensor (dataset.format: tensor) is bounded by 'privacy.entry_scale'.")
    for key, value in (("dataset.bounds", bounds), ("privacy.norm_bound", config.privacy.norm_bound)):
        if value == "auto" and (config.privacy.mode == "none" or config.mechanism not in PRIVATE):
            raise ConfigError(f"The '{key}' parameter of the config may be 'auto' (chosen privately at a share of "
                              f"epsilon) with a private mechanism only; {config.mechanism!r} is not private.")
    names = list(config.dataset.columns or ())
    if bounds == "auto":
        if config.privacy.norm_bound == "auto":
            raise ConfigError("The 'privacy.norm_bound' parameter of the config may not be 'auto' with dataset.bounds "
                              "'auto' (every column is then bounded: omit it, or give a number).")
        if config.dataset.dimension is not None:
            raise ConfigError("The 'dataset.bounds' parameter of the config applies to numeric columns only; give "
                              "the elements of an array or vector column as dataset.columns.")
        return config.privacy.norm_bound if config.privacy.norm_bound is not None else math.sqrt(len(names))
    unknown = [c for c in (bounds or {}) if c not in names]
    if unknown:
        raise ConfigError(f"The 'dataset.bounds' parameter of the config names {unknown[0]!r}, which is not one of "
                          "dataset.columns.")
    if _explicit(config) or config.privacy.norm_bound is not None:
        return config.privacy.norm_bound
    if bounds is None or config.dataset.dimension is not None or any(c not in bounds for c in names):
        raise ConfigError("Missing required key 'privacy.norm_bound' in the config (rows are clipped to it; it may be "
                          "omitted only when dataset.bounds covers every column).")
    return math.sqrt(len(names))


def _auto_event(config):
    """The event of ``dataset.bounds: auto`` / ``privacy.norm_bound: auto`` (rows), as the API plans it, or None."""
    priv, m = config.privacy, config.dataset.max_rows_per_unit
    if _explicit(config) or priv.epsilon is None:
        return None
    if config.dataset.extra.get("bounds") == "auto":
        return BoundsPlan(priv.epsilon * _p(config, "bounds_share"), tuple(config.dataset.columns), m,
                          priv.neighbors).event
    if priv.norm_bound == "auto":
        return plan_quantile(priv.epsilon * _p(config, "norm_bound_share"), _p(config, "norm_bound_quantile"),
                             max_rows_per_unit=m, neighbors=priv.neighbors).event
    return None


def _plan(config):
    """The release's events from the config, through the mechanism's registry entry (tensor.mechanisms)."""
    auto, nb = _auto_event(config), _norm_bound(config)
    request = TensorRequest(
        epsilon=config.privacy.epsilon if auto is None else config.privacy.epsilon - auto.epsilon,
        delta=config.privacy.delta,
        k=config.params["k"], L=_p(config, "restarts"), R=_p(config, "iterations"),
        calibration=_p(config, "calibration"), entry_scale=config.privacy.extra.get("entry_scale", 1.0),
        norm_bound=1.0 if nb == "auto" else nb,  # auto: the events do not depend on B
        mode=_p(config, "mode"), neighbors=config.privacy.neighbors, max_rows_per_unit=config.dataset.max_rows_per_unit,
        whiten=_p(config, "whiten"), rows_per_round=_p(config, "rows_per_round"),
    )
    events = plan_events(config.mechanism, request, explicit=_explicit(config))
    return events if auto is None else [auto, *events]


def _run(session, config, spark):
    from spark_dp.tensor.api import tensor_decomposition

    kw = dict(
        k=config.params["k"], mechanism=config.mechanism, epsilon=config.privacy.epsilon,
        delta=config.privacy.delta, neighbors=config.privacy.neighbors, restarts=_p(config, "restarts"),
        iterations=_p(config, "iterations"), calibration=_p(config, "calibration"), whiten=_p(config, "whiten"),
        entry_scale=config.privacy.extra.get("entry_scale", 1.0), release_id=config.release_id, confidence=config.output.confidence,
        dataset_path=config.dataset.path, config_sha256=config.sha256,
    )
    if _explicit(config):
        return tensor_decomposition(session, config.dataset.path, **kw)
    from spark_dp.aggregates import read_dataset

    if spark is None:
        from spark_dp.runtime import get_spark

        spark = get_spark("spark-dp tensor_decomposition")
    df = read_dataset(spark, config.dataset.path, config.dataset.format, config.dataset.options,
                        schema=config.dataset.schema)
    return tensor_decomposition(
        session, df, columns=list(config.dataset.columns), norm_bound=config.privacy.norm_bound,
        bounds=config.dataset.extra.get("bounds"),
        mode=_p(config, "mode"), rows_per_round=_p(config, "rows_per_round"), nonfinite=config.dataset.nonfinite,
        dimension=config.dataset.dimension, privacy_unit=config.dataset.privacy_unit,
        max_rows_per_unit=config.dataset.max_rows_per_unit,
        # A plain Parquet read: reuse-mode passes read the files in the tasks
        # and keep the prepared rows in the Python workers (same results).
        source_paths=[config.dataset.path] if (config.dataset.format == "parquet" and config.dataset.path
                                               and not config.dataset.options) else None,
        worker_cache_bytes=_p(config, "worker_cache_bytes"),
        private=False if config.privacy.mode == "none" else None,
        **{key: _p(config, key) for key in ("bounds_share", "norm_bound_share", "norm_bound_quantile")}, **kw,
    )


SPEC = register(TaskSpec(
    name="tensor_decomposition",
    mechanisms=TENSOR_MECHANISMS,
    params=PARAMS,
    plan=_plan,
    run=_run,
    privacy_keys={"entry_scale": P.validator("entry_scale", OWNER)},
    dataset_keys={"bounds": P.validator("bounds", OWNER)},
    requires_norm_bound=False,
    norm_bound_auto=True,
    formats=("tensor", *FORMATS),
    neighbors=TENSOR_NEIGHBORS,
    needs_spark=False,  # explicit tensors need no Spark; _run starts it for rows
    check=_check,
))
