"""Steps 1–2 of the build: normalised items and weights, then contribution bounding.

The one place that decides what a row contributes (item kind, the ``nulls``
and ``nonfinite`` policies, clipping weights to [−1, 1], at most
``max_items_per_unit`` rows per privacy unit); the Spark SQL builds, the
Arrow kernel and the direct-Parquet reader all start from it (the last one
for its schema and parameter checks).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_dp.aggregates._bounding import keep_rows_per_unit
from spark_dp.aggregates._partitioning import partitions_for
from spark_dp.aggregates._vectors import schema_of
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
    f = schema_of(df).get(name)  # the schema is read once per DataFrame
    if f is None:
        raise SchemaError(f"Column {name!r} not found; the input has columns {list(schema_of(df))}.")
    return f


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
    weight_bounds: tuple[float, float] | None = None,
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
        weight_bounds: optional public (lo, hi) of the weights: each finite
            weight is clamped to [lo, hi] and divided by M = max(|lo|, |hi|)
            (:func:`scale_weights`), so it lies in [−1, 1] before the usual
            clipping (a no-op then). A non-finite weight under ``zero``
            counts 0 (it is not clamped into [lo, hi]).

    Returns:
        ``(frame, kind)`` with columns ITEM, WEIGHT (and UNIT with a unit).
    """
    if nulls not in NULL_ITEM_POLICIES:
        raise ConfigError(f"The 'nulls' parameter must be one of {list(NULL_ITEM_POLICIES)}. Got {nulls!r} instead.")
    if nonfinite not in NONFINITE_WEIGHT_POLICIES:
        raise ConfigError(
            f"The 'nonfinite' parameter must be one of {list(NONFINITE_WEIGHT_POLICIES)}. Got {nonfinite!r} instead."
        )
    if weight_bounds is not None and weight is None:
        raise ConfigError("The 'weight_bounds' parameter applies to the weight column, and no 'weight' is given.")
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
        unit_type = _field(df, privacy_unit).dataType
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
        if weight_bounds is not None:  # clamp to the public [lo, hi], then divide by M (as scale_weights does)
            lo, hi, scale = weight_scaling(weight_bounds)
            w = F.greatest(F.lit(lo), F.least(F.lit(hi), w)) / F.lit(scale)
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
        out = keep_rows_per_unit(out, UNIT, [ITEM, WEIGHT], max_items_per_unit, secret=selection_secret,
                                 partitions=partitions_for(df), unit_type=unit_type)
    return out, kind


def weight_scaling(weight_bounds: tuple[float, float]) -> tuple[float, float, float]:
    """(lo, hi, M) of public weight bounds, M = max(|lo|, |hi|) > 0 (lo < hi, finite: checked by the caller)."""
    lo, hi = (float(x) for x in weight_bounds)
    return lo, hi, max(abs(lo), abs(hi))


def scale_weights(w: np.ndarray, weight_bounds: tuple[float, float] | None) -> np.ndarray:
    """Finite weights clamped to [lo, hi] and divided by M (a new array; ``w`` itself without bounds): the
    arithmetic of :func:`prepare_items`' Spark expression, bit for bit.
    """
    if weight_bounds is None:
        return w
    lo, hi, scale = weight_scaling(weight_bounds)
    return np.clip(w, lo, hi) / scale


def _check_shape(seeds: Sequence[int], buckets: int) -> None:
    if len(seeds) < 1:
        raise ConfigError(f"The 'repetitions' parameter must be an int in the range [1, inf). Got {len(seeds)} instead.")
    if isinstance(buckets, bool) or not isinstance(buckets, int | np.integer) or buckets < 1:
        raise ConfigError(f"The 'buckets' parameter must be an int in the range [1, inf). Got {buckets!r} instead.")


def _check_method(method: str) -> None:
    if method not in BUILD_METHODS:
        raise ConfigError(f"The 'method' parameter must be one of {list(BUILD_METHODS)}. Got {method!r} instead.")


def _check_levels(seeds: Sequence[Sequence[int]], buckets: int, levels: int, *, method: str | None = None) -> int:
    """The shape checks of a dyadic stack (and of ``method`` when given, in the builds' order); returns k."""
    if isinstance(levels, bool) or not isinstance(levels, int | np.integer) or not 1 <= levels <= 62:
        raise ConfigError(f"The 'levels' parameter must be an int in the range [1, 62]. Got {levels!r} instead.")
    if len(seeds) != levels:
        raise ConfigError(f"Need one list of seeds per level ({levels}); got {len(seeds)}.")
    if method is not None:
        _check_method(method)
    k = len(seeds[0])
    for level_seeds in seeds:
        _check_shape(level_seeds, buckets)
        if len(level_seeds) != k:
            raise ConfigError("Every level needs the same number of seeds (repetitions).")
    return k
