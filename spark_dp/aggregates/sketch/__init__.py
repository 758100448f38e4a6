"""Exact CountSketch / Count-Min tables and histograms, built in Spark SQL.

No noise and no privacy imports here: this module computes the exact k×b
table that :mod:`spark_dp.sketch` then noises through the chokepoint.

The build is pure Spark SQL (no Python UDFs, no RDDs, Spark Connect-safe):

1. normalise the rows: item column → ``bigint`` (integral types) or
   ``string``; optional weight → double clipped to [−1, 1] (non-finite weights
   follow the ``nonfinite`` policy); null items follow the ``nulls`` policy;
2. contribution bounding: at most ``max_items_per_unit`` rows per privacy
   unit, ranked by a keyed hash of (secret, unit, item, weight) with a fresh
   secret per table (:mod:`spark_dp.aggregates._bounding`: the choice is
   pseudo-random yet stable when Spark recomputes the rows);
3. optionally pre-sum weights per item (per (unit, item) with a unit), which
   shrinks skewed inputs before the k-fold expansion;
4. per repetition i: bucket = pmod(xxhash64(sᵢ, item), b) and
   sign = 1 − 2·(xxhash64(sᵢ ⊕ SALT, item) & 1) (see
   :mod:`spark_dp.aggregates.xxh64`, which reproduces the values in numpy);
   one ``explode`` of the k (rep, bucket, sign·w) structs, then
   ``groupBy(rep, bucket).sum``;
5. optional per-unit clipping in sketch space: sum per (unit, rep, bucket),
   scale each unit's per-repetition vector to L2 norm ≤ C, then sum.

Only the ≤ k·b non-zero counters come back to the driver.

**The Arrow kernel** (``method="arrow"``, the default wherever it applies)
computes the very same table faster: steps 1–2 stay in Spark SQL
(:func:`prepare_items`, so nulls, weights and contribution bounding are
literally the same code), then one ``mapInArrow`` pass per partition

3'. groups the rows into chunks of ~2²⁰, pre-sums weights per distinct item
    with Arrow's C++ hash table (``dictionary_encode``, nulls as their own
    entry) + ``np.bincount``;
4'. hashes all distinct items of a chunk at once with a vectorised XXH64 over
    Arrow's offsets/data buffers (:func:`~spark_dp.aggregates.xxh64.xxh64_string_columns`: strings are
    grouped by length class so every step is a whole-array uint64 operation,
    no Python loop per row), bucket and sign hashes for all k repetitions in
    one call; the values equal Spark's ``xxhash64`` bit for bit;
5'. ``np.bincount`` of rep·b + bucket with weights sign·w into one k×b
    partial per partition (shipped sparse when that is smaller), summed on
    the driver; for k·b > :data:`DENSE_MAX_COUNTERS` each chunk yields sparse
    (index, sum) rows instead, merged by one ``groupBy``.

The kernel cannot do per-unit clipping in sketch space (step 5 needs all of
a unit's rows together): ``unit_l2_bound`` always uses the SQL build. Float
sums may differ from the SQL build in the last bits when weights are not
exactly representable partial sums (summation order); counts are exact.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_dp.aggregates._bounding import keep_rows_per_unit
from spark_dp.aggregates.xxh64 import (
    SIGN_SALT,
    sign_seed,
    spark_seed_states,
    spark_xxhash64_array,  # noqa: F401  (re-exported: the tests import it from here)
    to_signed,
    xxh64_long_columns,
    xxh64_string_columns,
)
from spark_dp.errors import ConfigError, SchemaError

ITEM = "__sk_item"
WEIGHT = "__sk_w"
UNIT = "__sk_unit"
NULL_ITEM_POLICIES = ("item", "drop")
NONFINITE_WEIGHT_POLICIES = ("drop", "zero")
BUILD_METHODS = ("auto", "arrow", "sql")
_INTEGRAL = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)
_NUMERIC = (*_INTEGRAL, T.FloatType, T.DoubleType, T.DecimalType)


def _field(df: DataFrame, name: str) -> T.StructField:
    for f in df.schema.fields:
        if f.name == name:
            return f
    raise SchemaError(f"Column {name!r} not found; the input has columns {df.columns}.")


def item_kind(df: DataFrame, column: str) -> str:
    """``'long'`` for an integral item column, ``'string'`` for a string one.

    Raises:
        SchemaError: the column is missing or of another type.
    """
    f = _field(df, column)
    if isinstance(f.dataType, _INTEGRAL):
        return "long"
    if isinstance(f.dataType, T.StringType | T.VarcharType | T.CharType):
        return "string"
    raise SchemaError(
        f"Column {column!r} has type {f.dataType.simpleString()}; sketch items must be strings or integers."
    )


def _seed_lit(seed: int) -> Column:
    return F.lit(to_signed(seed)).cast("long")  # a bigint literal: Spark hashes ints and longs differently


def bucket_column(item: Column, seed: int, buckets: int) -> Column:
    """hᵢ(item) = pmod(xxhash64(sᵢ, item), b) as a bigint column."""
    return F.pmod(F.xxhash64(_seed_lit(seed), item), F.lit(int(buckets)).cast("long"))


def sign_column(item: Column, seed: int) -> Column:
    """sᵢ(item) = 1 − 2·(xxhash64(sᵢ ⊕ SALT, item) & 1) as a bigint column in {−1, +1}."""
    return F.lit(1).cast("long") - F.lit(2).cast("long") * F.xxhash64(_seed_lit(seed ^ SIGN_SALT), item).bitwiseAND(
        F.lit(1).cast("long")
    )


# -- the mapInArrow kernel ------------------------------------------------------
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
        nz = np.flatnonzero(acc)
        dense = nz.size * 16 >= acc.size * 8
        idx, v = (b"", acc.tobytes()) if dense else (nz.astype(np.int64).tobytes(), acc[nz].tobytes())
        return pa.RecordBatch.from_arrays(
            [pa.array([dense]), pa.array([idx], pa.binary()), pa.array([v], pa.binary())],
            names=["dense", "idx", "v"])

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        acc = None
        pending: list[pa.RecordBatch] = []
        rows = 0

        def flush():
            nonlocal acc
            out = self.chunk(pending)
            if self.dense:
                acc = out if acc is None else acc + out
                return None
            return self.sparse_batch(out)

        for batch in batches:
            if not batch.num_rows:
                continue
            pending.append(batch)
            rows += batch.num_rows
            if rows >= self.chunk_rows:
                out = flush()
                if out is not None:
                    yield out
                pending, rows = [], 0
        if pending:
            out = flush()
            if out is not None:
                yield out
        if self.dense and acc is not None:
            yield self.dense_batch(acc)


def hashed_id_column(item: Column, seed: int, levels: int) -> Column:
    """The public domain hash of a dyadic release: xxhash64(seed, item) & (2^L − 1), a bigint in [0, 2^L)."""
    return F.xxhash64(_seed_lit(seed), item).bitwiseAND(F.lit((1 << int(levels)) - 1).cast("long"))


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


def _arrow_table(rows: DataFrame, kind: str, seeds: Sequence[int], buckets: int, *, signed: bool,
                 weighted: bool, preaggregate: bool) -> np.ndarray:
    """Steps 3'–5': the k×b table of prepared (ITEM[, WEIGHT]) rows via ``mapInArrow``."""
    k, b = len(seeds), int(buckets)
    dense = k * b <= DENSE_MAX_COUNTERS
    kernel = _SketchKernel(kind, seeds, b, signed=signed, weighted=weighted, preaggregate=preaggregate, dense=dense,
                           chunk_rows=CHUNK_ROWS, block_items=_BLOCK_ITEMS)
    cols = [ITEM, WEIGHT] if weighted else [ITEM]
    return _collect(rows.select(*cols).mapInArrow(kernel, _DENSE_SCHEMA if dense else _SPARSE_SCHEMA), k, b, dense)


def _collect(partials: DataFrame, k: int, b: int, dense: bool) -> np.ndarray:
    """Sums the kernel's partials (dense: on the driver; sparse: one ``groupBy``) into the k×b table."""
    out = np.zeros(k * b, dtype=np.float64)
    if dense:
        table = partials.toArrow()
        for is_dense, idx, v in zip(*(table.column(c).to_pylist() for c in ("dense", "idx", "v"))):
            vals = np.frombuffer(v, dtype=np.float64)
            if is_dense:
                out += vals
            else:  # indices are distinct within one partial
                out[np.frombuffer(idx, dtype=np.int64)] += vals
    else:
        table = partials.groupBy("idx").agg(F.sum("v").alias("v")).toArrow()
        if table.num_rows:
            out[table.column("idx").to_numpy()] = table.column("v").to_numpy()
    return out.reshape(k, b)


