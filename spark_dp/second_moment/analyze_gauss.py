"""Analyze Gauss: the Gaussian mechanism on the second-moment matrix.

Implements Analyze Gauss of Dwork, Talwar, Thakurta & Zhang, "Analyze Gauss:
Optimal Bounds for Privacy-Preserving Principal Component Analysis" (STOC
2014), Algorithm 1, the baseline of Sheffet (arXiv 1507.00056), with the
exact Gaussian calibration of Balle & Wang (2018) by default.

``calibration="paper"`` (explicit, for reproducing Sheffet's Section 6 only)
uses the σ Sheffet states for Analyze Gauss in his preliminaries,
N(0, 2Δ²·ln(2/δ)/ε²) (citing Dwork et al. 2006), i.e. σ = Δ·√(2 ln(2/δ))/ε.
It is valid only for ε < 1 (refused otherwise) and is never less noise than
the exact σ there; the release is charged as the Gaussian mechanism it
really is (``GaussianEvent(σ/Δ)``), so the ledger records what it
guarantees — slightly less than the requested (ε, δ).

Guarantee: (ε, δ)-DP under the request's neighbour relation.

* Neighbours: add/remove one privacy unit (default), or replace one.
* Sensitivity: rows clipped to ‖a‖₂ ≤ B, at most m rows per unit; the upper
  triangle of AᵀA moves by at most Δ = m·B² in L2 under add/remove and
  √2·m·B² under replace (:func:`spark_dp.privacy.second_moment_l2_sensitivity`).
* Noise: symmetric N with N_ij = N_ji ~ N(0, σ²), σ = z(ε, δ)·Δ, drawn on the
  upper triangle only (d(d+1)/2 draws) and mirrored.
"""

from __future__ import annotations

import math

import numpy as np

from spark_dp.errors import ConfigError
from spark_dp.privacy import Chokepoint, GaussianEvent, gaussian_noise_multiplier, second_moment_l2_sensitivity
from spark_dp.second_moment._postprocess import POSTPROCESS  # noqa: F401 - re-exported (the API validates with it)
from spark_dp.second_moment._postprocess import postprocess_matrix as _postprocess_matrix
from spark_dp.second_moment._registry import MechanismPlan, MechanismSpec, PlanRequest

CALIBRATIONS = ("exact", "paper")
PAPER_FORMULA = "paper: sigma = Delta sqrt(2 ln(2/delta))/epsilon (Sheffet Sec. 2, the Analyze Gauss baseline)"


def analyze_gauss_paper_noise_multiplier(epsilon: float, delta: float, *, owner: str = "second_moment") -> float:
    """PAPER MODE ONLY: z = σ/Δ = √(2 ln(2/δ))/ε, Sheffet's stated Analyze Gauss noise.

    Raises:
        ConfigError: ε ≥ 1, where this classic-form bound is not a valid
            (ε, δ) Gaussian mechanism.
    """
    if not 0 < epsilon < 1:
        raise ConfigError(
            f"The 'epsilon' parameter of {owner} must be below 1 under calibration='paper' for mechanism "
            f"'analyze_gauss' (the classic Gaussian bound is not valid above); use calibration='exact'. "
            f"Got {epsilon:g} instead."
        )
    z = math.sqrt(2.0 * math.log(2.0 / delta)) / epsilon
    # Sanity: for ε < 1 the classic form over-noises the exact calibration.
    if z < gaussian_noise_multiplier(epsilon, delta):  # a theorem for ε < 1; checked in tests
        raise ArithmeticError("paper Analyze Gauss sigma below the exact one")
    return z


