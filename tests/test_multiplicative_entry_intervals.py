"""JL and inverse-Wishart second-moment entry intervals: pivots of the release's own law.

The mechanisms' laws are simulated directly with numpy (W_d(Σ, r)/r and
(m − d − 1)·W⁻¹_d(Σ, m)) and the intervals of
:func:`spark_dp.second_moment.uncertainty.multiplicative_entry_interval`
are checked for coverage at fixed seeds; the mechanisms' own noise steps
(with their ridge, ``shift`` and the data's units) through
:func:`tests._coverage.second_moment_coverage`.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from spark_dp.release.uncertainty import normal_quantile
from spark_dp.second_moment.mechanisms import plan_mechanism
from spark_dp.second_moment.uncertainty import matrix_uncertainty, multiplicative_entry_interval
from tests._coverage import second_moment_coverage
from tests._samplers import FakeChokepoint

LEVEL = 0.95


def _sigma(d: int) -> np.ndarray:
    """A correlated scale with unequal diagonals (entries with correlations from about -0.6 to 0.95)."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((500, d)) * np.linspace(3.0, 0.5, d) + np.linspace(4.0, -2.0, d)
    a[:, -1] = -0.6 * a[:, 0] + rng.standard_normal(500)
    return a.T @ a / 5.0


def _draw(mechanism: str, sigma: np.ndarray, dof: int, rng: np.random.Generator) -> np.ndarray:
    d = sigma.shape[0]
    root = np.linalg.cholesky(sigma)
    if mechanism == "jl_ridge":  # rows of R·Ã are N(0, Σ): the release is W_d(Σ, r)/r
        z = rng.standard_normal((dof, d)) @ root.T
        return z.T @ z / dof
    g = rng.standard_normal((dof, d))  # (m - d - 1) L (GᵀG)⁻¹ Lᵀ ~ (m - d - 1) W⁻¹_d(Σ, m)
    return (dof - d - 1) * root @ np.linalg.inv(g.T @ g) @ root.T


def _exact_sd(mechanism: str, s: np.ndarray, dof: int) -> np.ndarray:
    """The entries' exact sd at Σ = S (Wishart / inverse-Wishart moments)."""
    d, dg = s.shape[0], np.diag(s)
    if mechanism == "jl_ridge":
        return np.sqrt((s * s + np.outer(dg, dg)) / dof)
    m = dof
    return np.sqrt(((m - d + 1) * s * s + (m - d - 1) * np.outer(dg, dg)) / ((m - d) * (m - d - 3)))


def _coverage(mechanism: str, dof: int, d: int = 4, reps: int = 300, seed: int = 0):
    sigma = _sigma(d)
    rng = np.random.default_rng(seed)
    hits = np.zeros((d, d))
    ratio = []
    for _ in range(reps):
        s = _draw(mechanism, sigma, dof, rng)
        low, high, se, _ = multiplicative_entry_interval(mechanism, s, dof, LEVEL)
        hits += (low <= sigma) & (sigma <= high)
        assert np.allclose(se, (high - low) / (2.0 * normal_quantile(LEVEL)))
        ratio.append(se / _exact_sd(mechanism, s, dof))
    return hits / reps, np.array(ratio)


@pytest.mark.parametrize("mechanism,dof", [("jl_ridge", 400), ("jl_ridge", 12), ("inverse_wishart", 400),
                                           ("inverse_wishart", 30)])
def test_entry_intervals_cover_under_the_mechanisms_own_law(mechanism, dof):
    cov, ratio = _coverage(mechanism, dof)
    iu = np.triu_indices(cov.shape[0])
    assert cov[iu].mean() >= 0.93, cov
    assert cov[iu].min() >= 0.90, cov  # every entry, 300 draws: 0.95 - 3 sd is 0.912
    assert np.diag(cov).min() >= 0.91  # exact pivots
    assert cov[iu].mean() <= 0.99, cov  # an interval, not a blanket
    # the stderr (half-width / z) agrees with the exact sd at Σ = S: closely at hundreds of degrees of freedom
    assert np.all((ratio > 0.5) & (ratio < 3.0)) if dof < 100 else np.all(np.abs(ratio - 1.0) < 0.1), ratio.max()


