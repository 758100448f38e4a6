"""Summing the per-task partials of an exact aggregate: on the driver, or pre-summed on the executors first.

Every exact aggregate is one ``mapInArrow`` pass whose tasks each yield one
partial (a Gram partial is 8·d² bytes, a third-moment partial 8·(d·L + L + 1),
a JL partial 8·r·d, a sketch partial up to 8·k·b). What the driver receives
is (number of partials) × (partial size), and each partial is a Python
task (docs/benchmarks.md: 200 Gram partials of 2 MB from trivial tasks cost
15–18 s on a two-executor cluster, 2 cost 0.2–0.6 s; mostly per task, not
per byte). Two measures keep it bounded, both Spark Connect safe (DataFrame operations only: no RDD API, no
SparkContext):

* :func:`cap_partials` — on the DataFrame path the number of partials is the
  input's partition count, which nothing bounds (Spark's file splits, a
  user's ``repartition(2000)``). The frame is ``coalesce``-d, before the
  partial pass, to at most :func:`partial_cap` partitions: max(task slots,
  ``threshold`` / partial bytes), rounded down to whole waves. No shuffle:
  each task reads several input partitions in turn, and every core still
  has a task while there are at least as many input partitions as slots.
* :func:`collect_sum` — when the partials may still exceed ``threshold``
  bytes in all (more task slots than the budget allows partials of this
  size, or a planned task count such as the direct-Parquet path's), a tree
  step sums them on the executors before the driver sees them: each partial
  row is tagged with its task's partition id, the rows go through an
  explicit hash exchange of g partitions (``repartition(g, id)``, with g
  from spark-dp's partitioning rule for that many bytes and at most
  ≈ √(partials), :func:`tree_partitions`), are sorted by the id within each
  partition and summed there by a ``mapInArrow`` into one partial of the
  same format; levels repeat (all in the same job) until what is left fits
  the threshold. The driver then sums at most that.

Privacy: the tree only changes where and in which order the exact partials
are added. The aggregate handed to the mechanism is the same sum (equal up
to floating-point rounding of the summation order; integer counts
exactly), and the noise is added afterwards, on the driver, by the privacy
layer — so sensitivity, calibration and accounting are unchanged. The order
is deterministic for a given plan (partials sorted by their task's
partition id in each reducer; the reducers' results collected in partition
order), so a re-run sums in the same order.

Adaptive query execution keeps an explicit ``repartition(g, col)`` at g
partitions and never changes a ``coalesce``, so the counts are the same
with AQE on or off.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_dp._compat import to_arrow
from spark_dp.aggregates._partitioning import partitions_for_bytes, task_slots

#: Bytes of partials the driver collects in one piece; above, the DataFrame path coalesces and the
#: tree step sums on the executors. Why this value (docs/benchmarks.md, "What grows with the number
#: of executors"): the driver holds the partials and their sum under its default 1 GiB heap and
#: ``spark.driver.maxResultSize`` (1 GiB); the two-executor benchmark spent ≈ 25 ms of driver CPU a
#: MiB of partials, so 64 MiB is ≈ 1.6 s at worst, about what the tree's extra stage costs here.
#: Read at call time (tests set it to 0 to force the tree step).
TREE_THRESHOLD_BYTES = 64 << 20

_SEQ = "__spark_dp_partial_seq"

_BATCH_BYTES_CONF = "spark.sql.execution.arrow.maxBytesPerBatch"
#: Arrow batches of ~4 MB into the Python workers. Spark's default batches are
#: 10,000 rows whatever their width (40 MB at d = 500), which cost ~40 % more
#: CPU in total here than 4 MB batches (the JVM's share +70 %).
ARROW_BATCH_BYTES = 4 << 20


@contextmanager
def arrow_batch_bytes(spark: SparkSession) -> Iterator[None]:
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


# -- partial formats: how one partial row is read, summed and written back ------------------------

class VectorPartials:
    """Partials as one binary column ``partial``: ``width`` summed numbers, then per-task trailers.

    A task's partial is ``width`` values of ``dtype`` followed by ``tail``
    values that are reported per task, not summed (e.g. the worker-cache
    statistics of a Parquet pass). A summed partial has the same layout: the
    summed ``width`` values followed by the trailers of every task it holds,
    in order, so the driver reads a tree's partials like the tasks' own.
    """

    schema = "partial binary"
    columns = ("partial",)

    def __init__(self, width: int, dtype=np.float64, tail: int = 0) -> None:
        self.width, self.dtype, self.tail = int(width), np.dtype(dtype), int(tail)

    @property
    def nbytes(self) -> int:
        """Bytes of one task's partial."""
        return (self.width + self.tail) * self.dtype.itemsize

    def zero(self) -> list:
        return [np.zeros(self.width, dtype=self.dtype), []]

    def add(self, acc: list, batch: pa.RecordBatch | pa.Table) -> list:
        for value in batch.column("partial").to_pylist():
            part = np.frombuffer(value, dtype=self.dtype)
            acc[0] += part[: self.width]
            if self.tail:
                acc[1].append(part[self.width :])
        return acc

    def batch(self, acc: list) -> pa.RecordBatch:
        data = acc[0].tobytes() + b"".join(t.tobytes() for t in acc[1])
        return pa.RecordBatch.from_arrays([pa.array([data], type=pa.binary())], names=["partial"])

    def result(self, acc: list) -> tuple[np.ndarray, np.ndarray]:
        """(summed values, trailers as an (n, tail) array)."""
        tails = np.concatenate(acc[1]) if acc[1] else np.zeros(0, dtype=self.dtype)
        return acc[0], tails.reshape(-1, self.tail) if self.tail else tails.reshape(0, 0)


