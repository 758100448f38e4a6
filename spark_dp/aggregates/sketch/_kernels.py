"""The Arrow build kernel: ``mapInArrow`` functions turning prepared rows into k×b counters.

Steps 3'–5' of :mod:`spark_dp.aggregates.sketch`: per partition, chunks of
rows are pre-summed per distinct item, hashed with the vectorised XXH64
(:mod:`spark_dp.aggregates.xxh64`) and ``np.bincount``-ed into one dense
partial (or sparse rows when k·b > :data:`DENSE_MAX_COUNTERS`), which
:func:`_collect` sums into the table. The kernels are plain-data classes, so
the closures ship to executors and Spark Connect; the direct-Parquet reader
(:mod:`._parquet`) drives the same kernels from its own tasks.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_dp._compat import to_arrow
from spark_dp.aggregates._partials import DenseCounterPartials, cap_partials, collect_sum
from spark_dp.aggregates._partitioning import partitions_for
from spark_dp.aggregates.sketch._prepare import ITEM, WEIGHT
from spark_dp.aggregates.xxh64 import sign_seed, spark_seed_states, xxh64_long_columns, xxh64_string_columns

DENSE_MAX_COUNTERS = 1 << 24  # k·b above this: per-chunk sparse rows + one groupBy instead of dense partials
CHUNK_ROWS = 1 << 20  # rows pre-summed together (Arrow batches are gathered up to this)
_BLOCK_ITEMS = 1 << 16  # distinct items hashed and bincounted per step
_DENSE_SCHEMA = "dense boolean, idx binary, v binary"
_SPARSE_SCHEMA = "idx bigint, v double"


def _pmod(h: np.ndarray, buckets: int) -> np.ndarray:
    """pmod(h as signed long, b) — for b = 2^j a mask of the two's-complement bits."""
    if buckets & (buckets - 1) == 0:
        return (h & np.uint64(buckets - 1)).view(np.int64)
    return np.mod(h.view(np.int64), np.int64(buckets))



def _chunks(batches: Iterator[pa.RecordBatch], chunk_rows: int) -> Iterator[list[pa.RecordBatch]]:
    """A partition's non-empty batches in lists of at least ``chunk_rows`` rows (the last list may be shorter)."""
    pending: list[pa.RecordBatch] = []
    rows = 0
    for batch in batches:
        if not batch.num_rows:
            continue
        pending.append(batch)
        rows += batch.num_rows
        if rows >= chunk_rows:
            yield pending
            pending, rows = [], 0
    if pending:
        yield pending

