"""XXH64 as Spark's ``xxhash64`` computes it: the one owner of the hash.

Spark SQL's ``xxhash64`` is Collet's xxHash64 (the reference algorithm;
``org.apache.spark.sql.catalyst.expressions.XXH64``). Its multi-argument form
``xxhash64(a, x)`` is XXH64(x; seed = XXH64(a; seed 42)): the seed enters
*before* the item. Item encodings follow Spark: integers as 8-byte
little-endian longs (integral columns are cast to ``bigint`` before
hashing), strings as their UTF-8 bytes, and a null item leaves the chained
hash unchanged (``xxhash64(sᵢ)`` alone).

Two implementations of the same values, checked against each other and
against Spark bit for bit (``tests/test_sketch_build.py``,
``tests/test_sketch_kernel.py``):

* the scalar reference (:func:`xxh64_bytes`, :func:`xxh64_long`,
  :func:`spark_xxhash64`) — plain Python on one item at a time, used on the
  driver for short item lists and by the ``spark-dp estimate`` command;
* the vectorised version (:func:`xxh64_long_columns`,
  :func:`xxh64_string_columns`, :func:`spark_xxhash64_array`) — whole-array
  uint64 operations over Arrow buffers, used by the Arrow build kernel of
  :mod:`spark_dp.aggregates.sketch`.

:data:`SIGN_SALT` derives a sketch repetition's sign seed from its bucket
seed (:func:`sign_seed`); it lives here so that the Spark SQL build, the
Arrow kernel and the family package (:mod:`spark_dp.sketch.hashing`) share
one constant.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

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


def sign_seed(seed: int) -> int:
    """The seed of repetition i's sign hash, as a signed long (sᵢ ⊕ SIGN_SALT)."""
    return to_signed((seed & MASK) ^ SIGN_SALT)


# -- the scalar reference ---------------------------------------------------------
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


def spark_seed_state(seed: int) -> int:
    """The hash state after Spark's ``xxhash64(lit(seed: bigint), …)`` consumed the seed."""
    return xxh64_long(seed, SPARK_SEED)


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


# -- the vectorised version (np.uint64 arithmetic wraps) -----------------------------
_U = np.uint64
_P1, _P2, _P3, _P4, _P5 = _U(P1), _U(P2), _U(P3), _U(P4), _U(P5)
_HASH_BLOCK = 16384  # items per vectorised step: (2k × block) uint64 temporaries stay cache-sized


def _rotl_(x: np.ndarray, r: int, tmp: np.ndarray) -> np.ndarray:
    """In-place 64-bit rotate left of ``x`` by ``r`` (``tmp``: scratch of x's shape)."""
    np.right_shift(x, _U(64 - r), out=tmp)
    np.left_shift(x, _U(r), out=x)
    np.bitwise_or(x, tmp, out=x)
    return x


def _round0(lane: np.ndarray) -> np.ndarray:
    """XXH64 round(0, lane) = rotl(lane·P2, 31)·P1 (independent of the seed)."""
    x = lane * _P2
    x = (x << _U(31)) | (x >> _U(33))
    x *= _P1
    return x


def _fmix_(h: np.ndarray, tmp: np.ndarray) -> np.ndarray:
    np.right_shift(h, _U(33), out=tmp)
    h ^= tmp
    h *= _P2
    np.right_shift(h, _U(29), out=tmp)
    h ^= tmp
    h *= _P3
    np.right_shift(h, _U(32), out=tmp)
    h ^= tmp
    return h


def xxh64_long_columns(values: np.ndarray, states: np.ndarray) -> np.ndarray:
    """Spark's ``XXH64.hashLong(v, state)`` for every state × value.

    Args:
        values: int64 array of n items.
        states: uint64 array of s seeds (hash states).

    Returns:
        uint64 array of shape (s, n).
    """
    v = np.ascontiguousarray(values, dtype=np.int64).view(np.uint64)
    states = np.asarray(states, dtype=np.uint64)
    h = np.empty((states.size, v.size), dtype=np.uint64)
    h[:] = (states + _U(8))[:, None] + _P5  # seed + P5 + 8, wrapping
    tmp = np.empty_like(h)
    h ^= _round0(v)
    _rotl_(h, 27, tmp)
    h *= _P1
    h += _P4
    return _fmix_(h, tmp)