class DenseCounterPartials:
    """The sketch kernels' dense partials: (dense, idx, v), a full counter table or its non-zero pairs."""

    schema = "dense boolean, idx binary, v binary"
    columns = ("dense", "idx", "v")

    def __init__(self, size: int) -> None:
        self.size = int(size)

    @property
    def nbytes(self) -> int:
        return 8 * self.size  # at most: shipped as non-zero pairs when that is smaller

    def zero(self) -> np.ndarray:
        return np.zeros(self.size, dtype=np.float64)

    def add(self, acc: np.ndarray, batch: pa.RecordBatch | pa.Table) -> np.ndarray:
        for is_dense, idx, v in zip(*(batch.column(c).to_pylist() for c in ("dense", "idx", "v"))):
            vals = np.frombuffer(v, dtype=np.float64)
            if is_dense:
                acc += vals
            else:  # indices are distinct within one partial
                acc[np.frombuffer(idx, dtype=np.int64)] += vals
        return acc

    def batch(self, acc: np.ndarray) -> pa.RecordBatch:
        nz = np.flatnonzero(acc)
        dense = nz.size * 16 >= acc.size * 8
        idx, v = (b"", acc.tobytes()) if dense else (nz.astype(np.int64).tobytes(), acc[nz].tobytes())
        return pa.RecordBatch.from_arrays(
            [pa.array([dense]), pa.array([idx], pa.binary()), pa.array([v], pa.binary())],
            names=["dense", "idx", "v"])

    def result(self, acc: np.ndarray) -> np.ndarray:
        return acc


class _TreeSum:
    """The ``mapInArrow`` function of one tree level: the partition's partials (sorted) → one partial."""

    def __init__(self, fmt) -> None:
        self.fmt = fmt

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        acc, seen = self.fmt.zero(), False
        for batch in batches:
            if batch.num_rows:
                acc, seen = self.fmt.add(acc, batch), True
        if seen:
            yield self.fmt.batch(acc)


# -- sizes ------------------------------------------------------------------------------------------

