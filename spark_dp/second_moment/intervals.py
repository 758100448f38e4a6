"""Confidence intervals for private regression coefficients, from the released statistics only.

Method: the parametric bootstrap of Ferrando, Wang & Sheldon, "Parametric
Bootstrap for Differentially Private Confidence Intervals" (AISTATS 2022),
in its sufficient-statistics form for linear regression (their Sec. 4.2:
the covariates are not read again). Everything below is computed from the
released noisy matrix M ≈ [X y]ᵀ[X y] (with the constant column), the
release's public noise scale σ and its post-processing — never from the
data — so it costs no privacy.

1. Estimates from the release: β̂ (exactly as released), XᵀX̂ = M_XX
   projected onto the positive-definite cone, n̂ from the constant column's
   diagonal, the residual variance σ̂² = (yᵀy − 2β̂ᵀXᵀy + β̂ᵀXᵀX̂β̂)/(n̂ − p).
2. Draws b = 1 … R of the whole pipeline under the fitted model, X fixed
   (the fixed-design bootstrap): Xᵀy* ~ N(XᵀX̂β̂, σ̂²XᵀX̂) (the sampling error
   of y = Xβ + e, e ~ N(0, σ̂²)), then the mechanism's noise on XᵀX̂ and on
   Xᵀy* (symmetric N(0, σ²) entries, as Analyze Gauss draws them), the
   release's post-processing and ridge, and the same solve: β*_b.
3. The basic (pivotal) bootstrap interval, β̂ − [q_{1−a/2}, q_{a/2}] of
   β* − β̂_w, which also removes the first-order bias that noise in XᵀX
   puts on β̂ (the paper's bias correction); the standard error is the
   draws' standard deviation.

After a ridge — ``postprocess="shift"`` (Analyze Gauss + 2σ√d·I, Sheffet's
choice) or AdaSSP's λ > 0 — β̂ = (XᵀX̂ + rI)⁻¹Xᵀy is shrunk by r(XᵀX + rI)⁻¹β,
a bias linear in the unknown β and large in the design's weak directions;
β̂ − β is then not pivotal and a bootstrap world built on β̂ (even after a
pilot round of bias correction, the method before 2026-12-02) gives intervals
that are too short there: on the worked example of docs/accuracy.md they held
the non-private OLS coefficients in 47–77 % of the runs. The interval is
instead that of the statistic T = k-step iterated Tikhonov from the same
release (Engl, Hanke & Neubauer, *Regularization of Inverse Problems*, 1996,
ch. 5): x₀ = β̂, x_{j+1} = (XᵀX̂ + rI)⁻¹(Xᵀy + r·x_j), k = ``ITERATED_STEPS`` = 2.
In an eigendirection of XᵀX with eigenvalue λ its bias factor is
(r/(λ + r))^{k+1} instead of r/(λ + r), and its noise gain at most
(k + 1)/r instead of 1/r, so it stays stable where XᵀX̂ itself is near
singular (the unshifted fit, k = ∞, has heavy tails there). The world is
T(release), each draw goes through the whole pipeline and T, and the basic
interval T − [q_{1−a/2}, q_{a/2}] of T* − T is centred on T; the released
point estimate is unchanged (only its interval is). Measured
(docs/accuracy.md, 100 releases each): per term 0.85–1.00 on four
regressions of the batting table at row and player level (0.21–0.83
before), at 2.2–3.6× the previous width at row level (3.2–5.2× on the
4,908 seasons from 1990) and 3.4–8.3× at player level, where they are
conservative (0.98–1.00); in the synthetic harness coefficients
0.935–0.965, the intercept 0.943–0.978 (0.91–0.94 before); AdaSSP with
λ > 0 (n = 2,000) 0.979 and 0.998 (0.921 and 0.925 before).

Since 2026-12-04 the releases no longer use that 2-step interval after a
ridge (:func:`regression_intervals`, :func:`.uncertainty.adassp_uncertainty`):
on real tables with a near-collinear design it kept most of the ridge's bias
(the worst term held 42 % after ``shift`` and 12 % for AdaSSP on the
``diamonds`` table at ε = 1, benchmarks/calibration.py). Instead
:func:`bias_bounded_bootstrap` — k-step iterated Tikhonov widened by a valid
bound on its bias, from a public lower bound λ_lo on λ_min(XᵀX) — where
λ_lo > 0; where it is not, Analyze Gauss gives the interval of the
unregularised fit of the same release (:func:`unregularised_bootstrap`) and
AdaSSP refuses (``kind: none``). ``steps`` remains for direct callers. Since 2026-12-05 AdaSSP's
intervals are the generalised Fieller interval of its exact pivot (:func:`adassp_fieller_intervals`), the
bias-bounded bootstrap only where that set is unbounded.

The draws are mapped to the data's units first (:meth:`Scaling.coefficients`),
so the intercept's interval accounts for its correlation with the
coefficients. What an interval covers is the caller's choice (``covers``):
``"noise"`` (the default) leaves out step 2's sampling error — the labels
are the table's, and the truth is the non-private fit of the same rows, the
value a run without privacy would have printed; ``"noise+sampling"``, which
needs the constant column (n̂), adds it for a fixed-design model whose errors
have one variance (:data:`HOMOSCEDASTIC`; real tables' errors rarely do, and
where the sampling error dominates the interval that assumption, not the
privacy noise, sets its coverage). Clipping bias is not covered: with public
bounds and the default norm bound no row is clipped. Where a lower bound on
λ_min(XᵀX) from the release is ≤ 0 (:func:`design_floor`: the noise may
swamp the design's weakest direction) the method begins with
"conservative" (:data:`CONSERVATIVE`; measured in docs/accuracy.md).

Analyze Gauss without a ridge (post-processing ``none``, or ``psd`` where the
projection clipped nothing), covering the noise only: not the bootstrap but
Fieller's interval of the release's exact Gaussian pivot Xᵀy − XᵀX·b
(:mod:`.pivot`, :func:`pivot_regression`). The bootstrap's world is built from
the noisy XᵀX; the releases whose noise lifted its smallest eigenvalue got a
world better conditioned than the truth, and on a held-out near-collinear
table the releases the bootstrap did not mark conservative held one term in
68 % of them. The bootstrap remains where the pivot's set is unbounded
(:data:`PIVOT_UNBOUNDED`), marked conservative there. Fieller's level
counts the unbounded sets, which always hold: where most of a table's sets
are unbounded, the few bounded ones can hold far less (docs/accuracy.md,
"Three tables a new user brought"; a stricter switch only moves that
minority).

Every other mechanism and fit (:func:`mechanism_bootstrap`, dispatched by
:func:`regression_intervals`): the same bootstrap with the release's own
noise law (:class:`NoiseLaw`: Wishart AᵀA + W(B²I, k), JL W(AᵀA + w²I, r)/r,
inverse-Wishart (m − d − 1)W⁻¹(AᵀA + w²I, m), Analyze Gauss; the ``shift``
applied to every draw, the ``psd`` projection not — :data:`PSD_METHOD`) on the whole bootstrap
matrix, the label row included, and fits through the origin (raw rows, or
``bounds`` without an intercept, solved in the data's units). Approximate
like the above: measured in docs/accuracy.md (within [0.93, 0.97] at
n = 20,000, outside it at n = 2,000 for some mechanisms, as the table says).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from spark_dp.params import REGRESSION_COVERS
from spark_dp.second_moment._scaling import Scaling
from spark_dp.second_moment.pivot import METHOD as PIVOT_BASE
from spark_dp.second_moment.pivot import PivotIntervals, affine_map, fieller_intervals, pivot_covariance

METHOD = ("parametric bootstrap from the released sufficient statistics (Ferrando, Wang & Sheldon, AISTATS 2022; "
          "fixed design, {draws} draws, basic/pivotal interval)")
ITERATED_METHOD = ("; after the ridge r = {ridge:.6g} the interval is the bootstrap's for {steps}-step iterated Tikhonov "
                   "from the same release (x_0 = (X^T X + r I)^-1 X^T y, x_j+1 = (X^T X + r I)^-1 (X^T y + r x_j); "
                   "Engl, Hanke & Neubauer, Regularization of Inverse Problems, 1996, ch. 5), centred on it and not on "
                   "the released coefficients, whose ridge bias is not pivotal; its bias is the ridge's to the power "
                   "{power}")


#: Rounds of iterated Tikhonov that the intervals after a ridge (``shift``, AdaSSP's λ > 0) are centred on.
ITERATED_STEPS = 2


@dataclass(frozen=True)
class BootstrapIntervals:
    """Per-entry estimate, interval and standard error in data units (coefficients, then the intercept)."""

    estimate: np.ndarray
    low: np.ndarray
    high: np.ndarray
    stderr: np.ndarray
    covers: str
    method: str


def robust_stderr(dev: np.ndarray, level: float) -> np.ndarray:
    """The ``stderr`` of every bootstrap interval: the draws' IQR / 1.349, at most the interval's half-width ÷ z.

    The draws' plain standard deviation is dominated by their tails where
    XᵀX̂ is near singular (on collinear tables it was up to 1,700× the
    interval's half-width ÷ z); the interquartile range over 1.349 is the
    standard deviation of a normal with the same middle half, so it agrees
    with the interval where the draws are normal and stays below its
    half-width ÷ z where they are heavy-tailed. Capped at that half-width
    ((q_{1−a/2} − q_{a/2}) / 2z of the same draws) where the draws are
    flatter than normal in the middle (after a ``psd`` projection), so the
    two never disagree by more than the normal's own ratio.
    """
    from spark_dp.release.uncertainty import normal_quantile

    a = (1.0 - level) / 2.0
    q1, q3, lo, hi = np.quantile(dev, [0.25, 0.75, a, 1.0 - a], axis=0)
    return np.minimum((q3 - q1) / (2.0 * 0.6744897501960817), (hi - lo) / (2.0 * normal_quantile(level)))


def _symmetric_noise(rng: np.random.Generator, draws: int, p: int, sigma: float) -> np.ndarray:
    # Bootstrap replicates of the (public) noise law: post-processing of a release, never released as noise.
    e = rng.normal(0.0, sigma, size=(draws, p, p))
    upper = np.triu(e)
    return upper + np.swapaxes(np.triu(e, 1), 1, 2)


def _solve(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Each a⁻¹b, the pseudo-inverse's solution for the exactly singular ones (a ``psd`` projection makes some)."""
    try:
        return np.linalg.solve(a, b[..., None])[..., 0]
    except np.linalg.LinAlgError:
        if a.ndim == 2:
            return np.linalg.pinv(a) @ b
    singular = np.linalg.slogdet(a)[0] == 0  # the others solve as above, in one batch
    out = np.empty(b.shape)
    out[~singular] = np.linalg.solve(a[~singular], b[~singular][..., None])[..., 0]
    out[singular] = (np.linalg.pinv(a[singular]) @ b[singular][..., None])[..., 0]
    return out


def regression_bootstrap(
    matrix: np.ndarray,
    beta: np.ndarray,
    *,
    sigma: float,
    scaling: Scaling,
    label_at: int,
    shift: float = 0.0,
    ridge: float = 0.0,
    level: float = 0.95,
    draws: int = 2000,
    rng: np.random.Generator | None = None,
    sigma_xy: float | None = None,
    sampling: bool = True,
    debias: bool | None = None,
    steps: int | None = None,
) -> BootstrapIntervals:
    """Intervals for the coefficients (data units) of a regression released with Analyze Gauss.

    Args:
        matrix: the released (post-processed) second moment of the vector,
            label at ``label_at``, shape (size, size).
        beta: the released solution on the vector (non-label entries, vector order).
        sigma: the Gaussian noise scale of each matrix entry.
        scaling: the release's public affine map (constant column, bounds).
        shift: the c·I added by ``postprocess="shift"`` (0 otherwise).
        ridge: λ added to the diagonal of XᵀX (the constant's entry included).
        level: the intervals' nominal coverage.
        draws: bootstrap replicates R.
        rng: a generator (default: fresh OS entropy; the draws are
            post-processing, not privacy noise).
        sigma_xy: the noise scale of Xᵀy when it differs from XᵀX's
            (AdaSSP's σ₃; default ``sigma``).
        sampling: whether the release lets the sampling error be estimated
            (False for AdaSSP, which releases no yᵀy: noise only).
        debias: whether the ridge's bias is corrected by centring the
            interval on iterated Tikhonov (module doc; default: with a
            shift); AdaSSP asks for it when its adaptive ridge λ is positive.
        steps: the rounds of iterated Tikhonov (default ``ITERATED_STEPS``
            when the ridge's bias is corrected, else 0: the released fit).
    """
    rng = rng if rng is not None else np.random.default_rng()
    m = 0.5 * (matrix + matrix.T) - shift * np.eye(matrix.shape[0])
    feats = [i for i in range(m.shape[0]) if i != label_at]
    p = len(feats)
    xtx, xty, yy = m[np.ix_(feats, feats)], m[feats, label_at], m[label_at, label_at]
    vals, vecs = np.linalg.eigh(xtx)
    floor = max(sigma, 1e-12 * max(abs(vals[-1]), 1.0))  # a noise-sized floor keeps XᵀX̂ invertible
    xtx_pd = (vecs * np.maximum(vals, floor)) @ vecs.T
    k = scaling.constant_at
    sampling = sampling and k is not None
    sigma_xy = sigma if sigma_xy is None else sigma_xy
    if sampling:
        n_hat = m[k, k] / scaling.constant_value**2
        dof = n_hat - p
        resid = yy - 2.0 * beta @ xty + beta @ xtx_pd @ beta  # (the released fit's residuals)
        s2 = max(resid, 0.0) / dof if dof > 1 else 0.0
    else:
        s2 = 0.0
    chol = np.linalg.cholesky(xtx_pd)
    r = shift + ridge
    if steps is None:
        steps = ITERATED_STEPS if r > 0 and (shift if debias is None else debias) else 0

    def replicate(world: np.ndarray) -> np.ndarray:
        xty_star = xtx_pd @ world + np.sqrt(s2) * rng.standard_normal((draws, p)) @ chol.T
        a_star = xtx_pd + _symmetric_noise(rng, draws, p, sigma) + r * np.eye(p)
        return iterated_ridge(a_star, xty_star + rng.normal(0.0, sigma_xy, size=(draws, p)), r, steps)

    # The statistic is the released fit (steps = 0) or its iterated-Tikhonov refinement from the same release;
    # the world is that statistic's value on the release, and the basic interval is centred on it.
    world = iterated_ridge(xtx + r * np.eye(p), xty, r, steps) if steps else beta
    beta_star = replicate(world)
    centre = scaling.coefficients(world, label_at)
    star = scaling.coefficients(beta_star, label_at) - centre
    a = (1.0 - level) / 2.0
    q_low, q_high = np.quantile(star, [a, 1.0 - a], axis=0)
    method = METHOD.format(draws=draws) + (ITERATED_METHOD.format(steps=steps, ridge=r, power=steps + 1) if steps else "")
    return BootstrapIntervals(
        estimate=scaling.coefficients(beta, label_at), low=centre - q_high, high=centre - q_low,
        stderr=robust_stderr(star, level), covers="noise+sampling" if sampling else "noise", method=method,
    )


def iterated_ridge(a: np.ndarray, b: np.ndarray, r: float, steps: int) -> np.ndarray:
    """``steps`` rounds of iterated Tikhonov from a = XᵀX + r·I: x₀ = a⁻¹b, x_{j+1} = a⁻¹(b + r·x_j)."""
    x = _solve(a, b)
    for _ in range(steps):
        x = _solve(a, b + r * x)
    return x


# -- AdaSSP's adaptive ridge: iterated Tikhonov with a valid bound on its bias ---------------------------------

#: Rounds of iterated Tikhonov tried by :func:`bias_bounded_bootstrap` (each term keeps the narrowest interval).
STEPS_GRID = (2, 4, 8, 16, 32, 64, 128, 256)

BIAS_METHOD = ("; after the ridge r = {ridge:.6g} each term's interval is that of k-step iterated Tikhonov from the same "
               "release (x_0 = (X^T X + r I)^-1 X^T y, x_j+1 = (X^T X + r I)^-1 (X^T y + r x_j); Engl, Hanke & "
               "Neubauer 1996, ch. 5), k in {grid} chosen per term for the narrowest interval (k = {chosen}), widened "
               "on each side by a bound on its bias: |bias| <= ||L_j|| (r/(lambda_lo + r))^(k+1) sqrt(Y/lambda_lo), "
               "with lambda_lo = {floor:.6g} {floor_how}, Y = {energy:.6g} >= ||y||^2 >= ||X beta||^2 (the label's public bound times an upper bound "
               "on n) and L_j the public map to the data's units: conservative (kind bound)")


def _tikhonov_filter(mu: np.ndarray, r: float, k: int) -> np.ndarray:
    """sum_{j=0..k} r^j / mu^(j+1) = (1 - (r/mu)^(k+1)) / (mu - r): k-step iterated Tikhonov in an eigendirection."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        near = np.abs(mu - r) <= 1e-9 * r
        out = (1.0 - (r / mu) ** (k + 1)) / np.where(near, 1.0, mu - r)
    return np.where(near, (k + 1) / mu, out)


def bias_bounded_bootstrap(
    matrix: np.ndarray,
    beta: np.ndarray,
    *,
    sigma: float,
    sigma_xy: float,
    scaling: Scaling,
    label_at: int,
    ridge: float,
    lambda_floor: float,
    label_energy: float,
    level: float = 0.95,
    draws: int = 2000,
    rng: np.random.Generator | None = None,
    s2: float = 0.0,
    floor_how: str = "AdaSSP's own private lower bound on the smallest eigenvalue of X^T X",
) -> BootstrapIntervals:
    """Intervals (data units) for a fit with a ridge r > 0 whose bias is bounded, not estimated.

    The ridge fit β̂ = (XᵀX̂ + rI)⁻¹Xᵀy shrinks the truth β (the
    non-private OLS fit of the same rows) by r(XᵀX + rI)⁻¹β, which the
    bootstrap cannot see: it is built on the shrunk fit. k-step iterated
    Tikhonov T_k from the same release has the bias
    −(r(XᵀX + rI)⁻¹)^{k+1}β, and in the eigenbasis of XᵀX (eigenvalues
    λ_i ≥ λ_lo > 0) with ‖Xβ‖² ≤ Y (OLS fitted values are a projection of
    y, so ‖Xβ‖ ≤ ‖y‖)::

        ‖bias‖₂ ≤ max_i (r/(λ_i + r))^{k+1}/√λ_i · ‖X β‖ ≤ (r/(λ_lo + r))^{k+1} √(Y/λ_lo)

    (the factor decreases in λ). Each data-unit term j is L_j·(vector
    coefficients) + const (:meth:`Scaling.coefficients` is affine), so its
    bias is at most ‖L_j‖₂ times that. The interval of term j is the basic
    bootstrap interval of T_k (draws through AdaSSP's noise, as
    :func:`regression_bootstrap` with ``sampling=False``) widened by the
    bound on each side, for the k of :data:`STEPS_GRID` that makes it
    narrowest. Both inputs are public or released: λ_lo is the algorithm's
    private lower bound λ̃_min (it fails with probability about
    Φ(−√ln(6/δ)), below δ), Y the label's public bound squared times an
    upper bound on the row count. Conservative: the bias bound is a
    worst case over all β with ‖Xβ‖² ≤ Y.

    Args:
        matrix: the released [XᵀX̂ Xᵀŷ; Xᵀŷᵀ 0] in the vector's units, label at ``label_at``.
        beta: the released fit (vector units).
        sigma: the noise scale of XᵀX̂'s entries (AdaSSP's σ₂).
        sigma_xy: that of Xᵀŷ (σ₃).
        scaling: the public affine map to the data's units.
        label_at: the label's index.
        ridge: r > 0.
        lambda_floor: λ_lo > 0, a public high-probability lower bound on λ_min(XᵀX).
        label_energy: Y ≥ ‖y‖² (vector units).
        level: the nominal level of the bootstrap part.
        draws: bootstrap replicates.
        rng: a generator (post-processing draws).
        s2: the residual variance estimate σ̂² of the sampling term (0: noise only, ``covers="noise"``);
            with it each draw's Xᵀy* also gets N(0, σ̂²XᵀX̂) as in :func:`regression_bootstrap`.
        floor_how: where λ_lo comes from (the method string).
    """
    if not (ridge > 0 and lambda_floor > 0 and math.isfinite(label_energy)):
        raise ValueError("bug: bias_bounded_bootstrap needs r > 0, lambda_floor > 0 and a finite label energy")
    rng = rng if rng is not None else np.random.default_rng()
    m = 0.5 * (matrix + matrix.T)
    feats = [i for i in range(m.shape[0]) if i != label_at]
    p = len(feats)
    xtx, xty = m[np.ix_(feats, feats)], m[feats, label_at]
    vals, vecs = np.linalg.eigh(xtx)
    floor = max(sigma, 1e-12 * max(abs(vals[-1]), 1.0))
    xtx_pd = (vecs * np.maximum(vals, floor)) @ vecs.T
    eye = np.eye(p)
    # T_k(a, b) = sum_{j<=k} r^j a^-(j+1) b for a = M + rI: in a's eigenbasis (mu) the filter
    # (1 - (r/mu)^(k+1))/(mu - r), evaluated once per draw instead of k solves.
    mu_star, v_star = np.linalg.eigh(xtx_pd + _symmetric_noise(rng, draws, p, sigma) + ridge * eye)
    e_star = rng.normal(0.0, sigma_xy, size=(draws, p))
    if s2 > 0:
        e_star = e_star + math.sqrt(s2) * rng.standard_normal((draws, p)) @ np.linalg.cholesky(xtx_pd).T
    mu_rel, v_rel = np.linalg.eigh(0.5 * (xtx + xtx.T) + ridge * eye)
    zero = scaling.coefficients(np.zeros(p), label_at)
    lin = np.stack([scaling.coefficients(eye[j], label_at) - zero for j in range(p)], axis=1)  # L: data = L b + c
    row_norm = np.linalg.norm(lin, axis=1)
    a = (1.0 - level) / 2.0
    best = np.full(p, np.inf)
    low, high, stderr = np.full(p, -np.inf), np.full(p, np.inf), np.full(p, np.nan)
    chosen = np.zeros(p, dtype=int)
    for k in STEPS_GRID:
        world = v_rel @ (_tikhonov_filter(mu_rel, ridge, k) * (v_rel.T @ xty))
        b = xtx_pd @ world + e_star
        x = np.einsum("bij,bj->bi", v_star, _tikhonov_filter(mu_star, ridge, k) * np.einsum("bji,bj->bi", v_star, b))
        centre = scaling.coefficients(world, label_at)
        dev = scaling.coefficients(x, label_at) - centre
        q_low, q_high = np.quantile(dev, [a, 1.0 - a], axis=0)
        bias = row_norm * (ridge / (lambda_floor + ridge)) ** (k + 1) * math.sqrt(label_energy / lambda_floor)
        width = q_high - q_low + 2.0 * bias
        better = width < best
        best = np.where(better, width, best)
        low = np.where(better, centre - q_high - bias, low)
        high = np.where(better, centre - q_low + bias, high)
        stderr = np.where(better, robust_stderr(dev, level), stderr)
        chosen = np.where(better, k, chosen)
    method = METHOD.format(draws=draws) + BIAS_METHOD.format(
        ridge=ridge, grid="{" + ", ".join(map(str, STEPS_GRID)) + "}", chosen=", ".join(map(str, chosen)),
        floor=lambda_floor, energy=label_energy, floor_how=floor_how)
    return BootstrapIntervals(estimate=scaling.coefficients(beta, label_at), low=low, high=high, stderr=stderr,
                              covers="noise+sampling" if s2 > 0 else "noise", method=method)


def label_energy(scaling: Scaling, constant_entry: float, sigma: float) -> float | None:
    """Y ≥ ‖y‖² (vector units) from the released constant diagonal n·v² + noise, or None without a constant column.

    n ≤ (entry + 5σ)/v² (5 noise sds: fails with probability 3·10⁻⁷); the label is at most 1 in the vector with a
    bound (it maps to [−1, 1]) and at most the norm bound B = v·√size without one (rows clipped to ‖a‖ ≤ B).
    """
    k = scaling.constant_at
    if k is None:
        return None
    v = scaling.constant_value
    n_up = max(constant_entry + 5.0 * sigma, 0.0) / v**2
    label_bounded = scaling.bounds[-1] is not None
    return n_up * (1.0 if label_bounded else v**2 * scaling.size)


def gaussian_lambda_floor(xtx: np.ndarray, sigma: float, alpha: float = 1e-3) -> float:
    """A lower bound on λ_min(XᵀX) from XᵀX̂ = XᵀX + N (N symmetric N(0, σ²) entries), failing with prob. ≤ α.

    Weyl: λ_min(XᵀX) ≥ λ_min(XᵀX̂) − ‖N‖₂, and ‖N‖₂ ≤ 2σ√p + 2σ√ln(2/α) with probability ≥ 1 − α (the Gaussian
    spectral bound of :func:`spark_dp.second_moment.uncertainty.spectral_error`).
    """
    p = xtx.shape[0]
    noise = 2.0 * sigma * math.sqrt(p) + 2.0 * sigma * math.sqrt(math.log(2.0 / alpha))
    return float(np.linalg.eigvalsh(0.5 * (xtx + xtx.T))[0]) - noise


# -- every mechanism: the release's own noise law (Wishart, JL, inverse-Wishart, Analyze Gauss with psd, fits
#    through the origin) --------------------------------------------------------------------------------------

MECHANISM_METHOD = ("parametric bootstrap from the released matrix (Ferrando, Wang & Sheldon, AISTATS 2022; fixed "
                    "design, {draws} draws, basic/pivotal interval), each draw through the mechanism's own noise "
                    "law: {law}")


def _standard_wishart(rng: np.random.Generator, draws: int, q: int, dof: int) -> np.ndarray:
    """``draws`` matrices W ~ W_q(I, dof) by Bartlett's decomposition (W = AAᵀ, A lower triangular)."""
    a = np.tril(rng.standard_normal((draws, q, q)), -1)
    idx = np.arange(q)
    a[:, idx, idx] = np.sqrt(rng.chisquare(dof - idx, size=(draws, q)))
    return a @ np.swapaxes(a, -1, -2)


