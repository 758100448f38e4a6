"""Fresh mode's pass assignment computed by the direct-Parquet tasks (no Spark shuffle).

The Spark path (:func:`spark_dp.aggregates.moments.prepare_rows`) gives a
row x its pass as ``pmod(xxhash64(seed, x, c), passes)``: Spark's xxhash64
of the seed (an ``int`` literal below 2³¹, else a ``bigint``), then x's
elements (``array<double>``; -0.0 hashed as 0.0, every NaN as the one
canonical NaN), then c (an ``int``), where c = 1, 2, … numbers the copies of
x among rows equal to it (equal as Spark compares arrays: -0.0 = 0.0,
NaN = NaN). The assignment is a function of the multiset of rows and the
seed: adding or removing one row adds or removes one (x, c) pair and moves
no other row.

Here the tasks compute the same function while reading the files, in up
to three steps:

1. **Keys** (one Spark job over the tasks, :func:`unit_groups`): each
   work unit (row groups of one file) groups its rows by exact (normalised)
   value and numbers the copies inside the unit; it sends the driver each
   group's keyed hash ``g = xxhash64(seed, x)`` (the state before c: 8 bytes
   per distinct row) and the counts above 1.
2. **Values** (a second job, only when some g is held by more than one
   group, in one unit or across units: a value repeated across units, or
   two different values whose g collide; :func:`shared_keys`,
   :func:`group_values`): the tasks send the exact (normalised) row of each
   such group, so that the driver matches groups by value, never by g alone.
3. **Offsets** (driver, :func:`copy_offsets`): a value present in several
   units gets its copies numbered across them in unit order: the copies of
   unit u start after those of the units before it. Only those (unit,
   group, offset) entries travel to the pass tasks, which then compute
   c = offset + local number and the pass exactly as Spark does
   (:func:`unit_passes`).

**Equal to Spark's assignment** row for row: copies are numbered among rows
that are equal (as Spark compares them), whatever their g; two different
rows whose g collide are numbered apart, each from 1, and get the pass
Spark gives them (``xxhash64(seed, x, c)`` continues from g, so equal g and
equal c give equal passes on both paths). Adding or removing one row
therefore moves no other row to another pass, even on a collision (by
chance at most n²/2⁶⁵, or chosen by someone who knows the seed).

The seed is drawn for every release from the session sampler's key (OS
entropy; :func:`spark_dp.tensor.api.pass_seed`), never from the
user-seedable random-start generator, and is not released.

Array columns with null *elements* under ``nonfinite="zero"`` are not
handled here (Spark's hash skips a null element, the tasks see NaN): the
caller keeps such requests on the Spark path; with ``drop`` those rows
never reach a pass, and their copies are among themselves.

Pure numpy (uint64 arithmetic wraps); no Spark, no privacy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from spark_dp.aggregates.xxh64 import _P1, _P2, _P3, _P4, _P5, MASK, SPARK_SEED, _fmix_, _rotl_, _round0, xxh64_long

_U = np.uint64
_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1


def seed_state(seed: int) -> int:
    """The hash state after Spark's ``xxhash64(F.lit(seed), …)`` consumed the seed (PySpark's literal type)."""
    seed = int(seed)
    if _INT_MIN <= seed <= _INT_MAX:  # F.lit of a small Python int is an IntegerType literal: hashInt
        return int(hash_int(np.array([seed & 0xFFFFFFFF], dtype=np.uint64), np.array([SPARK_SEED], dtype=np.uint64))[0])
    return xxh64_long(seed & MASK, SPARK_SEED)


def hash_long(values: np.ndarray, states: np.ndarray) -> np.ndarray:
    """Spark's ``XXH64.hashLong(v, state)`` elementwise (uint64 in, uint64 out)."""
    h = states + _P5
    h += _U(8)
    h ^= _round0(values)
    tmp = np.empty_like(h)
    _rotl_(h, 27, tmp)
    h *= _P1
    h += _P4
    return _fmix_(h, tmp)


def hash_int(values: np.ndarray, states: np.ndarray) -> np.ndarray:
    """Spark's ``XXH64.hashInt(v, state)`` elementwise (``values``: the ints' low 32 bits as uint64)."""
    h = states + _P5
    h += _U(4)
    h ^= (values & _U(0xFFFFFFFF)) * _P1
    tmp = np.empty_like(h)
    _rotl_(h, 23, tmp)
    h *= _P2
    h += _P3
    return _fmix_(h, tmp)


