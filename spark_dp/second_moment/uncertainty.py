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
    * What an interval covers: AᵀA + o·I, the quantity the released value
      estimates (:func:`matrix_offset`: Analyze Gauss's ``shift`` c, the
      Wishart mean k·B² and the JL / inverse-Wishart ridge w² where
      ``shift`` did not remove them); o = 0 (AᵀA itself) in the other
      cases. So a released entry never lies outside its own interval; the
      manifest's ``target`` states o when it is not 0.
    * ``jl_ridge``: released ~ W_d(Σ, r)/r, ``inverse_wishart``: released =
      (m−d−1)·W⁻¹_d(Σ, m), Σ = AᵀA + w²I (minus w²I with ``shift``). The
      noise depends on the data, so the intervals come from pivots of the
      release's own law (:func:`multiplicative_entry_interval`): diagonal
      entries exactly (r·S_ii/Σ_ii ~ χ²_r, resp. (m−d−1)Σ_ii/S_ii ~
      χ²_{m−d+1}), off-diagonal ones by the studentized pivot (S_ij −
      Σ_ij)/√(S_ij² + S_iiS_jj), whose law depends on the correlation only,
      simulated under the 2×2 block's law (a parametric bootstrap-t); the
      public ridge w² is subtracted exactly. Coverage measured in
      docs/accuracy.md.
    * ``postprocess="psd"``: the projection is not linear; a *bound*
      |entry − truth| ≤ ‖P(M) − AᵀA‖₂ ≤ 2‖M − AᵀA‖₂ (M the release before the
      projection, after the Sheffet mechanisms' shift; the negative part of M
      is at most ‖M − AᵀA‖₂ because AᵀA is PSD), with the spectral bounds
      below (multiplicative ones for JL / inverse-Wishart).
    * In the data's units (``transform`` T, :mod:`._scaling`): the release
      T·M·Tᵀ against T·AᵀA·Tᵀ; every law maps with the congruence (Gaussian
      T·N·Tᵀ with the exact entry sd of :func:`gaussian_sd`, Wishart
      W(B²TTᵀ, k) with correlated entries, JL / inverse-Wishart with scale
      TΣTᵀ, the shift c·TTᵀ, the PSD bound times ‖tᵢ‖‖tⱼ‖).

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
eigenvector is arbitrary). For JL and inverse-Wishart ‖E‖₂ is bounded
multiplicatively (:func:`_noise_norm`: ‖S − Σ‖₂ ≤ λ_max(Σ)·‖M − I‖₂ with
λ_max(Σ) ≤ λ_max(S)/θ_lo on the same event); in the data's units the
error T′·E·T′ᵀ has norm ≤ ‖T′‖₂²·‖E‖₂.
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
)

SIMULATIONS = 200_000
_SEED = 20140531  # public: the Wishart off-diagonal quantiles are a deterministic function of (k, level)


def _t(level: float) -> float:
    return math.sqrt(2.0 * math.log(2.0 / (1.0 - check_level(level))))


def _shift(privacy: Mapping[str, Any], params: Mapping[str, Any], d: int, norm_bound: float) -> float:
    """What the mechanism's ``shift`` post-processing added to the release (a multiple of I).

    The Sheffet mechanisms project ``psd`` after their shift (``_postprocess.py``), Analyze Gauss on the
    release as drawn.
    """
    post, mech = params.get("postprocess"), privacy.get("_mechanism")
    if post != "shift" and not (post == "psd" and mech != "analyze_gauss"):
        return 0.0
    if mech == "analyze_gauss":
        return 2.0 * float(privacy["noise_scale"]) * math.sqrt(d)
    if mech == "wishart":
        return -float(privacy["dof"]) * norm_bound**2
    return -float(privacy["ridge_w2"])


def matrix_offset(mechanism: str, privacy: Mapping[str, Any], params: Mapping[str, Any], d: int,
                  norm_bound: float) -> float:
    """The multiple o of I that the released matrix keeps on top of AᵀA in expectation (public, data-free).

    Analyze Gauss with ``shift``: its c = 2σ√d (Sheffet's ridge); Wishart
    without ``shift``: the noise's mean k·B²; JL and inverse-Wishart
    without ``shift``: the ridge w². 0 where the post-processing removed it
    (or there is none). The matrix intervals cover AᵀA + o·I (in the data's
    units T·(AᵀA + o·I)·Tᵀ), the quantity the released value estimates, so
    a released entry always lies inside its own interval; subtract o·TTᵀ
    for AᵀA itself. Not used after a ``psd`` projection (a bound around the
    released value).
    """
    if params.get("postprocess", "none") == "psd":
        return 0.0
    shift = _shift({**privacy, "_mechanism": mechanism}, params, d, norm_bound)
    if mechanism == "analyze_gauss":
        return shift
    if mechanism == "wishart":
        return float(privacy["dof"]) * norm_bound**2 + shift
    return float(privacy["ridge_w2"]) + shift


def _target(offset: float, transform: np.ndarray | None) -> str | None:
    """The manifest's ``target`` of a matrix interval with offset o (None when it is AᵀA itself)."""
    if not offset:
        return None
    where = "I" if transform is None else "T T^T (T the public map to the data's units)"
    return (f"A^T A + {offset:.6g} {where}: the released matrix keeps this multiple of the identity in "
            "expectation (a ridge), so the interval covers what the value estimates; subtract it for A^T A")


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


