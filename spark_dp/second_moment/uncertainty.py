"""Error bars of the second-moment family, from the released values and public parameters only.

Post-processing (no privacy cost): every function here reads the released
matrix and the plan's public fields (σ, k, r, m, w, B, the post-processing)
and never the exact data. ``level`` is the release's confidence level; the
"truth" an interval covers is the exact AᵀA of the clipped rows (the
summary the mechanism privatises).

Matrix entries (:func:`matrix_uncertainty`)
    * ``analyze_gauss``: released = AᵀA + N (+ c·I with ``shift``), N
      symmetric with i.i.d. N(0, σ²) upper triangle (mirror entries share
      their noise): exact interval (value − shift) ± z·σ.
    * ``wishart``: released = AᵀA + W (− k·B²·I with ``shift``), W ~
      W_d(B²I, k) independent of the data: W_ii = B²·χ²_k exactly (chi-square
      quantiles) and W_ij = B²·(X − Y)/2 with X, Y i.i.d. χ²_k (since
      g·h = ((g+h)² − (g−h)²)/4): quantiles of 2·10⁵ simulated draws with
      a fixed public seed. Exact up to the simulation's Monte-Carlo error.
    * ``jl_ridge``: released ~ W_d(Σ, r)/r, ``inverse_wishart``: released =
      (m−d−1)·W⁻¹_d(Σ, m), Σ = AᵀA + w²I (minus w²I with ``shift``). The
      noise depends on the data, so the intervals are derived: the entries'
      exact variances ((Σ_ij² + Σ_iiΣ_jj)/r, resp. ((m−d+1)Σ_ij² +
      (m−d−1)Σ_iiΣ_jj)/((m−d)(m−d−3))) with Σ estimated by the release
      (plug-in) and a normal approximation. Approximate: coverage measured
      in docs/accuracy.md.
    * ``postprocess="psd"``: the projection is not linear; for Analyze Gauss
      and Wishart a *bound* |entry − truth| ≤ ‖P(M) − AᵀA‖₂ ≤ 2‖M − AᵀA‖₂
      (M the release before the projection; the negative part of M is at
      most ‖M − AᵀA‖₂ because AᵀA is PSD); none for JL / inverse-Wishart.

Noise spectral norm (:func:`spectral_error`), used by PCA's bounds
    * Gaussian N (d×d symmetric, entries N(0, σ²)): E λ_max(N) ≤ 2σ√d by
      the Sudakov–Fernique comparison with 2σ⟨g, u⟩ (Davidson & Szarek
      2001, Thm 2.11, whose GOE argument applies since Var⟨N, uuᵀ − vvᵀ⟩ ≤
      2σ²‖uuᵀ − vvᵀ‖²_F ≤ 4σ²‖u − v‖²), and λ_max is √2σ-Lipschitz in the
      d(d+1)/2 standard normals, so by Gaussian concentration (e.g.
      Vershynin, *High-Dimensional Probability*, Thm 5.2.2 with its sharp
      constant, Boucheron–Lugosi–Massart Thm 5.6) ‖N‖₂ ≤ 2σ√d +
      2σ√(ln(2/α)) with probability ≥ 1 − α (α = 1 − level; both tails).
    * Wishart W = B²GᵀG, G k×d Gaussian: the singular values of G lie in
      [√k − √d − t, √k + √d + t] with probability ≥ 1 − 2e^{−t²/2}
      (Davidson & Szarek 2001, Thm 2.13), t = √(2 ln(2/α)).
    * JL and inverse-Wishart: multiplicative, S = L·M·Lᵀ with LLᵀ = Σ and M =
      ZᵀZ/r (resp. (m−d−1)(GᵀG)⁻¹); Ostrowski's theorem gives λ_i(S) =
      θ_i·λ_i(Σ) with θ_i in M's eigenvalue range, bounded as for Wishart.

PCA (:func:`pca_uncertainty`): eigenvalue bounds by Weyl (additive noise,
|λ_i(A + E) − λ_i(A)| ≤ ‖E‖₂) or Ostrowski (multiplicative), and for the
additive mechanisms a Davis–Kahan bound on each released eigenvector and on
the top-k subspace: sin θ ≤ ‖E‖₂ / δ (Davis & Kahan 1970, the sin θ
theorem; Stewart & Sun 1990, Thm V.3.6) with δ the separation between the
released eigenvalue(s) and the rest of the *true* spectrum, bounded from
the released spectrum by Weyl: δ ≥ gap_released − ‖E‖₂ (sin θ = 1 when
that is ≤ 0). A multiple of I added to E moves no eigenvector, so for
Wishart E is W − c·I centred on its eigenvalue range. Eigenvector entries
get the bound |v̂_j − s·v_j| ≤ √2·sin θ (s = ±1, the sign of a unit
eigenvector is arbitrary).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from spark_dp.release.uncertainty import (
    Uncertainty,
    bound,
    check_level,
    gaussian_interval,
    normal_quantile,
    symmetric_interval,
)

SIMULATIONS = 200_000
_SEED = 20140531  # public: the Wishart off-diagonal quantiles are a deterministic function of (k, level)


def _t(level: float) -> float:
    return math.sqrt(2.0 * math.log(2.0 / (1.0 - check_level(level))))


def _shift(privacy: Mapping[str, Any], params: Mapping[str, Any], d: int, norm_bound: float) -> float:
    """What the mechanism's ``shift`` post-processing added to the release (a multiple of I)."""
    if params.get("postprocess") != "shift":
        return 0.0
    mech = privacy.get("_mechanism")
    if mech == "analyze_gauss":
        return 2.0 * float(privacy["noise_scale"]) * math.sqrt(d)
    if mech == "wishart":
        return -float(privacy["dof"]) * norm_bound**2
    return -float(privacy["ridge_w2"])