def normalised_bits(X: np.ndarray) -> np.ndarray:
    """The rows' doubles as Spark hashes and compares them: -0.0 as 0.0, every NaN as the canonical NaN (uint64)."""
    Xn = X + 0.0  # -0.0 + 0.0 = 0.0; everything else unchanged
    Xn[np.isnan(Xn)] = np.nan
    return np.ascontiguousarray(Xn).view(np.uint64)


def row_states(bits: np.ndarray, state: int) -> np.ndarray:
    """g = the hash state after ``xxhash64(seed, x)`` consumed each row's elements (state: :func:`seed_state`).

    :func:`hash_long` column by column, in place (one set of temporaries for the whole unit).
    """
    n = bits.shape[0]
    g = np.full(n, state, dtype=np.uint64)
    lane, tmp = np.empty(n, dtype=np.uint64), np.empty(n, dtype=np.uint64)
    for j in range(bits.shape[1]):
        np.multiply(bits[:, j], _P2, out=lane)  # round(0, v) = rotl(v * P2, 31) * P1
        _rotl_(lane, 31, tmp)
        lane *= _P1
        g += _P5 + _U(8)
        g ^= lane
        _rotl_(g, 27, tmp)
        g *= _P1
        g += _P4
        _fmix_(g, tmp)
    return g


