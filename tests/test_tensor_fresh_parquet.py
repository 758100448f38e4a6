"""Fresh mode on the direct-Parquet path (issue #17): the tasks give every row the pass Spark gives it.

The Spark path numbers the copies of each row value with a window and hashes
``pmod(xxhash64(seed, x, c), passes)``; the tasks compute the same function
while reading the files (:mod:`spark_dp.aggregates._fresh`). Data with many
repeated values (within a unit, across units and files), -0.0 next to 0.0,
NaN and ±inf rows: every pass holds the same rows on both paths (same count,
same exact sums: quarter-integers make every sum exact in any order), so the
passes are disjoint, cover every kept row once and have the same sizes.
"""

from __future__ import annotations

import logging
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import spark_dp
from spark_dp.aggregates import _fresh
from spark_dp.aggregates.moments import parquet_rows, prepare_rows, third_moment_sums
from spark_dp.aggregates.xxh64 import xxh64_bytes, xxh64_long
from spark_dp.privacy import SeededSampler
from spark_dp.tensor.api import tensor_decomposition
from tests.test_tensor_parquet import small_splits  # noqa: F401 - the fixture: files split into several units

D = 3
COLS = [f"x{j}" for j in range(D)]


def write_files(path, seed=0, sizes=(130, 90, 70), distinct_per_file=False):
    """Quarter-integer rows in 3 files of 32-row row groups.

    ``distinct_per_file``: each file holds the same 70 distinct rows in another order (every unit's rows are
    distinct: the tasks' all-distinct shortcut, with copies only across units), else many repeats everywhere.
    """
    rng = np.random.default_rng(seed)  # test data, not noise
    os.makedirs(path, exist_ok=True)
    if distinct_per_file:
        base = np.unique(rng.integers(-40, 41, size=(80, D)), axis=0)[:70] / 4.0
        base[0], base[1] = [-0.0, 0.25, 0.5], [0.0, 0.25, 0.75]
        for i in range(3):
            X = base[rng.permutation(70)]
            pq.write_table(pa.table({c: X[:, j] for j, c in enumerate(COLS)}), f"{path}/part-{i}.parquet",
                           row_group_size=32)
        return path
    parts = []
    for i, m in enumerate(sizes):
        X = rng.integers(-2, 3, size=(m, D)) / 4.0  # 125 values: many copies, in every unit
        X[rng.random(m) < 0.5] = rng.integers(-40, 41, size=(1, D)) / 4.0  # one value repeated across files...
        X[: m // 3] = rng.integers(-400, 401, size=(m // 3, D)) / 4.0  # ...and mostly distinct rows
        if i == 0:
            X[3] = [-0.0, 0.25, 0.5]  # Spark hashes and compares -0.0 as 0.0: copies of the next row
            X[4] = [0.0, 0.25, 0.5]
            X[5, 1] = np.nan
            X[6, 2] = np.inf
        parts.append(X)
        pq.write_table(pa.table({c: X[:, j] for j, c in enumerate(COLS)}), f"{path}/part-{i}.parquet",
                       row_group_size=32)
    return path


def test_hashes_are_sparks():
    rng = np.random.default_rng(3)
    v = rng.integers(0, 2**63, 50, dtype=np.int64).view(np.uint64)
    s = rng.integers(0, 2**63, 50, dtype=np.int64).view(np.uint64)
    assert [int(h) for h in _fresh.hash_long(v, s)] == [xxh64_long(int(a), int(b)) for a, b in zip(v, s, strict=True)]
    c = rng.integers(1, 2**31, 50).astype(np.uint64)
    assert [int(h) for h in _fresh.hash_int(c, s)] == [
        xxh64_bytes(int(a).to_bytes(4, "little"), int(b)) for a, b in zip(c, s, strict=True)]


def test_copy_offsets_number_copies_across_units():
    g = [np.array(x, dtype=np.uint64) for x in ([1, 5, 9], [5, 7], [5, 9])]
    units = [(g[0], np.array([1]), np.array([3])), (g[1], np.array([0]), np.array([2])),
             (g[2], np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))]
    row = {5: [0.5, 0.0, 0.0], 9: [0.0, 0.0, 0.75]}  # the groups sharing a g: their exact rows

    def values(same_5_in_unit_1=True):
        bits = lambda *gs: _fresh.normalised_bits(np.array([row[x] for x in gs]))  # noqa: E731
        v1 = bits(5) if same_5_in_unit_1 else _fresh.normalised_bits(np.array([[0.25, 0.0, 0.0]]))
        return {0: (np.array([1, 2]), bits(5, 9)), 1: (np.array([0]), v1), 2: (np.array([0, 1]), bits(5, 9))}

    assert _fresh.shared_keys(units).tolist() == [5, 9]
    with pytest.raises(ValueError, match="exact rows"):
        _fresh.copy_offsets(units)  # never matched by g alone
    out = _fresh.copy_offsets(units, values())
    assert sorted(out) == [1, 2]
    assert out[1][0].tolist() == [0] and out[1][1].tolist() == [3]  # value 5: 3 copies in unit 0 before
    assert out[2][0].tolist() == [0, 1] and out[2][1].tolist() == [5, 1]  # 5: 3 + 2 before; 9: 1 before
    # unit 1's group of g 5 holds another row (a collision): numbered apart from the 5s, which skip it
    out = _fresh.copy_offsets(units, values(same_5_in_unit_1=False))
    assert sorted(out) == [2] and out[2][0].tolist() == [0, 1] and out[2][1].tolist() == [3, 1]


