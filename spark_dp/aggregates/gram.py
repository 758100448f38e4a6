"""Exact second-moment matrix AᵀA of clipped rows, one pass over a DataFrame.

Executors: each partition's Arrow batches become (n, d) float64 blocks; the
non-finite policy is applied, rows are clipped to ‖a‖₂ ≤ B, and BLAS
``dsyrk`` accumulates the upper triangle of the partition's AᵀA. One partial
(d² doubles as bytes) leaves each partition; the driver sums them.

No noise and no privacy accounting here: this layer computes exact
aggregates only. Spark Connect safe (``mapInArrow``, no RDD API).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from spark_dp.aggregates._blocks import GramAccumulator, columns_to_block, list_to_block
from spark_dp.aggregates._vectors import check_nonfinite, vector_frame
from spark_dp.aggregates.sources import check_path_exists
from spark_dp.errors import ConfigError, SchemaError

_PARTIAL_SCHEMA = "partial binary"


def _partial_batch(acc: GramAccumulator) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([acc.upper().tobytes()], type=pa.binary())], names=["partial"])


def gram_partials_fn(d: int, norm_bound: float, nonfinite: str) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function: batches of one list<double> column → one partial."""

    def partials(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        acc = GramAccumulator(d, norm_bound, nonfinite)
        for batch in batches:
            if batch.num_rows:
                acc.add(list_to_block(batch.column(0), d))
        yield _partial_batch(acc)

    return partials


def sum_partials(frame: DataFrame, d: int) -> np.ndarray:
    """Sums the partials on the driver; returns the full symmetric matrix."""
    total = np.zeros((d, d), dtype=np.float64)
    table = frame.toArrow()
    for value in table.column("partial").to_pylist():
        total += np.frombuffer(value, dtype=np.float64).reshape(d, d)
    return total + np.triu(total, 1).T


def gram_matrix(
    df: DataFrame,
    columns: Sequence[str],
    *,
    norm_bound: float,
    nonfinite: str = "drop",
    dimension: int | None = None,
    privacy_unit: str | None = None,
    max_rows_per_unit: int = 1,
) -> np.ndarray:
    """Exact AᵀA (d × d, float64) of the rows of ``df`` after clipping.

    Args:
        df: input DataFrame.
        columns: numeric columns, or one array/ML-vector column (then give
            ``dimension``).
        norm_bound: B; rows with ‖a‖₂ > B are scaled to norm B.
        nonfinite: ``drop`` (default) removes rows holding NaN/±inf/null;
            ``zero`` sets those entries to 0.
        dimension: the vector length for an array/vector column.
        privacy_unit: optional unit column; see ``vectorize``.
        max_rows_per_unit: rows kept per unit.

    Returns:
        The symmetric matrix Σᵢ aᵢaᵢᵀ over the kept, clipped rows (zeros for
        an empty input).
    """
    check_nonfinite(nonfinite)
    frame, d = vector_frame(
        df, columns, dimension=dimension, privacy_unit=privacy_unit, max_rows_per_unit=max_rows_per_unit
    )
    return sum_partials(frame.mapInArrow(gram_partials_fn(d, float(norm_bound), nonfinite), _PARTIAL_SCHEMA), d)


def vector_dimension(df: DataFrame, columns: Sequence[str], dimension: int | None = None) -> int:
    """d for ``columns`` (validates the schema; runs no Spark job)."""
    return vector_frame(df, columns, dimension=dimension)[1]


# -- direct Parquet path -------------------------------------------------------

#: Target bytes of Parquet per work unit (one task reads its files' row
#: groups itself); Spark's ``spark.sql.files.maxPartitionBytes`` default.
_UNIT_BYTES = 128 << 20
#: At most this many tasks (partials) per call, and at most ~1 GiB of partials.
_MAX_TASKS = 256
_MAX_PARTIAL_BYTES = 1 << 30


def _read_parquet(spark: SparkSession, paths: Sequence[str]) -> DataFrame:
    for p in paths:
        check_path_exists(p)
    try:
        return spark.read.parquet(*paths)
    except Exception as exc:  # AnalysisException or Connect's equivalent
        if "PATH_NOT_FOUND" in str(exc) or "Path does not exist" in str(exc):
            raise SchemaError(f"Input path {list(paths)!r} does not exist.") from None
        raise


def _plan_units(files: Sequence[str], unit_bytes: int) -> list[tuple[str, int, int]] | None:
    """Work units ``(uri, part, parts)``: a task reads row groups ``part::parts`` of ``uri``.

    None when pyarrow cannot open these URIs on its own (e.g. ``s3a://``,
    ``dbfs:/``): the caller then reads through Spark.
    """
    import pyarrow.fs as pafs

    units: list[tuple[str, int, int]] = []
    try:
        fs, _ = pafs.FileSystem.from_uri(files[0])
        infos = fs.get_file_info([pafs.FileSystem.from_uri(f)[1] for f in files])
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError, ValueError):
        return None
    for uri, info in zip(files, infos):
        size = info.size or 0
        parts = max(1, -(-size // unit_bytes))
        units.extend((uri, k, parts) for k in range(parts))
    return units


def _physical_columns(uri: str) -> list[str] | None:
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    try:
        fs, path = pafs.FileSystem.from_uri(uri)
        return list(pq.read_schema(path, filesystem=fs).names)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError, ValueError):
        return None


def _open_parquet(uri: str):
    """A ``pyarrow.parquet.ParquetFile`` for ``uri``; local files are memory-mapped (~25 % less CPU here)."""
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    fs, path = pafs.FileSystem.from_uri(uri)
    if isinstance(fs, pafs.LocalFileSystem):
        return pq.ParquetFile(path, memory_map=True)
    return pq.ParquetFile(path, filesystem=fs, pre_buffer=True)


def parquet_partials_fn(
    units: Sequence[tuple[str, int, int]], columns: Sequence[str], layout: str, d: int, norm_bound: float, nonfinite: str
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function over unit ids: reads those Parquet row groups with pyarrow → one partial.

    ``layout`` is ``list`` (one list column of length d) or ``columns`` (d
    numeric columns). A column missing from a file reads as nulls (as Spark
    reads it), so its rows become NaN rows under the policy.
    """
    units = list(units)
    columns = list(columns)

    def partials(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        acc = GramAccumulator(d, norm_bound, nonfinite)
        for batch in batches:
            for unit_id in batch.column(0).to_numpy(zero_copy_only=False):
                uri, part, parts = units[int(unit_id)]
                pf = _open_parquet(uri)
                present = [c for c in columns if c in pf.schema_arrow.names]
                for rg in range(part, pf.num_row_groups, parts):
                    n = pf.metadata.row_group(rg).num_rows
                    if n == 0:
                        continue
                    if len(present) < len(columns) and layout == "list":
                        acc.add(np.full((n, d), np.nan))
                        continue
                    table = pf.read_row_group(rg, columns=present, use_threads=False)
                    if layout == "list":
                        for chunk in table.column(0).chunks:
                            acc.add(list_to_block(chunk, d))
                    else:
                        table = table.combine_chunks()
                        nulls = pa.nulls(n, pa.float64())
                        arrays = [table.column(c).chunk(0) if c in present else nulls for c in columns]
                        acc.add(columns_to_block(arrays))
        yield _partial_batch(acc)

    return partials


def gram_matrix_parquet(
    paths: str | Sequence[str],
    columns: Sequence[str],
    *,
    norm_bound: float,
    nonfinite: str = "drop",
    dimension: int | None = None,
    privacy_unit: str | None = None,
    max_rows_per_unit: int = 1,
    spark: SparkSession | None = None,
) -> np.ndarray:
    """:func:`gram_matrix` of ``spark.read.parquet(*paths)``, reading the files with pyarrow in the tasks.

    Same result and semantics as ``gram_matrix(spark.read.parquet(*paths),
    columns, ...)``, but each task opens its share of the Parquet files
    itself, so the data skips Spark's Parquet reader and the JVM → Arrow
    conversion. Spark still lists the files, checks the schema and runs the
    tasks (Spark Connect safe: the tasks are a ``spark.range`` frame through
    ``mapInArrow``).

    The executors must be able to open the URIs Spark lists with
    ``pyarrow.fs`` (local files, ``s3://``, ``gs://``, ``hdfs://``, ``abfs://``).
    It falls back to the Spark reader, with the same result, when they
    cannot (e.g. ``s3a://``, ``dbfs:/``), for partition columns that live in
    directory names, for ML-vector columns, and when ``privacy_unit`` is
    given (contribution bounding needs a shuffle).

    Args:
        paths: Parquet files or directories.
        columns, norm_bound, nonfinite, dimension, privacy_unit,
            max_rows_per_unit: as for :func:`gram_matrix`.
        spark: the session (default: the active one).

    Returns:
        The symmetric d × d matrix Σᵢ aᵢaᵢᵀ over the kept, clipped rows.
    """
    check_nonfinite(nonfinite)
    if spark is None:
        spark = SparkSession.active()
    paths = [paths] if isinstance(paths, str) else list(paths)
    if not paths:
        raise ConfigError("The 'paths' parameter must name at least one Parquet file or directory.")
    df = _read_parquet(spark, paths)
    # Schema checks and d, exactly as the Spark path does them (no Spark job).
    _, d = vector_frame(df, columns, dimension=dimension, privacy_unit=privacy_unit, max_rows_per_unit=max_rows_per_unit)
    fields = {f.name: f.dataType for f in df.schema.fields}
    columns = list(columns)
    layout = "list" if len(columns) == 1 and isinstance(fields[columns[0]], T.ArrayType) else "columns"
    if len(columns) == 1 and layout == "columns" and not isinstance(fields[columns[0]], T.NumericType):
        layout = "vector"

    def spark_path() -> np.ndarray:
        return gram_matrix(df, columns, norm_bound=norm_bound, nonfinite=nonfinite, dimension=dimension,
                           privacy_unit=privacy_unit, max_rows_per_unit=max_rows_per_unit)

    if privacy_unit is not None or layout == "vector":
        return spark_path()
    files = sorted(df.inputFiles())
    if not files:
        return np.zeros((d, d))
    physical = _physical_columns(files[0])
    units = _plan_units(files, _UNIT_BYTES) if physical is not None else None
    if units is None or not set(columns) <= set(physical):
        return spark_path()
    tasks = max(1, min(len(units), _MAX_TASKS, _MAX_PARTIAL_BYTES // (8 * d * d)))
    ids = spark.range(0, len(units), 1, numPartitions=tasks)
    fn = parquet_partials_fn(units, columns, layout, d, float(norm_bound), nonfinite)
    return sum_partials(ids.mapInArrow(fn, _PARTIAL_SCHEMA), d)
