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

After ``postprocess="shift"`` (Analyze Gauss + 2σ√d·I, which acts as a
ridge) β̂ is shrunk, and a bootstrap world built on it shows too little of
the shrinkage: the world's parameter is then β̂_w = β̂ + (β̂ − mean β*) from
a pilot round of draws (one step of iterated bootstrap bias correction),
and the interval is β̂ − [q_{1−a/2}, q_{a/2}] of β* − β̂_w. The correction is
partial: where the ridge bias is large against the noise the intervals
under-cover (measured in docs/accuracy.md: on the worked example the
non-private OLS coefficients fall inside 47–77 % of them). The cause,
measured there: the bias −c(XᵀX + cI)⁻¹β is linear in the unknown β and
large in the scaled design's weak directions (bounds centred far from the
data make the constant column nearly collinear with the features); more
pilot steps move the centre towards the noisy unshrunk fit without
widening the interval and lower the coverage further, so one step is kept. Without the
shift they cover as claimed but the fit has heavy tails (a few runs in a
hundred blow up).

The draws are mapped to the data's units first (:meth:`Scaling.coefficients`),
so the intercept's interval accounts for its correlation with the
coefficients. ``covers="noise+sampling"`` when the release has the constant
column (n̂ exists); without it the sampling term cannot be estimated from the
release and the intervals cover the privacy noise only (``covers="noise"``).
Clipping bias is not covered: with public bounds and the default norm bound
no row is clipped.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from spark_dp.second_moment._scaling import Scaling

METHOD = ("parametric bootstrap from the released sufficient statistics (Ferrando, Wang & Sheldon, AISTATS 2022; "
          "fixed design, {draws} draws, basic/pivotal interval)")


@dataclass(frozen=True)
class BootstrapIntervals:
    """Per-entry estimate, interval and standard error in data units (coefficients, then the intercept)."""

    estimate: np.ndarray
    low: np.ndarray
    high: np.ndarray
    stderr: np.ndarray
    covers: str
    method: str


def _symmetric_noise(rng: np.random.Generator, draws: int, p: int, sigma: float) -> np.ndarray:
    # Bootstrap replicates of the (public) noise law: post-processing of a release, never released as noise.
    e = rng.normal(0.0, sigma, size=(draws, p, p))
    upper = np.triu(e)
    return upper + np.swapaxes(np.triu(e, 1), 1, 2)


def _solve(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    try:
        return np.linalg.solve(a, b[..., None])[..., 0]
    except np.linalg.LinAlgError:
        return (np.linalg.pinv(a) @ b[..., None])[..., 0]


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
        debias: the pilot round's bias correction (default: with a shift);
            AdaSSP asks for it when its adaptive ridge λ is positive.
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

    def replicate(world: np.ndarray) -> np.ndarray:
        xty_star = xtx_pd @ world + np.sqrt(s2) * rng.standard_normal((draws, p)) @ chol.T
        a_star = xtx_pd + _symmetric_noise(rng, draws, p, sigma) + (shift + ridge) * np.eye(p)
        return _solve(a_star, xty_star + rng.normal(0.0, sigma_xy, size=(draws, p)))

    world = beta
    if shift if debias is None else debias:
        # The shift is a ridge: β̂ is shrunk, and a world built on it shows too little shrinkage. A pilot
        # round estimates the bias at β̂; the world is then the bias-corrected β̂ + (β̂ − mean β*).
        world = beta + (beta - replicate(beta).mean(axis=0))
    beta_star = replicate(world)
    est = scaling.coefficients(beta, label_at)
    star = scaling.coefficients(beta_star, label_at) - scaling.coefficients(world, label_at)
    a = (1.0 - level) / 2.0
    q_low, q_high = np.quantile(star, [a, 1.0 - a], axis=0)
    return BootstrapIntervals(
        estimate=est, low=est - q_high, high=est - q_low, stderr=star.std(axis=0, ddof=1),
        covers="noise+sampling" if sampling else "noise", method=METHOD.format(draws=draws),
    )
