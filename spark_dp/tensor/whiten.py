"""Whitening: the power method for linearly independent (non-orthogonal) components.

Anandkumar, Ge, Hsu, Kakade & Telgarsky, "Tensor decompositions for learning
latent variable models" (JMLR 2014), Sec. 4.3, the reduction Wang & Anandkumar
(NIPS 2016, Sec. 1.2) rely on: if M2 = Σₕ wₕ aₕaₕᵀ and M3 = Σₕ wₕ aₕ^⊗3 with
linearly independent aₕ, a W (d×k) with WᵀM2W = I_k makes
M3(W,W,W) = Σₕ wₕ^{-1/2} μₕ^⊗3 orthogonally decomposable (μₕ = √wₕ Wᵀaₕ
orthonormal). The power method finds (λₕ, μₕ) = (wₕ^{-1/2}, μₕ), and
unwhitening gives aₕ = λₕ (Wᵀ)⁺μₕ, wₕ = λₕ^{-2}.

Over rows the whitened tensor is the third moment of y = Wᵀx, so one pass
computes Σ(yᵀu)²y = Wᵀ Σ(xᵀWu)²x with the unchanged moment kernel at U_x = WU
(k×L candidates become d×L). The d×d×d and k×k×k tensors are never formed.

Privacy (private whitening): M2 is released first by the Gaussian mechanism
on the upper triangle of Σxxᵀ (sensitivity m·B², ×√2 replace); W is
post-processing of it. Rows clipped to ‖x‖ ≤ B give ‖y‖ ≤ ‖W‖op·B =: B_y,
so each pass's batch has Frobenius sensitivity f·m·√L·B_y³, known once M2 is
released; the noise multiplier z = σ/Δ of every release is fixed up front.
M2 and the power passes compose sequentially (M2 reads all rows); the passes
among themselves compose in parallel (fresh) or sequentially (reuse). Only
the exact calibration is offered: the paper has no whitening step to copy.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np

from spark_dp.errors import ConfigError
from spark_dp.privacy import Chokepoint, GaussianEvent, second_moment_l2_sensitivity
from spark_dp.tensor.online import online_tensor_power_method
from spark_dp.tensor.power_method import TensorDecomposition
from spark_dp.tensor.private import PrivatePlan, calibrate, check_row_options, private_online_power_method


@dataclasses.dataclass(frozen=True)
class WhitenedDecomposition:
    """Result of the whitened power method.

    Attributes:
        eigenvalues: (k,) λ̂ₕ of the whitened tensor (λₕ = wₕ^{-1/2} in the model).
        eigenvectors: (k, d) unit directions aₕ/‖aₕ‖ in the input space.
        components: (k, d) the unwhitened components aₕ = λ̂ₕ (Wᵀ)⁺μ̂ₕ.
        weights: (k,) mixture weights wₕ ∝ λ̂ₕ^{-2}, normalised to sum to 1
            (with sums rather than means the raw λ̂ₕ^{-2} is n·wₕ).
        pass_sigma: σ of the whitened power passes (a function of the
            released M2, public parameters and B), None when not private.
    """

    eigenvalues: np.ndarray
    eigenvectors: np.ndarray
    components: np.ndarray
    weights: np.ndarray
    pass_sigma: float | None = None


def whitening(M2: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """W (d×k) with WᵀM2W = I_k on M2's top-k eigenspace, and (Wᵀ)⁺ (d×k).

    Eigenvalues are floored at 1e-12 of the largest (a noisy M2 may have tiny
    or negative ones; the floor keeps W finite — post-processing).
    """
    M2 = (M2 + M2.T) / 2.0
    s, Q = np.linalg.eigh(M2)
    order = np.argsort(s)[::-1][:k]
    s, Q = s[order], Q[:, order]
    floor = max(float(np.max(np.abs(s))), 1e-300) * 1e-12
    s = np.maximum(s, floor)
    return Q / np.sqrt(s), Q * np.sqrt(s)


def whitened_moments(moments: Callable, W: np.ndarray) -> Callable:
    """Moments of y = Wᵀx from moments of x: Σ(yᵀu)²y = WᵀΣ(xᵀWu)²x, Σ(yᵀu)³ = Σ(xᵀWu)³."""

    def moments_y(Uy: np.ndarray, pass_index: int):
        S, m3, count = moments(W @ Uy, pass_index)
        return W.T @ S, m3, count

    return moments_y


def unwhiten(dec: TensorDecomposition, W_pinv_T: np.ndarray, *, scale: float = 1.0) -> WhitenedDecomposition:
    """aₕ = λ̂ₕ (Wᵀ)⁺μ̂ₕ · scale (``scale`` corrects a pass reading a fraction of the rows)."""
    lam = dec.eigenvalues
    A = (lam[:, None] * (dec.eigenvectors @ W_pinv_T.T)) * scale
    norms = np.linalg.norm(A, axis=1, keepdims=True)
    units = A / np.where(norms > 0, norms, 1.0)
    lam_true = np.abs(lam * scale)
    raw = 1.0 / np.maximum(lam_true, 1e-300) ** 2
    weights = raw / raw.sum() if np.isfinite(raw.sum()) and raw.sum() > 0 else np.full_like(raw, np.nan)
    return WhitenedDecomposition(eigenvalues=lam, eigenvectors=units, components=A, weights=weights)


def whitened_online_power_method(
    moments: Callable, M2: np.ndarray, *, k: int, L: int, R: int, rng: np.random.Generator
) -> WhitenedDecomposition:
    """Non-private: whitening by the exact mean M2, Alg. 2 on the whitened rows, unwhitening.

    ``moments`` as in :func:`~spark_dp.tensor.online.online_tensor_power_method`
    (sums and counts; divided by the counts, so M2 must be the mean (1/n)Σxxᵀ).
    """
    W, W_pinv_T = whitening(M2, k)
    dec = online_tensor_power_method(whitened_moments(moments, W), d=k, k=k, L=L, R=R, rng=rng)
    return unwhiten(dec, W_pinv_T)


def whitened_rows_plan(
    *,
    epsilon: float,
    delta: float,
    k: int,
    L: int,
    R: int,
    norm_bound: float,
    mode: str = "fresh",
    calibration: str = "exact",
    neighbors: str = "add_remove",
    max_rows_per_unit: int = 1,
) -> PrivatePlan:
    """Events of :func:`private_whitened_power_method`: 1 (M2) + 1 (fresh) or k(R+1) (reuse) releases.

    All releases share one noise multiplier z calibrated by exact Gaussian
    composition over them. ``sigma``/``sensitivity`` of the returned plan are
    those of M2 (the passes' depend on the released M2).
    """
    if calibration != "exact":
        raise ConfigError("The 'calibration' parameter must be 'exact' with whiten=True (the paper has no "
                          f"whitening step to reproduce). Got {calibration!r} instead.")
    check_row_options(mode, neighbors, max_rows_per_unit)
    passes = k * (R + 1)
    batches = 1 if mode == "fresh" else passes
    z, details = calibrate(epsilon, delta, 1 + batches, "exact")
    sens2 = second_moment_l2_sensitivity(norm_bound, max_rows_per_unit=max_rows_per_unit, neighbors=neighbors)
    return PrivatePlan(
        events=[GaussianEvent(noise_multiplier=z)] * (1 + batches), noise_multiplier=z, releases=1 + batches,
        composition="parallel" if mode == "fresh" else "sequential", calibration="exact",
        sigma=z * sens2, sensitivity=sens2,
        details={**details, "passes": passes, "second_moment_sensitivity": sens2,
                 "structure": "M2 (all rows) then the power passes, sequentially"},
    )


def private_whitened_power_method(
    moments: Callable,
    gram: np.ndarray,
    *,
    k: int,
    L: int,
    R: int,
    plan: PrivatePlan,
    chokepoint: Chokepoint,
    rng: np.random.Generator,
    norm_bound: float,
    mode: str,
    neighbors: str = "add_remove",
    max_rows_per_unit: int = 1,
) -> WhitenedDecomposition:
    """Private M2 → whitening → private power method on whitened rows → unwhitening.

    Guarantee: (ε, δ)-DP under add/remove (or replace) of one privacy unit,
    with ``plan`` from :func:`whitened_rows_plan` charged on ``chokepoint``.

    Args:
        moments: exact sums of the clipped rows x (see ``online_tensor_power_method``).
        gram: the exact Σxxᵀ of the clipped rows (d×d).
        k, L, R: components, restarts, power steps.
        plan, chokepoint: the charged plan.
        rng: random starts only (not privacy noise).
        norm_bound: B.
        mode: ``fresh`` or ``reuse`` (as in the plan).
        neighbors, max_rows_per_unit: as in the plan.
    """
    # Release 1: M2 + symmetric Gaussian noise (Analyze Gauss on the upper triangle).
    M2 = chokepoint.gaussian_symmetric(gram, sigma=plan.sigma, l2_sensitivity=plan.sensitivity)
    W, W_pinv_T = whitening(M2, k)  # post-processing
    B_y = float(np.linalg.norm(W, 2)) * norm_bound  # ‖y‖ = ‖Wᵀx‖ ≤ ‖W‖op·B
    factor = 2.0 if neighbors == "replace" else 1.0
    sens = factor * max_rows_per_unit * math.sqrt(L) * B_y**3
    passes_plan = dataclasses.replace(
        plan, events=plan.events[1:], sigma=plan.noise_multiplier * sens, sensitivity=sens,
    )
    dec = private_online_power_method(whitened_moments(moments, W), d=k, k=k, L=L, R=R, plan=passes_plan,
                                      chokepoint=chokepoint, rng=rng)
    # A fresh pass reads about 1/passes of the rows whose M2 was whitened against.
    return dataclasses.replace(unwhiten(dec, W_pinv_T, scale=float(k * (R + 1)) if mode == "fresh" else 1.0),
                               pass_sigma=float(passes_plan.sigma))


def whitened_uncertainty(w: WhitenedDecomposition, req, level: float) -> dict:
    """Error bars of a private whitened release (post-processing of the release and public parameters).

    ``eigenvalues``: each λ̂ₕ is the eigenvalue pass's noisy sum over its rows
    of the whitened deflated tensor at the released whitened vector, plus
    N(0, σ²) with σ the passes' (z·f·m·√L·B_y³, B_y = ‖W‖op·B, W from the
    released M2): ± z·σ, Bonferroni over the L candidates, as without
    whitening (:func:`spark_dp.tensor.private.eigenvalue_uncertainty`; the
    truth uses the *released* whitening W, noise only). ``eigenvectors`` and
    ``weights`` (in [0, 1], they sum to 1): trivial bounds, no rigorous one is
    computable (:data:`spark_dp.tensor.private.NO_VECTOR_BOUND`).
    ``components`` have none: no finite bound exists without the data's
    eigengap (documented exclusion, docs/accuracy.md).
    """
    from spark_dp.release.uncertainty import Uncertainty
    from spark_dp.tensor.private import eigenvalue_uncertainty, trivial_unit_bound

    if w.pass_sigma is None:
        return {}
    vals = eigenvalue_uncertainty(w.eigenvalues, np.full(len(w.eigenvalues), w.pass_sigma), restarts=req.L,
                                  level=level, source="= the whitened passes' sigma (from the released M2 and B)")
    weights = np.asarray(w.weights, dtype=np.float64)
    return {"eigenvalues": vals, "eigenvectors": trivial_unit_bound(w.eigenvectors),
            "weights": Uncertainty(np.zeros_like(weights), np.ones_like(weights), None, (
                "trivial bound only: mixture weights lie in [0, 1]; no rigorous bound on their error is computable "
                "from the release (they are lambda^-2 of the whitened eigenvalues, whose truth is the model's)"),
                kind="bound")}
