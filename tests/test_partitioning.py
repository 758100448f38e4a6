"""spark-dp sizes its own shuffles and caches (issue #17), whatever ``spark.sql.shuffle.partitions`` says.

The rule (spark_dp.aggregates._partitioning) is checked on its own, and
then on releases over a small frame through the public API: every stage of
every Spark job the release runs has at most max(the rule's count, the
input's own partitions) tasks, with the session's shuffle partitions set to
a count no rule would pick (37), with adaptive execution off (the plan as
written) and on. Task counts come from Spark's status tracker (tests may use
the SparkContext; the library may not). Not a timing test.
"""

from __future__ import annotations

import uuid

import numpy as np
import pytest
from pyspark.sql import Window
from pyspark.sql import functions as F

from spark_dp import DPSession
from spark_dp.aggregates import _partitioning as P
from spark_dp.aggregates._bounding import keep_rows_per_unit, selection_order
from spark_dp.aggregates.moments import PASS_COL, prepare_rows

ODD = 37  # a shuffle partition count no rule here picks


def test_rule_small_large_unknown():
    mib = 1 << 20
    assert P.partitions_for_bytes(None, 2) == 2  # unknown size: one partition per task slot
    assert P.partitions_for_bytes(0, 8) == 1
    assert P.partitions_for_bytes(500_000, 2) == 1  # 20,000 rows × 3 doubles: one task
    assert P.partitions_for_bytes(6 * mib, 2) == 2
    assert P.partitions_for_bytes(6 * mib, 16) == 2  # no nearly empty tasks on a big cluster
    assert P.partitions_for_bytes(300 * mib, 2) == 4  # ≤ 128 MiB a partition, whole waves of 2
    assert P.partitions_for_bytes(300 * mib, 4) == 4
    assert P.partitions_for_bytes(100 * 1024 * mib, 8) == 800
    assert P.partitions_for_bytes(1 << 61, 2) == P.MAX_PARTITIONS


def test_estimate_is_spark_statistics(spark):
    n = P.estimated_bytes(spark.range(100_000))
    assert n is not None and 100_000 * 8 <= n <= 100_000 * 32
    df = spark.createDataFrame([(float(i), float(i)) for i in range(1000)], ["a", "b"])
    est = P.estimated_bytes(df)
    assert est is None or est < 1 << 20
    assert P.estimated_bytes(spark.range(10).selectExpr("array(id, id) AS v"), array_length=50) == 50 * (
        P.estimated_bytes(spark.range(10).selectExpr("array(id, id) AS v")))


def test_task_slots_from_master(spark):
    assert P.task_slots(spark) == 2  # local[2, 2]


def test_task_slots_on_a_cluster_are_spark_default_parallelism(spark):
    """A standalone/YARN/Kubernetes master sets neither parallelism conf: the slots are Spark's own default
    parallelism (the executors' cores), read from a plan, not a fixed 8."""

    class ClusterConf:  # the test session's confs as a cluster master shows them (the suite's session sets
        def get(self, key, default=None):  # spark.default.parallelism; a cluster does not)
            if key == "spark.master":
                return "spark://127.0.0.1:7077"
            return default if key == "spark.default.parallelism" else spark.conf.get(key, default)

    class ClusterSession:
        conf = ClusterConf()
        range = spark.range

    spark.conf.set("spark.sql.leafNodeDefaultParallelism", "3")
    try:
        assert P.task_slots(ClusterSession()) == 3  # a user's setting wins
    finally:
        spark.conf.unset("spark.sql.leafNodeDefaultParallelism")
    default = spark.sparkContext.defaultParallelism  # test code may use the SparkContext
    assert default != 8 and P.task_slots(ClusterSession()) == default


def _exchange_counts(df) -> list[int]:
    """The partition counts of the hash exchanges in ``df``'s physical plan."""
    import re

    plan = df._jdf.queryExecution().executedPlan().toString()
    return [int(m) for m in re.findall(r"hashpartitioning\(.*?, (\d+)\), ", plan)]


