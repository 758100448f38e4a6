"""Tasks that read their own Parquet files with pyarrow (the direct-Parquet path).

Shared by the exact aggregates that can skip Spark's Parquet reader and the
JVM → Arrow hop: Spark still reads the schema (same errors as
``spark.read.parquet``) and lists the files; the driver packs the files
(split by row groups when large) into a few tasks; a ``spark.range`` frame
of task ids goes through ``mapInArrow`` and each task opens its share with
pyarrow. Spark Connect safe (no RDD API, no SparkContext).

Callers fall back to the Spark reader when :func:`plan_tasks` returns None
(URIs pyarrow cannot open, e.g. ``s3a://`` or ``dbfs:/``; columns that are
not in the files, e.g. partition columns in directory names).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from spark_dp.aggregates._blocks import columns_to_block, list_to_block
from spark_dp.aggregates.sources import check_path_exists
from spark_dp.errors import ConfigError, SchemaError

#: Spark's defaults for splitting and packing files into scan tasks
#: (``spark.sql.files.maxPartitionBytes``, ``spark.sql.files.openCostInBytes``).
_MAX_SPLIT_BYTES = 128 << 20
_OPEN_COST_BYTES = 4 << 20
#: At most this many tasks (partials) per call, and at most ~1 GiB of partials.
_MAX_TASKS = 256
_MAX_TASK_BYTES = 1 << 30  # a task streams at most this much Parquet
_MAX_PARTIAL_BYTES = 1 << 30

#: Batch size for the tasks' own Parquet reads: ~1 MB batches reuse warm
#: memory and stay in cache for the clip and dsyrk (single core, 400 MB of
#: Parquet: d = 100 0.52 vs 0.57 CPU-s with 4 MB, d = 500 0.47 vs 0.49).
PARQUET_BATCH_BYTES = 1 << 20

Unit = tuple[str, int, int]  # (uri, part, parts): row groups part::parts of the file


def source_frame(paths: str | Sequence[str], spark: SparkSession | None) -> tuple[SparkSession, list[str], DataFrame]:
    """The session (default: the active one), ``paths`` as a list and ``spark.read.parquet(*paths)``.

    The common start of every direct-Parquet aggregate: no paths is a
    :class:`ConfigError`, a path that does not exist a :class:`SchemaError`.
    """
    if spark is None:
        spark = SparkSession.active()
    paths = [paths] if isinstance(paths, str) else list(paths)
    if not paths:
        raise ConfigError("The 'paths' parameter must name at least one Parquet file or directory.")
    return spark, paths, read_parquet(spark, paths)


def read_parquet(spark: SparkSession, paths: Sequence[str]) -> DataFrame:
    """``spark.read.parquet(*paths)``; a path that does not exist is a :class:`SchemaError` naming it."""
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


def _task_slots(spark: SparkSession) -> int:
    """How many tasks run at once (the one rule: :func:`spark_dp.aggregates._partitioning.task_slots`)."""
    from spark_dp.aggregates._partitioning import task_slots

    return task_slots(spark)


def _plan_units(files: Sequence[str], max_partition: int, open_cost: int, slots: int) -> list[tuple[Unit, int]] | None:
    """Work units with their sizes in bytes (open cost included); large files are split by row groups.

    A file is split above Spark's ``maxSplitBytes`` = min(maxPartitionBytes,
    max(openCostInBytes, total / slots)), so that even one small file is
    shared by all cores when it has several row groups.

    None when pyarrow cannot open these URIs on its own (e.g. ``s3a://``,
    ``dbfs:/``): the caller then reads through Spark.
    """
    import pyarrow.fs as pafs

    try:
        fs, _ = pafs.FileSystem.from_uri(files[0])
        infos = fs.get_file_info([pafs.FileSystem.from_uri(f)[1] for f in files])
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError, ValueError):
        return None
    sizes = [info.size or 0 for info in infos]
    total = sum(size + open_cost for size in sizes)
    max_split = max(1, min(max_partition, max(open_cost, total // max(1, slots))))
    units: list[tuple[Unit, int]] = []
    for uri, size in zip(files, sizes):
        parts = max(1, -(-size // max_split))
        units.extend(((uri, k, parts), size // parts + open_cost) for k in range(parts))
    return units


def _pack(units: Sequence[tuple[Unit, int]], tasks: int) -> list[list[Unit]]:
    """Packs units into ``tasks`` tasks of near-equal bytes (largest first, into the lightest task)."""
    tasks = max(1, min(tasks, len(units)))
    heap = [(0, i) for i in range(tasks)]
    out: list[list[Unit]] = [[] for _ in range(tasks)]
    for unit, size in sorted(units, key=lambda u: -u[1]):
        load, i = heapq.heappop(heap)
        out[i].append(unit)
        heapq.heappush(heap, (load + size, i))
    return [t for t in out if t]


def _task_count(total: int, slots: int, max_tasks: int) -> int:
    """How many tasks: a multiple of the cores, each at most ``_MAX_TASK_BYTES``, at most ``max_tasks``.

    Unlike Spark's file scan (one task per ~128 MB split), the tasks stream
    their row groups in ~4 MB batches, so their memory does not grow with
    their input, and each Python task costs ~60–70 ms of scheduling here:
    16 tasks of 100 MB took 2.1–2.4 s at d = 100, the same files in 2 tasks
    1.5–1.6 s. More than one task per core only pays for very large inputs
    (retries and stragglers cost less).
    """
    waves = max(1, -(-total // (slots * _MAX_TASK_BYTES)))
    return max(1, min(max_tasks, slots * waves))


def plan_tasks(spark: SparkSession, files: Sequence[str], partial_bytes: int) -> list[list[Unit]] | None:
    """The files' row groups packed into tasks; None when pyarrow cannot open the URIs.

    ``partial_bytes`` is the size of one task's result: the driver receives
    at most ~1 GiB of them in total.
    """
    max_partition = _conf_bytes(spark, "spark.sql.files.maxPartitionBytes", _MAX_SPLIT_BYTES)
    open_cost = _conf_bytes(spark, "spark.sql.files.openCostInBytes", _OPEN_COST_BYTES)
    slots = _task_slots(spark)
    units = _plan_units(files, max_partition, open_cost, slots)
    if units is None:
        return None
    max_tasks = max(1, min(_MAX_TASKS, _MAX_PARTIAL_BYTES // max(1, partial_bytes)))
    return _pack(units, _task_count(sum(size for _, size in units), slots, max_tasks))


def physical_columns(uri: str) -> list[str] | None:
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    try:
        fs, path = pafs.FileSystem.from_uri(uri)
        return list(pq.read_schema(path, filesystem=fs).names)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError, ValueError):
        return None


def open_parquet(uri: str, **options):
    """A ``pyarrow.parquet.ParquetFile`` for ``uri``; local files are memory-mapped (~25 % less CPU here).

    ``options`` go to ``ParquetFile`` (e.g. ``read_dictionary``).
    """
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    fs, path = pafs.FileSystem.from_uri(uri)
    if isinstance(fs, pafs.LocalFileSystem):
        return pq.ParquetFile(path, memory_map=True, **options)
    return pq.ParquetFile(path, filesystem=fs, pre_buffer=True, **options)




def task_ids(spark: SparkSession, tasks: Sequence[Sequence[Unit]]) -> DataFrame:
    """A frame of one row (``id``) per task, one partition each: the input of the tasks' ``mapInArrow``."""
    return spark.range(0, len(tasks), 1, numPartitions=max(1, len(tasks)))


