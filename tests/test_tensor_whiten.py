"""Whitening: non-orthogonal mixture components recovered from rows (exact and private)."""

import numpy as np
import pandas as pd

import spark_dp
from spark_dp.privacy import SeededSampler
from spark_dp.tensor.api import tensor_decomposition
from spark_dp.tensor.online import online_tensor_power_method
from spark_dp.tensor.whiten import unwhiten, whitened_moments, whitening
from tests._tensor_data import match

D, K = 6, 3
WEIGHTS = np.array([0.5, 0.3, 0.2])
SCALES = np.array([1.0, 0.9, 0.8])


def mixture(n, seed=0):
    """x = s_h a_h with non-orthogonal unit a_h (pairwise cosines ≈ 0.3-0.5) and weights w_h."""
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((K, D)) + 1.0  # shared offset: clearly non-orthogonal
    A /= np.linalg.norm(A, axis=1, keepdims=True)
    h = rng.choice(K, size=n, p=WEIGHTS)
    return A[h] * SCALES[h][:, None], A


def test_numpy_whitening_recovers_non_orthogonal_components():
    X, A = mixture(3000, seed=1)
    cos = A @ A.T
    assert np.abs(cos[np.triu_indices(K, 1)]).min() > 0.2  # the components are far from orthogonal
    n = len(X)

    def moments(U, p):
        P = X @ U
        return X.T @ P**2, (P**3).sum(0), float(n)

    W, W_pinv_T = whitening(X.T @ X / n, K)
    dec = online_tensor_power_method(whitened_moments(moments, W), d=K, k=K, L=5, R=30, rng=np.random.default_rng(2))
    w = unwhiten(dec, W_pinv_T)
    idx, err = match(w.eigenvectors, A)
    assert sorted(idx) == list(range(K)) and err.max() < 1e-6
    counts = np.bincount(np.argmax(np.abs(X @ A.T), axis=1), minlength=K) / n  # empirical weights
    assert np.allclose(w.weights[idx], counts, atol=1e-6)
    assert np.allclose(np.linalg.norm(w.components[idx], axis=1), SCALES, atol=1e-6)
    # without whitening the power method does not find them
    T = np.einsum("ni,nj,nk->ijk", X, X, X) / n
    from spark_dp.tensor import robust_tensor_power_method

    plain = robust_tensor_power_method(T, K, L=5, R=30, rng=np.random.default_rng(3))
    assert match(plain.eigenvectors, A)[1].max() > 1e-2


def test_api_whitened_rows_exact_and_private(spark, tmp_path, ledger_uri):
    X, A = mixture(2000, seed=4)
    df = spark.createDataFrame(pd.DataFrame(X, columns=[f"x{i}" for i in range(D)]))
    cols = [f"x{i}" for i in range(D)]
    session = spark_dp.DPSession("t.mix", ledger=ledger_uri, epsilon_limit=200.0, delta_limit=1e-5,
                                 output=str(tmp_path / "out"), sampler=SeededSampler(np.random.default_rng(5)))
    public = spark_dp.DPSession("t.mix.public", ledger=ledger_uri, output=str(tmp_path / "out"),
                                sampler=SeededSampler(np.random.default_rng(5)))
    rel = tensor_decomposition(public, df, k=K, mechanism="online_power_method", columns=cols, norm_bound=2.0,
                               restarts=4, iterations=8, mode="reuse", whiten=True, rng=np.random.default_rng(6),
                               private=False)
    idx, err = match(rel["eigenvectors"], A)
    assert sorted(idx) == list(range(K)) and err.max() < 1e-6
    assert rel["components"].shape == (K, D) and rel["weights"].shape == (K,)

    rel = tensor_decomposition(session, df, k=1, epsilon=100.0, delta=1e-6, columns=cols, norm_bound=1.0,
                               restarts=4, iterations=4, mode="fresh", whiten=True, rng=np.random.default_rng(7))
    p = rel.privacy
    assert p["whiten"] is True and len(p["events"]) == 2 and p["composition"] == "parallel"
    assert session.budget().spent_epsilon <= 100.0
    assert np.max(np.abs(A @ rel["eigenvectors"][0])) > 0.9  # one of the components, noisy
