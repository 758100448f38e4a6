"""Differentially private tensor power methods.

Implements Algorithm 3 of Wang & Anandkumar, "Online and Differentially-Private
Tensor Decomposition", NIPS 2016 (arXiv 1606.06237) — the private robust
tensor power method on an explicit tensor — and its row-level analogue over
Spark rows, built on the online power method (Alg. 2, :mod:`.online`).

Explicit tensor (:func:`private_tensor_power_method`)
    Neighbours (the paper's Def. 4.2, ``tensor_entry``): T' − T =
    ±c·symmetrize(eᵢ⊗eⱼ⊗eₖ) for some i, j, k (c = ``entry_scale``, 1 in the
    paper). Sensitivities (proof of Thm 4.1): ‖T(I,u,u) − T'(I,u,u)‖₂ ≤
    6c‖u‖∞² and |T(u,u,u) − T'(u,u,u)| ≤ 6c‖u‖∞³. Each power step of each
    candidate releases T̃(I,u,u) + ν c‖u‖∞²·z and each eigenvalue estimate
    T̃(u,u,u) + ν c‖u‖∞³·z', i.e. a Gaussian mechanism with σ/Δ = ν/6; there
    are K = kL(R+1) such releases, composed sequentially.

Rows (:func:`private_online_power_method`)
    Neighbours: add/remove (or replace) one privacy unit of at most m rows,
    rows clipped to ‖x‖₂ ≤ B. The tensor is the third moment Σ x^⊗3 of the
    rows, never formed. For a d×L batch U of unit candidates, one row moves
    the batch Σ(xᵀu_τ)²x by at most B³ per column, so ‖·‖_F ≤ √L·B³ (×m per
    unit, ×2 for replace); the L eigenvalue sums Σ(xᵀu_τ)³ likewise by
    √L·B³. Each pass releases one such batch with Gaussian noise σ per entry.
    ``mode='fresh'``: every row is assigned (by a keyed hash, independent of
    the other rows) to exactly one of the k(R+1) passes, so the passes
    compose in parallel and the release costs one pass's Gaussian mechanism.
    ``mode='reuse'``: every pass reads all rows; the k(R+1) passes compose
    sequentially.

Calibrations
    ``exact`` (default): ν (or σ) from the exact composition of the Gaussian
    releases, :func:`~spark_dp.privacy.gaussian_noise_multiplier`.
    ``paper``: the paper's Alg. 3 step 2 — ε₀ = ε/√(K(4 + ln(2/δ))),
    δ₀ = δ/(2K), ν = 6·√(2 ln(1.25/δ₀))/ε₀ (advanced composition + the
    classic Gaussian mechanism). The ledger records the Gaussian events
    actually used, so it accounts the paper mode exactly too (and finds it
    spends less than the claimed ε).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from spark_dp.errors import ConfigError
from spark_dp.privacy import Chokepoint, GaussianEvent, NoiseSampler, gaussian_noise_multiplier
from spark_dp.privacy.calibration import paper_classic_gaussian_noise_multiplier
from spark_dp.release.uncertainty import Uncertainty
from spark_dp.tensor._registry import OnInput, TensorMechanismSpec, TensorRequest
from spark_dp.tensor.power_method import (
    TensorDecomposition,
    check_counts,
    check_tensor,
    contract,
    deflate,
    normalize_columns,
    random_unit_columns,
)

CALIBRATIONS = ("exact", "paper")
MODES = ("fresh", "reuse")
ROW_NEIGHBORS = ("add_remove", "replace")


@dataclass(frozen=True)
class PrivatePlan:
    """The public noise plan of a private release (computed before any data is read).

    Attributes:
        events: the privacy events to charge (all of them, once).
        noise_multiplier: z = σ/Δ of each release.
        releases: K, the number of Gaussian releases as the calibration counts them.
        composition: ``sequential`` or ``parallel``.
        calibration: ``exact`` or ``paper``.
        nu: Alg. 3's ν (explicit tensors; σ = ν·c·‖u‖∞^p), or None.
        sigma: per-entry σ (rows), or None.
        sensitivity: Δ of one release (rows: the batch Frobenius bound), or None.
        details: manifest fields (ε₀, δ₀, …).
    """

    events: list[GaussianEvent]
    noise_multiplier: float
    releases: int
    composition: str
    calibration: str
    nu: float | None = None
    sigma: float | None = None
    sensitivity: float | None = None
    details: dict = field(default_factory=dict)


#: Largest σ/Δ a private tensor release accepts (see :func:`calibrate`).
MAX_NOISE_MULTIPLIER = 1e6


def calibrate(epsilon: float, delta: float, releases: int, calibration: str) -> tuple[float, dict]:
    """z = σ/Δ for ``releases`` Gaussian releases that together are (ε, δ)-DP.

    Raises ConfigError when ε is too small for the requested number of
    releases — no such z exists in floating point, or z exceeds
    :data:`MAX_NOISE_MULTIPLIER` (noise a million times the sensitivity on
    every release drowns any signal: refusing costs nothing, while running
    would spend the budget on noise) — or, for ``paper``, when ε₀ ≥ 1 (the
    classic Gaussian mechanism is not valid there).
    """
    if calibration == "exact":
        try:
            z = gaussian_noise_multiplier(epsilon, delta, releases=releases)
        except (ArithmeticError, ValueError):
            z = math.inf
        if not math.isfinite(z) or z > MAX_NOISE_MULTIPLIER:
            raise ConfigError(
                f"The 'epsilon' parameter ({epsilon:g}) is too small for {releases} Gaussian releases at "
                f"delta={delta:g}: the noise would exceed 1e6 times the sensitivity on every release; raise epsilon or lower k, restarts or iterations."
            )
        return z, {"releases": releases}
    if calibration == "paper":
        eps0 = epsilon / math.sqrt(releases * (4.0 + math.log(2.0 / delta)))
        delta0 = delta / (2.0 * releases)
        if not eps0 < 1:
            raise ConfigError(
                f"The 'epsilon' parameter ({epsilon:g}) gives epsilon_0 = {eps0:.4g} >= 1 under calibration='paper', "
                "where the classic Gaussian mechanism is not valid; use calibration='exact'."
            )
        z = paper_classic_gaussian_noise_multiplier(eps0, delta0)
        return z, {"releases": releases, "epsilon_0": eps0, "delta_0": delta0,
                   "composition_theorem": "advanced composition (Dwork & Roth 2014, Thm 3.20)"}
    raise ConfigError(f"The 'calibration' parameter must be one of {sorted(CALIBRATIONS)}. Got {calibration!r} instead.")


# -- explicit tensors: Algorithm 3 ---------------------------------------------
def tensor_entry_plan(
    *, epsilon: float, delta: float, k: int, L: int, R: int, calibration: str = "exact"
) -> PrivatePlan:
    """Alg. 3 step 2: ν and the K = kL(R+1) events (each σ/Δ = ν/6)."""
    K = k * L * (R + 1)
    z, details = calibrate(epsilon, delta, K, calibration)
    nu = 6.0 * z
    return PrivatePlan(
        events=[GaussianEvent(noise_multiplier=z)] * K, noise_multiplier=z, releases=K,
        composition="sequential", calibration=calibration, nu=nu, details=details,
    )


def release_power_step(
    S: np.ndarray, U: np.ndarray, lambdas: np.ndarray, V_: np.ndarray, *, nu: float, entry_scale: float,
    gaussian: Callable[..., np.ndarray],
) -> np.ndarray:
    """Alg. 3 steps 6-7 from the contraction S = T(I,U,U): deflate, then one release per candidate.

    ``gaussian(values, sigma=, l2_sensitivity=)`` is the chokepoint's; each
    candidate is a Gaussian release with Δ = 6c‖u‖∞² and σ = ν c‖u‖∞².
    """
    S, _ = deflate(S, None, U, lambdas, V_)  # step 6: (T − D)(I, u, u), D implicit
    noisy = np.empty_like(S)
    for tau in range(U.shape[1]):  # step 7
        scale = entry_scale * float(np.max(np.abs(U[:, tau]))) ** 2
        noisy[:, tau] = gaussian(S[:, tau], sigma=nu * scale, l2_sensitivity=6.0 * scale)
    return noisy


def release_eigenvalues(
    m3: np.ndarray, U: np.ndarray, lambdas: np.ndarray, V_: np.ndarray, *, nu: float, entry_scale: float,
    gaussian: Callable[..., np.ndarray],
) -> np.ndarray:
    """Alg. 3 step 10 from m3 = T(u,u,u) per candidate: deflate, then + ν c‖u‖∞³·z' (Δ = 6c‖u‖∞³)."""
    _, m3 = deflate(np.zeros_like(U), m3, U, lambdas, V_)
    lam = np.empty(U.shape[1])
    for tau in range(U.shape[1]):
        scale = entry_scale * float(np.max(np.abs(U[:, tau]))) ** 3
        lam[tau] = gaussian(np.array([m3[tau]]), sigma=nu * scale, l2_sensitivity=6.0 * scale)[0]
    return lam


