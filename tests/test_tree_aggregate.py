"""Summing partials on the executors before the driver (spark_dp/aggregates/_partials.py, issue #17 item 4).

The tree step and the DataFrame path's cap change where and in which order
exact partials are added, never what is added: the tree path and the flat
path give the same aggregate (allclose for float sums, equal for counts)
for the Gram matrix, the tensor moments, a sketch table and synthetic
partials with per-task trailers. The threshold is injected (the module
constant, read at call time), so the tree triggers on tiny data. Not a
timing test (benchmarks/scaling.py measures the cost).
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest

from spark_dp.aggregates import _partials as T
from spark_dp.aggregates.gram import gram_matrix
from spark_dp.aggregates.moments import prepare_rows, second_moment_sums, third_moment_sums
from spark_dp.aggregates.sketch import sketch_table

MIB = 1 << 20


# -- sizes (no Spark) -------------------------------------------------------------------------------

def test_levels_trigger_only_above_the_threshold():
    assert T.tree_levels(200, 2 * MIB, 2, threshold=512 * MIB) == []  # 400 MiB fit: the driver takes them
    assert T.tree_levels(200, 2 * MIB, 2, threshold=64 * MIB) == [4]  # the rule for 400 MiB at 2 slots
    assert T.tree_levels(1, 2 * MIB, 2, threshold=0) == []  # one partial: nothing to pre-sum
    assert T.tree_levels(9, MIB, 2, threshold=0) == [2, 1]  # 9 → 2 (the rule for 9 MiB) → 1
    # many large partials: fan-in ≥ √n per level, reducers never more than the rule's count
    levels = T.tree_levels(256, 128 * MIB, 256, threshold=64 * MIB)
    assert levels == [16, 4, 2, 1]
    n = 256
    for g in levels:
        assert g <= -(-n // (math.isqrt(n - 1) + 1)) and g < n
        n = g


def test_cap_keeps_every_slot_busy():
    assert T.partial_cap(2, 2 * MIB, 64 * MIB) == 32  # 64 MiB of partials, whole waves of 2
    assert T.partial_cap(3, 2 * MIB, 64 * MIB) == 30
    assert T.partial_cap(256, 2 * MIB, 64 * MIB) == 256  # never fewer tasks than slots
    assert T.partial_cap(2, 800, 64 * MIB) > 80_000  # small partials: no cap in practice
    assert T.partial_cap(4, 2 * MIB, 0) == 4


def test_formats_round_trip_their_sums():
    fmt = T.VectorPartials(3, tail=2)
    rows = [np.array([1.0, 2, 3, 10, 11]), np.array([4.0, 5, 6, 20, 21])]
    batch = pa.RecordBatch.from_arrays([pa.array([r.tobytes() for r in rows], pa.binary())], names=["partial"])
    acc = fmt.add(fmt.zero(), batch)
    again = fmt.add(fmt.zero(), fmt.batch(acc))  # a summed partial reads like a task's own
    total, tails = fmt.result(again)
    assert total.tolist() == [5.0, 7.0, 9.0] and tails.tolist() == [[10, 11], [20, 21]]
    counts = T.VectorPartials(2, dtype=np.int64)
    b = pa.RecordBatch.from_arrays([pa.array([np.array([1, 2]).tobytes()] * 3, pa.binary())], names=["partial"])
    assert counts.result(counts.add(counts.zero(), b))[0].tolist() == [3, 6]
    dense = T.DenseCounterPartials(1000)
    sparse = np.zeros(1000)
    sparse[[3, 500]] = [1.5, -2.0]
    full = np.arange(1000.0)
    assert not dense.batch(sparse).column("dense")[0].as_py() and dense.batch(full).column("dense")[0].as_py()
    acc = dense.add(dense.add(dense.zero(), dense.batch(sparse)), dense.batch(full))
    assert np.array_equal(acc, sparse + full)


# -- with Spark -------------------------------------------------------------------------------------

@pytest.fixture
def record_levels(monkeypatch):
    """The tree's levels of every collect in the test (the wrapped function is the one collect_sum uses)."""
    seen: list[list[int]] = []
    real = T.tree_levels

    def recording(*args, **kwargs):
        out = real(*args, **kwargs)
        seen.append(out)
        return out

    monkeypatch.setattr(T, "tree_levels", recording)
    return seen