def local_groups(bits: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | np.ndarray:
    """The unit's rows grouped by exact value, groups ordered by (g, value).

    Returns ``(group, number, first)``: each row's group index, its copy
    number inside the unit (0, 1, …), and each group's first row
    (``g[first]`` are the groups' g, non-decreasing). When every g is
    distinct (no repeated value: the common case of continuous data) it
    returns just the sorted g instead: each row is its own group, numbered 0,
    and group j is the row whose g is the j-th smallest.
    """
    n = g.shape[0]
    gs = np.sort(g)
    if not (gs[1:] == gs[:-1]).any():
        return gs
    order = np.argsort(g)  # copies are equal values: the order among them does not matter
    gs, bs = g[order], bits[order]
    same_g = gs[1:] == gs[:-1]
    same = same_g & (bs[1:] == bs[:-1]).all(axis=1)
    if (same_g & ~same).any():  # two different values with one g (rare): order by (g, value) exactly
        order = np.lexsort(tuple(bits[:, j] for j in range(bits.shape[1] - 1, -1, -1)) + (g,))
        gs, bs = g[order], bits[order]
        same = (gs[1:] == gs[:-1]) & (bs[1:] == bs[:-1]).all(axis=1)
    new = np.concatenate([[True], ~same]) if n else np.zeros(0, dtype=bool)
    starts = np.flatnonzero(new)
    gid_sorted = np.cumsum(new) - 1
    group = np.empty(n, dtype=np.int64)
    number = np.empty(n, dtype=np.int64)
    group[order] = gid_sorted
    number[order] = np.arange(n) - starts[gid_sorted]
    return group, number, order[starts]


class UnitHashes(NamedTuple):
    """A unit's rows hashed and grouped once (:func:`unit_hashes`): each row's g and :func:`local_groups`."""

    g: np.ndarray
    groups: tuple[np.ndarray, np.ndarray, np.ndarray] | np.ndarray


def unit_hashes(X: np.ndarray, state: int) -> UnitHashes:
    """The raw rows' (before the policy and clipping) g and groups."""
    bits = normalised_bits(X)
    g = row_states(bits, state)
    return UnitHashes(g, local_groups(bits, g))


def unit_groups(hashes: UnitHashes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A unit's groups for the driver: ``(g, big, counts)`` = each group's g, and the groups of counts above 1."""
    g, groups = hashes
    if isinstance(groups, np.ndarray):  # all distinct
        return groups, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    group, _, first = groups
    counts = np.bincount(group, minlength=first.shape[0])
    big = np.flatnonzero(counts > 1)
    return g[first], big, counts[big]


def shared_keys(units: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> np.ndarray:
    """The g values held by more than one group (across units, or two values of one unit), sorted and unique.

    Their groups' copies may have to be numbered across groups; :func:`copy_offsets`
    needs those groups' exact rows (:func:`group_values`) to number them by value.
    """
    if not units:
        return np.zeros(0, dtype=np.uint64)
    gs = np.sort(np.concatenate([u[0] for u in units]))
    return np.unique(gs[1:][gs[1:] == gs[:-1]])


def group_values(hashes: UnitHashes, bits: np.ndarray, shared: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(groups, rows)``: the unit's groups whose g is in ``shared`` and each one's normalised row (uint64 bits).

    ``bits``: :func:`normalised_bits` of the unit's raw rows (those :func:`unit_hashes` hashed).
    """
    g, groups = hashes
    if isinstance(groups, np.ndarray):  # all distinct: group j is the row with the j-th smallest g
        idx = np.flatnonzero(np.isin(groups, shared))
        rows = np.argsort(g, kind="stable")[idx]
    else:
        _, _, first = groups
        idx = np.flatnonzero(np.isin(g[first], shared))
        rows = first[idx]
    return idx.astype(np.int64), np.ascontiguousarray(bits[rows])


def copy_offsets(units: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]],
                 values: dict[int, tuple[np.ndarray, np.ndarray]] | None = None,
                 ) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Where each unit's copies start, for the groups whose value other units (or groups) hold.

    ``units[u]`` is :func:`unit_groups`' result for unit u (units in task
    order); ``values[u]`` is :func:`group_values`' result for unit u and
    :func:`shared_keys` (required when that is not empty). Copies are
    numbered per exact value (g and the row's bits), in unit order, then
    group order: groups with one g but different rows are numbered apart.
    Returns ``{u: (groups, offsets)}`` with offsets > 0 only.
    """
    if not units:
        return {}
    sizes = [u[0].shape[0] for u in units]
    all_g = np.concatenate([u[0] for u in units])
    shared = shared_keys(units)
    if not any(u[1].size for u in units) and not shared.size:
        return {}  # no value in two units (nor two groups): every copy number is local
    base = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    key = np.arange(all_g.shape[0], dtype=np.int64)  # a group whose g no other group holds: its own value
    if shared.size:
        at = np.flatnonzero(np.isin(all_g, shared))
        if values is None:
            raise ValueError("bug: groups share a g; their exact rows (group_values) are needed to number copies")
        pos, rows = [], []
        for u, (idx, bits) in values.items():
            pos.append(base[u] + idx)
            rows.append(bits.reshape(idx.shape[0], -1))
        pos_a = np.concatenate(pos) if pos else np.zeros(0, dtype=np.int64)
        if not np.array_equal(np.sort(pos_a), at):
            raise ValueError("bug: the exact rows given do not match the groups that share a g")
        full = np.column_stack([all_g[pos_a], np.concatenate(rows)]) if pos_a.size else np.zeros((0, 1), np.uint64)
        _, inverse = np.unique(full, axis=0, return_inverse=True)  # one id per exact (g, row)
        key[pos_a] = all_g.shape[0] + inverse.reshape(-1)
    unit_of = np.repeat(np.arange(len(units)), sizes)
    group_of = np.concatenate([np.arange(s) for s in sizes])
    counts = np.ones(all_g.shape[0], dtype=np.int64)
    for u, (_, big, c) in enumerate(units):
        counts[base[u] + big] = c
    order = np.argsort(key, kind="stable")  # ties (one value) in unit, then group order
    gs, cs = key[order], counts[order]
    run_start = np.concatenate([[True], gs[1:] != gs[:-1]])
    csum = np.cumsum(cs)
    before = csum - cs  # copies before this entry, over all entries
    start_of_run = np.maximum.accumulate(np.where(run_start, np.arange(gs.shape[0]), 0))
    offsets = before - before[start_of_run]
    keep = offsets > 0
    out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    if keep.any():
        idx = order[keep]
        for u in np.unique(unit_of[idx]):
            mine = unit_of[idx] == u
            out[int(u)] = (group_of[idx][mine], offsets[keep][mine])
    return out


def unit_passes(hashes: UnitHashes, passes: int, offsets: tuple[np.ndarray, np.ndarray] | None) -> np.ndarray:
    """Each raw row's pass: pmod(xxhash64(seed, x, c), passes) with c = offset + number in the unit + 1."""
    g, groups = hashes
    if isinstance(groups, np.ndarray):  # all distinct: c = 1, plus the offset of a value other units hold
        c = np.ones(g.shape[0], dtype=np.int64)
        if offsets is not None:
            shared = groups[offsets[0]]  # sorted: group j is the j-th smallest g
            at = np.minimum(np.searchsorted(shared, g), shared.shape[0] - 1)
            hit = shared[at] == g
            c[hit] += offsets[1][at[hit]]
    else:
        group, number, first = groups
        c = number + 1
        if offsets is not None:
            off = np.zeros(first.shape[0], dtype=np.int64)
            off[offsets[0]] = offsets[1]
            c += off[group]
    h = hash_int(c.astype(np.uint64), g).view(np.int64)
    return np.mod(h, int(passes))  # Spark's pmod: non-negative for positive passes
