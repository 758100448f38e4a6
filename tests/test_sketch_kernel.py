"""The Arrow (``mapInArrow``) CountSketch kernel builds exactly the SQL build's table.

Two layers of evidence:

* the kernel's vectorised XXH64 over Arrow buffers equals Spark's own
  ``xxhash64`` and the scalar reference in :mod:`spark_dp.sketch.hashing` bit
  for bit, for strings of every length class (empty, 1–3, 4–7, 8–31 bytes and
  ≥ 32 bytes with differing stripe counts, multi-byte UTF-8), sliced and
  ``large_string`` arrays, 64-bit integers at the extremes, and nulls;
* ``sketch_table(method="arrow")`` equals ``method="sql"`` exactly (dyadic
  weights, so float sums are exact in any order) on strings, integers,
  weights and their non-finite policies, both null policies, privacy-unit
  bounding, multi-chunk partitions and the sparse (large k·b) output.
"""

import numpy as np
import pyarrow as pa
import pytest
from pyspark.sql import functions as F

import spark_dp.aggregates.sketch._kernels as sk_kernels
from spark_dp.aggregates.sketch import sketch_table, spark_xxhash64_array, xxh64_string_columns
from spark_dp.errors import ConfigError
from spark_dp.sketch.hashing import spark_seed_state, spark_xxhash64, to_signed

SEEDS = [0, 5, -3, 2**63 - 5, 0x123456789ABCDEF0, to_signed(2**64 - 7), 77]
GEN = np.random.default_rng(3)
STRINGS = (
    [None, "", "a", "ab", "abc", "abcd", "hello w", "12345678", "x" * 31, "y" * 32, "z" * 33, "q" * 100]
    + ["ünïcødé ☃" * j for j in range(1, 12)]
    + ["a" * j for j in range(32, 140, 7)]  # long strings with 1…4 stripes and every tail class
    + [bytes(GEN.integers(32, 127, GEN.integers(0, 90))).decode() for _ in range(200)]
    + ["日本語テキスト" * 3, "\x00\x01", "🙂" * 9]
)
INTS = [None, 0, 1, -1, 2**63 - 1, -(2**63), 123456789012, 7]


def test_vectorised_hash_matches_spark_and_reference(spark):
    ds = spark.createDataFrame([(s,) for s in STRINGS], "s string")
    di = spark.createDataFrame([(s,) for s in INTS], "s bigint")
    got_s = spark_xxhash64_array(pa.array(STRINGS, pa.string()), SEEDS, "string")
    got_i = spark_xxhash64_array(pa.array(INTS, pa.int64()), SEEDS, "long")
    for i, seed in enumerate(SEEDS):
        spark_s = [r[0] for r in ds.select(F.xxhash64(F.lit(seed).cast("long"), "s")).collect()]
        assert got_s[i].tolist() == spark_s
        assert got_s[i].tolist() == spark_xxhash64(STRINGS, seed, "string").tolist()
        spark_i = [r[0] for r in di.select(F.xxhash64(F.lit(seed).cast("long"), "s")).collect()]
        assert got_i[i].tolist() == spark_i


def test_vectorised_hash_on_sliced_and_large_string_arrays():
    arr = pa.array(STRINGS, pa.string())
    ref = spark_xxhash64_array(arr, SEEDS[:3], "string")
    for view in (arr.slice(7), arr.slice(7, 40), arr.cast(pa.large_string()).slice(3)):
        off = 7 if len(view) != len(arr) - 3 else 3
        got = spark_xxhash64_array(view, SEEDS[:3], "string")
        assert np.array_equal(got, ref[:, off : off + len(view)])
    # the sorted form: hashes of arr[order]
    states = np.array([spark_seed_state(s) for s in SEEDS[:2]], dtype=np.uint64)
    order, h = xxh64_string_columns(arr, states)
    assert sorted(order.tolist()) == list(range(len(arr)))
    assert np.array_equal(h.view(np.int64), ref[:2, order])
    empty = spark_xxhash64_array(pa.array([], pa.string()), SEEDS[:2], "string")
    assert empty.shape == (2, 0)


