"""Input perturbation: a private noisy tensor, then the (non-private) power method.

The baseline Wang & Anandkumar ("Online and Differentially-Private Tensor
Decomposition", NIPS 2016, Sec. 4, "Comparison with input perturbation")
argue against: add a symmetric Gaussian tensor E to T once, then run
Algorithm 1 on T + E as post-processing. Recovery needs ‖E‖op = O(1/√d),
i.e. ε = Ω̃(d) (their Lemma F.9), while Alg. 3 needs no polynomial
dependence on d.

Neighbours: the paper's Def. 4.2 (``tensor_entry``), T' − T =
±c·symmetrize(eᵢ⊗eⱼ⊗eₖ). The released vector is the unique entries
T[i,j,k], i ≤ j ≤ k, each divided by its multiplicity w (the number of
distinct orderings of (i,j,k) coinciding under symmetrisation: w = 1 for
distinct indices, 2 for one repeated index, 6 for i = j = k). A neighbouring
change moves exactly one of these scaled entries, by c: L2 sensitivity c.
Noise N(0, σ²) on the scaled entries is N(0, (wσ)²) on T's entries; the noisy
unique entries are mirrored to all orderings (one Gaussian release).
"""

from __future__ import annotations

import functools

import numpy as np

from spark_dp.errors import ConfigError
from spark_dp.privacy import Chokepoint, GaussianEvent
from spark_dp.privacy.calibration import paper_classic_gaussian_noise_multiplier
from spark_dp.tensor._registry import OnInput, TensorMechanismSpec
from spark_dp.tensor.power_method import TensorDecomposition, check_counts, check_tensor, power_method_checked
from spark_dp.tensor.private import PrivatePlan, calibrate


