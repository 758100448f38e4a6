"""Exact second-moment matrix AᵀA of clipped rows, one pass over a DataFrame.

Executors: each partition's Arrow batches (~4 MB) become (n, d) float64
blocks (zero-copy for well-formed rows); per ~2 MB chunk the non-finite
policy is applied, rows are clipped to ‖a‖₂ ≤ B, and BLAS ``dsyrk``
accumulates the upper triangle of the partition's AᵀA in place
(:class:`~spark_dp.aggregates._blocks.GramAccumulator`). One partial (d²
doubles as bytes) leaves each task; the driver sums them, after a tree step on
the executors when they are many (:mod:`spark_dp.aggregates._partials`).

:func:`gram_matrix_parquet` computes the same matrix for Parquet paths with
each task reading its files with pyarrow, skipping Spark's reader and the
JVM → Arrow conversion (the larger part of :func:`gram_matrix`'s time on
cached data; see docs/benchmarks.md).

No noise and no privacy accounting here: this layer computes exact
aggregates only. Spark Connect safe (``mapInArrow``, no RDD API).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from spark_dp.aggregates._blocks import GramAccumulator, list_to_block
from spark_dp.aggregates._parquet_tasks import (
    Unit,
    physical_columns,
    plan_tasks,
    source_frame,
    task_ids,
    unit_blocks,
    units_of,
)
from spark_dp.aggregates._partials import VectorPartials, arrow_batch_bytes, cap_partials, collect_sum
from spark_dp.aggregates._vectors import (
    Affine,
    check_nonfinite,
    check_unit,
    schema_of,
    vector_columns,
    vector_frame,
)

_PARTIAL_SCHEMA = "partial binary"

def _partial_batch(acc: GramAccumulator) -> pa.RecordBatch:
    """d² doubles (the upper triangle), then [clipped, rows] when the accumulator counts them."""
    data = acc.upper().tobytes() + (acc.counts().tobytes() if acc.count_clipped else b"")
    return pa.RecordBatch.from_arrays([pa.array([data], type=pa.binary())], names=["partial"])


def gram_partials_fn(d: int, norm_bound: float, nonfinite: str, *, count_clipped: bool = False,
                     flag_column: bool = False) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function: batches of one list<double> column → one partial.

    ``flag_column``: the lists have d + 1 elements, the last the clamping flag (:class:`GramAccumulator`).
    """
    width = d + int(flag_column)

    def partials(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        acc = GramAccumulator(d, norm_bound, nonfinite, count_clipped=count_clipped, flag_column=flag_column)
        for batch in batches:
            if batch.num_rows:
                acc.add(list_to_block(batch.column(0), width))
        yield _partial_batch(acc)

    return partials


def _partials_format(d: int, count_clipped: bool) -> VectorPartials:
    """d² doubles, then [clipped, rows] when counted (:func:`_partial_batch`)."""
    return VectorPartials(d * d + 2 * int(count_clipped))


def sum_partials(frame: DataFrame, d: int, *, count_clipped: bool = False, count: int | None = None,
                 threshold: int | None = None):
    """Sums the partials; returns the full symmetric matrix (and [clipped, rows] when counted).

    ``count``: at most this many partials (the planned tasks, or the
    DataFrame path's cap); above ``threshold`` bytes in all they are summed
    on the executors first (:func:`~spark_dp.aggregates._partials.collect_sum`;
    the same sum up to floating-point summation order, no noise involved).
    """
    total, _ = collect_sum(frame, _partials_format(d, count_clipped), count, threshold)
    counts = total[d * d :]
    total = total[: d * d].reshape(d, d)
    total = total + np.triu(total, 1).T
    return (total, counts) if count_clipped else total


def gram_matrix(
    df: DataFrame,
    columns: Sequence[str],
    *,
    norm_bound: float,
    nonfinite: str = "drop",
    dimension: int | None = None,
    privacy_unit: str | None = None,
    max_rows_per_unit: int = 1,
    affine: Affine | None = None,
    count_clipped: bool = False,
):
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
        affine: public column bounds (clamp and scale to [-1, 1]) and a
            constant column, applied in the SQL expression building the
            vector (:class:`~spark_dp.aggregates._vectors.Affine`).
        count_clipped: also count, in the same job, the rows that entered
            the matrix and those clipped (norm above B, or a value clamped to
            its bounds: ``affine.flag``), for the clipping report
            (:mod:`spark_dp.second_moment.clipping`).

    Returns:
        The symmetric matrix Σᵢ aᵢaᵢᵀ over the kept, clipped rows (zeros for
        an empty input); with ``count_clipped`` the pair (matrix,
        [clipped rows, rows]).

    For data in Parquet files, :func:`gram_matrix_parquet` gives the same
    result 1.4–1.7× faster (docs/benchmarks.md). Arrow batches are capped
    at ~4 MB for the call unless ``spark.sql.execution.arrow.maxBytesPerBatch``
    is set.
    """
    check_nonfinite(nonfinite)
    flag = affine is not None and affine.flag
    if flag and not count_clipped:
        raise ValueError("bug: a clamping flag is computed only to count clipped rows")
    frame, width = vector_frame(
        df, columns, dimension=dimension, privacy_unit=privacy_unit, max_rows_per_unit=max_rows_per_unit,
        affine=affine,
    )
    d = width - int(flag)
    fn = gram_partials_fn(d, float(norm_bound), nonfinite, count_clipped=count_clipped, flag_column=flag)
    # At most max(task slots, TREE_THRESHOLD_BYTES / 8d²) partials: a frame of many partitions is
    # coalesced (no shuffle), so the driver never receives one partial per input split.
    frame, cap = cap_partials(frame, _partials_format(d, count_clipped))
    with arrow_batch_bytes(frame.sparkSession):
        return sum_partials(frame.mapInArrow(fn, _PARTIAL_SCHEMA), d, count_clipped=count_clipped, count=cap)


def vector_dimension(df: DataFrame, columns: Sequence[str], dimension: int | None = None) -> int:
    """d for ``columns`` (validates the schema; runs no Spark job)."""
    return vector_columns(df, columns, dimension)[1]


# -- direct Parquet path -------------------------------------------------------

def direct_affine(affine: Affine | None) -> bool:
    """Whether the direct Parquet path can build ``affine``'s vector in its tasks: no map, or a constant column
    only (a regression's intercept without bounds: a public constant, inserted as the Spark path inserts it).
    """
    return affine is None or (affine.constant_at is not None and not affine.flag
                              and all(b is None for b in affine.bounds))


def parquet_partials_fn(
    tasks: Sequence[Sequence[Unit]], columns: Sequence[str], layout: str, d: int, norm_bound: float, nonfinite: str,
    count_clipped: bool = False, constant: tuple[int, float] | None = None,
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function over task ids: reads their Parquet row groups with pyarrow → one partial.

    ``tasks[i]`` lists the units ``(uri, part, parts)`` of task i. ``layout``
    is ``list`` (one list column of length d) or ``columns`` (d numeric
    columns). A column missing from a file reads as nulls (as Spark reads
    it), so its rows become NaN rows under the policy. ``constant``
    ``(at, value)``: the public constant column (a regression's intercept)
    inserted at index ``at`` of every row before the policy and the
    clipping, as :func:`~spark_dp.aggregates._vectors.double_array` inserts
    it on the Spark path; d then counts it.
    """
    tasks = [list(t) for t in tasks]
    columns = list(columns)
    width = d - (constant is not None)

    def partials(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        acc = GramAccumulator(d, norm_bound, nonfinite, count_clipped=count_clipped)
        for unit in units_of(tasks, batches):
            for block in unit_blocks(unit, columns, layout, width):
                acc.add(block if constant is None else np.insert(block, constant[0], constant[1], axis=1))
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
    count_clipped: bool = False,
    affine: Affine | None = None,
):
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
            max_rows_per_unit, count_clipped: as for :func:`gram_matrix`.
        spark: the session (default: the active one).
        affine: a constant column only (no bounds, no flag: see
            :func:`direct_affine`), inserted by the tasks; d counts it.

    Returns:
        The symmetric d × d matrix Σᵢ aᵢaᵢᵀ over the kept, clipped rows.
    """
    check_nonfinite(nonfinite)
    if affine is not None and not direct_affine(affine):
        raise ValueError("bug: the direct Parquet path inserts a constant column only (no bounds, no flag)")
    spark, paths, df = source_frame(paths, spark)
    # Schema checks and d, exactly as the Spark path does them (no Spark job).
    _, d = vector_columns(df, columns, dimension)
    constant = None
    if affine is not None:
        d += affine.extra
        constant = (affine.constant_at, affine.constant_value)
    if privacy_unit is not None:
        check_unit(df, privacy_unit, max_rows_per_unit)
    fields = {name: f.dataType for name, f in schema_of(df).items()}
    columns = list(columns)
    layout = "list" if len(columns) == 1 and isinstance(fields[columns[0]], T.ArrayType) else "columns"
    if len(columns) == 1 and layout == "columns" and not isinstance(fields[columns[0]], T.NumericType):
        layout = "vector"

    def spark_path():
        return gram_matrix(df, columns, norm_bound=norm_bound, nonfinite=nonfinite, dimension=dimension,
                           privacy_unit=privacy_unit, max_rows_per_unit=max_rows_per_unit,
                           count_clipped=count_clipped, affine=affine)

    if privacy_unit is not None or layout == "vector" or (constant is not None and layout != "columns"):
        return spark_path()
    files = sorted(df.inputFiles())
    if not files:
        return (np.zeros((d, d)), np.zeros(2)) if count_clipped else np.zeros((d, d))
    physical = physical_columns(files[0])
    tasks = plan_tasks(spark, files, 8 * d * d) if physical is not None else None
    if tasks is None or not set(columns) <= set(physical):
        return spark_path()
    fn = parquet_partials_fn(tasks, columns, layout, d, float(norm_bound), nonfinite, count_clipped, constant)
    return sum_partials(task_ids(spark, tasks).mapInArrow(fn, _PARTIAL_SCHEMA), d, count_clipped=count_clipped,
                        count=len(tasks))
