"""The exact Gram kernel against numpy on the clipped rows."""

import math

import numpy as np
import pandas as pd
import pytest
from chispa import assert_df_equality
from pyspark.ml.linalg import Vectors
from pyspark.sql import types as T

from spark_dp.aggregates import gram_matrix, vectorize
from spark_dp.aggregates._blocks import clip_rows, row_norms
from spark_dp.errors import ConfigError, SchemaError


def _clipped(X, B):
    n = np.linalg.norm(X, axis=1, keepdims=True)
    return X * np.minimum(1.0, B / np.where(n > 0, n, 1.0))


def _rel_err(a, b):
    return np.max(np.abs(a - b)) / max(1e-300, np.max(np.abs(b)))


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(11)
    return rng.normal(size=(1000, 6)) * rng.uniform(0.1, 3, size=(1000, 1))


def test_columns_match_numpy(spark, data):
    df = spark.createDataFrame(pd.DataFrame(data, columns=[f"c{i}" for i in range(6)])).repartition(3)
    got = gram_matrix(df, [f"c{i}" for i in range(6)], norm_bound=2.0)
    Xc = _clipped(data, 2.0)
    assert _rel_err(got, Xc.T @ Xc) < 1e-9


def test_array_and_vector_columns_match_numpy(spark, data):
    Xc = _clipped(data, 1.0)
    arr = spark.createDataFrame([(list(map(float, r)),) for r in data], ["x"])
    assert _rel_err(gram_matrix(arr, ["x"], norm_bound=1.0, dimension=6), Xc.T @ Xc) < 1e-9
    vec = spark.createDataFrame([(Vectors.dense(r),) for r in data], ["v"])
    assert _rel_err(gram_matrix(vec, ["v"], norm_bound=1.0, dimension=6), Xc.T @ Xc) < 1e-9


def test_integer_columns_are_cast(spark):
    df = spark.createDataFrame([(1, 2), (3, 4)], "a int, b long")
    X = np.array([[1, 2], [3, 4]], float)
    assert _rel_err(gram_matrix(df, ["a", "b"], norm_bound=100.0), X.T @ X) < 1e-12


def test_nonfinite_policies(spark):
    rows = [(1.0, 0.0), (float("nan"), 1.0), (0.0, float("inf")), (None, 2.0), (0.5, 0.5)]
    df = spark.createDataFrame(rows, "a double, b double")
    keep = np.array([[1.0, 0.0], [0.5, 0.5]])
    assert _rel_err(gram_matrix(df, ["a", "b"], norm_bound=10.0), keep.T @ keep) < 1e-12
    zeroed = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0], [0.0, 2.0], [0.5, 0.5]])
    assert _rel_err(gram_matrix(df, ["a", "b"], norm_bound=10.0, nonfinite="zero"), zeroed.T @ zeroed) < 1e-12


def test_bad_arrays_are_data_not_errors(spark):
    df = spark.createDataFrame([([1.0, 0.0],), ([1.0, 2.0, 3.0],), (None,), ([None, 1.0],), ([0.0, 1.0],)],
                               "x array<double>")
    keep = np.array([[1.0, 0.0], [0.0, 1.0]])
    assert _rel_err(gram_matrix(df, ["x"], norm_bound=5.0, dimension=2), keep.T @ keep) < 1e-12


def test_empty_input_gives_zeros(spark):
    df = spark.createDataFrame([], "a double, b double, c double")
    assert np.array_equal(gram_matrix(df, ["a", "b", "c"], norm_bound=1.0), np.zeros((3, 3)))


def test_huge_values_are_clipped_not_zeroed():
    X = np.array([[1e300, 1e300], [3.0, 4.0]])
    assert np.allclose(row_norms(X), [math.sqrt(2) * 1e300, 5.0])
    C = clip_rows(X, 1.0)
    assert np.allclose(np.linalg.norm(C, axis=1), 1.0)


def test_privacy_unit_bounding_keeps_at_most_m_rows(spark):
    rows = [("u1", 1.0)] * 10 + [("u2", 1.0)] * 1 + [(None, 1.0)] * 5
    df = spark.createDataFrame(rows, "user string, a double")
    got = gram_matrix(df, ["a"], norm_bound=1.0, privacy_unit="user", max_rows_per_unit=3)
    assert got[0, 0] == pytest.approx(3 + 1 + 3)  # u1 capped at 3, u2 has 1, null unit capped at 3


def test_vectorize_output_with_chispa(spark):
    df = spark.createDataFrame([(1, 2.5), (None, 1.0)], "a int, b double")
    frame, d = vectorize(df, ["a", "b"])
    expected = spark.createDataFrame([([1.0, 2.5],), ([float("nan"), 1.0],)], f"{frame.columns[0]} array<double>")
    assert d == 2
    assert_df_equality(frame, expected, allow_nan_equality=True, ignore_nullable=True)


def test_schema_errors(spark):
    df = spark.createDataFrame([("a", 1.0, [1.0])], "s string, x double, arr array<double>")
    with pytest.raises(SchemaError, match="'missing' not found"):
        gram_matrix(df, ["x", "missing"], norm_bound=1.0)
    with pytest.raises(SchemaError, match="'s' has type string"):
        gram_matrix(df, ["x", "s"], norm_bound=1.0)
    with pytest.raises(ConfigError, match="dimension"):
        gram_matrix(df, ["arr"], norm_bound=1.0)
    with pytest.raises(ConfigError, match="nonfinite"):
        gram_matrix(df, ["x"], norm_bound=1.0, nonfinite="keep")
    with pytest.raises(SchemaError, match="'user' not found"):
        gram_matrix(df, ["x"], norm_bound=1.0, privacy_unit="user")
    assert T.ArrayType(T.DoubleType()) == df.schema["arr"].dataType
