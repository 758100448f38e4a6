"""Exact second-moment matrix AᵀA of clipped rows, one pass over a DataFrame.

Executors: each partition's Arrow batches (~4 MB) become (n, d) float64
blocks (zero-copy for well-formed rows); per ~2 MB chunk the non-finite
policy is applied, rows are clipped to ‖a‖₂ ≤ B, and BLAS ``dsyrk``
accumulates the upper triangle of the partition's AᵀA in place
(:class:`~spark_dp.aggregates._blocks.GramAccumulator`). One partial (d²
doubles as bytes) leaves each partition; the driver sums them.

:func:`gram_matrix_parquet` computes the same matrix for Parquet paths with
each task reading its files with pyarrow, skipping Spark's reader and the
JVM → Arrow conversion (the larger part of :func:`gram_matrix`'s time on
cached data; see docs/benchmarks.md).

No noise and no privacy accounting here: this layer computes exact
aggregates only. Spark Connect safe (``mapInArrow``, no RDD API).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from spark_dp.aggregates._blocks import GramAccumulator, columns_to_block, list_to_block
from spark_dp.aggregates._vectors import check_nonfinite, vector_frame
from spark_dp.aggregates.sources import check_path_exists
from spark_dp.errors import ConfigError, SchemaError

_PARTIAL_SCHEMA = "partial binary"

_BATCH_BYTES_CONF = "spark.sql.execution.arrow.maxBytesPerBatch"
#: Arrow batches of ~4 MB into the Python workers. Spark's default batches are
#: 10,000 rows whatever their width (40 MB at d = 500), which cost ~40 % more
#: CPU in total here than 4 MB batches (the JVM's share +70 %).
ARROW_BATCH_BYTES = 4 << 20


@contextmanager
def _arrow_batch_bytes(spark: SparkSession) -> Iterator[None]:
    """Caps Arrow batches at ``ARROW_BATCH_BYTES`` while the block runs, unless the user set a cap.

    A session setting (there is no per-query one): other queries running in
    the same session at the same moment see smaller batches too, which
    changes their speed only.
    """
    try:
        user_value = spark.conf.get(_BATCH_BYTES_CONF, None)
    except Exception:  # pragma: no cover - a server that hides its conf
        user_value = "unknown"
    if user_value is not None:
        yield
        return
    spark.conf.set(_BATCH_BYTES_CONF, str(ARROW_BATCH_BYTES))
    try:
        yield
    finally:
        spark.conf.unset(_BATCH_BYTES_CONF)


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

    For data in Parquet files, :func:`gram_matrix_parquet` gives the same
    result 1.4–1.7× faster (docs/benchmarks.md). Arrow batches are capped
    at ~4 MB for the call unless ``spark.sql.execution.arrow.maxBytesPerBatch``
    is set.
    """
    check_nonfinite(nonfinite)
    frame, d = vector_frame(
        df, columns, dimension=dimension, privacy_unit=privacy_unit, max_rows_per_unit=max_rows_per_unit
    )
    with _arrow_batch_bytes(frame.sparkSession):
        return sum_partials(frame.mapInArrow(gram_partials_fn(d, float(norm_bound), nonfinite), _PARTIAL_SCHEMA), d)


def vector_dimension(df: DataFrame, columns: Sequence[str], dimension: int | None = None) -> int:
    """d for ``columns`` (validates the schema; runs no Spark job)."""
    return vector_frame(df, columns, dimension=dimension)[1]


# -- direct Parquet path -------------------------------------------------------

#: Spark's defaults for splitting and packing files into scan tasks
#: (``spark.sql.files.maxPartitionBytes``, ``spark.sql.files.openCostInBytes``).
_MAX_SPLIT_BYTES = 128 << 20
_OPEN_COST_BYTES = 4 << 20
#: At most this many tasks (partials) per call, and at most ~1 GiB of partials.
_MAX_TASKS = 256
_MAX_PARTIAL_BYTES = 1 << 30

Unit = tuple[str, int, int]  # (uri, part, parts): row groups part::parts of the file


def _read_parquet(spark: SparkSession, paths: Sequence[str]) -> DataFrame:
    for p in paths:
        check_path_exists(p)
    try:
        return spark.read.parquet(*paths)
    except Exception as exc:  # AnalysisException or Connect's equivalent
        if "PATH_NOT_FOUND" in str(exc) or "Path does not exist" in str(exc):
            raise SchemaError(f"Input path {list(paths)!r} does not exist.") from None
        raise


