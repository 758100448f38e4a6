"""JL projection with ridge: (RÃ)ᵀ(RÃ)/r with Ã = [A; w·I_d].

Implements Section 3 of Sheffet (arXiv 1507.00056), the Gaussian JL
transform of Blocki, Blum, Datta & Sheffet (2012) applied to the data
appended with w·I (ridge regression with penalty w²).

Guarantee: (ε, δ)-DP, with w calibrated by the *exact* privacy profile of
``spark_dp.second_moment.chi2_profile`` (default, ``calibration="exact"``):

* Neighbours: add/remove one row (‖v‖₂ ≤ B). Every row of RÃ is an
  independent N(0, ÃᵀÃ) = N(0, AᵀA + w²I) draw, so the release is one
  W_d(AᵀA + w²I, r) draw and n plays no role; with a = vᵀΣ₀⁻¹v ≤ B²/w² the
  privacy loss is L = −(r/2)ln(1+a) + S/(2(1+a)), S ~ (a+a²)χ²_r or a·χ²_r.
  w is the smallest ridge whose worst case over a ∈ (0, B²/w²] meets (ε, δ).
  At r = 400, ε = 1, δ = 1e-6 this gives w² = 65.3·B².
* Replace-one: group privacy of the add/remove profile (ε/2, δ/(1+e^{ε/2})).
* ``calibration="paper"``: the published constant
  w² = (8B²/ε)(√(2r·ln(8/δ)) + 2·ln(8/δ)) (1156·B² at the numbers above),
  for reproducing the paper.

Two ways to draw the same release (``projection``):

* ``gram`` (default): given Ã, each row of RÃ is Σᵢ R_{ji} ãᵢ, a sum of
  independent Gaussians, so the rows of RÃ are i.i.d. N(0, ÃᵀÃ) with
  ÃᵀÃ = AᵀA + w²I. Computing the exact AᵀA in one Gram pass and drawing
  RÃ = Z Lᵀ (Z r×d i.i.d. N(0, 1), L Lᵀ = ÃᵀÃ) on the driver gives a release
  with exactly the distribution of (RÃ)ᵀ(RÃ)/r — the distribution the
  privacy proof is about — at the Gram kernel's cost plus O(rd² + d³) on the
  driver. R itself is never drawn, and the result does not depend on the
  partitioning. Z comes from numpy's Philox4x64-10 keyed by a 128-bit secret
  ``key()`` of the session sampler, drawn after the charge.
* ``rows``: R's columns drawn per data row, as the paper describes it (below).

Randomness of ``rows``: R's columns for the data rows come from a counter-based
generator on the executors (:mod:`spark_dp.aggregates.jl`) keyed by a secret
``key()`` of the chokepoint's sampler, obtained after the charge; the d
columns for the ridge rows w·I come from the sampler's ``standard_normal``.
The executor-side normals are floating-point Box–Muller draws from
Philox4x32-10 with a 64-bit key: statistically exact, not the secure
sampler's discrete Gaussian (stated in the manifest).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from spark_dp.privacy import Chi2ProfileEvent, Chokepoint, EpsilonDeltaEvent
from spark_dp.privacy.chi2_profile import add_remove_target, calibrate_a_max
from spark_dp.second_moment._postprocess import postprocess_matrix

CALIBRATIONS = ("exact", "paper")
PROJECTIONS = ("gram", "rows")


def jl_ridge_paper_w2(*, epsilon: float, delta: float, norm_bound: float, r: int) -> float:
    """The published constant w² = (8B²/ε)(√(2r ln(8/δ)) + 2 ln(8/δ))."""
    t = math.log(8.0 / delta)
    return 8.0 * norm_bound**2 / epsilon * (math.sqrt(2.0 * r * t) + 2.0 * t)


def jl_ridge_plan(
    *, epsilon: float, delta: float, norm_bound: float, r: int, neighbors: str = "add_remove", calibration: str = "exact"
) -> tuple[EpsilonDeltaEvent | Chi2ProfileEvent, float]:
    """The release's event and the ridge w (all public).

    Exact calibration under add/remove records the exact χ² profile
    (:class:`Chi2ProfileEvent`), which composes tightly; replace-one (group
    privacy) and the paper's constant record the (ε, δ) point.
    """
    if calibration == "paper":
        w = math.sqrt(jl_ridge_paper_w2(epsilon=epsilon, delta=delta, norm_bound=norm_bound, r=r))
    elif calibration == "exact":
        eps_ar, delta_ar = add_remove_target(epsilon, delta, neighbors)
        a_max = calibrate_a_max(eps_ar, delta_ar, r)
        w = norm_bound / math.sqrt(a_max)
        if neighbors == "add_remove":
            return Chi2ProfileEvent(a_max=a_max, dof=r, mechanism="jl_ridge"), w
    else:
        raise ValueError(f"unknown calibration {calibration!r}")
    return EpsilonDeltaEvent(epsilon=epsilon, delta=delta, mechanism="jl_ridge"), w


def jl_ridge(
    project: Callable[[int], np.ndarray], *, chokepoint: Chokepoint, event: EpsilonDeltaEvent | Chi2ProfileEvent, r: int, d: int, w: float,
    postprocess: str = "none",
) -> np.ndarray:
    """Returns (RÃ)ᵀ(RÃ)/r, Ã = [A; wI], optionally post-processed.

    Args:
        project: ``project(key) -> R_A`` (r × d), the projection of the data
            rows with R's columns drawn from ``key`` (one pass over the data;
            see :func:`spark_dp.aggregates.jl.jl_projection`).
        chokepoint: a charged chokepoint holding ``event``.
        event: the release's EpsilonDeltaEvent.
        r: projection rows; d: dimension; w: the ridge.
        postprocess: ``none`` (an estimate of AᵀA + w²I, PD when r ≥ d);
            ``shift`` — subtract w²I (an estimate of AᵀA, may be
            indefinite); ``psd`` — after the shift, negative eigenvalues 0.
    """
    sampler = chokepoint.randomness(event)
    # Step 1: R = [R_A, R_I], R_A's columns keyed by a secret drawn after the charge.
    r_a = project(sampler.key())
    r_i = sampler.standard_normal(r * d).reshape(r, d)
    # Step 2: RÃ = R_A·A + R_I·(w I).
    ra_tilde = r_a + w * r_i
    # Step 3: output (RÃ)ᵀ(RÃ)/r.
    out = (ra_tilde.T @ ra_tilde) / r
    return _postprocess(out, w, postprocess)


def jl_ridge_from_gram(
    gram: np.ndarray, *, chokepoint: Chokepoint, event: EpsilonDeltaEvent | Chi2ProfileEvent, r: int, w: float,
    postprocess: str = "none",
) -> np.ndarray:
    """(RÃ)ᵀ(RÃ)/r drawn in its exact distribution from the exact AᵀA (``projection="gram"``).

    Neighbours and sensitivity are those of :func:`jl_ridge` (add/remove one
    row with ‖v‖₂ ≤ B; the guarantee is the calibrated (ε, δ) of the χ²
    profile): the output distribution is identical, W_d(AᵀA + w²I, r)/r.

    Args:
        gram: the exact AᵀA of the clipped rows (d × d, symmetric).
        chokepoint: a charged chokepoint holding ``event``.
        event: the release's event (from :func:`jl_ridge_plan`).
        r: projection rows; w: the ridge.
        postprocess: as for :func:`jl_ridge`.
    """
    d = gram.shape[0]
    sampler = chokepoint.randomness(event)
    # Step 1: Ã ᵀÃ = AᵀA + w²I (positive definite: w > 0) and a square root L.
    cov = (gram + gram.T) / 2.0 + w * w * np.eye(d)
    try:
        root = np.linalg.cholesky(cov)
    except np.linalg.LinAlgError:  # AᵀA indefinite by rounding beyond w²: symmetric square root
        vals, vecs = np.linalg.eigh(cov)
        root = vecs * np.sqrt(np.clip(vals, 0.0, None))
    # Step 2: RÃ has i.i.d. N(0, ÃᵀÃ) rows: RÃ = Z Lᵀ, Z r × d standard normal,
    # drawn after the charge from the session sampler, as the Wishart and
    # inverse-Wishart mechanisms draw theirs (secure: OpenDP's discrete
    # Gaussian on the 2^-30 grid from OS entropy, not floating-point normals).
    ra_tilde = sampler.standard_normal(r * d).reshape(r, d) @ root.T
    # Step 3: output (RÃ)ᵀ(RÃ)/r.
    out = (ra_tilde.T @ ra_tilde) / r
    return _postprocess(out, w, postprocess)


def _postprocess(out: np.ndarray, w: float, postprocess: str) -> np.ndarray:
    """``shift`` subtracts the ridge w²·I; ``psd`` projects after it."""
    return postprocess_matrix(out, postprocess, shift=-(w**2), psd_after_shift=True)