def _sqrt_psd(s: np.ndarray) -> np.ndarray:
    """A square root L (LLᵀ = S) of each matrix of a stack of PSD matrices."""
    try:
        return np.linalg.cholesky(s)
    except np.linalg.LinAlgError:
        vals, vecs = np.linalg.eigh(s)
        return vecs * np.sqrt(np.clip(vals, 0.0, None))[..., None, :]


@dataclass(frozen=True)
class NoiseLaw:
    """A second-moment release's noise and post-processing from its plan's public fields, for bootstrap draws.

    Attributes:
        mechanism: the registry name.
        sigma: Analyze Gauss's entry σ.
        scale: Wishart's B².
        dof: Wishart's k, JL's r, inverse-Wishart's m.
        w2: JL's / inverse-Wishart's ridge w².
        shift: the multiple of I the post-processing adds (before a ``psd`` projection).
        psd: whether the release is projected onto the PSD cone.
    """

    mechanism: str
    sigma: float = 0.0
    scale: float = 0.0
    dof: int = 0
    w2: float = 0.0
    shift: float = 0.0
    psd: bool = False

    @classmethod
    def of(cls, mechanism: str, privacy: Mapping[str, Any], params: Mapping[str, Any], norm_bound: float,
           size: int) -> NoiseLaw:
        from spark_dp.second_moment.uncertainty import _shift

        post = params.get("postprocess", "none")
        shift = _shift({**privacy, "_mechanism": mechanism}, params, size, norm_bound)
        fields: dict[str, Any] = {"shift": shift, "psd": post == "psd"}
        if mechanism == "analyze_gauss":
            fields["sigma"] = float(privacy["noise_scale"])
        elif mechanism == "wishart":
            fields.update(scale=norm_bound**2, dof=int(privacy["dof"]))
        elif mechanism in ("jl_ridge", "inverse_wishart"):
            fields.update(w2=float(privacy["ridge_w2"]),
                          dof=int(privacy["projection_rows" if mechanism == "jl_ridge" else "dof"]))
        else:
            raise ValueError(f"bug: no noise law for mechanism {mechanism!r}")
        return cls(mechanism, **fields)

    @property
    def mean(self) -> float:
        """E[release] − AᵀA as a multiple of I (0 after a ``psd`` projection, which is not linear)."""
        if self.psd:
            return 0.0
        return self.shift + {"analyze_gauss": 0.0, "wishart": self.dof * self.scale}.get(self.mechanism, self.w2)

    @property
    def kept(self) -> float:
        """The part of :attr:`mean` the fit keeps as a ridge: Analyze Gauss's ``shift`` c·I (Sheffet's choice)."""
        return self.mean if self.mechanism == "analyze_gauss" else 0.0

    @property
    def floor(self) -> float:
        """The size of one entry's noise (a floor that keeps the bootstrap world's XᵀX invertible)."""
        if self.mechanism == "analyze_gauss":
            return self.sigma
        if self.mechanism == "wishart":
            return self.scale * math.sqrt(self.dof)
        return self.w2 * math.sqrt(2.0 / self.dof)

    def describe(self) -> str:
        law = {"analyze_gauss": f"AtA + N, N symmetric N(0, sigma^2) entries, sigma = {self.sigma:.6g}",
               "wishart": f"AtA + W, W ~ W(B^2 I, k), B^2 = {self.scale:.6g}, k = {self.dof}",
               "jl_ridge": f"W(AtA + w^2 I, r)/r, w^2 = {self.w2:.6g}, r = {self.dof}",
               "inverse_wishart": f"(m - d - 1) W^-1(AtA + w^2 I, m), w^2 = {self.w2:.6g}, m = {self.dof}"}
        out = law[self.mechanism]
        if self.shift and not (self.psd and self.mechanism == "analyze_gauss"):
            out += f", {self.shift:+.6g} I"
        return out + (", projected onto the PSD cone" if self.psd else "")

    def draw(self, rng: np.random.Generator, truth: np.ndarray) -> np.ndarray:
        """Releases of each matrix of ``truth`` (draws, q, q; PSD) under this law, post-processing included."""
        draws, q = truth.shape[0], truth.shape[-1]
        eye = np.eye(q)
        if self.mechanism == "analyze_gauss":
            out = truth + _symmetric_noise(rng, draws, q, self.sigma)
        elif self.mechanism == "wishart":
            out = truth + self.scale * _standard_wishart(rng, draws, q, self.dof)
        else:
            root = _sqrt_psd(truth + self.w2 * eye)
            w = _standard_wishart(rng, draws, q, self.dof)
            if self.mechanism == "jl_ridge":
                inner = w / self.dof
            else:
                inner = (self.dof - q - 1) * np.linalg.inv(w)
            out = root @ inner @ np.swapaxes(root, -1, -2)
        if self.shift and not (self.psd and self.mechanism == "analyze_gauss"):  # AG projects the release as drawn
            out = out + self.shift * eye
        if self.psd:
            from spark_dp.second_moment._postprocess import project_psd

            out = project_psd(0.5 * (out + np.swapaxes(out, -1, -2)))
        return out


