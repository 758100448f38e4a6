"""Reading datasets named in configs. Schema-level checks only.

A dataset is files (``path`` in one of :data:`FORMATS`) or a catalog table
(format :data:`TABLE`: ``path`` is the table name, e.g. ``db.tbl``, and the
option ``where`` a Spark SQL filter such as ``ds = '2026-11-30'``). Tables go
through ``spark.table`` + ``DataFrame.filter``, which work on classic Spark
and Spark Connect alike.
"""

from __future__ import annotations

import logging
import os
import re
from urllib.parse import urlparse

from pyspark.sql import DataFrame, SparkSession

from spark_dp.errors import ConfigError, SchemaError

log = logging.getLogger("spark_dp")

FORMATS = ("parquet", "csv", "json", "orc")
TABLE = "table"
_TABLE_NAME = re.compile(r"^(?:`[^`]+`|[A-Za-z_][A-Za-z0-9_]*)(?:\.(?:`[^`]+`|[A-Za-z_][A-Za-z0-9_]*)){0,2}$")


def check_table_name(name: str, *, key: str = "dataset.table") -> str:
    """Raises ConfigError unless ``name`` is ``tbl``, ``db.tbl`` or ``catalog.db.tbl`` (backquotes allowed)."""
    if not isinstance(name, str) or not _TABLE_NAME.match(name):
        raise ConfigError(f"The {key!r} parameter must be a table name like db.tbl. Got {name!r} instead.")
    return name


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


def is_local_path(path: str) -> bool:
    """True for a path on this machine's file system: no scheme, ``file:``, or a Windows drive letter."""
    scheme = urlparse(path).scheme
    return scheme in ("", "file") or (len(scheme) == 1 and os.name == "nt")


def check_path_exists(path: str) -> None:
    """Raises SchemaError for a local path that does not exist (remote paths are checked by Spark)."""
    if is_local_path(path):
        local = urlparse(path).path if path.startswith("file:") else path
        if not os.path.exists(local):
            raise SchemaError(f"Input path {path!r} does not exist.")


def read_dataset(spark: SparkSession, path: str, fmt: str = "parquet", options: dict | None = None) -> DataFrame:
    """Reads ``path`` in ``fmt`` (csv gets header + schema inference unless overridden).

    With ``fmt`` = ``"table"``, ``path`` is a catalog table name and the only
    option is ``where`` (a SQL filter); see :func:`read_table`.
    """
    if fmt == TABLE:
        opts = dict(options or {})
        where = opts.pop("where", None)
        if opts:
            raise SchemaError(f"Options {sorted(opts)} do not apply to a table dataset (only 'where').")
        return read_table(spark, path, where)
    check_path_exists(path)
    reader = spark.read.format(fmt)
    opts = dict(options or {})
    if fmt == "csv":
        opts.setdefault("header", "true")
        opts.setdefault("inferSchema", "true")
    for k, v in opts.items():
        reader = reader.option(k, v)
    try:
        return reader.load(path)
    except Exception as exc:  # AnalysisException or Connect's equivalent
        if "PATH_NOT_FOUND" in str(exc) or "Path does not exist" in str(exc):
            raise SchemaError(f"Input path {path!r} does not exist.") from None
        raise
