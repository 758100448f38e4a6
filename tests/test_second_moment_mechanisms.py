"""White-box and black-box audits of the second-moment mechanisms (numpy, no Spark).

White-box: each mechanism's randomness has the distribution its proof
assumes (Wishart mean k·B²·I and covariance; JL E[(RÃ)ᵀ(RÃ)/r] = ÃᵀÃ;
inverse-Wishart mean; AdaSSP σ's), with constants computed independently of
the code under test. Black-box: the release on neighbouring datasets,
projected on the direction where they differ most, gives an empirical ε
lower bound below the claim — and a deliberately under-noised variant of
each mechanism is caught by the same test.
"""

import math

import dp_accounting
import numpy as np
import pytest
from scipy import stats

from spark_dp.aggregates.jl import jl_block_partial, row_normals
from spark_dp.privacy import Budget, Chokepoint, NumpySampler, SeededSampler, UnchargedNoiseError, open_ledger
from spark_dp.second_moment import (
    adassp,
    adassp_plan,
    additive_wishart,
    inverse_wishart,
    inverse_wishart_plan,
    jl_ridge,
    jl_ridge_plan,
    wishart_min_dof,
    wishart_plan,
)
from tests._audit import chi2_variance_pvalue, empirical_epsilon
from tests._samplers import FakeChokepoint, UnderNoised

EPS, DELTA, B = 1.0, 1e-6, 1.0


def eps_lb(x0, x1):
    """Empirical ε lower bound over both orders of the neighbours (both hockey-stick directions)."""
    return max(empirical_epsilon(x0, x1, DELTA), empirical_epsilon(x1, x0, DELTA))


def test_randomness_needs_a_charge(tmp_path):
    event, k = wishart_plan(d=3, epsilon=EPS, delta=DELTA)
    cp = Chokepoint(open_ledger(f"sqlite:///{tmp_path}/l.db"), dataset_id="t", release_id="r", request_sha256="x",
                    sampler=SeededSampler(np.random.default_rng(0)), limit=Budget(10.0, 1e-3))
    with pytest.raises(UnchargedNoiseError):
        additive_wishart(np.eye(3), chokepoint=cp, event=event, k=k, norm_bound=B)
    cp.charge([event], Budget(EPS, DELTA))
    out = additive_wishart(np.eye(3), chokepoint=cp, event=event, k=k, norm_bound=B)
    assert cp.unused_events == [] and np.all(np.linalg.eigvalsh(out) > 0)
    with pytest.raises(UnchargedNoiseError):  # one event, one draw
        additive_wishart(np.eye(3), chokepoint=cp, event=event, k=k, norm_bound=B)


# ---------------------------------------------------------------- Wishart
def test_wishart_dof_follows_sheffet():
    assert wishart_min_dof(3, 1.0, 1e-6) == 3 + math.ceil(28 * math.log(4e6))
    assert wishart_plan(d=3, epsilon=0.5, delta=1e-6)[1] == 3 + math.ceil(28 * math.log(4e6) / 0.25)


def _wishart_draws(k, n_draws, b=1.5, d=3, seed=3):
    cp = FakeChokepoint.seeded(seed)
    event, _ = wishart_plan(d=d, epsilon=EPS, delta=DELTA)
    return np.array([additive_wishart(np.zeros((d, d)), chokepoint=cp, event=event, k=k, norm_bound=b)
                     for _ in range(n_draws)])


def _wishart_moments_ok(w, k, b):
    d = w.shape[1]
    diag = w[:, np.arange(d), np.arange(d)].reshape(-1) / b**2  # each ~ χ²_k
    s = diag.sum()
    p_diag = 2 * min(stats.chi2.cdf(s, k * diag.size), stats.chi2.sf(s, k * diag.size))
    off = w[:, 0, 1] / b**2  # mean 0, variance k
    var_ok = abs(np.mean(off**2) / k - 1) < 0.2 and abs(np.var(diag) / (2 * k) - 1) < 0.2
    return p_diag > 1e-6 and var_ok and abs(np.mean(off)) < 5 * math.sqrt(k / len(off))


def test_white_box_wishart_mean_and_covariance():
    k = wishart_min_dof(3, EPS, DELTA)
    w = _wishart_draws(k, 400)
    assert _wishart_moments_ok(w, k, 1.5)
    assert np.allclose(w.mean(axis=0), k * 1.5**2 * np.eye(3), atol=0.05 * k * 1.5**2)


