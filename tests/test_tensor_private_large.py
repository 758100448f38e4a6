"""The lean pieces of the large-d private-vs-input-perturbation experiment (benchmarks/tensor_private_vs_epsilon_large.py).

They must be the library's algorithms and noise distributions, only held
differently: the matrix-free Alg. 3 loop returns exactly what
``private_tensor_power_method`` returns; the float32 noise tensor is exactly
symmetric with the unique-entry variances of ``noisy_symmetric_tensor``
(w² = 1, 4, 36), independent across unique entries; Alg. 1 on signal + σE
matrix-free equals the library's Alg. 1 on the explicit T + σE. Also: the
index-array-free ``unique_entries`` equals the meshgrid construction it
replaced.
"""

import itertools
import math

import numpy as np
import pytest

from benchmarks import tensor_private_vs_epsilon_large as large
from benchmarks.tensor_noise_tolerance import alg1_matrix_free, signal_apply
from spark_dp.privacy import Budget, Chokepoint, SeededSampler, open_ledger
from spark_dp.tensor import private_tensor_power_method, robust_tensor_power_method, tensor_entry_plan
from spark_dp.tensor.input_perturbation import unique_entries
from spark_dp.tensor.power_method import check_tensor, contract
from spark_dp.tensor.private import private_power_method_matrix_free
from tests._audit import chi2_variance_pvalue


def _chokepoint(tmp_path, events, name, seed):
    cp = Chokepoint(open_ledger(f"sqlite:///{tmp_path}/{name}.db"), dataset_id="t", release_id=name,
                    request_sha256="x", sampler=SeededSampler(np.random.default_rng(seed)), limit=Budget(1e9, 0.5))
    cp.charge(events, Budget(1.0, 1e-6))
    return cp


def _signal(d, seed=0):
    Q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((d, 3)))
    lam = np.array([50.0, 37.5, 25.0])
    return Q, lam, np.einsum("r,ir,jr,kr->ijk", lam, Q, Q, Q)


def test_matrix_free_alg3_returns_exactly_the_library_alg3(tmp_path):
    d, k, L, R = 9, 2, 4, 6
    Q, lam, T = _signal(d)
    plan = tensor_entry_plan(epsilon=40.0, delta=1e-6, k=k, L=L, R=R)
    lib = private_tensor_power_method(T, k, L=L, R=R, nu=plan.nu, chokepoint=_chokepoint(tmp_path, plan.events, "a", 3),
                                      rng=np.random.default_rng(5))
    Tc = check_tensor(T, owner="test")
    cp = _chokepoint(tmp_path, plan.events, "b", 3)
    free = private_power_method_matrix_free(lambda U: contract(Tc, U)[0], d, k, L=L, R=R, nu=plan.nu,
                                            gaussian=cp.gaussian, rng=np.random.default_rng(5))
    np.testing.assert_array_equal(free.eigenvalues, lib.eigenvalues)
    np.testing.assert_array_equal(free.eigenvectors, lib.eigenvectors)
    assert cp.unused_events == []  # the K = kL(R+1) releases, each through the chokepoint
    # the benchmark's contraction Vᵀ(λ∘(VU)²) instead of the explicit array: the same up to rounding
    cp = _chokepoint(tmp_path, plan.events, "c", 3)
    sig = private_power_method_matrix_free(signal_apply(Q.T, lam[:, None]), d, k, L=L, R=R, nu=plan.nu,
                                           gaussian=cp.gaussian, rng=np.random.default_rng(5))
    np.testing.assert_allclose(sig.eigenvalues, lib.eigenvalues, rtol=1e-8)
    np.testing.assert_allclose(sig.eigenvectors, lib.eigenvectors, atol=1e-8)
    assert abs(abs(lib.eigenvectors[0] @ Q[:, 0]) - 1) < 0.05  # and at this ε it recovers v₁


def _classes(d):
    i, j, k, w = unique_entries(d)
    return i, j, k, w