def mechanism_bootstrap(
    released: np.ndarray,
    *,
    law: NoiseLaw,
    scaling: Scaling,
    label_at: int,
    through_origin: bool = False,
    ridge: float = 0.0,
    level: float = 0.95,
    draws: int = 2000,
    rng: np.random.Generator | None = None,
    unregularised: bool = False,
    sampling: bool = True,
) -> BootstrapIntervals:
    """Coefficient intervals (data units) for a regression released with any second-moment mechanism.

    ``sampling=False``: the privacy noise only (``covers="noise"``; the truth
    is the non-private fit of the same rows), the world's labels fixed.

    ``unregularised``: the interval of the fit of the release minus its whole mean offset with no ridge (the
    user's ``ridge`` and Analyze Gauss's ``shift`` left out), for releases whose ridge's bias is not corrected.

    The parametric bootstrap of the module doc with the release's own noise
    law (:class:`NoiseLaw`) applied to the whole bootstrap matrix
    [Z y*]ᵀ[Z y*] (label row included: the JL and inverse-Wishart noise
    depends on it), then the release's post-processing and the same fit:

    * the truth's estimate Ĝ = released − E[noise]·I (Wishart k·B², JL and
      inverse-Wishart w², Analyze Gauss's shift; after a ``psd`` projection
      the projected release itself), its XᵀX block floored at one entry's
      noise size;
    * the fixed-design world y* = Zγ̂ + e, e ~ N(0, σ̂²): Zᵀy* = ZᵀZγ̂ + ξ,
      ξ ~ N(0, σ̂²ZᵀZ), and y*ᵀy* = uᵀZᵀZu + σ̂²χ²_{n̂ − rank Z} with
      u = γ̂ + (ZᵀZ)⁻¹ξ (exact for Gaussian errors), Z the vector's
      non-label columns (the constant included);
    * the statistic: the fit of release − (E[noise] − ridge kept)·I — for
      Wishart, JL and inverse-Wishart with post-processing ``none`` the
      release's mean offset (k·B², w²) is a ridge that shrinks the released
      coefficients towards 0, so the interval is centred on the fit of the
      mean-corrected release (an unbiased matrix estimate), not on the
      released coefficients; Analyze Gauss's ``shift`` is kept (with
      one pilot round of bias correction — the iterated-Tikhonov centring of
      :func:`regression_bootstrap` is not applied to fits through the origin).

    ``through_origin`` with a constant column (``bounds``, no intercept): the
    fit is solved in the data's units without the constant (as the release
    does), and the world's design still has the constant column (its sums
    enter the noise-unit matrix). Without a constant column n is not in the
    release: no sampling term (``covers="noise"``; the truth is then the
    non-private fit on the same clipped rows).
    """
    rng = rng if rng is not None else np.random.default_rng()
    q = released.shape[0]
    k = scaling.constant_at
    data_units = through_origin and k is not None
    a = scaling.transform() if data_units else np.eye(q)
    a_inv = np.linalg.inv(a)
    eye = np.eye(q)
    design = np.array([i for i in range(q) if i != label_at])
    pos = np.array([j for j, i in enumerate(design) if not (data_units and i == k)])
    cols = design[pos]
    offset = law.mean - law.kept  # removed from every release before the fit
    kept = law.kept
    if unregularised:  # the fit without any ridge (the shift removed too): no ridge bias to correct
        offset, kept, ridge = law.mean, 0.0, 0.0

    def statistic(m: np.ndarray) -> np.ndarray:
        f = a @ (m - offset * eye) @ a.T
        return _solve(f[..., cols[:, None], cols] + ridge * np.eye(len(cols)), f[..., cols, label_at])

    g = a @ (0.5 * (released + released.T) - law.mean * eye) @ a.T
    zz, zy, yy = g[np.ix_(design, design)], g[design, label_at], g[label_at, label_at]
    vals, vecs = np.linalg.eigh(zz)
    floor = max(law.floor * float(np.linalg.svd(a, compute_uv=False)[-1]) ** 2, 1e-12 * max(abs(vals[-1]), 1.0))
    zz_pd = (vecs * np.maximum(vals, floor)) @ vecs.T
    chol = np.linalg.cholesky(zz_pd)
    est = statistic(released)
    gamma = np.zeros(len(design))
    gamma[pos] = est
    resid = max(float(yy - 2.0 * gamma @ zy + gamma @ zz_pd @ gamma), 0.0)
    sampling = sampling and k is not None
    n_hat = g[k, k] / (1.0 if data_units else scaling.constant_value) ** 2 if sampling else 0.0
    s2 = resid / (n_hat - len(cols)) if sampling and n_hat - len(cols) > 1 else 0.0
    rest = max(n_hat - len(design), 1.0)

    def replicate(gamma: np.ndarray) -> np.ndarray:
        xi = math.sqrt(s2) * rng.standard_normal((draws, len(design))) @ chol.T
        u = gamma + np.linalg.solve(zz_pd, xi.T).T
        world = np.empty((draws, q, q))
        world[:, design[:, None], design] = zz_pd
        world[:, design, label_at] = world[:, label_at, design] = u @ zz_pd
        world[:, label_at, label_at] = np.einsum("bi,ij,bj->b", u, zz_pd, u) + (
            s2 * rng.chisquare(rest, draws) if sampling else resid)
        return statistic(law.draw(rng, a_inv @ world @ a_inv.T))

    if kept:  # Analyze Gauss's shift is a ridge: the pilot round's bias correction (regression_bootstrap)
        gamma[pos] = est + (est - replicate(gamma).mean(axis=0))
    star = replicate(gamma)

    def out(b: np.ndarray) -> np.ndarray:
        return b if data_units else scaling.coefficients(b, label_at)

    centre = out(est)
    dev = out(star) - out(gamma[pos])
    a2 = (1.0 - level) / 2.0
    q_low, q_high = np.quantile(dev, [a2, 1.0 - a2], axis=0)
    method = MECHANISM_METHOD.format(draws=draws, law=law.describe())
    if offset:
        method += (f"; centred on the fit of the release minus its mean offset {offset:.6g} I (an unbiased estimate of "
                   "A^T A), not on the released coefficients, which that offset shrinks like a ridge")
    return BootstrapIntervals(estimate=centre, low=centre - q_high, high=centre - q_low, stderr=robust_stderr(dev, level),
                              covers="noise+sampling" if sampling else "noise", method=method)


