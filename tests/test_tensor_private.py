"""Privacy of the tensor family: calibrations, white-box noise audits for every
release shape, a black-box audit of one noisy power step, and utility.

Every expected σ here is computed independently of the code under test: from
``dp_accounting.get_sigma_gaussian`` (exact) or the paper's formulas written
out below, and from vectors the test reconstructs itself, never from the
``sigma`` the mechanism passes to the sampler.
"""

import itertools
import math

import dp_accounting
import numpy as np
import pytest

from spark_dp.errors import ConfigError
from spark_dp.privacy import Budget, Chokepoint, SeededSampler, compose_epsilon, open_ledger
from spark_dp.privacy.chokepoint import UnchargedNoiseError
from spark_dp.tensor import (
    input_perturbation_plan,
    private_online_power_method,
    private_tensor_power_method,
    rows_plan,
    tensor_entry_plan,
)
from spark_dp.tensor.input_perturbation import noisy_symmetric_tensor, unique_entries
from spark_dp.tensor.power_method import random_unit_columns
from spark_dp.tensor.private import noisy_power_step
from tests._audit import chi2_variance_pvalue, empirical_epsilon
from tests._samplers import FakeChokepoint, Recorder, UnderNoised
from tests._tensor_data import orthogonal_tensor

EPS, DELTA = 1.0, 1e-6


def paper_nu(eps, delta, K):
    """Alg. 3 step 2, written out: ν = 6√(2 ln(1.25/δ₀))/ε₀."""
    eps0 = eps / math.sqrt(K * (4 + math.log(2 / delta)))
    delta0 = delta / (2 * K)
    return 6 * math.sqrt(2 * math.log(1.25 / delta0)) / eps0


def exact_nu(eps, delta, K):
    return 6 * math.sqrt(K) * dp_accounting.get_sigma_gaussian(eps, delta)


def charged(tmp_path, events, sampler, name="r"):
    ledger = open_ledger(f"sqlite:///{tmp_path}/{name}.db")
    cp = Chokepoint(ledger, dataset_id="audit", release_id=name, request_sha256="x", sampler=sampler,
                    limit=Budget(1e6, 1e-3))
    cp.charge(events, Budget(EPS, DELTA))
    return cp


# -- calibration -------------------------------------------------------------------
@pytest.mark.parametrize("k, L, R", [(1, 1, 1), (3, 10, 20), (5, 20, 30)])
def test_tensor_entry_plans_match_independent_formulas(k, L, R):
    K = k * L * (R + 1)
    exact = tensor_entry_plan(epsilon=EPS, delta=DELTA, k=k, L=L, R=R, calibration="exact")
    paper = tensor_entry_plan(epsilon=EPS, delta=DELTA, k=k, L=L, R=R, calibration="paper")
    assert exact.releases == paper.releases == len(exact.events) == K
    assert exact.nu == pytest.approx(exact_nu(EPS, DELTA, K), rel=1e-6)
    assert paper.nu == pytest.approx(paper_nu(EPS, DELTA, K), rel=1e-12)
    assert exact.nu < paper.nu
    # the ledger's exact accounting: exact spends the claim, paper much less
    assert compose_epsilon(exact.events, DELTA) == pytest.approx(EPS, abs=1e-6)
    assert compose_epsilon(exact.events, DELTA) <= EPS
    assert compose_epsilon(paper.events, DELTA) < 0.5 * EPS


