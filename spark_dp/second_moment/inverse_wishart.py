"""Inverse-Wishart posterior sampling of the second-moment matrix.

Implements Section 5 of Sheffet (arXiv 1507.00056): with an inverse-Wishart
prior spread by w²·I, a draw from the posterior X ~ W⁻¹_d(AᵀA + w²I, m) is
differentially private. The privacy condition used here is the *exact*
(ε, δ) profile of ``spark_dp.second_moment.chi2_profile`` (derivation in
``docs/privacy.md``), not the paper's tail bound:

* Neighbours: add/remove one row (‖v‖₂ ≤ B). With Σ₀ = AᵀA + w²I,
  a = vᵀΣ₀⁻¹v ≤ B²/w² = a_max, the privacy loss is
  L = (m/2)·ln(1+a) − ½·vᵀX⁻¹v with vᵀX⁻¹v ~ (a/(1+a))χ²_m under P₁ and
  a·χ²_m under P₀ — the JL profile with P₀, P₁ swapped. w is the smallest
  ridge whose worst case over a ∈ (0, a_max] meets (ε, δ).
* m is a *public* parameter. Either the user picks it (``dof``), or the
  paper's posterior m = n + m₀ (:func:`posterior_dof`) with n *public*
  (``public_n``, given by the user and recorded in the manifest) and the
  prior's m₀ (``prior_dof``). n is public only under Sheffet's replace-one
  neighbours, so that mode requires ``neighbors="replace"``. Under
  add/remove n is private and an m depending on it would break the
  cancellation of the determinant term.
* Whatever m is, it is a constant of the mechanism: the add/remove profile
  holds for every pair of datasets at that m, so replace-one follows by
  group privacy of size 2 (the chain D → D − u → D − u + v keeps m fixed):
  calibrated at (ε/2, δ/(1+e^{ε/2})).
* Calibration: the paper's own inverse-Wishart constant is not in our
  source text, so ``calibration="paper"`` is refused for this mechanism;
  the exact profile is valid for any public m.

Sampling (Bartlett-free, driven by the chokepoint's sampler): with
Σ = LLᵀ (Cholesky) and G an m×d matrix of i.i.d. N(0, 1), the rows of GL⁻¹
are N(0, Σ⁻¹) so L⁻ᵀGᵀGL⁻¹ ~ W_d(Σ⁻¹, m) and its inverse
X = L(GᵀG)⁻¹Lᵀ ~ W⁻¹_d(Σ, m). The release is (m − d − 1)·X, whose mean is
Σ = AᵀA + w²I.
"""

from __future__ import annotations

import numpy as np
from scipy import linalg

from spark_dp import _validation as V
from spark_dp.errors import ConfigError
from spark_dp.privacy import Chi2ProfileEvent, Chokepoint, EpsilonDeltaEvent
from spark_dp.privacy.chi2_profile import add_remove_target, calibrate_a_max
from spark_dp.second_moment._postprocess import POSTPROCESS, postprocess_matrix
from spark_dp.second_moment._registry import (
    MechanismPlan,
    MechanismSpec,
    PlanRequest,
    check_rows_at_least_d_plus_2,
    default_projection_rows,
)


def posterior_dof(public_n: int, prior_dof: int) -> int:
    """The paper's posterior degrees of freedom m = n + m₀ (n public, m₀ the prior's)."""
    return int(public_n) + int(prior_dof)


def inverse_wishart_plan(
    *, epsilon: float, delta: float, norm_bound: float, dof: int, neighbors: str = "add_remove"
) -> tuple[EpsilonDeltaEvent | Chi2ProfileEvent, float, float]:
    """The event, the prior spread w and a_max = B²/w² (all public)."""
    eps_ar, delta_ar = add_remove_target(epsilon, delta, neighbors)
    a_max = calibrate_a_max(eps_ar, delta_ar, dof)
    w = norm_bound / np.sqrt(a_max)
    if neighbors == "add_remove":  # the exact χ² profile composes tightly (see Chi2ProfileEvent)
        return Chi2ProfileEvent(a_max=a_max, dof=dof, mechanism="inverse_wishart"), float(w), a_max
    return EpsilonDeltaEvent(epsilon=epsilon, delta=delta, mechanism="inverse_wishart"), float(w), a_max