def regression_intervals(
    mechanism: str, privacy: Mapping[str, Any], params: Mapping[str, Any], released: np.ndarray, beta: np.ndarray, *,
    scaling: Scaling, label_at: int, norm_bound: float, fit_intercept: bool, ridge: float = 0.0, level: float = 0.95,
    draws: int = 2000, rng: np.random.Generator | None = None, covers: str = "noise",
) -> dict:
    """``coefficients`` (and ``intercept``) intervals of a regression released with ``mechanism`` (data units).

    ``covers``: ``"noise"`` (default) — the privacy noise only; the truth is
    the fit a non-private run would print on the same rows. ``"noise+sampling"``
    — also the sampling error of a fixed-design model with errors of constant
    variance (:data:`HOMOSCEDASTIC`); it needs the constant column (n̂).

    ``released`` is the matrix in the noise's units (post-processed), label
    at ``label_at``; ``beta`` the released fit: on the vector's non-label
    entries, or with a constant column and ``fit_intercept=False`` (bounds,
    no intercept) the fit in the data's units without the constant. Analyze
    Gauss with post-processing ``none``/``shift`` fitted on the vector:
    :func:`regression_bootstrap`; every other case :func:`mechanism_bootstrap`
    with the mechanism's :class:`NoiseLaw`.
    """
    from spark_dp.release.uncertainty import Uncertainty, normal_quantile

    through_origin = not fit_intercept and scaling.constant_at is not None
    post = params.get("postprocess", "none")
    k = scaling.constant_at
    if covers not in REGRESSION_COVERS:
        raise ValueError(f"covers must be one of {REGRESSION_COVERS}, got {covers!r}")
    sampling = covers == "noise+sampling" and k is not None

    def parts(p: int) -> dict[str, np.ndarray]:
        return ({"coefficients": np.arange(p)} if not fit_intercept or k is None else
                {"coefficients": np.delete(np.arange(p), k), "intercept": np.array([k])})

    part = parts(released.shape[0] - 1)
    shift = 2.0 * float(privacy["noise_sigma"]) * math.sqrt(released.shape[0]) if (
        mechanism == "analyze_gauss" and post == "shift") else 0.0
    if mechanism == "analyze_gauss" and post in ("none", "shift") and not through_origin and shift + ridge > 0:
        sigma = float(privacy["noise_sigma"])
        got = _ridge_bias_bounded(released, beta, sigma=sigma, shift=shift, ridge=ridge, scaling=scaling,
                                  label_at=label_at, level=level, draws=draws, rng=rng, sampling=sampling)
        if isinstance(got, str):  # the ridge's bias cannot be bounded: the unregularised fit's interval instead
            unshifted = released - shift * np.eye(released.shape[0])  # Analyze Gauss's law without a ridge
            if not sampling:  # its exact pivot, where Fieller's set is bounded (as without the shift)
                piv = pivot_regression(unshifted, sigma=sigma, scaling=scaling, label_at=label_at, level=level)
                if piv.bounded.all():
                    stderr = (piv.high - piv.low) / (2.0 * normal_quantile(level))
                    method = PIVOT_METHOD + UNREGULARISED_PIVOT.format(reason=_ridge_reason(got))
                    return {name: Uncertainty(low=piv.low[idx], high=piv.high[idx], stderr=stderr[idx],
                                              method=method, covers="noise") for name, idx in part.items()}
            got = unregularised_bootstrap(unshifted, sigma=sigma,
                                          sigma_xy=sigma, scaling=scaling, label_at=label_at, level=level,
                                          draws=draws, rng=rng, sampling=sampling, reason=got)
            method = got.method + "; approximate, measured coverage (docs/accuracy.md): " + _measured(
                mechanism, "none", through_origin, raw=k is None, sampling=sampling) + (HOMOSCEDASTIC if sampling else "")
            method = CONSERVATIVE.format(floor=gaussian_lambda_floor(_block(released, label_at, shift), sigma),
                                         how=GAUSSIAN_FLOOR_HOW) + method  # the refusal above: this floor <= 0
            return {name: Uncertainty(low=got.low[idx], high=got.high[idx], stderr=got.stderr[idx], method=method,
                                      covers=got.covers) for name, idx in part.items()}
        return {name: Uncertainty(low=got.low[idx], high=got.high[idx], stderr=got.stderr[idx],
                                  method=got.method + (HOMOSCEDASTIC if sampling else ""), kind="bound",
                                  covers=got.covers)
                for name, idx in part.items()}
    fallback = ""
    if mechanism == "analyze_gauss" and post in ("none", "psd") and not through_origin and not sampling and (
            ridge == 0 and (post == "none" or not _projected(released))):  # an unprojected release may be indefinite
        sigma = float(privacy["noise_sigma"])
        got = pivot_regression(released, sigma=sigma, scaling=scaling, label_at=label_at, level=level)
        if got.bounded.all():
            stderr = (got.high - got.low) / (2.0 * normal_quantile(level))
            return {name: Uncertainty(low=got.low[idx], high=got.high[idx], stderr=stderr[idx], method=PIVOT_METHOD,
                                      covers="noise") for name, idx in part.items()}
        fallback = PIVOT_UNBOUNDED
    if mechanism == "analyze_gauss" and post in ("none", "shift") and not through_origin:
        sigma = float(privacy["noise_sigma"])
        got = regression_bootstrap(released, beta, sigma=sigma, scaling=scaling, label_at=label_at,
                                   shift=2.0 * sigma * math.sqrt(released.shape[0]) if post == "shift" else 0.0,
                                   ridge=ridge, level=level, draws=draws, rng=rng, sampling=sampling)
    else:
        law = NoiseLaw.of(mechanism, privacy, params, norm_bound, released.shape[0])
        if law.psd:  # the draws without the projection (PSD_METHOD)
            law = dataclasses.replace(law, psd=False)
        biased = ridge > 0 or law.kept > 0  # a ridge (the user's, or the shift kept by Analyze Gauss's fit)
        got = mechanism_bootstrap(released, law=law, scaling=scaling, label_at=label_at, through_origin=through_origin,
                                  ridge=ridge, level=level, draws=draws, rng=rng, unregularised=biased,
                                  sampling=sampling)
        if biased:
            got = BootstrapIntervals(got.estimate, got.low, got.high, got.stderr, got.covers, got.method + (
                UNREGULARISED.format(reason=f"the ridge {ridge + law.kept:.6g} biases the fit by an amount that "
                                     "depends on the unknown coefficients and is not bounded for this form")))
    method = got.method + fallback + ((PSD_METHOD if post == "psd" else "") + "; approximate, measured coverage (docs/accuracy.md): " + _measured(
        mechanism, post, through_origin, raw=k is None, sampling=sampling)) + (
            HOMOSCEDASTIC if got.covers == "noise+sampling" else "")
    floor, how = design_floor(mechanism, privacy, params, released, norm_bound=norm_bound, label_at=label_at)
    if floor <= 0:
        method = CONSERVATIVE.format(floor=floor, how=how) + method
    elif mechanism == "jl_ridge" and not sampling:
        method += JL_UNMARKED
    part = parts(got.estimate.size)
    return {name: Uncertainty(low=got.low[idx], high=got.high[idx], stderr=got.stderr[idx], method=method,
                              covers=got.covers) for name, idx in part.items()}


