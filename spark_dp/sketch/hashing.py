"""The sketches' hash family: Spark's ``xxhash64`` reproduced in numpy/Python.

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
XXH64 is Collet's xxHash64 (the reference algorithm; Spark's
``org.apache.spark.sql.catalyst.expressions.XXH64``).

The Arrow build kernel needs the same hash vectorised over whole Arrow
arrays; the aggregates layer cannot import this (family) package, so that
copy lives in :func:`spark_dp.aggregates.sketch.xxh64_string_columns` /
:func:`~spark_dp.aggregates.sketch.spark_xxhash64_array`. This module stays
the scalar reference: ``tests/test_sketch_kernel.py`` checks Spark, this
module and the vectorised copy agree bit for bit.

Privacy never depends on the seeds (the noise covers any hash function);
they are secret until release only so that data cannot be chosen to collide.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

MASK = (1 << 64) - 1
P1 = 0x9E3779B185EBCA87
P2 = 0xC2B2AE3D27D4EB4F
P3 = 0x165667B19E3779F9
P4 = 0x85EBCA77C2B2AE63
P5 = 0x27D4EB2F165667C5
SPARK_SEED = 42
SIGN_SALT = 0x2545F4914F6CDD1D  # any fixed odd constant; documented in docs/sketch.md


def to_signed(u: int) -> int:
    """An unsigned 64-bit int as Java's signed ``long``."""
    u &= MASK
    return u - (1 << 64) if u >> 63 else u


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & MASK


def _fmix(h: int) -> int:
    h ^= h >> 33
    h = (h * P2) & MASK
    h ^= h >> 29
    h = (h * P3) & MASK
    h ^= h >> 32
    return h


def _round(acc: int, lane: int) -> int:
    acc = (acc + lane * P2) & MASK
    return (_rotl(acc, 31) * P1) & MASK


def xxh64_bytes(data: bytes, seed: int) -> int:
    """XXH64 of ``data`` with a 64-bit ``seed``; returns the unsigned value."""
    seed &= MASK
    n = len(data)
    off = 0
    if n >= 32:
        v1 = (seed + P1 + P2) & MASK
        v2 = (seed + P2) & MASK
        v3 = seed
        v4 = (seed - P1) & MASK
        while off <= n - 32:
            v1 = _round(v1, int.from_bytes(data[off : off + 8], "little"))
            v2 = _round(v2, int.from_bytes(data[off + 8 : off + 16], "little"))
            v3 = _round(v3, int.from_bytes(data[off + 16 : off + 24], "little"))
            v4 = _round(v4, int.from_bytes(data[off + 24 : off + 32], "little"))
            off += 32
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & MASK
        for v in (v1, v2, v3, v4):
            h ^= _round(0, v)
            h = (h * P1 + P4) & MASK
    else:
        h = (seed + P5) & MASK
    h = (h + n) & MASK
    while off <= n - 8:
        h ^= _round(0, int.from_bytes(data[off : off + 8], "little"))
        h = (_rotl(h, 27) * P1 + P4) & MASK
        off += 8
    if off + 4 <= n:
        h ^= (int.from_bytes(data[off : off + 4], "little") * P1) & MASK
        h = (_rotl(h, 23) * P2 + P3) & MASK
        off += 4
    while off < n:
        h ^= (data[off] * P5) & MASK
        h = (_rotl(h, 11) * P1) & MASK
        off += 1
    return _fmix(h)


def xxh64_long(value: int, seed: int) -> int:
    """Spark's ``XXH64.hashLong`` (XXH64 of the 8 little-endian bytes); unsigned result."""
    seed &= MASK
    h = (seed + P5 + 8) & MASK
    h ^= _round(0, value & MASK)
    h = (_rotl(h, 27) * P1 + P4) & MASK
    return _fmix(h)


# -- vectorised uint64 version for integer items (np.uint64 arithmetic wraps) --
def _rotl_np(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


def _fmix_np(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> np.uint64(33))
    h = h * np.uint64(P2)
    h = h ^ (h >> np.uint64(29))
    h = h * np.uint64(P3)
    return h ^ (h >> np.uint64(32))


def xxh64_long_array(values: np.ndarray, seed: int) -> np.ndarray:
    """``xxh64_long`` over an int64 array (vectorised); unsigned uint64 results."""
    v = np.asarray(values, dtype=np.int64).view(np.uint64)
    with np.errstate(over="ignore"):
        h = np.full(v.shape, (seed + P5 + 8) & MASK, dtype=np.uint64)
        k = _rotl_np(v * np.uint64(P2), 31) * np.uint64(P1)
        h = h ^ k
        h = _rotl_np(h, 27) * np.uint64(P1) + np.uint64(P4)
        return _fmix_np(h)


def spark_seed_state(seed: int) -> int:
    """The hash state after Spark's ``xxhash64(lit(seed: bigint), …)`` consumed the seed."""
    return xxh64_long(seed, SPARK_SEED)


def sign_seed(seed: int) -> int:
    """The seed of repetition i's sign hash, as a signed long (sᵢ ⊕ SIGN_SALT)."""
    return to_signed((seed & MASK) ^ SIGN_SALT)


def spark_xxhash64(items: Sequence, seed: int, kind: str) -> np.ndarray:
    """Spark's ``xxhash64(lit(seed).cast('bigint'), item)`` for each item, as int64.

    Args:
        items: strings (``kind='string'``) or integers (``kind='long'``);
            ``None`` is a null item.
        seed: a signed or unsigned 64-bit seed.
        kind: ``string`` or ``long``.
    """
    state = spark_seed_state(seed)
    items = list(items)
    out = np.empty(len(items), dtype=np.uint64)
    if kind == "long":
        nulls = np.array([x is None for x in items], dtype=bool)
        vals = np.array([0 if x is None else int(x) for x in items], dtype=np.int64)
        out[:] = xxh64_long_array(vals, state)
        out[nulls] = np.uint64(state)
    elif kind == "string":
        for idx, x in enumerate(items):
            out[idx] = state if x is None else xxh64_bytes(str(x).encode("utf-8"), state)
    else:
        raise ValueError(f"unknown item kind {kind!r}")
    return out.view(np.int64)


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
