"""Contribution bounding keeps the same rows per unit when Spark recomputes the frame.

The m rows a privacy unit keeps must be a function of (a per-release secret,
the unit's multiset of rows) only. A cached frame that Spark recomputes (lost
executor, evicted block) over an input whose row order is not deterministic
must keep the very same rows, or a unit could contribute to a later pass of a
multi-pass release (the tensor ``fresh`` mode) a row other than the one that
was charged. With ``F.rand`` in the window order the random values attach to
row positions, so these tests fail: they recompute over a repartitioned,
reordered input and over an input that reshuffles its rows on every
evaluation, with the same secret.

The secret is pinned by patching ``secrets.randbits`` (the library draws it
there, fresh per frame); the last tests check that a fresh secret does change
the selection, so it is not a fixed function of the data.
"""

from __future__ import annotations

import math
import secrets
from collections import Counter

import numpy as np
import pytest
from pyspark.sql import functions as F

from spark_dp.aggregates import gram_matrix, vectorize
from spark_dp.aggregates._vectors import VECTOR_COL
from spark_dp.aggregates.moments import PASS_COL, prepare_rows
from spark_dp.aggregates.sketch import ITEM, UNIT, WEIGHT, prepare_items

M = 3
N_UNITS = 40


def _count(u: int) -> int:
    """Rows of unit u: 1…25, so some units have fewer than M rows."""
    return 1 + (u * 7) % 25


def _rows():
    """(unit, uid, v, item, w): uid repeats the unit inside the used columns; every
    fifth unit repeats its rows (v = j mod 4), so identical rows occur."""
    out = []
    for u in range(N_UNITS):
        for j in range(_count(u)):
            v = float(j % 4) if u % 5 == 0 else float(j)
            out.append((f"user{u}", float(u), v, f"item{u}-{int(v)}", ((int(v) % 7) - 3) / 4))
    return out


@pytest.fixture
def base(spark):
    return spark.createDataFrame(_rows(), "unit string, uid double, v double, item string, w double").repartition(4)


@pytest.fixture
def pinned_secret(monkeypatch):
    """Every secret the library draws during the test is the same value."""
    value = 0x5DEECE66D2B7E151628AED2A6ABF7158
    monkeypatch.setattr(secrets, "randbits", lambda k: value & ((1 << k) - 1))


def _reshuffler():
    """A mapInArrow function that reorders the rows of each batch anew on every evaluation
    (fresh entropy): an input whose order is not deterministic. Built in a closure so it
    is pickled by value (the executors cannot import this test module)."""

    def shuffle(batches):
        import numpy as np

        rng = np.random.default_rng()
        for batch in batches:
            yield batch.take(rng.permutation(batch.num_rows))

    return shuffle


def _nondeterministic(df):
    return df.mapInArrow(_reshuffler(), df.schema)


def _reordered(df):
    return df.orderBy(F.rand()).repartition(7)


def _vector_selection(frame) -> dict[int, list[tuple[float, float]]]:
    """unit → sorted (uid, v) rows kept (the vector is [uid, v])."""
    out: dict[int, list] = {}
    for (x,) in frame.select(VECTOR_COL).collect():
        out.setdefault(int(x[0]), []).append(tuple(x))
    return {u: sorted(r) for u, r in out.items()}


def _item_selection(frame) -> dict[str, list[tuple[str, float]]]:
    out: dict[str, list] = {}
    for unit, item, w in frame.select(UNIT, ITEM, WEIGHT).collect():
        out.setdefault(unit, []).append((item, w))
    return {u: sorted(r) for u, r in out.items()}


def _assert_counts(selection, key):
    assert set(selection) == {key(u) for u in range(N_UNITS)}
    for u in range(N_UNITS):
        assert len(selection[key(u)]) == min(M, _count(u)), f"unit {u}"


def _rows_of_unit(u):
    return [r for r in _rows() if r[1] == float(u)]


def test_vectorize_keeps_the_same_rows_over_a_reordered_input(spark, base, pinned_secret):
    first = _vector_selection(vectorize(base, ["uid", "v"], privacy_unit="unit", max_rows_per_unit=M)[0])
    again = _vector_selection(vectorize(_reordered(base), ["uid", "v"], privacy_unit="unit", max_rows_per_unit=M)[0])
    _assert_counts(first, int)
    assert again == first
    for u, kept in first.items():  # kept rows are rows of that unit
        assert not Counter(kept) - Counter((r[1], r[2]) for r in _rows_of_unit(u))


def test_cached_frame_recomputed_over_a_nondeterministic_input_keeps_the_same_rows(spark, base, pinned_secret):
    frame, _ = vectorize(_nondeterministic(base), ["uid", "v"], privacy_unit="unit", max_rows_per_unit=M)
    frame = frame.cache()
    try:
        first = _vector_selection(frame)
        frame.unpersist(blocking=True)  # as if the executors holding the cache were lost
        second = _vector_selection(frame)
    finally:
        frame.unpersist()
    _assert_counts(first, int)
    assert second == first


