"""The tensor experiments of docs/tensor.md: the matrix-free Alg. 1 and noise models, and --quick runs."""

import itertools

import numpy as np

from benchmarks import tensor_noise_tolerance as nt
from benchmarks import tensor_private_vs_epsilon as pve
from spark_dp.tensor import robust_tensor_power_method
from spark_dp.tensor.power_method import contract


def _sym(E):
    return sum(E.transpose(p) for p in itertools.permutations(range(3))) / 6.0


def test_matrix_free_alg1_equals_the_library_alg1():
    gen = np.random.default_rng(1)
    d, k = 9, 3
    Q, _ = np.linalg.qr(gen.standard_normal((d, k)))
    T = np.einsum("r,ir,jr,kr->ijk", [3.0, 2.0, 1.0], Q, Q, Q) + 0.05 * _sym(gen.standard_normal((d, d, d)))
    lib = robust_tensor_power_method(T, k, L=4, R=7, rng=np.random.default_rng(5))
    free = nt.alg1_matrix_free(nt.explicit_apply(T), d, k, L=4, R=7, rng=np.random.default_rng(5))
    np.testing.assert_allclose(free.eigenvalues, lib.eigenvalues, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(free.eigenvectors, lib.eigenvectors, rtol=1e-9, atol=1e-10)


def test_matrix_free_noise_models_are_the_stated_tensors():
    gen = np.random.default_rng(2)
    d, k = 7, 2
    Q, _ = np.linalg.qr(gen.standard_normal((d, k)))
    V = Q.T
    P = np.eye(d) - V.T @ V
    w = P @ gen.standard_normal(d)
    w /= np.linalg.norm(w)
    U = gen.standard_normal((d, 5))
    U /= np.linalg.norm(U, axis=0)
    I = np.eye(d)
    pull = _sym(np.einsum("i,jk->ijk", w, I))  # sym(w⊗I⊗I)
    weak = _sym(np.einsum("i,jk->ijk", w, P))  # sym(w⊗P⊗P)
    np.testing.assert_allclose(nt.sym_vector_apply(w)(U), contract(pull, U)[0], atol=1e-12)
    np.testing.assert_allclose(nt.sym_vector_apply(w, P=lambda X: P @ X)(U), contract(weak, U)[0], atol=1e-12)
    np.testing.assert_allclose(nt.signal_apply(V)(U), contract(np.einsum("ri,rj,rk->ijk", V, V, V), U)[0], atol=1e-12)
    # weak: E(vᵢ, I, I) = 0; both have unit operator norm, attained at u = w
    assert np.abs(np.einsum("ijk,ri->rjk", weak, V)).max() < 1e-12
    for E in (pull, weak):
        assert abs(np.einsum("ijk,i,j,k->", E, w, w, w) - 1.0) < 1e-12
        assert abs(nt.op_norm(nt.explicit_apply(E), d, np.random.default_rng(3)) - 1.0) < 1e-6
    # the models through noise_apply have unit operator norm
    for model in ("pull", "tilted pull", "push", "weak pull"):
        f = nt.noise_apply(model, d, V, np.random.default_rng(4), None)
        assert abs(nt.op_norm(f, d, np.random.default_rng(5)) - 1.0) < 1e-3, model


def test_threshold_search_and_slope_fit():
    gen = np.random.default_rng(6)
    eta = nt.trial_threshold("pull", 12, 2, gen)
    assert nt.LO < eta < nt.HI  # noiseless recovery succeeds, η = 2 fails: the threshold is bracketed
    assert abs(nt.slope([10, 100, 1000], [1.0, 0.1, 0.01]) + 1.0) < 1e-9
    assert abs(nt.slope([10, 100, 1000, 10000], [0.5, 0.5, 0.05, 0.005], xmin=100) + 1.0) < 1e-9  # capped point left out
    assert np.isnan(nt.slope([10, 100], [1.0, 0.1], xmin=50))


def test_noise_tolerance_quick_run(tmp_path):
    res = nt.main(str(tmp_path / "nt.png"), quick=True)
    assert (tmp_path / "nt.png").stat().st_size > 0
    for model, per_d in res["eta"].items():
        assert all(nt.LO <= e <= nt.HI for e in per_d.values()), model


def test_private_vs_epsilon_quick_run(tmp_path):
    res = pve.main(str(tmp_path / "pve.png"), quick=True)
    assert (tmp_path / "pve.png").stat().st_size > 0
    for d, r in res.items():
        # Alg. 3 exact and input perturbation both recover v₁ somewhere on the grid at these small d
        assert r["alg3_exact"] <= 128 and r["input_perturbation"] <= 128, d


def test_private_vs_epsilon_large_quick_run(tmp_path, capsys):
    from benchmarks import tensor_private_vs_epsilon_large as pvl

    res = pvl.main(str(tmp_path / "pvl.png"), quick=True)
    assert (tmp_path / "pvl.png").stat().st_size > 0
    for d, r in res.items():
        assert r["alg3_exact"] <= 64 and r["input_perturbation"] <= 16, d
    # the printed lines are the explicit script's format, so --replot merges them
    log = tmp_path / "pvl.log"
    log.write_text(capsys.readouterr().out, encoding="utf-8")
    again = pve.replot(str(tmp_path / "re.png"), [str(log)])
    assert again.keys() == res.keys()
    for d in res:
        for m in pve.METHODS:
            assert again[d][m] == res[d][m] or (np.isnan(again[d][m]) and np.isnan(res[d][m]))
