"""Reading datasets named in configs. Schema-level checks only.

A dataset is files (``path`` in one of :data:`FORMATS`) or a catalog table
(format :data:`TABLE`: ``path`` is the table name, e.g. ``db.tbl``, and the
option ``where`` a Spark SQL filter such as ``ds = '2026-11-30'``). Tables go
through ``spark.table`` + ``DataFrame.filter``, which work on classic Spark
and Spark Connect alike.
"""

from __future__ import annotations

import logging

from pyspark.errors import ParseException
from pyspark.sql import DataFrame, SparkSession

from spark_dp.errors import SchemaError

# Declared once, in the pyspark-free parameter module (configs validate before Spark is imported).
from spark_dp.params import FORMATS, TABLE, check_path_exists, check_table_name, is_local_path  # noqa: F401

log = logging.getLogger("spark_dp")


TIME_TRAVEL_OPTIONS = ("versionAsOf", "timestampAsOf", "snapshot-id", "as-of-timestamp")
_NO_VERSION = ("VersionNotFound", "DELTA_VERSION", "DELTA_TIMESTAMP", "Cannot find a snapshot", "Cannot find snapshot",
               "Cannot time travel", "TIMESTAMP_GREATER", "before the earliest", "after the latest")


def _no_such_version(text: str) -> bool:
    """Whether a read error says the requested table version / snapshot / time does not exist (public metadata)."""
    return any(t in text for t in _NO_VERSION)


def read_table(spark: SparkSession, name: str, where: str | None = None, options: dict | None = None) -> DataFrame:
    """``spark.table(name)``, filtered by the SQL expression ``where`` if given.

    ``options``: the reader's time-travel options (:data:`TIME_TRAVEL_OPTIONS`:
    Delta's ``versionAsOf`` / ``timestampAsOf``, Iceberg's ``snapshot-id`` /
    ``as-of-timestamp``), read with ``spark.read.options(...).table(name)``;
    Iceberg's become Spark's ``versionAsOf`` / ``timestampAsOf`` on the lines
    whose Iceberg refuses its own (:func:`spark_dp.runtime.iceberg_time_travel_options`).

    Raises:
        SchemaError: the table does not exist, or ``where`` does not parse or
            names unknown columns (public facts, raised before any charge).
    """
    check_table_name(name)
    log.info("reading table %s%s%s", name, f" where {where}" if where else "",
             f" as of {options}" if options else "")  # public: names and versions, never counts
    if options and ("snapshot-id" in options or "as-of-timestamp" in options):
        from spark_dp.runtime import iceberg_time_travel_options

        options = iceberg_time_travel_options(options, spark.version)
    try:
        df = spark.read.options(**options).table(name) if options else spark.table(name)
        if where:
            df = df.filter(where)
        df.schema  # noqa: B018 - analyse now (lazy on Connect): a bad name or filter is a request error
    except Exception as exc:  # AnalysisException / ParseException or Connect's equivalents
        text = str(exc)
        if "TABLE_OR_VIEW_NOT_FOUND" in text or "SCHEMA_NOT_FOUND" in text:
            raise SchemaError(f"Input table {name!r} does not exist.") from None
        if options and _no_such_version(text):
            raise SchemaError(f"Table {name!r} has no version {options}: {text.splitlines()[0][:200]}") from None
        if where and any(t in text for t in ("PARSE_SYNTAX_ERROR", "UNRESOLVED_COLUMN", "ParseException",
                                               "DATATYPE_MISMATCH")):
            raise SchemaError(f"The 'dataset.where' filter {where!r} is not valid for table {name!r}: "
                              f"{text.splitlines()[0][:200]}") from None
        raise
    return df


def read_dataset(spark: SparkSession, path: str, fmt: str = "parquet", options: dict | None = None,
                 schema: str | None = None) -> DataFrame:
    """Reads ``path`` in ``fmt`` (csv gets a header, and schema inference unless ``schema`` is given).

    ``schema``: the files' columns and types as a Spark DDL string; with it
    Spark plans the read without scanning the input (no job before the
    release's own). With ``fmt`` = ``"table"``, ``path`` is a catalog table
    name and the only option is ``where`` (a SQL filter); see :func:`read_table`.
    """
    if fmt == TABLE:
        opts = dict(options or {})
        where = opts.pop("where", None)
        travel = {k: opts.pop(k) for k in TIME_TRAVEL_OPTIONS if k in opts}
        if opts or schema is not None:
            raise SchemaError(f"Options {sorted(opts) or ['schema']} do not apply to a table dataset "
                              "(only 'where' and time travel).")
        return read_table(spark, path, where, travel)
    check_path_exists(path)
    reader = spark.read.format(fmt)
    opts = dict(options or {})
    if fmt == "csv":
        opts.setdefault("header", "true")
        if schema is None:
            opts.setdefault("inferSchema", "true")
    for k, v in opts.items():
        reader = reader.option(k, v)
    try:
        if schema is not None:
            reader = reader.schema(schema)
        return reader.load(path)
    except Exception as exc:  # AnalysisException / ParseException or Connect's equivalents
        if "PATH_NOT_FOUND" in str(exc) or "Path does not exist" in str(exc):
            raise SchemaError(f"Input path {path!r} does not exist.") from None
        travel = {k: v for k, v in opts.items() if k in TIME_TRAVEL_OPTIONS}
        if travel and _no_such_version(str(exc)):
            raise SchemaError(f"Input {path!r} has no version {travel}: {str(exc).splitlines()[0][:200]}") from None
        if schema is not None and isinstance(exc, ParseException):
            first = str(exc).strip().splitlines()[0]
            raise SchemaError(f"The 'dataset.schema' parameter is not a valid Spark DDL schema ({schema!r}): "
                              f"{first}") from None
        raise