def gaussian_sd(transform: np.ndarray, sigma) -> np.ndarray:
    """Entry sd of T·N·Tᵀ for symmetric N with independent upper-triangle entries N_kl ~ N(0, S_kl²).

    ``sigma`` is a scalar or a symmetric (m, m) array S. (T N Tᵀ)_ij =
    Σ_{k≤l} N_kl c_kl with c_kl = T_ik T_jl + T_il T_jk (k < l), T_ik T_jk
    (k = l), so Var_ij = Σ_kl S²_kl (a_kl² + a_kl a_lk) − Σ_k S²_kk a_kk²
    with a_kl = T_ik T_jl: the exact noise sd of a Gaussian release mapped
    back to the data's units (Analyze Gauss, AdaSSP's X^T X and X^T y).
    """
    t = np.asarray(transform, dtype=np.float64)
    s2 = np.broadcast_to(np.asarray(sigma, dtype=np.float64) ** 2, (t.shape[1], t.shape[1]))
    sq = t * t
    u = np.einsum("ik,jk->ijk", t, t)
    var = sq @ s2 @ sq.T + np.einsum("ijk,kl,ijl->ij", u, s2, u) - (sq * np.diag(s2)) @ sq.T
    return np.sqrt(np.maximum(var, 0.0))


@functools.lru_cache(maxsize=16)
def _chi2_pair(k: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(_SEED)
    return rng.chisquare(k, SIMULATIONS), rng.chisquare(k, SIMULATIONS)


def _wishart_entry_quantiles(scale: np.ndarray, k: int, level: float) -> tuple[np.ndarray, np.ndarray]:
    """Entrywise quantiles of W ~ W_d(Σ, k) (Σ = ``scale``): W_ij = √(Σ_iiΣ_jj)·((1+ρ)/2·X − (1−ρ)/2·Y).

    (For a pair (u, v) of unit normals with correlation ρ, uv = (1+ρ)/2·a² −
    (1−ρ)/2·b² with a, b independent unit normals; summing k rows gives
    X, Y i.i.d. χ²_k.) Diagonal entries (ρ = 1) from the χ² quantiles, the
    others simulated with common draws and a fixed public seed.
    """
    from scipy import stats

    a = (1.0 - level) / 2.0
    diag = np.sqrt(np.maximum(np.diag(scale), 0.0))
    norm = np.outer(diag, diag)
    rho = np.divide(scale, norm, out=np.zeros_like(scale), where=norm > 0)
    lo, hi = np.empty_like(scale), np.empty_like(scale)
    d = scale.shape[0]
    for i in range(d):
        for j in range(i, d):
            r = float(np.clip(round(rho[i, j], 12), -1.0, 1.0))
            if abs(r) == 1.0:
                q = stats.chi2.ppf([a, 1.0 - a], k)
                ql, qh = (float(q[0]), float(q[1])) if r > 0 else (-float(q[1]), -float(q[0]))
            else:
                ql, qh = _correlated_product_quantiles(k, level, r)
            lo[i, j] = lo[j, i] = norm[i, j] * ql
            hi[i, j] = hi[j, i] = norm[i, j] * qh
    return lo, hi


@functools.lru_cache(maxsize=4096)
def _correlated_product_quantiles(k: int, level: float, rho: float) -> tuple[float, float]:
    """Quantiles of (1+ρ)/2·X − (1−ρ)/2·Y, X, Y i.i.d. χ²_k (simulated, fixed seed; ρ = 0 is (X − Y)/2)."""
    if rho == 0.0:
        return _wishart_offdiag_quantiles(k, level)
    x, y = _chi2_pair(k)
    a = (1.0 - level) / 2.0
    ql, qh = np.quantile((1.0 + rho) / 2.0 * x - (1.0 - rho) / 2.0 * y, [a, 1.0 - a])
    return float(ql), float(qh)


PIVOT_SIMULATIONS = 100_000
RHO_LEVEL = 0.99  # the range of correlations over which the off-diagonal pivot's quantiles are taken (widest)
_RHO_STEP = 0.02  # the off-diagonal pivot's quantiles are tabulated on this grid of correlations, then interpolated


@functools.lru_cache(maxsize=16)
def _bartlett_2x2(dof: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bartlett factors of W_2(I, dof): B = [[c1, 0], [g, c2]], c1² ~ χ²_dof, c2² ~ χ²_{dof−1}, g ~ N(0, 1) (fixed seed)."""
    rng = np.random.default_rng(_SEED + 1)
    c1 = np.sqrt(rng.chisquare(dof, PIVOT_SIMULATIONS))
    c2 = np.sqrt(rng.chisquare(dof - 1, PIVOT_SIMULATIONS))
    return c1, c2, rng.standard_normal(PIVOT_SIMULATIONS)


def _block_draws(mechanism: str, dof: int, d: int, rho: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Draws (X11, X12, X22) of a 2×2 principal block of the release when Σ's block is [[1, ρ], [ρ, 1]].

    JL: the block of W_d(Σ, r)/r is W_2(Σ₂, r)/r. Inverse-Wishart: the block
    of W⁻¹_d(Σ, m) is W⁻¹_2(Σ₂, m − d + 2) (a principal block of an inverse
    Wishart), so the release's block is (m − d − 1)·L(BBᵀ)⁻¹Lᵀ with LLᵀ = Σ₂
    and B the Bartlett factor of W_2(I, m − d + 2).
    """
    s = math.sqrt(max(1.0 - rho * rho, 0.0))
    if mechanism == "jl_ridge":
        c1, c2, g = _bartlett_2x2(dof)
        u = rho * c1 + s * g  # L·B = [[c1, 0], [u, s c2]]
        return c1 * c1 / dof, c1 * u / dof, (u * u + s * s * c2 * c2) / dof
    c1, c2, g = _bartlett_2x2(dof - d + 2)
    scale = (dof - d - 1) / (c1 * c1 * c2 * c2)  # (BBᵀ)⁻¹ = [[g² + c2², −c1 g], [−c1 g, c1²]] / (c1² c2²)
    a, b, e = (g * g + c2 * c2) * scale, -c1 * g * scale, c1 * c1 * scale
    return a, rho * a + s * b, rho * rho * a + 2.0 * rho * s * b + s * s * e


@functools.lru_cache(maxsize=4096)
def _offdiag_pivot_quantiles(mechanism: str, dof: int, d: int, level: float, step: int) -> tuple[float, float]:
    """Quantiles of T = (X12 − ρ)/√(X12² + X11·X22) at ρ = step·_RHO_STEP (simulated, fixed public seed)."""
    rho = float(np.clip(step * _RHO_STEP, -1.0, 1.0))
    x11, x12, x22 = _block_draws(mechanism, dof, d, rho)
    t = (x12 - rho) / np.sqrt(x12 * x12 + x11 * x22)
    a = (1.0 - level) / 2.0
    lo, hi = np.quantile(t, [a, 1.0 - a])
    return float(lo), float(hi)


def _interpolated(mechanism: str, dof: int, d: int, level: float, rho: float) -> tuple[float, float]:
    x = rho / _RHO_STEP
    k0 = math.floor(x)
    f = x - k0
    lo0, hi0 = _offdiag_pivot_quantiles(mechanism, dof, d, level, k0)
    if f == 0.0:
        return lo0, hi0
    lo1, hi1 = _offdiag_pivot_quantiles(mechanism, dof, d, level, k0 + 1)
    return (1.0 - f) * lo0 + f * lo1, (1.0 - f) * hi0 + f * hi1


def _pivot_envelope(mechanism: str, dof: int, d: int, level: float, rho: float, spread: float) -> tuple[float, float]:
    """The widest pivot quantiles over the correlations within ``spread`` of the released one in Fisher's z.

    The lowest lower and highest upper quantile at the released ρ, the ends
    of tanh(atanh ρ ± spread) and the grid points between them.
    """
    z = math.atanh(float(np.clip(rho, -0.999999, 0.999999)))
    a, b = math.tanh(z - spread), math.tanh(z + spread)
    points = [rho, a, b] + [k * _RHO_STEP for k in range(math.ceil(a / _RHO_STEP), math.floor(b / _RHO_STEP) + 1)]
    qs = [_interpolated(mechanism, dof, d, level, p) for p in points]
    return min(q[0] for q in qs), max(q[1] for q in qs)


def multiplicative_entry_interval(mechanism: str, released: np.ndarray, dof: int, level: float
                                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    """Per-entry intervals of Σ from a JL or inverse-Wishart release S of Σ, by pivots of the release's own law.

    ``released`` is S with the ridge kept (the mechanism's draw, in the
    noise's or — by congruence, which maps both laws to themselves — the
    data's units), ``dof`` the public r (JL) or m (inverse-Wishart).
    Returns (low, high, stderr, method) for Σ (= AᵀA + w²I mapped; the
    caller subtracts the public ridge exactly).

    * Diagonal, exact: JL r·S_ii/Σ_ii ~ χ²_r, so Σ_ii ∈ [r·S_ii/χ²_{r,1−α/2},
      r·S_ii/χ²_{r,α/2}]; inverse-Wishart S_ii = (m−d−1)·Σ_ii/χ²_{m−d+1}
      (the 1×1 block of W⁻¹_d(Σ, m) is W⁻¹_1(Σ_ii, m − d + 1)), so Σ_ii ∈
      [S_ii·χ²_{α/2}/(m−d−1), S_ii·χ²_{1−α/2}/(m−d−1)].
    * Off-diagonal: the studentized pivot T = (S_ij − Σ_ij)/√(S_ij² +
      S_iiS_jj) is scale-free, so its law depends only on the correlation
      ρ = Σ_ij/√(Σ_iiΣ_jj) (and r, or m and d): the law of the 2×2 block
      (W_2(Σ₂, r)/r, resp. (m−d−1)·W⁻¹_2(Σ₂, m−d+2)). Its quantiles are
      simulated under that law (Bartlett factors, fixed public seed,
      :data:`PIVOT_SIMULATIONS` draws, tabulated on a grid of ρ and
      interpolated) at the released correlation (a parametric bootstrap-t),
      and inverted: Σ_ij ∈ [S_ij − q_hi·v, S_ij − q_lo·v], v = √(S_ij² + S_iiS_jj).
      Unlike a normal approximation it follows the skew of the entries' law.
      Where few degrees of freedom leave the released correlation uncertain,
      the quantiles are the widest over the correlations within Fisher's
      z ± z_{0.995}/√(ν − 3) of it (ν = r, or m − d + 2; :func:`_pivot_envelope`),
      which matters only for small ν (at m = d + 7 the plug-in alone covered
      83 % of the off-diagonal entries, the envelope 97–99 %).
    * stderr: the interval's half-width ÷ z. At r (or m − d) in the
      hundreds it agrees with the entries' exact sd at Σ = S (JL √((S_ij² +
      S_iiS_jj)/r), inverse-Wishart √(((m−d+1)S_ij² + (m−d−1)S_iiS_jj)/((m−d)(m−d−3))))
      to a few per cent; at few degrees of freedom the law is skewed (and
      the inverse-Wishart variance infinite for m < d + 4).
    """
    from scipy import stats

    s = np.asarray(released, dtype=np.float64)
    s = 0.5 * (s + s.T)
    d = s.shape[0]
    level = check_level(level)
    a = (1.0 - level) / 2.0
    dg = np.maximum(np.diag(s), 0.0)
    low, high = np.empty_like(s), np.empty_like(s)
    if mechanism == "jl_ridge":
        q_lo, q_hi = stats.chi2.ppf([a, 1.0 - a], dof)
        diag_lo, diag_hi = dof * dg / q_hi, dof * dg / q_lo
        law = f"W_d(Sigma, r)/r with r = {dof}: r S_ii/Sigma_ii ~ chi2_r"
    else:
        c = dof - d - 1
        q_lo, q_hi = stats.chi2.ppf([a, 1.0 - a], dof - d + 1)
        diag_lo, diag_hi = dg * q_lo / c, dg * q_hi / c
        law = (f"(m - d - 1) W^-1_d(Sigma, m) with m = {dof}, d = {d}: (m-d-1) Sigma_ii/S_ii ~ chi2_(m-d+1), "
               "2x2 blocks (m-d-1) W^-1_2(Sigma_2, m-d+2)")
    # the correlation's own uncertainty: Fisher's z ± z_0.995/sqrt(dof_2x2 - 3) (dof_2x2: r, or m - d + 2)
    spread = normal_quantile(RHO_LEVEL) / math.sqrt(max((dof if mechanism == "jl_ridge" else dof - d + 2) - 3, 1))
    norm = np.sqrt(np.outer(dg, dg))
    v = np.sqrt(s * s + np.outer(dg, dg))
    rho = np.clip(np.divide(s, norm, out=np.zeros_like(s), where=norm > 0), -1.0, 1.0)
    for i in range(d):
        low[i, i], high[i, i] = diag_lo[i], diag_hi[i]
        for j in range(i + 1, d):
            t_lo, t_hi = _pivot_envelope(mechanism, dof, d, level, float(rho[i, j]), spread)
            low[i, j] = low[j, i] = s[i, j] - t_hi * v[i, j]
            high[i, j] = high[j, i] = s[i, j] - t_lo * v[i, j]
    # stderr: the interval's half-width over z (skewed laws at few degrees of freedom make the plug-in sd no
    # summary of the interval; at r or m - d in the hundreds the two agree to a few per cent)
    se = (high - low) / (2.0 * normal_quantile(level))
    method = (f"pivots of the release's own law {law}: diagonal exact (chi-square quantiles); off-diagonal the "
              "studentized pivot (S_ij - Sigma_ij)/sqrt(S_ij^2 + S_ii S_jj), whose law depends only on the "
              f"correlation, simulated under that law ({PIVOT_SIMULATIONS} draws, fixed seed; a parametric "
              "bootstrap-t), its widest quantiles over the correlations within Fisher's z +/- z_0.995/sqrt(dof - 3) "
              "of the released one; the public ridge w^2 subtracted exactly; stderr: half-width / z")
    return low, high, se, method


def drop_index(u: Uncertainty, k: int) -> Uncertainty:
    """The uncertainty of a square matrix without row and column ``k`` (the constant column)."""
    def cut(a):
        return None if a is None else np.delete(np.delete(a, k, axis=0), k, axis=1)
    return Uncertainty(cut(u.low), cut(u.high), cut(u.stderr), u.method, kind=u.kind, covers=u.covers,
                       target=u.target)


def matrix_uncertainty(mechanism: str, privacy: Mapping[str, Any], params: Mapping[str, Any], matrix: np.ndarray,
                       norm_bound: float, level: float, *, transform: np.ndarray | None = None) -> Uncertainty | None:
    """The entries' uncertainty of a released second-moment matrix (module doc); None where there is none.

    ``matrix`` is the release as the mechanism made it (the noise's units,
    post-processed). With ``transform`` T (the public affine map of
    :mod:`._scaling`, invertible) the uncertainty is that of T·matrix·Tᵀ,
    the release in the data's units, against the truth T·AᵀA·Tᵀ: the map is
    exact post-processing, so every distribution maps with it — the Gaussian
    noise T·N·Tᵀ (exact sd, :func:`gaussian_sd`), the Wishart noise
    T·W·Tᵀ ~ W(B²TTᵀ, k), JL's W(TΣTᵀ, r)/r and inverse-Wishart's
    (m−d−1)W⁻¹(TΣTᵀ, m) (a congruence maps Wishart to Wishart), the shift
    c·I to c·TTᵀ and the PSD bound to 2‖M − AᵀA‖₂·‖t_i‖‖t_j‖ (rows t_i of T).
    """
    matrix = np.asarray(matrix, dtype=np.float64)
    d = matrix.shape[0]
    t = np.eye(d) if transform is None else np.asarray(transform, dtype=np.float64)
    data = matrix if transform is None else t @ matrix @ t.T
    ttt = t @ t.T
    mapped = "" if transform is None else ", mapped to the data's units by the public affine map T (T.M.T^T)"
    post = params.get("postprocess", "none")
    if post == "psd":
        c, r, how = _noise_norm(mechanism, privacy, params, matrix, norm_bound, level)
        rows = np.sqrt(np.diag(ttt))
        return bound(data, 2.0 * (abs(c) + r) * np.outer(rows, rows), method=(
            "bound: |entry - truth| <= ||P(M) - A^T A||_2 <= 2 ||M - A^T A||_2 for the PSD projection P, with "
            f"{how}{mapped}"))
    shift = _shift({**privacy, "_mechanism": mechanism}, params, d, norm_bound)
    offset = matrix_offset(mechanism, privacy, params, d, norm_bound)
    target = _target(offset, transform)
    centre = data - shift * ttt
    kept = offset * ttt  # every interval below is of A^T A, moved by this to cover A^T A + o T T^T
    if mechanism == "analyze_gauss":
        sigma = float(privacy["noise_scale"])
        sd = np.full((d, d), sigma) if transform is None else gaussian_sd(t, sigma)
        u = gaussian_interval(centre + kept, sd, level, method=(
            "exact: value +/- z*sd, the Gaussian noise of Analyze Gauss (sigma from the manifest; "
            f"mirror entries share their noise){mapped}"))
        return Uncertainty(u.low, u.high, u.stderr, u.method, target=target)
    if mechanism == "wishart":
        k = int(privacy["dof"])
        scale = norm_bound**2 * ttt
        q_lo, q_hi = _wishart_entry_quantiles(scale, k, level)
        dg = np.diag(scale)
        se = np.sqrt(k * (scale**2 + np.outer(dg, dg)))
        # error = released - shift - truth = T W T^T ~ W(B^2 T T^T, k): truth in [centre - q_hi, centre - q_lo]
        return Uncertainty(centre - q_hi + kept, centre - q_lo + kept, se, (
            "exact distribution of the additive Wishart noise W(B^2 T T^T, k) (T = I without bounds): diagonal "
            "Sigma_ii chi2_k quantiles, off-diagonal sqrt(Sigma_ii Sigma_jj)((1+rho)/2 X - (1-rho)/2 Y) with X, Y "
            f"iid chi2_k, quantiles simulated ({SIMULATIONS} draws, fixed seed){mapped}"), target=target)
    # multiplicative mechanisms: exact chi-square pivots on the diagonal, a simulated studentized pivot off it
    w2 = float(privacy["ridge_w2"])
    sigma_hat = centre  # the release as drawn: an estimate of T Σ T^T, Σ = AᵀA + w²I, ridge added back
    if mechanism == "jl_ridge":
        dof = int(privacy["projection_rows"])
    else:
        dof = int(privacy["dof"])
    low, high, se, how = multiplicative_entry_interval(mechanism, sigma_hat, dof, level)
    ridge = w2 * ttt  # public: subtracted exactly from the interval of T Σ T^T
    return Uncertainty(low - ridge + kept, high - ridge + kept, se, how + mapped, target=target)


def _noise_norm(mechanism: str, privacy: Mapping[str, Any], params: Mapping[str, Any], matrix: np.ndarray,
                norm_bound: float, level: float) -> tuple[float, float, str]:
    """(c, r, how): ‖released − AᵀA − c·I‖₂ ≤ r with probability ≥ level, for every mechanism.

    Additive (:func:`spectral_error`). Multiplicative (JL, inverse-Wishart):
    released = S − s·I (s = w² after ``shift``/``psd``, else 0) with S =
    L·M·Lᵀ, LLᵀ = Σ = AᵀA + w²I, so released − AᵀA − (w² − s)·I = S − Σ =
    L(M − I)Lᵀ and ‖S − Σ‖₂ ≤ λ_max(Σ)·max(θ_hi − 1, 1 − θ_lo) on the event
    that M's eigenvalues lie in [θ_lo, θ_hi]; on the same event Ostrowski
    gives λ_max(Σ) ≤ λ_max(S)/θ_lo, with λ_max(S) ≤ λ_max(released)⁺ + s.
    So r = (λ_max(released)⁺ + s)/θ_lo · max(θ_hi − 1, 1 − θ_lo), c = w² − s.
    """
    d = matrix.shape[0]
    err = spectral_error(mechanism, privacy, params, d, norm_bound, level)
    if err is not None:
        return err[0], err[1], f"a high-probability bound on the {mechanism} noise's spectral norm " \
                               "(Davidson & Szarek 2001, Gaussian concentration)"
    lo_t, hi_t = _multiplicative_range(mechanism, privacy, d, level)
    w2 = float(privacy["ridge_w2"])
    s = w2 if params.get("postprocess", "none") in ("shift", "psd") else 0.0
    top = max(float(np.linalg.eigvalsh(matrix)[-1]), 0.0) + s
    r = (top / lo_t) * max(hi_t - 1.0, 1.0 - lo_t) if lo_t > 0 else math.inf
    return w2 - s, r, (f"||S - Sigma||_2 <= lambda_max(Sigma) ||M - I||_2 for the multiplicative {mechanism} noise "
                       "S = L M L^T, M's eigenvalue range by Davidson & Szarek 2001 and lambda_max(Sigma) <= "
                       "lambda_max(S)/theta_lo (Ostrowski) on the same event")


def pca_uncertainty(mechanism: str, privacy: Mapping[str, Any], params: Mapping[str, Any], matrix: np.ndarray,
                    eigenvalues: np.ndarray, eigenvectors: np.ndarray, norm_bound: float,
                    level: float, *, transform: np.ndarray | None = None) -> tuple[dict[str, Uncertainty], dict[str, Any]]:
    """Bounds on the released eigenvalues and eigenvectors, and the subspace angle bound (module doc).

    ``matrix`` is the release in the noise's units. With ``transform`` T′
    (d × size: the rows of the public affine map for the data columns, the
    constant's row left out) the eigenpairs are those of T′·matrix·T′ᵀ (the
    release in the data's units) and the truth is T′·AᵀA·T′ᵀ; the error is
    T′·(M − AᵀA)·T′ᵀ, whose norm is at most ‖T′‖₂²·(|c| + r).

    Returns (uncertainty by array name, manifest ``accuracy`` fields).
    """
    matrix = np.asarray(matrix, dtype=np.float64)
    k = len(eigenvalues)
    post = params.get("postprocess", "none")
    out: dict[str, Uncertainty] = {}
    c, r, how = _noise_norm(mechanism, privacy, params, matrix, norm_bound, level)
    multiplicative = mechanism not in ("analyze_gauss", "wishart")
    c_eig, r_eig = c, r  # Weyl on the eigenvalues needs no doubling: P clips eigenvalues towards the truth's
    if post == "psd":
        r, c = 2.0 * (abs(c) + r), 0.0  # ||P(M) - A|| <= 2 ||M - A|| (module doc); no multiple of I after P
    data = matrix
    if transform is not None:
        t = np.asarray(transform, dtype=np.float64)
        data = t @ matrix @ t.T
        r, c = float(np.linalg.norm(t, 2)) ** 2 * (abs(c) + r), 0.0
        c_eig, r_eig = c, r
        how += "; mapped to the data's units: ||T' E T'^T||_2 <= ||T'||_2^2 ||E||_2"
    if multiplicative and transform is None:  # Ostrowski on the eigenvalues: relative, tighter than Weyl
        lo_t, hi_t = _multiplicative_range(mechanism, privacy, matrix.shape[0], level)
        w2 = float(privacy["ridge_w2"])
        raw = eigenvalues + (w2 if post in ("shift", "psd") else 0.0)  # eigenvalues of the release as drawn
        # (a clipped eigenvalue of "psd" had raw <= w², so raw = w² bounds it above; below, truth >= 0 holds)
        low = np.maximum(raw / hi_t - w2, 0.0)
        high = (raw / lo_t if lo_t > 0 else np.full(k, np.inf)) - w2
        out["eigenvalues"] = Uncertainty(low, high, None, (
            "bound: Ostrowski's theorem with a high-probability range of the multiplicative noise's eigenvalues "
            "(Davidson & Szarek 2001), minus the ridge w^2"), kind="bound")
        eig_how = "Ostrowski"
    else:
        # Weyl on E − c·I; the PSD projection clips eigenvalues at 0, which moves none further from a true
        # (non-negative) one.
        out["eigenvalues"] = Uncertainty(np.maximum(eigenvalues - c_eig - r_eig, 0.0), eigenvalues - c_eig + r_eig,
                                         None, (f"bound: Weyl's inequality |lambda_i(A + E) - lambda_i(A)| <= "
                                                f"||E||_2 <= {r_eig:.6g}, from {how}"),
            kind="bound")
        eig_how = "Weyl"
    spectrum = np.sort(np.linalg.eigvalsh(data))[::-1]
    d = data.shape[0]
    sines = np.empty(k)
    for i in range(k):
        gaps = [spectrum[i - 1] - spectrum[i]] if i > 0 else []
        gaps += [spectrum[i] - spectrum[i + 1]] if i + 1 < d else []
        gap = min(gaps) - r if gaps else math.inf
        sines[i] = 1.0 if gap <= 0 else min(1.0, r / gap)
    out["eigenvectors"] = bound(eigenvectors, (math.sqrt(2.0) * sines)[:, None] * np.ones_like(eigenvectors),
                                method=("bound up to each vector's sign: |v_hat_j - s v_j| <= sqrt(2) sin(theta), "
                                        "Davis-Kahan sin(theta) <= ||E||_2 / (released eigengap - ||E||_2), "
                                        f"||E||_2 from {how}"))
    sub_gap = (spectrum[k - 1] - spectrum[k] - r) if k < d else math.inf
    sin_sub = 1.0 if sub_gap <= 0 else min(1.0, r / sub_gap)
    return out, {
        "uninformative": uninformative(out["eigenvalues"], sines, sin_sub, k < d),
        "eigenvalue_bound": eig_how,
        "eigenvector_bound": "Davis-Kahan",
        "noise_spectral_norm_bound": r if math.isfinite(r) else None,  # None: no finite bound (JL/iW, small r)
        "subspace_sin_theta_bound": sin_sub,
        "subspace_angle_bound_radians": math.asin(sin_sub),
        "subspace_bound": ("Davis-Kahan sin(theta) theorem: the largest principal angle between the released and "
                           "the true top-k eigenspace of A^T A, holding with probability >= the level"),
    }


def uninformative(eigenvalues: Uncertainty, sines: np.ndarray, sin_subspace: float, proper: bool) -> list[str]:
    """The PCA bounds that carry no information, each said in words (manifest ``accuracy.uninformative``).

    An eigenvector whose Davis–Kahan bound is sin θ = 1 may point anywhere
    (its entries' bounds cover every unit vector's); an eigenvalue whose
    bound reaches 0 cannot be told from 0; likewise the top-k subspace.
    Their cause is noise large against the eigengaps: more rows, a larger
    ε, or bounds closer to the data narrow them.
    """
    out = [f"eigenvector {i + 1}: no information on its direction (Davis-Kahan sin(theta) = 1: the noise is larger "
           "than its eigengap, so its bounds cover every unit vector)" for i in np.flatnonzero(sines >= 1.0)]
    out += [f"eigenvalue {i + 1}: cannot be told from 0 (its bound's lower end is 0)"
            for i in np.flatnonzero(np.asarray(eigenvalues.low) <= 0.0)]
    if proper and sin_subspace >= 1.0:
        out.append("the top-k subspace: no information (sin(theta) = 1)")
    return out


def adassp_sums_uncertainty(xtx: np.ndarray, xty: np.ndarray, sigmas, level: float, *,
                            transform: np.ndarray) -> dict[str, Uncertainty]:
    """AdaSSP's released X^T X + N (σ₂) and X^T y + N (σ₃), mapped by ``transform`` T: exact Gaussian intervals.

    The rows [X y]·Tᵀ have noise T·N·Tᵀ with σ₂ on the X^T X block, σ₃ on
    X^T y and none on the unreleased yᵀy, whose entry sd is
    :func:`gaussian_sd`'s: data-independent (the dry run calls this too).
    """
    _, s2, s3 = (float(s) for s in sigmas)
    p = xtx.shape[0]
    t = np.asarray(transform, dtype=np.float64)
    s = np.full((p + 1, p + 1), s2)
    s[:p, p] = s[p, :p] = s3
    s[p, p] = 0.0
    data = t @ np.block([[xtx, xty[:, None]], [xty[None, :], np.zeros((1, 1))]]) @ t.T
    sd = gaussian_sd(t, s)
    mapped = "" if np.array_equal(t, np.eye(p + 1)) else " mapped to the data's units (T N T^T, exact sd)"
    return {
        "xtx": gaussian_interval(data[:p, :p], sd[:p, :p], level, method=(
            f"exact: value +/- z*sd, AdaSSP's Gaussian noise on X^T X (sigma_2; mirror entries share their "
            f"noise){mapped}")),
        "xty": gaussian_interval(data[:p, p], sd[:p, p], level, method=(
            f"exact: value +/- z*sd, AdaSSP's Gaussian noise on X^T y (sigma_3){mapped}")),
    }


def adassp_lambda_floor(lam: float, sigmas, p: int, rho: float) -> float:
    """AdaSSP's private lower bound λ̃_min on λ_min(XᵀX), from its released adaptive ridge λ (public arithmetic).

    Steps 1–2 of the algorithm (:mod:`.adassp`): λ = max(0, σ₂√(p ln(2p²/ρ)) − λ̃_min), so λ̃_min = that
    threshold − λ when λ > 0, and at least the threshold when λ = 0. λ̃_min ≤ λ_min(XᵀX) unless its Gaussian
    draw exceeds σ₁√ln(6/δ) (probability below δ).
    """
    threshold = float(sigmas[1]) * math.sqrt(p * math.log(2.0 * p * p / rho))
    return max(threshold - float(lam), 0.0)


def no_interval(shape, reason: str, covers: str = "noise") -> Uncertainty:
    """An array whose interval the release refuses to state: ``kind: none`` with the reason (no numbers)."""
    nan = np.full(shape, np.nan)
    return Uncertainty(nan, nan, None, reason, kind="none", covers=covers)


def adassp_uncertainty(xtx: np.ndarray, xty: np.ndarray, beta: np.ndarray, sigmas, level: float, *,
                       ridge: float, scaling=None, rng: np.random.Generator | None = None,
                       adaptive: float | None = None, rho: float = 0.05) -> dict[str, Uncertainty]:
    """AdaSSP's released X^T X + N (σ₂), X^T y + N (σ₃) and its coefficients' intervals (and intercept's).

    ``xtx``, ``xty`` and ``beta`` are in the vector's units (before any map
    back). ``xtx``/``xty``: exact Gaussian intervals; with ``scaling`` (the
    release's public affine map T) those of the arrays mapped back, rows
    [X y]·Tᵀ, whose noise T·N·Tᵀ has the exact sd of :func:`gaussian_sd`
    (σ₂ on the X^T X block, σ₃ on X^T y, none on the unreleased yᵀy).

    ``coefficients`` (and ``intercept`` with the constant column) cover the
    privacy noise only (``covers="noise"``; the truth is the non-private fit
    on the same clipped rows): AdaSSP releases no yᵀy, so the sampling error
    cannot be estimated from the release. ``ridge`` is the whole ridge r
    (the adaptive λ = ``adaptive`` plus the user's).

    * Since 2026-12-05, whatever r: the generalised Fieller interval of
      AdaSSP's exact pivot g(b) = Xᵀŷ − XᵀX̂b (:func:`.intervals.adassp_fieller_intervals`,
      kind ``interval``): at the truth g = E₃ − E₂β is exactly Gaussian with
      a covariance known from σ₂, σ₃ and β; each term's interval profiles
      Q = gᵀΣ(b)⁻¹g. It does not use the ridge, so the ridge's bias does not
      enter (the bias-bounded bootstrap used before held 0.85–0.87 on the
      held-out BudgetFood table, whose noise on XᵀX is comparable to λ_min).
    * Where that set is unbounded (the noise can hide the design's weakest
      direction): r > 0 with public bounds, iterated Tikhonov widened by a
      valid bound on its bias (:func:`.intervals.bias_bounded_bootstrap`,
      kind ``bound``, from AdaSSP's private lower bound λ̃_min on λ_min(XᵀX),
      :func:`adassp_lambda_floor`, and the label's bound); r = 0 the
      parametric bootstrap of :func:`.intervals.regression_bootstrap`; r > 0
      without bounds refused (kind ``none``, the reason in the method).
    * r > 0 and λ̃_min = 0 (the design is too close to collinear for the
      noise at this ε): refused (:data:`FLOOR_ZERO`).

    ``lambda`` is the algorithm's adaptive ridge (a choice, not an estimate
    of a data value) and has none.
    """
    from spark_dp.second_moment._scaling import Scaling
    from spark_dp.second_moment.intervals import adassp_fieller_intervals, bias_bounded_bootstrap, regression_bootstrap

    _, s2, s3 = (float(s) for s in sigmas)
    p = xtx.shape[0]
    joint = np.block([[xtx, xty[:, None]], [xty[None, :], np.zeros((1, 1))]])
    bounded = scaling is not None and scaling.fully_bounded and scaling.constant_at is not None
    if scaling is None:
        scaling = Scaling(tuple(f"x{i}" for i in range(p + 1)), (None,) * (p + 1))
    out = adassp_sums_uncertainty(xtx, xty, sigmas, level, transform=scaling.transform())
    k = scaling.constant_at
    part = {"coefficients": np.arange(p)} if k is None else {
        "coefficients": np.delete(np.arange(p), k), "intercept": np.array([k])}

    def refuse(reason: str) -> dict[str, Uncertainty]:
        for name, idx in part.items():
            out[name] = no_interval(idx.shape, reason.format(r=ridge))
        return out

    floor = adassp_lambda_floor(ridge if adaptive is None else adaptive, sigmas, p, rho) if ridge > 0 else math.inf
    if floor <= 0:
        return refuse(FLOOR_ZERO)
    noise_only = "; noise only (AdaSSP releases no y^T y to estimate the sampling error from)"
    fieller = adassp_fieller_intervals(xtx, xty, sigma=s2, sigma_xy=s3, scaling=scaling, label_at=p, level=level)
    if fieller.bounded:
        method = fieller.method + "; " + FIELLER_MEASURED + noise_only
        for name, idx in part.items():
            out[name] = Uncertainty(fieller.low[idx], fieller.high[idx], fieller.stderr[idx], method,
                                    covers="noise")
        return out
    unbounded = fieller.method  # FIELLER_UNBOUNDED, formatted
    if ridge > 0:
        if not bounded:
            return refuse("no interval: " + unbounded + ", and the ridge r = {r:.6g} biases the fit by an amount "
                          "that depends on the unknown coefficients, which without public bounds on every column "
                          "the release carries no bound on; use more rows, a larger epsilon, bounds, or the "
                          "released coefficients as a point estimate only")
        n_up = float(joint[k, k]) + 5.0 * s2  # the constant's diagonal is n + N(0, sigma_2^2); 5 sd above
        got = bias_bounded_bootstrap(joint, beta, sigma=s2, sigma_xy=s3, scaling=scaling, label_at=p, ridge=ridge,
                                     lambda_floor=floor, label_energy=max(n_up, 0.0), level=level, rng=rng)
        kind = "bound"
    else:
        got = regression_bootstrap(joint, beta, sigma=s2, sigma_xy=s3, scaling=scaling, label_at=p, ridge=0.0,
                                   level=level, sampling=False, rng=rng)
        kind = "interval"
    method = (unbounded + "; instead: " + got.method + ", AdaSSP's sigma_2 on X^T X and sigma_3 on X^T y, its ridge "
              "lambda held fixed" + noise_only)
    for name, idx in part.items():
        out[name] = Uncertainty(got.low[idx], got.high[idx], got.stderr[idx], method, kind=kind, covers="noise")
    return out


#: AdaSSP's refusal where its private lower bound on λ_min(XᵀX) is 0 (``{r}``: the ridge).
FLOOR_ZERO = ("no interval: AdaSSP's private lower bound on the smallest eigenvalue of X^T X is 0 at this epsilon (the "
              "design is too close to collinear, or n too small, for the noise), so the bias of its adaptive ridge "
              "r = {r:.6g} cannot be bounded and the noise may hide the design's weakest direction: no interval can "
              "be shown to hold; use more rows, a larger epsilon, fewer or less correlated columns, or the released "
              "coefficients as a point estimate only")

#: What was measured for AdaSSP's Fieller intervals (docs/accuracy.md).
FIELLER_MEASURED = "approximate (the profile's chi-square(1) calibration), measured coverage in docs/accuracy.md"
