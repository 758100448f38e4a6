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


def read_table(spark: SparkSession, name: str, where: str | None = None) -> DataFrame:
    """``spark.table(name)``, filtered by the SQL expression ``where`` if given.

    Raises:
        SchemaError: the table does not exist, or ``where`` does not parse or
            names unknown columns (public facts, raised before any charge).
    """
    check_table_name(name)
    log.info("reading table %s%s", name, f" where {where}" if where else "")  # public: names, never counts
    try:
        df = spark.table(name)
        if where:
            df = df.filter(where)
        df.schema  # noqa: B018 - analyse now (lazy on Connect): a bad name or filter is a request error
    except Exception as exc:  # AnalysisException / ParseException or Connect's equivalents
        text = str(exc)
        if "TABLE_OR_VIEW_NOT_FOUND" in text or "SCHEMA_NOT_FOUND" in text:
            raise SchemaError(f"Input table {name!r} does not exist.") from None
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
        if opts or schema is not None:
            raise SchemaError(f"Options {sorted(opts) or ['schema']} do not apply to a table dataset (only 'where').")
        return read_table(spark, path, where)
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
        if schema is not None and isinstance(exc, ParseException):
            first = str(exc).strip().splitlines()[0]
            raise SchemaError(f"The 'dataset.schema' parameter is not a valid Spark DDL schema ({schema!r}): "
                              f"{first}") from None
        raise