def prepare_items(
    df: DataFrame,
    column: str,
    *,
    weight: str | None = None,
    nulls: str = "item",
    nonfinite: str = "drop",
    privacy_unit: str | None = None,
    max_items_per_unit: int = 1,
    selection_secret: int | None = None,
) -> tuple[DataFrame, str]:
    """Steps 1–2: normalised (item, weight[, unit]) rows after contribution bounding.

    Args:
        df: the input.
        column: the item column (strings or integers).
        weight: optional numeric weight column, clipped to [−1, 1] per row;
            None counts each row once.
        nulls: ``item`` (a null item is an item of its own) or ``drop``.
        nonfinite: ``drop`` or ``zero`` for null/NaN/±inf weights.
        privacy_unit: optional unit column; rows with a null unit form one unit.
        max_items_per_unit: m; each unit keeps min(m, its row count) rows,
            chosen pseudo-randomly by a keyed hash of the unit and the
            normalised (item, weight) (:mod:`spark_dp.aggregates._bounding`).
        selection_secret: the key of that hash; None (the default) draws a
            fresh one from OS entropy for this frame. Never log it.

    Returns:
        ``(frame, kind)`` with columns ITEM, WEIGHT (and UNIT with a unit).
    """
    if nulls not in NULL_ITEM_POLICIES:
        raise ConfigError(f"The 'nulls' parameter must be one of {list(NULL_ITEM_POLICIES)}. Got {nulls!r} instead.")
    if nonfinite not in NONFINITE_WEIGHT_POLICIES:
        raise ConfigError(
            f"The 'nonfinite' parameter must be one of {list(NONFINITE_WEIGHT_POLICIES)}. Got {nonfinite!r} instead."
        )
    kind = item_kind(df, column)
    item = F.col(column).cast("long" if kind == "long" else "string")
    cols = [item.alias(ITEM)]
    if weight is None:
        cols.append(F.lit(1.0).alias(WEIGHT))
    else:
        wf = _field(df, weight)
        if not isinstance(wf.dataType, _NUMERIC):
            raise SchemaError(f"Column {weight!r} has type {wf.dataType.simpleString()}; a weight must be numeric.")
        cols.append(F.col(weight).cast("double").alias(WEIGHT))
    if privacy_unit is not None:
        _field(df, privacy_unit)
        cols.append(F.col(privacy_unit).alias(UNIT))
    out = df.select(*cols)
    if nulls == "drop":
        out = out.where(F.col(ITEM).isNotNull())
    if weight is not None:
        w = F.col(WEIGHT)
        finite = w.isNotNull() & ~F.isnan(w) & (F.abs(w) != F.lit(float("inf")))
        if nonfinite == "drop":
            out = out.where(finite)
        # NaN compares greater than every number in Spark: decide finiteness before clipping.
        w_ok = F.when(finite, w).otherwise(F.lit(0.0))
        out = out.withColumn(WEIGHT, F.greatest(F.lit(-1.0), F.least(F.lit(1.0), w_ok)))
    if privacy_unit is not None:
        if max_items_per_unit < 1:
            raise ConfigError(
                f"The 'max_items_per_unit' parameter must be an int in the range [1, inf). Got {max_items_per_unit!r} instead."
            )
        # Ranked by a keyed hash of (secret, unit, item, weight), the normalised
        # values the table uses, with (item, weight) as tie-break: a recomputed
        # frame keeps the same rows (see _bounding).
        out = keep_rows_per_unit(out, UNIT, [ITEM, WEIGHT], max_items_per_unit, secret=selection_secret)
    return out, kind