def analyze_gauss_plan(
    *, epsilon: float, delta: float, norm_bound: float, neighbors: str = "add_remove", max_rows_per_unit: int = 1,
    calibration: str = "exact", owner: str = "second_moment",
) -> tuple[GaussianEvent, float, float]:
    """The release's privacy event, its σ and its L2 sensitivity Δ (all public).

    ``calibration``: ``exact`` (z from the exact Gaussian profile) or
    ``paper`` (:func:`analyze_gauss_paper_noise_multiplier`). Either way the
    event is the Gaussian mechanism at the z actually used.
    """
    sensitivity = second_moment_l2_sensitivity(norm_bound, max_rows_per_unit=max_rows_per_unit, neighbors=neighbors)
    if calibration == "paper":
        z = analyze_gauss_paper_noise_multiplier(epsilon, delta, owner=owner)
    elif calibration == "exact":
        z = gaussian_noise_multiplier(epsilon, delta)
    else:
        raise ValueError(f"unknown calibration {calibration!r}; expected one of {list(CALIBRATIONS)}")
    return GaussianEvent(noise_multiplier=z), z * sensitivity, sensitivity


def analyze_gauss(
    gram: np.ndarray, *, chokepoint: Chokepoint, sigma: float, sensitivity: float, postprocess: str = "none"
) -> np.ndarray:
    """Returns AᵀA + N (Alg. 1 of Dwork et al. 2014), optionally post-processed.

    Args:
        gram: the exact AᵀA of clipped rows, shape (d, d).
        chokepoint: a charged chokepoint covering GaussianEvent(σ/Δ).
        sigma: the noise scale σ.
        sensitivity: Δ of the upper triangle of AᵀA.
        postprocess: ``none``; ``psd`` — negative eigenvalues set to 0
            (projection to the PSD cone in Frobenius norm); ``shift`` — add
            c·I with c = 2σ√d ≈ E‖N‖₂ (Sheffet's choice, making the result PSD
            with high probability). Post-processing costs no privacy.
    """
    # Alg. 1, step 1-2: E symmetric with upper-triangle entries i.i.d. N(0, σ²).
    noisy = chokepoint.gaussian_symmetric(gram, sigma=sigma, l2_sensitivity=sensitivity)
    return postprocess_matrix(noisy, postprocess, sigma=sigma)


def postprocess_matrix(matrix: np.ndarray, how: str, *, sigma: float) -> np.ndarray:
    """Analyze Gauss's post-processing (no privacy cost): ``shift`` adds c·I with c = 2σ√d; ``psd``
    projects the release as drawn (:mod:`spark_dp.second_moment._postprocess`).
    """
    return _postprocess_matrix(matrix, how, shift=2.0 * sigma * math.sqrt(matrix.shape[0]), psd_after_shift=False)


# -- the registry entry (spark_dp.second_moment.api.MECHANISMS) --------------------------------
def plan_release(req: PlanRequest) -> MechanismPlan:
    """Analyze Gauss's plan: one GaussianEvent, σ = z·Δ with Δ for m rows per unit and the relation."""
    event, sigma, sens = analyze_gauss_plan(epsilon=req.epsilon, delta=req.delta, norm_bound=req.norm_bound,
                                            neighbors=req.neighbors, max_rows_per_unit=req.max_rows_per_unit,
                                            calibration=req.calibration, owner=req.owner)
    postprocess = req.postprocess

    def noise(gram, cp):
        return analyze_gauss(gram, chokepoint=cp, sigma=sigma, sensitivity=sens, postprocess=postprocess)

    privacy = {**req.base_privacy, "sensitivity": sens, "sensitivity_norm": "l2 of the upper triangle of A^T A",
               "noise": "gaussian", "noise_family": "gaussian", "noise_scale": sigma,
               "noise_sigma": sigma, "noise_multiplier": event.noise_multiplier,
               "calibration": "exact (Balle & Wang 2018)" if req.calibration == "exact" else PAPER_FORMULA,
               "event_representation": "GaussianEvent at the noise multiplier used (what the release guarantees)"}
    return MechanismPlan("analyze_gauss", [event], privacy, {"postprocess": postprocess, "calibration": req.calibration},
                         noise)


MECHANISM = MechanismSpec(
    name="analyze_gauss", plan=plan_release, params=frozenset(), calibrations=CALIBRATIONS, postprocess=POSTPROCESS,
    units=True, theorem_neighbors="as requested (sensitivity of A^T A for the relation)",
)