def test_lean_noise_is_symmetric_with_the_library_variances():
    d = 12
    i, j, k, w = _classes(d)
    gen = np.random.default_rng(11)
    draws = []
    for t in range(300):
        E = large.unit_symmetric_noise(d, gen.standard_normal, block=5)  # blocks that do not divide d
        assert E.dtype == np.float32
        if t < 3:
            for p in itertools.permutations(range(3)):
                np.testing.assert_array_equal(E, E.transpose(p))  # exactly symmetric
        draws.append(E[i, j, k].astype(np.float64))
    X = np.array(draws)  # (draws, unique entries)
    for weight, n in ((1.0, d * (d - 1) * (d - 2) // 6), (2.0, d * (d - 1)), (6.0, d)):
        cls = X[:, w == weight]
        assert cls.shape[1] == n
        assert chi2_variance_pvalue(cls, weight) > 1e-4, weight  # N(0, w²)
        assert abs(cls.mean()) < 5 * weight / math.sqrt(cls.size)
    # independent unique entries: empirical correlations of all pairs at the noise level of 300 draws
    C = np.corrcoef((X / w).T)
    off = C[~np.eye(C.shape[0], dtype=bool)]
    assert np.abs(off).max() < 0.35 and abs(off.mean()) < 0.01 and abs(off.std() - 1 / math.sqrt(300)) < 0.01


def test_lean_noise_catches_wrong_scaling():
    """The variance check above can fail: without the repeated-index rescaling the classes have 2 and 6."""
    d = 12
    i, j, k, w = _classes(d)
    gen = np.random.default_rng(12)
    X = np.array([large.unit_symmetric_noise(d, gen.standard_normal)[i, j, k] for _ in range(100)], dtype=np.float64)
    X[:, w == 2.0] /= math.sqrt(2.0)  # undo the √2: variance 2 instead of 4
    X[:, w == 6.0] /= math.sqrt(6.0)
    assert chi2_variance_pvalue(X[:, w == 2.0], 2.0) < 1e-6
    assert chi2_variance_pvalue(X[:, w == 6.0], 6.0) < 1e-6


def test_lean_noise_does_not_depend_on_the_block_size():
    d = 13
    a = large.unit_symmetric_noise(d, np.random.default_rng(4).standard_normal, block=4)
    b = large.unit_symmetric_noise(d, np.random.default_rng(4).standard_normal, block=50)
    np.testing.assert_array_equal(a, b)


def test_matrix_free_input_perturbation_equals_the_library_alg1_on_the_explicit_noisy_tensor():
    d, sigma = 10, 0.8
    Q, lam, T = _signal(d, seed=2)
    E = large.unit_symmetric_noise(d, np.random.default_rng(6).standard_normal)
    noisy = T + sigma * E.astype(np.float64)
    U = np.random.default_rng(7).standard_normal((d, 5))
    np.testing.assert_allclose(large.noise_apply(E)(U), contract(E.astype(np.float64), U)[0], rtol=1e-5, atol=1e-4)
    lib = robust_tensor_power_method(noisy, 1, L=5, R=10, rng=np.random.default_rng(8))
    sig = signal_apply(Q.T, lam[:, None])
    ne = large.noise_apply(E)
    free = alg1_matrix_free(lambda U: sig(U) + sigma * ne(U), d, 1, L=5, R=10, rng=np.random.default_rng(8))
    np.testing.assert_allclose(free.eigenvalues, lib.eigenvalues, rtol=1e-5)
    np.testing.assert_allclose(free.eigenvectors, lib.eigenvectors, atol=1e-5)


def _unique_entries_meshgrid(d):
    """The construction ``unique_entries`` had before (three d³ index grids)."""
    i, j, k = np.meshgrid(np.arange(d), np.arange(d), np.arange(d), indexing="ij")
    keep = (i <= j) & (j <= k)
    i, j, k = i[keep], j[keep], k[keep]
    distinct = 1 + (i != j).astype(int) + (j != k).astype(int)
    return i, j, k, np.select([distinct == 3, distinct == 2], [1.0, 2.0], 6.0)


@pytest.mark.parametrize("d", [1, 2, 3, 5, 17])
def test_unique_entries_equal_the_meshgrid_construction(d):
    for new, old in zip(unique_entries(d), _unique_entries_meshgrid(d)):
        assert new.dtype == old.dtype and not new.flags.writeable
        np.testing.assert_array_equal(new, old)
    assert unique_entries(d)[0].size == d * (d + 1) * (d + 2) // 6
