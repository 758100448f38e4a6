"""The exact tables of a DataFrame: the Spark SQL builds, and the choice of the Arrow kernel.

Steps 3–5 of :mod:`spark_dp.aggregates.sketch` as Spark SQL (Spark's own
``xxhash64``, one ``explode``, sums per counter), for :func:`sketch_table`,
:func:`histogram_table`, :func:`dyadic_tables` and the post-processing
:func:`sketch_lookup`; ``method`` picks the Arrow kernel
(:mod:`._kernels`) instead wherever it applies.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_dp.aggregates._partitioning import partitions_for
from spark_dp.aggregates.sketch import _kernels
from spark_dp.aggregates.sketch._kernels import _DyadicKernel, _run_kernel
from spark_dp.aggregates.sketch._prepare import (
    ITEM,
    UNIT,
    WEIGHT,
    _check_levels,
    _check_method,
    _check_shape,
    item_kind,
    prepare_items,
)
from spark_dp.aggregates.xxh64 import SIGN_SALT, to_signed
from spark_dp.errors import ConfigError, SchemaError


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


def hashed_id_column(item: Column, seed: int, levels: int) -> Column:
    """The public domain hash of a dyadic release: xxhash64(seed, item) & (2^L − 1), a bigint in [0, 2^L)."""
    return F.xxhash64(_seed_lit(seed), item).bitwiseAND(F.lit((1 << int(levels)) - 1).cast("long"))


def _preaggregate(rows: DataFrame, kind: str, by_unit: bool) -> DataFrame:
    """Step 3: weights summed per (unit, item), or per item within each partition without a unit.

    With a unit the rows come hash-partitioned by the unit from contribution
    bounding (:func:`~spark_dp.aggregates._bounding.keep_rows_per_unit`), so
    the ``groupBy`` plans no exchange. Without one, a global ``groupBy`` would
    shuffle into ``spark.sql.shuffle.partitions`` partitions; the final sums
    are per index and linear, so a per-partition pre-sum gives the same table.
    """
    if by_unit:
        return rows.groupBy(UNIT, ITEM).agg(F.sum(WEIGHT).alias(WEIGHT))
    return _kernels.presum_items(rows, kind)


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
    weight_bounds: tuple[float, float] | None = None,
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
    _check_method(method)
    if unit_l2_bound is not None and privacy_unit is None:
        raise ConfigError("The 'unit_l2_bound' parameter needs a 'privacy_unit' column.")
    if method == "arrow" and unit_l2_bound is not None:
        raise ConfigError("The 'method' parameter 'arrow' cannot clip per unit in sketch space "
                          "('unit_l2_bound'); use 'sql' or 'auto'.")
    rows, kind = prepare_items(
        df, column, weight=weight, nulls=nulls, nonfinite=nonfinite,
        privacy_unit=privacy_unit, max_items_per_unit=max_items_per_unit, weight_bounds=weight_bounds,
    )
    if method == "arrow" or (method == "auto" and unit_l2_bound is None):
        return _kernels._arrow_table(rows, kind, seeds, buckets, signed=signed, weighted=weight is not None,
                                     preaggregate=preaggregate)
    if preaggregate:
        rows = _preaggregate(rows, kind, privacy_unit is not None)
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
    b = int(buckets)
    idx = (F.col("rep").cast("long") * F.lit(b).cast("long") + F.col("bucket")).alias("idx")
    return _kernels.sum_by_index(exploded.select(idx, F.col("v").cast("double").alias("v")), len(seeds) * b).reshape(
        len(seeds), b)


def histogram_table(
    df: DataFrame,
    column: str,
    *,
    domain: Sequence | int,
    weight: str | None = None,
    nulls: str = "item",
    nonfinite: str = "drop",
    weight_bounds: tuple[float, float] | None = None,
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
        privacy_unit=privacy_unit, max_items_per_unit=max_items_per_unit, weight_bounds=weight_bounds,
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
    return _kernels.sum_by_index(idx.select(F.col("idx").cast("long"), F.col(WEIGHT).alias("v")), d)


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
    items = candidates.select(item.alias("item"))
    items = items.repartition(partitions_for(items), F.col("item")).distinct()  # the one rule, no exchange of its own
    reps = []
    for i, seed in enumerate(seeds):
        sign = sign_column(F.col("item"), seed) if signed else F.lit(1).cast("long")
        reps.append(F.struct(F.lit(i).alias("rep"), bucket_column(F.col("item"), seed, b).alias("bucket"), sign.alias("sign")))
    exploded = items.select("item", F.explode(F.array(*reps)).alias("__sk_e")).select("item", "__sk_e.*")
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
    weight_bounds: tuple[float, float] | None = None,
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
    k = _check_levels(seeds, buckets, levels, method=method)
    rows, kind = prepare_items(
        df, column, weight=weight, nulls="drop", nonfinite=nonfinite,
        privacy_unit=privacy_unit, max_items_per_unit=max_items_per_unit, weight_bounds=weight_bounds,
    )
    if kind != "long" and hash_seed is None:
        raise SchemaError(f"Column {column!r} holds strings; dyadic heavy hitters over them need the hashed "
                          "domain (a 'hash_seed'), or integer items in [0, 2^levels).")
    b = int(buckets)
    if method != "sql":
        dense = levels * k * b <= _kernels.DENSE_MAX_COUNTERS
        kernel = _DyadicKernel(kind, seeds, b, levels, hash_seed, weighted=weight is not None, preaggregate=True,
                               dense=dense)
        return _run_kernel(rows, kernel).reshape(levels, k, b)
    if hash_seed is None:
        rows = rows.where((F.col(ITEM) >= 0) & (F.col(ITEM) < F.lit(1 << levels).cast("long")))
    else:
        rows = rows.withColumn(ITEM, hashed_id_column(F.col(ITEM), hash_seed, levels))
    rows = _preaggregate(rows, "long", privacy_unit is not None)
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
    idx = ((F.col("level").cast("long") * F.lit(k) + F.col("rep")) * F.lit(b).cast("long") + F.col("bucket")).alias("idx")
    return _kernels.sum_by_index(exploded.select(idx, F.col("v").cast("double").alias("v")), levels * k * b).reshape(
        levels, k, b)
