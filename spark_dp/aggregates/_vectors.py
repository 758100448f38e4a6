"""Turning a DataFrame into one ``array<double>`` column of fixed length d.

Schema problems (missing or non-numeric columns) are public and raise
:class:`~spark_dp.errors.SchemaError`. Data content never raises: a null
value, a null array or an array of the wrong length becomes a row of NaN,
which the kernels then treat under the declared ``nonfinite`` policy.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from spark_dp.aggregates._bounding import keep_rows_per_unit
from spark_dp.aggregates._partitioning import partitions_for
from spark_dp.errors import ConfigError, SchemaError
from spark_dp.params import NONFINITE_POLICIES  # declared once, pyspark-free

VECTOR_COL = "__spark_dp_x"
_UNIT_COL = "__spark_dp_unit"
_NUMERIC = (T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.FloatType, T.DoubleType, T.DecimalType)


def _is_vector_udt(dt: T.DataType) -> bool:
    return type(dt).__name__ == "VectorUDT"


#: Schemas already read, per DataFrame object: a classic DataFrame's ``schema``
#: is a JVM round trip and a JSON parse on every access (Connect caches its own).
_SCHEMAS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def schema_of(df: DataFrame) -> dict[str, T.StructField]:
    """``df``'s fields by name, read once per DataFrame object."""
    try:
        fields = _SCHEMAS.get(df)
    except TypeError:  # not weakly referenceable
        return {f.name: f for f in df.schema.fields}
    if fields is None:
        fields = {f.name: f for f in df.schema.fields}
        _SCHEMAS[df] = fields
    return fields


def _field(df: DataFrame, name: str) -> T.StructField:
    f = schema_of(df).get(name)
    if f is None:
        raise SchemaError(f"Column {name!r} not found; the input has columns {list(schema_of(df))}.")
    return f


def _quote(name: str) -> str:
    """A column name as a SQL identifier."""
    return "`" + name.replace("`", "``") + "`"


def double_array(names: Sequence[str], *, nan_for_null: bool = False, affine: Affine | None = None) -> Column:
    """``array(CAST(c AS DOUBLE), …)`` over ``names`` as ONE SQL expression.

    One expression string crosses to Spark whatever the number of columns
    (building it from d ``F.col(...).cast(...)`` objects costs tens of JVM
    round trips per column on classic Spark, and d nodes of plan messages on
    Spark Connect). ``nan_for_null``: null values become NaN. ``affine``:
    bounded columns are clamped and scaled, and the constant 1.0 inserted,
    inside the same expression (:class:`Affine`); with ``affine.flag`` one
    more element is appended: 1.0 when a finite value of a bounded column
    lay outside its bounds (was clamped), else 0.0.
    """
    if nan_for_null:
        items = [f"coalesce(CAST({_quote(c)} AS DOUBLE), CAST('NaN' AS DOUBLE))" for c in names]
    else:
        items = [f"CAST({_quote(c)} AS DOUBLE)" for c in names]
    if affine is not None:
        if len(affine.bounds) != len(items):
            raise ValueError(f"bug: {len(affine.bounds)} bounds for {len(items)} columns")
        flags = [_outside(item, b) for item, b in zip(items, affine.bounds, strict=True) if b is not None]
        items = [item if b is None else _scaled(item, b) for item, b in zip(items, affine.bounds, strict=True)]
        if affine.constant_at is not None:
            items.insert(affine.constant_at, _double(affine.constant_value))
        if affine.flag:
            items.append(flags[0] if len(flags) == 1 else f"greatest({', '.join(flags)})")
    return F.expr(f"array({', '.join(items)})")


@dataclass(frozen=True)
class Affine:
    """Public per-column bounds applied while the vector is built (one SQL expression, no per-column calls).

    ``bounds[i]`` is ``(lo, hi)`` for the i-th column or None (the column as
    is). A bounded value v becomes (min(max(v, lo), hi) − c)/h with c = (lo + hi)/2
    and h = (hi − lo)/2, so it lies in [−1, 1] (the interval's centre at 0).
    NaN, ±inf and null are left as they are, so the declared ``nonfinite``
    policy sees them exactly as without bounds (``zero`` then sets the scaled
    entry to 0, i.e. the centre of its bounds). ``constant_at``: index at
    which the element ``constant_value`` is inserted (the intercept / shift
    column); d grows by one. ``flag``: a last element 1.0/0.0 says whether
    the row had a value clamped (the clipping report; it is not part of the
    vector, and needs a bounded column).
    """

    bounds: tuple[tuple[float, float] | None, ...]
    constant_at: int | None = None
    constant_value: float = 1.0
    flag: bool = False

    def __post_init__(self) -> None:
        for b in self.bounds:
            if b is not None and not (math.isfinite(b[0]) and math.isfinite(b[1]) and b[0] < b[1]):
                raise ValueError(f"bug: bounds must be finite with lo < hi, got {b!r}")
        if self.constant_at is not None and not 0 <= self.constant_at <= len(self.bounds):
            raise ValueError(f"bug: constant_at {self.constant_at} outside 0..{len(self.bounds)}")
        if self.flag and all(b is None for b in self.bounds):
            raise ValueError("bug: a clamping flag needs a bounded column")

    @property
    def extra(self) -> int:
        """Elements added to the array: the constant column and the clamping flag."""
        return (0 if self.constant_at is None else 1) + int(self.flag)


