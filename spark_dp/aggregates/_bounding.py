"""Contribution bounding: the one rule that picks the m rows a privacy unit keeps.

Every per-unit selection in this package (numeric rows in
:mod:`._vectors`, sketch items in :mod:`.sketch`) goes through
:func:`keep_rows_per_unit`. Within a unit, rows are ranked by

    (xxhash64(secret, unit, c₁, …, c_k), c₁, …, c_k)

where c₁…c_k are the columns the release uses (the vector, or the item
and its weight) after the library's own normalisation, and the first m
rows are kept. The rank is a function of the secret and of the row's own
content only, so the kept rows are a function of (secret, the unit's
multiset of rows): they do not depend on partitioning, on the order in
which rows arrive, or on which executor computes them. A cached frame that
Spark recomputes (a lost executor, an evicted block) over an input whose
order is not deterministic (a shuffle, a non-deterministic source) keeps
the very same rows, so a unit never contributes to a later pass a row
other than the one that was charged (with ``F.rand`` in the window order,
the random values attach to row positions, and a recomputation over
reordered input picks other rows).

Hash semantics we rely on (Spark ≥ 3.2, SPARK-35207 for −0.0): ``xxhash64``
hashes −0.0 as 0.0 and every NaN alike (``doubleToLongBits`` canonicalises
NaN), and skips null arguments and null array elements. The ordering used
for the tie-break compares doubles the same way (−0.0 = 0.0, NaN = NaN,
null = null). So ties on the full key happen only between rows that are
equal in the used columns up to the sign of a zero or a NaN's payload, and
the release cannot tell such rows apart (sums of ±0 are equal, NaN rows
follow the non-finite policy as a whole): whichever of them Spark puts
first, the kept multiset is the same. Distinct rows whose hashes collide
(2⁻⁶⁴ by chance, or the null-skipping of the hash, e.g. [1, null, 2] and
[1, 2, null]) are ordered by their content, deterministically.

The secret is drawn from OS entropy once per frame (per release) by the
caller of :func:`keep_rows_per_unit` (:func:`new_secret`); it only
decorrelates the choice from the data (privacy does not rest on it: any
per-unit rule that keeps at most m of the unit's own rows bounds the
contribution). It is never logged nor written to a manifest; like the
sketch hash seeds, it is a literal of the Spark plan.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_dp.aggregates._partitioning import partitions_for

RANK_COL = "__spark_dp_unit_rank"
_UNIT_HASH_COL = "__spark_dp_unit_hash"


def new_secret() -> int:
    """A fresh 64-bit selection secret (OS entropy), as a signed bigint value."""
    u = secrets.randbits(64)
    return u - (1 << 64) if u >> 63 else u


def selection_order(secret: int, unit: Column, content: Sequence[Column]) -> list[Column]:
    """The ordering columns of the rows within one unit: keyed hash first, then the content itself.

    Args:
        secret: the per-release selection secret (:func:`new_secret`).
        unit: the privacy-unit column (hashed too, so that two units with
            the same rows do not make the same choice).
        content: the columns the release uses, in their normalised form.
    """
    if not content:
        raise ValueError("selection_order needs at least one content column")
    key = F.xxhash64(F.lit(int(secret)).cast("long"), unit, *content)
    return [key.asc(), *(c.asc_nulls_first() for c in content)]


def keep_rows_per_unit(
    df: DataFrame, unit: str, content: Sequence[str], max_rows: int, *, secret: int | None = None,
    partitions: int | None = None, array_length: int = 1, unit_type: T.DataType | None = None,
) -> DataFrame:
    """``df`` with at most ``max_rows`` rows per value of ``unit`` (rows with a null unit form one unit).

    Every unit keeps exactly min(max_rows, its row count) rows, chosen by
    :func:`selection_order`: a function of (secret, the unit's multiset of
    ``content`` rows) only.

    Args:
        df: the rows, with the unit column and the content columns.
        unit: the unit column's name.
        content: names of the columns the release uses (normalised already).
        max_rows: m ≥ 1.
        secret: the selection secret; None draws a fresh one. Pass the same
            secret to rebuild the same selection (tests).
        partitions: the shuffle's partition count; None applies the one rule
            (:func:`spark_dp.aggregates._partitioning.partitions_for`), never
            ``spark.sql.shuffle.partitions``.
        array_length: d when a content column is an array of d values (the
            size estimate of the rule).
        unit_type: the unit column's type when the caller knows it (saves a
            schema read); None reads it from ``df``.

    Returns:
        The kept rows, hash-partitioned by ``unit`` into ``partitions``
        partitions (so later per-unit operations plan no other exchange).
    """
    if secret is None:
        secret = new_secret()
    if partitions is None:
        partitions = partitions_for(df, array_length=array_length)
    order = selection_order(secret, F.col(unit), [F.col(c) for c in content])
    # The window needs each unit's rows together: an explicit hash repartition
    # on the unit satisfies that, so Spark plans no exchange of its own (which
    # would take the session's spark.sql.shuffle.partitions).
    if unit_type is None:
        unit_type = df.schema[unit].dataType
    if not _has_floats(unit_type):
        window = Window.partitionBy(F.col(unit)).orderBy(*order)
        df = df.repartition(int(partitions), F.col(unit))
        rank = F.row_number().over(window)
    else:
        # Spark normalises a floating-point partition key (-0.0 → 0.0, one NaN),
        # which an exchange on the raw column does not satisfy. Partition by
        # xxhash64(unit) instead (equal for equal units, which it hashes the
        # same way); a unit's rows are then consecutive in the order (unit, …),
        # and its own rank is row_number − (rank of the unit) + 1.
        df = df.withColumn(_UNIT_HASH_COL, F.xxhash64(F.col(unit))).repartition(int(partitions), _UNIT_HASH_COL)
        by_rows = Window.partitionBy(_UNIT_HASH_COL).orderBy(F.col(unit).asc_nulls_first(), *order)
        by_unit = Window.partitionBy(_UNIT_HASH_COL).orderBy(F.col(unit).asc_nulls_first())
        rank = F.row_number().over(by_rows) - F.rank().over(by_unit) + F.lit(1)
    out = df.withColumn(RANK_COL, rank).where(F.col(RANK_COL) <= int(max_rows)).drop(RANK_COL)
    return out.drop(_UNIT_HASH_COL)


def _has_floats(dt: T.DataType) -> bool:
    """Whether Spark normalises ``dt`` as a grouping key (float or double, also inside arrays, maps, structs)."""
    if isinstance(dt, T.FloatType | T.DoubleType):
        return True
    if isinstance(dt, T.ArrayType):
        return _has_floats(dt.elementType)
    if isinstance(dt, T.MapType):
        return _has_floats(dt.keyType) or _has_floats(dt.valueType)
    if isinstance(dt, T.StructType):
        return any(_has_floats(f.dataType) for f in dt.fields)
    return False
