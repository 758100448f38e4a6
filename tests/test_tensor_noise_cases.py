"""Thm 2.2's three noise cases (Wang & Anandkumar, NIPS 2016): the certain-failure facts docs/tensor.md states.

The noise-tolerance experiment (benchmarks/tensor_noise_tolerance.py) measures
thresholds; these tests pin the two constructions whose failure is a theorem
rather than a measurement:

* a per-step adversary with ‖ΔT(I,u,u)‖ = η fails Alg. 1 for certain once
  η ≥ λ·maxτ‖(Vu₀⁽τ⁾)²‖ ≈ λ√(3k)/d (case 1's O(λ/d) is tight);
* a weakly correlated noise (ΔT(vᵢ,I,I) = 0 exactly, ‖ΔT‖op = η) fails it
  for certain once η ≥ 3λα/(1 − kα²), α = max |vᵢᵀu₀⁽τ⁾| ≈ √(2 ln(2kL)/d):
  O(λ√(log(kL)/d)), so case 3's d-free O(λ/√k) cannot hold for random starts.
"""

import numpy as np

from benchmarks import tensor_noise_tolerance as nt
from spark_dp.tensor.power_method import random_unit_columns


def _components(d, k, seed):
    gen = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(gen.standard_normal((d, k)))
    return Q.T, gen


def _perp(V):
    return lambda X: X - V.T @ (V @ X)


def test_step_noises_have_the_stated_size_and_correlation():
    d, k, L = 50, 3, 6
    V, gen = _components(d, k, 1)
    S = V.T @ gen.standard_normal((k, L)) + 0.01 * gen.standard_normal((d, L))  # a step with a signal part
    U = random_unit_columns(gen, d, L)
    for model in nt.STEP:
        f = nt.step_noise(model, d, V, np.random.default_rng(2))
        for eta in (1e-3, 0.5, 10.0):
            G = f(S, U, eta, np.random.default_rng(3)) - S
            np.testing.assert_allclose(np.linalg.norm(G, axis=0), eta, rtol=1e-12)
            if model == "weak step":
                assert np.abs(V @ G).max() < 1e-12 * eta
            if model == "adversary":
                C = V.T @ (V @ S)
                c = np.linalg.norm(C, axis=0)
                # it only pushes against the signal part: by all of it where η ≥ ‖P_V s‖, else by η²/‖P_V s‖
                beta = np.where(c <= eta, c, eta**2 / c)
                np.testing.assert_allclose(V.T @ (V @ G), -beta * C / c, atol=1e-12)


def test_per_step_adversary_defeats_alg1_at_order_one_over_d():
    d, k, L, R = 4096, 3, 10, 30
    V, gen = _components(d, k, 4)
    step = nt.step_noise("adversary", d, V, gen)
    sig = nt.signal_apply(V)
    starts = random_unit_columns(np.random.default_rng(7), d, L)  # the first draw of alg1_matrix_free
    bound = float(np.max(np.linalg.norm((V @ starts) ** 2, axis=0)))  # λ·maxτ ‖(V u₀)²‖, λ = 1
    assert bound < 10 * np.sqrt(3 * k) / d  # O(λ/d): the size of the signal in the first step

    def run(eta):
        nrng = np.random.default_rng(8)
        return nt.alg1_matrix_free(sig, d, k, L=L, R=R, rng=np.random.default_rng(7),
                                   perturb=lambda S, U: step(S, U, eta, nrng))

    beaten = run(1.001 * bound)
    assert not nt.recovered(beaten, V)
    assert np.abs(V @ beaten.eigenvectors[0]).max() < 1e-9  # all L candidates of the first component held off span(V)
    assert nt.recovered(run(0.01 * bound), V)  # the same starts win against a weaker adversary


def test_weakly_correlated_noise_defeats_alg1_far_below_lambda_over_sqrt_k():
    d, k, L, R = 2**16, 3, 10, 30
    V, gen = _components(d, k, 5)
    perp = _perp(V)
    w = perp(gen.standard_normal(d))
    w /= np.linalg.norm(w)
    weak = nt.sym_vector_apply(w, P=perp)  # sym(w⊗P⊗P): E(vᵢ,I,I) = 0, ‖E‖op = 1 (tests/test_tensor_experiments.py)
    sig = nt.signal_apply(V)
    starts = random_unit_columns(np.random.default_rng(9), d, L)
    alpha = float(np.abs(V @ starts).max())
    eta = 1.001 * 3 * alpha / (1 - k * alpha**2)
    assert eta < 0.1 / np.sqrt(k)  # a tenth of case 3's λ/√k, and it shrinks like √(log(kL)/d)

    def run(e):
        return nt.alg1_matrix_free(lambda U: sig(U) + e * weak(U), d, k, L=L, R=R, rng=np.random.default_rng(9))

    beaten = run(eta)
    # a_i ← λa_i²/‖T̃(I,u,u)‖ ≤ 3λa_i²/(η(1 − ‖a‖²)) ≤ a_i: no candidate ever gains on any vᵢ
    assert np.abs(V @ beaten.eigenvectors[0]).max() <= alpha + 1e-12
    assert not nt.recovered(beaten, V)
    assert nt.recovered(run(1e-3 * eta), V)  # the same starts recover every component under a weaker noise
