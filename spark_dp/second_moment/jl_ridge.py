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
  partitioning. Z comes from the session sampler's ``standard_normal`` after
  the charge (secure: OpenDP's discrete Gaussian on the 2⁻³⁰ grid), as for
  the Wishart mechanisms.
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


# What the secure-sampler argument covers for the JL release, stated in every JL manifest
# (docs/privacy.md, "Floating point and the JL projection").
JL_FLOATING_POINT = {
    "gram": ("The Gaussian matrix Z comes from the session sampler (secure: exact discrete Gaussian on a 2^-30 grid), "
             "so the sampling-side floating-point attacks (Mironov 2012; Jin et al. 2022: the irregular set of "
             "doubles a floating-point sampler can return) do not apply. The release is not x + noise but "
             "L Z^T Z L^T / r computed in floating point; the privacy proof is for exact arithmetic and the "
             "rounding of those products is not covered by it (no attack on it is known)."),
    "rows": ("R's data columns are Box-Muller floating-point normals from Philox on the executors, NOT the secure "
             "sampler: the secure-sampler argument does not cover them. Use projection 'gram' (the default) when "
             "floating-point attacks are in the threat model."),
}


# -- the registry entry (spark_dp.second_moment.api.MECHANISMS) --------------------------------
def plan_release(req: PlanRequest) -> MechanismPlan:
    """JL's plan: r rows (default max(400, 2d)), w from the exact χ² profile (or the paper's constant)."""
    d, owner = req.d, req.owner
    if req.row_ids != "content" and req.projection != "rows":
        raise ConfigError(f"The 'row_ids' parameter of {owner} applies to projection 'rows' only (the default "
                          f"projection 'gram' draws no per-row randomness). Got {req.row_ids!r} with projection "
                          f"{req.projection!r}.")
    r = default_projection_rows(d) if req.projection_rows is None else int(req.projection_rows)
    check_rows_at_least_d_plus_2(r, d, name="projection_rows", mechanism="jl_ridge", owner=owner)
    event, w = jl_ridge_plan(epsilon=req.epsilon, delta=req.delta, norm_bound=req.norm_bound, r=r,
                             neighbors=req.neighbors, calibration=req.calibration)
    postprocess = req.postprocess
    if req.projection == "gram":

        def noise(gram, cp):
            return jl_ridge_from_gram(gram, chokepoint=cp, event=event, r=r, w=w, postprocess=postprocess)
    else:

        def noise(project, cp):
            return jl_ridge(project, chokepoint=cp, event=event, r=r, d=d, w=w, postprocess=postprocess)

    privacy = {**req.base_privacy, "noise": "Gaussian JL projection of [A; wI]", "noise_family": "jl_projection",
               "noise_scale": None, "projection_rows": r, "ridge_w": w,
               "ridge_w2": w * w,
               "calibration": ("exact chi-square privacy profile, worst case over a <= B^2/w^2"
                               if req.calibration == "exact" else
                               "paper: w^2 = (8B^2/eps)(sqrt(2r ln(8/delta)) + 2 ln(8/delta))"),
               "event_representation": type(event).__name__ + (
                   " (exact chi-square PLD, composed tightly)" if type(event).__name__ == "Chi2ProfileEvent"
                   else " at the calibrated (epsilon, delta)")}
    if req.projection == "gram":
        privacy["projection"] = ("gram: R·Ã drawn in its exact distribution, rows i.i.d. N(0, A^T A + w^2 I), "
                                 "from the exact A^T A (one pass; R is never drawn)")
        privacy["randomness"] = ("Z (r x d) i.i.d. N(0,1) from the session sampler after the charge (secure: "
                                 "OpenDP discrete Gaussian on the 2^-30 grid, OS entropy; the source of the "
                                 "Wishart mechanisms); release (Z L^T)^T (Z L^T)/r with L L^T = A^T A + w^2 I")
        privacy["floating_point"] = JL_FLOATING_POINT["gram"]
    else:
        privacy["projection"] = "rows: R's columns drawn per data row on the executors"
        privacy["randomness"] = ("R's data columns: Philox4x32-10 keyed by a 64-bit secret drawn after the charge, "
                                 "Box-Muller floating-point normals, one counter per row (see row_ids); "
                                 "ridge columns: the session sampler")
        privacy["floating_point"] = JL_FLOATING_POINT["rows"]
        privacy["row_ids"] = ("content hash (partition-independent)" if req.row_ids == "content"
                              else "partition id and position (depends on the input's partitioning)")
    return MechanismPlan("jl_ridge", [event], privacy, {"postprocess": postprocess, "projection_rows": r,
                                                        "calibration": req.calibration, "projection": req.projection,
                                                        "row_ids": req.row_ids},
                         noise, needs_gram=req.projection == "gram")


MECHANISM = MechanismSpec(
    name="jl_ridge", plan=plan_release, params=frozenset({"projection_rows", "row_ids", "projection"}),
    calibrations=CALIBRATIONS, postprocess=POSTPROCESS, units=False,
    theorem_neighbors="add/remove one row (exact chi-square profile); replace via group privacy of size 2",
)
