"""Gaussian JL projection R·A of clipped rows, one pass, R never materialised.

R is an r×n matrix of i.i.d. N(0, 1); column i of R multiplies row aᵢ, so
R·A = Σᵢ R[:, i]·aᵢᵀ is a sum of per-row terms that each partition computes
for its own rows and reduces to one r×d partial.

Where the columns of R come from
    A counter-based generator: Philox4x32-10 (Salmon et al., "Parallel random
    numbers: as easy as 1, 2, 3", SC 2011), implemented here vectorised in
    numpy (uint64 arithmetic on 32-bit words) and checked against the
    Random123 known-answer vectors. The 64-bit key is a secret the caller
    supplies (the driver obtains it from the privacy chokepoint after the
    release is charged); the 128-bit counter of row i, block j is
    (h₁ mod 2³², h₁ div 2³², h₂ mod 2³², j), two 64-bit content hashes of the
    row (Spark's ``xxhash64`` with two different prefixes, i.e. a 96-bit row
    id) and the index j of the pair of normals. Each Philox output block
    gives two uniforms of 53 bits and, by Box–Muller, two N(0, 1) draws.

Why content hashes (partition independence)
    ``monotonically_increasing_id`` and (partition id, position) depend on
    how Spark splits the input, so a retried or re-planned job would see a
    different R. A hash of the row's content does not; but identical rows
    would then share a column of R, which changes the distribution
    (c identical rows would contribute c·g·aᵀ instead of Σⱼ gⱼ·aᵀ). So
    identical rows are first grouped (``groupBy(x).count()``, one shuffle of
    the distinct rows with map-side combining) and a group of multiplicity c
    contributes √c·g·aᵀ, which has exactly the distribution of Σⱼ₌₁..c gⱼ·aᵀ
    for i.i.d. gⱼ ~ N(0, I_r). The result is then a function of the data
    multiset and the key only (up to floating-point summation order). Two
    *different* rows share a column only on a 96-bit hash collision
    (probability ≈ n²/2⁹⁷).

Opt-in alternative, ``row_ids="partition"``
    One stream per partition: numpy's Philox4x64-10 bit generator keyed by
    the full 128-bit secret with the partition id in the top counter word
    (streams of different partitions cannot overlap before 2¹⁹² draws), and
    numpy's ``standard_normal`` for the partition's rows in order. No
    shuffle and numpy's fast normal sampler, so much cheaper, and every row
    still gets its own column of R (the distribution is exact); but the
    sample depends on how Spark partitions the input and on the row order
    within a partition. A retried task over the same split redraws the same
    columns; a re-planned job may not. Use it when the input's partitioning
    is deterministic (files read in a fixed order).

Caveats, stated where the mechanism is documented: the key is 64 bits and
Philox is a statistically strong, not a cryptographic, generator; the
normals are floating point (Box–Muller), not the secure sampler's discrete
Gaussian. This layer never imports the privacy package and adds no noise:
it computes R·A for a given key, exactly as the gram kernel computes AᵀA.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from spark_dp.aggregates._blocks import apply_nonfinite, batch_to_block, clip_rows
from spark_dp.aggregates._partials import VectorPartials, collect_sum
from spark_dp.aggregates._partitioning import partitions_for
from spark_dp.aggregates._vectors import (
    VECTOR_COL,
    check_nonfinite,
    vector_partitions,
    vectorize,
)
from spark_dp.params import ROW_IDS  # declared once, pyspark-free

_M0, _M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
_W0, _W1 = 0x9E3779B9, 0xBB67AE85
_MASK = np.uint64(0xFFFFFFFF)
_S32 = np.uint64(32)
_PARTIAL_SCHEMA = "partial binary"
_HASH_PREFIX_2 = "spark_dp.jl.row_id.2"
_CHUNK_ELEMENTS = 1 << 21  # Philox blocks generated at once (memory ~ 100 MB peak)


def philox4x32(counter: np.ndarray, key: tuple[int, int], rounds: int = 10) -> np.ndarray:
    """Philox4x32-R on a batch of counters.

    Args:
        counter: uint64 array of shape (..., 4) holding 32-bit words.
        key: two 32-bit key words.
        rounds: 10 (the standard Philox4x32-10).

    Returns:
        uint64 array of shape (..., 4) holding the 32-bit output words.
    """
    c0, c1, c2, c3 = (counter[..., i].astype(np.uint64) for i in range(4))
    k0, k1 = int(key[0]) & 0xFFFFFFFF, int(key[1]) & 0xFFFFFFFF
    for rnd in range(rounds):
        if rnd:
            k0, k1 = (k0 + _W0) & 0xFFFFFFFF, (k1 + _W1) & 0xFFFFFFFF
        p0 = _M0 * c0
        p1 = _M1 * c2
        hi0, lo0 = p0 >> _S32, p0 & _MASK
        hi1, lo1 = p1 >> _S32, p1 & _MASK
        c0, c1, c2, c3 = hi1 ^ c1 ^ np.uint64(k0), lo1, hi0 ^ c3 ^ np.uint64(k1), lo0
    return np.stack([c0, c1, c2, c3], axis=-1)


def _split_key(key: int) -> tuple[int, int]:
    key = int(key)
    return key & 0xFFFFFFFF, (key >> 32) & 0xFFFFFFFF


def row_normals(h1: np.ndarray, h2: np.ndarray, r: int, key: int) -> np.ndarray:
    """The columns of R for rows with ids (h1, h2): an (n, r) array of N(0, 1).

    Row i's draws depend only on (h1[i], h2[i], key), never on which other
    rows are in the batch.
    """
    h1 = np.asarray(h1).astype(np.int64).view(np.uint64)
    h2 = np.asarray(h2).astype(np.int64).view(np.uint64)
    n = h1.size
    pairs = (r + 1) // 2
    k = _split_key(key)
    out = np.empty((n, 2 * pairs), dtype=np.float64)
    rows_per_chunk = max(1, _CHUNK_ELEMENTS // max(pairs, 1))
    j = np.arange(pairs, dtype=np.uint64)
    for s in range(0, n, rows_per_chunk):  # chunks of many rows (memory bound), vectorised inside
        e = min(n, s + rows_per_chunk)
        m = e - s
        ctr = np.empty((m, pairs, 4), dtype=np.uint64)
        ctr[..., 0] = (h1[s:e] & _MASK)[:, None]
        ctr[..., 1] = (h1[s:e] >> _S32)[:, None]
        ctr[..., 2] = (h2[s:e] & _MASK)[:, None]
        ctr[..., 3] = j[None, :]
        words = philox4x32(ctr, k)
        # Two 53-bit uniforms in (0, 1] from the four 32-bit words, then Box–Muller.
        u1 = (((words[..., 0] << _S32) | words[..., 1]) >> np.uint64(11)).astype(np.float64)
        u2 = (((words[..., 2] << _S32) | words[..., 3]) >> np.uint64(11)).astype(np.float64)
        u1 = (u1 + 1.0) * 2.0**-53
        u2 = u2 * 2.0**-53
        rad = np.sqrt(-2.0 * np.log(u1))
        ang = 2.0 * np.pi * u2
        out[s:e, 0::2] = rad * np.cos(ang)
        out[s:e, 1::2] = rad * np.sin(ang)
    return out[:, :r]


def jl_block_partial(
    block: np.ndarray, h1: np.ndarray, h2: np.ndarray, counts: np.ndarray, *, r: int, key: int
) -> np.ndarray:
    """Σᵢ √cᵢ·gᵢ·aᵢᵀ for the rows of one block (r × d).

    Args:
        block: clipped rows, shape (n, d).
        h1, h2: the rows' 64-bit ids (int64), shape (n,).
        counts: multiplicities cᵢ ≥ 1, shape (n,).
        r: projection rows.
        key: the secret generator key.
    """
    if block.shape[0] == 0:
        return np.zeros((r, block.shape[1]))
    g = row_normals(h1, h2, r, key)
    g *= np.sqrt(np.asarray(counts, dtype=np.float64))[:, None]
    return g.T @ block


def partition_generator(key: int, partition_id: int) -> np.random.Generator:
    """``row_ids="partition"``: the partition's stream (Philox4x64 keyed by the 128-bit key)."""
    return np.random.Generator(np.random.Philox(key=int(key) & ((1 << 128) - 1), counter=[0, 0, 0, int(partition_id)]))