def noisy_power_step(
    T: np.ndarray, U: np.ndarray, lambdas: np.ndarray, V_: np.ndarray, *, nu: float, entry_scale: float,
    gaussian: Callable[..., np.ndarray],
) -> np.ndarray:
    """Alg. 3 steps 6-7 for all L candidates: (T − D)(I,u,u) + ν c‖u‖∞²·z, one release per candidate."""
    S, _ = contract(T, U)
    return release_power_step(S, U, lambdas, V_, nu=nu, entry_scale=entry_scale, gaussian=gaussian)


def noisy_eigenvalues(
    T: np.ndarray, U: np.ndarray, lambdas: np.ndarray, V_: np.ndarray, *, nu: float, entry_scale: float,
    gaussian: Callable[..., np.ndarray],
) -> np.ndarray:
    """Alg. 3 step 10: (T − D)(u,u,u) + ν c‖u‖∞³·z' per candidate (Δ = 6c‖u‖∞³)."""
    _, m3 = contract(T, U)
    return release_eigenvalues(m3, U, lambdas, V_, nu=nu, entry_scale=entry_scale, gaussian=gaussian)


def private_power_method_matrix_free(
    apply: Callable[[np.ndarray], np.ndarray],
    d: int,
    k: int,
    *,
    L: int,
    R: int,
    nu: float,
    gaussian: Callable[..., np.ndarray],
    rng: np.random.Generator,
    entry_scale: float = 1.0,
) -> TensorDecomposition:
    """Alg. 3's loop (steps 3-11) with the contraction T(I,U,U) given as ``apply(U)`` (d×L → d×L).

    :func:`private_tensor_power_method` is this with ``apply = U ↦ T(I,U,U)``
    of an explicit, checked tensor; a caller that passes another ``apply``
    (e.g. a matrix-free Σλᵢ(vᵢᵀu)²vᵢ in a benchmark) gets the same releases,
    sensitivities and draws. No input checks here: the caller validates
    ``apply``'s tensor and k, L, R (the privacy guarantee needs a symmetric
    tensor under the tensor-entry neighbour relation, Thm 4.1).

    Args:
        apply: U ↦ T(I,U,U) for the (undeflated) tensor.
        d, k, L, R: dimension, components, restarts, power steps.
        nu: ν of the plan; ``gaussian`` is the charged chokepoint's.
        rng: random starts only (not privacy noise).
        entry_scale: c, the size of one neighbouring entry change.
    """
    c = float(entry_scale)
    lambdas = np.zeros(0)
    V_ = np.zeros((0, d))  # D = Σⱼ λ̂ⱼ v̂ⱼ^⊗3, kept implicit (Alg. 3 step 2: D = 0)
    for _i in range(k):  # step 3
        U = random_unit_columns(rng, d, L)  # step 4
        for _t in range(R):  # step 5
            noisy = release_power_step(apply(U), U, lambdas, V_, nu=nu, entry_scale=c, gaussian=gaussian)  # 6-7
            U = normalize_columns(noisy, U)  # step 8
        m3 = np.einsum("il,il->l", apply(U), U)  # T(u,u,u) per candidate
        lam = release_eigenvalues(m3, U, lambdas, V_, nu=nu, entry_scale=c, gaussian=gaussian)
        best = int(np.argmax(lam))  # step 10: τ* = argmax λ̃
        lambdas = np.append(lambdas, lam[best])  # step 11: deflation D ← D + λ̂ v̂^⊗3
        V_ = np.vstack([V_, U[:, best]])
    return TensorDecomposition(eigenvalues=lambdas, eigenvectors=V_)