def _both(df, column, **kw):
    arrow = sketch_table(df, column, method="arrow", **kw)
    sql = sketch_table(df, column, method="sql", **kw)
    return arrow, sql


def _strings_df(spark, n=4000, parts=3):
    vocab = [s for s in STRINGS if s is not None] + [f"item-{i}" for i in range(300)]
    idx = GEN.zipf(1.3, n) % len(vocab)
    items = [vocab[j] for j in idx] + [None] * 7
    weights = GEN.integers(-12, 13, len(items)) / 8.0  # dyadic, some outside [−1, 1]
    weights[::97] = np.nan
    return spark.createDataFrame(list(zip(items, weights.tolist())), "item string, w double").repartition(parts)


@pytest.mark.parametrize("signed", [True, False], ids=["countsketch", "countmin"])
@pytest.mark.parametrize("nulls", ["item", "drop"])
@pytest.mark.parametrize("preaggregate", [True, False])
def test_arrow_equals_sql_on_strings(spark, signed, nulls, preaggregate):
    df = _strings_df(spark)
    arrow, sql = _both(df, "item", seeds=SEEDS, buckets=37, signed=signed, nulls=nulls, preaggregate=preaggregate)
    assert np.array_equal(arrow, sql)
    assert arrow.sum() != 0
    # weights, clipped to [−1, 1], NaN dropped or zeroed
    for nonfinite in ("drop", "zero"):
        arrow, sql = _both(df, "item", seeds=SEEDS, buckets=37, signed=signed, nulls=nulls, weight="w",
                           nonfinite=nonfinite, preaggregate=preaggregate)
        assert np.array_equal(arrow, sql)


def test_null_policies_differ_as_declared(spark):
    df = spark.createDataFrame([("a",), (None,), (None,), ("",)], "item string")
    as_item = sketch_table(df, "item", seeds=SEEDS[:2], buckets=101, signed=False, method="arrow")
    dropped = sketch_table(df, "item", seeds=SEEDS[:2], buckets=101, signed=False, nulls="drop", method="arrow")
    assert as_item.sum(axis=1).tolist() == [4.0, 4.0]
    assert dropped.sum(axis=1).tolist() == [2.0, 2.0]  # the empty string is an item, not a null
    assert not np.array_equal(as_item, dropped)


@pytest.mark.parametrize("dtype", ["int", "bigint", "smallint"])
def test_arrow_equals_sql_on_integers(spark, dtype):
    items = [int(x) for x in GEN.integers(-200, 200, 3000)] + [None] * 3 + [32000, -32000]
    df = spark.createDataFrame([(x, float(j % 5) / 4) for j, x in enumerate(items)], f"x {dtype}, w double")
    for kw in ({}, {"weight": "w"}, {"nulls": "drop", "signed": False}):
        arrow, sql = _both(df.repartition(2), "x", seeds=SEEDS[:4], buckets=64, **kw)
        assert np.array_equal(arrow, sql)
    if dtype == "int":  # 64-bit extremes need bigint
        return
    big = spark.createDataFrame([(x,) for x in INTS], "x bigint")
    arrow, sql = _both(big, "x", seeds=SEEDS, buckets=1000)
    assert np.array_equal(arrow, sql)


def test_arrow_equals_sql_with_privacy_unit_bounding(spark):
    # Bounding keeps random rows; these inputs make the table independent of the choice:
    # u1 has 6 rows of one item, u2 5 rows of another, u3/u4 fewer than the bound.
    rows = ([("x", "u1")] * 6 + [("y", "u2")] * 5 + [("a", "u3"), ("b", "u3"), ("ü", "u4"), (None, "u4")]
            + [("n", None)] * 4)
    df = spark.createDataFrame(rows, "item string, unit string")
    arrow, sql = _both(df, "item", seeds=SEEDS[:3], buckets=1 << 12, privacy_unit="unit", max_items_per_unit=3)
    assert np.array_equal(arrow, sql)
    assert np.abs(arrow).sum(axis=1).max() <= 15.0
    unsigned = sketch_table(df, "item", seeds=SEEDS[:3], buckets=1 << 12, privacy_unit="unit", max_items_per_unit=3,
                            signed=False, method="arrow")
    assert unsigned.sum(axis=1).tolist() == [3.0 + 3 + 2 + 2 + 3] * 3


