"""Coverage of the error bars is measured, not assumed (issue #14 §2), without Spark.

The same exact summary (known truth) is released many times through each
mechanism's noise step with seeded numpy noise; the fraction of nominal 95 %
intervals holding the truth must lie in [0.93, 0.97] where the method claims
coverage (exact or derived), and bounds must hold at least 95 % of the time.
The runs are seeded, so a wrong σ, quantile or centre fails deterministically
(see ``test_a_wrong_noise_scale_is_caught``).
"""

from __future__ import annotations

import numpy as np
import pytest

from spark_dp.second_moment.mechanisms import plan_mechanism
from spark_dp.second_moment.uncertainty import matrix_uncertainty
from tests._coverage import clipped_rows, second_moment_coverage, sketch_coverage, tensor_coverage
from tests._samplers import FakeChokepoint, UnderNoised

LOW, HIGH = 0.93, 0.97


@pytest.mark.parametrize("mechanism, kw, reps", [
    ("analyze_gauss", {}, 300),
    ("analyze_gauss", {"postprocess": "shift"}, 300),
    ("wishart", {}, 300),
    ("wishart", {"postprocess": "shift"}, 300),
    ("jl_ridge", {}, 300),
    ("inverse_wishart", {}, 100),
])
def test_second_moment_intervals_cover_at_the_nominal_level(mechanism, kw, reps):
    cov = second_moment_coverage(mechanism, d=3, n=500, epsilon=1.0, reps=reps, seed=7, **kw)
    assert cov["matrix_kind"] == "interval"
    assert LOW <= cov["matrix"] <= HIGH, cov
    assert cov["eigenvalues"] >= 0.95, cov  # Weyl / Ostrowski bounds
    if mechanism in ("analyze_gauss", "wishart"):
        assert cov["eigenvectors"] >= 0.95 and cov["subspace"] >= 0.95, cov  # Davis–Kahan bounds


def test_psd_projection_gets_a_bound_that_holds():
    cov = second_moment_coverage("analyze_gauss", d=3, n=500, epsilon=1.0, reps=100, postprocess="psd", seed=3)
    assert cov["matrix_kind"] == "bound" and cov["matrix"] >= 0.95 and cov["eigenvalues"] >= 0.95


def test_a_wrong_noise_scale_is_caught():
    """Twice the planned noise (what a σ wrong by 2 in the intervals would look like): coverage ≈ 68 %."""
    x = clipped_rows(500, 3)
    gram = x.T @ x
    plan = plan_mechanism("analyze_gauss", d=3, epsilon=1.0, delta=1e-6, norm_bound=1.0)
    hits = []
    for r in range(200):
        released = plan.noise(gram, FakeChokepoint(UnderNoised(divisor=0.5)))
        u = matrix_uncertainty("analyze_gauss", plan.privacy, plan.params, released, 1.0, 0.95)
        hits.append(np.mean((u.low <= gram) & (gram <= u.high)))
    assert np.mean(hits) < LOW


def test_the_level_is_honoured():
    cov = second_moment_coverage("analyze_gauss", d=3, n=500, epsilon=1.0, reps=300, level=0.8, seed=11)
    assert 0.77 <= cov["matrix"] <= 0.83, cov


@pytest.mark.parametrize("mechanism, kw", [
    ("private_count_sketch", {"k": 5}),  # median of an odd k: Beta order statistic
    ("private_count_sketch", {"k": 4}),  # median of an even k: simulated
    ("private_count_sketch", {"k": 5, "estimator": "mean"}),
    ("count_min", {"k": 5}),  # minimum of Laplace noise
    ("count_mean", {"k": 5}),  # debiased mean
])
def test_sketch_estimate_intervals_cover_and_the_false_positive_rate_is_right(mechanism, kw):
    cov = sketch_coverage(mechanism, epsilon=1.0, reps=300, seed=5, **kw)
    assert LOW <= cov["estimates"] <= HIGH, cov
    # 3000 zero-frequency estimates: the stated rate within 4 binomial standard deviations of the measured one
    p = cov["false_positive_rate_stated"]
    assert abs(cov["false_positive_rate"] - p) <= 4 * np.sqrt(p * (1 - p) / 3000) + 1e-3, cov


def test_tensor_eigenvalue_intervals_cover():
    cov = tensor_coverage(reps=250, seed=2)  # L = 1: exact interval from the sigma each eigenvalue was drawn with
    assert cov["kind"] == "interval" and LOW <= cov["eigenvalues"] <= HIGH, cov
    cov = tensor_coverage(reps=100, restarts=3, seed=2)  # L = 3: Bonferroni over the argmax's candidates
    assert cov["kind"] == "bound" and cov["eigenvalues"] >= 0.95, cov