class _SketchKernel:
    """Per-partition state of the Arrow build: chunks of rows → k×b counters.

    Picklable (plain data only), so the ``mapInArrow`` closure ships it to
    executors and Spark Connect.
    """

    def __init__(self, kind: str, seeds: Sequence[int], buckets: int, *, signed: bool, weighted: bool,
                 preaggregate: bool, dense: bool, chunk_rows: int = CHUNK_ROWS, block_items: int = _BLOCK_ITEMS):
        self.chunk_rows, self.block_items = int(chunk_rows), int(block_items)
        self.kind, self.k, self.b = kind, len(seeds), int(buckets)
        self.signed, self.weighted, self.preaggregate, self.dense = signed, weighted, preaggregate, dense
        bucket_states = spark_seed_states(seeds)
        sign_states = spark_seed_states([sign_seed(int(s)) for s in seeds])
        self.states = np.concatenate([bucket_states, sign_states]) if signed else bucket_states

    def counters(self, items: pa.Array, w: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """(index rep·b + bucket, value) of every (item, repetition), flattened."""
        k, b = self.k, self.b
        if self.kind == "string":
            order, h = xxh64_string_columns(items, self.states)
            if w is not None:
                w = w[order]
        else:
            vals = items.cast(pa.int64())
            h = xxh64_long_columns(vals.fill_null(0).to_numpy(), self.states)
            if vals.null_count:
                h[:, np.asarray(vals.is_null().to_numpy(zero_copy_only=False))] = self.states[:, None]
        idx = _pmod(h[:k], b)
        idx += (np.arange(k, dtype=np.int64) * b)[:, None]
        m = h.shape[1]
        wv = np.ones(m) if w is None else w
        if self.signed:
            neg = (h[k:] & np.uint64(1)).astype(bool)
            v = np.where(neg, -wv, wv)
        else:
            v = np.broadcast_to(wv, (k, m))
        return idx.ravel(), v.ravel()

    def chunk(self, batches: list[pa.RecordBatch]) -> tuple[np.ndarray, np.ndarray] | np.ndarray:
        """Step 3'–5' for one chunk: dense k·b sums, or sparse (unique index, sum)."""
        items = pa.concat_arrays([bt.column(0) for bt in batches]) if len(batches) > 1 else batches[0].column(0)
        w = None
        if self.weighted:
            w = pa.concat_arrays([bt.column(1) for bt in batches]) if len(batches) > 1 else batches[0].column(1)
            w = w.to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
        if self.preaggregate:
            enc = pc.dictionary_encode(items, null_encoding="encode")
            ix = enc.indices.to_numpy(zero_copy_only=False)
            items = enc.dictionary
            w = np.bincount(ix, weights=w, minlength=len(items)).astype(np.float64, copy=False)
        return self.distinct(items, w)

    def distinct(self, items: pa.Array, w: np.ndarray | None) -> tuple[np.ndarray, np.ndarray] | np.ndarray:
        """Steps 4'–5' for items with their weights (None: 1 each): dense k·b sums, or sparse (unique index, sum)."""
        kb = self.k * self.b
        acc = np.zeros(kb) if self.dense else None
        parts = []
        step = self.block_items
        for lo in range(0, len(items), step):
            idx, v = self.counters(items.slice(lo, step), None if w is None else w[lo : lo + step])
            if self.dense:
                acc += np.bincount(idx, weights=v, minlength=kb)
            else:
                parts.append((idx, v))
        if self.dense:
            return acc
        if not parts:
            return np.zeros(0, np.int64), np.zeros(0)
        idx = np.concatenate([p[0] for p in parts])
        v = np.concatenate([p[1] for p in parts])
        uniq, inv = np.unique(idx, return_inverse=True)
        return uniq, np.bincount(inv, weights=v, minlength=uniq.size)

    @staticmethod
    def sparse_batch(out: tuple[np.ndarray, np.ndarray]) -> pa.RecordBatch:
        return pa.RecordBatch.from_arrays([pa.array(out[0], pa.int64()), pa.array(out[1], pa.float64())],
                                          names=["idx", "v"])

    @staticmethod
    def dense_batch(acc: np.ndarray) -> pa.RecordBatch:
        """One partition's dense partial, shipped as its non-zero (index, value) pairs when that is smaller."""
        return DenseCounterPartials(acc.size).batch(acc)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        acc = None
        for pending in _chunks(batches, self.chunk_rows):
            out = self.chunk(pending)
            if self.dense:
                acc = out if acc is None else acc + out
            else:
                yield self.sparse_batch(out)
        if self.dense and acc is not None:
            yield self.dense_batch(acc)


class _DyadicKernel(_SketchKernel):
    """The Arrow build of the (L, k, b) dyadic stack (same table as the SQL explode of :func:`dyadic_tables`).

    Per distinct item: its id (the integer itself, or the public hash
    xxhash64(seed, item) & (2^L − 1)); null items and integers outside
    [0, 2^L) are not counted; then per level ℓ the prefix id >> (L − ℓ) is
    hashed with the level's k bucket and sign seeds. Counter index
    ((ℓ − 1)·k + rep)·b + bucket, so the flat table reshapes to (L, k, b).
    """

    def __init__(self, kind: str, seeds: Sequence[Sequence[int]], buckets: int, levels: int, hash_seed: int | None,
                 *, weighted: bool, preaggregate: bool, dense: bool, chunk_rows: int = CHUNK_ROWS,
                 block_items: int | None = None):
        self.levels, self.reps = int(levels), len(seeds[0])
        self.kind, self.k, self.b = kind, self.levels * self.reps, int(buckets)
        self.chunk_rows = int(chunk_rows)
        # L·k counters per item: keep a block's (L·k × items) temporaries about the plain kernel's size
        self.block_items = int(block_items or max(1024, _BLOCK_ITEMS * 8 // (self.levels * 8)))
        self.signed, self.weighted, self.preaggregate, self.dense = True, weighted, preaggregate, dense
        self.level_states = [
            np.concatenate([spark_seed_states(s), spark_seed_states([sign_seed(int(x)) for x in s])]) for s in seeds]
        self.hash_state = None if hash_seed is None else spark_seed_states([hash_seed])

    def ids(self, items: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        """(id of every item as int64, mask of the items that count)."""
        valid = np.asarray(items.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        if self.hash_state is not None:
            if self.kind == "string":
                order, h = xxh64_string_columns(items, self.hash_state)
                raw = np.empty(len(items), dtype=np.uint64)
                raw[order] = h[0]
            else:
                raw = xxh64_long_columns(items.cast(pa.int64()).fill_null(0).to_numpy(), self.hash_state)[0]
            return (raw & np.uint64((1 << self.levels) - 1)).view(np.int64), valid
        vals = items.cast(pa.int64()).fill_null(-1).to_numpy()
        return vals, valid & (vals >= 0) & (vals < (1 << self.levels))

    def counters(self, items: pa.Array, w: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        ids, keep = self.ids(items)
        ids = ids[keep]
        wv = np.ones(ids.size) if w is None else np.asarray(w)[keep]
        k, b, L = self.reps, self.b, self.levels
        idx_parts, v_parts = [], []
        for lvl in range(1, L + 1):
            h = xxh64_long_columns(ids >> (L - lvl), self.level_states[lvl - 1])
            idx = _pmod(h[:k], b)
            idx += (((lvl - 1) * k + np.arange(k, dtype=np.int64)) * b)[:, None]
            idx_parts.append(idx.ravel())
            v_parts.append(np.where((h[k:] & np.uint64(1)).astype(bool), -wv, wv).ravel())
        return np.concatenate(idx_parts), np.concatenate(v_parts)


class _HistogramKernel(_SketchKernel):
    """The histogram over a public domain as a (1, d) "sketch": counter index = the item's domain index.

    Items outside the domain (and null items: no domain holds null) are not counted.
    """

    def __init__(self, kind: str, domain: Sequence | int, *, weighted: bool, preaggregate: bool, dense: bool,
                 chunk_rows: int = CHUNK_ROWS, block_items: int = _BLOCK_ITEMS):
        self.kind, self.k = kind, 1
        self.chunk_rows, self.block_items = int(chunk_rows), int(block_items)
        self.signed, self.weighted, self.preaggregate, self.dense = False, weighted, preaggregate, dense
        if isinstance(domain, int | np.integer) and not isinstance(domain, bool):
            self.b, self.domain = int(domain), None
        else:
            self.domain = pa.array(list(domain), pa.int64() if kind == "long" else pa.string())
            self.b = len(self.domain)

    def counters(self, items: pa.Array, w: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        if self.domain is None:
            vals = items.cast(pa.int64()).fill_null(-1).to_numpy()
            keep = (vals >= 0) & (vals < self.b)
        else:
            ix = pc.index_in(items.cast(self.domain.type), value_set=self.domain)
            keep = np.asarray(ix.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
            vals = ix.fill_null(0).to_numpy().astype(np.int64)
        wv = np.ones(int(keep.sum())) if w is None else np.asarray(w)[keep]
        return vals[keep], wv


class _IndexSumKernel:
    """Per partition: the sums of ``v`` per index of (idx, v) rows with 0 ≤ idx < size.

    The final step of the SQL builds (counters, bins): a dense partial per
    partition (``np.bincount``), or sparse (distinct index, sum) rows for
    sizes above :data:`DENSE_MAX_COUNTERS`, in the kernels' partial format
    (:func:`_collect`). Summing per partition here replaces a ``groupBy``
    whose exchange would take the session's ``spark.sql.shuffle.partitions``.
    """

    def __init__(self, size: int, dense: bool) -> None:
        self.size, self.dense = int(size), bool(dense)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        acc = None
        parts = []
        for batch in batches:
            if not batch.num_rows:
                continue
            idx = batch.column(0).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
            v = batch.column(1).to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
            if self.dense:
                part = np.bincount(idx, weights=v, minlength=self.size)
                acc = part if acc is None else acc + part
            else:
                parts.append((idx, v))
        if self.dense:
            if acc is not None:
                yield _SketchKernel.dense_batch(acc)
        elif parts:
            idx = np.concatenate([p[0] for p in parts])
            v = np.concatenate([p[1] for p in parts])
            uniq, inv = np.unique(idx, return_inverse=True)
            yield _SketchKernel.sparse_batch((uniq, np.bincount(inv, weights=v, minlength=uniq.size)))


def sum_by_index(frame: DataFrame, size: int) -> np.ndarray:
    """Σ v per index of ``frame``'s (idx bigint, v double) rows, 0 ≤ idx < size, as a float64 array of ``size``."""
    dense = size <= DENSE_MAX_COUNTERS
    count = None
    if dense:
        frame, count = cap_partials(frame, DenseCounterPartials(size))
    partials = frame.mapInArrow(_IndexSumKernel(size, dense), _partials_schema(dense))
    return _collect(partials, 1, size, dense, count).reshape(-1)


class _ItemPresum:
    """Per partition: (ITEM, WEIGHT) rows with the weights of each distinct item summed (Arrow's hash group-by).

    The pre-aggregation of the SQL builds without a privacy unit: the sums
    are linear, so summing per item within each chunk of a partition before
    the k-fold expansion gives the same table as a global ``groupBy`` (up to
    float summation order), with no shuffle. Null items form one item.
    """

    def __init__(self, chunk_rows: int = CHUNK_ROWS) -> None:
        self.chunk_rows = int(chunk_rows)

    def _flush(self, pending: list[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        table = pa.Table.from_batches(pending).group_by(ITEM).aggregate([(WEIGHT, "sum")])
        table = table.select([ITEM, f"{WEIGHT}_sum"]).rename_columns([ITEM, WEIGHT])
        yield from table.to_batches()

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for pending in _chunks(batches, self.chunk_rows):
            yield from self._flush(pending)


def presum_items(rows: DataFrame, kind: str) -> DataFrame:
    """(ITEM, WEIGHT) rows pre-summed per distinct item within each partition (see :class:`_ItemPresum`)."""
    schema = f"{ITEM} {'bigint' if kind == 'long' else 'string'}, {WEIGHT} double"
    return rows.select(ITEM, WEIGHT).mapInArrow(_ItemPresum(), schema)


def _partials_schema(dense: bool) -> str:
    """The schema of a kernel's partials: one dense (or sparse-packed) row per partition, or sparse rows."""
    return _DENSE_SCHEMA if dense else _SPARSE_SCHEMA


def _run_kernel(rows: DataFrame, kernel: _SketchKernel) -> np.ndarray:
    """The kernel's (kernel.k, kernel.b) table of prepared (ITEM[, WEIGHT]) rows via ``mapInArrow``."""
    cols = [ITEM, WEIGHT] if kernel.weighted else [ITEM]
    rows, count = rows.select(*cols), None
    if kernel.dense:
        rows, count = cap_partials(rows, DenseCounterPartials(kernel.k * kernel.b))
    partials = rows.mapInArrow(kernel, _partials_schema(kernel.dense))
    return _collect(partials, kernel.k, kernel.b, kernel.dense, count)


def _arrow_table(rows: DataFrame, kind: str, seeds: Sequence[int], buckets: int, *, signed: bool,
                 weighted: bool, preaggregate: bool) -> np.ndarray:
    """Steps 3'–5': the k×b table of prepared (ITEM[, WEIGHT]) rows via ``mapInArrow``."""
    k, b = len(seeds), int(buckets)
    dense = k * b <= DENSE_MAX_COUNTERS
    kernel = _SketchKernel(kind, seeds, b, signed=signed, weighted=weighted, preaggregate=preaggregate, dense=dense,
                           chunk_rows=CHUNK_ROWS, block_items=_BLOCK_ITEMS)
    return _run_kernel(rows, kernel)


def _collect(partials: DataFrame, k: int, b: int, dense: bool, count: int | None = None) -> np.ndarray:
    """Sums the kernel's partials (dense: on the driver; sparse: one ``groupBy``) into the k×b table.

    ``count``: at most this many dense partials (planned tasks or the cap of
    :func:`~spark_dp.aggregates._partials.cap_partials`); when they are many
    they are tree-summed on the executors first (same sums, another order).
    """
    if dense:
        return collect_sum(partials, DenseCounterPartials(k * b), count).reshape(k, b)
    out = np.zeros(k * b, dtype=np.float64)
    # The partials hold distinct indices per partition already: one explicit
    # hash exchange on the index (the one partitioning rule), then the sums.
    n = partitions_for(partials)
    table = to_arrow(partials.repartition(n, F.col("idx")).groupBy("idx").agg(F.sum("v").alias("v")))
    if table.num_rows:
        out[table.column("idx").to_numpy()] = table.column("v").to_numpy()
    return out.reshape(k, b)