def _double(value: float) -> str:
    return f"CAST('{float(value)!r}' AS DOUBLE)"


def _outside(item: str, bounds: tuple[float, float]) -> str:
    """SQL: 1.0 when ``item`` is finite and outside ``bounds`` (it will be clamped), else 0.0 (null/NaN/±inf: 0.0)."""
    lo, hi = bounds
    return (f"CASE WHEN {item} IS NULL OR isnan({item}) OR abs({item}) = {_double(math.inf)} THEN {_double(0.0)} "
            f"WHEN {item} < {_double(lo)} OR {item} > {_double(hi)} THEN {_double(1.0)} ELSE {_double(0.0)} END")


def _scaled(item: str, bounds: tuple[float, float]) -> str:
    """SQL: ``item`` clamped to ``bounds`` and mapped to [-1, 1]; null/NaN/±inf unchanged."""
    lo, hi = bounds
    centre, half = (lo + hi) / 2.0, (hi - lo) / 2.0
    return (f"CASE WHEN {item} IS NULL OR isnan({item}) OR abs({item}) = {_double(math.inf)} THEN {item} "
            f"ELSE (least(greatest({item}, {_double(lo)}), {_double(hi)}) - {_double(centre)}) / {_double(half)} END")


def vectorize(
    df: DataFrame,
    columns: Sequence[str],
    *,
    dimension: int | None = None,
    privacy_unit: str | None = None,
    max_rows_per_unit: int = 1,
    selection_secret: int | None = None,
    affine: Affine | None = None,
) -> tuple[DataFrame, int]:
    """Returns ``(frame, d)``: a frame of one ``array<double>`` column of length d.

    Null values and arrays of the wrong length become NaN here, in the JVM
    (see the module docstring). The Gram kernel uses :func:`vector_frame`
    instead, which leaves that to the executors' numpy code (no JVM
    projection); both give the same rows to the non-finite policy.

    Args:
        df: the input.
        columns: several numeric columns, or one array/ML-vector column.
        dimension: d for an array or vector column (the schema does not say
            it, and taking it from the data would fail on empty inputs).
        privacy_unit: column whose values identify a privacy unit; each unit
            keeps min(m, its row count) rows, chosen pseudo-randomly by a
            keyed hash of the unit and the row's vector
            (:mod:`spark_dp.aggregates._bounding`): the choice is stable
            when Spark recomputes the frame. Rows with a null unit form one
            unit together.
        max_rows_per_unit: the contribution bound m.
        selection_secret: the key of that hash; None (the default) draws a
            fresh one from OS entropy for this frame. Never log it.
        affine: public per-column bounds and a constant column
            (:class:`Affine`; several numeric columns only); d counts the
            constant (and the clamping flag, the last element, with
            ``affine.flag``).
    """
    return vector_frame(
        df, columns, dimension=dimension, privacy_unit=privacy_unit, max_rows_per_unit=max_rows_per_unit,
        selection_secret=selection_secret, affine=affine, _normalize=True,
    )


def vector_columns(df: DataFrame, columns: Sequence[str], dimension: int | None = None
                   ) -> tuple[list[T.StructField], int]:
    """The schema checks of :func:`vector_frame` and d, from one schema read and no Spark call.

    Returns ``(fields, d)``: the columns' fields (one array or ML-vector
    column, or several numeric ones). Raises SchemaError / ConfigError as
    :func:`vector_frame` does.
    """
    if isinstance(columns, str) or not columns:
        raise ConfigError(f"The 'columns' parameter must be a non-empty list of column names. Got {columns!r} instead.")
    fields = [_field(df, c) for c in columns]
    f = fields[0]
    if len(fields) == 1 and (isinstance(f.dataType, T.ArrayType | T.StructType) or _is_vector_udt(f.dataType)):
        numeric_array = isinstance(f.dataType, T.ArrayType) and isinstance(f.dataType.elementType, _NUMERIC)
        if not (numeric_array or _is_vector_udt(f.dataType)):
            raise SchemaError(
                f"Column {f.name!r} has type {f.dataType.simpleString()}; expected a numeric column, "
                "an array of numbers or an ML vector."
            )
        return fields, _check_dimension(dimension, f.name)
    for f in fields:
        if not isinstance(f.dataType, _NUMERIC):
            raise SchemaError(f"Column {f.name!r} has type {f.dataType.simpleString()}; expected a numeric type.")
    if dimension is not None and dimension != len(fields):
        raise ConfigError(f"The 'dimension' parameter ({dimension}) does not match the {len(fields)} columns given.")
    return fields, len(fields)