def _assign(units_X, passes, state):
    """Each row's pass as the direct path computes it: keys, exact values of shared g, offsets, passes."""
    hashes = [_fresh.unit_hashes(X, state) for X in units_X]
    groups = [_fresh.unit_groups(h) for h in hashes]
    shared = _fresh.shared_keys(groups)
    values = {}
    for u, (X, h) in enumerate(zip(units_X, hashes, strict=True)):
        idx, rows = _fresh.group_values(h, _fresh.normalised_bits(X), shared)
        if idx.size:
            values[u] = (idx, rows)
    offsets = _fresh.copy_offsets(groups, values)
    return [_fresh.unit_passes(h, passes, offsets.get(u)) for u, h in enumerate(hashes)]


def _reference(units_X, passes, state):
    """The definition: c numbers each exact (normalised) value's copies in row order; pass = pmod(h(g, c))."""
    seen: dict[bytes, int] = {}
    out = []
    for X in units_X:
        bits = _fresh.normalised_bits(X)
        g = _fresh.row_states(bits, state)
        c = np.empty(X.shape[0], dtype=np.uint64)
        for i in range(X.shape[0]):
            key = bits[i].tobytes()
            seen[key] = seen.get(key, 0) + 1
            c[i] = seen[key]
        out.append(np.mod(_fresh.hash_int(c, g).view(np.int64), passes))
    return out


@pytest.mark.parametrize("low_bits", [0, 3, 64])
def test_colliding_hashes_never_move_another_row(monkeypatch, low_bits):
    """Forced collisions (g cut to its low bits, or one constant): rows are still numbered by exact value.

    Each row's pass is the definition's (a function of the multiset of rows), so adding one row, a new value or
    a copy, in any unit, moves no other row: one pass per row, whatever collides.
    """
    real = _fresh.row_states
    mask = np.uint64((1 << low_bits) - 1)  # 64: the real hash
    monkeypatch.setattr(_fresh, "row_states", lambda bits, state: real(bits, state) & mask)
    rng = np.random.default_rng(8)  # test data, not noise
    units = [rng.integers(-3, 4, size=(n, D)) / 4.0 for n in (40, 25, 31)]  # many repeats, across units too
    units[1][:3] = units[0][:3]
    units[2][0] = [-0.0, 0.25, 0.5]  # -0.0 and 0.0 are one value (Spark's comparison)
    units[2][1] = [0.0, 0.25, 0.5]
    passes, state = 5, _fresh.seed_state(2**40 + 3)
    before = _pairs(units, _assign(units, passes, state))
    assert before == _pairs(units, _reference(units, passes, state))  # the definition's passes (Spark's)
    for u in range(3):
        for extra in (units[0][0], np.array([3.0, -2.0, 1.0])):  # a copy of an existing value; a new value
            more = [X if i != u else np.vstack([X[:5], extra, X[5:]]) for i, X in enumerate(units)]
            after = _pairs(more, _assign(more, passes, state))
            added = after - before
            assert not before - after, (u, extra)  # no row of D left its pass ...
            assert sum(added.values()) == 1 and next(iter(added))[0] == _fresh.normalised_bits(
                extra[None, :])[0].tobytes()  # ... and D' adds exactly the new row