def test_rows_plan_sensitivities_and_composition():
    B, L, k, R = 1.5, 8, 2, 3
    fresh = rows_plan(epsilon=EPS, delta=DELTA, k=k, L=L, R=R, norm_bound=B, mode="fresh")
    reuse = rows_plan(epsilon=EPS, delta=DELTA, k=k, L=L, R=R, norm_bound=B, mode="reuse")
    z1 = dp_accounting.get_sigma_gaussian(EPS, DELTA)
    assert fresh.sensitivity == pytest.approx(math.sqrt(L) * B**3)
    assert fresh.composition == "parallel" and len(fresh.events) == 1
    assert fresh.sigma == pytest.approx(z1 * math.sqrt(L) * B**3, rel=1e-6)
    assert reuse.composition == "sequential" and len(reuse.events) == k * (R + 1)
    assert reuse.sigma == pytest.approx(z1 * math.sqrt(k * (R + 1) * L) * B**3, rel=1e-6)
    rep = rows_plan(epsilon=EPS, delta=DELTA, k=k, L=L, R=R, norm_bound=B, mode="reuse", neighbors="replace",
                    max_rows_per_unit=3)
    assert rep.sensitivity == pytest.approx(2 * 3 * math.sqrt(L) * B**3)
    paper = rows_plan(epsilon=EPS, delta=DELTA, k=k, L=L, R=R, norm_bound=B, mode="reuse", calibration="paper")
    assert paper.sigma == pytest.approx(paper_nu(EPS, DELTA, k * L * (R + 1)) / 6 * B**3, rel=1e-12)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_calibration_errors_are_config_errors():
    with pytest.raises(ConfigError, match="'epsilon'.*too small"):
        tensor_entry_plan(epsilon=1e-12, delta=DELTA, k=1, L=4, R=4)  # K = 20: σ/Δ ≈ 1.8e6 > MAX_NOISE_MULTIPLIER
    with pytest.raises(ConfigError, match="epsilon_0"):
        tensor_entry_plan(epsilon=50.0, delta=DELTA, k=1, L=1, R=1, calibration="paper")
    with pytest.raises(ConfigError, match="'mode'"):
        rows_plan(epsilon=EPS, delta=DELTA, k=1, L=1, R=1, norm_bound=1.0, mode="fresh", max_rows_per_unit=2)


# -- white-box audits ---------------------------------------------------------------
def _alg3_standardised_noise(sampler, nu_indep, *, d=8, L=6, R=3, seed=3):
    """Alg. 3 on the zero tensor (k = 1): replays the candidates from the seed and
    standardises every recorded draw by the independently computed σ."""
    plan = tensor_entry_plan(epsilon=EPS, delta=DELTA, k=1, L=L, R=R)
    cp = charged(pytest_tmp, plan.events, sampler)
    private_tensor_power_method(np.zeros((d, d, d)), 1, L=L, R=R, nu=plan.nu, chokepoint=cp,
                                rng=np.random.default_rng(seed))
    assert cp.unused_events == []
    U = random_unit_columns(np.random.default_rng(seed), d, L)
    draws = iter(sampler.noise)
    z = []
    for _t in range(R):  # power steps: T = 0, so the released vector is the noise
        new = np.empty_like(U)
        for tau in range(L):
            n = next(draws)
            z.append(n / (nu_indep * np.max(np.abs(U[:, tau])) ** 2))
            new[:, tau] = n / np.linalg.norm(n)
        U = new
    for tau in range(L):  # eigenvalue estimates at u_R
        z.append(next(draws) / (nu_indep * np.max(np.abs(U[:, tau])) ** 3))
    assert next(draws, None) is None
    return np.concatenate(z)


@pytest.fixture(autouse=True)
def _tmp(tmp_path):
    global pytest_tmp
    pytest_tmp = tmp_path


def test_white_box_alg3_power_steps_and_eigenvalues():
    nu = exact_nu(EPS, DELTA, 1 * 6 * 4)
    z = _alg3_standardised_noise(Recorder(), nu)
    assert z.size == 3 * 6 * 8 + 6
    assert chi2_variance_pvalue(z, 1.0) > 1e-6
    assert chi2_variance_pvalue(z, 0.5) < 1e-6 and chi2_variance_pvalue(z, 2.0) < 1e-6


def test_white_box_alg3_catches_under_noise():
    nu = exact_nu(EPS, DELTA, 1 * 6 * 4)
    z = _alg3_standardised_noise(Recorder(UnderNoised()), nu)
    assert chi2_variance_pvalue(z, 1.0) < 1e-6


def test_alg3_with_smaller_nu_than_charged_is_refused(tmp_path):
    plan = tensor_entry_plan(epsilon=EPS, delta=DELTA, k=1, L=2, R=2)
    cp = charged(tmp_path, plan.events, Recorder(), "half")
    with pytest.raises(UnchargedNoiseError):
        private_tensor_power_method(np.zeros((4, 4, 4)), 1, L=2, R=2, nu=plan.nu / 2, chokepoint=cp,
                                    rng=np.random.default_rng(0))