@pytest.fixture
def odd_shuffle_partitions(spark, request):
    aqe = getattr(request, "param", "false")
    old = {k: spark.conf.get(k) for k in ("spark.sql.shuffle.partitions", "spark.sql.adaptive.enabled")}
    spark.conf.set("spark.sql.shuffle.partitions", str(ODD))
    spark.conf.set("spark.sql.adaptive.enabled", aqe)
    try:
        yield aqe
    finally:
        for k, v in old.items():
            spark.conf.set(k, v)


def _frame(spark, n_units=60, rows=4, d=4, seed=1):
    rng = np.random.default_rng(seed)
    data = [(int(u), *map(float, rng.normal(size=d) / 3), f"i{int(rng.integers(0, 30))}")
            for u in range(n_units) for _ in range(rows)]
    return spark.createDataFrame(data, ["u", *[f"x{i}" for i in range(d)], "item"])


def test_bounding_and_pass_frames_use_the_rule(spark, odd_shuffle_partitions):
    df = _frame(spark)
    kept = keep_rows_per_unit(df, "u", ["x0", "x1"], 2, partitions=3)
    assert _exchange_counts(kept) == [3]  # one exchange (the window plans none of its own)
    assert kept.count() == 60 * 2
    rule = P.partitions_for(df)
    kept = keep_rows_per_unit(df, "u", ["x0", "x1"], 2)
    assert _exchange_counts(kept) == [rule]
    # A floating-point unit (Spark normalises it as a window key): still one exchange, same rows kept.
    # (-0.0 and 0.0 are one unit, as Spark groups them.)
    u = F.col("u")
    zero = F.when(u % 2 == 0, F.lit(-0.0)).otherwise(F.lit(0.0))
    fdf = df.withColumn("fu", F.when(u % 7 == 0, zero).otherwise((u % 7).cast("double")))
    a = keep_rows_per_unit(fdf, "fu", ["x0", "x1"], 3, secret=11, partitions=3)
    assert _exchange_counts(a) == [3]
    # the reference: the plain window over the unit (before issue #17)
    w = Window.partitionBy("fu").orderBy(*selection_order(11, F.col("fu"), [F.col("x0"), F.col("x1")]))
    ref = fdf.withColumn("r", F.row_number().over(w)).where(F.col("r") <= 3)
    key = ["u", "x0", "x1"]
    assert sorted(a.select(*key).collect()) == sorted(ref.select(*key).collect())
    assert a.count() == 7 * 3
    frame, _ = prepare_rows(df, ["x0", "x1", "x2"], passes=6, seed=5)
    try:
        assert all(c <= max(rule, 1) for c in _exchange_counts(frame)) and ODD not in _exchange_counts(frame)
        assert frame.rdd.getNumPartitions() <= rule
        got = sorted(r[0] for r in frame.select(PASS_COL).distinct().collect())
        assert set(got) <= set(range(6)) and len(got) > 1
    finally:
        frame.unpersist()
    frame, _ = prepare_rows(df.repartition(ODD), ["x0", "x1"], cache=False)  # reuse frame: at most the rule's
    assert frame.rdd.getNumPartitions() <= max(rule, 1)