def vector_frame(
    df: DataFrame,
    columns: Sequence[str],
    *,
    dimension: int | None = None,
    privacy_unit: str | None = None,
    max_rows_per_unit: int = 1,
    selection_secret: int | None = None,
    affine: Affine | None = None,
    _normalize: bool = False,
) -> tuple[DataFrame, int]:
    """Like :func:`vectorize`, without the JVM-side normalisation of bad rows.

    Returns ``(frame, d)``: one array column (``array<double>``) whose rows
    may be null, hold null elements or have a length other than d. The
    executors' :func:`~spark_dp.aggregates._blocks.list_to_block` turns such
    rows into NaN rows, which the non-finite policy then drops or zeroes.
    Skipping ``when(size(x) = d, …)`` and per-element ``coalesce`` in the JVM
    saves a projection that copies every array.

    Schema problems raise here, before any Spark job. ``privacy_unit``,
    ``max_rows_per_unit``, ``selection_secret`` and ``affine`` as for
    :func:`vectorize` (the selection hashes this frame's vector, as the
    kernels receive it).
    """
    fields, d = vector_columns(df, columns, dimension)
    f = fields[0]
    array_layout = len(fields) == 1 and (isinstance(f.dataType, T.ArrayType) or _is_vector_udt(f.dataType))
    if affine is not None:
        if array_layout:
            raise ConfigError(f"The 'bounds' parameter applies to numeric columns only; column {f.name!r} is an "
                              "array or vector (give its elements as columns).")
        d += affine.extra
    if affine is not None:
        arr: Column = double_array([f.name for f in fields], nan_for_null=_normalize, affine=affine)
    elif _is_vector_udt(f.dataType):
        from pyspark.ml.functions import vector_to_array

        arr = vector_to_array(F.col(f.name), dtype="float64")
    elif isinstance(f.dataType, T.ArrayType) and isinstance(f.dataType.elementType, T.DoubleType):
        arr = F.col(f.name)
    elif isinstance(f.dataType, T.ArrayType):
        arr = F.col(f.name).cast(T.ArrayType(T.DoubleType()))
    else:
        arr = double_array([f.name for f in fields], nan_for_null=_normalize)
    if _normalize and array_layout:
        arr = F.when(F.size(arr) == d, arr).otherwise(F.array_repeat(F.lit(float("nan")), d))

    if privacy_unit is not None:
        unit_type = check_unit(df, privacy_unit, max_rows_per_unit)
        # Contribution bounding: keep at most m rows per unit, ranked by a keyed
        # hash of (secret, unit, vector) with the vector as tie-break, so that a
        # recomputed frame keeps the same rows (see _bounding). The secret is
        # drawn here, once per frame: every pass over a cached frame shares it.
        rows = df.select(F.col(privacy_unit).alias(_UNIT_COL), arr.alias(VECTOR_COL))
        # The bounding shuffle gets the one partitioning rule's count.
        n = vector_partitions(df, [f.name for f in fields], d, privacy_unit)
        rows = keep_rows_per_unit(rows, _UNIT_COL, [VECTOR_COL], max_rows_per_unit, secret=selection_secret,
                                  partitions=n, unit_type=unit_type)
        return rows.select(VECTOR_COL), d
    return df.select(arr.alias(VECTOR_COL)), d


def check_unit(df: DataFrame, privacy_unit: str, max_rows_per_unit: int) -> T.DataType:
    """The unit column's type, after checking it exists and m ≥ 1 (SchemaError / ConfigError); no Spark call."""
    f = _field(df, privacy_unit)
    if max_rows_per_unit < 1:
        raise ConfigError(
            f"The 'max_rows_per_unit' parameter must be an int in the range [1, inf). Got {max_rows_per_unit!r} instead."
        )
    return f.dataType


def vector_partitions(df: DataFrame, columns: Sequence[str], d: int, privacy_unit: str | None = None) -> int:
    """The one partitioning rule (:mod:`._partitioning`) for shuffles and caches of ``df``'s vectors.

    Sized from the input as Spark estimates it (no projection: selecting d
    columns would cost d JVM round trips on classic Spark); one array or
    vector column counts as d values (Spark assumes one). ``privacy_unit`` is
    part of the input already.
    """
    return partitions_for(df, array_length=d if len(columns) == 1 and d > 1 else 1)


def _check_dimension(dimension: int | None, name: str) -> int:
    if dimension is None:
        raise ConfigError(
            f"The 'dimension' parameter is required for the array/vector column {name!r} "
            "(the vector length d; it is public and must not be read from the data)."
        )
    d = int(dimension)
    if d < 1:
        raise ConfigError(f"The 'dimension' parameter must be an int in the range [1, inf). Got {dimension!r} instead.")
    return d


def check_nonfinite(policy: str) -> str:
    if policy not in NONFINITE_POLICIES:
        raise ConfigError(
            f"The 'nonfinite' parameter must be one of {list(NONFINITE_POLICIES)}. Got {policy!r} instead."
        )
    return policy