def _threshold(threshold: int | None) -> int:
    return TREE_THRESHOLD_BYTES if threshold is None else max(0, int(threshold))


def partial_cap(slots: int, partial_bytes: int, threshold: int | None = None) -> int:
    """Most partials the DataFrame path lets a pass make: max(slots, threshold / bytes), whole waves."""
    slots = max(1, int(slots))
    fit = _threshold(threshold) // max(1, int(partial_bytes))
    return max(slots, fit // slots * slots)


def tree_partitions(partials: int, partial_bytes: int, slots: int) -> int:
    """Reducers of one tree level over ``partials`` partials: the partitioning rule, at most ≈ √partials.

    The rule (:func:`~spark_dp.aggregates._partitioning.partitions_for_bytes`)
    for the bytes shuffled keeps each reducer's input near its partition
    size; the √ bound gives each reducer a fan-in of at least about √n, so
    two levels reduce n² partials to one.
    """
    n = max(1, int(partials))
    fan_in = math.isqrt(n - 1) + 1  # ⌈√n⌉
    return max(1, min(partitions_for_bytes(n * int(partial_bytes), slots), -(-n // fan_in), n - 1))


def tree_levels(partials: int, partial_bytes: int, slots: int, threshold: int | None = None) -> list[int]:
    """The reducer counts of the tree's levels (empty: the driver collects the partials as they are)."""
    limit = _threshold(threshold)
    levels, n = [], int(partials)
    while n > 1 and n * partial_bytes > limit:
        n = tree_partitions(n, partial_bytes, slots)
        levels.append(n)
    return levels


# -- the two measures -------------------------------------------------------------------------------

def cap_partials(frame: DataFrame, fmt, threshold: int | None = None) -> tuple[DataFrame, int]:
    """``frame`` coalesced to at most :func:`partial_cap` partitions for ``fmt``'s partials, and that cap.

    ``coalesce(n)`` never adds partitions or a shuffle; a frame with fewer
    partitions is unchanged (see the module doc).
    """
    cap = partial_cap(task_slots(frame.sparkSession), fmt.nbytes, threshold)
    return frame.coalesce(cap), cap


def tree_reduce(partials: DataFrame, fmt, count: int, threshold: int | None = None) -> DataFrame:
    """The partials frame with the tree's levels added (the same frame when none is needed)."""
    if count <= 1 or count * fmt.nbytes <= _threshold(threshold):
        return partials  # (without reading the task slots: no conf round trip)
    cols = list(fmt.columns)  # (not ``partials.columns``: no schema round trip)
    for g in tree_levels(count, fmt.nbytes, task_slots(partials.sparkSession), threshold):
        tagged = partials.withColumn(_SEQ, F.spark_partition_id())
        partials = (tagged.repartition(g, F.col(_SEQ)).sortWithinPartitions(_SEQ).select(*cols)
                    .mapInArrow(_TreeSum(fmt), fmt.schema))
    return partials


def collect_sum(partials: DataFrame, fmt, count: int | None, threshold: int | None = None):
    """The sum of ``partials`` (rows in ``fmt``'s format) as ``fmt.result``; one Spark job.

    Args:
        partials: the pass's frame, one row (or none) per task.
        fmt: :class:`VectorPartials` or :class:`DenseCounterPartials`.
        count: at most this many partials (the planned task count, or the
            cap of :func:`cap_partials`); None: unknown, summed on the driver.
        threshold: bytes of partials the driver takes as they are
            (default :data:`TREE_THRESHOLD_BYTES`; tests pass a small one).
    """
    reduced = partials if count is None else tree_reduce(partials, fmt, count, threshold)
    if reduced is partials:
        table = to_arrow(partials)
    else:  # one partial per Arrow batch into the reducers (a batch of many large partials would not fit)
        with arrow_batch_bytes(partials.sparkSession):
            table = to_arrow(reduced)
    return fmt.result(fmt.add(fmt.zero(), table))
