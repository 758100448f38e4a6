"""Additive Wishart noise: AᵀA + W, W ~ W_d(B²·I, k).

Implements Section 4 of Sheffet, "Private Approximations of the 2nd-Moment
Matrix Using Existing Techniques in Linear Regression" (arXiv 1507.00056),
Theorem 4.1: for rows with ‖a‖₂ ≤ B and k ≥ d + 28·ln(4/δ)/ε², releasing
AᵀA + W with W ~ W_d(B²I, k) is (ε, δ)-DP.

Guarantee and neighbour relation:

* Sheffet's neighbours are matrices that *differ in one row* (replace one
  row, both rows of norm ≤ B, n public). Because the release depends on the
  data only through AᵀA, adding a row v has the same effect on AᵀA as
  replacing a zero row by v, so the theorem also covers add/remove
  neighbours: the same k serves both, and the manifest records the
  theorem's relation (``theorem_neighbors``).
* The theorem is an (ε, δ) tail bound, not a privacy profile: the release is
  recorded as an :class:`~spark_dp.privacy.EpsilonDeltaEvent` and composed
  through its PLD. We accept 0 < ε ≤ 1 only, the range in which such tail
  arguments are stated; larger ε is refused rather than extrapolated.
* Calibration: Sheffet's bound *is* the only calibration known for this
  mechanism, so ``calibration="exact"`` and ``calibration="paper"`` plan
  the same k (the manifest records which was asked for).
* This is *not* the Wishart mechanism of Jiang et al. (2016, df = d + 1),
  which was shown not to be DP.

Sampling: W = B²·GᵀG with G a k×d matrix of i.i.d. N(0, 1) drawn from the
chokepoint's sampler (``standard_normal``) after the release is charged; the
rows of B·G are k i.i.d. N(0, B²I) vectors, so W ~ W_d(B²I, k) exactly (up
to the sampler's 2^-30 grid). Sheffet's view: A is appended with k random
rows.
"""

from __future__ import annotations

import math

import numpy as np

from spark_dp.errors import ConfigError
from spark_dp.privacy import Chokepoint, EpsilonDeltaEvent
from spark_dp.second_moment._postprocess import POSTPROCESS, postprocess_matrix
from spark_dp.second_moment._registry import MechanismPlan, MechanismSpec, PlanRequest


def wishart_min_dof(d: int, epsilon: float, delta: float) -> int:
    """Sheffet Thm 4.1: the smallest k = d + ⌈28·ln(4/δ)/ε²⌉."""
    return int(d + math.ceil(28.0 * math.log(4.0 / delta) / epsilon**2))


def wishart_plan(*, d: int, epsilon: float, delta: float, dof: int | None = None, owner: str = "second_moment") -> tuple[EpsilonDeltaEvent, int]:
    """The release's event and its degrees of freedom k (all public).

    Raises:
        ConfigError: ε > 1, or a ``dof`` below Sheffet's bound for (ε, δ).
    """
    if epsilon > 1.0:
        raise ConfigError(
            f"The 'epsilon' parameter of {owner} must be at most 1 for the wishart mechanism "
            f"(Sheffet Thm 4.1 is stated for epsilon <= 1). Got {epsilon:g} instead."
        )
    k_min = wishart_min_dof(d, epsilon, delta)
    if dof is None:
        k = k_min
    else:
        if dof < k_min:
            raise ConfigError(
                f"The 'dof' parameter of {owner} is too small for epsilon={epsilon:g}, delta={delta:g}: "
                f"the wishart mechanism needs k >= d + 28 ln(4/delta)/epsilon^2 = {k_min}. Got {dof} instead."
            )
        k = int(dof)
    return EpsilonDeltaEvent(epsilon=epsilon, delta=delta, mechanism="wishart"), k


def wishart_noise(chokepoint: Chokepoint, event: EpsilonDeltaEvent, *, d: int, k: int, norm_bound: float) -> np.ndarray:
    """W = B²·GᵀG ~ W_d(B²I, k), drawn through the chokepoint (consumes ``event``)."""
    sampler = chokepoint.randomness(event)
    g = sampler.standard_normal(k * d).reshape(k, d)
    return norm_bound**2 * (g.T @ g)


def additive_wishart(
    gram: np.ndarray, *, chokepoint: Chokepoint, event: EpsilonDeltaEvent, k: int, norm_bound: float,
    postprocess: str = "none",
) -> np.ndarray:
    """Returns AᵀA + W (Sheffet Alg. of Section 4), optionally post-processed.

    Args:
        gram: exact AᵀA of clipped rows, shape (d, d).
        chokepoint: a charged chokepoint holding ``event``.
        event: the release's EpsilonDeltaEvent.
        k: degrees of freedom (≥ :func:`wishart_min_dof`).
        norm_bound: B.
        postprocess: ``none``; ``shift`` — subtract E[W] = k·B²·I (the
            paper's post-processing, unbiased but possibly indefinite);
            ``psd`` — after the shift, negative eigenvalues set to 0.
    """
    d = gram.shape[0]
    # Step 1: W ~ W_d(B² I, k) (k random rows appended to A).
    w = wishart_noise(chokepoint, event, d=d, k=k, norm_bound=norm_bound)
    # Step 2: output AᵀA + W.
    out = gram + w
    # Post-processing: shift subtracts the mean k·B²·I; psd projects after it.
    return postprocess_matrix(out, postprocess, shift=-(k * norm_bound**2), psd_after_shift=True)


# -- the registry entry (spark_dp.second_moment.api.MECHANISMS) --------------------------------
def plan_release(req: PlanRequest) -> MechanismPlan:
    """Additive Wishart's plan: k from Sheffet's bound (or ``dof``), one (ε, δ) event."""
    event, k = wishart_plan(d=req.d, epsilon=req.epsilon, delta=req.delta, dof=req.dof, owner=req.owner)
    norm_bound, postprocess = req.norm_bound, req.postprocess

    def noise(gram, cp):
        return additive_wishart(gram, chokepoint=cp, event=event, k=k, norm_bound=norm_bound, postprocess=postprocess)

    privacy = {**req.base_privacy, "noise": "additive Wishart W_d(B^2 I, k)", "noise_family": "wishart",
               "noise_scale": None, "dof": k,
               "calibration": f"{req.calibration}: Sheffet Thm 4.1, k >= d + 28 ln(4/delta)/epsilon^2 "
                              "(the paper's bound; no exact profile is known, so both modes plan the same k)",
               "event_representation": "EpsilonDeltaEvent (tail bound; no tighter profile known)"}
    return MechanismPlan("wishart", [event], privacy, {"postprocess": postprocess, "dof": k,
                                                       "calibration": req.calibration}, noise)


MECHANISM = MechanismSpec(
    name="wishart", plan=plan_release, params=frozenset({"dof"}), calibrations=("exact", "paper"),
    postprocess=POSTPROCESS, units=False,
    theorem_neighbors="replace one row (Sheffet Thm 4.1); implies add/remove since the release depends on A^T A only",
)
