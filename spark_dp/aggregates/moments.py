"""Third-moment power-step sums Xᵀ((XU)²) and Σ(XU)³, one pass over a DataFrame.

For a d×L matrix U of candidate vectors (captured in the ``mapInArrow``
closure, so it ships with the task; no SparkContext broadcast, Spark Connect
safe), each partition turns its Arrow batches into (n, d) float64 blocks,
applies the non-finite policy, clips rows to ‖x‖₂ ≤ B and accumulates with
BLAS:

    P = X U            (n × L)
    S += Xᵀ (P ∘ P)    (d × L)   = Σ_x (xᵀu_τ)² x     for every column τ
    m3 += 1ᵀ (P ∘ P ∘ P)         = Σ_x (xᵀu_τ)³

One partial (d·L + L + 1 doubles) leaves each task; the driver sums them
(:mod:`spark_dp.aggregates._partials`: at most a capped number, tree-summed on
the executors when they are many).
The d×d×d tensor is never formed. No noise and no privacy here.

Passes of the online power method read disjoint chunks of rows in ``fresh``
mode: :func:`prepare_rows` adds a pass index column ``pmod(xxhash64(seed, x, c),
passes)`` where c numbers the identical copies of x (1, 2, …). The assignment
is a function of the multiset of rows and the seed: adding or removing one row
adds or removes exactly one (x, c) pair and moves no other row to another
pass (a row position or ``rand()`` would: both shift when a row is inserted).
Numbering copies also keeps the passes balanced when rows repeat (categorical
data). The vectorised frame is cached once per decomposition.

Passes that read every row (``reuse`` mode, the whitening second moment) over
plain Parquet files can skip Spark's cache altogether: :func:`parquet_rows`
plans the files' row groups into one task per core (the lead's direct-Parquet
planning, :mod:`spark_dp.aggregates._parquet_tasks`), and each task reads its
units with pyarrow and keeps their clipped, policy-applied rows in a bounded
cache that the Python workers of a host share (memory-mapped files under
Spark's local directories; per worker where there are none:
:mod:`spark_dp.aggregates._worker_cache`). Later passes then do only BLAS,
whichever worker runs them. The sums are the
same either way (up to floating-point summation order).

``fresh`` mode over such files stays off Spark's shuffle too:
:meth:`ParquetRows.assign_passes` runs one job in which the tasks send the
keyed hashes of their distinct rows, the driver numbers the copies of values
found in several units, and each pass's tasks then compute every row's
``pmod(xxhash64(seed, x, c), passes)`` as :func:`prepare_rows` does, and cache
their units' rows sorted by pass (:mod:`spark_dp.aggregates._fresh` says
exactly when the two can differ: a 64-bit keyed hash collision).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_dp._compat import to_arrow
from spark_dp.aggregates._blocks import CHUNK_BYTES, apply_nonfinite, batch_to_block, clip_rows
from spark_dp.aggregates._parquet_tasks import (
    Unit,
    open_parquet,
    physical_columns,
    plan_tasks,
    row_groups,
    source_frame,
    task_ids,
    unit_blocks,
)
from spark_dp.aggregates._partials import VectorPartials, cap_partials, collect_sum
from spark_dp.aggregates._vectors import (
    VECTOR_COL,
    Affine,
    check_nonfinite,
    schema_of,
    vector_columns,
    vector_partitions,
    vectorize,
)
from spark_dp.aggregates._worker_cache import DEFAULT_CACHE_BYTES
from spark_dp.errors import ConfigError

PASS_COL = "__spark_dp_pass"
_COPY_COL = "__spark_dp_copy"
_HASH_COL = "__spark_dp_row_hash"
_PARTIAL_SCHEMA = "partial binary"


class _ThirdMoment:
    """Accumulates Σ(xᵀu)²x (d×L) and Σ(xᵀu)³ (L,) over blocks of prepared rows.

    Works in chunks of ~2 MB of rows with reused (chunk, L) buffers: the chunk
    stays in cache between X U and Xᵀ(P∘P) (about 1.5× less CPU than whole
    blocks at d = 100, L = 32 here).
    """

    def __init__(self, U: np.ndarray) -> None:
        self.U = np.ascontiguousarray(U, dtype=np.float64)
        d, L = self.U.shape
        self.chunk = max(64, CHUNK_BYTES // (8 * d))
        self.S = np.zeros((d, L))
        self.m3 = np.zeros(L)
        self._P = np.empty((self.chunk, L))
        self._P2 = np.empty((self.chunk, L))

    def add(self, X: np.ndarray) -> None:
        for s in range(0, X.shape[0], self.chunk):
            Xc = X[s : s + self.chunk]
            m = Xc.shape[0]
            P = np.matmul(Xc, self.U, out=self._P[:m])
            P2 = np.multiply(P, P, out=self._P2[:m])
            self.S += Xc.T @ P2
            self.m3 += np.einsum("nl,nl->l", P2, P)

    def values(self) -> np.ndarray:
        return np.concatenate([self.S.ravel(), self.m3])


class _SecondMoment:
    """Accumulates Σxxᵀ (d×d) over blocks of prepared rows."""

    def __init__(self, d: int) -> None:
        self.acc = np.zeros((d, d))

    def add(self, X: np.ndarray) -> None:
        self.acc += X.T @ X

    def values(self) -> np.ndarray:
        return self.acc.ravel()


def _binary(values: np.ndarray) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([values.tobytes()], type=pa.binary())], names=["partial"])


def _partials_fn(make_acc: Callable[[], _ThirdMoment | _SecondMoment], d: int, norm_bound: float, nonfinite: str
                 ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function: batches of one list<double> column → the accumulator's sums + row count."""

    def partials(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        acc = make_acc()
        count = 0
        for batch in batches:
            if batch.num_rows == 0:
                continue
            X = clip_rows(apply_nonfinite(batch_to_block(batch, d), nonfinite), norm_bound)
            acc.add(X)
            count += X.shape[0]
        yield _binary(np.concatenate([acc.values(), [float(count)]]))

    return partials


def moment_partials_fn(
    U: np.ndarray, norm_bound: float, nonfinite: str
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function of the power pass: batches of one list<double> column → one partial."""
    U = np.ascontiguousarray(U, dtype=np.float64)
    return _partials_fn(lambda: _ThirdMoment(U), U.shape[0], norm_bound, nonfinite)


def prepare_rows(
    df: DataFrame,
    columns: Sequence[str],
    *,
    dimension: int | None = None,
    privacy_unit: str | None = None,
    max_rows_per_unit: int = 1,
    passes: int | None = None,
    seed: int = 0,
    cache: bool = True,
    partitions: int | None = None,
    affine: Affine | None = None,
) -> tuple[DataFrame, int]:
    """The vectorised rows (one ``array<double>`` column), with a pass index if ``passes``.

    Args:
        df, columns, dimension, privacy_unit, max_rows_per_unit: as
            :func:`~spark_dp.aggregates.vectorize`.
        passes: if given, adds column ``PASS_COL`` = pmod(xxhash64(seed, x, c),
            passes), c the copy number of x among identical rows: each row
            belongs to exactly one pass, chosen from the row, its copy number
            and the seed alone (one shuffle by row value).
        seed: hash seed (the caller draws it).
        cache: cache the frame (call ``unpersist()`` when done).
        partitions: the partition count of the shuffle and the cache; None
            (the default) takes the one rule's (:func:`vector_partitions`).
        affine: public per-column bounds (clamp and scale to [-1, 1]), as
            for :func:`~spark_dp.aggregates.vectorize`; the pass index then
            hashes the scaled vector.

    Returns:
        ``(frame, d)``.
    """
    frame, d = vectorize(df, columns, dimension=dimension, privacy_unit=privacy_unit, max_rows_per_unit=max_rows_per_unit,
                         affine=affine)
    # One partition count for the shuffle and the cache (the one rule, never
    # spark.sql.shuffle.partitions): every later pass runs that many tasks.
    n = int(partitions) if partitions is not None else vector_partitions(df, columns, d, privacy_unit)
    if passes is not None:
        # Copies of a row must meet: one explicit hash exchange on the vector
        # (the window then plans none of its own). Sorting each partition by
        # pass lets a pass skip the cached batches of other passes (Spark's
        # in-memory batch statistics), so fresh mode costs this one shuffle
        # more than reuse mode, not a full scan per pass.
        #
        # c numbers the copies of x: the rows of one x are consecutive when a
        # partition is ordered by x (array order compares doubles with
        # -0.0 = 0.0 and NaN = NaN, as grouping by x does), so c = row_number −
        # rank + 1. The window is partitioned by xxhash64(x) (equal for equal x,
        # which hashes the same way) rather than by x itself: Spark normalises
        # a floating-point partition key, and an exchange on the raw x would
        # not satisfy it (a second exchange, of spark.sql.shuffle.partitions).
        h = F.xxhash64(F.col(VECTOR_COL))
        copies = Window.partitionBy(_HASH_COL).orderBy(VECTOR_COL)
        frame = frame.withColumn(_HASH_COL, h)
        # One partition (the rule's count for a small input): coalesce instead of the exchange. A
        # single partition satisfies the window's distribution, so Spark plans no shuffle at all (no
        # shuffle map stage, no adaptive re-planning before the cache is built); the copy numbers,
        # hence every row's pass, are the same as with the exchange.
        frame = frame.coalesce(1) if n == 1 else frame.repartition(n, F.col(_HASH_COL))
        copy = F.row_number().over(copies) - F.rank().over(copies) + F.lit(1)
        frame = frame.withColumn(_COPY_COL, copy).select(
            VECTOR_COL,
            F.pmod(F.xxhash64(F.lit(int(seed) & (2**63 - 1)), F.col(VECTOR_COL), F.col(_COPY_COL)),
                   F.lit(int(passes))).alias(PASS_COL),
        ).sortWithinPartitions(PASS_COL)
    elif privacy_unit is None:
        # Never more cached partitions (tasks per pass) than the rule's; fewer
        # input partitions are kept as they are (no shuffle).
        frame = frame.coalesce(n)
    if cache:
        frame = frame.cache()
    return frame, d


def _frame_sums(rows: DataFrame, fn, width: int) -> np.ndarray:
    """The summed ``width``-double partials of ``fn`` over ``rows`` (partials capped, tree-summed when many)."""
    fmt = VectorPartials(width)
    rows, cap = cap_partials(rows, fmt)
    return collect_sum(rows.mapInArrow(fn, _PARTIAL_SCHEMA), fmt, cap)[0]


def third_moment_sums(
    frame: DataFrame | ParquetRows,
    U: np.ndarray,
    *,
    norm_bound: float,
    nonfinite: str = "drop",
    pass_index: int | None = None,
) -> tuple[np.ndarray, np.ndarray, float]:
    """Exact Σ(xᵀu)²x (d×L), Σ(xᵀu)³ (L,) and the row count over clipped rows.

    Args:
        frame: from :func:`prepare_rows`, or Parquet rows from
            :func:`parquet_rows` (tasks read the files, worker block cache).
        U: (d, L) candidate vectors.
        norm_bound: B; rows with ‖x‖₂ > B are scaled to norm B.
        nonfinite: ``drop`` or ``zero``.
        pass_index: if given, only the rows of that pass (frames from
            ``prepare_rows(passes=...)``, Parquet rows after
            :meth:`ParquetRows.assign_passes`).

    Returns:
        ``(S, m3, count)`` (zeros for an empty input).
    """
    check_nonfinite(nonfinite)
    U = np.asarray(U, dtype=np.float64)
    d, L = U.shape
    if isinstance(frame, ParquetRows):
        if pass_index is not None and frame.fresh is None:
            raise ValueError("these Parquet rows have no pass index (call assign_passes first)")
        total = frame.run_pass(U, d * L + L, norm_bound=float(norm_bound), nonfinite=nonfinite,
                               pass_index=pass_index)
    else:
        src = frame
        if pass_index is not None:
            src = src.where(F.col(PASS_COL) == int(pass_index))
        total = _frame_sums(src.select(VECTOR_COL), moment_partials_fn(U, float(norm_bound), nonfinite), d * L + L + 1)
    return total[: d * L].reshape(d, L), total[d * L : d * L + L].copy(), float(total[d * L + L])


def second_moment_sums(
    frame: DataFrame | ParquetRows, d: int, *, norm_bound: float, nonfinite: str = "drop"
) -> tuple[np.ndarray, float]:
    """Exact Σxxᵀ (d×d) and the row count over the clipped rows of ``frame`` (one pass).

    Reads the same rows as :func:`third_moment_sums` (the cached frame, or
    the Parquet rows, whose worker cache this pass fills for the power
    passes), so whitening and the power passes see one set of rows.
    """
    check_nonfinite(nonfinite)
    B = float(norm_bound)
    if isinstance(frame, ParquetRows):
        total = frame.run_pass(None, d * d, norm_bound=B, nonfinite=nonfinite)
    else:
        total = _frame_sums(frame.select(VECTOR_COL), _partials_fn(lambda: _SecondMoment(d), d, B, nonfinite), d * d + 1)
    M2 = total[: d * d].reshape(d, d)
    return (M2 + M2.T) / 2.0, float(total[d * d])


# -- Parquet rows read by the tasks, with the worker block cache ----------------------------

#: Trailer of a Parquet-pass partial after the sums and the count: units served
#: from the worker cache, units read from their files, bytes cached in that
#: worker afterwards, the worker's process id.
_TRAILER = 4


@dataclass
class PassStats:
    """What the last pass over :class:`ParquetRows` did (reported back by the tasks).

    Attributes:
        units_cached: units served from the host's or a worker's cache.
        units_read: units read from their Parquet files.
        rows: rows kept (after the non-finite policy).
        cache_bytes: bytes cached as each worker saw them after the pass
            (its own plus its host's shared files), by worker process id
            (the workers that ran this pass only; workers of one host count
            the shared files each).
    """

    units_cached: int = 0
    units_read: int = 0
    rows: int = 0
    cache_bytes: dict[int, int] = field(default_factory=dict)


@dataclass
class ParquetRows:
    """Rows of plain Parquet files that the tasks read themselves, planned once for many passes.

    Made by :func:`parquet_rows`; accepted by :func:`third_moment_sums` and
    :func:`second_moment_sums` in place of a cached frame. The task plan
    (units per task) stays fixed across passes, so a reused Python worker
    that ran a task before finds its units' prepared rows in its block cache.

    Attributes:
        spark: the session that runs the passes.
        tasks: units ``(uri, part, parts)`` per task.
        columns, layout, d: what to read (``layout``: ``list`` or ``columns``).
        cache_bytes: cap of each Python worker's block cache; 0 disables it
            (every pass reads the files).
        last_pass: :class:`PassStats` of the last pass.
        fresh: fresh mode's passes, set by :meth:`assign_passes`.
    """

    spark: SparkSession
    tasks: list[list[Unit]]
    columns: list[str]
    layout: str
    d: int
    cache_bytes: int = DEFAULT_CACHE_BYTES
    last_pass: PassStats | None = None
    fresh: FreshPasses | None = None

    def assign_passes(self, passes: int, seed: int, *, prefill: tuple[float, str] | None = None) -> None:
        """Gives every row its fresh-mode pass, the function ``prepare_rows(passes=, seed=)`` computes in Spark.

        One Spark job: the tasks read their units and send each distinct
        value's keyed hash (:mod:`spark_dp.aggregates._fresh`); the driver
        numbers the copies of values found in several units. Later passes
        compute each row's pass while preparing its unit, and cache the
        unit's rows sorted by pass, so a pass reads only its own rows.
        ``prefill`` ``(norm_bound, nonfinite)``: the job also caches each
        unit's prepared rows with their passes as they are when no other
        unit holds its values (continuous data: every unit), so the first
        pass reads no file.
        """
        from spark_dp.aggregates import _fresh

        state = _fresh.seed_state(seed)
        units: list = []
        if self.tasks:
            fn = parquet_groups_fn(self.tasks, self.columns, self.layout, self.d, state,
                                   None if prefill is None else (*prefill, self.cache_bytes, int(passes)))
            table = to_arrow(task_ids(self.spark, self.tasks).mapInArrow(fn, _GROUPS_SCHEMA))
            units = [None] * sum(len(t) for t in self.tasks)
            for u, g, big, counts in zip(*(table.column(c).to_pylist() for c in ("unit", "g", "big", "counts")),
                                         strict=True):
                units[u] = (np.frombuffer(g, dtype=np.uint64), np.frombuffer(big, dtype=np.int64),
                            np.frombuffer(counts, dtype=np.int64))
        shared = _fresh.shared_keys(units)
        values = None
        if shared.size:  # groups share a g (copies across units, or a collision): match them by exact row
            fn = parquet_values_fn(self.tasks, self.columns, self.layout, self.d, state, shared)
            table = to_arrow(task_ids(self.spark, self.tasks).mapInArrow(fn, _VALUES_SCHEMA))
            values = {u: (np.frombuffer(idx, dtype=np.int64), np.frombuffer(rows, dtype=np.uint64).reshape(-1, self.d))
                      for u, idx, rows in zip(*(table.column(c).to_pylist() for c in ("unit", "groups", "rows")),
                                              strict=True)}
        self.fresh = FreshPasses(int(passes), state, _fresh.copy_offsets(units, values))

    @property
    def uris(self) -> list[str]:
        return sorted({u[0] for t in self.tasks for u in t})

    def run_pass(self, U: np.ndarray | None, width: int, *, norm_bound: float, nonfinite: str,
                 pass_index: int | None = None) -> np.ndarray:
        """One pass: the summed ``width`` values (third moment if ``U`` is given, else Σxxᵀ) and the count.

        ``pass_index``: only that pass's rows (after :meth:`assign_passes`); None: every row.
        """
        total = np.zeros(width + 1)
        stats = PassStats()
        if self.tasks:
            fn = parquet_moment_fn(self.tasks, self.columns, self.layout, self.d, norm_bound, nonfinite, U,
                                   self.cache_bytes, fresh=self.fresh, pass_index=pass_index)
            parts = task_ids(self.spark, self.tasks).mapInArrow(fn, _PARTIAL_SCHEMA)
            total, trailers = collect_sum(parts, VectorPartials(width + 1, tail=_TRAILER), len(self.tasks))
            for hits, reads, nbytes, pid in trailers:  # one per task (a tree step passes them on)
                stats.units_cached += int(hits)
                stats.units_read += int(reads)
                stats.cache_bytes[int(pid)] = int(nbytes)
        stats.rows = int(total[-1])
        self.last_pass = stats
        return total

    def unpersist(self) -> None:
        """Nothing to release eagerly (the caches are bounded); see :func:`clear_worker_cache`."""


def parquet_rows(
    paths: str | Sequence[str],
    columns: Sequence[str],
    *,
    dimension: int | None = None,
    privacy_unit: str | None = None,
    spark: SparkSession | None = None,
    cache_bytes: int = DEFAULT_CACHE_BYTES,
) -> ParquetRows | None:
    """Plans passes over ``spark.read.parquet(*paths)`` with the tasks reading the files (no Spark job).

    The rows, the non-finite handling (nulls, bad lengths → NaN rows) and the
    schema errors are those of ``prepare_rows(spark.read.parquet(*paths), ...)``.

    Args:
        paths: Parquet files or directories.
        columns, dimension: as :func:`prepare_rows`.
        privacy_unit: contribution bounding needs a shuffle: given, this
            returns None.
        spark: the session (default: the active one).
        cache_bytes: cap of each Python worker's block cache (default 2 GiB);
            0 disables the cache. The total on an executor can reach the cap
            times its Python workers (one per running task).

    Returns:
        The planned rows, or None when the direct path does not apply (a
        privacy unit, ML-vector columns, partition columns that live in
        directory names, URIs pyarrow cannot open): use :func:`prepare_rows`.
    """
    if isinstance(cache_bytes, bool) or not isinstance(cache_bytes, int | np.integer) or cache_bytes < 0:
        raise ConfigError(f"The 'cache_bytes' parameter must be an int >= 0. Got {cache_bytes!r} instead.")
    spark, paths, df = source_frame(paths, spark)
    _, d = vector_columns(df, columns, dimension)  # schema checks and d, as prepare_rows does them
    if privacy_unit is not None:
        return None
    columns = list(columns)
    fields = {name: f.dataType for name, f in schema_of(df).items()}
    layout = "list" if len(columns) == 1 and isinstance(fields[columns[0]], T.ArrayType) else "columns"
    if len(columns) == 1 and layout == "columns" and not isinstance(fields[columns[0]], T.NumericType):
        return None  # ML vectors
    files = sorted(df.inputFiles())
    if not files:
        return ParquetRows(spark, [], columns, layout, d, int(cache_bytes))
    physical = physical_columns(files[0])
    tasks = plan_tasks(spark, files, 8 * d * d) if physical is not None else None
    if tasks is None or not set(columns) <= set(physical):
        return None
    return ParquetRows(spark, [list(t) for t in tasks], columns, layout, d, int(cache_bytes))


def _cached(key: tuple, cap: int) -> np.ndarray | None:
    """A unit's rows from this worker's or the host's cache; on a miss, its stale versions dropped and room made."""
    from spark_dp.aggregates import _worker_cache as wc

    rows = wc.CACHE.get(key)
    if rows is None:
        rows = wc.HOST.get(key)
    if rows is None:
        wc.drop_stale(key)
        wc.CACHE.shrink(cap)
    return rows


def _unit_rows(
    unit: Unit, columns: list[str], layout: str, d: int, norm_bound: float, nonfinite: str, cap: int,
    counters: list[int],
) -> Iterator[np.ndarray]:
    """Inside a task: the unit's clipped, policy-applied rows, from the host's or the worker's cache, or its file.

    Read from the file, the blocks stream out as they are prepared and, when
    the unit fits under ``cap``, are copied into one buffer that is cached
    (read-only) if the file's size and time did not change while it was read:
    a memory-mapped file shared by the host's workers when Spark gave the
    worker local directories, else an array in this worker
    (:mod:`spark_dp.aggregates._worker_cache`). ``counters`` gets +1 at [0]
    for a cache hit or at [1] for a file read.
    """
    from spark_dp.aggregates import _worker_cache as wc

    key = None
    if cap > 0:
        version = wc.file_version(unit[0])
        key = wc.unit_key(unit, version, columns, layout, d, norm_bound, nonfinite)
        rows = _cached(key, cap)
        if rows is not None:
            counters[0] += 1
            yield rows
            return
    counters[1] += 1
    buf = writer = None
    if key is not None:
        pf = open_parquet(unit[0])
        upper = sum(pf.metadata.row_group(g).num_rows for g in row_groups(pf, unit[1], unit[2]))
        writer = wc.HOST.create(key, upper, cap)
        if writer is None and wc.CACHE.reserve(upper * d * 8, cap):
            buf = np.empty((upper, d))
    m = 0
    try:
        for block in unit_blocks(unit, columns, layout, d):
            X = clip_rows(apply_nonfinite(block, nonfinite), norm_bound)
            if writer is not None:
                if not writer.write(X):  # more rows than the metadata said, or the disk refused: not cached
                    writer = None
            elif buf is not None:
                if m + X.shape[0] > buf.shape[0]:  # the file grew since its metadata was read
                    buf = None
                else:
                    buf[m : m + X.shape[0]] = X
            m += X.shape[0]
            yield X
    except BaseException:  # the task failed or stopped early: no half-written file is left behind
        if writer is not None:
            writer.abandon()
        raise
    unchanged = (writer is not None or buf is not None) and wc.file_version(unit[0]) == version
    if writer is not None:
        if unchanged:
            writer.commit()
        else:
            writer.abandon()
    elif unchanged:
        wc.CACHE.put(key, buf if m == buf.shape[0] else buf[:m].copy(), cap)


def parquet_moment_fn(
    tasks: Sequence[Sequence[Unit]], columns: Sequence[str], layout: str, d: int, norm_bound: float,
    nonfinite: str, U: np.ndarray | None, cache_bytes: int, *, fresh: FreshPasses | None = None,
    pass_index: int | None = None,
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function over task ids: third-moment sums (``U`` given) or Σxxᵀ → one partial.

    The partial is the sums, the row count, then units served from the
    worker cache, units read, bytes cached in this worker, its process id.
    With ``fresh`` the units' rows carry their passes and ``pass_index``
    selects one (None: every row).
    """
    tasks = [list(t) for t in tasks]
    columns = list(columns)
    U = None if U is None else np.ascontiguousarray(U, dtype=np.float64)

    def partials(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from spark_dp.aggregates import _worker_cache as wc

        acc = _ThirdMoment(U) if U is not None else _SecondMoment(d)
        count = 0
        counters = [0, 0]
        wc.HOST.forget_missing()
        for index, unit in indexed_units(tasks, batches):
            if fresh is None:
                blocks = _unit_rows(unit, columns, layout, d, norm_bound, nonfinite, cache_bytes, counters)
            else:
                blocks = [_pass_rows(_unit_pass_rows(unit, index, columns, layout, d, norm_bound, nonfinite,
                                                     cache_bytes, counters, fresh), pass_index)]
            for X in blocks:
                acc.add(X)
                count += X.shape[0]
        trailer = [float(count), counters[0], counters[1], wc.CACHE.nbytes + wc.HOST.nbytes(), wc.worker_id()]
        yield _binary(np.concatenate([acc.values(), trailer]))

    return partials


class FreshPasses(NamedTuple):
    """Fresh mode's passes over Parquet rows: the count, the seed's hash state, the copy offsets by unit index."""

    passes: int
    state: int
    offsets: dict[int, tuple[np.ndarray, np.ndarray]]


_GROUPS_SCHEMA = "unit long, g binary, big binary, counts binary"
_VALUES_SCHEMA = "unit long, groups binary, rows binary"


def indexed_units(tasks: Sequence[Sequence[Unit]], batches: Iterator[pa.RecordBatch]) -> Iterator[tuple[int, Unit]]:
    """Inside a task: ``(index, unit)`` of the task ids arriving in ``batches``, index counted over all tasks."""
    first = np.concatenate([[0], np.cumsum([len(t) for t in tasks])])
    for batch in batches:
        for task_id in batch.column(0).to_numpy(zero_copy_only=False):
            for i, unit in enumerate(tasks[int(task_id)]):
                yield int(first[int(task_id)]) + i, unit


def _raw_unit(unit: Unit, columns: list[str], layout: str, d: int) -> np.ndarray:
    """A unit's rows as read (NaN rows for nulls and bad rows), before the policy and clipping."""
    blocks = list(unit_blocks(unit, columns, layout, d))
    return np.concatenate(blocks) if blocks else np.empty((0, d))


def parquet_groups_fn(tasks: Sequence[Sequence[Unit]], columns: Sequence[str], layout: str, d: int, state: int,
                      prefill: tuple[float, str, int, int] | None = None,
                      ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function of :meth:`ParquetRows.assign_passes`: one row per unit, its groups' keys.

    ``prefill`` ``(norm_bound, nonfinite, cache_bytes, passes)``: also
    caches each unit's rows with the passes they have without copy offsets.
    """
    from spark_dp.aggregates import _worker_cache as wc
    from spark_dp.aggregates._fresh import unit_groups, unit_hashes, unit_passes

    tasks = [list(t) for t in tasks]
    columns = list(columns)

    def groups(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        wc.HOST.forget_missing()
        for index, unit in indexed_units(tasks, batches):
            version = wc.file_version(unit[0]) if prefill is not None and prefill[2] > 0 else None
            X = _raw_unit(unit, columns, layout, d)
            hashes = unit_hashes(X, state)
            g, big, counts = unit_groups(hashes)
            if version is not None:
                norm_bound, nonfinite, cap, passes = prefill
                fresh = FreshPasses(passes, state, {})
                key = _fresh_key(unit, version, columns, layout, d, norm_bound, nonfinite, fresh, None)
                if _cached(key, cap) is None:
                    _cache_rows(key, _sorted_by_pass(X, unit_passes(hashes, passes, None), norm_bound, nonfinite),
                                cap, unit[0], version)
            yield pa.RecordBatch.from_arrays(
                [pa.array([index], pa.int64())] + [pa.array([a.tobytes()], pa.binary()) for a in (g, big, counts)],
                names=["unit", "g", "big", "counts"])

    return groups


def parquet_values_fn(tasks: Sequence[Sequence[Unit]], columns: Sequence[str], layout: str, d: int, state: int,
                      shared: np.ndarray) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function of :meth:`ParquetRows.assign_passes`' second job: per unit, the exact rows of
    its groups whose g is in ``shared`` (:func:`spark_dp.aggregates._fresh.group_values`).
    """
    from spark_dp.aggregates._fresh import group_values, normalised_bits, unit_hashes

    tasks = [list(t) for t in tasks]
    columns = list(columns)
    shared = np.asarray(shared, dtype=np.uint64)

    def values(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for index, unit in indexed_units(tasks, batches):
            X = _raw_unit(unit, columns, layout, d)
            idx, rows = group_values(unit_hashes(X, state), normalised_bits(X), shared)
            if idx.size:
                yield pa.RecordBatch.from_arrays(
                    [pa.array([index], pa.int64()), pa.array([idx.tobytes()], pa.binary()),
                     pa.array([rows.tobytes()], pa.binary())], names=["unit", "groups", "rows"])

    return values


def _pass_rows(rows: np.ndarray, pass_index: int | None) -> np.ndarray:
    """The rows of one pass (all without ``pass_index``) from a unit's rows sorted by pass (pass in column 0)."""
    if pass_index is None:
        return rows[:, 1:]
    lo, hi = np.searchsorted(rows[:, 0], [pass_index - 0.5, pass_index + 0.5])
    return rows[lo:hi, 1:]


def _unit_pass_rows(unit: Unit, index: int, columns: list[str], layout: str, d: int, norm_bound: float,
                    nonfinite: str, cap: int, counters: list[int], fresh: FreshPasses) -> np.ndarray:
    """Inside a task: the unit's clipped, policy-applied rows with their passes, sorted by pass (pass first).

    From the host's or the worker's cache (key: the unit's, plus the passes,
    the seed's state and the unit's copy offsets), or computed from the file
    (:func:`spark_dp.aggregates._fresh.unit_passes`) and cached as
    :func:`_unit_rows` caches (read-only, if the file did not change).
    """
    from spark_dp.aggregates import _worker_cache as wc
    from spark_dp.aggregates._fresh import unit_hashes, unit_passes

    offsets = fresh.offsets.get(index)
    key = None
    if cap > 0:
        version = wc.file_version(unit[0])
        key = _fresh_key(unit, version, columns, layout, d, norm_bound, nonfinite, fresh, offsets)
        rows = _cached(key, cap)
        if rows is not None:
            counters[0] += 1
            return rows
    counters[1] += 1
    X = _raw_unit(unit, columns, layout, d)
    rows = _sorted_by_pass(X, unit_passes(unit_hashes(X, fresh.state), fresh.passes, offsets), norm_bound, nonfinite)
    if key is not None:
        _cache_rows(key, rows, cap, unit[0], version)
    return rows


def _fresh_key(unit: Unit, version, columns, layout: str, d: int, norm_bound: float, nonfinite: str,
               fresh: FreshPasses, offsets: tuple[np.ndarray, np.ndarray] | None) -> tuple:
    """The cache key of a unit's rows with their passes: the unit's key (rows of d + 1), the passes, the seed's
    state and a digest of the unit's copy offsets.
    """
    import hashlib

    from spark_dp.aggregates import _worker_cache as wc

    digest = None if offsets is None else hashlib.sha256(offsets[0].tobytes() + offsets[1].tobytes()).hexdigest()
    return wc.unit_key(unit, version, columns, layout, d + 1, norm_bound, nonfinite) + (
        "fresh", fresh.passes, fresh.state, digest)


def _sorted_by_pass(X: np.ndarray, passes: np.ndarray, norm_bound: float, nonfinite: str) -> np.ndarray:
    """Raw rows → the policy-applied, clipped rows with their pass in column 0, sorted by pass."""
    if nonfinite == "drop":
        keep = np.isfinite(X).all(axis=1)
        X, passes = X[keep], passes[keep]
    X = clip_rows(apply_nonfinite(X, nonfinite), norm_bound)
    # small ints sort by radix (~10x faster than int64's timsort on a million rows)
    order = np.argsort(passes.astype(np.int16) if passes.size and passes.max() < 2**15 else passes, kind="stable")
    rows = np.empty((X.shape[0], X.shape[1] + 1))
    rows[:, 0] = passes[order]
    rows[:, 1:] = X[order]
    return rows


def _cache_rows(key: tuple, rows: np.ndarray, cap: int, uri: str, version) -> None:
    """Caches a unit's whole rows (host files first, else this worker; an empty unit there) if its file did not
    change meanwhile.
    """
    from spark_dp.aggregates import _worker_cache as wc

    if wc.file_version(uri) != version:
        return
    writer = wc.HOST.create(key, rows.shape[0], cap)
    if writer is not None:
        if writer.write(rows):
            writer.commit()
    else:
        wc.CACHE.put(key, rows, cap)


def clear_worker_cache(spark: SparkSession, uris: Sequence[str] | None = None, *, tasks: int | None = None) -> int:
    """Drops cached rows of ``uris`` (all if None) from the Python workers a small job reaches.

    Best effort: Spark gives no way to address every worker, so this runs
    ``tasks`` (default: twice the task slots) tasks and each drops what its
    worker holds, and the shared row files of its host (one task per host
    suffices for those). Entries it misses are evicted by the cap, or freed
    when Spark stops an idle worker (the shared files when the application
    stops). Results never depend on the cache.

    Returns:
        The number of entries dropped.
    """
    from spark_dp.aggregates._parquet_tasks import _task_slots

    n = tasks or 2 * _task_slots(spark)
    wanted = None if uris is None else sorted(set(uris))

    def drop(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from spark_dp.aggregates import _worker_cache as wc

        for _ in batches:
            pass
        keep = None if wanted is None else set(wanted)
        gone = wc.CACHE.drop_where(lambda k: keep is None or k[0] in keep) + wc.HOST.drop_uris(wanted)
        yield pa.RecordBatch.from_arrays([pa.array([gone], type=pa.int64())], names=["n"])

    out = to_arrow(spark.range(0, n, 1, numPartitions=n).mapInArrow(drop, "n long"))
    return int(sum(out.column("n").to_pylist()))