def inverse_wishart(
    gram: np.ndarray, *, chokepoint: Chokepoint, event: EpsilonDeltaEvent | Chi2ProfileEvent, dof: int, w: float,
    postprocess: str = "none",
) -> np.ndarray:
    """Returns (m − d − 1)·X, X ~ W⁻¹_d(AᵀA + w²I, m), optionally post-processed.

    Args:
        gram: exact AᵀA of clipped rows, shape (d, d).
        chokepoint: a charged chokepoint holding ``event``.
        event: the release's EpsilonDeltaEvent.
        dof: m ≥ d + 2 (public).
        w: the prior spread from :func:`inverse_wishart_plan`.
        postprocess: ``none``; ``shift`` — subtract w²·I (an estimate of
            AᵀA; may be indefinite); ``psd`` — after the shift, negative
            eigenvalues set to 0.
    """
    d = gram.shape[0]
    # Step 1: posterior scale Σ = AᵀA + w² I (prior W⁻¹(w² I, ·) updated with the data).
    sigma = gram + w**2 * np.eye(d)
    chol_sigma = linalg.cholesky(sigma, lower=True)
    # Step 2: G (m × d) i.i.d. N(0, 1), after the charge, through the chokepoint.
    g = chokepoint.randomness(event).standard_normal(dof * d).reshape(dof, d)
    chol_g = linalg.cholesky(g.T @ g, lower=True)
    # Step 3: X = L (GᵀG)⁻¹ Lᵀ = TᵀT with T = C⁻¹Lᵀ, GᵀG = CCᵀ.
    t = linalg.solve_triangular(chol_g, chol_sigma.T, lower=True)
    out = (dof - d - 1) * (t.T @ t)
    out = 0.5 * (out + out.T)
    # Post-processing: shift subtracts the ridge w²·I; psd projects after it.
    return postprocess_matrix(out, postprocess, shift=-(w**2), psd_after_shift=True)


# -- the registry entry (spark_dp.second_moment.api.MECHANISMS) --------------------------------
def plan_release(req: PlanRequest) -> MechanismPlan:
    """Inverse-Wishart's plan: public dof m (default max(400, 2d)), or Sheffet's m = public_n + prior_dof
    under replace-one neighbours; w from the exact χ² profile.
    """
    d, owner = req.d, req.owner
    public_n, prior_dof, dof = req.public_n, req.prior_dof, req.dof
    if prior_dof is not None and public_n is None:
        raise ConfigError(f"The 'prior_dof' parameter of {owner} needs 'public_n' (the posterior has m = public_n + "
                          f"prior_dof). Got prior_dof={prior_dof} without public_n.")
    if public_n is not None:
        public_n = V.check_int("public_n", public_n, owner=owner, low=1)
        if req.neighbors != "replace":
            raise ConfigError(f"The 'public_n' parameter of {owner} needs neighbors 'replace' (n is public only when "
                              f"neighbours replace a row, as in Sheffet's theorem). Got neighbors {req.neighbors!r}.")
        if dof is not None:
            raise ConfigError(f"The 'dof' parameter of {owner} must not be given with 'public_n' (m = public_n + "
                              f"prior_dof). Got {dof}.")
        prior_dof = V.check_int("prior_dof", d + 2 if prior_dof is None else prior_dof, owner=owner, low=d)
        dof = posterior_dof(public_n, prior_dof)
    r = default_projection_rows(d) if dof is None else int(dof)
    check_rows_at_least_d_plus_2(r, d, name="dof", mechanism="inverse_wishart", owner=owner)
    event, w, _ = inverse_wishart_plan(epsilon=req.epsilon, delta=req.delta, norm_bound=req.norm_bound, dof=r,
                                       neighbors=req.neighbors)
    postprocess = req.postprocess

    def noise(gram, cp):
        return inverse_wishart(gram, chokepoint=cp, event=event, dof=r, w=w, postprocess=postprocess)

    privacy = {**req.base_privacy,
               "noise": "inverse-Wishart posterior sample W^-1(A^T A + w^2 I, m), rescaled by m - d - 1",
               "noise_family": "inverse_wishart", "noise_scale": None,
               "dof": r, "ridge_w": w, "ridge_w2": w * w,
               "dof_rule": ("public dof m" if public_n is None else
                            "Sheffet's posterior m = n + m0 with n public (public_n, given by the user; "
                            "not checked against the data) under replace-one neighbours"),
               "public_n": public_n, "prior_dof": prior_dof,
               "calibration": "exact chi-square privacy profile, worst case over a <= B^2/w^2",
               "event_representation": type(event).__name__ + (
                   " (exact chi-square PLD, composed tightly)" if type(event).__name__ == "Chi2ProfileEvent"
                   else " at the calibrated (epsilon, delta)")}
    params = {"postprocess": postprocess, "dof": r}
    if public_n is not None:
        params.update(public_n=public_n, prior_dof=prior_dof)
    return MechanismPlan("inverse_wishart", [event], privacy, params, noise)


MECHANISM = MechanismSpec(
    name="inverse_wishart", plan=plan_release, params=frozenset({"dof", "public_n", "prior_dof"}),
    calibrations=("exact",), postprocess=POSTPROCESS, units=False,
    theorem_neighbors="add/remove one row with public dof m (exact chi-square profile); replace via group privacy "
                      "of size 2; the paper's m = n + m0 (public_n) needs n public: replace-one only",
)