def _check_shape(seeds: Sequence[int], buckets: int) -> None:
    if len(seeds) < 1:
        raise ConfigError(f"The 'repetitions' parameter must be an int in the range [1, inf). Got {len(seeds)} instead.")
    if isinstance(buckets, bool) or not isinstance(buckets, int | np.integer) or buckets < 1:
        raise ConfigError(f"The 'buckets' parameter must be an int in the range [1, inf). Got {buckets!r} instead.")


def sketch_table(
    df: DataFrame,
    column: str,
    *,
    seeds: Sequence[int],
    buckets: int,
    signed: bool = True,
    weight: str | None = None,
    nulls: str = "item",
    nonfinite: str = "drop",
    privacy_unit: str | None = None,
    max_items_per_unit: int = 1,
    unit_l2_bound: float | None = None,
    preaggregate: bool = True,
    method: str = "auto",
) -> np.ndarray:
    """The exact k×b sketch table of ``df[column]``.

    Args:
        seeds: one 64-bit seed per repetition (k = len(seeds)).
        buckets: b, the table size.
        signed: CountSketch (True: counter += sᵢ(x)·w) or Count-Min/Count-Mean
            (False: counter += w).
        unit_l2_bound: C for per-unit clipping in sketch space (needs
            ``privacy_unit``): each unit's contribution to each repetition is
            scaled to L2 norm ≤ C before summing. None: no clipping (a unit's
            L1 is bounded by ``max_items_per_unit`` only).
        preaggregate: sum weights per item (per (unit, item)) before the
            k-fold expansion; the result is the same up to float rounding.
            With the Arrow kernel: per distinct item within each chunk.
        method: ``arrow`` (the ``mapInArrow`` kernel), ``sql`` (explode +
            groupBy), or ``auto`` (default): the kernel unless
            ``unit_l2_bound`` is set, which only the SQL build supports. Both
            give the same table (exactly for counts and dyadic weights; up to
            float summation order otherwise).
        Other arguments: see :func:`prepare_items`.

    Returns:
        float64 array of shape (k, b).
    """
    _check_shape(seeds, buckets)
    if method not in BUILD_METHODS:
        raise ConfigError(f"The 'method' parameter must be one of {list(BUILD_METHODS)}. Got {method!r} instead.")
    if unit_l2_bound is not None and privacy_unit is None:
        raise ConfigError("The 'unit_l2_bound' parameter needs a 'privacy_unit' column.")
    if method == "arrow" and unit_l2_bound is not None:
        raise ConfigError("The 'method' parameter 'arrow' cannot clip per unit in sketch space "
                          "('unit_l2_bound'); use 'sql' or 'auto'.")
    rows, kind = prepare_items(
        df, column, weight=weight, nulls=nulls, nonfinite=nonfinite,
        privacy_unit=privacy_unit, max_items_per_unit=max_items_per_unit,
    )
    if method == "arrow" or (method == "auto" and unit_l2_bound is None):
        return _arrow_table(rows, kind, seeds, buckets, signed=signed, weighted=weight is not None,
                            preaggregate=preaggregate)
    keys = [ITEM] if privacy_unit is None else [UNIT, ITEM]
    if preaggregate:
        rows = rows.groupBy(*keys).agg(F.sum(WEIGHT).alias(WEIGHT))
    item, w = F.col(ITEM), F.col(WEIGHT)
    reps = []
    for i, seed in enumerate(seeds):
        v = w * sign_column(item, seed) if signed else w
        reps.append(F.struct(F.lit(i).alias("rep"), bucket_column(item, seed, buckets).alias("bucket"), v.alias("v")))
    extra = [F.col(UNIT)] if privacy_unit is not None else []
    exploded = rows.select(*extra, F.explode(F.array(*reps)).alias("__sk_e")).select(*extra, "__sk_e.*")
    if unit_l2_bound is not None:
        # Step 5: the unit's vector per repetition, clipped to L2 norm ≤ C.
        per_unit = exploded.groupBy(UNIT, "rep", "bucket").agg(F.sum("v").alias("v"))
        norm = F.sqrt(F.sum(F.col("v") * F.col("v")).over(Window.partitionBy(UNIT, "rep")))
        scale = F.when(norm > F.lit(float(unit_l2_bound)), F.lit(float(unit_l2_bound)) / norm).otherwise(F.lit(1.0))
        exploded = per_unit.select("rep", "bucket", (F.col("v") * scale).alias("v"))
    table = exploded.groupBy("rep", "bucket").agg(F.sum("v").alias("v")).toArrow()
    out = np.zeros((len(seeds), int(buckets)), dtype=np.float64)
    if table.num_rows:
        out[table.column("rep").to_numpy(), table.column("bucket").to_numpy()] = table.column("v").to_numpy()
    return out


