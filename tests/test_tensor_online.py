"""The moment pass over Spark rows and the online power method (Alg. 2), exact and private."""

import numpy as np
import pandas as pd
import pytest

import spark_dp
from spark_dp.aggregates.moments import PASS_COL, prepare_rows, third_moment_sums
from spark_dp.privacy import SeededSampler
from spark_dp.tensor import online_tensor_power_method, robust_tensor_power_method
from spark_dp.tensor.api import tensor_decomposition
from tests._tensor_data import match

D, K = 6, 3
SCALES = np.array([1.0, 0.8, 0.6])


def mixture_rows(n, seed=0):
    """Rows x = s_h v_h with h uniform: Σ x^⊗3 = Σ_h n_h s_h³ v_h^⊗3 is exactly orthogonal of rank 3."""
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((D, K)))
    h = rng.integers(0, K, size=n)
    X = Q[:, h].T * SCALES[h][:, None]
    return X, Q.T, h


def frame_of(spark, X, extra_nan=0):
    X = X.copy()
    if extra_nan:
        X[:extra_nan, 0] = np.nan
    return spark.createDataFrame(pd.DataFrame(X, columns=[f"x{i}" for i in range(X.shape[1])]))


COLS = [f"x{i}" for i in range(D)]


def test_moment_sums_match_numpy_with_clipping_and_nan_policy(spark):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(500, D))
    df = frame_of(spark, X, extra_nan=7)
    frame, d = prepare_rows(df, COLS)
    U = rng.standard_normal((D, 4))
    S, m3, count = third_moment_sums(frame, U, norm_bound=1.5, nonfinite="drop")
    keep = X[7:]
    keep = keep * np.minimum(1, 1.5 / np.linalg.norm(keep, axis=1, keepdims=True))
    P = keep @ U
    assert d == D and count == 493
    assert np.allclose(S, keep.T @ P**2, rtol=1e-10) and np.allclose(m3, (P**3).sum(0), rtol=1e-10)
    frame.unpersist()


def test_fresh_passes_are_disjoint_balanced_and_stable_under_adding_a_row(spark):
    X = np.repeat(np.eye(D)[:2], 300, axis=0)  # 600 rows, only 2 distinct values
    df = frame_of(spark, X)
    frame, _ = prepare_rows(df, COLS, passes=4, seed=11)
    counts = frame.groupBy(PASS_COL).count().toPandas().set_index(PASS_COL)["count"]
    assert counts.sum() == 600 and len(counts) == 4 and counts.min() > 100  # duplicates spread out
    # neighbour: one more row; every other row keeps its pass
    X2 = np.vstack([X, np.ones((1, D))])
    frame2, _ = prepare_rows(frame_of(spark, X2), COLS, passes=4, seed=11)
    a = frame.groupBy(PASS_COL).count().toPandas().set_index(PASS_COL)["count"]
    b = frame2.groupBy(PASS_COL).count().toPandas().set_index(PASS_COL)["count"]
    diff = (b - a.reindex(b.index, fill_value=0))
    assert diff.abs().sum() == 1
    frame.unpersist()
    frame2.unpersist()


def test_online_reuse_matches_alg1_on_the_empirical_moment(spark):
    X, V, _ = mixture_rows(900, seed=2)
    frame, _ = prepare_rows(frame_of(spark, X), COLS)
    moments = lambda U, p: third_moment_sums(frame, U, norm_bound=10.0)  # noqa: E731
    dec = online_tensor_power_method(moments, d=D, k=2, L=3, R=6, rng=np.random.default_rng(3))
    T = np.einsum("ni,nj,nk->ijk", X, X, X) / len(X)
    ref = robust_tensor_power_method(T, 2, L=3, R=6, rng=np.random.default_rng(3))
    assert np.allclose(dec.eigenvectors, ref.eigenvectors, atol=1e-8)
    assert np.allclose(dec.eigenvalues, ref.eigenvalues, atol=1e-8)
    idx, err = match(dec.eigenvectors, V[:2])
    assert err.max() < 1e-6
    frame.unpersist()


def test_api_online_fresh_and_private_rows(spark, tmp_path, ledger_uri):
    X, V, h = mixture_rows(1200, seed=4)
    df = frame_of(spark, X)
    session = spark_dp.DPSession("t.rows", ledger=ledger_uri, epsilon_limit=100.0, delta_limit=1e-5,
                                 output=str(tmp_path / "out"), sampler=SeededSampler(np.random.default_rng(5)))
    public = spark_dp.DPSession("t.rows.public", ledger=ledger_uri, output=str(tmp_path / "out"),
                                sampler=SeededSampler(np.random.default_rng(5)))
    rel = tensor_decomposition(public, df, k=1, mechanism="online_power_method", columns=COLS, norm_bound=2.0,
                               restarts=3, iterations=5, mode="fresh", rng=np.random.default_rng(6), private=False)
    assert rel.privacy["private"] is False and public.budget() is None  # nothing charged
    assert rel.release_id.startswith("nonprivate-")
    idx, err = match(rel["eigenvectors"], V)
    # every fresh chunk's moment is exactly rank 3 with the same components
    assert err.min() < 1e-6
    top = int(np.argmin(err))
    assert rel["eigenvalues"][0] == pytest.approx(SCALES[top] ** 3 / K, rel=0.25)

    rel = tensor_decomposition(session, df, k=1, epsilon=50.0, delta=1e-6, columns=COLS, norm_bound=1.0,
                               restarts=3, iterations=4, mode="fresh", rows_per_round=1200 // 5,
                               rng=np.random.default_rng(7))
    m = rel.manifest
    assert m["privacy"]["composition"] == "parallel" and len(m["privacy"]["events"]) == 1
    assert m["privacy"]["sensitivity"] == pytest.approx(np.sqrt(3))
    assert 40.0 < session.budget().spent_epsilon <= 50.0  # one pass's Gaussian, exact accounting
    assert rel["eigenvectors"].shape == (1, D) and rel["eigenvalues"].shape == (1,)
    assert np.max(np.abs(V @ rel["eigenvectors"][0])) > 0.95  # the top component, noisy


def test_driver_memory_is_linear_in_d_at_d2000(spark):
    """d = 2000: a d×d matrix is 32 MB and the tensor 64 GB; the driver holds O(d(k+L)) doubles."""
    import tracemalloc

    d, n = 2000, 200
    rng = np.random.default_rng(8)
    X = rng.normal(size=(n, d)) / np.sqrt(d)
    df = spark.createDataFrame(pd.DataFrame({"x": list(X)}))
    frame, _ = prepare_rows(df, ["x"], dimension=d)
    frame.count()  # materialise the cache outside the measurement
    moments = lambda U, p: third_moment_sums(frame, U, norm_bound=1.0)  # noqa: E731
    tracemalloc.start()
    dec = online_tensor_power_method(moments, d=d, k=2, L=4, R=1, rng=np.random.default_rng(9))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    frame.unpersist()
    assert dec.eigenvectors.shape == (2, d)
    assert peak < 0.1 * d * d * 8, peak  # far below one d×d matrix (32 MB)
