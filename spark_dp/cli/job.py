"""The release job: parse → validate → (Spark) → spend → compute → write.

Thin by design; every step is the Python API's.
"""

from __future__ import annotations

import logging
import warnings

from spark_dp.cli.config import LARGE_EPSILON, JobConfig
from spark_dp.release import Release
from spark_dp.second_moment import analyze_gauss_plan
from spark_dp.session import DPSession

log = logging.getLogger("spark_dp")


def plan_events(config: JobConfig) -> list:
    """The privacy events the job will charge, computed from the config alone."""
    if config.task == "second_moment":
        event, _, _ = analyze_gauss_plan(
            epsilon=config.privacy.epsilon, delta=config.privacy.delta, norm_bound=config.privacy.norm_bound,
            neighbors=config.privacy.neighbors, max_rows_per_unit=config.dataset.max_rows_per_unit,
        )
        return [event]
    raise AssertionError(f"unhandled task {config.task!r}")


def run_job(config: JobConfig, *, spark=None) -> Release:
    """Runs one validated job config; returns the (new or stored) release."""
    if config.privacy.epsilon > LARGE_EPSILON:
        warnings.warn(
            f"privacy.epsilon = {config.privacy.epsilon:g} is large (> {LARGE_EPSILON:g}): the release protects little.",
            stacklevel=2,
        )
    session = DPSession(
        config.dataset.id,
        ledger=config.ledger.uri,
        epsilon_limit=config.ledger.epsilon_limit,
        delta_limit=config.ledger.delta_limit,
        output=config.output.path,
        sampler=config.privacy.sampler,
    )
    # A release id seen before never needs Spark: answer from the ledger.
    if config.release_id is not None:
        stored = session.stored_release(config.release_id, config_sha256=config.sha256)
        if stored is not None:
            return stored

    # Over budget → fail here, before Spark starts (the API checks again).
    session.ledger.check(config.dataset.id, plan_events(config), session.limit)

    if spark is None:
        from spark_dp.runtime import get_spark

        spark = get_spark(f"spark-dp {config.task}")
    from spark_dp.aggregates import read_dataset

    df = read_dataset(spark, config.dataset.path, config.dataset.format, config.dataset.options)
    if config.task == "second_moment":
        return session.second_moment(
            df,
            list(config.dataset.columns),
            epsilon=config.privacy.epsilon,
            delta=config.privacy.delta,
            norm_bound=config.privacy.norm_bound,
            mechanism=config.mechanism,
            release_id=config.release_id,
            neighbors=config.privacy.neighbors,
            postprocess=config.params.get("postprocess", "none"),
            nonfinite=config.dataset.nonfinite,
            dimension=config.dataset.dimension,
            privacy_unit=config.dataset.privacy_unit,
            max_rows_per_unit=config.dataset.max_rows_per_unit,
            config_sha256=config.sha256,
        )
    raise AssertionError(f"unhandled task {config.task!r}")  # config validation lists the tasks
