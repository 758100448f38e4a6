"""Noise calibration. Rounding always errs toward more noise.

The default is the exact Gaussian calibration of Balle & Wang (2018, Thm 8,
via ``dp_accounting.get_sigma_gaussian``): at ε = 1, δ = 1e-6 it gives
σ/Δ = 4.2247, where the classic √(2 ln(1.25/δ))/ε gives 5.30 (and is valid
only for ε < 1). The classic formula is deliberately not offered here.
"""

from __future__ import annotations

import math

import dp_accounting


def gaussian_noise_multiplier(epsilon: float, delta: float, releases: int = 1) -> float:
    """Smallest z = σ/Δ such that ``releases`` Gaussian releases at z are (ε, δ)-DP.

    Gaussian releases compose exactly (μ_tot = √K/z), so z = √K · z₁(ε, δ).
    The result is nudged up until ``get_epsilon_gaussian`` confirms it, so the
    returned z never under-noises by bisection tolerance.
    """
    if not (epsilon > 0) or not (0 < delta < 1) or releases < 1:
        raise ValueError(f"need epsilon > 0, 0 < delta < 1, releases >= 1; got {epsilon}, {delta}, {releases}")
    if math.isinf(epsilon):
        raise ValueError("epsilon = inf has no noise multiplier")
    z1 = dp_accounting.get_sigma_gaussian(epsilon, delta)
    z = z1 * math.sqrt(releases)
    # Confirm with the exact profile of the composition; step up if bisection
    # landed a hair low.
    step = 1e-12
    for _ in range(64):
        if dp_accounting.get_epsilon_gaussian(z / math.sqrt(releases), delta) <= epsilon:
            return z
        # Steps double: ulps where the bisection is accurate, up to per cent where
        # the profile is coarse (ε in the billions, z ≈ 1e-5); z only grows.
        z = math.nextafter(z, math.inf) * (1 + step)
        step *= 2
    raise ArithmeticError("could not calibrate the Gaussian noise multiplier")


def paper_classic_gaussian_noise_multiplier(epsilon: float, delta: float) -> float:
    """PAPER MODE ONLY: the classic z = σ/Δ = √(2 ln(1.25/δ))/ε (Dwork & Roth 2014, Thm A.1).

    Offered solely so ``calibration='paper'`` can reproduce a paper's own
    noise scale (Wang & Anandkumar 2016, Alg. 3 step 2, with ε₀, δ₀ from
    advanced composition). It over-noises compared to
    :func:`gaussian_noise_multiplier` and is valid only for ε < 1, which is
    enforced. Never use it as a default.
    """
    if not (0 < epsilon < 1) or not (0 < delta < 1):
        raise ValueError(f"the classic Gaussian mechanism needs 0 < epsilon < 1 and 0 < delta < 1; got {epsilon}, {delta}")
    return math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon
