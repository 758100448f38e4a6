"""The exact sketch built by Spark SQL equals a numpy reference with the same hashes.

The reference hashes with :mod:`spark_dp.sketch.hashing` (a pure Python/numpy
XXH64), which is itself checked bit for bit against Spark's own ``xxhash64``
on strings of every length class (0–3, 4–7, 8–31, ≥ 32 bytes, multi-byte
UTF-8), 64-bit integers at the extremes, and nulls.
"""

import numpy as np
import pytest
from pyspark.sql import functions as F

from spark_dp.aggregates.sketch import histogram_table, sketch_table
from spark_dp.errors import ConfigError, SchemaError
from spark_dp.sketch.hashing import buckets_and_signs, spark_xxhash64, to_signed

SEEDS = [0, 5, -3, 2**63 - 5, 0x123456789ABCDEF0, to_signed(2**64 - 7), 77]
STRINGS = [None, "", "a", "abc", "abcd", "hello w", "12345678", "x" * 31, "y" * 32, "z" * 33,
           "ünïcødé ☃" * 5, "q" * 100]
INTS = [None, 0, 1, -1, 2**63 - 1, -(2**63), 123456789012, 7]


def test_hash_matches_spark_xxhash64_bit_for_bit(spark):
    ds = spark.createDataFrame([(s,) for s in STRINGS], "s string")
    di = spark.createDataFrame([(s,) for s in INTS], "s bigint")
    for seed in SEEDS:
        got = [r[0] for r in ds.select(F.xxhash64(F.lit(seed).cast("long"), "s")).collect()]
        assert got == spark_xxhash64(STRINGS, seed, "string").tolist()
        got = [r[0] for r in di.select(F.xxhash64(F.lit(seed).cast("long"), "s")).collect()]
        assert got == spark_xxhash64(INTS, seed, "long").tolist()


def _reference(items, weights, seeds, b, signed):
    kind = "long" if any(isinstance(x, int) for x in items) else "string"
    h, s = buckets_and_signs(items, seeds, b, kind)
    out = np.zeros((len(seeds), b))
    for i in range(len(seeds)):
        np.add.at(out[i], h[i], (s[i] if signed else 1) * np.asarray(weights, dtype=float))
    return out


@pytest.mark.parametrize("signed", [True, False], ids=["countsketch", "countmin"])
@pytest.mark.parametrize("preaggregate", [True, False])
def test_string_sketch_equals_numpy_reference(spark, signed, preaggregate):
    gen = np.random.default_rng(1)
    vocab = [f"item-{i}" for i in range(300)] + ["ü" * 40, ""]
    items = [vocab[j] for j in gen.zipf(1.3, 3000) % len(vocab)] + [None] * 5
    # dyadic weights so float sums are exact in any order
    weights = gen.integers(-8, 9, len(items)) / 8.0
    df = spark.createDataFrame(list(zip(items, weights.tolist())), "item string, w double").repartition(3)
    got = sketch_table(df, "item", seeds=SEEDS, buckets=37, signed=signed, weight="w", preaggregate=preaggregate)
    assert np.array_equal(got, _reference(items, weights, SEEDS, 37, signed))


def test_integer_items_of_any_integral_type(spark):
    items = list(range(-50, 250)) * 2
    df = spark.createDataFrame([(x,) for x in items], "x int")
    got = sketch_table(df, "x", seeds=SEEDS[:3], buckets=64)
    assert np.array_equal(got, _reference(items, np.ones(len(items)), SEEDS[:3], 64, True))
    # the same items as bigint give the same sketch (integral columns are hashed as bigint)
    got_long = sketch_table(df.select(F.col("x").cast("long")), "x", seeds=SEEDS[:3], buckets=64)
    assert np.array_equal(got, got_long)


def test_weights_clipped_and_nonfinite_policy(spark):
    rows = [("a", 5.0), ("a", -3.0), ("b", 0.5), ("c", float("nan")), ("c", None), ("d", float("inf"))]
    df = spark.createDataFrame(rows, "item string, w double")
    seeds = [11]
    got = sketch_table(df, "item", seeds=seeds, buckets=1000, weight="w", signed=False)
    # a: clip(5) + clip(-3) = 0; b: 0.5; c and d dropped
    ref = _reference(["a", "a", "b"], [1.0, -1.0, 0.5], seeds, 1000, False)
    assert np.array_equal(got, ref)
    got = sketch_table(df, "item", seeds=seeds, buckets=1000, weight="w", signed=False, nonfinite="zero")
    assert np.array_equal(got, ref)  # zeroed rows add nothing
    assert got.sum() == 0.5


def test_null_item_policies(spark):
    df = spark.createDataFrame([("a",), (None,), (None,)], "item string")
    as_item = sketch_table(df, "item", seeds=SEEDS[:2], buckets=101, signed=False)
    assert as_item.sum(axis=1).tolist() == [3.0, 3.0]
    assert np.array_equal(as_item, _reference(["a", None, None], [1, 1, 1], SEEDS[:2], 101, False))
    dropped = sketch_table(df, "item", seeds=SEEDS[:2], buckets=101, signed=False, nulls="drop")
    assert dropped.sum(axis=1).tolist() == [1.0, 1.0]


def test_contribution_bounding_and_unit_clipping(spark):
    # unit u1 has 6 rows of distinct items, u2 has 2 rows
    rows = [(f"i{j}", "u1") for j in range(6)] + [("i0", "u2"), ("i1", "u2")]
    df = spark.createDataFrame(rows, "item string, unit string")
    t = sketch_table(df, "item", seeds=SEEDS[:3], buckets=2**20, signed=False, privacy_unit="unit", max_items_per_unit=3)
    assert t.sum(axis=1).tolist() == [5.0, 5.0, 5.0]  # 3 kept of u1 + 2 of u2
    # per-unit L2 clipping in sketch space to C = 1: u1 keeps 3 distinct items (norm √3 → 1),
    # u2 keeps 2 (norm √2 → 1); b is large so nothing collides
    t = sketch_table(df, "item", seeds=SEEDS[:3], buckets=2**20, privacy_unit="unit", max_items_per_unit=3,
                     unit_l2_bound=1.0)
    for i in range(3):
        nz = np.sort(np.abs(t[i][t[i] != 0]))
        assert np.all(np.sqrt(np.sum(t[i] ** 2)) <= 2.0 + 1e-12)
        assert nz.max() <= 1 / np.sqrt(3) + 1 / np.sqrt(2) + 1e-12


def test_histogram_over_known_domain(spark):
    df = spark.createDataFrame([("a",), ("b",), ("b",), ("z",), (None,)], "item string")
    assert histogram_table(df, "item", domain=["b", "a", "c"]).tolist() == [2.0, 1.0, 0.0]
    di = spark.createDataFrame([(x,) for x in [0, 1, 1, 5, -1, 9]], "x long")
    assert histogram_table(di, "x", domain=6).tolist() == [1, 2, 0, 0, 0, 1]


def test_bad_requests(spark):
    df = spark.createDataFrame([("a", 1.0, 2.5)], "item string, w string, d double")
    with pytest.raises(ConfigError, match="buckets"):
        sketch_table(df, "item", seeds=[1], buckets=0)
    with pytest.raises(ConfigError, match="repetitions"):
        sketch_table(df, "item", seeds=[], buckets=4)
    with pytest.raises(SchemaError, match="'w'"):
        sketch_table(df, "item", seeds=[1], buckets=4, weight="w")
    with pytest.raises(SchemaError, match="'d'.*strings or integers"):
        sketch_table(df, "d", seeds=[1], buckets=4)
    with pytest.raises(SchemaError, match="'nope'"):
        sketch_table(df, "nope", seeds=[1], buckets=4)
    with pytest.raises(ConfigError, match="nulls"):
        sketch_table(df, "item", seeds=[1], buckets=4, nulls="reject")
