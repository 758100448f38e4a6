"""Alg. 1 (robust tensor power method) on exact tensors, against TensorLy; bad inputs."""

import numpy as np
import pytest

from spark_dp.errors import ConfigError, SchemaError
from spark_dp.tensor import robust_tensor_power_method
from spark_dp.tensor.power_method import check_tensor, contract, deflate
from tests._tensor_data import match, orthogonal_tensor


def test_exact_orthogonal_tensor_is_recovered_to_1e_6():
    T, lam, V = orthogonal_tensor(30, 5, seed=1)
    dec = robust_tensor_power_method(T, 5, L=10, R=30, rng=np.random.default_rng(2))
    idx, err = match(dec.eigenvectors, V)
    assert sorted(idx) == list(range(5))  # every component found once
    assert err.max() < 1e-6
    assert np.abs(dec.eigenvalues[idx] - lam).max() < 1e-6
    # L restarts keep the largest T(u,u,u): components come out in decreasing λ
    assert np.all(np.diff(dec.eigenvalues) < 0)


def test_d100_k10_recovered():
    T, lam, V = orthogonal_tensor(100, 10, seed=3)
    dec = robust_tensor_power_method(T, 10, L=3, R=25, rng=np.random.default_rng(4))
    idx, err = match(dec.eigenvectors, V)
    assert sorted(idx) == list(range(10)) and err.max() < 1e-6
    assert np.abs(dec.eigenvalues[idx] - lam).max() < 1e-6


def test_matches_tensorly_symmetric_power_iteration():
    tl_cp = pytest.importorskip("tensorly.decomposition._symmetric_cp")
    T, lam, V = orthogonal_tensor(20, 4, seed=5, lambdas=[4.0, 3.0, 2.0, 1.0])
    np.random.seed(6)  # TensorLy draws its starts from the global numpy generator
    tl_weights, tl_factors = tl_cp.symmetric_parafac_power_iteration(T, rank=4, n_repeat=10, n_iteration=30)
    dec = robust_tensor_power_method(T, 4, L=10, R=30, rng=np.random.default_rng(7))
    tl_w, tl_V = np.asarray(tl_weights), np.asarray(tl_factors).T
    # Same eigenpairs. TensorLy's starts are uniform on [0, 1)^d (not on the
    # sphere), so it may find them in another order; ours come out by λ.
    idx, err = match(dec.eigenvectors, tl_V)
    assert sorted(idx) == list(range(4)) and err.max() < 1e-6
    assert np.allclose(dec.eigenvalues[idx], tl_w, atol=1e-6)
    assert np.allclose(np.sort(tl_w)[::-1], dec.eigenvalues, atol=1e-6)


def test_contract_and_deflate_equal_explicit_deflation():
    T, lam, V = orthogonal_tensor(12, 3, seed=8)
    rng = np.random.default_rng(9)
    U = rng.standard_normal((12, 4))
    S, m3 = contract(T, U)
    assert np.allclose(S, np.einsum("ijk,jl,kl->il", T, U, U))
    assert np.allclose(m3, np.einsum("ijk,il,jl,kl->l", T, U, U, U))
    lam_hat, V_hat = np.array([1.7, 0.3]), rng.standard_normal((2, 12))
    D = np.einsum("r,ri,rj,rk->ijk", lam_hat, V_hat, V_hat, V_hat)
    S2, m32 = deflate(S, m3, U, lam_hat, V_hat)
    S_ref, m3_ref = contract(T - D, U)
    assert np.allclose(S2, S_ref) and np.allclose(m32, m3_ref)


def test_rng_makes_runs_reproducible():
    T, _, _ = orthogonal_tensor(10, 3, seed=10)
    a = robust_tensor_power_method(T, 3, L=2, R=3, rng=np.random.default_rng(11))
    b = robust_tensor_power_method(T, 3, L=2, R=3, rng=np.random.default_rng(11))
    assert np.array_equal(a.eigenvectors, b.eigenvectors)


BAD = [
    ("k_above_d", dict(k=11), ConfigError, "'k'"),
    ("k_zero", dict(k=0), ConfigError, "'k'"),
    ("L_zero", dict(L=0), ConfigError, "'L'"),
    ("R_zero", dict(R=0), ConfigError, "'R'"),
    ("R_float", dict(R=2.5), ConfigError, "'R'"),
]


@pytest.mark.parametrize("name, over, exc, needle", BAD, ids=[b[0] for b in BAD])
def test_bad_parameters(name, over, exc, needle):
    T, _, _ = orthogonal_tensor(10, 2)
    kw = dict(k=2, L=2, R=2) | over
    with pytest.raises(exc, match=needle):
        robust_tensor_power_method(T, kw.pop("k"), rng=np.random.default_rng(0), **kw)


@pytest.mark.parametrize("tensor, needle", [
    (np.zeros((4, 4)), "3-way"),
    (np.zeros((4, 4, 4, 4)), "3-way"),
    (np.zeros((4, 4, 3)), r"shape \(d, d, d\)"),
    (np.arange(27.0).reshape(3, 3, 3), "symmetric"),
    (np.full((3, 3, 3), np.nan), "finite"),
    (np.full((3, 3, 3), "a"), "real numbers"),
], ids=["matrix", "4-way", "not_cubic", "asymmetric", "nan", "strings"])
def test_bad_tensors(tensor, needle):
    with pytest.raises(SchemaError, match=needle):
        check_tensor(tensor, owner="test")
