"""The release job: parse → validate → dry-run the budget → Spark → charge → noise → write.

Thin by design: every task is a :class:`~spark_dp.cli.tasks.TaskSpec`, and
every release goes through :class:`~spark_dp.session.DPSession`.
"""

from __future__ import annotations

import logging
import warnings

from spark_dp.cli.config import LARGE_EPSILON, JobConfig
from spark_dp.release import Release
from spark_dp.session import DPSession

log = logging.getLogger("spark_dp")


def plan_events(config: JobConfig) -> list:
    """The privacy events the job will charge, computed from the config alone."""
    return config.spec.plan(config)


def session_for(config: JobConfig) -> DPSession:
    return DPSession(
        config.dataset.id,
        ledger=config.ledger.uri,
        epsilon_limit=config.ledger.epsilon_limit,
        delta_limit=config.ledger.delta_limit,
        output=config.output.path,
        sampler=config.privacy.sampler,
    )


def run_job(config: JobConfig, *, spark=None) -> Release:
    """Runs one validated job config; returns the (new or stored) release."""
    if config.privacy.epsilon > LARGE_EPSILON:
        warnings.warn(
            f"privacy.epsilon = {config.privacy.epsilon:g} is large (> {LARGE_EPSILON:g}): the release protects little.",
            stacklevel=2,
        )
    session = session_for(config)
    # A release id seen before never needs Spark: answer from the ledger.
    if config.release_id is not None:
        stored = session.stored_release(config.release_id, config_sha256=config.sha256)
        if stored is not None:
            return stored
    # Over budget → fail here, before Spark starts (the release path checks again).
    session.ledger.check(config.dataset.id, plan_events(config), session.limit)

    if spark is None and config.spec.needs_spark:
        from spark_dp.runtime import get_spark

        spark = get_spark(f"spark-dp {config.task}")
    return config.spec.run(session, config, spark)