@pytest.fixture(params=["false", "true"])
def aqe(spark, request):
    old = spark.conf.get("spark.sql.adaptive.enabled")
    spark.conf.set("spark.sql.adaptive.enabled", request.param)
    yield request.param
    spark.conf.set("spark.sql.adaptive.enabled", old)


def _synthetic(spark, n: int, width: int):
    """n tasks, task i's partial: width normals seeded by i, then the trailer [i, 2i]."""

    def one(batches):
        for batch in batches:
            for i in batch.column(0).to_pylist():
                v = np.concatenate([np.random.default_rng(i).normal(size=width), [i, 2 * i]])
                yield pa.RecordBatch.from_arrays([pa.array([v.tobytes()], pa.binary())], names=["partial"])

    return spark.range(0, n, 1, numPartitions=n).mapInArrow(one, "partial binary")


def test_tree_sums_many_partials_in_two_levels(spark, aqe, record_levels):
    n, width = 9, MIB // 8  # 1 MiB partials: the rule gives 2 reducers for 9 MiB, then 1
    fmt = T.VectorPartials(width, tail=2)
    want = sum(np.random.default_rng(i).normal(size=width) for i in range(n))
    flat, flat_tails = T.collect_sum(_synthetic(spark, n, width), fmt, n, threshold=1 << 40)
    tree, tree_tails = T.collect_sum(_synthetic(spark, n, width), fmt, n, threshold=0)
    assert record_levels == [[2, 1]]  # (the flat call plans no levels at all)
    np.testing.assert_allclose(flat, want, rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(tree, want, rtol=1e-12, atol=1e-9)
    assert sorted(map(tuple, tree_tails.tolist())) == sorted(map(tuple, flat_tails.tolist())) == [
        (i, 2 * i) for i in range(n)]
    again, _ = T.collect_sum(_synthetic(spark, n, width), fmt, n, threshold=0)
    assert np.array_equal(again, tree)  # a fixed order: a re-run sums to the same bits


def test_tree_plan_exchanges_on_the_task_id_and_sorts(spark):
    plan = T.tree_reduce(_synthetic(spark, 9, MIB // 8), T.VectorPartials(MIB // 8, tail=2), 9, threshold=0)
    text = plan._jdf.queryExecution().executedPlan().toString()  # test code may use _jdf
    assert "hashpartitioning(__spark_dp_partial_seq#" in text and ", 2)" in text, text  # the rule's 2 reducers
    assert "Sort [__spark_dp_partial_seq" in text and "SinglePartition" in text, text  # then one


def _frame(spark, rows=3000, d=6, parts=7, seed=3):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, d)) / 2
    items = rng.zipf(1.5, size=rows) % 50
    data = [(*map(float, r), f"i{int(t)}") for r, t in zip(x, items)]
    return spark.createDataFrame(data, [*[f"x{i}" for i in range(d)], "item"]).repartition(parts)


def test_gram_tree_equals_flat(spark, aqe, monkeypatch, record_levels):
    df = _frame(spark)
    cols = [f"x{i}" for i in range(6)]
    flat, counts = gram_matrix(df, cols, norm_bound=1.0, count_clipped=True)
    assert record_levels == []  # 7 partitions of 6 × 6 partials: far under the threshold
    monkeypatch.setattr(T, "TREE_THRESHOLD_BYTES", 0)  # every partial over the threshold
    tree, tree_counts = gram_matrix(df, cols, norm_bound=1.0, count_clipped=True)
    assert record_levels == [[1]]  # capped at the 2 task slots, then one reducer
    np.testing.assert_allclose(tree, flat, rtol=1e-12, atol=1e-12)
    assert np.array_equal(tree_counts, counts) and counts[1] == 3000


def test_gram_parquet_tree_equals_flat(spark, tmp_path, monkeypatch, record_levels):
    from spark_dp.aggregates.gram import gram_matrix_parquet

    _frame(spark, parts=5).write.parquet(str(tmp_path / "p"))
    cols = [f"x{i}" for i in range(6)]
    flat = gram_matrix_parquet(str(tmp_path / "p"), cols, norm_bound=1.0, spark=spark)
    assert record_levels == []
    monkeypatch.setattr(T, "TREE_THRESHOLD_BYTES", 0)
    tree = gram_matrix_parquet(str(tmp_path / "p"), cols, norm_bound=1.0, spark=spark)
    assert len(record_levels) == 1 and record_levels[0]  # the planned tasks, tree-summed
    np.testing.assert_allclose(tree, flat, rtol=1e-12, atol=1e-12)


def test_moments_tree_equal_flat(spark, monkeypatch, record_levels):
    cols = [f"x{i}" for i in range(6)]
    frame, d = prepare_rows(_frame(spark), cols, passes=3, seed=2)
    try:
        U = np.random.default_rng(0).normal(size=(d, 4))
        flat = third_moment_sums(frame, U, norm_bound=1.0, pass_index=1)
        flat2 = second_moment_sums(frame, d, norm_bound=1.0)
        assert record_levels == []
        monkeypatch.setattr(T, "TREE_THRESHOLD_BYTES", 0)
        tree = third_moment_sums(frame, U, norm_bound=1.0, pass_index=1)
        tree2 = second_moment_sums(frame, d, norm_bound=1.0)
    finally:
        frame.unpersist()
    assert len(record_levels) == 2 and all(record_levels)
    for a, b in zip(flat, tree):
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-12)
    assert flat[2] > 0 and tree[2] == flat[2]
    np.testing.assert_allclose(tree2[0], flat2[0], rtol=1e-12, atol=1e-12)
    assert tree2[1] == flat2[1] == 3000


