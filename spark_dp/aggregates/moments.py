"""Third-moment power-step sums Xᵀ((XU)²) and Σ(XU)³, one pass over a DataFrame.

For a d×L matrix U of candidate vectors (captured in the ``mapInArrow``
closure, so it ships with the task; no SparkContext broadcast, Spark Connect
safe), each partition turns its Arrow batches into (n, d) float64 blocks,
applies the non-finite policy, clips rows to ‖x‖₂ ≤ B and accumulates with
BLAS:

    P = X U            (n × L)
    S += Xᵀ (P ∘ P)    (d × L)   = Σ_x (xᵀu_τ)² x     for every column τ
    m3 += 1ᵀ (P ∘ P ∘ P)         = Σ_x (xᵀu_τ)³

One partial (d·L + L + 1 doubles) leaves each partition; the driver sums them.
The d×d×d tensor is never formed. No noise and no privacy here.

Passes of the online power method read disjoint chunks of rows in ``fresh``
mode: :func:`prepare_rows` adds a pass index column ``pmod(xxhash64(seed, x, c),
passes)`` where c numbers the identical copies of x (1, 2, …). The assignment
is a function of the multiset of rows and the seed: adding or removing one row
adds or removes exactly one (x, c) pair and moves no other row to another
pass (a row position or ``rand()`` would: both shift when a row is inserted).
Numbering copies also keeps the passes balanced when rows repeat (categorical
data). The vectorised frame is cached once per decomposition.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from spark_dp.aggregates._blocks import apply_nonfinite, batch_to_block, clip_rows
from spark_dp.aggregates._vectors import VECTOR_COL, check_nonfinite, vectorize

PASS_COL = "__spark_dp_pass"
_COPY_COL = "__spark_dp_copy"
_PARTIAL_SCHEMA = "partial binary"


def moment_partials_fn(
    U: np.ndarray, norm_bound: float, nonfinite: str
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function: batches of one list<double> column → one partial."""
    U = np.ascontiguousarray(U, dtype=np.float64)
    d, L = U.shape

    def partials(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        S = np.zeros((d, L))
        m3 = np.zeros(L)
        count = 0
        for batch in batches:
            if batch.num_rows == 0:
                continue
            X = clip_rows(apply_nonfinite(batch_to_block(batch, d), nonfinite), norm_bound)
            if X.shape[0] == 0:
                continue
            P = X @ U
            P2 = P * P
            S += X.T @ P2
            m3 += np.einsum("nl,nl->l", P2, P)
            count += X.shape[0]
        out = np.concatenate([S.ravel(), m3, [float(count)]])
        yield pa.RecordBatch.from_arrays([pa.array([out.tobytes()], type=pa.binary())], names=["partial"])

    return partials


def prepare_rows(
    df: DataFrame,
    columns: Sequence[str],
    *,
    dimension: int | None = None,
    privacy_unit: str | None = None,
    max_rows_per_unit: int = 1,
    passes: int | None = None,
    seed: int = 0,
    cache: bool = True,
) -> tuple[DataFrame, int]:
    """The vectorised rows (one ``array<double>`` column), with a pass index if ``passes``.

    Args:
        df, columns, dimension, privacy_unit, max_rows_per_unit: as
            :func:`~spark_dp.aggregates.vectorize`.
        passes: if given, adds column ``PASS_COL`` = pmod(xxhash64(seed, x, c),
            passes), c the copy number of x among identical rows: each row
            belongs to exactly one pass, chosen from the row, its copy number
            and the seed alone (one shuffle by row value).
        seed: hash seed (the caller draws it).
        cache: cache the frame (call ``unpersist()`` when done).

    Returns:
        ``(frame, d)``.
    """
    frame, d = vectorize(df, columns, dimension=dimension, privacy_unit=privacy_unit, max_rows_per_unit=max_rows_per_unit)
    if passes is not None:
        copies = Window.partitionBy(VECTOR_COL).orderBy(VECTOR_COL)
        frame = frame.withColumn(_COPY_COL, F.row_number().over(copies)).select(
            VECTOR_COL,
            F.pmod(F.xxhash64(F.lit(int(seed) & (2**63 - 1)), F.col(VECTOR_COL), F.col(_COPY_COL)),
                   F.lit(int(passes))).alias(PASS_COL),
        )
    if cache:
        frame = frame.cache()
    return frame, d


def third_moment_sums(
    frame: DataFrame,
    U: np.ndarray,
    *,
    norm_bound: float,
    nonfinite: str = "drop",
    pass_index: int | None = None,
) -> tuple[np.ndarray, np.ndarray, float]:
    """Exact Σ(xᵀu)²x (d×L), Σ(xᵀu)³ (L,) and the row count over clipped rows.

    Args:
        frame: from :func:`prepare_rows`.
        U: (d, L) candidate vectors.
        norm_bound: B; rows with ‖x‖₂ > B are scaled to norm B.
        nonfinite: ``drop`` or ``zero``.
        pass_index: if given, only rows with ``PASS_COL == pass_index``.

    Returns:
        ``(S, m3, count)`` (zeros for an empty input).
    """
    check_nonfinite(nonfinite)
    U = np.asarray(U, dtype=np.float64)
    d, L = U.shape
    src = frame
    if pass_index is not None:
        src = src.where(F.col(PASS_COL) == int(pass_index))
    src = src.select(VECTOR_COL)
    parts = src.mapInArrow(moment_partials_fn(U, float(norm_bound), nonfinite), _PARTIAL_SCHEMA).toArrow()
    total = np.zeros(d * L + L + 1)
    for value in parts.column("partial").to_pylist():
        total += np.frombuffer(value, dtype=np.float64)
    return total[: d * L].reshape(d, L), total[d * L : d * L + L].copy(), float(total[-1])


def second_moment_sums(frame: DataFrame, d: int, *, norm_bound: float, nonfinite: str = "drop") -> tuple[np.ndarray, float]:
    """Exact Σxxᵀ (d×d) and the row count over the clipped rows of ``frame`` (one pass).

    Reads the same (cached) rows as :func:`third_moment_sums`, so whitening
    and the power passes see one set of rows.
    """
    check_nonfinite(nonfinite)
    B = float(norm_bound)

    def partials(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        acc = np.zeros((d, d))
        count = 0
        for batch in batches:
            if batch.num_rows == 0:
                continue
            X = clip_rows(apply_nonfinite(batch_to_block(batch, d), nonfinite), B)
            acc += X.T @ X
            count += X.shape[0]
        out = np.concatenate([acc.ravel(), [float(count)]])
        yield pa.RecordBatch.from_arrays([pa.array([out.tobytes()], type=pa.binary())], names=["partial"])

    parts = frame.select(VECTOR_COL).mapInArrow(partials, _PARTIAL_SCHEMA).toArrow()
    total = np.zeros(d * d + 1)
    for value in parts.column("partial").to_pylist():
        total += np.frombuffer(value, dtype=np.float64)
    M2 = total[: d * d].reshape(d, d)
    return (M2 + M2.T) / 2.0, float(total[-1])
