"""AdaSSP: adaptive sufficient-statistics perturbation for linear regression.

Implements Algorithm 2 of Yu-Xiang Wang, "Revisiting differentially private
linear regression: optimal and adaptive prediction & estimation in
unbounded domain" (UAI 2018), the strong baseline for Sheffet's mechanisms.
The budget is split in three equal Gaussian releases composed *exactly*
(μ-GDP, z = √3·z₁(ε, δ)) instead of the paper's (ε/3, δ/3) each.

Data: rows [x, y] clipped jointly to ‖[x, y]‖₂ ≤ B, so ‖x‖ ≤ B, |y| ≤ B and
‖x‖·|y| ≤ B²/2 (AM–GM). A privacy unit is one row, or, with a
``privacy_unit`` column, the at most m = ``max_rows_per_unit`` rows kept for
one unit value.

Neighbours: add/remove one unit (default) or replace one unit's rows by at
most m others. Sensitivities, for a unit of rows x₁…x_m (P = Σ xᵢxᵢᵀ,
q = Σ xᵢyᵢ; a replacing unit's Q, r likewise):

1. λ_min(XᵀX). add/remove: XᵀX moves by ±P, P PSD with ‖P‖₂ ≤ Σ‖xᵢ‖² ≤ m·B²,
   so every eigenvalue moves within [0, m·B²] (Weyl): Δ₁ = m·B².
   replace: XᵀX − P + Q with −P ≼ Q − P ≼ Q, so λ_min moves within
   [−m·B², m·B²] (Weyl again): Δ₁ = m·B².
2. upper triangle of XᵀX: ‖P‖_F ≤ m·B², so Δ₂ = m·B² (add/remove) and
   √2·m·B² (replace: ⟨P, Q⟩ ≥ 0 for PSD P, Q), exactly as Analyze Gauss
   (:func:`spark_dp.privacy.second_moment_l2_sensitivity`).
3. Xᵀy: ‖q‖₂ ≤ Σ‖xᵢ‖·|yᵢ| ≤ m·B²/2, so Δ₃ = m·B²/2 (add/remove) and
   ‖q − r‖₂ ≤ m·B² (replace).

Every sensitivity is m times its one-row value (the per-unit bound enters
once, here, through :func:`adassp_sensitivities`).

Steps (Wang 2018, Alg. 2, with σᵢ = z·Δᵢ and failure probability ρ):

1. λ̃_min = max(λ_min(XᵀX) + σ₁·Z − σ₁·√ln(6/δ), 0)
2. λ = max(0, σ₂·√(p·ln(2p²/ρ)) − λ̃_min)
3. XᵀX^ = XᵀX + σ₂·E (E symmetric, upper triangle i.i.d. N(0, 1))
4. Xᵀy^ = Xᵀy + σ₃·z
5. β̂ = (XᵀX^ + λI)⁻¹ Xᵀy^
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from spark_dp.privacy import (
    NEIGHBORS,
    Chokepoint,
    GaussianEvent,
    gaussian_noise_multiplier,
    second_moment_l2_sensitivity,
)
from spark_dp.second_moment._registry import MechanismPlan, MechanismSpec, PlanRequest
from spark_dp.second_moment.regression import solve_normal_equations


@dataclass(frozen=True)
class AdaSSPPlan:
    """Public parameters of one AdaSSP release."""

    events: tuple[GaussianEvent, GaussianEvent, GaussianEvent]
    sigmas: tuple[float, float, float]
    sensitivities: tuple[float, float, float]
    delta: float
    rho: float


def adassp_sensitivities(norm_bound: float, *, neighbors: str = "add_remove",
                         max_rows_per_unit: int = 1) -> tuple[float, float, float]:
    """(Δ₁, Δ₂, Δ₃) of λ_min(XᵀX), the upper triangle of XᵀX and Xᵀy (module docstring)."""
    m = int(max_rows_per_unit)
    if m < 1:
        raise ValueError(f"max_rows_per_unit must be >= 1, got {max_rows_per_unit!r}")
    mb2 = m * norm_bound**2
    if neighbors == "add_remove":
        return (mb2, second_moment_l2_sensitivity(norm_bound, max_rows_per_unit=m, neighbors=neighbors), mb2 / 2)
    if neighbors == "replace":
        return (mb2, second_moment_l2_sensitivity(norm_bound, max_rows_per_unit=m, neighbors=neighbors), mb2)
    raise ValueError(f"unknown neighbour relation {neighbors!r}; expected one of {list(NEIGHBORS)}")


def adassp_plan(*, epsilon: float, delta: float, norm_bound: float, neighbors: str = "add_remove",
                max_rows_per_unit: int = 1, rho: float = 0.05) -> AdaSSPPlan:
    """Three Gaussian events at z = √3·z₁(ε, δ) and their σᵢ = z·Δᵢ (Δᵢ for m rows per unit)."""
    sens = adassp_sensitivities(norm_bound, neighbors=neighbors, max_rows_per_unit=max_rows_per_unit)
    z = gaussian_noise_multiplier(epsilon, delta, releases=3)
    ev = GaussianEvent(noise_multiplier=z)
    return AdaSSPPlan((ev, ev, ev), tuple(z * s for s in sens), sens, delta, rho)  # type: ignore[arg-type]


def adassp(gram: np.ndarray, *, chokepoint: Chokepoint, plan: AdaSSPPlan) -> dict[str, np.ndarray | dict]:
    """Runs Alg. 2 on the exact [X y]ᵀ[X y] (label last).

    Returns:
        dict with ``coefficients`` (p,), ``xtx`` (p, p), ``xty`` (p,),
        ``lambda`` (the adaptive ridge, shape (1,)), and ``info`` (solver).
    """
    p = gram.shape[0] - 1
    xtx, xty = gram[:p, :p], gram[:p, p]
    (s1, s2, s3), (d1, d2, d3) = plan.sigmas, plan.sensitivities
    # Step 1: private lower bound on λ_min(XᵀX).
    lam_min = float(np.linalg.eigvalsh(xtx)[0]) if p else 0.0
    noisy_lam = float(chokepoint.gaussian(np.array([lam_min]), sigma=s1, l2_sensitivity=d1)[0])
    lam_tilde = max(noisy_lam - s1 * math.sqrt(math.log(6.0 / plan.delta)), 0.0)
    # Step 2: adaptive ridge.
    lam = max(0.0, s2 * math.sqrt(p * math.log(2.0 * p * p / plan.rho)) - lam_tilde)
    # Step 3: noisy XᵀX (symmetric).
    xtx_hat = chokepoint.gaussian_symmetric(xtx, sigma=s2, l2_sensitivity=d2)
    # Step 4: noisy Xᵀy.
    xty_hat = chokepoint.gaussian(xty, sigma=s3, l2_sensitivity=d3)
    # Step 5: ridge solution.
    beta, info = solve_normal_equations(xtx_hat, xty_hat, ridge=lam)
    return {"coefficients": beta, "xtx": xtx_hat, "xty": xty_hat, "lambda": np.array([lam]), "info": info}


# -- the registry entry (spark_dp.second_moment.api.MECHANISMS) --------------------------------
def plan_release(req: PlanRequest) -> MechanismPlan:
    """AdaSSP's plan: three Gaussian events; sensitivities for m rows per unit and the relation."""
    plan = adassp_plan(epsilon=req.epsilon, delta=req.delta, norm_bound=req.norm_bound, neighbors=req.neighbors,
                       max_rows_per_unit=req.max_rows_per_unit)
    privacy = {**req.base_privacy, "noise": "gaussian x3 (lambda_min, X^T X, X^T y)", "noise_family": "gaussian",
               "noise_scale": list(plan.sigmas), "noise_sigma": list(plan.sigmas),
               "sensitivity": list(plan.sensitivities),
               "calibration": "exact composition of three equal Gaussian releases (mu-GDP)",
               "rho": plan.rho, "clipping": "rows [x, y] jointly to L2 norm <= B"}
    return MechanismPlan("adassp", list(plan.events), privacy, {},
                         lambda gram, cp: adassp(gram, chokepoint=cp, plan=plan))


MECHANISM = MechanismSpec(
    name="adassp", plan=plan_release, params=frozenset(), calibrations=("exact",),
    postprocess=("none",),  # it releases no second-moment matrix to post-process
    units=True, theorem_neighbors="as requested (sensitivities of lambda_min, X^T X and X^T y for the relation)",
    tasks=("linear_regression",),
)