def row_groups(pf, part: int, parts: int) -> list[int]:
    """The row groups of unit ``(uri, part, parts)`` in the open ParquetFile ``pf``."""
    return list(range(part, pf.num_row_groups, parts))


def units_of(tasks: Sequence[Sequence[Unit]], batches: Iterator[pa.RecordBatch]) -> Iterator[Unit]:
    """Inside a task: the units of the task ids arriving in ``batches``."""
    for batch in batches:
        for task_id in batch.column(0).to_numpy(zero_copy_only=False):
            yield from tasks[int(task_id)]


def unit_blocks(unit: Unit, columns: Sequence[str], layout: str, d: int) -> Iterator[np.ndarray]:
    """Inside a task: the rows of one unit as (n, d) float64 blocks of ~1 MB (nulls and bad rows → NaN rows).

    ``layout`` is ``list`` (one list column of length d) or ``columns`` (d
    numeric columns). A column missing from a file reads as nulls, as Spark
    reads it, so its rows become NaN rows for the non-finite policy.
    """
    uri, part, parts = unit
    pf = open_parquet(uri)
    present = [c for c in columns if c in pf.schema_arrow.names]
    groups = row_groups(pf, part, parts)
    if not present or (len(present) < len(columns) and layout == "list"):
        for g in groups:
            yield np.full((pf.metadata.row_group(g).num_rows, d), np.nan)
        return
    # ~1 MB batches: steady memory reuse; whole 128 MB row groups cost up to
    # 2-3x more CPU here in fresh-allocation page faults.
    batch_rows = max(64, PARQUET_BATCH_BYTES // (8 * d))
    for b in pf.iter_batches(batch_size=batch_rows, row_groups=groups, columns=present, use_threads=False):
        if b.num_rows == 0:
            continue
        if layout == "list":
            yield list_to_block(b.column(0), d)
        else:
            nulls = pa.nulls(b.num_rows, pa.float64())
            names = b.schema.names
            yield columns_to_block([b.column(names.index(c)) if c in present else nulls for c in columns])