def private_tensor_power_method(
    T: np.ndarray,
    k: int,
    *,
    L: int,
    R: int,
    nu: float,
    chokepoint: Chokepoint,
    rng: np.random.Generator,
    entry_scale: float = 1.0,
) -> TensorDecomposition:
    """Implements Algorithm 3 of Wang & Anandkumar (NIPS 2016): private robust tensor power method.

    Guarantee: (ε, δ)-DP under the tensor-entry neighbour relation
    T' − T = ±c·symmetrize(eᵢ⊗eⱼ⊗eₖ) when the chokepoint holds the K =
    kL(R+1) events of :func:`tensor_entry_plan` (Thm 4.1). Sensitivities:
    6c‖u‖∞² (power step) and 6c‖u‖∞³ (eigenvalue estimate).

    Args:
        T: symmetric tensor of shape (d, d, d).
        k, L, R: components, restarts, power steps.
        nu: ν of the plan (σ = ν·c·‖u‖∞² or ν·c·‖u‖∞³).
        chokepoint: charged with the plan's events; every draw goes through it.
        rng: random starts only (not privacy noise).
        entry_scale: c, the size of one neighbouring entry change.
    """
    owner = "private_power_method"
    T = check_tensor(T, owner=owner)
    d = T.shape[0]
    k, L, R = check_counts(k, L, R, d, owner=owner)
    return private_power_method_matrix_free(
        lambda U: contract(T, U)[0], d, k, L=L, R=R, nu=nu, gaussian=chokepoint.gaussian, rng=rng,
        entry_scale=entry_scale,
    )