def test_single_partition_pass_frame_has_no_shuffle_and_the_same_passes(spark, tmp_path, odd_shuffle_partitions):
    """At one partition (small inputs) fresh mode's pass frame coalesces instead of shuffling: same passes."""
    from spark_dp.aggregates.moments import VECTOR_COL

    rng = np.random.default_rng(4)
    rows = [tuple(map(float, rng.normal(size=3).round(2))) for _ in range(120)]
    rows += rows[:25] + rows[:10]  # identical rows, 1 to 3 copies: their copy numbers matter
    spark.createDataFrame(rows, ["x0", "x1", "x2"]).write.parquet(str(tmp_path / "rows"))
    df = spark.read.parquet(str(tmp_path / "rows"))  # a known (small) size: the rule gives one partition
    cols = ["x0", "x1", "x2"]
    one, _ = prepare_rows(df, cols, passes=5, seed=9, cache=False)
    assert P.partitions_for(df) == 1
    plan = one._jdf.queryExecution().executedPlan().toString()
    assert "Exchange" not in plan, plan
    assert one.rdd.getNumPartitions() == 1
    three, _ = prepare_rows(df, cols, passes=5, seed=9, cache=False, partitions=3)
    assert _exchange_counts(three) == [3]

    def assignment(frame):
        return sorted((tuple(r[0]), r[1]) for r in frame.select(VECTOR_COL, PASS_COL).collect())

    got = assignment(one)
    assert len(got) == 120 + 25 + 10 and len({p for _, p in got}) == 5
    assert got == assignment(three)
    other, _ = prepare_rows(df, cols, passes=5, seed=10, cache=False)  # the seed matters
    assert assignment(other) != got


def _releases():
    """One release per kind of shuffle spark-dp makes, through the public API."""
    kw = {"epsilon": 1.0, "delta": 1e-6}
    cols = ["x0", "x1", "x2", "x3"]
    return {
        "second_moment_unit": lambda dp, df: dp.second_moment(df, cols, norm_bound=1.0, privacy_unit="u",
                                                              max_rows_per_unit=2, **kw),
        "second_moment_jl": lambda dp, df: dp.second_moment(df, cols, norm_bound=1.0, mechanism="jl_ridge", **kw),
        "tensor_fresh": lambda dp, df: dp.tensor_decomposition(df, columns=cols[:3], k=1, restarts=2, iterations=2,
                                                               norm_bound=1.0, mode="fresh", **kw),
        "tensor_reuse_unit": lambda dp, df: dp.tensor_decomposition(
            df, columns=cols[:3], k=1, restarts=2, iterations=2, norm_bound=1.0, mode="reuse", privacy_unit="u",
            max_rows_per_unit=2, **kw),
        "sketch_unit": lambda dp, df: dp.count_sketch(df, "item", privacy_unit="u", max_rows_per_unit=2, **kw),
        "sketch_unit_l2": lambda dp, df: dp.count_sketch(df, "item", privacy_unit="u", max_rows_per_unit=2,
                                                         unit_clipping="sketch_l2", **kw),
    }


@pytest.mark.parametrize("odd_shuffle_partitions", ["false", "true"], indirect=True)
@pytest.mark.parametrize("name", sorted(_releases()))
def test_release_tasks_never_exceed_the_rule(spark, tmp_path, odd_shuffle_partitions, name):
    _check_release_tasks(spark, tmp_path, name)


@pytest.mark.parametrize("odd_shuffle_partitions", ["false", "true"], indirect=True)
@pytest.mark.parametrize("name", ["second_moment_unit", "sketch_unit"])
def test_tree_step_tasks_never_exceed_the_rule(spark, tmp_path, monkeypatch, odd_shuffle_partitions, name):
    """With every partial over the threshold, the releases' partials go through the tree step: its exchange
    has the rule's count too (spark_dp/aggregates/_partials.py), with AQE off and on."""
    from spark_dp.aggregates import _partials

    levels = []
    real = _partials.tree_levels
    monkeypatch.setattr(_partials, "tree_levels", lambda *a, **k: levels.append(real(*a, **k)) or levels[-1])
    monkeypatch.setattr(_partials, "TREE_THRESHOLD_BYTES", 0)
    _check_release_tasks(spark, tmp_path, name)
    assert any(levels), f"{name}: no tree step ran ({levels})"


