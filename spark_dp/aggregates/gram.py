"""Exact second-moment matrix AᵀA of clipped rows, one pass over a DataFrame.

Executors: each partition's Arrow batches become (n, d) float64 blocks; the
non-finite policy is applied, rows are clipped to ‖a‖₂ ≤ B, and BLAS
``dsyrk`` accumulates the upper triangle of the partition's AᵀA. One partial
(d² doubles as bytes) leaves each partition; the driver sums them.

No noise and no privacy accounting here: this layer computes exact
aggregates only. Spark Connect safe (``mapInArrow``, no RDD API).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame

from spark_dp.aggregates._blocks import apply_nonfinite, batch_to_block, clip_rows
from spark_dp.aggregates._vectors import check_nonfinite, vectorize

_PARTIAL_SCHEMA = "partial binary"


def _upper_gram(block: np.ndarray) -> np.ndarray:
    """Upper triangle of blockᵀblock via BLAS syrk (lower triangle left 0)."""
    from scipy.linalg.blas import dsyrk

    if block.shape[0] == 0:
        return np.zeros((block.shape[1], block.shape[1]))
    # A C-ordered (n, d) block is a Fortran-ordered (d, n) matrix: syrk on it
    # with trans=0 gives blockᵀ·block without a copy.
    return np.triu(dsyrk(1.0, block.T, trans=0, lower=0))


def gram_partials_fn(d: int, norm_bound: float, nonfinite: str) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function: batches of one list<double> column → one partial."""

    def partials(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        acc = np.zeros((d, d), dtype=np.float64)
        for batch in batches:
            if batch.num_rows == 0:
                continue
            block = clip_rows(apply_nonfinite(batch_to_block(batch, d), nonfinite), norm_bound)
            acc += _upper_gram(block)
        yield pa.RecordBatch.from_arrays([pa.array([acc.tobytes()], type=pa.binary())], names=["partial"])

    return partials


def sum_partials(frame: DataFrame, d: int) -> np.ndarray:
    """Sums the partials on the driver; returns the full symmetric matrix."""
    total = np.zeros((d, d), dtype=np.float64)
    table = frame.toArrow()
    for value in table.column("partial").to_pylist():
        total += np.frombuffer(value, dtype=np.float64).reshape(d, d)
    return total + np.triu(total, 1).T


def gram_matrix(
    df: DataFrame,
    columns: Sequence[str],
    *,
    norm_bound: float,
    nonfinite: str = "drop",
    dimension: int | None = None,
    privacy_unit: str | None = None,
    max_rows_per_unit: int = 1,
) -> np.ndarray:
    """Exact AᵀA (d × d, float64) of the rows of ``df`` after clipping.

    Args:
        df: input DataFrame.
        columns: numeric columns, or one array/ML-vector column (then give
            ``dimension``).
        norm_bound: B; rows with ‖a‖₂ > B are scaled to norm B.
        nonfinite: ``drop`` (default) removes rows holding NaN/±inf/null;
            ``zero`` sets those entries to 0.
        dimension: the vector length for an array/vector column.
        privacy_unit: optional unit column; see ``vectorize``.
        max_rows_per_unit: rows kept per unit.

    Returns:
        The symmetric matrix Σᵢ aᵢaᵢᵀ over the kept, clipped rows (zeros for
        an empty input).
    """
    check_nonfinite(nonfinite)
    frame, d = vectorize(
        df, columns, dimension=dimension, privacy_unit=privacy_unit, max_rows_per_unit=max_rows_per_unit
    )
    return sum_partials(frame.mapInArrow(gram_partials_fn(d, float(norm_bound), nonfinite), _PARTIAL_SCHEMA), d)


def vector_dimension(df: DataFrame, columns: Sequence[str], dimension: int | None = None) -> int:
    """d for ``columns`` (validates the schema; runs no Spark job)."""
    return vectorize(df, columns, dimension=dimension)[1]