def _projected(released: np.ndarray) -> bool:
    """Whether a ``psd`` projection clipped an eigenvalue of the release (it then has one at 0)."""
    vals = np.linalg.eigvalsh(0.5 * (released + released.T))
    return bool(vals[0] <= 1e-9 * max(abs(vals[-1]), 1e-300))


def pivot_regression(released: np.ndarray, *, sigma: float, scaling: Scaling, label_at: int,
                     level: float) -> PivotIntervals:
    """Analyze Gauss, noise only, no ridge: :func:`.pivot.fieller_intervals` of the coefficients in data units."""
    m = 0.5 * (released + released.T)
    feats = [i for i in range(m.shape[0]) if i != label_at]
    weights, offset = affine_map(lambda b: scaling.coefficients(b, label_at), len(feats))
    return fieller_intervals(m[np.ix_(feats, feats)], m[feats, label_at], sigma=sigma, weights=weights,
                             offset=offset, level=level)


#: The interval of an Analyze Gauss regression without a ridge, noise only (:mod:`.pivot`), and what it was measured at.
PIVOT_METHOD = PIVOT_BASE + ("; measured (docs/accuracy.md): on 16 real tables (eps 0.3, 1 and 4, rows per unit 1 and "
                             "4) the worst term held the truth in 91 % of the releases or more in every cell at 100 "
                             "releases, 0.94-0.96 where re-measured at 1,000; the level is over all releases of a "
                             "table, the unbounded sets (given as the bootstrap, marked conservative) included")