@pytest.mark.parametrize("mode", ["fresh", "reuse"])
@pytest.mark.parametrize("calibration", ["exact", "paper"])
def test_white_box_rows_batches(tmp_path, mode, calibration):
    d, k, L, R, B = 6, 2, 4, 2, 1.3
    plan = rows_plan(epsilon=EPS, delta=DELTA, k=k, L=L, R=R, norm_bound=B, mode=mode, calibration=calibration)
    batches = 1 if mode == "fresh" else k * (R + 1)
    if calibration == "exact":
        sigma = math.sqrt(batches) * dp_accounting.get_sigma_gaussian(EPS, DELTA) * math.sqrt(L) * B**3
    else:
        sigma = paper_nu(EPS, DELTA, batches * L) / 6 * B**3
    sampler = Recorder()
    cp = charged(tmp_path, plan.events, sampler)
    zeros = lambda U, p: (np.zeros((d, L)), np.zeros(L), 0.0)  # noqa: E731 - exact sums of an empty input
    dec = private_online_power_method(zeros, d=d, k=k, L=L, R=R, plan=plan, chokepoint=cp,
                                      rng=np.random.default_rng(1))
    assert cp.unused_events == [] and dec.eigenvectors.shape == (k, d)
    shapes = [n.shape for n in sampler.noise]
    assert shapes == ([(d * L,)] * R + [(L,)]) * k  # R power batches + 1 eigenvalue batch per component
    noise = np.concatenate(sampler.noise)
    assert chi2_variance_pvalue(noise, sigma) > 1e-6
    assert chi2_variance_pvalue(noise, sigma / 2) < 1e-6
    halved = Recorder(UnderNoised())
    cp2 = charged(tmp_path, plan.events, halved, "halved")
    private_online_power_method(zeros, d=d, k=k, L=L, R=R, plan=plan, chokepoint=cp2, rng=np.random.default_rng(1))
    assert chi2_variance_pvalue(np.concatenate(halved.noise), sigma) < 1e-6


def test_input_perturbation_paper_is_the_classic_mechanism():
    plan = input_perturbation_plan(epsilon=0.5, delta=DELTA, calibration="paper", entry_scale=2.0)
    assert plan.sigma == pytest.approx(math.sqrt(2 * math.log(1.25 / DELTA)) / 0.5 * 2.0)
    with pytest.raises(ConfigError, match="'epsilon'"):
        input_perturbation_plan(epsilon=1.0, delta=DELTA, calibration="paper")


def test_white_box_input_perturbation(tmp_path):
    d, c = 9, 0.7  # 165 unique entries: with d = 6 (56) a halved σ escaped α = 1e-6 in 5.5 % of runs
    plan = input_perturbation_plan(epsilon=EPS, delta=DELTA, entry_scale=c)
    sigma = dp_accounting.get_sigma_gaussian(EPS, DELTA) * c
    for sampler, ok in ((Recorder(), True), (Recorder(UnderNoised()), False)):
        cp = charged(tmp_path, plan.events, sampler, f"ip{ok}")
        E = noisy_symmetric_tensor(np.zeros((d, d, d)), sigma=plan.sigma, sensitivity=plan.sensitivity, chokepoint=cp)
        for p in [(1, 0, 2), (2, 1, 0), (0, 2, 1)]:
            assert np.array_equal(E, E.transpose(p))
        i, j, k, w = unique_entries(d)
        assert sorted(set(w)) == [1.0, 2.0, 6.0]
        z = E[i, j, k] / w  # each unique entry carries N(0, (wσ)²)
        assert bool(chi2_variance_pvalue(z, sigma) > 1e-6) is ok
        assert chi2_variance_pvalue(z, sigma / 2 if ok else 2 * sigma) < 1e-6


def test_input_perturbation_sensitivity_is_attained_by_each_entry_kind():
    """A neighbouring change ±c·sym(eᵢ⊗eⱼ⊗eₖ) moves exactly one scaled unique entry, by c."""
    d, c = 4, 0.7
    i, j, k, w = unique_entries(d)
    for a, b, e in [(0, 1, 2), (1, 1, 3), (2, 2, 2)]:
        D = np.zeros((d, d, d))
        for p in itertools.permutations((a, b, e)):
            D[p] += c
        diff = D[i, j, k] / w
        assert np.count_nonzero(diff) == 1 and np.linalg.norm(diff) == pytest.approx(c)