def xxh64_long_array(values: np.ndarray, seed: int) -> np.ndarray:
    """:func:`xxh64_long` over an int64 array of any shape (vectorised); unsigned uint64 results."""
    v = np.asarray(values, dtype=np.int64)
    return xxh64_long_columns(v.reshape(-1), np.array([int(seed) & MASK], dtype=np.uint64))[0].reshape(v.shape)


def spark_seed_states(seeds: Sequence[int]) -> np.ndarray:
    """The hash states after Spark's ``xxhash64(lit(seed: bigint), …)`` consumed each seed (uint64)."""
    vals = np.array([to_signed(int(s)) for s in seeds], dtype=np.int64)
    return xxh64_long_columns(vals, np.array([SPARK_SEED], dtype=np.uint64))[0]


def _string_buffers(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(offsets as int64 of length n + 1, data bytes padded with 8 zeros) of a (large_)string array."""
    odt = np.int64 if pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type) else np.int32
    bufs = arr.buffers()
    n = len(arr)
    if bufs[1] is None:
        offsets = np.zeros(n + 1, dtype=np.int64)
    else:
        offsets = np.frombuffer(bufs[1], dtype=odt, count=n + 1, offset=arr.offset * np.dtype(odt).itemsize)
        offsets = offsets.astype(np.int64)
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None and bufs[2].size else np.zeros(0, np.uint8)
    pad = np.zeros(data.size + 8, dtype=np.uint8)
    pad[: data.size] = data
    return offsets, pad


def _stripes(starts: np.ndarray, nstripes: np.ndarray, states: np.ndarray, w8: np.ndarray, tmp: np.ndarray) -> np.ndarray:
    """XXH64's 32-byte stripe phase + merge for strings of ≥ 32 bytes (``nstripes`` non-increasing)."""
    s, m = tmp.shape
    col = states[:, None]
    with np.errstate(over="ignore"):
        accs = []
        for init in ((P1 + P2) & MASK, P2, 0, (-P1) & MASK):
            v = np.empty((s, m), dtype=np.uint64)
            v[:] = col + _U(init)
            accs.append(v)
    neg = -nstripes
    for j in range(int(nstripes[0]) if m else 0):
        a = int(np.searchsorted(neg, -j, side="left"))  # strings with more than j stripes: a prefix
        t = tmp[:, :a]
        for q in range(4):
            v = accs[q][:, :a]
            v += w8[starts[:a] + (32 * j + 8 * q)] * _P2
            np.right_shift(v, _U(33), out=t)
            np.left_shift(v, _U(31), out=v)
            v |= t
            v *= _P1
    h = accs[0].copy()
    _rotl_(h, 1, tmp)
    for q, r in ((1, 7), (2, 12), (3, 18)):
        x = accs[q].copy()
        h += _rotl_(x, r, tmp)
    for q in range(4):
        x = accs[q]
        x *= _P2
        _rotl_(x, 31, tmp)
        x *= _P1
        h ^= x
        h *= _P1
        h += _P4
    return h


def xxh64_string_columns(arr: pa.Array, states: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """XXH64 of every string of ``arr`` (UTF-8 bytes) under every state, vectorised.

    Strings are grouped by length class (≥ 32 bytes or not, length mod 32) so
    that each class runs one fixed sequence of whole-array uint64 operations
    on 8-byte words gathered straight from Arrow's data buffer (unaligned
    strided views): no Python loop over rows. Nulls hash to the state
    itself, as in Spark (a null argument leaves the chained hash unchanged).

    Args:
        arr: a ``string``/``large_string`` (or binary) Arrow array.
        states: uint64 array of s seeds.

    Returns:
        ``(order, H)``: H (s, n) uint64 holds the hashes of ``arr[order]``
        (the kernel keeps this order and permutes its weights instead).
    """
    states = np.asarray(states, dtype=np.uint64)
    s, n = states.size, len(arr)
    offsets, pad = _string_buffers(arr)
    starts = offsets[:-1]
    lengths = np.diff(offsets)
    w8 = np.ndarray((pad.size - 7,), dtype="<u8", buffer=pad, offset=0, strides=(1,))
    w4 = np.ndarray((pad.size - 3,), dtype="<u4", buffer=pad, offset=0, strides=(1,))
    cls = (lengths & 31).astype(np.uint8)
    cls[lengths >= 32] += 32
    order = np.argsort(cls, kind="stable")  # radix sort of small ints
    counts = np.bincount(cls, minlength=64)
    bounds = np.concatenate([[0], np.cumsum(counts)])
    out = np.empty((s, n), dtype=np.uint64)
    col = states[:, None]
    for c in np.flatnonzero(counts):
        lo, hi = int(bounds[c]), int(bounds[c + 1])
        tail = int(c) & 31
        if c >= 32:  # long strings: sort the class by stripe count, descending
            sel = order[lo:hi]
            sel = sel[np.argsort(-(lengths[sel] // 32), kind="stable")]
            order[lo:hi] = sel
        for b0 in range(lo, hi, _HASH_BLOCK):
            ss = order[b0 : min(hi, b0 + _HASH_BLOCK)]
            m = ss.size
            st, ln = starts[ss], lengths[ss]
            tmp = np.empty((s, m), dtype=np.uint64)
            if c >= 32:
                ns = ln // 32
                h = _stripes(st, ns, states, w8, tmp)
                pos = st + 32 * ns
            else:
                h = np.empty((s, m), dtype=np.uint64)
                with np.errstate(over="ignore"):
                    h[:] = col + _P5
                pos = st
            h += ln.astype(np.uint64)
            for w in range(tail // 8):
                h ^= _round0(w8[pos + 8 * w])
                _rotl_(h, 27, tmp)
                h *= _P1
                h += _P4
            p = pos + 8 * (tail // 8)
            if tail & 4:
                h ^= w4[p].astype(np.uint64) * _P1
                _rotl_(h, 23, tmp)
                h *= _P2
                h += _P3
                p = p + 4
            for q in range(tail & 3):
                h ^= pad[p + q].astype(np.uint64) * _P5
                _rotl_(h, 11, tmp)
                h *= _P1
            out[:, b0 : b0 + m] = _fmix_(h, tmp)
    if arr.null_count:
        nulls = np.asarray(arr.is_null().to_numpy(zero_copy_only=False))[order]
        out[:, nulls] = col
    return order, out


def spark_xxhash64_array(arr: pa.Array, seeds: Sequence[int], kind: str) -> np.ndarray:
    """Spark's ``xxhash64(lit(seed).cast('bigint'), item)`` of every item, vectorised.

    Args:
        arr: Arrow array of strings (``kind='string'``) or integers
            (``kind='long'``, cast to int64 as Spark casts to bigint); nulls allowed.
        seeds: s signed or unsigned 64-bit seeds.

    Returns:
        int64 array of shape (s, n), in the order of ``arr``.
    """
    states = spark_seed_states(seeds)
    if kind == "string":
        order, h = xxh64_string_columns(arr, states)
        out = np.empty_like(h)
        out[:, order] = h
    elif kind == "long":
        arr = arr.cast(pa.int64())
        out = xxh64_long_columns(arr.fill_null(0).to_numpy(), states)
        if arr.null_count:
            out[:, np.asarray(arr.is_null().to_numpy(zero_copy_only=False))] = states[:, None]
    else:
        raise ValueError(f"unknown item kind {kind!r}")
    return out.view(np.int64)
