"""The Gram kernel as it was before the performance work (commit 783561c), for comparison.

A plain ``mapInArrow`` over the ``vectorize``d array column (JVM projection
``when(size(x) = d, x)``), and per Arrow batch: ``np.isfinite`` on the
block, row norms, a freshly allocated clipped copy, ``dsyrk`` into a new
matrix and ``np.triu``. (The overflow-safe norms of the real kernel are left
out: the benchmark data has no huge values.) Benchmarks only.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def _block(batch: pa.RecordBatch, d: int) -> np.ndarray:
    values = batch.column(0).flatten()
    if values.null_count:
        values = pc.fill_null(values, float("nan"))
    return values.to_numpy(zero_copy_only=False).astype(np.float64, copy=False).reshape(-1, d)


def _partials_fn(d: int, norm_bound: float, nonfinite: str):
    def partials(batches):
        from scipy.linalg.blas import dsyrk

        acc = np.zeros((d, d))
        for batch in batches:
            if batch.num_rows == 0:
                continue
            block = _block(batch, d)
            finite = np.isfinite(block)
            if not finite.all():
                if nonfinite == "drop":
                    block = block[finite.all(axis=1)]
                else:
                    block = np.where(finite, block, 0.0)
            norms = np.sqrt(np.einsum("ij,ij->i", block, block))
            over = norms > norm_bound
            if over.any():
                factors = np.ones_like(norms)
                factors[over] = norm_bound / norms[over]
                block = block * factors[:, None]
            if block.shape[0]:
                acc += np.triu(dsyrk(1.0, block.T, trans=0, lower=0))
        yield pa.RecordBatch.from_arrays([pa.array([acc.tobytes()], type=pa.binary())], names=["partial"])

    return partials


def gram_matrix_baseline(df, columns, *, norm_bound: float, nonfinite: str = "drop", dimension: int | None = None) -> np.ndarray:
    from spark_dp.aggregates import vectorize

    frame, d = vectorize(df, columns, dimension=dimension)
    total = np.zeros((d, d))
    for value in frame.mapInArrow(_partials_fn(d, float(norm_bound), nonfinite), "partial binary").toArrow().column(0).to_pylist():
        total += np.frombuffer(value, dtype=np.float64).reshape(d, d)
    return total + np.triu(total, 1).T
