"""Publishing a release's payload to a warehouse table (in addition to its directory).

Many releases share one table: each row is one entry of one payload array,
keyed by ``release_id``::

    release_id STRING, dataset_id STRING, task STRING, mechanism STRING,
    array STRING, i INT, j INT, k INT, l INT, value DOUBLE, created_at STRING,
    stderr DOUBLE, low DOUBLE, high DOUBLE

Index columns beyond an array's rank are null (a vector has ``i`` only, a
matrix ``i`` and ``j``). ``stderr``/``low``/``high`` are the entry's
uncertainty at the level in the manifest (null for an array without one;
``stderr`` null for a bound); a table created before they existed keeps its
columns and gets the rows without them. The privacy metadata stays in the release
directory's ``manifest.json``, which together with the ledger remains the
source of truth for idempotence; the table is a copy for SQL users.

Writes append. A release whose ``release_id`` is in the table already is not
appended again, so re-running a job (which returns the stored release)
publishes the rows exactly once, and a crash between writing the directory
and the table is repaired by the re-run. Two processes publishing the *same*
release at the same instant could both append (the check and the append are
not one transaction on Parquet tables); a Delta table's ``MERGE`` would close
that gap but needs the Delta runtime.

Formats: ``parquet`` (any Spark), ``delta`` (Delta Lake) and ``iceberg``
(Apache Iceberg; ``table`` then names a table of an Iceberg catalog, e.g.
``local.db.releases``). Delta and Iceberg need their jars in the session:
a job's local session gets them (:func:`spark_dp.runtime.table_format_conf`),
Databricks ships Delta. All go through ``DataFrameWriter.saveAsTable``, which
works on classic Spark and Spark Connect; the Delta and Iceberg appends are
tested against the real formats (``tests/warehouse/``).
"""

from __future__ import annotations

import logging

import numpy as np

from spark_dp.errors import ConfigError, SchemaError
from spark_dp.release.release import Release

log = logging.getLogger("spark_dp")

TABLE_FORMATS = ("parquet", "delta", "iceberg")
INDEX_COLUMNS = ("i", "j", "k", "l")
COLUMNS = ("release_id", "dataset_id", "task", "mechanism", "array", *INDEX_COLUMNS, "value", "created_at")
UNCERTAINTY_COLUMNS = ("stderr", "low", "high")
_DDL = ("release_id STRING, dataset_id STRING, task STRING, mechanism STRING, array STRING, "
        "i INT, j INT, k INT, l INT, value DOUBLE, created_at STRING, stderr DOUBLE, low DOUBLE, high DOUBLE")


def release_rows(release: Release):
    """The release's payload in the table's long format (one row per array entry), a pandas DataFrame."""
    import pandas as pd

    m = release.manifest
    frames = []
    for name, arr in sorted(release.arrays.items()):
        arr = np.asarray(arr, dtype=np.float64)
        if arr.ndim > len(INDEX_COLUMNS):
            raise SchemaError(f"Array {name!r} of release {release.release_id!r} has {arr.ndim} dimensions; "
                              f"a release table holds at most {len(INDEX_COLUMNS)}.")
        idx = np.indices(arr.shape).reshape(arr.ndim, -1)
        cols = {}
        for a, col in enumerate(INDEX_COLUMNS):
            cols[col] = pd.array(idx[a], dtype="Int32") if a < arr.ndim else pd.array([None] * arr.size, dtype="Int32")
        u = release.uncertainty.get(name)
        nan = np.full(arr.size, np.nan)
        frame = pd.DataFrame({"array": name, **cols, "value": arr.reshape(-1),
                              "stderr": nan if u is None or u.stderr is None else u.stderr.reshape(-1),
                              "low": nan if u is None else u.low.reshape(-1),
                              "high": nan if u is None else u.high.reshape(-1)})
        frames.append(frame)
    out = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        {c: [] for c in ("array", *INDEX_COLUMNS, "value", *UNCERTAINTY_COLUMNS)})
    out.insert(0, "release_id", release.release_id)
    out.insert(1, "dataset_id", m.get("dataset_id"))
    out.insert(2, "task", m.get("task"))
    out.insert(3, "mechanism", m.get("mechanism"))
    out["created_at"] = m.get("created_at")
    return out[[*COLUMNS, *UNCERTAINTY_COLUMNS]]


def write_release_table(spark, release: Release, table: str, *, format: str = "parquet") -> bool:  # noqa: A002
    """Appends ``release``'s payload to the catalog table ``table`` unless it is there already.

    Args:
        spark: the SparkSession (classic or Connect).
        release: a written (or stored) release.
        table: ``db.tbl``; created on first use.
        format: ``parquet``, ``delta`` or ``iceberg`` (Delta and Iceberg need their jars in the session).

    Returns:
        True if rows were appended, False if the release was in the table already.

    Raises:
        ConfigError: unknown format, or Delta / Iceberg requested where the session has no jars for it.
        SchemaError: the existing table does not have the release-table columns.
    """
    if format not in TABLE_FORMATS:
        raise ConfigError(f"The 'output.format' parameter must be one of {list(TABLE_FORMATS)}. Got {format!r} instead.")
    from pyspark.sql import functions as F

    rows, ddl = release_rows(release), _DDL
    if spark.catalog.tableExists(table):
        existing = spark.table(table)
        missing = [c for c in COLUMNS if c not in existing.columns]
        if missing:
            raise SchemaError(f"Table {table!r} is not a spark-dp release table (no column {missing[0]!r}).")
        if existing.filter(F.col("release_id") == release.release_id).limit(1).count() > 0:
            log.info("release %s is in table %s already: not appended again", release.release_id, table)
            return False
        if not set(UNCERTAINTY_COLUMNS) <= set(existing.columns):  # a table from before error bars
            log.warning("table %s has no uncertainty columns (%s): appending the values without them",
                        table, ", ".join(UNCERTAINTY_COLUMNS))
            rows, ddl = rows[list(COLUMNS)], _DDL.split(", stderr")[0]
    df = spark.createDataFrame(rows, schema=ddl)
    try:
        df.write.format(format).mode("append").saveAsTable(table)
    except Exception as exc:  # AnalysisException / Connect's equivalent
        text = str(exc)
        if format != "parquet" and ("DATA_SOURCE_NOT_FOUND" in text or format in text.lower() and "not found" in text.lower()
                                    or "Failed to find data source" in text):
            raise ConfigError(f"The 'output.format' {format!r} needs the {'Delta Lake' if format == 'delta' else 'Iceberg'} "
                              "jars in the Spark session, which this one does not have: let spark-dp create the "
                              "session (it adds them), add them with spark.jars.packages, or use 'parquet'.") from None
        raise
    log.info("release %s appended to table %s (%s)", release.release_id, table, format)
    return True