#: Said of the bootstrap interval that replaces the pivot's where the pivot's set is unbounded.
PIVOT_UNBOUNDED = ("; the exact pivot's interval (Fieller's) is unbounded for at least one coefficient of this release: "
                   "the noise on X^T X is as large as the design's signal in some direction")

#: A ``psd`` release's interval: its bootstrap draws are not projected (they were before 2026-12-05).
PSD_METHOD = ("; the draws are not projected onto the PSD cone: in the bootstrap's world, built from the projected "
              "release (whose smallest eigenvalues the projection clipped to 0 or the noise biased low), projected "
              "draws are clipped far more often than the release was, which shrank them and the interval (a real "
              "table of 327,346 rows: one term held 0.88 with projected draws, 0.95 without); where the projection "
              "did not act the release is the unprojected one, whose law this is")

#: Said of every interval with a sampling term (``covers="noise+sampling"``, asked for): its errors have one variance.
HOMOSCEDASTIC = ("; the sampling term assumes errors of constant variance (the release holds X^T X, X^T y and y^T y "
                 "only, too little to estimate a variance that changes with the features): where the sampling error "
                 "dominates the privacy noise (many rows) it is the textbook non-robust OLS interval, which on real "
                 "tables with heteroscedastic errors held the truth in as few as 42 % of the samples for one term "
                 "(diamonds, 53,940 rows; 69 % and 80 % on two others; docs/accuracy.md)")

#: Said of a JL interval not marked conservative (its release's lower bound on λ_min(XᵀX) is above 0): its level is
#: over the releases of a table, and the mark, a statistic of the release's noise, selects releases.
JL_UNMARKED = ("; not marked conservative. The level is over the releases of a table, as every interval's here, not "
               "over releases picked by their own noise: on tables where most JL releases are marked conservative, "
               "the few that are not are those whose noise lifted the design's weakest direction, and they held the "
               "worst term in 81-86 % of them (all releases of those tables 95-97 %), as releases picked so do under "
               "any interval: Analyze Gauss's exact pivot held 67-73 % on a real table in the 3 % of its releases whose "
               "noise moved that direction most (docs/accuracy.md, 'JL's conservative mark')")

#: The prefix of the method of an interval whose release cannot show that its noise is small against the design's
#: weakest direction (:func:`design_floor` <= 0): measured conservative there, and said so first.
CONSERVATIVE = ("conservative (usually wider than the level needs: on the real tables of docs/accuracy.md such "
                "intervals held the truth in every release in three cells of four, and in at least 92 % of the "
                "releases in every cell): the privacy noise may swamp the design's "
                "weakest direction, since a lower bound on the smallest eigenvalue of X^T X from the release is "
                "{floor:.6g} <= 0 ({how}); the bootstrap's world, built from the release, then has heavier tails "
                "than the truth's. ")

GAUSSIAN_FLOOR_HOW = ("the released X^T X minus a bound on its Gaussian noise's spectral norm holding with probability "
                      "0.999, Weyl")


def _block(released: np.ndarray, label_at: int, shift: float = 0.0) -> np.ndarray:
    """The X^T X block (every non-label entry, the constant's included) of a release, minus ``shift`` I."""
    feats = [i for i in range(released.shape[0]) if i != label_at]
    m = 0.5 * (released + released.T)
    return m[np.ix_(feats, feats)] - shift * np.eye(len(feats))


def design_floor(mechanism: str, privacy: Mapping[str, Any], params: Mapping[str, Any], released: np.ndarray, *,
                 norm_bound: float, label_at: int, alpha: float = 1e-3) -> tuple[float, str]:
    """(λ_lo, how): a lower bound on λ_min(XᵀX) (the vector's units) from the release, failing with prob. ≤ α.

    Public arithmetic on the release. Additive noise (Analyze Gauss,
    Wishart): Weyl, λ_min(XᵀX) ≥ λ_min(released block − c·I) − r with
    ‖released − AᵀA − c·I‖₂ ≤ r (:func:`.uncertainty.spectral_error`; a
    block's noise norm is at most the whole matrix's). Multiplicative (JL,
    inverse-Wishart, S = L·M·Lᵀ with LLᵀ = Σ = AᵀA + w²I and M's
    eigenvalues in [θ_lo, θ_hi]): uᵀS_XX u ≤ θ_hi·uᵀΣ_XX u for every u
    (Courant–Fischer), so λ_min(XᵀX) ≥ λ_min(S_XX)/θ_hi − w². After a
    ``psd`` projection P that clipped an eigenvalue (the release has one at
    0) the additive bound doubles (‖P(M) − AᵀA‖₂ ≤ 2‖M − AᵀA‖₂); one that
    clipped none left the release unchanged.
    """
    from spark_dp.second_moment.uncertainty import _multiplicative_range, _shift, spectral_error

    size = released.shape[0]
    level = 1.0 - alpha
    post = params.get("postprocess", "none")
    vals = np.linalg.eigvalsh(0.5 * (released + released.T))
    clipped = post == "psd" and vals[0] <= 1e-9 * max(abs(vals[-1]), 1e-300)
    if mechanism == "analyze_gauss":
        sigma = float(privacy["noise_sigma"])
        shift = 2.0 * sigma * math.sqrt(size) if post == "shift" else 0.0
        floor = gaussian_lambda_floor(_block(released, label_at, shift), sigma, alpha)
        if clipped:  # the noise bound once more: ||P(M) - A^T A|| <= 2 ||N||
            floor -= 2.0 * sigma * (math.sqrt(size - 1) + math.sqrt(math.log(2.0 / alpha)))
        return floor, GAUSSIAN_FLOOR_HOW + (", doubled after the PSD projection" if clipped else "")
    err = spectral_error(mechanism, privacy, params, size, norm_bound, level)
    if err is not None:
        c, r = err
        block = _block(released, label_at)
        if clipped:
            return float(np.linalg.eigvalsh(block)[0]) - 2.0 * (abs(c) + r), (
                "the released X^T X minus twice a bound on the Wishart noise's spectral norm holding with probability "
                "0.999 (Davidson & Szarek 2001; twice: the PSD projection), Weyl")
        return float(np.linalg.eigvalsh(block - c * np.eye(size - 1))[0]) - r, (
            "the released X^T X minus the Wishart noise's mean and a bound on its spectral norm holding with "
            "probability 0.999 (Davidson & Szarek 2001), Weyl")
    w2 = float(privacy["ridge_w2"])
    s = -_shift({**privacy, "_mechanism": mechanism}, params, size, norm_bound)  # w² removed by shift / psd
    _, hi_t = _multiplicative_range(mechanism, privacy, size, level)
    top = float(np.linalg.eigvalsh(_block(released, label_at, -s))[0])
    floor = top / hi_t - w2 if math.isfinite(hi_t) else -w2
    return floor, ("the released X^T X plus its removed ridge, over the largest eigenvalue of the multiplicative "
                   f"{mechanism} noise with probability 0.999 (Davidson & Szarek 2001), minus the ridge w^2")