@functools.lru_cache(maxsize=8)
def unique_entries(d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Index arrays (i, j, k) of the entries with i ≤ j ≤ k, and their symmetrisation multiplicity w (read-only, cached).

    Lexicographic order (i, then j, then k). Built from the d(d+1)/2 pairs
    j ≤ k only — for each i the pairs with j ≥ i are a suffix of
    ``triu_indices`` — so the peak is the d³/6 output, not three d³ grids.
    """
    jj, kk = np.triu_indices(d)  # pairs j ≤ k, row-major: the pairs with j ≥ i start at offset[i]
    offset = np.concatenate(([0], np.cumsum(np.arange(d, 0, -1))))[:d]
    counts = jj.size - offset  # pairs with j ≥ i, for each i
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))  # where row i starts in the output
    n = int(counts.sum())  # d(d+1)(d+2)/6
    pair = np.arange(n, dtype=np.int64) - np.repeat(starts - offset, counts)
    i = np.repeat(np.arange(d), counts)
    j, k = jj[pair], kk[pair]
    del pair
    distinct = 1 + (i != j).astype(np.int8) + (j != k).astype(np.int8)  # 1, 2 or 3 distinct values
    w = np.select([distinct == 3, distinct == 2], [1.0, 2.0], 6.0)
    for a in (i, j, k, w):
        a.setflags(write=False)
    return i, j, k, w


def input_perturbation_plan(*, epsilon: float, delta: float, calibration: str = "exact", entry_scale: float = 1.0) -> PrivatePlan:
    """One Gaussian release of the scaled unique entries, L2 sensitivity c.

    ``exact``: z from the exact Gaussian profile. ``paper``: the classic
    Gaussian mechanism at (ε, δ) itself, as the paper's Sec. 4 discussion
    uses (σ = Ω(ε⁻¹√log(1/δ))); one release, so no composition (needs ε < 1).
    """
    if calibration == "paper":
        if not 0 < epsilon < 1:
            raise ConfigError(f"The 'epsilon' parameter ({epsilon:g}) must be below 1 under calibration='paper' "
                              "(the classic Gaussian mechanism is not valid above); use calibration='exact'.")
        z = paper_classic_gaussian_noise_multiplier(epsilon, delta)
        details = {"releases": 1, "formula": "sqrt(2 ln(1.25/delta))/epsilon (Dwork & Roth 2014, Thm A.1)"}
    else:
        z, details = calibrate(epsilon, delta, 1, calibration)
    return PrivatePlan(
        events=[GaussianEvent(noise_multiplier=z)], noise_multiplier=z, releases=1, composition="sequential",
        calibration=calibration, sigma=z * entry_scale, sensitivity=float(entry_scale), details=details,
    )


def noisy_symmetric_tensor(T: np.ndarray, *, sigma: float, sensitivity: float, chokepoint: Chokepoint) -> np.ndarray:
    """T + E with E symmetric, E[i,j,k] ~ N(0, (w σ)²) on unique entries (see module docstring)."""
    d = T.shape[0]
    i, j, k, w = unique_entries(d)
    noisy = chokepoint.gaussian(T[i, j, k] / w, sigma=sigma, l2_sensitivity=sensitivity) * w
    out = np.empty_like(T)
    for p in ((i, j, k), (i, k, j), (j, i, k), (j, k, i), (k, i, j), (k, j, i)):
        out[p] = noisy
    return out


def input_perturbation(
    T: np.ndarray,
    k: int,
    *,
    L: int,
    R: int,
    plan: PrivatePlan,
    chokepoint: Chokepoint,
    rng: np.random.Generator,
) -> TensorDecomposition:
    """Private decomposition by input perturbation (the paper's Sec. 4 baseline).

    Guarantee: (ε, δ)-DP under the tensor-entry neighbour relation, from one
    Gaussian release (``plan`` from :func:`input_perturbation_plan`); the
    power method on the noisy tensor is post-processing.

    Args:
        T: symmetric tensor of shape (d, d, d).
        k, L, R: components, restarts, power steps of Alg. 1.
        plan: σ and sensitivity c; its event is charged on ``chokepoint``.
        chokepoint: the release's charged chokepoint.
        rng: random starts only (not privacy noise).
    """
    owner = "input_perturbation"
    T = check_tensor(T, owner=owner)
    k, L, R = check_counts(k, L, R, T.shape[0], owner=owner)
    noisy = noisy_symmetric_tensor(T, sigma=plan.sigma, sensitivity=plan.sensitivity, chokepoint=chokepoint)
    return power_method_checked(noisy, k, L=L, R=R, rng=rng)  # noisy is finite and exactly symmetric by construction


def noise_operator_norm_bound(d: int, sigma: float, level: float) -> float:
    """r with ‖E‖op ≤ r with probability ≥ ``level`` for the noise tensor E of :func:`noisy_symmetric_tensor`.

    For a unit u, E(u, u, u) = Σ over unique (i ≤ j ≤ k) of (6/w)·E_ijk·u_iu_ju_k
    (6/w orderings of each) with (6/w)·E_ijk ~ N(0, (6σ)²): a centred normal
    with standard deviation ≤ 6σ (Σ_unique (u_iu_ju_k)² ≤ ‖u‖⁶ = 1). For a
    symmetric tensor ‖E‖op = sup over unit v of |E(v, v, v)| (Banach 1938),
    and E(v,v,v) − E(u,u,u) is a sum of three multilinear terms each at most
    ‖E‖op·‖v − u‖, so over a 1/6-net N of the sphere (|N| ≤ 13^d, Vershynin
    2018, Cor. 4.2.13) ‖E‖op ≤ 2·max_N |E(u,u,u)|. A union bound over N:
    ‖E‖op ≤ 12σ·√(2(d ln 13 + ln(2/α))) with probability ≥ 1 − α.
    """
    from spark_dp.release.uncertainty import check_level

    alpha = 1.0 - check_level(level)
    return 12.0 * sigma * float(np.sqrt(2.0 * (d * np.log(13.0) + np.log(2.0 / alpha))))


def input_perturbation_uncertainty(dec: TensorDecomposition, req, plan: PrivatePlan, level: float) -> dict:
    """Eigenvalues: a bound ‖E‖op (:func:`noise_operator_norm_bound`); eigenvectors: the trivial one.

    Alg. 1 on T + E releases λ̂ᵢ = (T + E − Σⱼ<ᵢ λ̂ⱼv̂ⱼ^⊗3)(v̂ᵢ, v̂ᵢ, v̂ᵢ), so
    against the truth (T − Σⱼ<ᵢ λ̂ⱼv̂ⱼ^⊗3)(v̂ᵢ, v̂ᵢ, v̂ᵢ) — the deflated tensor's
    value at the released vector, as for Alg. 3 — the error is E(v̂ᵢ, v̂ᵢ, v̂ᵢ),
    at most ‖E‖op for every i at once.
    """
    from spark_dp.release.uncertainty import bound
    from spark_dp.tensor.private import decomposition_uncertainty

    d = np.asarray(dec.eigenvectors).shape[1]
    r = noise_operator_norm_bound(d, plan.sigma, level)
    vals = bound(dec.eigenvalues, r, method=(
        "bound: |lambda_i - T_deflated(v_i, v_i, v_i)| = |E(v_i, v_i, v_i)| <= ||E||_op <= "
        f"12 sigma sqrt(2 (d ln 13 + ln(2/alpha))) = {r:.6g} (epsilon-net and union bound; noise only)"))
    return decomposition_uncertainty(vals, dec)


# -- the registry entry (spark_dp.tensor.mechanisms.REGISTRY): explicit tensors, tensor_entry neighbours --------
INPUT_PERTURBATION = TensorMechanismSpec("input_perturbation", explicit=OnInput(
    plan=lambda req: input_perturbation_plan(epsilon=req.epsilon, delta=req.delta, calibration=req.calibration,
                                             entry_scale=req.entry_scale),
    run=lambda T, req, plan, cp, rng: input_perturbation(T, req.k, L=req.L, R=req.R, plan=plan, chokepoint=cp,
                                                         rng=rng),
    privacy=lambda plan, req: {
        "sensitivity": req.entry_scale, "sensitivity_norm": "l2 of the unique entries divided by their multiplicity",
        "noise": "gaussian on the unique entries, sigma*w (w = 1, 2, 6)", "noise_family": "gaussian",
        "noise_scale": plan.sigma, "noise_sigma": plan.sigma,
        "entry_scale": req.entry_scale,
    },
    uncertainty=input_perturbation_uncertainty,
))