def test_white_box_wishart_catches_too_few_degrees_of_freedom():
    k = wishart_min_dof(3, EPS, DELTA)
    assert not _wishart_moments_ok(_wishart_draws(k // 2, 400), k, 1.5)


def _wishart_neighbour_samples(k, n):
    """Released (1,1) entry on D (AᵀA = 0.5·I) and D' = D + row B·e₁."""
    d = 2
    cp = FakeChokepoint.seeded(8)
    event, _ = wishart_plan(d=d, epsilon=EPS, delta=DELTA)
    g0 = 0.5 * np.eye(d)
    g1 = g0 + B**2 * np.diag([1.0, 0.0])
    x0 = np.array([additive_wishart(g0, chokepoint=cp, event=event, k=k, norm_bound=B)[0, 0] for _ in range(n)])
    x1 = np.array([additive_wishart(g1, chokepoint=cp, event=event, k=k, norm_bound=B)[0, 0] for _ in range(n)])
    return x0, x1


def test_black_box_wishart():
    k = wishart_min_dof(2, EPS, DELTA)
    x0, x1 = _wishart_neighbour_samples(k, 30_000)
    assert eps_lb(x0, x1) < EPS
    # under-noised: k = d + 2 instead of Sheffet's bound
    y0, y1 = _wishart_neighbour_samples(4, 30_000)
    assert eps_lb(y0, y1) > EPS


# ---------------------------------------------------------------- JL with ridge
A = np.array([[0.5, 0.1], [0.2, 0.4], [0.1, -0.3]])


def _project(a):
    h1, h2, c = np.arange(len(a), dtype=np.int64), np.full(len(a), 7, dtype=np.int64), np.ones(len(a))
    return lambda key: jl_block_partial(a, h1, h2, c, r=R_JL, key=key)


R_JL = 8


def test_jl_kernel_draws_independent_standard_normals():
    g = row_normals(np.arange(5000), np.full(5000, 3), 11, key=123456789)
    assert g.shape == (5000, 11)
    assert stats.kstest(g.ravel(), "norm").pvalue > 1e-4
    assert abs(np.corrcoef(g[:-1, 0], g[1:, 0])[0, 1]) < 0.06  # across rows
    assert abs(np.corrcoef(g[:, 0], g[:, 1])[0, 1]) < 0.06  # within a row (the Box–Muller pair)
    # a row's draws depend on its id and the key only
    assert np.array_equal(row_normals([42], [3], 11, key=5), row_normals([1, 42], [3, 3], 11, key=5)[1:])
    assert not np.allclose(row_normals([42], [3], 11, key=5), row_normals([42], [3], 11, key=6))


@pytest.mark.parametrize("w_factor, ok", [(1.0, True), (0.5, False)], ids=["calibrated", "under-noised"])
def test_white_box_jl_expectation(w_factor, ok):
    _, w = jl_ridge_plan(epsilon=EPS, delta=DELTA, norm_bound=B, r=R_JL)
    cp = FakeChokepoint.seeded(4)
    n_rel = 3000
    outs = np.array([jl_ridge(_project(A), chokepoint=cp, event=None, r=R_JL, d=2, w=w * w_factor)
                     for _ in range(n_rel)])
    sigma = A.T @ A + w**2 * np.eye(2)  # ÃᵀÃ for the calibrated w
    se = np.sqrt((sigma**2 + np.outer(np.diag(sigma), np.diag(sigma))) / R_JL / n_rel)
    assert np.all(np.abs(outs.mean(axis=0) - sigma) < 5 * se) == ok


def _jl_neighbour_samples(w, n):
    """uᵀ M u on D = A and D' = A + a row v along the smallest eigenvector (largest a)."""
    vals, vecs = np.linalg.eigh(A.T @ A)
    v = B * vecs[:, 0]
    a1 = np.vstack([A, v])
    u = np.linalg.solve(A.T @ A + w**2 * np.eye(2), v)
    cp = FakeChokepoint.seeded(5)
    x0 = np.array([u @ jl_ridge(_project(A), chokepoint=cp, event=None, r=R_JL, d=2, w=w) @ u for _ in range(n)])
    x1 = np.array([u @ jl_ridge(_project(a1), chokepoint=cp, event=None, r=R_JL, d=2, w=w) @ u for _ in range(n)])
    return np.log(x0), np.log(x1)


def test_black_box_jl():
    _, w = jl_ridge_plan(epsilon=EPS, delta=DELTA, norm_bound=B, r=R_JL)
    x0, x1 = _jl_neighbour_samples(w, 12_000)
    assert eps_lb(x0, x1) < EPS
    y0, y1 = _jl_neighbour_samples(w / 5, 12_000)
    assert eps_lb(y0, y1) > EPS


# ---------------------------------------------------------------- inverse Wishart
M_IW = 8


def test_white_box_inverse_wishart_mean():
    _, w, _ = inverse_wishart_plan(epsilon=EPS, delta=DELTA, norm_bound=B, dof=M_IW)
    cp = FakeChokepoint.seeded(6)
    gram = A.T @ A
    outs = np.array([inverse_wishart(gram, chokepoint=cp, event=None, dof=M_IW, w=w) for _ in range(8_000)])
    sigma = gram + w**2 * np.eye(2)
    assert np.allclose(outs.mean(axis=0), sigma, rtol=0.05, atol=0.05 * np.max(sigma))
    # the release is W⁻¹(Σ, m) rescaled: compare one entry with scipy's sampler
    ref = stats.invwishart.rvs(df=M_IW, scale=sigma, size=8_000, random_state=1)[:, 0, 0] * (M_IW - 3)
    assert stats.ks_2samp(outs[:, 0, 0], ref).pvalue > 1e-4
    wrong = stats.invwishart.rvs(df=M_IW, scale=gram + (w / 2) ** 2 * np.eye(2), size=8_000, random_state=1)[:, 0, 0] * (M_IW - 3)
    assert stats.ks_2samp(outs[:, 0, 0], wrong).pvalue < 1e-6


def _iw_neighbour_samples(w, n):
    vals, vecs = np.linalg.eigh(A.T @ A)
    v = B * vecs[:, 0]
    g0, g1 = A.T @ A, A.T @ A + np.outer(v, v)
    u = v / np.linalg.norm(v)
    cp = FakeChokepoint.seeded(9)
    x0 = np.array([u @ np.linalg.solve(inverse_wishart(g0, chokepoint=cp, event=None, dof=M_IW, w=w), u) for _ in range(n)])
    x1 = np.array([u @ np.linalg.solve(inverse_wishart(g1, chokepoint=cp, event=None, dof=M_IW, w=w), u) for _ in range(n)])
    return np.log(x0), np.log(x1)


def test_black_box_inverse_wishart():
    _, w, _ = inverse_wishart_plan(epsilon=EPS, delta=DELTA, norm_bound=B, dof=M_IW)
    x0, x1 = _iw_neighbour_samples(w, 12_000)
    assert eps_lb(x0, x1) < EPS
    y0, y1 = _iw_neighbour_samples(w / 5, 12_000)
    assert eps_lb(y0, y1) > EPS


# ---------------------------------------------------------------- AdaSSP
P = 16  # 136 upper-triangle draws of XᵀX noise (91 let a halved σ escape α = 1e-6 in 1.7e-5 of runs)
Z_INDEPENDENT = math.sqrt(3) * dp_accounting.get_sigma_gaussian(EPS, DELTA)


@pytest.mark.parametrize("sampler, ok", [(NumpySampler(), True), (UnderNoised(), False)], ids=["numpy", "halved"])
def test_white_box_adassp_sigmas(sampler, ok):
    plan = adassp_plan(epsilon=EPS, delta=DELTA, norm_bound=B)
    out = adassp(np.zeros((P + 1, P + 1)), chokepoint=FakeChokepoint(sampler), plan=plan)
    xtx = out["xtx"][np.triu_indices(P)]
    assert (chi2_variance_pvalue(xtx, Z_INDEPENDENT * B**2) > 1e-6) == ok
    assert plan.sigmas[2] == pytest.approx(Z_INDEPENDENT * B**2 / 2, rel=1e-6)


def _adassp_neighbour_samples(sampler, n):
    plan = adassp_plan(epsilon=EPS, delta=DELTA, norm_bound=B)
    x = np.array([B / math.sqrt(2), 0.0])
    g0 = np.diag([0.3, 0.3, 0.3])
    row = np.append(x, B / math.sqrt(2))
    g1 = g0 + np.outer(row, row)
    cp = FakeChokepoint(sampler)
    x0 = np.array([adassp(g0, chokepoint=cp, plan=plan)["xty"][0] for _ in range(n)])
    x1 = np.array([adassp(g1, chokepoint=cp, plan=plan)["xty"][0] for _ in range(n)])
    return x0, x1


def test_black_box_adassp():
    x0, x1 = _adassp_neighbour_samples(SeededSampler(np.random.default_rng(10)), 15_000)
    assert eps_lb(x0, x1) < EPS
    y0, y1 = _adassp_neighbour_samples(UnderNoised(SeededSampler(np.random.default_rng(10)), divisor=10), 15_000)
    assert eps_lb(y0, y1) > EPS