def jl_partials_fn(
    d: int, r: int, norm_bound: float, nonfinite: str, key: int, row_ids: str = "content"
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function: batches (x, h1, h2, count) → one r×d partial.

    With ``row_ids="partition"`` the batches hold x only and the columns of
    R come from the partition's stream (:func:`partition_generator`).
    """

    def partials(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        acc = np.zeros((r, d), dtype=np.float64)
        gen = None
        for batch in batches:
            if batch.num_rows == 0:
                continue
            block = batch_to_block(batch.select([0]), d)
            if row_ids == "partition":
                if gen is None:
                    from pyspark import TaskContext

                    gen = partition_generator(key, TaskContext.get().partitionId())
                g = gen.standard_normal((batch.num_rows, r))
                finite = np.isfinite(block).all(axis=1)
                if nonfinite == "drop" and not finite.all():
                    block, g = block[finite], g[finite]
                else:
                    block = apply_nonfinite(block, nonfinite)
                acc += g.T @ clip_rows(block, norm_bound)
                continue
            h1 = batch.column(1).to_numpy(zero_copy_only=False)
            h2 = batch.column(2).to_numpy(zero_copy_only=False)
            cnt = batch.column(3).to_numpy(zero_copy_only=False)
            finite = np.isfinite(block).all(axis=1)
            if nonfinite == "drop" and not finite.all():
                block, h1, h2, cnt = block[finite], h1[finite], h2[finite], cnt[finite]
            else:
                block = apply_nonfinite(block, nonfinite)
            block = clip_rows(block, norm_bound)
            acc += jl_block_partial(block, h1, h2, cnt, r=r, key=key)
        yield pa.RecordBatch.from_arrays([pa.array([acc.tobytes()], type=pa.binary())], names=["partial"])

    return partials


def row_id_frame(frame: DataFrame, partitions: int | None = None) -> DataFrame:
    """(x, h1, h2, count): distinct rows with their content ids and multiplicities.

    ``partitions``: the shuffle's partition count (None: the one rule of
    :mod:`spark_dp.aggregates._partitioning` on ``frame``), never
    ``spark.sql.shuffle.partitions``.
    """
    if partitions is None:
        partitions = partitions_for(frame)
    # An explicit hash exchange on the row: the groupBy plans none of its own.
    grouped = frame.repartition(int(partitions), F.col(VECTOR_COL)).groupBy(VECTOR_COL).count()
    return grouped.select(
        F.col(VECTOR_COL),
        F.xxhash64(F.col(VECTOR_COL)).alias("h1"),
        F.xxhash64(F.lit(_HASH_PREFIX_2), F.col(VECTOR_COL)).alias("h2"),
        F.col("count").cast("long").alias("count"),
    )


def jl_projection(
    df: DataFrame,
    columns: Sequence[str],
    *,
    r: int,
    key: int,
    norm_bound: float,
    nonfinite: str = "drop",
    dimension: int | None = None,
    privacy_unit: str | None = None,
    max_rows_per_unit: int = 1,
    row_ids: str = "content",
    affine=None,
) -> np.ndarray:
    """R·A (r × d) for the clipped rows of ``df[columns]``, R drawn from ``key``.

    Args:
        df, columns, nonfinite, dimension, privacy_unit, max_rows_per_unit:
            as for :func:`~spark_dp.aggregates.gram_matrix`.
        r: the number of rows of R.
        key: secret generator key (``content``: its low 64 bits key Philox4x32;
            ``partition``: all 128 bits key Philox4x64).
        norm_bound: B; rows are clipped to ‖a‖₂ ≤ B.
        row_ids: ``content`` (default; partition-independent, one shuffle of
            the distinct rows) or ``partition`` (no shuffle; depends on the
            partitioning), see the module doc.
        affine: public column bounds and a constant column, as for
            :func:`~spark_dp.aggregates.gram_matrix`.

    Returns:
        The r × d float64 matrix Σᵢ R[:, i]·aᵢᵀ (zeros for an empty input).
    """
    check_nonfinite(nonfinite)
    frame, d = vectorize(df, columns, dimension=dimension, privacy_unit=privacy_unit, max_rows_per_unit=max_rows_per_unit,
                         affine=affine)
    if row_ids not in ROW_IDS:
        raise ValueError(f"unknown row_ids {row_ids!r}; expected one of {list(ROW_IDS)}")
    if row_ids == "content":
        # The rule's exchange fixes the partial count (AQE keeps an explicit count): tree-summed when many.
        count = vector_partitions(df, columns, d, privacy_unit)
        ids = row_id_frame(frame, count)
    else:
        # Not coalesced (the columns of R follow the partition ids) and the count is not known: the driver
        # sums the partials as they come.
        ids, count = frame, None
    out = ids.mapInArrow(jl_partials_fn(d, int(r), float(norm_bound), nonfinite, int(key), row_ids), _PARTIAL_SCHEMA)
    return collect_sum(out, VectorPartials(r * d), count)[0].reshape(r, d)