# -- black-box audit of one noisy power step ----------------------------------------------
def _one_step_projections(nu, n=300_000):
    """One power step on neighbours T and T' = T + sym(e₀⊗e₀⊗e₀) at a fixed u, projected on
    the difference direction e₀ (where the bound 6‖u‖∞² is attained)."""
    d = 4
    u = np.full(d, 0.5)  # ‖u‖∞² = 1/4, difference 6·u₀²·e₀
    T, _, _ = orthogonal_tensor(d, 2, seed=4)
    T2 = T.copy()
    T2[0, 0, 0] += 6.0
    U = np.tile(u[:, None], (1, n))
    none = (np.zeros(0), np.zeros((0, d)))
    x0 = noisy_power_step(T, U, *none, nu=nu, entry_scale=1.0, gaussian=FakeChokepoint.seeded(1).gaussian)[0]
    x1 = noisy_power_step(T2, U, *none, nu=nu, entry_scale=1.0, gaussian=FakeChokepoint.seeded(2).gaussian)[0]
    base = np.einsum("ijk,j,k->i", T, u, u)[0]
    return x0 - base, x1 - base


def test_black_box_one_power_step_stays_below_claim():
    nu = 6 * dp_accounting.get_sigma_gaussian(EPS, DELTA)  # one release at (ε, δ)
    x0, x1 = _one_step_projections(nu)
    assert empirical_epsilon(x0, x1, DELTA) < EPS


def test_black_box_catches_an_under_noised_step():
    nu = 6 * dp_accounting.get_sigma_gaussian(EPS, DELTA) / 2
    x0, x1 = _one_step_projections(nu)
    assert empirical_epsilon(x0, x1, DELTA) > EPS


# -- utility -----------------------------------------------------------------------
def test_alg3_recovers_top_component_at_large_epsilon(tmp_path):
    T, lam, V = orthogonal_tensor(20, 3, seed=5, lambdas=[3000.0, 2000.0, 1000.0])
    plan = tensor_entry_plan(epsilon=5.0, delta=DELTA, k=3, L=8, R=15)
    cp = charged(tmp_path, plan.events, SeededSampler(np.random.default_rng(6)))
    dec = private_tensor_power_method(T, 3, L=8, R=15, nu=plan.nu, chokepoint=cp, rng=np.random.default_rng(7))
    assert np.linalg.norm(dec.eigenvectors[0] - V[0]) < 0.05
    assert abs(dec.eigenvalues[0] - lam[0]) < 0.05 * lam[0]


# -- whitening: M2 and the whitened passes ---------------------------------------------
@pytest.mark.parametrize("mode", ["fresh", "reuse"])
def test_white_box_whitened_releases(tmp_path, mode):
    """M2's noise has σ = z·B²; each whitened pass σ = z·√L·(‖W‖op·B)³ with W recomputed
    here from the released M2 (independently of the code under test, by eigh)."""
    from spark_dp.tensor import private_whitened_power_method, whitened_rows_plan

    d, k, L, R, B = 14, 2, 8, 3, 1.2  # 105 draws for M2, 112 for the passes
    releases = 1 + (1 if mode == "fresh" else k * (R + 1))
    z = math.sqrt(releases) * dp_accounting.get_sigma_gaussian(EPS, DELTA)
    plan = whitened_rows_plan(epsilon=EPS, delta=DELTA, k=k, L=L, R=R, norm_bound=B, mode=mode)
    assert len(plan.events) == releases and plan.noise_multiplier == pytest.approx(z, rel=1e-6)
    gram = np.diag(np.arange(1.0, d + 1)) * 50  # a well-conditioned exact M2
    zeros = lambda U, p: (np.zeros((d, U.shape[1])), np.zeros(U.shape[1]), 0.0)  # noqa: E731
    for sampler, ok in ((Recorder(), True), (Recorder(UnderNoised()), False)):
        cp = charged(tmp_path, plan.events, sampler, f"w{mode}{ok}")
        private_whitened_power_method(zeros, gram, k=k, L=L, R=R, plan=plan, chokepoint=cp,
                                      rng=np.random.default_rng(2), norm_bound=B, mode=mode)
        assert cp.unused_events == []
        m2_noise, passes = sampler.noise[0], sampler.noise[1:]
        iu = np.triu_indices(d)
        assert m2_noise.shape == (len(iu[0]),)
        M2 = np.zeros((d, d))
        M2[iu] = gram[iu] + m2_noise
        M2 = M2 + np.triu(M2, 1).T
        s = np.sort(np.linalg.eigvalsh(M2))[::-1][:k]
        B_y = B / math.sqrt(s[-1])  # ‖W‖op = 1/√(k-th eigenvalue)
        sigma_pass = z * math.sqrt(L) * B_y**3
        assert [p.shape for p in passes] == ([(k * L,)] * R + [(L,)]) * k  # whitened: k×L batches
        assert bool(chi2_variance_pvalue(m2_noise, z * B**2) > 1e-6) is ok
        assert bool(chi2_variance_pvalue(np.concatenate(passes), sigma_pass) > 1e-6) is ok