def _pairs(units_X, passes_of):
    """The multiset of (exact normalised row, pass): what a pass holds (copies of a value are interchangeable)."""
    from collections import Counter

    return Counter((b.tobytes(), int(p)) for X, ps in zip(units_X, passes_of, strict=True)
                   for b, p in zip(_fresh.normalised_bits(X), ps, strict=True))


@pytest.mark.parametrize("seed, nonfinite, distinct", [(12345, "drop", False), (2**61 + 7, "zero", False),
                                                       (2**40 + 3, "drop", True)])  # int and bigint literals
@pytest.mark.usefixtures("small_splits")
def test_every_pass_holds_the_rows_spark_gives_it(spark, tmp_path, seed, nonfinite, distinct):
    path = write_files(str(tmp_path / "data"), distinct_per_file=distinct)
    passes = 5
    # the distinct case caches the rows as they are without copy offsets while assigning: every unit has some,
    # so none of those entries may serve a pass
    direct = parquet_rows([path], COLS, spark=spark, cache_bytes=(1 << 30) if distinct else 0)
    assert direct is not None and sum(len(t) for t in direct.tasks) > 3  # several units
    direct.assign_passes(passes, seed, prefill=(1e6, nonfinite))
    assert direct.fresh.offsets  # copies met across units
    frame, _ = prepare_rows(spark.read.parquet(path), COLS, passes=passes, seed=seed)
    U = np.array([[0.5, -0.25], [1.0, 0.75], [-0.5, 0.25]])
    try:
        counts = []
        for p in range(passes):
            S1, m1, n1 = third_moment_sums(frame, U, norm_bound=1e6, nonfinite=nonfinite, pass_index=p)
            S2, m2, n2 = third_moment_sums(direct, U, norm_bound=1e6, nonfinite=nonfinite, pass_index=p)
            assert n1 == n2 and np.array_equal(S1, S2) and np.array_equal(m1, m2), p
            counts.append(n2)
        _, _, total = third_moment_sums(direct, U, norm_bound=1e6, nonfinite=nonfinite)
    finally:
        frame.unpersist()
    kept = 210 if distinct else 290 - (2 if nonfinite == "drop" else 0)
    assert sum(counts) == total == kept and min(counts) > 0  # disjoint, every kept row once


@pytest.mark.usefixtures("small_splits")
def test_a_cached_unit_keeps_its_passes(spark, tmp_path):
    path = write_files(str(tmp_path / "data"))
    direct = parquet_rows([path], COLS, spark=spark)
    direct.assign_passes(4, 99)
    U = np.eye(D)[:, :2]
    first = [third_moment_sums(direct, U, norm_bound=2.0, pass_index=p) for p in range(4)]
    assert direct.last_pass.units_cached > 0  # served from the cache after the first pass
    again = [third_moment_sums(direct, U, norm_bound=2.0, pass_index=p) for p in range(4)]
    for (S1, m1, n1), (S2, m2, n2) in zip(first, again, strict=True):
        assert n1 == n2 and np.array_equal(S1, S2) and np.array_equal(m1, m2)


def test_assigning_continuous_rows_fills_the_cache_for_the_first_pass(spark, tmp_path):
    rng = np.random.default_rng(4)  # test data, not noise: no value twice
    path = str(tmp_path / "cont")
    os.makedirs(path)
    for i in range(2):
        X = rng.random((100, D))
        pq.write_table(pa.table({c: X[:, j] for j, c in enumerate(COLS)}), f"{path}/p{i}.parquet", row_group_size=32)
    U = np.eye(D)[:, :2]
    cached = parquet_rows([path], COLS, spark=spark)
    cached.assign_passes(3, 2**50 + 1, prefill=(0.9, "drop"))
    assert cached.fresh.offsets == {}
    plain = parquet_rows([path], COLS, spark=spark, cache_bytes=0)
    plain.assign_passes(3, 2**50 + 1)
    for p in range(3):
        S1, m1, n1 = third_moment_sums(cached, U, norm_bound=0.9, pass_index=p)
        if p == 0:
            assert cached.last_pass.units_read == 0 and cached.last_pass.units_cached > 0
        S2, m2, n2 = third_moment_sums(plain, U, norm_bound=0.9, pass_index=p)
        assert n1 == n2 and np.allclose(S1, S2, rtol=1e-13, atol=0) and np.allclose(m1, m2, rtol=1e-13, atol=0)