# -- rows: the private online power method ----------------------------------------
def check_row_options(mode: str, neighbors: str, max_rows_per_unit: int) -> None:
    """Checks the options every private method over rows shares (a ConfigError naming the first bad one)."""
    if mode not in MODES:
        raise ConfigError(f"The 'mode' parameter must be one of {sorted(MODES)}. Got {mode!r} instead.")
    if neighbors not in ROW_NEIGHBORS:
        raise ConfigError(f"The 'neighbors' parameter must be one of {sorted(ROW_NEIGHBORS)}. Got {neighbors!r} instead.")
    if mode == "fresh" and max_rows_per_unit > 1:
        raise ConfigError(
            "The 'mode' parameter must be 'reuse' when a privacy unit may hold several rows "
            f"(max_rows_per_unit = {max_rows_per_unit}): 'fresh' assigns rows to passes one by one, so a unit "
            "could reach several passes. Got 'fresh' instead."
        )


def rows_plan(
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
    """Noise plan of :func:`private_online_power_method`.

    Per pass one batch of L columns is released (power step: d×L; eigenvalue
    estimate: L values) with L2 sensitivity Δ = f·m·√L·B³ (Frobenius bound;
    f = 1 add/remove, 2 replace). There are k(R+1) passes.

    * fresh: each row is in one pass (parallel composition): one event.
    * reuse: k(R+1) events, composed sequentially.

    Calibration ``exact`` calibrates the batch directly; ``paper`` counts the
    L candidates of a batch as separate releases (K = L per pass in fresh
    mode, K = kL(R+1) in reuse mode), as Alg. 3 does, with per-candidate
    sensitivity f·m·B³.
    """
    check_row_options(mode, neighbors, max_rows_per_unit)
    factor = 2.0 if neighbors == "replace" else 1.0
    col_sens = factor * max_rows_per_unit * norm_bound**3
    batch_sens = math.sqrt(L) * col_sens
    passes = k * (R + 1)
    batches = 1 if mode == "fresh" else passes
    if calibration == "exact":
        z, details = calibrate(epsilon, delta, batches, "exact")
        sigma = z * batch_sens
    else:
        per_candidate = L * batches
        z_cand, details = calibrate(epsilon, delta, per_candidate, calibration)
        sigma = z_cand * col_sens
        z = sigma / batch_sens
    details = {**details, "passes": passes, "column_sensitivity": col_sens}
    return PrivatePlan(
        events=[GaussianEvent(noise_multiplier=z)] * batches, noise_multiplier=z, releases=batches,
        composition="parallel" if mode == "fresh" else "sequential", calibration=calibration,
        sigma=sigma, sensitivity=batch_sens, details=details,
    )


class ParallelGaussianReleases:
    """Gaussian releases on disjoint parts of the data under ONE charged event.

    Parallel composition (McSherry 2009, Thm 4): when each privacy unit
    reaches at most one release, and the assignment of units to releases does
    not depend on the other units, the adaptive sequence of releases costs
    one release's privacy. The chokepoint hands out its sampler only for the
    charged event (``Chokepoint.randomness``); every draw here is checked to
    meet that event's noise multiplier.
    """

    def __init__(self, chokepoint: Chokepoint, event: GaussianEvent) -> None:
        self._sampler: NoiseSampler = chokepoint.randomness(event)
        self._z = event.noise_multiplier

    def gaussian(self, values: np.ndarray, *, sigma: float, l2_sensitivity: float) -> np.ndarray:
        if not (l2_sensitivity > 0) or sigma / l2_sensitivity < self._z * (1 - 1e-12):
            raise RuntimeError(f"bug: sigma/sensitivity {sigma / l2_sensitivity:.6g} below the charged {self._z:.6g}")
        values = np.asarray(values, dtype=np.float64)
        return self._sampler.gaussian(values.reshape(-1), sigma, l2_sensitivity).reshape(values.shape)


def noisy_batch(values: np.ndarray, plan: PrivatePlan, gaussian: Callable[..., np.ndarray]) -> np.ndarray:
    """One pass's release: the exact batch (d×L power sums or L eigenvalue sums) + N(0, σ²) per entry.

    L2 sensitivity ``plan.sensitivity`` = f·m·√L·B³ (Frobenius over the L
    columns); ``gaussian`` is the chokepoint's (or the parallel releases').
    """
    return gaussian(values, sigma=plan.sigma, l2_sensitivity=plan.sensitivity)


def private_online_power_method(
    moments: Callable,
    *,
    d: int,
    k: int,
    L: int,
    R: int,
    plan: PrivatePlan,
    chokepoint: Chokepoint,
    rng: np.random.Generator,
    rows_per_round: int | None = None,
) -> TensorDecomposition:
    """The private power method over rows: Alg. 2 with Alg. 3's noise and eigenvalue pass.

    Each of the R power passes releases the d×L batch Σ(xᵀu)²x + N(0, σ²)
    and a final pass per component releases the L sums Σ(xᵀu_R)³ + N(0, σ²)
    (Alg. 3 step 10); deflation (Alg. 2 step 7) and normalisation are
    post-processing on the driver. Sums are divided by the public
    ``rows_per_round`` if given (eigenvalues of the mean moment), otherwise
    the eigenvalues are those of the sum Σ x^⊗3 over a pass's rows.

    Args:
        moments: ``moments(U, pass_index) -> (S, m3, count)`` exact sums over
            the pass's clipped rows (count is never released).
        d, k, L, R: dimension, components, restarts, power steps.
        plan: from :func:`rows_plan`; its events are charged on ``chokepoint``.
        chokepoint: the release's charged chokepoint.
        rng: random starts only (not privacy noise).
        rows_per_round: public n to divide sums by, or None.
    """
    from spark_dp.tensor.online import online_tensor_power_method

    if plan.composition == "parallel":
        par = ParallelGaussianReleases(chokepoint, plan.events[0])
        draw = par.gaussian
    else:
        draw = chokepoint.gaussian

    def release(values: np.ndarray) -> np.ndarray:
        return noisy_batch(values, plan, draw)

    return online_tensor_power_method(
        moments, d=d, k=k, L=L, R=R, rng=rng, release=release, eigen_pass=True, rows_per_round=rows_per_round,
    )


# -- error bars of the released eigenvalues (post-processing, no privacy cost) --------------
def eigenvalue_uncertainty(eigenvalues: np.ndarray, sigmas: np.ndarray, *, restarts: int, level: float,
                           source: str) -> Uncertainty:
    """Intervals of Alg. 3's released eigenvalues from the σ each was actually released with.

    Each released λ̂ᵢ is the deflated tensor's value at the released vector,
    (T − Σⱼ<ᵢ λ̂ⱼv̂ⱼ^⊗3)(v̂ᵢ, v̂ᵢ, v̂ᵢ), plus N(0, σᵢ²) (Alg. 3 step 10) — the
    value of the *winning* candidate among L = ``restarts`` (step 10's
    argmax). Bonferroni over the L candidates: z at two-sided level 1 − (1 −
    level)/L covers every candidate's noise at once with probability ≥ level,
    hence the winner's; exact (``interval``) for L = 1, a ``bound`` above.
    The truth covered is that deflated value at the released vector (noise
    only: not the power method's convergence error).
    """
    from spark_dp.release.uncertainty import normal_quantile

    lam = np.asarray(eigenvalues, dtype=np.float64)
    sd = np.asarray(sigmas, dtype=np.float64)
    z = normal_quantile(1.0 - (1.0 - level) / restarts)
    return Uncertainty(lam - z * sd, lam + z * sd, sd, (
        f"eigenvalue +/- z*sigma_i with sigma_i {source}; z Bonferroni-adjusted over the {restarts} candidates "
        "of step 10's argmax (covers the deflated tensor's value at the released vector, noise only)"),
        kind="interval" if restarts == 1 else "bound")


#: Method text of the eigenvector (and whitened weight) bounds: the power method's vectors have no rigorous
#: error bound computable from the release (docs/accuracy.md, "Tensor").
NO_VECTOR_BOUND = (
    "trivial bound only: every entry of a unit vector lies in [-1, 1]. No rigorous bound on the released "
    "vectors' error is computable from the release: the power method's perturbation guarantees (Wang & "
    "Anandkumar 2016, Thm 3.1/4.1; Anandkumar et al. 2014, Thm 5.1) need the tensor's eigengap and incoherence, "
    "which are data, and constants the papers do not state sharply")


def trivial_unit_bound(vectors: np.ndarray, *, what: str = "") -> Uncertainty:
    """[-1, 1] for every entry of unit vectors, as a ``bound`` whose method says no rigorous one exists."""
    v = np.asarray(vectors, dtype=np.float64)
    return Uncertainty(-np.ones_like(v), np.ones_like(v), None, NO_VECTOR_BOUND + what, kind="bound")


def decomposition_uncertainty(eigenvalues: Uncertainty, dec) -> dict[str, Uncertainty]:
    """``eigenvalues`` as given and the eigenvectors' trivial bound (:data:`NO_VECTOR_BOUND`)."""
    return {"eigenvalues": eigenvalues, "eigenvectors": trivial_unit_bound(dec.eigenvectors)}


def tensor_entry_sigmas(eigenvectors: np.ndarray, *, nu: float, entry_scale: float) -> np.ndarray:
    """σᵢ = ν·c·‖v̂ᵢ‖∞³ of each released eigenvalue (Alg. 3 step 10 on an explicit tensor)."""
    return nu * entry_scale * np.max(np.abs(np.asarray(eigenvectors, dtype=np.float64)), axis=1) ** 3


# -- the registry entry (spark_dp.tensor.mechanisms.REGISTRY): Alg. 3 on explicit tensors and on rows ----------
# (whiten imports this module: its functions are imported where used)
def _explicit_privacy(plan: PrivatePlan, req: TensorRequest) -> dict:
    return {
        "sensitivity": "6c*||u||_inf^2 per power step, 6c*||u||_inf^3 per eigenvalue estimate "
                       "(Wang & Anandkumar 2016, proof of Thm 4.1)",
        "noise": "gaussian, sigma = nu*c*||u||_inf^p", "noise_family": "gaussian",
        "noise_scale": None, "nu": plan.nu, "entry_scale": req.entry_scale,
    }


def _rows_events(req: TensorRequest) -> PrivatePlan:
    from spark_dp.tensor.whiten import whitened_rows_plan

    return (whitened_rows_plan if req.whiten else rows_plan)(
        epsilon=req.epsilon, delta=req.delta, k=req.k, L=req.L, R=req.R, norm_bound=req.norm_bound, mode=req.mode,
        calibration=req.calibration, neighbors=req.neighbors, max_rows_per_unit=req.max_rows_per_unit)


def _rows_privacy(plan: PrivatePlan, req: TensorRequest) -> dict:
    if req.whiten:
        return {
            "sensitivity": {"second_moment": plan.sensitivity,
                            "power_passes": "f*m*sqrt(L)*B_y^3 per unit (f = 1 add/remove, 2 replace; m rows per "
                                            "unit), B_y = ||W||_op * B from the released M2"},
            "noise": "gaussian", "noise_family": "gaussian", "noise_scale": None, "second_moment_sigma": plan.sigma,
        }
    return {
        "sensitivity": plan.sensitivity, "sensitivity_norm":
            "Frobenius norm of one pass's batch of L columns: sqrt(L)*B^3 per row (x m rows per unit, x2 replace)",
        "noise": "gaussian", "noise_family": "gaussian", "noise_scale": plan.sigma, "noise_sigma": plan.sigma,
    }


def _rows_uncertainty(dec, req: TensorRequest, plan: PrivatePlan, level: float) -> dict[str, Uncertainty]:
    """Alg. 3 over rows: each eigenvalue ± z·σ of its pass (Bonferroni over L); with ``whiten`` σ is the
    whitened passes' (from the released M2: :func:`spark_dp.tensor.whiten.whitened_uncertainty`).
    """
    if req.whiten:
        from spark_dp.tensor.whiten import whitened_uncertainty

        return whitened_uncertainty(dec, req, level)
    return decomposition_uncertainty(eigenvalue_uncertainty(
        dec.eigenvalues, np.full(req.k, plan.sigma / (req.rows_per_round or 1)), restarts=req.L, level=level,
        source="= the eigenvalue pass's sigma" + (" / rows_per_round" if req.rows_per_round else "")
        + " (noise_scale in the manifest); the truth is the sum over that pass's rows"), dec)


def _run_rows_whitened(moments, m2_sum, n, req, plan, cp, rng):
    from spark_dp.tensor.whiten import private_whitened_power_method

    return private_whitened_power_method(
        moments, m2_sum, k=req.k, L=req.L, R=req.R, plan=plan, chokepoint=cp, rng=rng, norm_bound=req.norm_bound,
        mode=req.mode, neighbors=req.neighbors, max_rows_per_unit=req.max_rows_per_unit)


PRIVATE_POWER_METHOD = TensorMechanismSpec(
    "private_power_method",
    explicit=OnInput(
        plan=lambda req: tensor_entry_plan(epsilon=req.epsilon, delta=req.delta, k=req.k, L=req.L, R=req.R,
                                           calibration=req.calibration),
        run=lambda T, req, plan, cp, rng: private_tensor_power_method(
            T, req.k, L=req.L, R=req.R, nu=plan.nu, chokepoint=cp, rng=rng, entry_scale=req.entry_scale),
        privacy=_explicit_privacy,
        uncertainty=lambda dec, req, plan, level: decomposition_uncertainty(eigenvalue_uncertainty(
            dec.eigenvalues, tensor_entry_sigmas(dec.eigenvectors, nu=plan.nu, entry_scale=req.entry_scale),
            restarts=req.L, level=level,
            source="= nu*c*||v_i||_inf^3, the sigma it was released with (nu from the manifest)"), dec),
    ),
    rows=OnInput(
        plan=_rows_events,
        run=lambda moments, d, req, plan, cp, rng: private_online_power_method(
            moments, d=d, k=req.k, L=req.L, R=req.R, plan=plan, chokepoint=cp, rng=rng,
            rows_per_round=req.rows_per_round),
        run_whitened=_run_rows_whitened,
        privacy=_rows_privacy,
        uncertainty=_rows_uncertainty,
    ),
)
