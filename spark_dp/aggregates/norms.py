"""Exact histogram of row norms over a public grid, one pass (the input of ``norm_bound="auto"``).

The rows are the vectors a release would use — same columns, ``affine``
bounds, contribution bounding and non-finite policy as
:func:`~spark_dp.aggregates.gram_matrix` — before clipping. No noise here:
the privacy layer selects a quantile from these counts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame

from spark_dp.aggregates._blocks import apply_nonfinite, list_to_block, row_norms
from spark_dp.aggregates._partials import VectorPartials, collect_sum
from spark_dp.aggregates._vectors import Affine, check_nonfinite, vector_frame

_SCHEMA = "partial binary"


def _counts_fn(d: int, grid: np.ndarray, nonfinite: str) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def partials(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        counts = np.zeros(grid.size + 1, dtype=np.int64)
        for batch in batches:
            if batch.num_rows:
                block = apply_nonfinite(list_to_block(batch.column(0), d), nonfinite)
                if block.shape[0]:
                    counts += np.bincount(np.searchsorted(grid, row_norms(block), side="left"),
                                          minlength=grid.size + 1)
        yield pa.RecordBatch.from_arrays([pa.array([counts.tobytes()], type=pa.binary())], names=["partial"])

    return partials


def norm_counts(
    df: DataFrame,
    columns: Sequence[str],
    grid: np.ndarray,
    *,
    nonfinite: str = "drop",
    dimension: int | None = None,
    privacy_unit: str | None = None,
    max_rows_per_unit: int = 1,
    affine: Affine | None = None,
) -> np.ndarray:
    """Counts of rows per bucket of ``grid`` (increasing): bucket i holds grid[i−1] < ‖a‖₂ ≤ grid[i].

    Returns an int64 array of length len(grid) + 1 (the last bucket: norms
    above the grid). Arguments as for :func:`~spark_dp.aggregates.gram_matrix`.
    """
    check_nonfinite(nonfinite)
    grid = np.asarray(grid, dtype=np.float64)
    frame, d = vector_frame(df, columns, dimension=dimension, privacy_unit=privacy_unit,
                            max_rows_per_unit=max_rows_per_unit, affine=affine)
    partials = frame.mapInArrow(_counts_fn(d, grid, nonfinite), _SCHEMA)
    return collect_sum(partials, VectorPartials(grid.size + 1, dtype=np.int64), None)[0]


def _value_counts_fn(p: int, grid: np.ndarray) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def partials(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        counts = np.zeros((p, grid.size + 1), dtype=np.int64)
        for batch in batches:
            if batch.num_rows:
                block = list_to_block(batch.column(0), p)
                for j in range(p):
                    v = block[:, j]
                    v = v[np.isfinite(v)]  # NaN/±inf/null: not counted (per column, 0 or 1 per row either way)
                    counts[j] += np.bincount(np.searchsorted(grid, v, side="left"), minlength=grid.size + 1)
        yield pa.RecordBatch.from_arrays([pa.array([counts.tobytes()], type=pa.binary())], names=["partial"])

    return partials


def value_counts(
    df: DataFrame,
    columns: Sequence[str],
    grid: np.ndarray,
    *,
    privacy_unit: str | None = None,
    max_rows_per_unit: int = 1,
) -> np.ndarray:
    """Per column, counts of finite values per bucket of ``grid`` (increasing): grid[i−1] < v ≤ grid[i].

    The input of ``bounds="auto"``: the rows after contribution bounding,
    each finite value counted in its column (NaN, ±inf and null are not).
    Returns an int64 array (len(columns), len(grid) + 1), the last bucket
    holding the values above the grid. One pass, no noise.
    """
    grid = np.asarray(grid, dtype=np.float64)
    frame, p = vector_frame(df, columns, privacy_unit=privacy_unit, max_rows_per_unit=max_rows_per_unit)
    partials = frame.mapInArrow(_value_counts_fn(p, grid), _SCHEMA)
    return collect_sum(partials, VectorPartials(p * (grid.size + 1), dtype=np.int64), None)[0].reshape(p, grid.size + 1)
