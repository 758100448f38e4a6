"""Error bars of the sketches: each counter's noise interval, each estimate's, and heavy hitters' false-positive rate.

Post-processing of a release's released table and public parameters (the
noise family and scale in the manifest, k, b, the estimator, the threshold);
no privacy cost.

* Counters (arrays ``sketch``, ``dyadic_sketch``, ``histogram``): each is the
  exact counter plus independent N(0, σ²) (Gaussian mechanisms) or
  Laplace(b) noise (Count-Min): exact intervals counter ± z·σ, resp.
  ± b·ln(1/(1 − level)).
* Estimates' noise part (:func:`estimate_noise`; the dry run's figure and
  ``estimate_intervals(..., collisions=False)``): without hash collisions every
  one of the k counters an item maps to holds its true frequency x, so the
  estimate is x + f(g₁, …, g_k) with g i.i.d. noise and f the estimator;
  the interval is the estimate minus f's quantiles. For the median of odd
  k, f is the ((k+1)/2)-th order statistic: F⁻¹ of a Beta((k+1)/2, (k+1)/2)
  quantile (the order statistics of uniforms are Beta distributed; David &
  Nagaraja, *Order Statistics*, 2003, §2.1); for the minimum
  F⁻¹(1 − (1 − q)^{1/k}); for the mean of Gaussians σ/√k; Count-Mean's
  debiased mean (b·mean − N̂)/(b − 1) has noise variance σ²·b/(k(b − 1)).
  Even-k medians and Laplace means are simulated (fixed public seed).
  This is a *lower limit* on the error: on real data other items share an
  item's counters and bias the estimate far beyond it (measured: docs/accuracy.md).
* Estimates' intervals (:func:`estimate_bounds`, :func:`estimate_intervals`,
  ``spark-dp estimate``, ``to_pandas('estimates')``): noise *and* hash
  collisions (``covers: noise+collisions``, kind ``bound``). The collision
  mass — an upper bound on the total N (unsigned sketches) and on F₂ = Σ f² —
  is read from the released table (:func:`collision_rate`); per repetition
  Markov / Cantelli bound the collision, the noise law the rest, and the
  estimator's tail follows from the repetitions' independence
  (:func:`collision_quantiles`). Refused (NaN, kind ``none``, the reason in
  the method) where the release bounds nothing: an unsigned sketch of weights
  that may be negative, or a signed one with too few counters.
* Weight bounds (``count_sketch(bounds=...)``): the stored counters are the
  mechanism's output times the public M, so every scale above is M·σ (resp.
  M·b): :func:`counter_noise` reads it from the manifest.
* Heavy hitters: the false-positive rate of the threshold τ — the
  probability that an item of true frequency 0 (and no collisions) has an
  estimate ≥ τ from the noise alone, 1 − F_f(τ): a lower limit; the
  manifest's ``false_positive_rate_bound`` (:func:`false_positive_rate_bound`)
  includes the collisions.

Everything here is post-processing of released values and public parameters:
no data access, no privacy cost.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from spark_dp.release.uncertainty import DEFAULT_CONFIDENCE, Uncertainty, check_level, gaussian_interval
from spark_dp.sketch.laplace_sum import LaplaceSum

SIMULATIONS = 100_000
ONE_COUNTER = ("lookup", "histogram")  # estimators that read one counter (a known-domain histogram)
_SEED = 20220610  # public: simulated quantiles are deterministic functions of (estimator, family, k, level)


def _dist(family):
    from scipy import stats

    if isinstance(family, LaplaceSum):  # a merged Laplace sketch's counters (laplace_sum.py)
        return family
    if family == "gaussian":
        return stats.norm
    if family == "laplace":
        return stats.laplace
    raise ValueError(f"no noise interval for noise family {family!r}")


def counter_uncertainty(values: np.ndarray, family, scale: float, level: float) -> Uncertainty:
    """Exact intervals of released counters: value ± the noise's two-sided quantile.

    A merged Laplace sketch's counters (``family`` a :class:`LaplaceSum`)
    carry a sum of Laplace noises: the two-sided quantile of that law
    (exact for equal scales; a bound, kind ``bound``, for unequal ones).
    """
    if isinstance(family, LaplaceSum):
        q = scale * float(family.quantile_bound(0.5 + check_level(level) / 2.0, upper=True))
        values = np.asarray(values, dtype=np.float64)
        return Uncertainty(values - q, values + q, np.full(values.shape, scale * math.sqrt(family.variance)), (
            f"counter +/- {q:.6g}: the two-sided quantile of {family.describe()} (b = {scale:.6g}), the noise of a "
            "merged Laplace sketch's counters"), kind="interval" if family.exact else "bound")
    if family == "gaussian":
        return gaussian_interval(values, scale, level, method=(
            "exact: counter +/- z*sigma, the Gaussian noise of every counter (sigma from the manifest)"))
    q = scale * math.log(1.0 / (1.0 - check_level(level)))  # P(|Laplace(b)| <= q) = level
    values = np.asarray(values, dtype=np.float64)
    return Uncertainty(values - q, values + q, np.full(values.shape, math.sqrt(2.0) * scale), (
        "exact: counter +/- b*ln(1/(1 - level)), the Laplace noise of every counter (b from the manifest)"))


@functools.lru_cache(maxsize=128)
def _unit_noise(estimator: str, family, k: int, buckets: int | None, q: float) -> float:
    """The q-quantile of the estimator's noise part for unit-scale noise (module doc).

    For a :class:`LaplaceSum` with unequal scales the counters' quantiles are
    bounds taken outward (above the median for q > ½, below for q < ½).
    """
    dist = _dist(family)

    def ppf(u):
        if isinstance(dist, LaplaceSum):
            return dist.quantile_bound(u, upper=q > 0.5)
        return dist.ppf(u)

    if estimator == "median" and k % 2 == 1:
        from scipy import stats

        m = (k + 1) // 2
        return float(ppf(stats.beta.ppf(q, m, k + 1 - m)))
    if estimator == "min":
        return float(ppf(1.0 - (1.0 - q) ** (1.0 / k)))
    if family == "gaussian" and estimator == "mean":
        return float(dist.ppf(q)) / math.sqrt(k)
    if family == "gaussian" and estimator == "debiased_mean":
        return float(dist.ppf(q)) * math.sqrt(buckets / (k * (buckets - 1.0)))
    return float(np.quantile(_simulated(estimator, family, k), q))


@functools.lru_cache(maxsize=32)
def _simulated(estimator: str, family, k: int) -> np.ndarray:
    # Not privacy noise: a fixed-seed simulation of the noise *law* (public) to read its quantiles.
    rng = np.random.default_rng(_SEED)
    if isinstance(family, LaplaceSum):  # a merged Laplace counter: the sum of the parts' Laplace draws
        g = family.rvs(rng, (SIMULATIONS, k))
    else:
        g = rng.standard_normal((SIMULATIONS, k)) if family == "gaussian" else rng.laplace(size=(SIMULATIONS, k))
    if estimator == "median":
        return np.median(g, axis=1)
    if estimator == "mean":
        return g.mean(axis=1)
    raise ValueError(f"no noise interval for estimator {estimator!r} with {family} noise")


def _unit_stderr(estimator: str, family: str, k: int, buckets: int | None) -> float:
    """The standard deviation of the estimator's noise part for unit-scale noise."""
    if family == "gaussian" and estimator == "mean":
        return 1.0 / math.sqrt(k)
    if family == "gaussian" and estimator == "debiased_mean":
        return math.sqrt(buckets / (k * (buckets - 1.0)))
    if family == "laplace" and estimator == "mean":
        return math.sqrt(2.0 / k)
    dist, qs = _dist(family), (np.arange(4000) + 0.5) / 4000  # order statistics: the sd over their quantile grid
    if estimator == "median" and k % 2 == 1:
        from scipy import stats

        return float(dist.ppf(stats.beta.ppf(qs, (k + 1) // 2, (k + 1) // 2)).std())
    if estimator == "min":
        return float(dist.ppf(1.0 - (1.0 - qs) ** (1.0 / k)).std())
    return float(_simulated(estimator, family, k).std())


def estimate_noise(estimator: str, family: str, scale: float, k: int, level: float,
                   buckets: int | None = None) -> tuple[float, float, float]:
    """(q_lo, q_hi, stderr) of an estimate's noise part (module doc) at ``level``."""
    a = (1.0 - check_level(level)) / 2.0
    if estimator in ONE_COUNTER:  # a histogram's lookup: one counter
        if isinstance(family, LaplaceSum):
            lo, hi = (scale * float(family.quantile_bound(q, upper=q > 0.5)) for q in (a, 1.0 - a))
            return lo, hi, scale * math.sqrt(family.variance)
        lo, hi = (scale * float(_dist(family).ppf(q)) for q in (a, 1.0 - a))
        return lo, hi, scale * (1.0 if family == "gaussian" else math.sqrt(2.0))
    lo, hi = (scale * _unit_noise(estimator, family, k, buckets, q) for q in (a, 1.0 - a))
    return lo, hi, scale * _unit_stderr(estimator, family, k, buckets)


def false_positive_rate(estimator: str, family: str, scale: float, k: int, threshold: float,
                        buckets: int | None = None) -> float:
    """P(noise part of an estimate ≥ threshold): an item of true frequency 0 (no collisions) passing it."""
    dist = _dist(family)
    t = threshold / scale
    if estimator in ONE_COUNTER:
        return float(dist.sf(t))
    if estimator == "median" and k % 2 == 1:
        from scipy import stats

        m = (k + 1) // 2
        return float(stats.beta.sf(dist.cdf(t), m, k + 1 - m))
    if estimator == "min":
        return float(dist.sf(t) ** k)
    if family == "gaussian" and estimator == "mean":
        return float(dist.sf(t * math.sqrt(k)))
    if family == "gaussian" and estimator == "debiased_mean":
        return float(dist.sf(t / math.sqrt(buckets / (k * (buckets - 1.0)))))
    return float(np.mean(_simulated(estimator, family, k) >= t))


def weight_scale(manifest: dict) -> float:
    """M of a release with weight bounds (manifest ``sketch.weight_scaling.scale``); 1 without (older releases too)."""
    got = ((manifest.get("sketch") or {}).get("weight_scaling") or {}).get("scale")
    return 1.0 if got is None else float(got)


def counter_noise(manifest: dict) -> tuple[str | None, float | None]:
    """(noise family, scale) of one *released* counter, in the units of the stored arrays.

    ``privacy.noise_scale`` is the mechanism's σ (or b); with weight bounds the
    release stores the mechanism's output multiplied by M (the weight's units),
    so a counter's noise is M·σ. A merge of Laplace sketches
    (``noise_family: sum_of_laplace``, the parts' ``noise_scales``) gives a
    :class:`~spark_dp.sketch.laplace_sum.LaplaceSum` and its largest scale.
    """
    from spark_dp.release.release import noise_of

    family, scale = noise_of(manifest["privacy"])
    if family == "sum_of_laplace" and manifest["privacy"].get("noise_scales"):  # a merge of Laplace sketches
        law, b = LaplaceSum.of(manifest["privacy"]["noise_scales"])
        return law, b * weight_scale(manifest)
    if not isinstance(scale, int | float) or isinstance(scale, bool):
        return family, scale
    return family, float(scale) * weight_scale(manifest)


# -- collisions: what the other items put in an item's counters -------------------------------------------------
#: Share of 1 − level spent on the upper bounds of the collision mass (N and F₂, read from the released table).
MASS_SHARE = 0.1
_SPLITS = np.linspace(0.0, 1.0, 65)  # how a tail t is split between the collision part and the noise part


def _cantelli(d, var):
    """P(X − E X ≥ d) ≤ var / (var + d²) for d > 0 (Cantelli's inequality); 1 for d ≤ 0."""
    d = np.asarray(d, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.where(d > 0, var / (var + d * d), 1.0)
    return np.where(var <= 0, np.where(d > 0, 0.0, 1.0), p)


@dataclass(frozen=True)
class CollisionMass:
    """Upper bounds, read from a *released* table, of what other items put in an item's counters.

    Hash collisions: in repetition i an item x's counter also holds
    C_i = Σ_{y ≠ x, h_i(y) = h_i(x)} s_i(x)s_i(y)·f_y (signs 1 for the
    unsigned sketches). Over the random hash functions (independent per
    repetition, as the seeds are): unsigned sketches with frequencies ≥ 0
    have C_i ≥ 0, E C_i = (N − x)/b ≤ N/b; signed ones E C_i = 0; both have
    Var C_i ≤ F₂/b (N = Σ f, F₂ = Σ f²). ``total`` ≥ N and ``f2`` ≥ F₂ hold
    together with probability ≥ 1 − ``alpha`` (module doc of
    :func:`collision_rate`). ``reason``: why no bound can be given (then the
    others are None).
    """

    signed: bool
    repetitions: int
    buckets: int
    total: float | None
    f2: float | None
    alpha: float
    reason: str | None = None

    @property
    def rate(self) -> float:
        """Expected collision mass per counter (unsigned: ≤ N/b) or its sd (signed: ≤ √(F₂/b)); NaN if refused."""
        if self.reason is not None:
            return float("nan")
        return self.total / self.buckets if not self.signed else math.sqrt(self.f2 / self.buckets)

    def as_dict(self) -> dict:
        return {"signed": self.signed, "total_mass_upper": self.total, "f2_upper": self.f2,
                "rate": None if self.reason is not None else self.rate,
                "fails_with_probability_at_most": self.alpha, "refused": self.reason}


def refusal(*, signed: bool, k: int, b: int, alpha: float, nonnegative: bool) -> str | None:
    """Why a k × b sketch's estimates get no interval, or None: data-free, so the dry run predicts it too.

    An unsigned sketch of weights that may be negative (the released total
    bounds nothing), or a signed one whose k·b counters are too few for the
    F₂ bound of :func:`collision_rate` (1 − t√(2/(bk)) ≤ 0, t = √(2/α − 1)).
    """
    if not nonnegative and not signed:
        return ("no interval: the weights may be negative, so the released total does not bound what hash collisions "
                "add to an unsigned sketch's estimates (use private_count_sketch, or weight bounds >= 0)")
    if signed and 1.0 - math.sqrt(2.0 / alpha - 1.0) * math.sqrt(2.0 / (b * k)) <= 0:
        return (f"no interval: {k} x {b} counters are too few to bound what hash collisions add to an estimate "
                "from the release (more buckets)")
    return None


def planned_refusal(mechanism: str, k: int, b: int, level: float, nonnegative: bool) -> str | None:
    """:func:`refusal` at the release's level for a mechanism (None for a histogram: no collisions)."""
    from spark_dp.sketch.mechanisms import SIGNED

    if mechanism == "histogram":
        return None
    return refusal(signed=bool(SIGNED[mechanism]), k=int(k), b=int(b), alpha=MASS_SHARE * (1.0 - check_level(level)),
                   nonnegative=nonnegative)


def collision_rate(table: np.ndarray, *, signed: bool, family: str, scale: float, alpha: float,
                   nonnegative: bool = True) -> CollisionMass:
    """Upper bounds of the collision mass from the released (noisy) table and public parameters only.

    Post-processing: reads the released counters T = exact + noise (shape
    (k, b)), the noise family and scale from the manifest; no data, no
    budget. Each bound fails with probability ≤ alpha/2:

    * N (unsigned sketches: every row sums to N exactly): the released mean
      row sum N̂ = N + mean noise; N ≤ N̂ + z·σ√(b/k) (Gaussian, exact) or
      N̂ + β√(8kb·ln(2/α))/k (Laplace: ln E e^{λL} ≤ 2β²λ² for |λ| ≤
      1/(√2β), Chernoff; valid while ln(2/α) ≤ kb).
    * M = mean_i ‖CS_i‖² (CS the exact table): Ŝ = mean_i ‖T_i‖² − b·v
      (v the noise variance) has Ŝ − M = 2·mean⟨CS_i, g_i⟩ + (mean‖g_i‖² −
      bv), of variance 4vM/k + bw/k (w = Var g²: 2σ⁴, or 20β⁴ Laplace);
      Cantelli gives M ≤ the larger root of (M − Ŝ)² = t²(4vM + bw)/k,
      t = √(2/α − 1).
    * Unsigned, frequencies ≥ 0: ‖CS_i‖² = F₂ + (cross products ≥ 0) ≥ F₂,
      so F₂ ≤ M. Signed: over the random signs E‖CS_i‖² = F₂ and
      Var ≤ 2F₂²/b per repetition, so (Cantelli again) F₂ ≤ M/(1 −
      t√(2/(bk))) — refused when k·b is too small for that to be finite.
    * Unsigned sketches of weights that may be negative: no bound (N no
      longer bounds the collision mass and ‖CS_i‖² no longer bounds F₂).
    """
    table = np.asarray(table, dtype=np.float64)
    k, b = (int(x) for x in table.shape[-2:])
    if (reason := refusal(signed=signed, k=k, b=b, alpha=alpha, nonnegative=nonnegative)) is not None:
        return CollisionMass(signed, k, b, None, None, alpha, reason)
    if family == "gaussian":
        v, w = scale ** 2, 2.0 * scale ** 4
    elif isinstance(family, LaplaceSum):  # merged Laplace counters: the exact variance and Var g² of the sum
        v, w = family.variance * scale ** 2, family.variance_of_square * scale ** 4
    else:
        v, w = 2.0 * scale ** 2, 20.0 * scale ** 4
    t = math.sqrt(2.0 / alpha - 1.0)
    s_hat = float(np.mean(np.sum(table ** 2, axis=-1))) - b * v
    a, c = t * t * 4.0 * v / k, t * t * b * w / k
    disc = max((2.0 * s_hat + a) ** 2 - 4.0 * (s_hat ** 2 - c), 0.0)
    m_up = max(((2.0 * s_hat + a) + math.sqrt(disc)) / 2.0, 0.0)
    if signed:
        return CollisionMass(signed, k, b, None, m_up / (1.0 - t * math.sqrt(2.0 / (b * k))), alpha)
    n_hat = float(np.mean(np.sum(table, axis=-1)))
    if family == "gaussian":
        from scipy import stats

        n_up = n_hat + float(stats.norm.isf(alpha / 2.0)) * scale * math.sqrt(b / k)
    else:  # Laplace, or a sum of Laplaces with β² = Σ b_i² (ln E e^{λS} ≤ 2λ²β² for |λ| ≤ 1/(√2 max b_i))
        beta = scale * math.sqrt(family.variance / 2.0) if isinstance(family, LaplaceSum) else scale
        n_up = n_hat + beta * math.sqrt(8.0 * k * b * math.log(2.0 / alpha)) / k
    return CollisionMass(signed, k, b, max(n_up, 0.0), m_up, alpha)


def _symmetric_tail(t, var):
    """≥ P(X > t) for X symmetric about 0 with Var X ≤ var: min(Cantelli, Chebyshev halved by the symmetry).

    P(X > t) = ½·P(|X| > t) ≤ var/(2t²) (t > 0), below Cantelli's var/(var + t²) once t² > var.
    """
    t = np.asarray(t, dtype=np.float64)
    with np.errstate(divide="ignore"):
        half = np.where(t > 0, var / (2.0 * t * t), 1.0)
    return np.minimum(np.minimum(_cantelli(t, var), half), 1.0)


def _row_collision_tail(mass: CollisionMass, t: np.ndarray, upper: bool) -> np.ndarray:
    """≥ P(C_i > t) (upper) or P(C_i < −t) for one repetition's collision C_i (t ≥ 0).

    Signed (CountSketch): C_i = s_i(x)·Σ_{y ≠ x, h_i(y) = h_i(x)} s_i(y)·f_y with the item's own random sign
    s_i(x) = ±1 independent of the rest (the random-hash model the mean and variance bounds already use), so C_i
    is symmetric about 0 and :func:`_symmetric_tail` applies.
    """
    var = mass.f2 / mass.buckets
    if mass.signed:
        return _symmetric_tail(t, var)
    if not upper:
        return np.where(t > 0, 0.0, 1.0)  # C_i ≥ 0
    mean = mass.total / mass.buckets
    with np.errstate(divide="ignore"):
        markov = np.where(t > 0, mean / t, 1.0)
    return np.minimum(np.minimum(markov, _cantelli(t - mean, var)), 1.0)


def _mean_collision_tail(mass: CollisionMass, t: np.ndarray, upper: bool, estimator: str) -> np.ndarray:
    """≥ P(A > t) (upper) or P(A < −t) for the collision part A of a mean / debiased mean over k repetitions."""
    k, b = mass.repetitions, mass.buckets
    var = mass.f2 / (b * k)
    if estimator == "debiased_mean":  # A = b/(b − 1)·(mean C − (N − x)/b): centred
        return np.minimum(_cantelli(t, var * (b / (b - 1.0)) ** 2), 1.0)
    if mass.signed:  # a mean of independent symmetric C_i is symmetric
        return _symmetric_tail(t, var)
    if not upper:
        return np.where(t > 0, 0.0, 1.0)
    mean = mass.total / b
    with np.errstate(divide="ignore"):
        markov = np.where(t > 0, mean / t, 1.0)
    return np.minimum(np.minimum(markov, _cantelli(t - mean, var)), 1.0)


def _noise_tail(estimator: str, family: str, scale: float, k: int, buckets: int, t: np.ndarray) -> np.ndarray:
    """P(noise part > t) for one counter (median/min: per repetition) or for a mean / debiased mean (symmetric)."""
    dist = _dist(family)
    if estimator in ("median", "min"):
        return dist.sf(t / scale)
    if family == "gaussian":
        sd = scale * _unit_stderr(estimator, family, k, buckets)
        return dist.sf(t / sd)
    sims = np.sort(_simulated(estimator, family, k))
    return 1.0 - np.searchsorted(sims, t / scale, side="right") / sims.size


def _tail(estimator: str, family: str, scale: float, mass: CollisionMass, t: float, upper: bool) -> float:
    """≥ P(estimate − x > t) (upper) or P(estimate − x < −t): collision and noise parts, union over a split of t."""
    k, b = mass.repetitions, mass.buckets
    tc, tn = _SPLITS * t, (1.0 - _SPLITS) * t
    if estimator in ("mean", "debiased_mean"):
        p = _mean_collision_tail(mass, tc, upper, estimator) + _noise_tail(estimator, family, scale, k, b, tn)
        return float(min(1.0, p.min()))
    p = float(min(1.0, (_row_collision_tail(mass, tc, upper) + _noise_tail(estimator, family, scale, k, b, tn)).min()))
    if estimator == "median":  # the median exceeds t only if ⌈k/2⌉ of the independent repetitions do
        from scipy import stats

        return float(stats.binom.sf(math.ceil(k / 2) - 1, k, p))
    if estimator == "min":  # the minimum exceeds t only if every repetition does; is below −t if any one is
        return p ** k if upper else 1.0 - (1.0 - p) ** k
    raise ValueError(f"no collision-aware interval for estimator {estimator!r}")


def _solve(estimator, family, scale, mass, target, upper) -> float:
    """The smallest t ≥ 0 (to 1e-6 relative) with the tail bound ≤ target."""
    lo, hi = 0.0, max(scale, mass.rate if np.isfinite(mass.rate) else 0.0, 1e-12)
    while _tail(estimator, family, scale, mass, hi, upper) > target:
        lo, hi = hi, hi * 2.0
        if hi > 1e300:
            return float("inf")
    if _tail(estimator, family, scale, mass, lo, upper) <= target:
        return lo
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        if _tail(estimator, family, scale, mass, mid, upper) <= target:
            hi = mid
        else:
            lo = mid
        if hi - lo <= 1e-6 * hi:
            break
    return hi


def collision_quantiles(estimator: str, family: str, scale: float, mass: CollisionMass,
                        level: float) -> tuple[float, float]:
    """(q_lo, q_hi) with P(q_lo ≤ estimate − x ≤ q_hi) ≥ level, hash collisions and noise together.

    1 − level is spent as ``MASS_SHARE`` on the mass bounds (``mass.alpha``)
    and half the rest on each side. Per repetition, P(C_i + g_i > t) ≤
    P(C_i > s) + P(g_i > t − s) (minimised over a grid of splits s), with
    the collision tails of :class:`CollisionMass` (Markov on the mean,
    Cantelli on the variance); the repetitions are independent (independent
    hash seeds and noise), so the median's tail is a binomial tail of that
    probability and the minimum's its k-th power; a mean's collision part is
    bounded by its own variance F₂/(bk) (debiased: ×(b/(b − 1))², centred).
    A bound: it holds with probability at least ``level``.
    """
    alpha = 1.0 - check_level(level)
    side = (alpha - mass.alpha) / 2.0
    return (-_solve(estimator, family, scale, mass, side, False), _solve(estimator, family, scale, mass, side, True))


def false_positive_rate_bound(estimator: str, family: str, scale: float, mass: CollisionMass,
                              threshold: float) -> float:
    """≥ P(an absent item's estimate ≥ threshold), hash collisions included: mass.alpha + the tail at threshold.

    Post-processing of the released table (through ``mass``) and public parameters.
    """
    if mass.reason is not None:
        return float("nan")
    return float(min(1.0, mass.alpha + _tail(estimator, family, scale, mass, float(threshold), True)))


def _nonnegative_weights(manifest: dict) -> bool:
    """Whether every counted contribution is ≥ 0: unweighted, or weight bounds with lo ≥ 0 (from the manifest)."""
    sketch = manifest.get("sketch") or {}
    stated = (sketch.get("estimate_intervals") or {}).get("contributions_nonnegative")
    if stated is not None:
        return bool(stated)
    ws = sketch.get("weight_scaling")
    if ws is not None:
        return float(ws["bounds"][0]) >= 0.0
    return (manifest.get("policies") or {}).get("weights", "each row counts 1") == "each row counts 1"


def release_collision_mass(table: np.ndarray, mechanism: str, family: str, scale: float, level: float,
                           nonnegative: bool) -> CollisionMass:
    """The :class:`CollisionMass` of a released (level-L) table at ``level`` (share ``MASS_SHARE`` of 1 − level)."""
    from spark_dp.sketch.mechanisms import SIGNED

    alpha = MASS_SHARE * (1.0 - check_level(level))
    return collision_rate(table, signed=bool(SIGNED[mechanism]), family=family, scale=scale, alpha=alpha,
                          nonnegative=nonnegative)


def estimate_interval_info(table: np.ndarray, mechanism: str, estimator: str, family: str, scale: float,
                           level: float, *, nonnegative: bool) -> tuple[dict, CollisionMass]:
    """The manifest's ``sketch.estimate_intervals`` (and the collision mass) of a released level-L table.

    Post-processing of the released counters and public parameters (no data, no budget): what the default
    estimator's intervals are, the collision mass read from the table, the half-widths (estimate − high,
    estimate − low are the quantiles q_hi, q_lo), or the reason they are refused.
    """
    mass = release_collision_mass(table, mechanism, family, scale, level, nonnegative)
    info = {"estimator": estimator, "level": level, "covers": "noise+collisions",
            "contributions_nonnegative": bool(nonnegative), "collision_mass": mass.as_dict()}
    k, b = (int(x) for x in np.shape(table)[-2:])
    lo0, hi0, _ = estimate_noise(estimator, family, scale, k, level, b)
    info["noise_only"] = {"low": lo0, "high": hi0, "note": (
        "the estimate's noise part alone (exact only when no other item shares the item's counters): a lower limit "
        "on the error")}
    if mass.reason is not None:
        info.update(kind="none", method=mass.reason)
        return info, mass
    q_lo, q_hi = collision_quantiles(estimator, family, scale, mass, level)
    info.update(kind="bound", q_low=q_lo, q_high=q_hi, method=(
        f"interval [estimate - {q_hi:.4g}, estimate + {-q_lo:.4g}]: noise and hash collisions together, "
        "the collision mass read from the released table (spark_dp.sketch.uncertainty.collision_quantiles); holds "
        f"with probability >= {level:g}"))
    return info, mass


@dataclass(frozen=True)
class EstimateBounds:
    """Estimates of items with their intervals, and what the intervals are (``kind``, ``covers``, ``method``)."""

    estimates: np.ndarray
    low: np.ndarray
    high: np.ndarray
    stderr: np.ndarray
    kind: str  # "interval" (exact, noise only: histograms), "bound" (collisions too), "none" (refused: NaN)
    covers: str
    method: str
    mass: CollisionMass | None = None
    reasons: tuple[str | None, ...] = ()  # per item: why it has no interval (None where it has one)

    def refused(self) -> dict[int, str]:
        """Position → reason of the items without an interval (all of them when ``kind`` is ``none``)."""
        return {i: r for i, r in enumerate(self.reasons) if r is not None}


def _item_reasons(view, items, est: np.ndarray, refusal: str | None) -> tuple[str | None, ...]:
    """Why each item has no interval: the release's refusal, or no estimate of it (outside a histogram's domain,
    the null item of a hashed dyadic release).
    """
    out: list[str | None] = []
    for x, e in zip(items, est, strict=True):
        if np.isnan(e):
            out.append("no estimate: the item is not in the histogram's domain" if view.table.ndim == 1 else
                       "no estimate: a release over a hashed domain never counts the null item")
        else:
            out.append(refusal)
    return tuple(out)


def estimate_bounds(release, items, *, estimator: str | None = None, collisions: bool = True) -> EstimateBounds:
    """Estimates of ``items`` with intervals that hold with probability ≥ the release's level.

    Post-processing of the released table and public parameters (noise
    family and scale, k, b, the estimator): no data, no budget. For hashed
    sketches the interval covers the noise *and* the hash collisions
    (:func:`collision_quantiles`, kind ``bound``): the truth is the item's
    frequency as the sketch counted it (after contribution bounding). It is
    refused (NaN, kind ``none``, the reason in ``method``) where no bound can
    be read from the release (:func:`collision_rate`). ``collisions=False``
    gives the noise-only interval (the dry run's lower limit; exact when no
    other item shares a counter). A histogram's lookup has no collisions:
    exact, ``interval``.
    """
    from spark_dp.release import load_release
    from spark_dp.sketch.estimate import SketchView, estimate

    release = load_release(release) if isinstance(release, str) else release
    view = SketchView.of(release)
    items = list(items)
    est = np.asarray(estimate(view, items, estimator=estimator), dtype=np.float64)
    family, scale = counter_noise(release.manifest)  # in the stored arrays' units (the weight's, with bounds)
    scale = float(scale)
    level = float((release.manifest.get("uncertainty") or {}).get("level", DEFAULT_CONFIDENCE))
    name = view.estimator(estimator)
    k = 1 if name in ONE_COUNTER else int(view.table.shape[0])
    lo, hi, sd = estimate_noise(name, family, scale, k, level, view.buckets)
    nan = np.isnan(est)
    if name in ONE_COUNTER or not collisions:
        what = "no other item shares a counter" if name in ONE_COUNTER else "assumes no hash collisions"
        bounded = isinstance(family, LaplaceSum) and not family.exact  # unequal merged scales: outward bounds
        return EstimateBounds(est, est - hi, est - lo, np.where(nan, np.nan, sd),
                              "bound" if bounded else "interval", "noise", f"exact: the {name} estimator's noise law over {k} counter(s) "
                              f"({what}; sigma from the manifest)", reasons=_item_reasons(view, items, est, None))
    mass = release_collision_mass(view.table, view.mechanism, family, scale, level,
                                  _nonnegative_weights(release.manifest))
    if mass.reason is not None:
        none = np.full(est.shape, np.nan)
        return EstimateBounds(est, none, none.copy(), none.copy(), "none", "noise+collisions", mass.reason, mass,
                              reasons=_item_reasons(view, items, est, mass.reason))
    q_lo, q_hi = collision_quantiles(name, family, scale, mass, level)
    return EstimateBounds(est, est - q_hi, est - q_lo, np.full(est.shape, np.nan), "bound", "noise+collisions", (
        f"bound: the {name} estimate's noise and hash collisions together (collision mass read from the released "
        f"table: {'F2' if mass.signed else 'total'} <= "
        f"{_g(mass.f2 if mass.signed else mass.total)}); holds with probability >= {level:g}"), mass,
        reasons=_item_reasons(view, items, est, None))


def _g(x: float) -> str:
    return f"{x:.4g}"


def estimate_intervals(release, items, *, estimator: str | None = None,
                       collisions: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(estimates, low, high) of ``items`` from a count_sketch release (or its directory).

    At the release's level (manifest ``uncertainty.level``; 0.95 for a
    release made before error bars): :func:`estimate_bounds` — noise and hash
    collisions, NaN where refused (the reason: ``estimate_bounds(...).method``);
    ``collisions=False``: the noise part only (a lower limit).
    """
    got = estimate_bounds(release, items, estimator=estimator, collisions=collisions)
    return got.estimates, got.low, got.high
