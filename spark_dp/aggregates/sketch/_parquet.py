"""The direct-Parquet build: tasks that read the files with pyarrow and feed the Arrow kernels.

One reader, :func:`_direct_parquet_table`, behind :func:`sketch_table_parquet`,
:func:`histogram_table_parquet` and :func:`dyadic_tables_parquet`: Spark
reads the schema and lists the files, :mod:`spark_dp.aggregates._parquet_tasks`
packs row groups into one task per core, and each task
(:class:`_ParquetSketchTask`) sums weights per dictionary entry and hands
the distinct items to the family's kernel (:mod:`._kernels`). Falls back to
the Spark reader (:mod:`._sql`, same table) where it cannot apply.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession

from spark_dp.aggregates.sketch import _kernels, _sql
from spark_dp.aggregates.sketch._kernels import (
    _collect,
    _DyadicKernel,
    _HistogramKernel,
    _partials_schema,
    _SketchKernel,
)
from spark_dp.aggregates.sketch._prepare import _check_levels, _check_shape, prepare_items, scale_weights
from spark_dp.errors import ConfigError, SchemaError

#: Rows per pyarrow batch in the direct-Parquet tasks. A string column comes as
#: dictionary indices (4 bytes a row) + the row group's distinct strings, so
#: large batches stay small in memory; 10⁷ Zipf strings, one core: 0.78 CPU-s
#: with 2²⁰-row batches, 0.79 with 2¹⁸, 0.86–1.08 with 2¹⁶ (more dictionary copies).
PARQUET_BATCH_ROWS = 1 << 20


def _file_column(names: Sequence[str], name: str | None) -> str | None:
    """The file's column for Spark's ``name``: exact match, else the one case-insensitive match (Spark's default)."""
    if name is None or name in names:
        return name
    matches = [n for n in names if n.lower() == name.lower()]
    return matches[0] if len(matches) == 1 else None


class _ParquetSketchTask:
    """The ``mapInArrow`` function over task ids of the direct-Parquet build (picklable, plain data).

    Each task opens its units' files with pyarrow and does step 1 (the
    policies of :func:`prepare_items`) and steps 3'–5' of the package doc on
    them: a string column is read as dictionary indices + the row group's
    dictionary (``read_dictionary``), ``np.bincount`` of the indices (with
    the clipped weights) gives each dictionary entry's sum, and only the
    entries that occur are hashed and counted — once per dictionary, not once
    per row. pyarrow may hand the batches of one row group the same
    dictionary or a longer one that extends it (Parquet pages that fell back
    from dictionary to plain encoding): the sums carry over while each new
    dictionary extends the last; any other dictionary starts a new group.
    Integer items (and string columns pyarrow returns undictionaried) are
    ``dictionary_encode``-d per batch. Rows whose item is null follow
    ``nulls``; they are summed apart and hashed once as the null item.
    A column missing from a file reads as nulls, as Spark reads it.
    """

    def __init__(self, tasks: Sequence[Sequence[tuple[str, int, int]]], column: str, weight: str | None,
                 kernel: _SketchKernel, *, nulls: str, nonfinite: str, batch_rows: int | None = None,
                 weight_bounds: tuple[float, float] | None = None):
        self.tasks = [list(t) for t in tasks]
        self.weight_bounds = weight_bounds
        self.column, self.weight, self.kernel = column, weight, kernel
        self.nulls, self.nonfinite = nulls, nonfinite
        self.batch_rows = int(batch_rows or PARQUET_BATCH_ROWS)

    def _weights(self, arr: pa.Array | None) -> tuple[np.ndarray | None, np.ndarray | None]:
        """(clipped weights, rows kept) of one batch: the ``nonfinite`` policy, the public weight bounds (clamp
        to [lo, hi], divide by M: :func:`scale_weights`, as :func:`prepare_items`), then clipping to [−1, 1].
        """
        if arr is None:
            return None, None
        w = pc.cast(arr, pa.float64()).to_numpy(zero_copy_only=False)  # nulls → NaN
        finite = np.isfinite(w)
        if finite.all():
            return np.clip(scale_weights(w, self.weight_bounds), -1.0, 1.0), None
        w = np.where(finite, w, 0.0)
        w[finite] = scale_weights(w[finite], self.weight_bounds)  # a non-finite weight stays 0 under 'zero'
        np.clip(w, -1.0, 1.0, out=w)
        return w, (finite if self.nonfinite == "drop" else None)

    def _batches(self, unit: tuple[str, int, int]) -> Iterator[tuple[int, pa.Array | None, pa.Array | None]]:
        """(rows, item column or None if missing, weight column or None if missing/unweighted) per batch."""
        from spark_dp.aggregates._parquet_tasks import row_groups

        uri, part, parts = unit
        strings = self.kernel.kind == "string"
        try:
            pf = _open_parquet(uri, self.column if strings else None)
        except KeyError:  # read_dictionary names a column the file lacks
            pf = _open_parquet(uri, None)
        names = pf.schema_arrow.names
        item_col, w_col = _file_column(names, self.column), _file_column(names, self.weight)
        if strings and item_col is not None and item_col != self.column:  # matched case-insensitively
            pf = _open_parquet(uri, item_col)
        present = [c for c in (item_col, w_col) if c is not None]
        groups = row_groups(pf, part, parts)
        if not present:
            for g in groups:
                yield pf.metadata.row_group(g).num_rows, None, None
            return
        for b in pf.iter_batches(batch_size=self.batch_rows, row_groups=groups, columns=present, use_threads=False):
            if b.num_rows:
                yield (b.num_rows, b.column(item_col) if item_col is not None else None,
                       b.column(w_col) if w_col is not None else None)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from spark_dp.aggregates._parquet_tasks import units_of

        kern = self.kernel
        item_type = pa.string() if kern.kind == "string" else pa.int64()
        acc = np.zeros(kern.k * kern.b) if kern.dense else None
        cur: pa.Array | None = None  # the current dictionary
        sums = np.zeros(0)  # its entries' weight sums
        null_sum, null_rows = 0.0, 0

        def flush() -> Iterator[pa.RecordBatch]:
            nonlocal acc
            if cur is None:
                return
            used = np.flatnonzero(sums)
            if cur.null_count and self.nulls == "drop":  # null dictionary entries are null items
                used = used[np.asarray(cur.is_valid().to_numpy(zero_copy_only=False))[used]]
            if used.size == 0:
                return
            out = kern.distinct(cur.take(pa.array(used)), sums[used])
            if kern.dense:
                acc += out
            else:
                yield kern.sparse_batch(out)

        for unit in units_of(self.tasks, batches):
            for n, items, wcol in self._batches(unit):
                w, keep = None, None
                if self.weight is not None:
                    w, keep = self._weights(wcol if wcol is not None else pa.nulls(n, pa.float64()))
                if items is None:
                    items = pa.nulls(n, item_type)
                if not pa.types.is_dictionary(items.type):
                    items = pc.dictionary_encode(items.cast(pa.int64()) if kern.kind == "long" else items)
                dictionary = items.dictionary
                if kern.kind == "long" and dictionary.type != pa.int64():
                    dictionary = dictionary.cast(pa.int64())
                ix = items.indices
                if ix.null_count:  # null items: summed apart (nulls='item') or dropped
                    null = np.asarray(ix.is_null().to_numpy(zero_copy_only=False))
                    if self.nulls == "item":
                        sel = null if keep is None else (null & keep)
                        null_rows += int(sel.sum())
                        null_sum += float(w[sel].sum()) if w is not None else float(sel.sum())
                    keep = ~null if keep is None else (keep & ~null)
                    ix = ix.fill_null(0)
                ix = ix.to_numpy()
                if keep is not None:
                    ix = ix[keep]
                    w = None if w is None else w[keep]
                add = np.bincount(ix, weights=w, minlength=len(dictionary))
                if cur is not None and len(dictionary) >= len(cur) and (
                        dictionary is cur or dictionary.slice(0, len(cur)).equals(cur)):
                    if len(dictionary) > len(sums):
                        sums = np.concatenate([sums, np.zeros(len(dictionary) - len(sums))])
                    sums += add
                    cur = dictionary
                else:
                    yield from flush()
                    cur, sums = dictionary, add.astype(np.float64)
        yield from flush()
        cur = None
        if null_rows:
            out = kern.distinct(pa.nulls(1, item_type), np.array([null_sum]))
            if kern.dense:
                acc += out
            else:
                yield kern.sparse_batch(out)
        if kern.dense:
            yield kern.dense_batch(acc)


def _open_parquet(uri: str, dictionary_column: str | None):
    """:func:`~spark_dp.aggregates._parquet_tasks.open_parquet` with ``read_dictionary=[dictionary_column]``."""
    from spark_dp.aggregates._parquet_tasks import open_parquet

    return open_parquet(uri) if dictionary_column is None else open_parquet(uri, read_dictionary=[dictionary_column])


def sketch_table_parquet(
    paths: str | Sequence[str],
    column: str,
    *,
    seeds: Sequence[int],
    buckets: int,
    signed: bool = True,
    weight: str | None = None,
    nulls: str = "item",
    nonfinite: str = "drop",
    weight_bounds: tuple[float, float] | None = None,
    privacy_unit: str | None = None,
    max_items_per_unit: int = 1,
    unit_l2_bound: float | None = None,
    spark: SparkSession | None = None,
) -> np.ndarray:
    """:func:`sketch_table` of ``spark.read.parquet(*paths)``, with the tasks reading the files with pyarrow.

    The same k×b table as ``sketch_table(spark.read.parquet(*paths), column,
    ...)`` (exactly for counts and dyadic weights; up to float summation
    order otherwise, as between the SQL and Arrow builds), but each task
    opens its share of the files itself (:mod:`spark_dp.aggregates._parquet_tasks`: one task per
    core, row groups packed by bytes), reads a string column as dictionary
    indices + dictionary, sums the weights per dictionary entry and hashes
    only the distinct items: the rows skip Spark's Parquet reader and the
    JVM → Arrow conversion, and no string is materialised per row. Spark
    still reads the schema (same errors and column checks as the Spark path),
    lists the files and runs the tasks (Spark Connect safe).

    Falls back to the Spark reader (:func:`sketch_table`, same table) when
    ``privacy_unit`` is given (contribution bounding needs a shuffle; this
    includes ``unit_l2_bound``), when pyarrow cannot open the URIs Spark
    lists (e.g. ``s3a://``, ``dbfs:/``), and when the item or weight column
    is not in the files (e.g. a partition column in directory names).

    Args:
        paths: Parquet files or directories.
        column, seeds, buckets, signed, weight, nulls, nonfinite, weight_bounds,
            privacy_unit, max_items_per_unit, unit_l2_bound: as for
            :func:`sketch_table`.
        spark: the session (default: the active one).

    Returns:
        float64 array of shape (k, b).
    """
    _check_shape(seeds, buckets)
    if unit_l2_bound is not None and privacy_unit is None:
        raise ConfigError("The 'unit_l2_bound' parameter needs a 'privacy_unit' column.")
    k, b = len(seeds), int(buckets)

    def make_kernel(kind: str) -> _SketchKernel:
        return _SketchKernel(kind, seeds, b, signed=signed, weighted=weight is not None, preaggregate=True,
                             dense=k * b <= _kernels.DENSE_MAX_COUNTERS, chunk_rows=_kernels.CHUNK_ROWS,
                             block_items=_kernels._BLOCK_ITEMS)

    def spark_path(df: DataFrame) -> np.ndarray:
        return _sql.sketch_table(df, column, seeds=seeds, buckets=buckets, signed=signed, weight=weight,
                                 nulls=nulls, nonfinite=nonfinite, privacy_unit=privacy_unit,
                                 max_items_per_unit=max_items_per_unit, unit_l2_bound=unit_l2_bound,
                                 weight_bounds=weight_bounds)

    _, table = _direct_parquet_table(
        paths, column, make_kernel, weight=weight, nulls=nulls, nonfinite=nonfinite, privacy_unit=privacy_unit,
        max_items_per_unit=max_items_per_unit, spark=spark, spark_path=spark_path,
        weight_bounds=weight_bounds)
    return table


def _direct_parquet_table(
    paths: str | Sequence[str], column: str, make_kernel, *, weight: str | None, nulls: str, nonfinite: str,
    privacy_unit: str | None, max_items_per_unit: int, spark: SparkSession | None, spark_path,
    weight_bounds: tuple[float, float] | None = None,
) -> tuple[_SketchKernel | None, np.ndarray]:
    """The kernel's table with the tasks reading the Parquet files themselves: the one direct-Parquet reader.

    ``make_kernel(kind)`` builds the kernel (a :class:`_SketchKernel`);
    ``spark_path(df)`` builds the same table through Spark's reader, taken
    when the direct path cannot apply (a privacy unit: contribution bounding
    needs a shuffle; URIs pyarrow cannot open; a column not in the files).

    Returns:
        ``(kernel, flat table of shape (kernel.k, kernel.b))`` or ``(None, spark_path's result)``.
    """
    from spark_dp.aggregates._parquet_tasks import physical_columns, plan_tasks, source_frame, task_ids

    spark, paths, df = source_frame(paths, spark)
    # Step 1's schema and parameter checks, exactly as the Spark path does them (no Spark job).
    _, kind = prepare_items(df, column, weight=weight, nulls=nulls, nonfinite=nonfinite,
                            privacy_unit=privacy_unit, max_items_per_unit=max_items_per_unit,
                            weight_bounds=weight_bounds)
    kernel = make_kernel(kind)
    if privacy_unit is not None:
        return None, spark_path(df)
    files = sorted(df.inputFiles())
    if not files:
        return kernel, np.zeros((kernel.k, kernel.b))
    physical = physical_columns(files[0])
    wanted = [c for c in (column, weight) if c is not None]
    if physical is None or any(_file_column(physical, c) is None for c in wanted):
        return None, spark_path(df)
    tasks = plan_tasks(spark, files, 8 * min(kernel.k * kernel.b, _kernels.DENSE_MAX_COUNTERS))
    if tasks is None:
        return None, spark_path(df)
    fn = _ParquetSketchTask(tasks, column, weight, kernel, nulls=nulls, nonfinite=nonfinite,
                            weight_bounds=weight_bounds)
    parts = task_ids(spark, tasks).mapInArrow(fn, _partials_schema(kernel.dense))
    return kernel, _collect(parts, kernel.k, kernel.b, kernel.dense, len(tasks))


def histogram_table_parquet(
    paths: str | Sequence[str],
    column: str,
    *,
    domain: Sequence | int,
    weight: str | None = None,
    nulls: str = "item",
    nonfinite: str = "drop",
    weight_bounds: tuple[float, float] | None = None,
    privacy_unit: str | None = None,
    max_items_per_unit: int = 1,
    spark: SparkSession | None = None,
) -> np.ndarray:
    """:func:`histogram_table` of ``spark.read.parquet(*paths)``, with the tasks reading the files with pyarrow.

    The same histogram (exactly for counts and dyadic weights), built like
    :func:`sketch_table_parquet` (per dictionary entry sums, then each
    distinct item's domain index), with the same fallbacks to the Spark
    reader (a privacy unit, URIs pyarrow cannot open, a column not in the
    files).

    Returns:
        float64 array of shape (len(domain),).
    """
    def make_kernel(kind: str) -> _HistogramKernel:
        if isinstance(domain, int | np.integer) and not isinstance(domain, bool) and kind != "long":
            raise SchemaError(f"Column {column!r} holds strings; an integer domain size needs an integer item column.")
        d = int(domain) if isinstance(domain, int | np.integer) else len(domain)
        return _HistogramKernel(kind, domain, weighted=weight is not None, preaggregate=True,
                                dense=d <= _kernels.DENSE_MAX_COUNTERS)

    def spark_path(df: DataFrame) -> np.ndarray:
        return _sql.histogram_table(df, column, domain=domain, weight=weight, nulls=nulls, nonfinite=nonfinite,
                                    privacy_unit=privacy_unit, max_items_per_unit=max_items_per_unit, weight_bounds=weight_bounds)

    kernel, table = _direct_parquet_table(
        paths, column, make_kernel, weight=weight, nulls=nulls, nonfinite=nonfinite, privacy_unit=privacy_unit,
        max_items_per_unit=max_items_per_unit, spark=spark, spark_path=spark_path,
        weight_bounds=weight_bounds)
    return table if kernel is None else table.reshape(-1)


def dyadic_tables_parquet(
    paths: str | Sequence[str],
    column: str,
    *,
    seeds: Sequence[Sequence[int]],
    buckets: int,
    levels: int,
    hash_seed: int | None = None,
    weight: str | None = None,
    nulls: str = "drop",
    nonfinite: str = "drop",
    weight_bounds: tuple[float, float] | None = None,
    privacy_unit: str | None = None,
    max_items_per_unit: int = 1,
    spark: SparkSession | None = None,
) -> np.ndarray:
    """:func:`dyadic_tables` of ``spark.read.parquet(*paths)``, with the tasks reading the files with pyarrow.

    The same (L, k, b) stack (exactly for counts and dyadic weights), built
    like :func:`sketch_table_parquet`: per dictionary entry sums, then the
    :class:`_DyadicKernel` on the distinct items only; same fallbacks to the
    Spark reader.

    Returns:
        float64 array of shape (L, k, b).
    """
    k, b = _check_levels(seeds, buckets, levels), int(buckets)

    def make_kernel(kind: str) -> _DyadicKernel:
        if kind != "long" and hash_seed is None:
            raise SchemaError(f"Column {column!r} holds strings; dyadic heavy hitters over them need the hashed "
                              "domain (a 'hash_seed'), or integer items in [0, 2^levels).")
        return _DyadicKernel(kind, seeds, b, levels, hash_seed, weighted=weight is not None, preaggregate=True,
                             dense=levels * k * b <= _kernels.DENSE_MAX_COUNTERS)

    def spark_path(df: DataFrame) -> np.ndarray:
        return _sql.dyadic_tables(df, column, seeds=seeds, buckets=b, levels=levels, hash_seed=hash_seed,
                                  weight=weight, nonfinite=nonfinite, privacy_unit=privacy_unit,
                                  max_items_per_unit=max_items_per_unit, weight_bounds=weight_bounds)

    kernel, table = _direct_parquet_table(
        paths, column, make_kernel, weight=weight, nulls="drop", nonfinite=nonfinite, privacy_unit=privacy_unit,
        max_items_per_unit=max_items_per_unit, spark=spark, spark_path=spark_path,
        weight_bounds=weight_bounds)
    return table if kernel is None else table.reshape(levels, k, b)