def _conf_bytes(spark: SparkSession, key: str, default: int) -> int:
    value = spark.conf.get(key, None)
    if not value:
        return default
    units = {"b": 1, "k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20, "g": 1 << 30, "gb": 1 << 30}
    v = value.strip().lower()
    for suffix in sorted(units, key=len, reverse=True):
        if v.endswith(suffix) and v[: -len(suffix)].strip().isdigit():
            return int(v[: -len(suffix)]) * units[suffix]
    return int(v) if v.isdigit() else default


def _parallelism(spark: SparkSession) -> int:
    """What Spark's file scan divides the input by (its ``minPartitionNum``), without a SparkContext."""
    for key in ("spark.sql.files.minPartitionNum", "spark.sql.leafNodeDefaultParallelism", "spark.default.parallelism"):
        value = spark.conf.get(key, None)
        if value and value.isdigit() and int(value) > 0:
            return int(value)
    master = spark.conf.get("spark.master", None) or ""
    if master.startswith("local"):
        inner = master[master.find("[") + 1 : master.find("]")] if "[" in master else "1"
        inner = inner.split(",")[0]
        return int(inner) if inner.isdigit() else (os.cpu_count() or 1)
    return 8


def _plan_units(files: Sequence[str], max_split: int) -> list[tuple[Unit, int]] | None:
    """Work units with their sizes in bytes; files over ``max_split`` are split by row groups.

    None when pyarrow cannot open these URIs on its own (e.g. ``s3a://``,
    ``dbfs:/``): the caller then reads through Spark.
    """
    import pyarrow.fs as pafs

    try:
        fs, _ = pafs.FileSystem.from_uri(files[0])
        infos = fs.get_file_info([pafs.FileSystem.from_uri(f)[1] for f in files])
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError, ValueError):
        return None
    units: list[tuple[Unit, int]] = []
    for uri, info in zip(files, infos):
        size = info.size or 0
        parts = max(1, -(-size // max_split))
        units.extend(((uri, k, parts), size // parts) for k in range(parts))
    return units


def _pack(units: Sequence[tuple[Unit, int]], max_split: int, open_cost: int, max_tasks: int) -> list[list[Unit]]:
    """Packs units into tasks the way Spark packs file splits (largest first, next fit)."""
    tasks: list[list[Unit]] = []
    current: list[Unit] = []
    current_bytes = 0
    for unit, size in sorted(units, key=lambda u: -u[1]):
        if current and current_bytes + size > max_split:
            tasks.append(current)
            current, current_bytes = [], 0
        current.append(unit)
        current_bytes += size + open_cost
    if current:
        tasks.append(current)
    if len(tasks) > max_tasks:  # bound the number of partials the driver receives
        merged: list[list[Unit]] = [[] for _ in range(max_tasks)]
        for i, task in enumerate(tasks):
            merged[i % max_tasks].extend(task)
        tasks = merged
    return tasks


def _plan_tasks(spark: SparkSession, files: Sequence[str], d: int) -> list[list[Unit]] | None:
    max_partition = _conf_bytes(spark, "spark.sql.files.maxPartitionBytes", _MAX_SPLIT_BYTES)
    open_cost = _conf_bytes(spark, "spark.sql.files.openCostInBytes", _OPEN_COST_BYTES)
    units = _plan_units(files, max_partition)
    if units is None:
        return None
    total = sum(size + open_cost for _, size in units)
    max_split = min(max_partition, max(open_cost, total // _parallelism(spark)))
    max_tasks = max(1, min(_MAX_TASKS, _MAX_PARTIAL_BYTES // (8 * d * d)))
    return _pack(units, max_split, open_cost, max_tasks)


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
    tasks: Sequence[Sequence[Unit]], columns: Sequence[str], layout: str, d: int, norm_bound: float, nonfinite: str
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function over task ids: reads their Parquet row groups with pyarrow → one partial.

    ``tasks[i]`` lists the units ``(uri, part, parts)`` of task i. ``layout``
    is ``list`` (one list column of length d) or ``columns`` (d numeric
    columns). A column missing from a file reads as nulls (as Spark reads
    it), so its rows become NaN rows under the policy.
    """
    tasks = [list(t) for t in tasks]
    columns = list(columns)
    batch_rows = max(64, ARROW_BATCH_BYTES // (8 * d))

    def partials(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        acc = GramAccumulator(d, norm_bound, nonfinite)
        for batch in batches:
            for task_id in batch.column(0).to_numpy(zero_copy_only=False):
                for uri, part, parts in tasks[int(task_id)]:
                    pf = _open_parquet(uri)
                    present = [c for c in columns if c in pf.schema_arrow.names]
                    groups = list(range(part, pf.num_row_groups, parts))
                    if len(present) < len(columns) and layout == "list":
                        rows = sum(pf.metadata.row_group(g).num_rows for g in groups)
                        acc.add(np.full((rows, d), np.nan))
                        continue
                    if not present:
                        for g in groups:
                            acc.add(np.full((pf.metadata.row_group(g).num_rows, d), np.nan))
                        continue
                    # ~4 MB batches: steady memory reuse; whole 128 MB row groups cost
                    # up to 2-3x more CPU here in fresh-allocation page faults.
                    batches_in = pf.iter_batches(batch_size=batch_rows, row_groups=groups, columns=present,
                                                 use_threads=False)
                    for b in batches_in:
                        if b.num_rows == 0:
                            continue
                        if layout == "list":
                            acc.add(list_to_block(b.column(0), d))
                        else:
                            nulls = pa.nulls(b.num_rows, pa.float64())
                            names = b.schema.names
                            acc.add(columns_to_block([b.column(names.index(c)) if c in present else nulls for c in columns]))
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
    tasks = _plan_tasks(spark, files, d) if physical is not None else None
    if tasks is None or not set(columns) <= set(physical):
        return spark_path()
    ids = spark.range(0, len(tasks), 1, numPartitions=len(tasks))
    fn = parquet_partials_fn(tasks, columns, layout, d, float(norm_bound), nonfinite)
    return sum_partials(ids.mapInArrow(fn, _PARTIAL_SCHEMA), d)