UNREGULARISED = ("; {reason}: the interval is instead that of the unregularised fit (X^T X)^-1 X^T y of the same "
                 "release (the same truth; the released ridge coefficients may lie outside it); conservative where the noise "
                 "dominates X^T X: it held the truth in 100 % of the releases on the collinear tables of "
                 "docs/accuracy.md's calibration")


def unregularised_bootstrap(matrix: np.ndarray, *, sigma: float, sigma_xy: float, scaling: Scaling, label_at: int,
                            level: float, draws: int, rng: np.random.Generator | None, sampling: bool,
                            reason: str) -> BootstrapIntervals:
    """The interval of the unregularised fit of the release (``matrix``: the release minus any shift), which has no
    ridge bias, for a release whose ridge's bias cannot be bounded; ``reason`` says why (the method string).
    """
    m = 0.5 * (matrix + matrix.T)
    feats = [i for i in range(m.shape[0]) if i != label_at]
    fit = _solve(m[np.ix_(feats, feats)], m[feats, label_at])
    got = regression_bootstrap(m, fit, sigma=sigma, sigma_xy=sigma_xy, scaling=scaling, label_at=label_at,
                               level=level, draws=draws, rng=rng, sampling=sampling, steps=0)
    return BootstrapIntervals(got.estimate, got.low, got.high, got.stderr, got.covers,
                              got.method + UNREGULARISED.format(reason=_ridge_reason(reason)))


def _ridge_reason(refusal: str) -> str:
    """Why a ridge's bias cannot be bounded, from :data:`REFUSED_RIDGE`'s text (for the fallback's method)."""
    return refusal.removeprefix("no interval: ").split(", so no interval")[0].split("; use more rows")[0]


#: Said of the exact pivot's interval of the unregularised fit given after a ridge whose bias cannot be bounded.
UNREGULARISED_PIVOT = ("; {reason}: the interval is instead that of the unregularised fit (X^T X)^-1 X^T y of the "
                       "same release less its shift, if any: the same truth (the released ridge coefficients may lie "
                       "outside it), and a matrix with Analyze Gauss's noise without a ridge, whose exact pivot this "
                       "is")


REFUSED_RIDGE = ("no interval: the ridge r = {r:.6g} (the shift c I{user}) biases the fit by an amount that depends on "
                 "the unknown coefficients, and {why}, so no interval can be shown to hold; use more rows, a larger "
                 "epsilon, fewer or less correlated columns, or postprocess none, or the released coefficients as a "
                 "point estimate only")


def _ridge_bias_bounded(released: np.ndarray, beta: np.ndarray, *, sigma: float, shift: float, ridge: float,
                        scaling: Scaling, label_at: int, level: float, draws: int,
                        rng: np.random.Generator | None, sampling: bool = True) -> BootstrapIntervals | str:
    """Analyze Gauss after a ridge (``shift`` and/or ``ridge``): :func:`bias_bounded_bootstrap` with the sampling
    term, λ_lo from the release (:func:`gaussian_lambda_floor`); the refusal's reason (a str) where it cannot.
    """
    r = shift + ridge
    user = " plus the ridge" if ridge and shift else ""
    m = 0.5 * (released + released.T) - shift * np.eye(released.shape[0])
    feats = [i for i in range(m.shape[0]) if i != label_at]
    xtx, xty, yy = m[np.ix_(feats, feats)], m[feats, label_at], m[label_at, label_at]
    k = scaling.constant_at
    energy = None if k is None else label_energy(scaling, float(m[k, k]), sigma)
    if energy is None:
        return REFUSED_RIDGE.format(r=r, user=user, why="without the constant column the release bounds no row count")
    floor = gaussian_lambda_floor(xtx, sigma)
    if floor <= 0:
        return REFUSED_RIDGE.format(r=r, user=user, why=(
            "the released X^T X minus a high-probability bound on its noise has no positive smallest eigenvalue "
            "(the design is too close to collinear, or n too small, for the noise at this epsilon)"))
    vals = np.linalg.eigvalsh(xtx)
    xtx_pd_floor = max(sigma, 1e-12 * max(abs(vals[-1]), 1.0))
    xtx_pd = (lambda w, v: (v * np.maximum(w, xtx_pd_floor)) @ v.T)(*np.linalg.eigh(xtx))
    n_hat = m[k, k] / scaling.constant_value**2
    dof = n_hat - len(feats)
    resid = yy - 2.0 * beta @ xty + beta @ xtx_pd @ beta
    s2 = max(resid, 0.0) / dof if sampling and dof > 1 else 0.0
    return bias_bounded_bootstrap(m, beta, sigma=sigma, sigma_xy=sigma, scaling=scaling, label_at=label_at, ridge=r,
                                  lambda_floor=floor, label_energy=energy, level=level, draws=draws, rng=rng,
                                  s2=s2, floor_how=("the smallest eigenvalue of the released X^T X minus a bound on "
                                                    "its Gaussian noise's spectral norm holding with probability "
                                                    "0.999 (Weyl)"))


def _measured(mechanism: str, post: str, through_origin: bool, *, raw: bool, sampling: bool = True) -> str:
    """What was measured for these intervals: without the sampling term on the real tables of
    benchmarks/calibration.py; with it (or raw rows) benchmarks/coverage.py's (p = 2, n = 2,000 and 20,000,
    eps = 0.5 and 1), stated where it leaves [0.93, 0.97].
    """
    if not sampling and not raw:
        return ("the worst term 0.90-1.00 in every cell of 13 real tables (3,000-330,000 rows, 2-9 features, "
                "near-collinear designs included; eps 0.3, 1 and 4, rows per unit 1 and 4; 100 releases each)")
    if raw:
        return "0.945-0.96 at n = 20,000; conservative (1.00) at n = 2,000, where the noise dominates X^T X"
    if mechanism == "wishart":
        return "0.93-0.96 at n = 20,000; conservative (up to 1.00) at n = 2,000, where the noise dominates X^T X"
    if mechanism == "jl_ridge":
        return "coefficients 0.948-0.973; the intercept 0.915-0.968, below 0.93 at n = 20,000, eps = 1"
    if mechanism == "inverse_wishart":
        return ("coefficients 0.93-0.975; the intercept under-covers in two of four settings (0.87 and 0.90, "
                "100 releases each)")
    if through_origin and post == "none":
        return "0.929-0.956"
    if through_origin and post == "shift":
        return "0.94-0.965 (the unregularised fit's interval; p = 2, n = 2,000 and 20,000, eps = 1, 100 releases)"
    if post == "psd":
        return "0.92-0.97 (0.92 at n = 20,000, eps = 0.5)"
    return "0.935-0.98 (the intercept 0.978 at n = 2,000, eps = 0.5)"


# -- AdaSSP: the generalised Fieller interval of its exact pivot ------------------------------------------------

#: The method of AdaSSP's coefficient intervals where the Fieller set is bounded (:func:`adassp_fieller_intervals`).
FIELLER_METHOD = (
    "generalised Fieller interval of AdaSSP's exact pivot g(b) = X^T y_hat - X^T X_hat b: at the true coefficients "
    "b (the non-private fit of the same rows, X^T X b = X^T y) g = E_3 - E_2 b is exactly Gaussian with mean 0 and "
    "covariance Sigma(b) = sigma_3^2 I + sigma_2^2 (||b||^2 I + b b^T - diag(b^2)) (E_2 symmetric, mirror entries "
    "sharing one draw), so Q(b) = g(b)^T Sigma(b)^-1 g(b) is chi-square(p) there. Each term's interval is the set "
    "of its values t whose profile min over {{b : term(b) = t}} of Q is at most q = z^2 R/(R - z^2) = {q_eff:.4g} "
    "(z^2 = {q:.4g}; R = {r:.4g} is Q's limit along the design's weakest direction: the threshold is z^2 for a "
    "well-identified design and grows as R nears z^2, where the profile's chi-square(1) calibration under-covers). "
    "It uses the released X^T X without AdaSSP's ridge lambda, so the ridge's bias does not enter, and it widens "
    "by itself where the noise on X^T X is large against the design (Q grows slowly along its weakest direction); "
    "the released (ridge) coefficients may lie outside it. stderr = half-width / z")

#: Said where the Fieller set is unbounded (another interval is given instead, or none).
FIELLER_UNBOUNDED = (
    "the generalised Fieller set of AdaSSP's exact pivot identifies no finite interval for this release: Q's limit "
    "along the design's weakest direction d, (X^T X_hat d)^T M(d)^-1 (X^T X_hat d) / sigma_2^2 = {r:.4g} (M(d) = "
    "||d||^2 I + d d^T - diag(d^2)), is at most 2 z^2 = {q:.4g} (the noise on X^T X can hide that direction)")


