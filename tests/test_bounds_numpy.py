"""Public bounds, intercept, regression intervals and the private norm quantile: the numpy parts (no Spark).

* the affine map back to the data's units is exact (coefficients, intercept, the second moment);
* the parametric-bootstrap intervals cover the true coefficients at about their nominal rate (fixed seed;
  the bound stated at the test);
* the quantile scores have the sensitivity the event is charged for, under add/remove and replace of a unit
  of m rows (brute force), and the exponential-mechanism selection is audited white-box (its law on two
  candidates) and black-box (empirical ε on neighbouring histograms stays under the claim).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from spark_dp import params as P
from spark_dp.errors import ConfigError
from spark_dp.privacy import Budget, Chokepoint, NumpySampler, SecureSampler, SeededSampler, open_ledger
from spark_dp.privacy.quantile import plan_quantile, private_quantile, quantile_scores, quantile_sensitivity
from spark_dp.second_moment._scaling import Scaling
from spark_dp.second_moment.intervals import regression_bootstrap
from spark_dp.second_moment.uncertainty import gaussian_sd
from tests._audit import clopper_pearson

BOUNDS = {"a": (0.0, 5.0), "b": (10.0, 30.0), "y": (-20.0, 20.0)}


def _scaled(scaling: Scaling, data: np.ndarray) -> np.ndarray:
    """The vector a = T⁻¹x of each row x (data columns with the constant 1 inserted)."""
    x = np.insert(data, scaling.constant_at, 1.0, axis=1)
    return np.linalg.solve(scaling.transform(), x.T).T


def test_map_back_is_exact_for_coefficients_intercept_and_matrix():
    rng = np.random.default_rng(1)
    n = 500
    X = rng.uniform([0, 10], [5, 30], size=(n, 2))
    y = 3 + 2 * X[:, 0] - 0.5 * X[:, 1] + rng.normal(0, 1, n)
    sc = Scaling.of(["a", "b", "y"], BOUNDS, constant_at=2)
    A = _scaled(sc, np.column_stack([X, y]))
    assert np.abs(A).max() <= 1.0 + 1e-12 and np.allclose(A[:, 2], 1.0)
    M = A.T @ A
    beta = np.linalg.solve(M[:3, :3], M[:3, 3])
    ols = np.linalg.lstsq(np.column_stack([X, np.ones(n)]), y, rcond=None)[0]
    assert np.allclose(sc.coefficients(beta, 3), ols, rtol=1e-10, atol=1e-10)
    full = np.column_stack([X, np.ones(n), y])
    assert np.allclose(sc.to_data_units(M), full.T @ full, rtol=1e-10)
    # a constant B/sqrt(d) without bounds (the raw intercept column) maps back too
    raw = Scaling.of(["a", "b", "y"], None, constant_at=2, constant_value=7.5)
    A = np.column_stack([X, np.full(n, 7.5), y])
    M = A.T @ A
    assert np.allclose(raw.coefficients(np.linalg.solve(M[:3, :3], M[:3, 3]), 3), ols, rtol=1e-10)


def test_bounds_constraint_names_the_parameter():
    assert P.check("bounds", {"a": [0, 5]}, owner="f") == {"a": (0.0, 5.0)}
    for bad in ({"a": [5, 0]}, {"a": [0, float("inf")]}, {"a": [0]}, {"a": "0,5"}, [0, 5], {}):
        with pytest.raises(ConfigError, match="'bounds' parameter of f"):
            P.check("bounds", bad, owner="f")
    assert P.check("norm_bound_or_auto", "auto", owner="f") == "auto"
    with pytest.raises(ConfigError, match="'norm_bound' parameter of f must be a positive float or 'auto'"):
        P.check("norm_bound_or_auto", "big", owner="f", key="norm_bound")


def test_bootstrap_intervals_cover_at_about_the_nominal_rate():
    """150 releases × 3 entries at σ = 30 (n = 3000): empirical coverage of the 95 % intervals in [0.91, 0.99]
    (binomial sd ≈ 0.01 at 450 trials; a noise-only interval, which ignores the sampling error, or a plain
    Gaussian on σ alone, falls well below at this n)."""
    rng = np.random.default_rng(5)
    n, sigma, runs = 3000, 30.0, 150
    X = rng.uniform([0, 10], [5, 30], size=(n, 2))
    truth = np.array([2.0, -0.5, 3.0])
    sc = Scaling.of(["a", "b", "y"], BOUNDS, constant_at=2)
    hits = np.zeros(3)
    for _ in range(runs):
        y = X @ truth[:2] + truth[2] + rng.normal(0, 2, n)
        A = _scaled(sc, np.column_stack([X, y]))
        noise = np.triu(rng.normal(0, sigma, (4, 4)))
        M = A.T @ A + noise + np.triu(noise, 1).T
        beta = np.linalg.solve(M[:3, :3], M[:3, 3])
        got = regression_bootstrap(M, beta, sigma=sigma, scaling=sc, label_at=3, draws=500, rng=rng)
        assert got.covers == "noise+sampling"
        hits += (got.low <= truth) & (truth <= got.high)
    coverage = hits.sum() / (3 * runs)
    assert 0.91 <= coverage <= 0.99, coverage


@pytest.mark.parametrize("neighbors", ["add_remove", "replace"])
@pytest.mark.parametrize("m", [1, 3])
@pytest.mark.parametrize("alpha", [0.5, 0.9])
def test_quantile_scores_have_the_charged_sensitivity(neighbors, m, alpha):
    rng = np.random.default_rng(11)
    sens = quantile_sensitivity(alpha, max_rows_per_unit=m, neighbors=neighbors)
    worst = 0.0
    for _ in range(400):
        counts = rng.integers(0, 5, size=9)
        unit = np.bincount(rng.integers(0, 9, size=rng.integers(1, m + 1)), minlength=9)
        if neighbors == "add_remove":
            other = counts + unit
        else:
            removed = np.minimum(counts, np.bincount(rng.integers(0, 9, size=rng.integers(0, m + 1)), minlength=9))
            other = counts - removed + unit
        worst = max(worst, np.abs(quantile_scores(counts, alpha) - quantile_scores(other, alpha)).max())
    assert worst <= sens + 1e-9
    assert worst >= 0.6 * sens  # the bound is not loose by much (the search finds near-worst neighbours)


def _charged(tmp_path, sampler, plan, name):
    ledger = open_ledger(f"sqlite:///{tmp_path}/q.db")
    cp = Chokepoint(ledger, dataset_id="q", release_id=name, request_sha256="x", sampler=sampler,
                    limit=Budget(1e9, 0.5))
    cp.charge([plan.event], Budget(plan.epsilon, 1e-9))
    return cp


def test_selection_is_charged_first_and_uses_its_event(tmp_path):
    plan = plan_quantile(0.5, 0.9)
    grid = np.array([1.0, 2.0, 4.0])
    ledger = open_ledger(f"sqlite:///{tmp_path}/u.db")
    cp = Chokepoint(ledger, dataset_id="q", release_id="u", request_sha256="x", sampler=NumpySampler())
    with pytest.raises(RuntimeError, match="before the release was charged"):
        private_quantile(cp, plan, np.array([1, 1, 1, 0]), grid)
    cp = _charged(tmp_path, NumpySampler(), plan, "c")
    assert private_quantile(cp, plan, np.array([1, 1, 1, 0]), grid) in grid
    assert cp.unused_events == []
    with pytest.raises(RuntimeError, match="not charged"):  # one draw per charged event
        private_quantile(cp, plan, np.array([1, 1, 1, 0]), grid)


@pytest.mark.parametrize("sampler", [SecureSampler(), NumpySampler(), SeededSampler(np.random.default_rng(2))],
                         ids=["secure", "numpy", "seeded"])
def test_white_box_two_candidates_follow_the_exponential_law(tmp_path, sampler):
    """Scores 0 and g: the worse candidate wins with probability ½·exp(−g/scale) (the difference of two
    Exp(scale) draws is Laplace(scale)); scale = 2Δ/ε computed here from ε and Δ = max(α, 1 − α)."""
    eps, alpha = 1.0, 0.5
    plan = plan_quantile(eps, alpha)
    scale = 2 * max(alpha, 1 - alpha) / eps
    counts = np.array([5, 1, 0])  # n = 6: scores |5 − 3| = 2 and |6 − 3| = 3 → gap 1
    expected = 0.5 * math.exp(-1.0 / scale)
    draws = 1500 if sampler.name == "secure" else 8000
    hits = 0
    cp = _charged(tmp_path, sampler, plan, f"w{sampler.name}")
    for _ in range(draws):
        cp._pending = [plan.event]  # re-arm: this test measures the sampler's law, not the ledger
        hits += private_quantile(cp, plan, counts, np.array([1.0, 2.0])) == 2.0
    lo, hi = clopper_pearson(hits, draws, 1e-4)
    assert lo <= expected <= hi, (hits / draws, expected)


@pytest.mark.parametrize("neighbors, m", [("add_remove", 1), ("add_remove", 3), ("replace", 1), ("replace", 3)])
def test_black_box_empirical_epsilon_stays_under_the_claim(tmp_path, neighbors, m):
    """Neighbouring histograms (one unit of m rows moved to the top bucket, or added there): the output
    event {selected = j} with the largest ratio on a pilot gives a Clopper–Pearson lower bound on ε that
    must not exceed the charged ε (3·10⁴ selections per side, seeded numpy generator)."""
    eps, alpha = 1.0, 0.5
    plan = plan_quantile(eps, alpha, max_rows_per_unit=m, neighbors=neighbors)
    grid = np.arange(1.0, 7.0)
    d0 = np.array([0, 0, 3, 3, 0, 0, 0])
    d1 = d0.copy()
    if neighbors == "add_remove":
        d1[-1] += m
    else:
        d1[2] -= m if d1[2] >= m else d1[2]
        d1[-1] += m
    rng = np.random.default_rng(3)
    sampler = SeededSampler(rng)

    cp = _charged(tmp_path, sampler, plan, f"b{neighbors}{m}")

    def draws(counts, k):
        out = np.empty(k)
        for i in range(k):
            cp._pending = [plan.event]  # re-armed: the audit measures the selection's law
            out[i] = private_quantile(cp, plan, counts, grid)
        return out

    n = 30_000
    x0, x1 = draws(d0, n), draws(d1, n)
    best = -math.inf
    for a, b in ((x0, x1), (x1, x0)):
        pilot = n // 5
        values = np.unique(a[:pilot])
        ratios = [(np.mean(b[:pilot] == v) + 1e-9) / (np.mean(a[:pilot] == v) + 1e-9) for v in values]
        v = values[int(np.argmax(ratios))]
        _, hi0 = clopper_pearson(int(np.sum(a[pilot:] == v)), n - pilot, 1e-3)
        lo1, _ = clopper_pearson(int(np.sum(b[pilot:] == v)), n - pilot, 1e-3)
        if lo1 > 0:
            best = max(best, math.log(lo1 / hi0))
    assert best <= eps, best
    assert best > 0.2 * eps  # the audit sees the mechanism's privacy loss at all


def test_noise_sd_in_data_units_matches_simulation():
    """gaussian_sd, the entry sd of T·N·Tᵀ (symmetric N, i.i.d. upper triangle) agrees with 4,000 simulated draws within 6 %."""
    sc = Scaling.of(["a", "b", "y"], BOUNDS, constant_at=2)
    t, sigma = sc.transform(), 3.0
    rng = np.random.default_rng(9)
    upper = np.triu(rng.normal(0, sigma, (4000, 4, 4)))
    noise = upper + np.swapaxes(np.triu(upper, 1), 1, 2)
    emp = (t @ noise @ t.T).std(axis=0)
    assert np.allclose(gaussian_sd(t, sigma), emp, rtol=0.06)