@pytest.mark.parametrize("method", ["arrow", "sql"])
def test_sketch_tree_equals_flat(spark, aqe, monkeypatch, record_levels, method):
    df = _frame(spark)
    kw = {"seeds": [11, 12, 13], "buckets": 64, "method": method}
    flat = sketch_table(df, "item", **kw)
    assert record_levels == []
    monkeypatch.setattr(T, "TREE_THRESHOLD_BYTES", 0)
    tree = sketch_table(df, "item", **kw)
    assert len(record_levels) == 1 and record_levels[0]
    assert np.array_equal(tree, flat)  # signed counts: exact in any order
    assert np.abs(flat).sum() > 0


def _last_stage_tasks(spark, run) -> int:
    """Task count of the last stage ``run()`` ran (Spark's status tracker; tests may use the SparkContext)."""
    import uuid

    sc = spark.sparkContext
    group = f"tree-{uuid.uuid4().hex}"
    sc.setJobGroup(group, "cap")
    try:
        run()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    tracker = sc.statusTracker()
    stages = [s for j in tracker.getJobIdsForGroup(group) for s in tracker.getJobInfo(j).stageIds]
    return tracker.getStageInfo(max(stages)).numTasks


def test_dataframe_path_caps_its_partials(spark, monkeypatch):
    """A frame of 7 partitions: 7 partials under the default threshold, 4 when only 4 fit (2 slots, whole
    waves), with the same matrix."""
    df = _frame(spark, parts=7)
    cols = [f"x{i}" for i in range(6)]
    out = {}
    assert _last_stage_tasks(spark, lambda: out.setdefault("flat", gram_matrix(df, cols, norm_bound=1.0))) == 7
    monkeypatch.setattr(T, "TREE_THRESHOLD_BYTES", 4 * 8 * 6 * 6)
    assert _last_stage_tasks(spark, lambda: out.setdefault("capped", gram_matrix(df, cols, norm_bound=1.0))) == 4
    np.testing.assert_allclose(out["capped"], out["flat"], rtol=1e-12, atol=1e-12)
