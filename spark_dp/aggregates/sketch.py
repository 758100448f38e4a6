"""Exact CountSketch / Count-Min tables and histograms, built in Spark SQL.

No noise and no privacy imports here: this module computes the exact k×b
table that :mod:`spark_dp.sketch` then noises through the chokepoint.

The build is pure Spark SQL (no Python UDFs, no RDDs, Spark Connect-safe):

1. normalise the rows: item column → ``bigint`` (integral types) or
   ``string``; optional weight → double clipped to [−1, 1] (non-finite weights
   follow the ``nonfinite`` policy); null items follow the ``nulls`` policy;
2. contribution bounding: at most ``max_items_per_unit`` rows per privacy
   unit, chosen uniformly at random (fresh OS entropy);
3. optionally pre-sum weights per item (per (unit, item) with a unit), which
   shrinks skewed inputs before the k-fold expansion;
4. per repetition i: bucket = pmod(xxhash64(sᵢ, item), b) and
   sign = 1 − 2·(xxhash64(sᵢ ⊕ SALT, item) & 1) (see
   :mod:`spark_dp.sketch.hashing`, which reproduces the values in numpy);
   one ``explode`` of the k (rep, bucket, sign·w) structs, then
   ``groupBy(rep, bucket).sum``;
5. optional per-unit clipping in sketch space: sum per (unit, rep, bucket),
   scale each unit's per-repetition vector to L2 norm ≤ C, then sum.

Only the ≤ k·b non-zero counters come back to the driver.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence

import numpy as np
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_dp.errors import ConfigError, SchemaError

ITEM = "__sk_item"
WEIGHT = "__sk_w"
UNIT = "__sk_unit"
NULL_ITEM_POLICIES = ("item", "drop")
NONFINITE_WEIGHT_POLICIES = ("drop", "zero")
SIGN_SALT = 0x2545F4914F6CDD1D  # keep equal to spark_dp.sketch.hashing.SIGN_SALT
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


def _to_signed(u: int) -> int:
    u &= (1 << 64) - 1
    return u - (1 << 64) if u >> 63 else u


def _seed_lit(seed: int) -> Column:
    return F.lit(_to_signed(seed)).cast("long")  # a bigint literal: Spark hashes ints and longs differently


def bucket_column(item: Column, seed: int, buckets: int) -> Column:
    """hᵢ(item) = pmod(xxhash64(sᵢ, item), b) as a bigint column."""
    return F.pmod(F.xxhash64(_seed_lit(seed), item), F.lit(int(buckets)).cast("long"))


def sign_column(item: Column, seed: int) -> Column:
    """sᵢ(item) = 1 − 2·(xxhash64(sᵢ ⊕ SALT, item) & 1) as a bigint column in {−1, +1}."""
    return F.lit(1).cast("long") - F.lit(2).cast("long") * F.xxhash64(_seed_lit(seed ^ SIGN_SALT), item).bitwiseAND(
        F.lit(1).cast("long")
    )


def prepare_items(
    df: DataFrame,
    column: str,
    *,
    weight: str | None = None,
    nulls: str = "item",
    nonfinite: str = "drop",
    privacy_unit: str | None = None,
    max_items_per_unit: int = 1,
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
        max_items_per_unit: rows kept per unit (chosen at random).

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
        win = Window.partitionBy(F.col(UNIT)).orderBy(F.rand(secrets.randbits(63)))
        out = out.withColumn("__sk_rank", F.row_number().over(win)).where(F.col("__sk_rank") <= max_items_per_unit)
        out = out.drop("__sk_rank")
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
        Other arguments: see :func:`prepare_items`.

    Returns:
        float64 array of shape (k, b).
    """
    _check_shape(seeds, buckets)
    if unit_l2_bound is not None and privacy_unit is None:
        raise ConfigError("The 'unit_l2_bound' parameter needs a 'privacy_unit' column.")
    rows, _ = prepare_items(
        df, column, weight=weight, nulls=nulls, nonfinite=nonfinite,
        privacy_unit=privacy_unit, max_items_per_unit=max_items_per_unit,
    )
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
    weight: str | None = None,
    nulls: str = "drop",
    nonfinite: str = "drop",
    privacy_unit: str | None = None,
    max_items_per_unit: int = 1,
) -> np.ndarray:
    """Exact CountSketches of the dyadic prefixes of integer items, in one pass.

    Items must be integers in [0, 2^L) (L = ``levels``); others (and nulls)
    are not counted — the domain is public. Level ℓ = 1…L sketches the prefix
    x >> (L − ℓ) with its own seeds ``seeds[ℓ−1]`` (level L is the items).
    Rows are bounded per unit once and then expanded over all (level, rep).

    Returns:
        float64 array of shape (L, k, b).
    """
    if levels < 1 or levels > 62:
        raise ConfigError(f"The 'levels' parameter must be an int in the range [1, 62]. Got {levels!r} instead.")
    if len(seeds) != levels:
        raise ConfigError(f"Need one list of seeds per level ({levels}); got {len(seeds)}.")
    k = len(seeds[0])
    for level_seeds in seeds:
        _check_shape(level_seeds, buckets)
    rows, kind = prepare_items(
        df, column, weight=weight, nulls="drop", nonfinite=nonfinite,
        privacy_unit=privacy_unit, max_items_per_unit=max_items_per_unit,
    )
    if kind != "long":
        raise SchemaError(f"Column {column!r} holds strings; dyadic heavy hitters need integer items in [0, 2^levels).")
    keys = [ITEM] if privacy_unit is None else [UNIT, ITEM]
    rows = rows.where((F.col(ITEM) >= 0) & (F.col(ITEM) < F.lit(1 << levels).cast("long")))
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
    out = np.zeros((levels, k, int(buckets)), dtype=np.float64)
    if table.num_rows:
        out[table.column("level").to_numpy(), table.column("rep").to_numpy(), table.column("bucket").to_numpy()] = (
            table.column("v").to_numpy()
        )
    return out
