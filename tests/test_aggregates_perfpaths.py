"""The fast paths of the Gram kernel: Arrow → numpy blocks, the chunked accumulator,
and the direct-Parquet reader, each against numpy on the clipped rows."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import spark_dp.aggregates._blocks as blocks
import spark_dp.aggregates._parquet_tasks as PT
import spark_dp.aggregates.gram as gram
from spark_dp.aggregates import gram_matrix, vectorize
from spark_dp.aggregates._blocks import GramAccumulator, columns_to_block, list_to_block
from spark_dp.aggregates._vectors import vector_frame
from spark_dp.aggregates.gram import gram_matrix_parquet, parquet_partials_fn
from spark_dp.errors import SchemaError

NAN = float("nan")


def _clipped(X, B):
    s = np.max(np.abs(X), axis=1, keepdims=True)
    s = np.where(s > 0, s, 1.0)
    n = np.linalg.norm(X / s, axis=1, keepdims=True)  # the norm is s·n, which may overflow
    return (X / s) * np.minimum(s, (B / np.where(n > 0, n, 1.0)))


def _rel_err(a, b):
    return np.max(np.abs(a - b)) / max(1e-300, np.max(np.abs(b)))


def _policy(X, nonfinite):
    X = np.asarray(X, float)
    if nonfinite == "drop":
        return X[np.isfinite(X).all(axis=1)]
    return np.where(np.isfinite(X), X, 0.0)


def _expected(X, B, nonfinite="drop"):
    C = _clipped(_policy(X, nonfinite), B)
    return C.T @ C


# -- Arrow → blocks -------------------------------------------------------------


def test_list_to_block_bad_rows_become_nan_rows():
    arr = pa.array([[1.0, 2.0], None, [3.0], [None, 4.0], [5.0, 6.0, 7.0], [8.0, 9.0]])
    want = [[1, 2], [NAN, NAN], [NAN, NAN], [NAN, 4], [NAN, NAN], [8, 9]]
    np.testing.assert_array_equal(list_to_block(arr, 2), np.array(want, float))
    # a slice keeps its absolute offsets; large lists and other numeric types work too
    np.testing.assert_array_equal(list_to_block(arr.slice(3, 3), 2), np.array(want[3:], float))
    big = pa.array([[1, 2], [3, 4]], type=pa.large_list(pa.int32()))
    np.testing.assert_array_equal(list_to_block(big, 2), [[1.0, 2.0], [3.0, 4.0]])
    fixed = pa.array([[1.0, 2.0], None, [5.0, 6.0]], type=pa.list_(pa.float64(), 2))
    np.testing.assert_array_equal(list_to_block(fixed, 2), [[1, 2], [NAN, NAN], [5, 6]])
    np.testing.assert_array_equal(list_to_block(fixed, 3), np.full((3, 3), NAN))
    assert list_to_block(pa.array([], type=pa.list_(pa.float64())), 4).shape == (0, 4)


def test_columns_to_block_casts_and_fills_nulls():
    got = columns_to_block([pa.array([1, None, 3], pa.int64()), pa.array([0.5, 1.5, None], pa.float32())])
    np.testing.assert_array_equal(got, [[1, 0.5], [NAN, 1.5], [3, NAN]])


# -- the accumulator ---------------------------------------------------------------


@pytest.mark.parametrize("nonfinite", ["drop", "zero"])
def test_accumulator_matches_numpy_across_chunks(monkeypatch, nonfinite):
    monkeypatch.setattr(blocks, "CHUNK_BYTES", 8 * 5 * 7)  # 7 rows per chunk (the floor is 64)
    rng = np.random.default_rng(3)
    X = rng.normal(size=(500, 5)) * rng.uniform(0.1, 3, size=(500, 1))
    X[[4, 70, 200], [0, 3, 1]] = [NAN, np.inf, -np.inf]
    X[300] = 1e300  # finite, but its squared norm overflows: clipped, never dropped
    X[301] = [1.7e308, -1.7e308, 1e308, 0.0, 1.0]  # even its norm overflows
    acc = GramAccumulator(5, 1.5, nonfinite)
    acc.add(X[:123])
    acc.add(np.empty((0, 5)))
    acc.add(X[123:])
    got = acc.upper()
    assert np.array_equal(got, np.triu(got))
    full = got + np.triu(got, 1).T
    assert _rel_err(full, _expected(X, 1.5, nonfinite)) < 1e-12


def test_accumulator_rows_within_bound_are_not_scaled():
    X = np.array([[0.6, 0.8], [0.1, 0.2]])
    X.setflags(write=False)  # Arrow's zero-copy blocks are read-only
    acc = GramAccumulator(2, 1.0, "drop")
    acc.add(X)
    assert np.array_equal(acc.upper(), np.triu(X.T @ X))


# -- the DataFrame path (no JVM-side normalisation) ---------------------------------


def test_vector_frame_gives_the_rows_vectorize_gives(spark):
    rows = [([1.0, 2.0],), ([3.0],), (None,), ([None, 4.0],), ([5.0, NAN],), ([0.5, -0.5],)]
    df = spark.createDataFrame(rows, "x array<float>").repartition(2)
    norm = np.array([r[0] for r in vectorize(df, ["x"], dimension=2)[0].collect()], float)
    for nonfinite in ["drop", "zero"]:
        got = gram_matrix(df, ["x"], norm_bound=2.0, dimension=2, nonfinite=nonfinite)
        assert _rel_err(got, _expected(norm, 2.0, nonfinite)) < 1e-6  # float32 inputs
    assert vector_frame(df, ["x"], dimension=2)[1] == 2


# -- the direct Parquet path ----------------------------------------------------------


@pytest.fixture(scope="module")
def parquet_data(spark, tmp_path_factory):
    rng = np.random.default_rng(5)
    X = rng.normal(size=(600, 4)) * rng.uniform(0.1, 2, size=(600, 1))
    X[7, 2] = NAN
    rows = [(list(map(float, r)), *map(float, r)) for r in X]
    rows[11] = ([1.0, 2.0], None, 0.5, 0.5, 0.5)  # short array; null column value
    rows[12] = (None, 0.1, 0.2, 0.3, 0.4)
    df = spark.createDataFrame(rows, "x array<double>, a double, b double, c double, e double")
    path = str(tmp_path_factory.mktemp("pq") / "data")
    df.repartition(3).write.parquet(path)
    return path, df


@pytest.mark.parametrize("nonfinite", ["drop", "zero"])
def test_parquet_path_matches_spark_path(spark, parquet_data, nonfinite):
    path, _ = parquet_data
    for cols, dim in [(["x"], 4), (["a", "b", "c", "e"], None)]:
        want = gram_matrix(spark.read.parquet(path), cols, norm_bound=1.2, dimension=dim, nonfinite=nonfinite)
        got = gram_matrix_parquet(path, cols, norm_bound=1.2, dimension=dim, nonfinite=nonfinite)
        assert _rel_err(got, want) < 1e-12


def test_parquet_path_reads_itself_and_splits_files(spark, parquet_data, monkeypatch, tmp_path):
    _, df = parquet_data
    path = str(tmp_path / "rg")
    pdf = df.toPandas()
    X = np.array([r if r is not None and len(r) == 4 else [NAN] * 4 for r in pdf["x"]], float)
    table = pa.Table.from_pandas(pdf[["x"]], preserve_index=False)
    import os

    os.makedirs(path)
    pq.write_table(table, f"{path}/one.parquet", row_group_size=50)  # 12 row groups, one file

    def no_fallback(*a, **k):
        raise AssertionError("the Spark reader was used")

    monkeypatch.setattr(gram, "gram_matrix", no_fallback)
    files = spark.read.parquet(path).inputFiles()
    assert len(gram.plan_tasks(spark, files, 8 * 4 * 4)) == 1  # a few KB: below Spark's open cost, not split
    for key, value in [("spark.sql.files.maxPartitionBytes", "4096"),  # split above maxPartitionBytes
                       ("spark.sql.files.openCostInBytes", "1")]:  # or in one part per core (total / slots)
        spark.conf.set(key, value)
        try:
            tasks = gram.plan_tasks(spark, files, 8 * 4 * 4)
            assert len(tasks) == 2 and len({u[1] for t in tasks for u in t}) > 1  # both cores share the file
            got = gram_matrix_parquet([path], ["x"], norm_bound=1.0, dimension=4, spark=spark)
        finally:
            spark.conf.unset(key)
        assert _rel_err(got, _expected(X, 1.0)) < 1e-9


def test_task_planning_balances_bytes_over_a_multiple_of_the_cores(spark):
    mb = 1 << 20
    units = [((f"f{i}", 0, 1), 50 * mb) for i in range(16)] + [(("big", k, 3), 100 * mb) for k in range(3)]
    tasks = PT._pack(units, 2)
    assert sorted(u for t in tasks for u in t) == sorted(u for u, _ in units)  # each unit exactly once
    sizes = dict(units)
    loads = sorted(sum(sizes[u] for u in t) for t in tasks)
    assert loads == [550 * mb, 550 * mb]  # 1100 MB split evenly
    assert len(PT._pack(units[:1], 4)) == 1  # never more tasks than units
    # One task per core until a task would stream more than _MAX_TASK_BYTES.
    gib = 1 << 30
    assert PT._task_count(10 * mb, 2, 256) == 2
    assert PT._task_count(2 * gib, 2, 256) == 2
    assert PT._task_count(2 * gib + 1, 2, 256) == 4
    assert PT._task_count(1000 * gib, 8, 256) == 256  # capped: partials the driver receives
    assert PT._conf_bytes(spark, "no.such.key", 7) == 7
    assert PT._task_slots(spark) == 2  # local[2, 2]: two task slots, whatever spark.default.parallelism says


def test_parquet_missing_column_reads_as_nulls(tmp_path):
    pq.write_table(pa.table({"a": [1.0, 2.0], "b": [0.0, 1.0]}), tmp_path / "full.parquet")
    pq.write_table(pa.table({"a": [3.0]}), tmp_path / "short.parquet")
    tasks = [[(f"file://{tmp_path}/full.parquet", 0, 1)], [(f"file://{tmp_path}/short.parquet", 0, 1)]]
    ids = pa.RecordBatch.from_arrays([pa.array([0, 1])], names=["id"])
    for nonfinite, rows in [("drop", [[1, 0], [2, 1]]), ("zero", [[1, 0], [2, 1], [3, 0]])]:
        (out,) = parquet_partials_fn(tasks, ["a", "b"], "columns", 2, 10.0, nonfinite)(iter([ids]))
        upper = np.frombuffer(out.column(0)[0].as_py()).reshape(2, 2)
        R = np.array(rows, float)
        assert np.array_equal(upper, np.triu(R.T @ R))


def test_parquet_empty_input_gives_zeros(spark, tmp_path):
    path = str(tmp_path / "empty")
    spark.createDataFrame([], "a double, b double").write.parquet(path)
    assert np.array_equal(gram_matrix_parquet(path, ["a", "b"], norm_bound=1.0), np.zeros((2, 2)))


def test_parquet_falls_back_to_spark_with_same_result(spark, tmp_path):
    path = str(tmp_path / "parted")
    rows = [("u1", 1, 1.0, 0.5), ("u1", 1, 1.0, 0.5), ("u2", 2, 0.5, 0.5), (None, 2, 3.0, 4.0)]
    spark.createDataFrame(rows, "user string, part int, a double, b double").write.partitionBy("part").parquet(path)
    # 'part' lives in directory names, not in the files: the Spark reader handles it
    got = gram_matrix_parquet(path, ["a", "part"], norm_bound=10.0)
    want = gram_matrix(spark.read.parquet(path), ["a", "part"], norm_bound=10.0)
    assert _rel_err(got, want) < 1e-12
    # privacy units need a shuffle: also the Spark reader (m = 1 keeps one row per unit)
    got = gram_matrix_parquet(path, ["a", "b"], norm_bound=10.0, privacy_unit="user", max_rows_per_unit=1)
    assert got[1, 1] == pytest.approx(0.25 + 0.25 + 16.0)


def test_parquet_bad_requests(spark, parquet_data, tmp_path):
    path, _ = parquet_data
    with pytest.raises(SchemaError, match="does not exist"):
        gram_matrix_parquet(str(tmp_path / "nope"), ["a"], norm_bound=1.0)
    with pytest.raises(SchemaError, match="'zz' not found"):
        gram_matrix_parquet(path, ["a", "zz"], norm_bound=1.0)
    with pytest.raises(SchemaError, match="does not exist"):
        gram_matrix_parquet([path, str(tmp_path / "nope")], ["a"], norm_bound=1.0)


def test_arrow_batch_cap_is_scoped_to_the_call(spark):
    key = "spark.sql.execution.arrow.maxBytesPerBatch"
    df = spark.createDataFrame([(1.0, 2.0)], "a double, b double")
    assert spark.conf.get(key, None) is None
    gram_matrix(df, ["a", "b"], norm_bound=10.0)
    assert spark.conf.get(key, None) is None  # unset again afterwards
    spark.conf.set(key, "1000000")
    try:
        gram_matrix(df, ["a", "b"], norm_bound=10.0)
        assert spark.conf.get(key) == "1000000"  # a user's own cap is left alone
    finally:
        spark.conf.unset(key)


# -- Spark Connect ---------------------------------------------------------------------

CONNECT_CLIENT = r'''
import json, sys
import numpy as np
from pyspark import SparkContext
from pyspark.sql.connect.session import SparkSession as ConnectSession
from spark_dp.aggregates import gram_matrix
from spark_dp.aggregates.gram import gram_matrix_parquet
from spark_dp.runtime import get_spark

path = sys.argv[1]
spark = get_spark()
assert isinstance(spark, ConnectSession)
X = np.random.default_rng(2).normal(size=(300, 3))
spark.createDataFrame([(list(map(float, r)),) for r in X], "x array<double>").write.parquet(path)
a = gram_matrix(spark.read.parquet(path), ["x"], norm_bound=1.0, dimension=3)
import spark_dp.aggregates.gram as G
def no_fallback(*args, **kwargs):
    raise AssertionError("the Spark reader was used")
G.gram_matrix = no_fallback
b = gram_matrix_parquet(path, ["x"], norm_bound=1.0, dimension=3)
assert spark.conf.get("spark.sql.execution.arrow.maxBytesPerBatch", None) is None
assert SparkContext._active_spark_context is None, "a SparkContext was started"
n = np.linalg.norm(X, axis=1, keepdims=True)
C = X * np.minimum(1.0, 1.0 / n)
print(json.dumps({"a": float(np.max(np.abs(a - C.T @ C))), "b": float(np.max(np.abs(b - C.T @ C)))}))
'''


def test_both_paths_over_spark_connect(tmp_path, connect_server):
    import json
    import sys

    from tests._servers import run_client, spark_env

    script = tmp_path / "client.py"
    script.write_text(CONNECT_CLIENT)
    env = spark_env(tmp_path / "client-local", SPARK_REMOTE=connect_server.url)
    run = run_client([sys.executable, str(script), str(tmp_path / "data")], env=env, cwd=tmp_path / "client",
                     name="gram-connect")
    assert run.returncode == 0, run.describe(connect_server)
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["a"] < 1e-9 and out["b"] < 1e-9
