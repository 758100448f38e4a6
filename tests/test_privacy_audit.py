"""White-box and black-box audits of the Gaussian mechanism on AᵀA (Analyze Gauss).

σ is computed independently of the code under test: straight from
``dp_accounting.get_sigma_gaussian`` and the sensitivity B² (add/remove, one
row per unit), not through spark_dp's calibration or sensitivity functions.
"""

import dp_accounting
import numpy as np
import pytest

from spark_dp.privacy import Budget, Chokepoint, NumpySampler, SecureSampler, SeededSampler, open_ledger
from spark_dp.second_moment import analyze_gauss, analyze_gauss_plan
from tests._audit import chi2_variance_pvalue, empirical_epsilon
from tests._samplers import UnderNoised

EPS, DELTA, B = 1.0, 1e-6, 1.5
SIGMA_INDEPENDENT = dp_accounting.get_sigma_gaussian(EPS, DELTA) * B**2
D = 14  # 105 upper-triangle draws per release


def _release_zero_matrix(tmp_path, sampler):
    ledger = open_ledger(f"sqlite:///{tmp_path}/audit.db")
    event, sigma, sens = analyze_gauss_plan(epsilon=EPS, delta=DELTA, norm_bound=B)
    cp = Chokepoint(ledger, dataset_id="audit", release_id=f"r-{sampler.name}-{id(sampler)}",
                    request_sha256="x", sampler=sampler, limit=Budget(100.0, 1e-5))
    cp.charge([event], Budget(EPS, DELTA))
    out = analyze_gauss(np.zeros((D, D)), chokepoint=cp, sigma=sigma, sensitivity=sens)
    assert np.allclose(out, out.T)
    return out[np.triu_indices(D)]


@pytest.mark.parametrize("sampler", [SecureSampler(), NumpySampler(), SeededSampler(np.random.default_rng(7))],
                         ids=["secure", "numpy", "seeded"])
def test_white_box_noise_has_the_claimed_sigma(tmp_path, sampler):
    noise = _release_zero_matrix(tmp_path, sampler)
    assert noise.size == 105
    assert chi2_variance_pvalue(noise, SIGMA_INDEPENDENT) > 1e-6
    # the same test has the power to reject a wrong scale
    assert chi2_variance_pvalue(noise, SIGMA_INDEPENDENT / 2) < 1e-6
    assert chi2_variance_pvalue(noise, SIGMA_INDEPENDENT * 2) < 1e-6


def test_white_box_catches_an_under_noised_mechanism(tmp_path):
    noise = _release_zero_matrix(tmp_path, UnderNoised())
    assert chi2_variance_pvalue(noise, SIGMA_INDEPENDENT) < 1e-6


def _neighbour_projections(sampler, n):
    """M(D) and M(D') projected on their difference, D' = D + one row B·e₁."""
    _, sigma, sens = analyze_gauss_plan(epsilon=EPS, delta=DELTA, norm_bound=B)
    g0 = 3.0  # (AᵀA)₁₁ of D; D' adds B² to it and nothing elsewhere
    x0 = sampler.gaussian(np.full(n, g0), sigma, sens) - g0
    x1 = sampler.gaussian(np.full(n, g0 + B**2), sigma, sens) - g0
    return x0, x1


@pytest.mark.parametrize("sampler, n", [(NumpySampler(), 300_000), (SecureSampler(), 30_000)], ids=["numpy", "secure"])
def test_black_box_empirical_epsilon_stays_below_claim(sampler, n):
    x0, x1 = _neighbour_projections(sampler, n)
    eps_lb = empirical_epsilon(x0, x1, DELTA)
    assert eps_lb < EPS


def test_black_box_catches_an_under_noised_mechanism():
    x0, x1 = _neighbour_projections(UnderNoised(), 300_000)
    assert empirical_epsilon(x0, x1, DELTA) > EPS