@dataclass(frozen=True)
class FiellerIntervals:
    """Per-term Fieller intervals (data units), or ``bounded=False`` with the set's limit ``r_min`` (<= z²)."""

    low: np.ndarray
    high: np.ndarray
    stderr: np.ndarray
    bounded: bool
    r_min: float
    method: str


def _pivot_q(b: np.ndarray, xtx: np.ndarray, xty: np.ndarray, s2: float, s3: float) -> tuple[float, np.ndarray]:
    """Q(b) = g(b)ᵀΣ(b)⁻¹g(b) and its gradient in b (g = Xᵀŷ − XᵀX̂b)."""
    g = xty - xtx @ b
    w = np.linalg.solve(pivot_covariance(b, s2, s3), g)
    ww, bw = w @ w, b @ w
    grad = -2.0 * (xtx @ w) - s2 * s2 * (2.0 * b * ww + 2.0 * w * bw - 2.0 * b * w * w)
    return float(g @ w), grad


def _pivot_limit(xtx: np.ndarray, s2: float) -> float:
    """inf over directions d of lim_{s→∞} Q(b + s·d) = (X̂d)ᵀM(d)⁻¹(X̂d)/σ₂², M(d) = ‖d‖²I + ddᵀ − diag(d²).

    The Fieller set {Q <= q} is bounded iff this exceeds q (the limit does not depend on b). Minimised from every
    eigenvector of X̂ (the weakest first) with BFGS.
    """
    from scipy.optimize import minimize

    p = xtx.shape[0]

    def ratio(d: np.ndarray) -> float:
        m = (d @ d) * np.eye(p) + np.outer(d, d) - np.diag(d * d)
        xd = xtx @ d
        return float(xd @ np.linalg.solve(m, xd)) / (s2 * s2 * 1.0)

    vals, vecs = np.linalg.eigh(xtx)
    order = np.argsort(np.abs(vals))
    best = math.inf
    for i in order[: min(p, 3)]:
        got = minimize(ratio, vecs[:, i], method="BFGS", options={"gtol": 1e-10, "maxiter": 200})
        best = min(best, float(got.fun), ratio(vecs[:, i]))
    return best


def _newton_min(f, u0: np.ndarray, *, steps: int = 40, gtol: float = 1e-6):
    """A local minimum of f (value and gradient) from u0: Newton's method, the Hessian by central differences of
    the gradient with its eigenvalues floored (a descent direction), halving the step until f decreases. Returns
    (u, f(u)), or (None, nan) where it does not converge (the caller falls back to BFGS).
    """
    u = np.asarray(u0, dtype=np.float64)
    val, grad = f(u)
    k = u.size
    for _ in range(steps):
        if float(np.max(np.abs(grad))) <= gtol:
            return u, val
        h = 1e-6 * max(1.0, float(np.max(np.abs(u))))
        hess = np.empty((k, k))
        for i in range(k):
            e = np.zeros(k)
            e[i] = h
            hess[:, i] = (f(u + e)[1] - f(u - e)[1]) / (2.0 * h)
        w, v = np.linalg.eigh(0.5 * (hess + hess.T))
        w = np.maximum(np.abs(w), 1e-9 * max(float(np.max(np.abs(w))), 1e-300))
        d = -(v @ ((v.T @ grad) / w))
        t = 1.0
        for _ in range(30):
            new_val, new_grad = f(u + t * d)
            if new_val <= val:
                break
            t *= 0.5
        else:
            return None, math.nan
        if abs(val - new_val) <= 1e-13 * max(1.0, abs(val)) and t * float(np.max(np.abs(d))) <= 1e-10 * max(
                1.0, float(np.max(np.abs(u)))):
            return u + t * d, new_val
        u, val, grad = u + t * d, new_val, new_grad
    return (u, val) if float(np.max(np.abs(grad))) <= 1e3 * gtol else (None, math.nan)


def adassp_fieller_intervals(xtx: np.ndarray, xty: np.ndarray, *, sigma: float, sigma_xy: float,
                             scaling: Scaling, label_at: int, level: float = 0.95) -> FiellerIntervals:
    """AdaSSP's coefficient intervals (data units) from its exact pivot, by profiling (module doc, FIELLER_METHOD).

    ``xtx``/``xty``: the released XᵀX̂ (no ridge) and Xᵀŷ in the vector's units; ``sigma``/``sigma_xy``: σ₂, σ₃.
    Term j of the data-unit fit is L_j·b + c_j (:meth:`Scaling.coefficients` is affine). Its interval is
    {t : min_{b: L_j b + c_j = t} Q(b) <= q}, the connected part around the unregularised fit X̂⁻¹ŷ (where
    Q = 0), found by doubling steps outwards and bisection, each profile point a BFGS minimisation over the
    hyperplane warm-started from its neighbour's. q = z²·R/(R − z²), R = :func:`_pivot_limit` (Q's limit
    along the weakest direction): z² (the profile's χ²(1) calibration) where R ≫ z², larger as R nears z², where
    that calibration failed (measured: PSID at ε = 1, the worst term 0.86 with z², 0.93 with this q; on
    well-identified designs the two agree). Unbounded (``bounded=False``, no numbers) where R <= 2z², where the
    profile never exceeds q.
    """
    from scipy.optimize import minimize

    from spark_dp.release.uncertainty import normal_quantile

    z = normal_quantile(level)
    q = z * z
    xtx = 0.5 * (np.asarray(xtx, dtype=np.float64) + np.asarray(xtx, dtype=np.float64).T)
    xty = np.asarray(xty, dtype=np.float64)
    s2, s3 = float(sigma), float(sigma_xy)
    p = xtx.shape[0]
    eye = np.eye(p)
    zero = scaling.coefficients(np.zeros(p), label_at)
    lin = np.stack([scaling.coefficients(eye[j], label_at) - zero for j in range(p)], axis=1)
    r_min = _pivot_limit(xtx, s2)
    nan = np.full(p, np.nan)
    if not r_min > 2.0 * q:
        return FiellerIntervals(nan, nan, nan, False, r_min, FIELLER_UNBOUNDED.format(r=r_min, q=2.0 * q))
    q_eff = q * r_min / (r_min - q)  # the profile's threshold, z^2 where Q's limit is far above it (module doc)
    centre = np.linalg.solve(xtx, xty)  # Q = 0 here
    a_inv = np.linalg.inv(xtx)
    cov = a_inv @ pivot_covariance(centre, s2, s3) @ a_inv  # the linearised covariance: the first step's size
    low, high = np.empty(p), np.empty(p)
    for j in range(p):
        lj = lin[j]
        norm2 = float(lj @ lj)
        basis = np.linalg.svd(lj[None, :])[2][1:].T  # orthonormal, L_j basis = 0
        s_hat = float(lj @ centre)
        step = z * math.sqrt(max(float(lj @ cov @ lj), 1e-300))

        def profile(s: float, start: np.ndarray) -> tuple[float, np.ndarray]:
            base = lj * (s / norm2)
            if p == 1:
                return _pivot_q(base, xtx, xty, s2, s3)[0], base

            def f(u: np.ndarray) -> tuple[float, np.ndarray]:
                val, grad = _pivot_q(base + basis @ u, xtx, xty, s2, s3)
                return val, basis.T @ grad

            u, val = _newton_min(f, basis.T @ (start - base))
            if u is None:  # no convergence: BFGS from the start
                got = minimize(f, basis.T @ (start - base), jac=True, method="BFGS", options={"gtol": 1e-5})
                u, val = got.x, float(got.fun)
            return val, base + basis @ u

        ends = []
        for sign in (1.0, -1.0):
            inside, b_in, outside = 0.0, centre, None
            for k in range(60):  # bounded (r_min > q): the profile exceeds q far enough out
                off = sign * step * 2.0 ** k
                val, b = profile(s_hat + off, b_in)
                if val > q_eff:
                    outside = off
                    break
                inside, b_in = off, b
            if outside is None:
                return FiellerIntervals(nan, nan, nan, False, r_min, FIELLER_UNBOUNDED.format(r=r_min, q=2.0 * q))
            # bisection (the two ends are known: inside at ``inside``, outside at ``outside``)
            while abs(outside - inside) > 1e-3 * step:
                mid = 0.5 * (inside + outside)
                val, b = profile(s_hat + mid, b_in)
                if val > q_eff:
                    outside = mid
                else:
                    inside, b_in = mid, b
            root = 0.5 * (inside + outside)
            ends.append(s_hat + root + zero[j])
        high[j], low[j] = ends
    return FiellerIntervals(low, high, (high - low) / (2.0 * z), True, r_min,
                            FIELLER_METHOD.format(q=q, r=r_min, q_eff=q_eff))