# -- black-box audits of the row pass and of input perturbation -----------------------------
def _row_pass_projections(plan, n=300_000):
    """One fresh pass on neighbours D = ∅ and D' = {x}, x = B·u, where every column of the batch
    moves by (xᵀu)²x = B³u: the Frobenius bound √L·B³ is attained. Projected on the difference."""
    from spark_dp.tensor.private import noisy_batch

    d, L = 3, 4
    B = (plan.details["column_sensitivity"]) ** (1 / 3)
    u = np.array([1.0, 2.0, 2.0]) / 3.0
    diff = np.tile((B**3 * u)[:, None], (1, L))
    unit = diff / np.linalg.norm(diff)
    # n independent releases in one vectorised call of the mechanism's noisy_batch
    x0 = np.einsum("nij,ij->n", noisy_batch(np.zeros((n, d, L)), plan, FakeChokepoint.seeded(3).gaussian), unit)
    x1 = np.einsum("nij,ij->n", noisy_batch(np.broadcast_to(diff, (n, d, L)), plan, FakeChokepoint.seeded(4).gaussian), unit)
    return x0, x1


def test_black_box_row_pass_stays_below_claim_and_catches_under_noise():
    import dataclasses

    plan = rows_plan(epsilon=EPS, delta=DELTA, k=1, L=4, R=1, norm_bound=1.3, mode="fresh")
    assert plan.sensitivity == pytest.approx(math.sqrt(4) * 1.3**3)
    x0, x1 = _row_pass_projections(plan)
    assert empirical_epsilon(x0, x1, DELTA) < EPS
    x0, x1 = _row_pass_projections(dataclasses.replace(plan, sigma=plan.sigma / 2))
    assert empirical_epsilon(x0, x1, DELTA) > EPS


def _ip_projections(sigma, n=200_000):
    """Input perturbation on T = 0 and T' = symmetrize(e₀⊗e₀⊗e₀) (entry [0,0,0] moves by 6)."""
    plan = input_perturbation_plan(epsilon=EPS, delta=DELTA)
    T1 = np.zeros((2, 2, 2))
    T1[0, 0, 0] = 6.0
    cp0, cp1 = FakeChokepoint.seeded(5), FakeChokepoint.seeded(6)
    x0 = np.array([noisy_symmetric_tensor(np.zeros((2, 2, 2)), sigma=sigma, sensitivity=plan.sensitivity,
                                          chokepoint=cp0)[0, 0, 0] for _ in range(n)])
    x1 = np.array([noisy_symmetric_tensor(T1, sigma=sigma, sensitivity=plan.sensitivity,
                                          chokepoint=cp1)[0, 0, 0] for _ in range(n)])
    return x0, x1, plan


def test_black_box_input_perturbation():
    plan = input_perturbation_plan(epsilon=EPS, delta=DELTA)
    x0, x1, _ = _ip_projections(plan.sigma)
    assert empirical_epsilon(x0, x1, DELTA) < EPS
    x0, x1, _ = _ip_projections(plan.sigma / 2)
    assert empirical_epsilon(x0, x1, DELTA) > EPS
