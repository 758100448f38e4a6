"""The release job: parse → validate → dry-run the budget → Spark → charge → noise → write.

Thin by design: every task is a :class:`~spark_dp.cli.tasks.TaskSpec`, and
every release goes through :class:`~spark_dp.session.DPSession`.
"""

from __future__ import annotations

import logging
import os
import tempfile
import warnings
from contextlib import contextmanager, nullcontext
from dataclasses import replace

from spark_dp._compat import supports_job_tags
from spark_dp.cli.config import LARGE_EPSILON, JobConfig
from spark_dp.privacy.ledger import UnitDeclaration
from spark_dp.release import Release, write_release_table
from spark_dp.release.pipeline import note_input_change, unit_of
from spark_dp.release.preview import Preview, active_dry_run, dry_run
from spark_dp.session import DPSession

log = logging.getLogger("spark_dp")


def plan_events(config: JobConfig) -> list:
    """The privacy events the job will charge, computed from the config alone."""
    return config.spec.plan(config)


def config_unit(config: JobConfig) -> UnitDeclaration:
    """The privacy unit the job's release will protect (checked against the ledger before Spark starts)."""
    return unit_of({"neighbors": config.privacy.neighbors, "privacy_unit_column": config.dataset.privacy_unit,
                    "max_rows_per_unit": config.dataset.max_rows_per_unit})


def session_for(config: JobConfig) -> DPSession:
    """The DPSession a job config describes (dataset, ledger, budget, output, sampler).

    Under a dry run (:func:`spark_dp.release.preview.dry_run`) the session
    writes nothing: a SQLite ledger that does not exist yet is replaced by an
    empty scratch one (deleted with the session) instead of being created, and
    the config's lifetime cap is not registered (:func:`preview_job` notes both).
    """
    uri, dry = config.ledger.uri, active_dry_run() is not None
    scratch = None
    if dry and not _ledger_exists(uri):
        scratch = tempfile.TemporaryDirectory(prefix="spark-dp-dry-run-")
        uri = f"sqlite:///{os.path.join(scratch.name, 'ledger.db')}"
    session = DPSession(
        config.dataset.id,
        ledger=uri,
        epsilon_limit=config.ledger.epsilon_limit,
        delta_limit=config.ledger.delta_limit,
        output=config.output.path,
        sampler=config.privacy.sampler,
        lifetime_limit=None if dry or config.ledger.lifetime_epsilon_limit is None else (
            config.ledger.lifetime_epsilon_limit, config.ledger.lifetime_delta_limit),
    )
    session._dry_run_scratch = scratch  # type: ignore[attr-defined]  # lives (and is deleted) with the session
    return session


def _ledger_exists(uri: str) -> bool:
    from spark_dp.privacy.ledger import sqlite_path_from_uri

    return uri.startswith(("postgresql://", "postgres://")) or os.path.isfile(sqlite_path_from_uri(uri))


def preview_job(config: JobConfig, *, spark=None, n: int | None = None, **extra) -> Preview:
    """Dry run of :func:`run_job`: the task's own release call under :func:`~spark_dp.release.preview.dry_run`.

    Validates the config, reads only the input's schema (Spark reads a
    Parquet footer or a table's catalog entry; CSV/JSON schema inference
    scans the input for column types: give ``dataset.schema`` or use Parquet
    to avoid it), plans the release and checks the ledger without charging. Writes
    nothing: no ledger file, no release, no table. ``n``: a guess of the row
    count for the accuracy prediction. Inside an active dry run (a plan's)
    it joins it, so the plan's entries are checked one after the other.
    """
    active = active_dry_run()
    with nullcontext(active) if active is not None else dry_run(n=n):
        session = session_for(config)
        if spark is None and config.spec.needs_spark:
            spark = get_spark(f"spark-dp {config.task} (dry run)", config.table_formats)
        preview = config.spec.run(session, config, spark, **extra)
    if not isinstance(preview, Preview):
        raise RuntimeError(f"bug: task {config.task!r} did not reach the release pipeline in a dry run")
    notes = []
    if session._dry_run_scratch is not None:  # type: ignore[attr-defined]
        notes.append(f"ledger {config.ledger.uri!r} does not exist yet: the release would create it and register "
                     f"dataset {config.dataset.id!r} with its limit")
    cap = config.ledger.lifetime_epsilon_limit
    if cap is not None and session.ledger.lifetime_limit(config.dataset.id) is None:
        notes.append(f"the lifetime cap (epsilon={cap:g}, delta={config.ledger.lifetime_delta_limit:g}) is not "
                     "registered yet: the release would register it; not checked here")
    if config.output.table is not None:
        notes.append(f"the release would also be published to table {config.output.table!r}")
    # Spark scans JSON, and CSV unless inferSchema is false, for the column types when no schema is given.
    fmt, options = config.dataset.format, config.dataset.options or {}
    infers = fmt == "json" or (fmt == "csv" and str(options.get("inferSchema", True)).lower() == "true")
    if infers and config.dataset.schema is None:
        notes.append(f"dataset.format {config.dataset.format}: Spark scanned the input to infer its column types "
                     "(nothing else was read or released); give dataset.schema to avoid it")
    return replace(preview, notes=[*preview.notes, *notes])


