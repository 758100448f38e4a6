"""Executor faults: a task that fails on its first attempt is retried by Spark;
the exact summary is identical, the ledger is charged once, one release is written."""

import os

import numpy as np
import pyarrow as pa

import spark_dp
from spark_dp.aggregates import gram_matrix
from spark_dp.privacy import SeededSampler, open_ledger


def _fault_injector(marker_dir):
    """A mapInArrow function that passes batches through, but the first attempt
    of every task dies midway. (Built in a closure so it is pickled by value:
    the executors cannot import this test module.)"""

    def fail_first_attempt(batches):
        from pyspark import TaskContext

        ctx = TaskContext.get()
        for i, batch in enumerate(batches):
            if ctx.attemptNumber() == 0 and i == 1:
                open(os.path.join(marker_dir, f"fault-{ctx.partitionId()}"), "w").close()
                raise RuntimeError("injected executor fault (first attempt)")
            yield batch

    return fail_first_attempt


def _data(spark):
    rng = np.random.default_rng(9)
    X = rng.normal(size=(4000, 4)) * 0.4
    df = spark.createDataFrame(pa.table({f"x{i}": X[:, i] for i in range(4)}).to_pandas()).repartition(2)
    return X, df


def test_retried_task_gives_the_identical_summary(spark, tmp_path):
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "500")
    try:
        X, df = _data(spark)
        cols = [f"x{i}" for i in range(4)]
        clean = gram_matrix(df, cols, norm_bound=1.0)
        faulty = df.mapInArrow(_fault_injector(str(tmp_path)), df.schema)
        retried = gram_matrix(faulty, cols, norm_bound=1.0)
        assert sorted(os.listdir(tmp_path)) == ["fault-0", "fault-1"]  # both tasks did fail once
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    Xc = X * np.minimum(1, 1 / np.linalg.norm(X, axis=1, keepdims=True))
    assert np.allclose(clean, Xc.T @ Xc, rtol=1e-9, atol=0)
    assert np.allclose(retried, clean, rtol=1e-12, atol=0)


def test_retried_task_charges_once_and_writes_one_release(spark, tmp_path):
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "500")
    try:
        _, df = _data(spark)
        (tmp_path / "faults").mkdir()
        faulty = df.mapInArrow(_fault_injector(str(tmp_path / "faults")), df.schema)
        dp = spark_dp.DPSession("faults.ds", ledger=f"sqlite:///{tmp_path}/l.db", epsilon_limit=5.0,
                                delta_limit=1e-5, output=str(tmp_path / "out"),
                                sampler=SeededSampler(np.random.default_rng(3)))
        rel = dp.second_moment(faulty, [f"x{i}" for i in range(4)], epsilon=1.0, delta=1e-6, norm_bound=1.0,
                               release_id="fault-1")
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert len(os.listdir(tmp_path / "faults")) == 2  # the faults happened
    assert rel.path and os.listdir(tmp_path / "out") == ["fault-1"]
    (status,) = open_ledger(f"{tmp_path}/l.db").status("faults.ds")
    assert status.releases == 1