def test_multichunk_partitions_and_sparse_output(spark, monkeypatch):
    df = _strings_df(spark, n=3000, parts=2)
    sql = sketch_table(df, "item", seeds=SEEDS, buckets=37, weight="w", method="sql")
    # many chunks per partition, several hash blocks per chunk
    monkeypatch.setattr(sk_kernels, "CHUNK_ROWS", 300)
    monkeypatch.setattr(sk_kernels, "_BLOCK_ITEMS", 50)
    assert np.array_equal(sketch_table(df, "item", seeds=SEEDS, buckets=37, weight="w", method="arrow"), sql)
    # k·b above the dense limit: per-chunk sparse rows merged by a groupBy
    monkeypatch.setattr(sk_kernels, "DENSE_MAX_COUNTERS", 100)
    assert np.array_equal(sketch_table(df, "item", seeds=SEEDS, buckets=37, weight="w", method="arrow"), sql)
    big = sketch_table(df, "item", seeds=SEEDS[:2], buckets=1 << 20, method="arrow")
    assert np.array_equal(big, sketch_table(df, "item", seeds=SEEDS[:2], buckets=1 << 20, method="sql"))


def test_power_of_two_and_other_bucket_counts(spark):
    df = _strings_df(spark, n=1500, parts=2)
    for b in (1, 2, 3, 64, 1000, 2**16, 2**16 + 1):
        arrow, sql = _both(df, "item", seeds=SEEDS[:3], buckets=b)
        assert np.array_equal(arrow, sql), b


def test_empty_input_and_all_zero_partials(spark):
    df = spark.createDataFrame([], "item string")
    assert np.array_equal(sketch_table(df, "item", seeds=SEEDS[:2], buckets=8, method="arrow"), np.zeros((2, 8)))
    # one partition whose counters all cancel (an all-zero partial), another with a count
    df = spark.createDataFrame([("a", 1.0, 0), ("a", -1.0, 0), ("b", 0.5, 1)], "item string, w double, p int")
    df = df.repartition(2, "p")
    arrow, sql = _both(df, "item", seeds=SEEDS[:2], buckets=8, weight="w")
    assert np.array_equal(arrow, sql)
    assert np.abs(arrow).sum() == 1.0


def test_auto_picks_the_kernel_except_for_unit_clipping(spark, monkeypatch):
    calls = []
    real = sk_kernels._arrow_table

    def spy(*a, **kw):
        calls.append(1)
        return real(*a, **kw)

    monkeypatch.setattr(sk_kernels, "_arrow_table", spy)
    df = spark.createDataFrame([("a", "u"), ("b", "u")], "item string, unit string")
    sketch_table(df, "item", seeds=[1], buckets=8)
    assert calls == [1]
    sketch_table(df, "item", seeds=[1], buckets=8, privacy_unit="unit", max_items_per_unit=2, unit_l2_bound=1.0)
    assert calls == [1]  # per-unit clipping in sketch space: SQL only
    sketch_table(df, "item", seeds=[1], buckets=8, method="sql")
    assert calls == [1]


def test_bad_method_requests(spark):
    df = spark.createDataFrame([("a", "u")], "item string, unit string")
    with pytest.raises(ConfigError, match="'method'"):
        sketch_table(df, "item", seeds=[1], buckets=4, method="numpy")
    with pytest.raises(ConfigError, match="'method'.*unit_l2_bound"):
        sketch_table(df, "item", seeds=[1], buckets=4, privacy_unit="unit", unit_l2_bound=1.0, method="arrow")
