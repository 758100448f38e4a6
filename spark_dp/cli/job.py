"""The release job: parse → validate → dry-run the budget → Spark → charge → noise → write.

Thin by design: every task is a :class:`~spark_dp.cli.tasks.TaskSpec`, and
every release goes through :class:`~spark_dp.session.DPSession`.
"""

from __future__ import annotations

import logging
import warnings
from contextlib import contextmanager

from spark_dp._compat import supports_job_tags
from spark_dp.cli.config import LARGE_EPSILON, JobConfig
from spark_dp.privacy.ledger import UnitDeclaration
from spark_dp.release import Release, write_release_table
from spark_dp.release.pipeline import unit_of
from spark_dp.session import DPSession

log = logging.getLogger("spark_dp")


def plan_events(config: JobConfig) -> list:
    """The privacy events the job will charge, computed from the config alone."""
    return config.spec.plan(config)


def config_unit(config: JobConfig) -> UnitDeclaration:
    """The privacy unit the job's release will protect (checked against the ledger before Spark starts)."""
    return unit_of({"neighbors": config.privacy.neighbors, "privacy_unit": config.dataset.privacy_unit,
                    "max_rows_per_unit": config.dataset.max_rows_per_unit})


def session_for(config: JobConfig) -> DPSession:
    """The DPSession a job config describes (dataset, ledger, budget, output, sampler)."""
    return DPSession(
        config.dataset.id,
        ledger=config.ledger.uri,
        epsilon_limit=config.ledger.epsilon_limit,
        delta_limit=config.ledger.delta_limit,
        output=config.output.path,
        sampler=config.privacy.sampler,
        lifetime_limit=None if config.ledger.lifetime_epsilon_limit is None else (
            config.ledger.lifetime_epsilon_limit, config.ledger.lifetime_delta_limit),
    )


def run_job(config: JobConfig, *, spark=None, **extra) -> Release:
    """Runs one validated job config; returns the (new or stored) release.

    A stored release (known release id) is returned without starting Spark
    unless it must still be published to ``output.table``. ``extra`` goes to
    the task's run function (e.g. ``seeds=`` for count_sketch, used by plans
    to merge sketches).
    """
    if config.privacy.epsilon is not None and config.privacy.epsilon > LARGE_EPSILON:
        warnings.warn(
            f"privacy.epsilon = {config.privacy.epsilon:g} is large (> {LARGE_EPSILON:g}): the release protects little.",
            stacklevel=2,
        )
    session = session_for(config)
    release = None
    # A release id seen before never needs Spark: answer from the ledger.
    if config.release_id is not None:
        release = session.stored_release(config.release_id, config_sha256=config.sha256)
    if release is None:
        # Over budget → fail here, before Spark starts (the release path checks again).
        if config.privacy.mode != "none":  # a non-private run charges nothing (the API refuses budgeted datasets)
            session.ledger.check(config.dataset.id, plan_events(config), session.limit, unit=config_unit(config))
        if spark is None and config.spec.needs_spark:
            spark = get_spark(f"spark-dp {config.task}")
        log.info("release %s: task %s (%s) on dataset %s", config.release_id or "(new id)", config.task,
                 config.mechanism, config.dataset.id)
        with spark_tag(spark if config.spec.needs_spark else None,
                       f"spark-dp:{config.task}:{config.release_id or config.dataset.id}"):
            release = config.spec.run(session, config, spark, **extra)
    if config.output.table is not None:
        spark = spark or get_spark(f"spark-dp {config.task}")
        with spark_tag(spark, f"spark-dp:publish:{release.release_id}"):
            write_release_table(spark, release, config.output.table, format=config.output.format)
    return release


def get_spark(app_name: str):
    """The job's SparkSession (classic, or Spark Connect with SPARK_REMOTE); see :mod:`spark_dp.runtime`."""
    from spark_dp.runtime import get_spark as _get

    return _get(app_name)


@contextmanager
def spark_tag(spark, tag: str):
    """Tags the Spark jobs started inside (``SparkSession.addTag``: classic and Connect in Spark 4, Connect only in 3.5).

    Tags show in the Spark UI's job properties (``spark.job.tags``) and let
    ``spark.interruptTag(tag)`` cancel a release. Commas are not allowed in
    tags and are replaced.
    """
    tag = tag.replace(",", ";")
    if spark is None or not supports_job_tags(spark):  # classic Spark 3.5 has no job tags
        yield
        return
    spark.addTag(tag)
    try:
        yield
    finally:
        spark.removeTag(tag)