@functools.lru_cache(maxsize=64)
def _wishart_offdiag_quantiles(k: int, level: float) -> tuple[float, float]:
    """Quantiles of Σ_t g_t h_t over k terms (= (X − Y)/2, X, Y i.i.d. χ²_k), by simulation with a fixed seed."""
    rng = np.random.default_rng(_SEED)
    x = (rng.chisquare(k, SIMULATIONS) - rng.chisquare(k, SIMULATIONS)) / 2.0
    a = (1.0 - level) / 2.0
    lo, hi = np.quantile(x, [a, 1.0 - a])
    return float(lo), float(hi)


def spectral_error(mechanism: str, privacy: Mapping[str, Any], params: Mapping[str, Any], d: int,
                   norm_bound: float, level: float) -> tuple[float, float] | None:
    """For additive noise: (c, r) with ‖released − AᵀA − c·I‖₂ ≤ r with probability ≥ level (module doc).

    ``released`` is the matrix before any ``psd`` projection (after ``shift``).
    None for the multiplicative mechanisms (JL, inverse-Wishart).
    """
    t = _t(level)
    shift = _shift({**privacy, "_mechanism": mechanism}, params, d, norm_bound)
    if mechanism == "analyze_gauss":
        sigma = float(privacy["noise_scale"])
        return shift, 2.0 * sigma * math.sqrt(d) + 2.0 * sigma * math.sqrt(math.log(2.0 / (1.0 - level)))
    if mechanism == "wishart":
        k, b2 = int(privacy["dof"]), norm_bound**2
        hi = b2 * (math.sqrt(k) + math.sqrt(d) + t) ** 2
        lo = b2 * max(math.sqrt(k) - math.sqrt(d) - t, 0.0) ** 2
        return shift + (hi + lo) / 2.0, (hi - lo) / 2.0
    return None


def _multiplicative_range(mechanism: str, privacy: Mapping[str, Any], d: int, level: float) -> tuple[float, float]:
    """[θ_lo, θ_hi] holding every eigenvalue of M (S = L M Lᵀ) with probability ≥ level (module doc)."""
    t = _t(level)
    if mechanism == "jl_ridge":
        r = int(privacy["projection_rows"])
        return max(1.0 - math.sqrt(d / r) - t / math.sqrt(r), 0.0) ** 2, (1.0 + math.sqrt(d / r) + t / math.sqrt(r)) ** 2
    m = int(privacy["dof"])
    s_hi, s_lo = (math.sqrt(m) + math.sqrt(d) + t) ** 2, max(math.sqrt(m) - math.sqrt(d) - t, 0.0) ** 2
    return (m - d - 1) / s_hi, ((m - d - 1) / s_lo if s_lo > 0 else math.inf)