def histogram_table(
    df: DataFrame,
    column: str,
    *,
    domain: Sequence | int,
    weight: str | None = None,
    nulls: str = "item",
    nonfinite: str = "drop",
    privacy_unit: str | None = None,
    max_items_per_unit: int = 1,
) -> np.ndarray:
    """The exact histogram of ``df[column]`` over a known, public domain.

    Args:
        domain: the items, in release order (a list), or an int d for the
            integer domain 0…d−1. Items outside the domain are not counted
            (the domain is public, so dropping them reveals nothing).

    Returns:
        float64 array of shape (len(domain),).
    """
    rows, kind = prepare_items(
        df, column, weight=weight, nulls=nulls, nonfinite=nonfinite,
        privacy_unit=privacy_unit, max_items_per_unit=max_items_per_unit,
    )
    if isinstance(domain, int | np.integer) and not isinstance(domain, bool):
        if kind != "long":
            raise SchemaError(f"Column {column!r} holds strings; an integer domain size needs an integer item column.")
        d = int(domain)
        idx = rows.where((F.col(ITEM) >= 0) & (F.col(ITEM) < d)).select(F.col(ITEM).alias("idx"), WEIGHT)
    else:
        items = list(domain)
        d = len(items)
        spark = df.sparkSession
        typ = T.LongType() if kind == "long" else T.StringType()
        dom = spark.createDataFrame(
            [(x, i) for i, x in enumerate(items)],
            T.StructType([T.StructField(ITEM, typ, True), T.StructField("idx", T.LongType(), False)]),
        )
        idx = rows.join(F.broadcast(dom), on=rows[ITEM].eqNullSafe(dom[ITEM]), how="inner").select("idx", WEIGHT)
    table = idx.groupBy("idx").agg(F.sum(WEIGHT).alias("v")).toArrow()
    out = np.zeros(d, dtype=np.float64)
    if table.num_rows:
        out[table.column("idx").to_numpy()] = table.column("v").to_numpy()
    return out


