"""Reading datasets named in configs. Schema-level checks only."""

from __future__ import annotations

import os
from urllib.parse import urlparse

from pyspark.sql import DataFrame, SparkSession

from spark_dp.errors import SchemaError

FORMATS = ("parquet", "csv", "json", "orc")


def is_local_path(path: str) -> bool:
    scheme = urlparse(path).scheme
    return scheme in ("", "file") or (len(scheme) == 1 and os.name == "nt")


def check_path_exists(path: str) -> None:
    """Raises SchemaError for a local path that does not exist (remote paths are checked by Spark)."""
    if is_local_path(path):
        local = urlparse(path).path if path.startswith("file:") else path
        if not os.path.exists(local):
            raise SchemaError(f"Input path {path!r} does not exist.")


def read_dataset(spark: SparkSession, path: str, fmt: str = "parquet", options: dict | None = None) -> DataFrame:
    """Reads ``path`` in ``fmt`` (csv gets header + schema inference unless overridden)."""
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