def _check_release_tasks(spark, tmp_path, name):
    df = _frame(spark).cache()
    inputs = df.rdd.getNumPartitions()
    allowed = max(P.partitions_for(df.select("u", "x0", "x1", "x2", "x3", "item"), array_length=1), inputs)
    assert allowed < ODD
    dp = DPSession("part", ledger=f"sqlite:///{tmp_path}/l.db", epsilon_limit=100, delta_limit=1e-3,
                   output=str(tmp_path / "out"), sampler="numpy")
    sc = spark.sparkContext
    group = f"partitions-{uuid.uuid4().hex}"
    sc.setJobGroup(group, name)
    try:
        _releases()[name](dp, df)
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
        df.unpersist()
    tasks = _stage_tasks(sc, group)
    assert tasks and max(tasks.values()) <= allowed, f"{name}: stage task counts {tasks}, allowed ≤ {allowed}"


def _stage_tasks(sc, group: str) -> dict[int, int]:
    """Task count of every stage of every job of ``group`` (Spark's status tracker)."""
    tracker = sc.statusTracker()
    jobs = tracker.getJobIdsForGroup(group)
    assert jobs, "no Spark job ran in the group"
    tasks = {}
    for j in jobs:
        info = tracker.getJobInfo(j)
        for s in info.stageIds if info else []:
            stage = tracker.getStageInfo(s)
            if stage is not None:
                tasks[s] = stage.numTasks
    return tasks


def _estimates():
    """Each estimate path over a DataFrame of candidates: (the release, the post-processing that shuffles)."""
    from spark_dp.sketch import estimate_df, heavy_hitters

    kw = {"epsilon": 1.0, "delta": 1e-6, "repetitions": 3, "buckets": 64}
    dom = [f"i{i}" for i in range(30)]
    sketch = lambda dp, df: dp.count_sketch(df, "item", **kw)  # noqa: E731
    dyadic = lambda dp, df: dp.count_sketch(df, "item", levels=6, **kw)  # noqa: E731 -- a hashed domain
    histogram = lambda dp, df: dp.count_sketch(df, "item", mechanism="histogram", domain=dom,  # noqa: E731
                                               epsilon=1.0, delta=1e-6)
    table = lambda rel, c: estimate_df(rel, c, "item").collect()  # noqa: E731
    # every one of the 2^6 hashed ids decoded (no threshold): some candidates map to them
    top = lambda rel, c: heavy_hitters(rel, c, "item", top=64, threshold=-1e9)  # noqa: E731
    return {"estimate_df_sketch": (sketch, table), "estimate_df_histogram": (histogram, table),
            "estimate_df_hashed": (dyadic, table), "heavy_hitters_sketch": (sketch, top),
            "heavy_hitters_hashed": (dyadic, top)}


@pytest.mark.parametrize("odd_shuffle_partitions", ["false", "true"], indirect=True)
@pytest.mark.parametrize("name", sorted(_estimates()))
def test_estimates_never_exceed_the_rule(spark, tmp_path, odd_shuffle_partitions, name):
    """Estimates from a released sketch over candidate DataFrames (joins, distinct, groupBy) follow the rule."""
    release, post = _estimates()[name]
    dp = DPSession("part", ledger=f"sqlite:///{tmp_path}/l.db", epsilon_limit=100, delta_limit=1e-3,
                   output=str(tmp_path / "out"), sampler="numpy")
    rel = release(dp, _frame(spark))
    cands = spark.createDataFrame([(f"i{i}",) for i in range(45)] + [(None,)], "item string").cache()
    allowed = max(P.partitions_for(cands), cands.rdd.getNumPartitions())
    assert allowed < ODD
    sc = spark.sparkContext
    group = f"estimates-{uuid.uuid4().hex}"
    sc.setJobGroup(group, name)
    try:
        out = post(rel, cands)
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
        cands.unpersist()
    assert out  # estimates (or heavy hitters) of the candidates
    tasks = _stage_tasks(sc, group)
    assert tasks and max(tasks.values()) <= allowed, f"{name}: stage task counts {tasks}, allowed ≤ {allowed}"