def sketch_lookup(
    candidates: DataFrame,
    column: str,
    *,
    kind: str,
    seeds: Sequence[int],
    sketch: np.ndarray,
    signed: bool = True,
) -> DataFrame:
    """Per distinct candidate and repetition, the simple estimate sᵢ(x)·T[i, hᵢ(x)].

    A distributed join of the candidates with the (broadcast) released table;
    pure post-processing of a released sketch.

    Returns:
        DataFrame with columns ``item``, ``rep``, ``value``.

    Raises:
        SchemaError: missing candidate column, or its type does not match the
            sketch's item type ``kind``.
    """
    ckind = item_kind(candidates, column)
    if ckind != kind:
        raise SchemaError(
            f"Candidate column {column!r} holds {ckind} items but the sketch was built on {kind} items."
        )
    k, b = sketch.shape
    item = F.col(column).cast("long" if kind == "long" else "string")
    items = candidates.select(item.alias("item")).distinct()
    reps = []
    for i, seed in enumerate(seeds):
        sign = sign_column(F.col("item"), seed) if signed else F.lit(1).cast("long")
        reps.append(F.struct(F.lit(i).alias("rep"), bucket_column(F.col("item"), seed, b).alias("bucket"), sign.alias("sign")))
    exploded = items.select("item", F.explode(F.array(*reps)).alias("__sk_e")).select("item", "__sk_e.*")
    import pyarrow as pa

    reps_idx, buckets_idx = np.indices((k, b)).reshape(2, -1)
    table = pa.table({"rep": reps_idx.astype(np.int32), "bucket": buckets_idx.astype(np.int64),
                      "counter": np.asarray(sketch, dtype=np.float64).reshape(-1)})
    spark = candidates.sparkSession
    sk = spark.createDataFrame(table.to_pandas())
    joined = exploded.join(F.broadcast(sk), on=["rep", "bucket"], how="inner")
    return joined.select("item", "rep", (F.col("sign") * F.col("counter")).alias("value"))