def matrix_uncertainty(mechanism: str, privacy: Mapping[str, Any], params: Mapping[str, Any], matrix: np.ndarray,
                       norm_bound: float, level: float) -> Uncertainty | None:
    """The entries' uncertainty of a released second-moment matrix (module doc); None where there is none."""
    matrix = np.asarray(matrix, dtype=np.float64)
    d = matrix.shape[0]
    post = params.get("postprocess", "none")
    if post == "psd":
        err = spectral_error(mechanism, privacy, params, d, norm_bound, level)
        if err is None:
            return None
        c, r = err
        return bound(matrix, 2.0 * (abs(c) + r), method=(
            "bound: |entry - truth| <= ||P(M) - A^T A||_2 <= 2 ||M - A^T A||_2 for the PSD projection P, with a "
            f"high-probability bound on the {mechanism} noise's spectral norm (Davidson & Szarek 2001)"))
    shift = _shift({**privacy, "_mechanism": mechanism}, params, d, norm_bound)
    centre = matrix - shift * np.eye(d)
    if mechanism == "analyze_gauss":
        sigma = float(privacy["noise_scale"])
        u = gaussian_interval(centre, sigma, level, method=(
            "exact: (value - shift) +/- z*sigma, the Gaussian noise of Analyze Gauss (sigma from the manifest; "
            "mirror entries share their noise)"))
        return Uncertainty(u.low, u.high, u.stderr, u.method)
    if mechanism == "wishart":
        k, b2 = int(privacy["dof"]), norm_bound**2
        from scipy import stats

        a = (1.0 - level) / 2.0
        off_lo, off_hi = _wishart_offdiag_quantiles(k, level)
        q_lo = np.full((d, d), b2 * off_lo)
        q_hi = np.full((d, d), b2 * off_hi)
        np.fill_diagonal(q_lo, b2 * stats.chi2.ppf(a, k))
        np.fill_diagonal(q_hi, b2 * stats.chi2.ppf(1.0 - a, k))
        se = np.full((d, d), b2 * math.sqrt(k))
        np.fill_diagonal(se, b2 * math.sqrt(2.0 * k))
        # error = released - shift - truth = W (of known distribution): truth in [centre - q_hi, centre - q_lo]
        return Uncertainty(centre - q_hi, centre - q_lo, se, (
            "exact distribution of the additive Wishart noise: diagonal B^2 chi2_k quantiles, off-diagonal "
            f"B^2 (X - Y)/2 with X, Y iid chi2_k, quantiles simulated ({SIMULATIONS} draws, fixed seed)"))
    # multiplicative mechanisms: plug-in variance, normal approximation
    w2 = float(privacy["ridge_w2"])
    sigma_hat = centre  # the release as drawn: an unbiased estimate of Σ = AᵀA + w²I
    centre = sigma_hat - w2 * np.eye(d)
    diag = np.diag(sigma_hat)
    if mechanism == "jl_ridge":
        r = int(privacy["projection_rows"])
        var = (sigma_hat**2 + np.outer(diag, diag)) / r
        how = f"W_d(Sigma, r)/r with r = {r}: Var = (S_ij^2 + S_ii S_jj)/r"
    else:
        m = int(privacy["dof"])
        if m - d - 3 <= 0:
            return None
        var = ((m - d + 1) * sigma_hat**2 + (m - d - 1) * np.outer(diag, diag)) / ((m - d) * (m - d - 3))
        how = f"(m - d - 1) W^-1_d(Sigma, m) with m = {m}: Var = ((m-d+1) S_ij^2 + (m-d-1) S_ii S_jj)/((m-d)(m-d-3))"
    se = np.sqrt(np.maximum(var, 0.0))
    return symmetric_interval(centre, normal_quantile(level) * se, se, method=(
        f"derived (approximate): exact entry variances of {how}, Sigma estimated by the release (plug-in), "
        "normal approximation"))


