"""The sketches' hash family, on Spark's ``xxhash64`` (:mod:`spark_dp.aggregates.xxh64`).

The Spark build (:mod:`spark_dp.aggregates.sketch`) hashes with Spark SQL's
``xxhash64``; estimates for a short item list on the driver (and the
``spark-dp estimate`` command, which starts no Spark) use this module, which
computes the very same values. Tests check the two agree bit for bit.

Hash family (per repetition i, secret 64-bit seed sᵢ drawn from OS entropy):

* bucket  hᵢ(x) = pmod(xxhash64(sᵢ, x), b) — Spark's multi-argument
  ``xxhash64(a, x)`` is XXH64(x; seed = XXH64(a; seed 42)), so the seed enters
  *before* the item and different seeds give unrelated functions;
* sign    sᵢ(x) = 1 − 2·(xxhash64(sᵢ ⊕ SIGN_SALT, x) & 1), an independent
  function of the same family (a second seed derived from sᵢ).

Item encodings follow Spark: integers as 8-byte little-endian longs (integral
columns are cast to ``bigint`` before hashing), strings as their UTF-8 bytes,
and a null item leaves the chained hash unchanged (``xxhash64(sᵢ)`` alone).

The hash itself — constants, :data:`SIGN_SALT`, the scalar reference and the
vectorised version the Arrow build kernel uses — has one owner,
:mod:`spark_dp.aggregates.xxh64` (the aggregates layer cannot import this
family package, so the arrow points from here down to it); this module
re-exports the reference names and adds the family's buckets, signs and
dyadic ids. ``tests/test_sketch_kernel.py`` checks Spark, the scalar
reference and the vectorised version agree bit for bit.

Privacy never depends on the seeds (the noise covers any hash function);
they are secret until release only so that data cannot be chosen to collide.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from spark_dp.aggregates.xxh64 import (
    MASK,
    P1,
    P2,
    P3,
    P4,
    P5,
    SIGN_SALT,
    SPARK_SEED,
    sign_seed,
    spark_seed_state,
    spark_xxhash64,
    to_signed,
    xxh64_bytes,
    xxh64_long,
    xxh64_long_array,
)

__all__ = [
    "MASK", "P1", "P2", "P3", "P4", "P5", "SIGN_SALT", "SPARK_SEED", "buckets_and_signs", "hashed_ids", "sign_seed",
    "spark_seed_state", "spark_xxhash64", "to_signed", "xxh64_bytes", "xxh64_long", "xxh64_long_array",
]


def buckets_and_signs(items: Sequence, seeds: Sequence[int], buckets: int, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """Bucket indices hᵢ(x) and signs sᵢ(x) of every item in every repetition.

    Returns:
        (h, s), both of shape (k, len(items)): h int64 in [0, b), s in {−1, +1}.
    """
    k = len(seeds)
    h = np.empty((k, len(items)), dtype=np.int64)
    s = np.empty((k, len(items)), dtype=np.int64)
    for i, seed in enumerate(seeds):
        hv = spark_xxhash64(items, seed, kind)
        # pmod on a signed long: Python-style modulo of the signed value.
        h[i] = np.mod(hv, np.int64(buckets))
        sv = spark_xxhash64(items, sign_seed(seed), kind)
        s[i] = 1 - 2 * (sv & np.int64(1))
    return h, s


def hashed_ids(items: Sequence, seed: int, levels: int, kind: str) -> np.ndarray:
    """The public domain hash of a dyadic release: ``xxhash64(seed, item) & (2^L − 1)`` per item (int64).

    Equals Spark's ``xxhash64(lit(seed).cast('bigint'), item) & (2^L − 1)``
    (:func:`spark_dp.aggregates.sketch.hashed_id_column`); maps strings (or
    integers) to ids in [0, 2^L). A null item maps to −1 (never counted).
    """
    ids = spark_xxhash64(items, seed, kind) & np.int64((1 << int(levels)) - 1)
    ids[np.array([x is None for x in items], dtype=bool)] = -1
    return ids
