"""Executor-side helpers: Arrow batches to float64 blocks, policies, clipping.

Pure numpy; no Spark, no privacy. Every function here is vectorised over the
rows of a block.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def batch_to_block(batch: pa.RecordBatch, d: int) -> np.ndarray:
    """The batch's single list<double> column as an (n, d) float64 array.

    Rows arrive non-null with exactly d elements (see ``vectorize``); null
    elements become NaN.
    """
    col = batch.column(0)
    values = col.flatten()
    if values.null_count:
        values = pc.fill_null(values, float("nan"))
    block = values.to_numpy(zero_copy_only=False)
    if block.dtype != np.float64:
        block = block.astype(np.float64)
    return block.reshape(-1, d)


def apply_nonfinite(block: np.ndarray, policy: str) -> np.ndarray:
    """``drop``: rows holding NaN/±inf are removed; ``zero``: such entries become 0."""
    finite = np.isfinite(block)
    if finite.all():
        return block
    if policy == "drop":
        return block[finite.all(axis=1)]
    if policy == "zero":
        out = block.copy()
        out[~finite] = 0.0
        return out
    raise ValueError(f"unknown non-finite policy {policy!r}")


def row_norms(block: np.ndarray) -> np.ndarray:
    """L2 norms of the rows, without overflow for huge finite entries."""
    sq = np.einsum("ij,ij->i", block, block)
    bad = ~np.isfinite(sq)
    if bad.any():
        sub = block[bad]
        scale = np.max(np.abs(sub), axis=1)
        safe = np.where(scale > 0, scale, 1.0)
        sq_norm = np.einsum("ij,ij->i", sub / safe[:, None], sub / safe[:, None])
        out = np.sqrt(sq)
        out[bad] = scale * np.sqrt(sq_norm)
        return out
    return np.sqrt(sq)


def clip_rows(block: np.ndarray, norm_bound: float) -> np.ndarray:
    """Scales every row with ‖x‖₂ > B down to norm B (others unchanged)."""
    norms = row_norms(block)
    over = norms > norm_bound
    if not over.any():
        return block
    factors = np.ones_like(norms)
    factors[over] = norm_bound / norms[over]
    return block * factors[:, None]