def pca_uncertainty(mechanism: str, privacy: Mapping[str, Any], params: Mapping[str, Any], matrix: np.ndarray,
                    eigenvalues: np.ndarray, eigenvectors: np.ndarray, norm_bound: float,
                    level: float) -> tuple[dict[str, Uncertainty], dict[str, Any]]:
    """Bounds on the released eigenvalues and eigenvectors, and the subspace angle bound (module doc).

    Returns (uncertainty by array name, manifest ``accuracy`` fields).
    """
    matrix = np.asarray(matrix, dtype=np.float64)
    d, k = matrix.shape[0], len(eigenvalues)
    out: dict[str, Uncertainty] = {}
    err = spectral_error(mechanism, privacy, params, d, norm_bound, level)
    if err is None:  # multiplicative: Ostrowski on the eigenvalues only
        lo_t, hi_t = _multiplicative_range(mechanism, privacy, d, level)
        post = params.get("postprocess", "none")
        w2 = float(privacy["ridge_w2"])
        raw = eigenvalues + (w2 if post in ("shift", "psd") else 0.0)  # eigenvalues of the release as drawn
        # (a clipped eigenvalue of "psd" had raw <= w², so raw = w² bounds it above; below, truth >= 0 holds)
        low = np.maximum(raw / hi_t - w2, 0.0)
        high = (raw / lo_t if lo_t > 0 else np.full(k, np.inf)) - w2
        out["eigenvalues"] = Uncertainty(low, high, None, (
            "bound: Ostrowski's theorem with a high-probability range of the multiplicative noise's eigenvalues "
            "(Davidson & Szarek 2001), minus the ridge w^2"), kind="bound")
        return out, {"eigenvalue_bound": "Ostrowski", "eigenvector_bound": None}
    c, r = err
    # Eigenvalues: Weyl on E − c·I; the PSD projection clips eigenvalues at 0, which moves none further
    # from a true (non-negative) one.
    out["eigenvalues"] = Uncertainty(np.maximum(eigenvalues - c - r, 0.0), eigenvalues - c + r, None, (
        "bound: Weyl's inequality |lambda_i(A + E) - lambda_i(A)| <= ||E||_2 with a high-probability bound on "
        f"the {mechanism} noise's spectral norm ({r:.6g}; Davidson & Szarek 2001, Gaussian concentration)"),
        kind="bound")
    if params.get("postprocess") == "psd":
        r = 2.0 * (abs(c) + r)  # ||P(M) - A|| <= 2 ||M - A|| (module doc); no multiple of I to remove after P
    spectrum = np.sort(np.linalg.eigvalsh(matrix))[::-1]
    sines = np.empty(k)
    for i in range(k):
        gaps = [spectrum[i - 1] - spectrum[i]] if i > 0 else []
        gaps += [spectrum[i] - spectrum[i + 1]] if i + 1 < d else []
        gap = min(gaps) - r if gaps else math.inf
        sines[i] = 1.0 if gap <= 0 else min(1.0, r / gap)
    out["eigenvectors"] = bound(eigenvectors, (math.sqrt(2.0) * sines)[:, None] * np.ones_like(eigenvectors),
                                method=("bound up to each vector's sign: |v_hat_j - s v_j| <= sqrt(2) sin(theta), "
                                        "Davis-Kahan sin(theta) <= ||E||_2 / (released eigengap - ||E||_2)"))
    sub_gap = (spectrum[k - 1] - spectrum[k] - r) if k < d else math.inf
    sin_sub = 1.0 if sub_gap <= 0 else min(1.0, r / sub_gap)
    return out, {
        "noise_spectral_norm_bound": r,
        "subspace_sin_theta_bound": sin_sub,
        "subspace_angle_bound_radians": math.asin(sin_sub),
        "subspace_bound": ("Davis-Kahan sin(theta) theorem: the largest principal angle between the released and "
                           "the true top-k eigenspace of A^T A, holding with probability >= the level"),
    }


def adassp_uncertainty(result: Mapping[str, np.ndarray], sigmas, level: float) -> dict[str, Uncertainty]:
    """AdaSSP's released statistics: X^T X + N (symmetric, σ₂) and X^T y + N (σ₃), exact Gaussian intervals.

    ``lambda`` is the algorithm's adaptive ridge (a choice, not an estimate
    of a data value) and has none; the coefficients are left to the
    regression's own interval method.
    """
    _, s2, s3 = (float(s) for s in sigmas)
    return {
        "xtx": gaussian_interval(result["xtx"], s2, level, method=(
            "exact: value +/- z*sigma_2, AdaSSP's Gaussian noise on X^T X (mirror entries share their noise)")),
        "xty": gaussian_interval(result["xty"], s3, level, method=(
            "exact: value +/- z*sigma_3, AdaSSP's Gaussian noise on X^T y")),
    }