def run_job(config: JobConfig, *, spark=None, **extra) -> Release:
    """Runs one validated job config; returns the (new or stored) release.

    A stored release (known release id) is returned without a Spark job; Spark
    starts only to publish it to ``output.table`` or, for a catalog-table input,
    to read the table's current version (``input_changed``). ``extra`` goes to
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
    # A release id seen before is answered from the ledger, without a Spark job.
    if config.release_id is not None:
        release = session.stored_release(config.release_id, config_sha256=config.sha256)
        if release is not None:  # still say whether the input changed since (files, Delta paths: no Spark needed)
            spark = spark or _table_session(config)
            note_input_change(release, _input_lineage(config, spark, session.ledger.lineage_key))
    if release is None:
        # Over budget → fail here, before Spark starts (the release path checks again).
        if config.privacy.mode != "none":  # a non-private run charges nothing (the API refuses budgeted datasets)
            session.ledger.check(config.dataset.id, plan_events(config), session.limit, unit=config_unit(config))
        if spark is None and config.spec.needs_spark:
            spark = get_spark(f"spark-dp {config.task}", config.table_formats)
        log.info("release %s: task %s (%s) on dataset %s", config.release_id or "(default id)", config.task,
                 config.mechanism, config.dataset.id)
        with spark_tag(spark if config.spec.needs_spark else None,
                       f"spark-dp:{config.task}:{config.release_id or config.dataset.id}"):
            release = config.spec.run(session, config, spark, **extra)
    if config.output.table is not None:
        spark = spark or get_spark(f"spark-dp {config.task}", config.table_formats)
        with spark_tag(spark, f"spark-dp:publish:{release.release_id}"):
            write_release_table(spark, release, config.output.table, format=config.output.format)
    return release


def _table_session(config: JobConfig):
    """The session a re-run over a catalog table needs to tell whether the table moved on; None for other inputs.

    Only the catalog knows a table's version: the re-run gets (or starts) a
    session and reads the table's metadata (no Spark job over its rows). A
    session that cannot start leaves the question open (``input_changed``
    null), as lineage never fails a re-run.
    """
    from spark_dp.params import TABLE

    if config.dataset.format != TABLE:
        return None
    try:
        return get_spark(f"spark-dp {config.task}", config.table_formats)
    except Exception as exc:  # noqa: BLE001 - lineage is metadata: never fail a re-run over it
        log.info("release %s: input table %s not checked for changes (no Spark session: %s)",
                 config.release_id, config.dataset.path, type(exc).__name__)
        return None


def _input_lineage(config: JobConfig, spark, key: bytes) -> dict | None:
    """The job input's lineage without a Spark job: files listed with pyarrow; a table only given a session.

    ``key``: the ledger's lineage key (the file digest is keyed with it).
    """
    from spark_dp.params import TABLE
    from spark_dp.release.lineage import input_lineage, path_lineage

    try:
        if config.dataset.format == "delta":  # the Delta log, read with pyarrow: the version a read would get
            from spark_dp.release.lineage import delta_path_lineage

            return delta_path_lineage(config.dataset.path, config.dataset.as_of)
        if config.dataset.format != TABLE:
            return path_lineage(config.dataset.path, key)
        if spark is None:
            log.info("release %s: input table %s not checked for changes (no Spark session)",
                     config.release_id, config.dataset.path)
            return None
        from spark_dp.aggregates import read_dataset

        return input_lineage(read_dataset(spark, config.dataset.path, TABLE, config.dataset.options), key)
    except Exception as exc:  # noqa: BLE001 - lineage is metadata: never fail a re-run over it
        log.info("release %s: input lineage not computed (%s)", config.release_id, type(exc).__name__)
        return None


def get_spark(app_name: str, formats=()):
    """The job's SparkSession (classic, or Spark Connect with SPARK_REMOTE); see :mod:`spark_dp.runtime`.

    ``formats``: the Delta / Iceberg formats the job uses (a new local session gets their jars).
    """
    from spark_dp.runtime import get_spark as _get

    return _get(app_name, formats=formats)


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