def test_fresh_mode_passes_are_stable_when_the_cache_is_recomputed(spark, base, pinned_secret):
    """The tensor ``fresh`` mode: every kept row lands in the same pass on every recomputation."""
    frame, _ = prepare_rows(_nondeterministic(base), ["uid", "v"], privacy_unit="unit", max_rows_per_unit=M,
                            passes=3, seed=12345)
    try:
        first = Counter((tuple(x), p) for x, p in frame.select(VECTOR_COL, PASS_COL).collect())
        frame.unpersist(blocking=True)
        second = Counter((tuple(x), p) for x, p in frame.select(VECTOR_COL, PASS_COL).collect())
    finally:
        frame.unpersist()
    assert sum(first.values()) == sum(min(M, _count(u)) for u in range(N_UNITS))
    assert second == first


def test_gram_matrix_with_units_is_the_same_over_a_reordered_input(spark, base, pinned_secret):
    a = gram_matrix(base, ["uid", "v"], norm_bound=100.0, privacy_unit="unit", max_rows_per_unit=M)
    b = gram_matrix(_nondeterministic(_reordered(base)), ["uid", "v"], norm_bound=100.0, privacy_unit="unit",
                    max_rows_per_unit=M)
    assert np.allclose(a, b, rtol=1e-12, atol=0)


def test_sketch_items_keep_the_same_rows_over_a_reordered_input(spark, base, pinned_secret):
    kw = dict(weight="w", privacy_unit="unit", max_items_per_unit=M)
    first = _item_selection(prepare_items(base, "item", **kw)[0])
    again = _item_selection(prepare_items(_reordered(base), "item", **kw)[0])
    rows, _ = prepare_items(_nondeterministic(base), "item", **kw)
    rows = rows.cache()
    try:
        cached = _item_selection(rows)
        rows.unpersist(blocking=True)
        recomputed = _item_selection(rows)
    finally:
        rows.unpersist()
    _assert_counts(first, lambda u: f"user{u}")
    assert again == first
    assert cached == first
    assert recomputed == first


def test_a_fresh_secret_changes_the_selection(spark, base):
    """Not a fixed function of the data: two frames (two releases) choose differently for some units."""
    sel = [_vector_selection(vectorize(base, ["uid", "v"], privacy_unit="unit", max_rows_per_unit=M)[0])
           for _ in range(2)]
    for s in sel:
        _assert_counts(s, int)
    changed = [u for u in range(N_UNITS) if sel[0][u] != sel[1][u]]
    # 30 units have more than M distinct rows; P(a given one keeps the same M) ≤ 1/C(4, 3) = 1/4.
    assert len(changed) >= 5, changed
    items = [_item_selection(prepare_items(base, "item", weight="w", privacy_unit="unit", max_items_per_unit=M)[0])
             for _ in range(2)]
    assert sum(items[0][u] != items[1][u] for u in items[0]) >= 5


def _canonical(x):
    """Row content up to what the release cannot tell apart: NaN → 'nan' (whatever its payload), −0.0 → 0.0
    (Spark hashes and orders them alike, so such rows tie and either may be kept), None kept."""
    return tuple(("nan" if math.isnan(v) else v + 0.0) if isinstance(v, float) else v for v in x)


def test_helper_is_a_function_of_the_secret_and_the_unit_multiset(spark):
    """Special values: ±0.0, NaN, null elements, null arrays and a null unit, with explicit secrets."""
    from spark_dp.aggregates._bounding import keep_rows_per_unit, new_secret

    nan, rows = float("nan"), []
    specials = [[0.0, 1.0], [-0.0, 1.0], [nan, 2.0], [None, 2.0], [2.0, None], None, [1.0, 2.0], [1.0, 2.0]]
    for u in [*(f"u{i}" for i in range(20)), None]:
        rows += [(u, x) for x in specials] + [(u, [float(j), float(j) ** 2]) for j in range(12)]
    df = spark.createDataFrame(rows, "u string, x array<double>").repartition(3)
    m = 4

    def kept(frame, secret):
        out: dict = {}
        for u, x in keep_rows_per_unit(frame, "u", ["x"], m, secret=secret).collect():
            out.setdefault(u, []).append(_canonical(x) if x is not None else None)
        return {u: sorted(r, key=repr) for u, r in out.items()}

    s1, s2 = new_secret(), new_secret()
    a = kept(df, s1)
    assert {len(r) for r in a.values()} == {m} and len(a) == 21
    assert kept(_reordered(df), s1) == a
    assert kept(_nondeterministic(df.repartition(5)), s1) == a
    assert kept(df, s2) != a