def test_diagonal_pivot_is_exact_where_the_normal_approximation_missed():
    """JL at r = 10: a diagonal released at the 5 % point of its law. r·S_ii/Σ_ii ~ χ²_r, so the exact interval
    holds Σ_ii (the 5 % point lies inside the central 95 %), while the old plug-in normal interval
    S_ii ± z·S_ii·√(2/r) misses it — it covered 87 % of such releases."""
    r, d = 10, 3
    sigma = np.diag([1.0, 2.0, 3.0])
    s = sigma * stats.chi2.ppf(0.05, r) / r
    low, high, _, _ = multiplicative_entry_interval("jl_ridge", s, r, LEVEL)
    z = normal_quantile(LEVEL)
    old_high = np.diag(s) * (1.0 + z * np.sqrt(2.0 / r))
    assert np.all(old_high < np.diag(sigma))  # the old interval missed
    assert np.all((np.diag(low) <= np.diag(sigma)) & (np.diag(sigma) <= np.diag(high)))
    cov, _ = _coverage("jl_ridge", r, d=d, reps=400, seed=1)
    rng = np.random.default_rng(1)
    full = _sigma(d)
    old = 0
    for _ in range(400):
        s = _draw("jl_ridge", full, r, rng)
        dg = np.diag(s)
        old += np.sum(np.abs(dg - np.diag(full)) <= z * dg * np.sqrt(2.0 / r))
    assert old / (400 * d) < 0.91 <= np.diag(cov).mean()


def test_small_dof_inverse_wishart_off_diagonals_hold():
    """At m = d + 7 the released correlation is uncertain; the pivot's quantiles are the widest over its range.
    (At the released correlation alone, 83 % of such off-diagonal entries were covered.)"""
    cov, _ = _coverage("inverse_wishart", 11, reps=300, seed=2)
    off = cov[np.triu_indices(cov.shape[0], 1)]
    assert off.min() >= 0.92, cov


@pytest.mark.parametrize("mechanism", ["jl_ridge", "inverse_wishart"])
@pytest.mark.parametrize("postprocess,bounded", [("none", False), ("shift", False), ("none", True)])
def test_the_mechanisms_releases_cover_with_their_ridge(mechanism, postprocess, bounded):
    """Through the noise steps: the ridge w² is subtracted exactly (``shift`` or not), in the data's units too."""
    r = second_moment_coverage(mechanism, d=3, n=2000, epsilon=1.0, reps=150, seed=4, postprocess=postprocess,
                               bounded=bounded)
    assert r["matrix_kind"] == "interval"
    assert 0.92 <= r["matrix"] <= 0.99, r


def test_method_names_the_pivot_and_covers_noise():
    plan = plan_mechanism("jl_ridge", d=3, epsilon=1.0, delta=1e-6, norm_bound=1.0)
    gram = np.diag([50.0, 40.0, 30.0])
    u = matrix_uncertainty(plan.mechanism, plan.privacy, plan.params, plan.noise(gram, FakeChokepoint.seeded(0)),
                           1.0, LEVEL)
    assert u.kind == "interval" and u.covers == "noise"
    assert "chi-square" in u.method and "studentized pivot" in u.method and "ridge" in u.method
    assert "normal approximation" not in u.method


@pytest.mark.parametrize("mechanism", ["jl_ridge", "inverse_wishart"])
def test_dry_run_predicts_the_diagonal_interval_as_factors_of_the_release(mechanism):
    """The diagonal pivot is scale-free: the dry run states the release's own diagonal interval as factors."""
    from spark_dp.release.preview import predict_accuracy

    d = 3
    plan = plan_mechanism(mechanism, d=d, epsilon=1.0, delta=1e-6, norm_bound=1.0)
    got = predict_accuracy("second_moment", mechanism, {"dimension": d, "norm_bound": 1.0, "params": plan.params},
                           plan.privacy)
    f = got["relative_interval_diagonal"]
    assert got["predicted"] is False and f["kind"] == "interval" and 0 < f["low_factor"] < 1 < f["high_factor"]
    gram = np.diag([50.0, 40.0, 30.0])
    released = plan.noise(gram, FakeChokepoint.seeded(1))
    u = matrix_uncertainty(plan.mechanism, plan.privacy, plan.params, released, 1.0, LEVEL)
    kept = np.diag(released)  # postprocess none: the release keeps the ridge, the interval covers A^T A + w^2 I
    assert np.allclose(np.diag(u.low), f["low_factor"] * kept) and np.allclose(np.diag(u.high),
                                                                             f["high_factor"] * kept)