def _path_lines(caplog):
    return [r.getMessage() for r in caplog.records if r.name == "spark_dp"
            and ("Parquet path" in r.getMessage() or "Spark reader path" in r.getMessage())]


def test_fresh_release_takes_the_direct_path_with_the_spark_paths_release(spark, tmp_path, monkeypatch, caplog):
    import spark_dp.aggregates._scan as scan

    path = write_files(str(tmp_path / "data"))
    out = {}
    detect = scan.choose_source_paths
    for name in ("spark", "direct"):
        monkeypatch.setattr(scan, "choose_source_paths", detect if name == "direct" else (lambda *a, **k: None))
        session = spark_dp.DPSession("t.fresh", ledger=f"sqlite:///{tmp_path}/{name}.db", epsilon_limit=100.0,
                                     delta_limit=1e-3, output=str(tmp_path / name),
                                     sampler=SeededSampler(np.random.default_rng(5)))
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="spark_dp"):
            out[name] = tensor_decomposition(
                session, spark.read.parquet(path), columns=COLS, k=2, epsilon=50.0, delta=1e-4, norm_bound=100.0,
                restarts=3, iterations=3, rng=np.random.default_rng(11))
        lines = _path_lines(caplog)
        if name == "direct":
            assert lines and "tensor_decomposition: direct Parquet path, detected" in lines[-1]
        else:
            assert not any("direct Parquet path" in line for line in lines)
    a, b = out["spark"], out["direct"]
    assert a.manifest["params"]["mode"] == "fresh" and a.manifest["privacy"] == b.manifest["privacy"]
    for key in a.arrays:
        assert np.allclose(a.arrays[key], b.arrays[key], rtol=1e-9, atol=1e-9), key


def test_an_array_column_with_zero_policy_keeps_the_spark_path(spark, tmp_path, caplog):
    path = str(tmp_path / "arr")
    os.makedirs(path)
    pq.write_table(pa.table({"x": pa.array([[0.5, None, 0.25], [0.5, 0.0, 0.25]] * 10)}), f"{path}/p.parquet")
    session = spark_dp.DPSession("t.arr", ledger=f"sqlite:///{tmp_path}/l.db", epsilon_limit=100.0,
                                 delta_limit=1e-3, output=str(tmp_path / "out"))
    with caplog.at_level(logging.INFO, logger="spark_dp"):
        tensor_decomposition(session, spark.read.parquet(path), columns=["x"], dimension=3, k=1, epsilon=10.0,
                             delta=1e-4, norm_bound=1.0, restarts=2, iterations=2, nonfinite="zero",
                             rng=np.random.default_rng(1))
    lines = _path_lines(caplog)
    assert lines and "Spark reader path (fresh mode over an array column with nonfinite='zero')" in lines[-1]


def test_the_pass_seed_is_secret_whatever_the_callers_rng(spark, tmp_path, monkeypatch):
    """Two fresh-mode releases with one seeded ``rng``: the pass seeds differ (the session sampler's OS entropy)."""
    import spark_dp.aggregates.moments as moments
    from spark_dp.privacy import NumpySampler

    seeds = []
    real = moments.prepare_rows

    def recording(*args, **kw):
        seeds.append(kw["seed"])
        return real(*args, **kw)

    monkeypatch.setattr(moments, "prepare_rows", recording)
    rng = np.random.default_rng(0)  # test data, not noise
    df = spark.createDataFrame([tuple(float(v) for v in r) for r in rng.normal(0, 0.3, size=(60, D))], COLS)
    for i in range(2):
        session = spark_dp.DPSession(f"t.seed{i}", ledger=f"sqlite:///{tmp_path}/l.db", epsilon_limit=100.0,
                                     delta_limit=1e-3, output=str(tmp_path / "out"), sampler=NumpySampler())
        tensor_decomposition(session, df, columns=COLS, k=1, epsilon=10.0, delta=1e-4, norm_bound=1.0, restarts=2,
                             iterations=2, mode="fresh", rng=np.random.default_rng(42))
    assert len(seeds) == 2 and seeds[0] != seeds[1] and all(0 <= s < 2**62 for s in seeds)
    stale = np.random.default_rng(42)  # what the start-vector generator would have given
    assert not {int(stale.integers(0, 2**62)) for _ in range(50)} & set(seeds)