def dyadic_tables(
    df: DataFrame,
    column: str,
    *,
    seeds: Sequence[Sequence[int]],
    buckets: int,
    levels: int,
    hash_seed: int | None = None,
    weight: str | None = None,
    nulls: str = "drop",
    nonfinite: str = "drop",
    privacy_unit: str | None = None,
    max_items_per_unit: int = 1,
    method: str = "auto",
) -> np.ndarray:
    """Exact CountSketches of the dyadic prefixes of item ids in [0, 2^L), in one pass.

    The id of an item is the integer itself (``hash_seed`` None: integer
    items only; items outside [0, 2^L) are not counted — the domain is
    public), or the public domain hash xxhash64(hash_seed, item) & (2^L − 1)
    (:func:`hashed_id_column`; strings or integers, every item counts). Null
    items are never counted. Level ℓ = 1…L sketches the prefix id >> (L − ℓ)
    with its own seeds ``seeds[ℓ−1]`` (level L is the ids). Rows are bounded
    per unit once (:func:`prepare_items`) and then expanded over all
    (level, rep).

    Args:
        method: ``arrow`` (a ``mapInArrow`` kernel over the distinct items of
            each chunk), ``sql`` (one explode of L·k structs + groupBy) or
            ``auto`` (= ``arrow``). Same table (exactly for counts and dyadic
            weights).

    Returns:
        float64 array of shape (L, k, b).
    """
    if isinstance(levels, bool) or not isinstance(levels, int | np.integer) or not 1 <= levels <= 62:
        raise ConfigError(f"The 'levels' parameter must be an int in the range [1, 62]. Got {levels!r} instead.")
    if len(seeds) != levels:
        raise ConfigError(f"Need one list of seeds per level ({levels}); got {len(seeds)}.")
    if method not in BUILD_METHODS:
        raise ConfigError(f"The 'method' parameter must be one of {list(BUILD_METHODS)}. Got {method!r} instead.")
    k = len(seeds[0])
    for level_seeds in seeds:
        _check_shape(level_seeds, buckets)
        if len(level_seeds) != k:
            raise ConfigError("Every level needs the same number of seeds (repetitions).")
    rows, kind = prepare_items(
        df, column, weight=weight, nulls="drop", nonfinite=nonfinite,
        privacy_unit=privacy_unit, max_items_per_unit=max_items_per_unit,
    )
    if kind != "long" and hash_seed is None:
        raise SchemaError(f"Column {column!r} holds strings; dyadic heavy hitters over them need the hashed "
                          "domain (a 'hash_seed'), or integer items in [0, 2^levels).")
    b = int(buckets)
    if method != "sql":
        dense = levels * k * b <= DENSE_MAX_COUNTERS
        kernel = _DyadicKernel(kind, seeds, b, levels, hash_seed, weighted=weight is not None, preaggregate=True,
                               dense=dense)
        cols = [ITEM, WEIGHT] if weight is not None else [ITEM]
        parts = rows.select(*cols).mapInArrow(kernel, _DENSE_SCHEMA if dense else _SPARSE_SCHEMA)
        return _collect(parts, levels * k, b, dense).reshape(levels, k, b)
    keys = [ITEM] if privacy_unit is None else [UNIT, ITEM]
    if hash_seed is None:
        rows = rows.where((F.col(ITEM) >= 0) & (F.col(ITEM) < F.lit(1 << levels).cast("long")))
    else:
        rows = rows.withColumn(ITEM, hashed_id_column(F.col(ITEM), hash_seed, levels))
    rows = rows.groupBy(*keys).agg(F.sum(WEIGHT).alias(WEIGHT))
    w = F.col(WEIGHT)
    structs = []
    for lvl in range(1, levels + 1):
        prefix = F.shiftright(F.col(ITEM), levels - lvl)
        for i, seed in enumerate(seeds[lvl - 1]):
            structs.append(F.struct(
                F.lit(lvl - 1).alias("level"), F.lit(i).alias("rep"),
                bucket_column(prefix, seed, buckets).alias("bucket"), (w * sign_column(prefix, seed)).alias("v"),
            ))
    exploded = rows.select(F.explode(F.array(*structs)).alias("__sk_e")).select("__sk_e.*")
    table = exploded.groupBy("level", "rep", "bucket").agg(F.sum("v").alias("v")).toArrow()
    out = np.zeros((levels, k, b), dtype=np.float64)
    if table.num_rows:
        out[table.column("level").to_numpy(), table.column("rep").to_numpy(), table.column("bucket").to_numpy()] = (
            table.column("v").to_numpy()
        )
    return out


