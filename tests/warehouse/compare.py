"""Comparing a ledger export read back from a table with the Parquet export."""

from __future__ import annotations

import math

import pyarrow as pa


def _plain(value):
    """One cell as a comparable Python value: NaN → None, arrays → lists, times → aware UTC datetimes."""
    if value is None or isinstance(value, float) and math.isnan(value):
        return None
    if hasattr(value, "tolist") and not isinstance(value, str):
        value = value.tolist()
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if hasattr(value, "to_pydatetime"):
        value = value.to_pydatetime()
    if hasattr(value, "tzinfo") and hasattr(value, "astimezone"):
        from datetime import UTC

        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return value


def same_rows(df, expected: pa.Table) -> bool:
    """Whether Spark DataFrame ``df`` holds exactly ``expected``'s columns and rows (in ``seq`` order)."""
    got = df.toPandas().sort_values("seq").reset_index(drop=True)
    want = expected.to_pandas().sort_values("seq").reset_index(drop=True)
    assert list(got.columns) == list(want.columns), (list(got.columns), list(want.columns))
    for col in want.columns:
        a, b = [_plain(v) for v in got[col]], [_plain(v) for v in want[col]]
        assert a == b, (col, a, b)
    return True