# -- direct Parquet path ----------------------------------------------------------
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
    policies of :func:`prepare_items`) and steps 3'–5' of the module doc on
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
                 kernel: _SketchKernel, *, nulls: str, nonfinite: str, batch_rows: int | None = None):
        self.tasks = [list(t) for t in tasks]
        self.column, self.weight, self.kernel = column, weight, kernel
        self.nulls, self.nonfinite = nulls, nonfinite
        self.batch_rows = int(batch_rows or PARQUET_BATCH_ROWS)

    def _weights(self, arr: pa.Array | None) -> tuple[np.ndarray | None, np.ndarray | None]:
        """(clipped weights, rows kept) of one batch: the ``nonfinite`` policy, then clipping to [−1, 1]."""
        if arr is None:
            return None, None
        w = pc.cast(arr, pa.float64()).to_numpy(zero_copy_only=False)  # nulls → NaN
        finite = np.isfinite(w)
        if finite.all():
            return np.clip(w, -1.0, 1.0), None
        w = np.where(finite, w, 0.0)
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
    privacy_unit: str | None = None,
    max_items_per_unit: int = 1,
    unit_l2_bound: float | None = None,
    spark: SparkSession | None = None,
) -> np.ndarray:
    """:func:`sketch_table` of ``spark.read.parquet(*paths)``, with the tasks reading the files with pyarrow.

    The same k×b table as ``sketch_table(spark.read.parquet(*paths), column,
    ...)`` (exactly for counts and dyadic weights; up to float summation
    order otherwise, as between the SQL and Arrow builds), but each task
    opens its share of the files itself (:mod:`._parquet_tasks`: one task per
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
        column, seeds, buckets, signed, weight, nulls, nonfinite,
            privacy_unit, max_items_per_unit, unit_l2_bound: as for
            :func:`sketch_table`.
        spark: the session (default: the active one).

    Returns:
        float64 array of shape (k, b).
    """
    from spark_dp.aggregates._parquet_tasks import physical_columns, plan_tasks, source_frame, task_ids

    _check_shape(seeds, buckets)
    if unit_l2_bound is not None and privacy_unit is None:
        raise ConfigError("The 'unit_l2_bound' parameter needs a 'privacy_unit' column.")
    spark, paths, df = source_frame(paths, spark)
    # Step 1's schema and parameter checks, exactly as the Spark path does them (no Spark job).
    _, kind = prepare_items(df, column, weight=weight, nulls=nulls, nonfinite=nonfinite,
                            privacy_unit=privacy_unit, max_items_per_unit=max_items_per_unit)

    def spark_path() -> np.ndarray:
        return sketch_table(df, column, seeds=seeds, buckets=buckets, signed=signed, weight=weight, nulls=nulls,
                            nonfinite=nonfinite, privacy_unit=privacy_unit, max_items_per_unit=max_items_per_unit,
                            unit_l2_bound=unit_l2_bound)

    if privacy_unit is not None:
        return spark_path()
    k, b = len(seeds), int(buckets)
    files = sorted(df.inputFiles())
    if not files:
        return np.zeros((k, b))
    physical = physical_columns(files[0])
    wanted = [c for c in (column, weight) if c is not None]
    if physical is None or any(_file_column(physical, c) is None for c in wanted):
        return spark_path()
    dense = k * b <= DENSE_MAX_COUNTERS
    tasks = plan_tasks(spark, files, 8 * min(k * b, DENSE_MAX_COUNTERS))
    if tasks is None:
        return spark_path()
    kernel = _SketchKernel(kind, seeds, b, signed=signed, weighted=weight is not None, preaggregate=True,
                           dense=dense, chunk_rows=CHUNK_ROWS, block_items=_BLOCK_ITEMS)
    fn = _ParquetSketchTask(tasks, column, weight, kernel, nulls=nulls, nonfinite=nonfinite)
    return _collect(task_ids(spark, tasks).mapInArrow(fn, _DENSE_SCHEMA if dense else _SPARSE_SCHEMA), k, b, dense)


def _direct_parquet_table(
    paths: str | Sequence[str], column: str, make_kernel, *, weight: str | None, nulls: str, nonfinite: str,
    privacy_unit: str | None, max_items_per_unit: int, spark: SparkSession | None, spark_path,
) -> np.ndarray | None:
    """The kernel's flat table with the tasks reading the Parquet files themselves (as :func:`sketch_table_parquet`).

    ``make_kernel(kind)`` builds the kernel (a :class:`_SketchKernel`);
    ``spark_path(df)`` builds the same table through Spark's reader, taken
    under the same conditions as :func:`sketch_table_parquet` (a privacy
    unit, URIs pyarrow cannot open, a column not in the files).

    Returns:
        ``(kernel, flat table of shape (kernel.k, kernel.b))`` or ``(None, spark_path's result)``.
    """
    from spark_dp.aggregates._parquet_tasks import physical_columns, plan_tasks, source_frame, task_ids

    spark, paths, df = source_frame(paths, spark)
    # Step 1's schema and parameter checks, exactly as the Spark path does them (no Spark job).
    _, kind = prepare_items(df, column, weight=weight, nulls=nulls, nonfinite=nonfinite,
                            privacy_unit=privacy_unit, max_items_per_unit=max_items_per_unit)
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
    tasks = plan_tasks(spark, files, 8 * min(kernel.k * kernel.b, DENSE_MAX_COUNTERS))
    if tasks is None:
        return None, spark_path(df)
    fn = _ParquetSketchTask(tasks, column, weight, kernel, nulls=nulls, nonfinite=nonfinite)
    parts = task_ids(spark, tasks).mapInArrow(fn, _DENSE_SCHEMA if kernel.dense else _SPARSE_SCHEMA)
    return kernel, _collect(parts, kernel.k, kernel.b, kernel.dense)


def histogram_table_parquet(
    paths: str | Sequence[str],
    column: str,
    *,
    domain: Sequence | int,
    weight: str | None = None,
    nulls: str = "item",
    nonfinite: str = "drop",
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
                                dense=d <= DENSE_MAX_COUNTERS)

    def spark_path(df: DataFrame) -> np.ndarray:
        return histogram_table(df, column, domain=domain, weight=weight, nulls=nulls, nonfinite=nonfinite,
                               privacy_unit=privacy_unit, max_items_per_unit=max_items_per_unit)

    kernel, table = _direct_parquet_table(
        paths, column, make_kernel, weight=weight, nulls=nulls, nonfinite=nonfinite, privacy_unit=privacy_unit,
        max_items_per_unit=max_items_per_unit, spark=spark, spark_path=spark_path)
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
    if isinstance(levels, bool) or not isinstance(levels, int | np.integer) or not 1 <= levels <= 62:
        raise ConfigError(f"The 'levels' parameter must be an int in the range [1, 62]. Got {levels!r} instead.")
    if len(seeds) != levels:
        raise ConfigError(f"Need one list of seeds per level ({levels}); got {len(seeds)}.")
    k, b = len(seeds[0]), int(buckets)
    for level_seeds in seeds:
        _check_shape(level_seeds, buckets)
        if len(level_seeds) != k:
            raise ConfigError("Every level needs the same number of seeds (repetitions).")

    def make_kernel(kind: str) -> _DyadicKernel:
        if kind != "long" and hash_seed is None:
            raise SchemaError(f"Column {column!r} holds strings; dyadic heavy hitters over them need the hashed "
                              "domain (a 'hash_seed'), or integer items in [0, 2^levels).")
        return _DyadicKernel(kind, seeds, b, levels, hash_seed, weighted=weight is not None, preaggregate=True,
                             dense=levels * k * b <= DENSE_MAX_COUNTERS)

    def spark_path(df: DataFrame) -> np.ndarray:
        return dyadic_tables(df, column, seeds=seeds, buckets=b, levels=levels, hash_seed=hash_seed, weight=weight,
                             nonfinite=nonfinite, privacy_unit=privacy_unit, max_items_per_unit=max_items_per_unit)

    kernel, table = _direct_parquet_table(
        paths, column, make_kernel, weight=weight, nulls="drop", nonfinite=nonfinite, privacy_unit=privacy_unit,
        max_items_per_unit=max_items_per_unit, spark=spark, spark_path=spark_path)
    return table if kernel is None else table.reshape(levels, k, b)
