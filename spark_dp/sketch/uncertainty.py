"""Error bars of the sketches: each counter's noise interval, each estimate's, and heavy hitters' false-positive rate.

Post-processing of a release's public parameters (the noise family and scale
in the manifest, k, b, the estimator, the threshold); no privacy cost.

* Counters (arrays ``sketch``, ``dyadic_sketch``, ``histogram``): each is the
  exact counter plus independent N(0, σ²) (Gaussian mechanisms) or
  Laplace(b) noise (Count-Min): exact intervals counter ± z·σ, resp.
  ± b·ln(1/(1 − level)).
* Estimates (:func:`estimate_intervals`, ``spark-dp estimate``): the
  interval for the *noise part* of an estimate. Without hash collisions every
  one of the k counters an item maps to holds its true frequency x, so the
  estimate is x + f(g₁, …, g_k) with g i.i.d. noise and f the estimator;
  the interval is the estimate minus f's quantiles. For the median of odd
  k, f is the ((k+1)/2)-th order statistic: F⁻¹ of a Beta((k+1)/2, (k+1)/2)
  quantile (the order statistics of uniforms are Beta distributed; David &
  Nagaraja, *Order Statistics*, 2003, §2.1); for the minimum
  F⁻¹(1 − (1 − q)^{1/k}); for the mean of Gaussians σ/√k; Count-Mean's
  debiased mean (b·mean − N̂)/(b − 1) has noise variance σ²·b/(k(b − 1)).
  Even-k medians and Laplace means are simulated (fixed public seed).
  Collisions add a further, data-dependent error these intervals do not
  cover (``covers: noise``); Pagh & Thorup (2022) bound it separately.
* Weight bounds (``count_sketch(bounds=...)``): the stored counters are the
  mechanism's output times the public M, so every scale above is M·σ (resp.
  M·b): :func:`counter_noise` reads it from the manifest.
* Heavy hitters: the false-positive rate of the threshold τ — the
  probability that an item of true frequency 0 (and no collisions) has an
  estimate ≥ τ from the noise alone, 1 − F_f(τ).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from spark_dp.release.uncertainty import DEFAULT_CONFIDENCE, Uncertainty, check_level, gaussian_interval

SIMULATIONS = 100_000
ONE_COUNTER = ("lookup", "histogram")  # estimators that read one counter (a known-domain histogram)
_SEED = 20220610  # public: simulated quantiles are deterministic functions of (estimator, family, k, level)


def _dist(family: str):
    from scipy import stats

    if family == "gaussian":
        return stats.norm
    if family == "laplace":
        return stats.laplace
    raise ValueError(f"no noise interval for noise family {family!r}")


def counter_uncertainty(values: np.ndarray, family: str, scale: float, level: float) -> Uncertainty:
    """Exact intervals of released counters: value ± the noise's two-sided quantile."""
    if family == "gaussian":
        return gaussian_interval(values, scale, level, method=(
            "exact: counter +/- z*sigma, the Gaussian noise of every counter (sigma from the manifest)"))
    q = scale * math.log(1.0 / (1.0 - check_level(level)))  # P(|Laplace(b)| <= q) = level
    values = np.asarray(values, dtype=np.float64)
    return Uncertainty(values - q, values + q, np.full(values.shape, math.sqrt(2.0) * scale), (
        "exact: counter +/- b*ln(1/(1 - level)), the Laplace noise of every counter (b from the manifest)"))


@functools.lru_cache(maxsize=128)
def _unit_noise(estimator: str, family: str, k: int, buckets: int | None, q: float) -> float:
    """The q-quantile of the estimator's noise part for unit-scale noise (module doc)."""
    dist = _dist(family)
    if estimator == "median" and k % 2 == 1:
        from scipy import stats

        m = (k + 1) // 2
        return float(dist.ppf(stats.beta.ppf(q, m, k + 1 - m)))
    if estimator == "min":
        return float(dist.ppf(1.0 - (1.0 - q) ** (1.0 / k)))
    if family == "gaussian" and estimator == "mean":
        return float(dist.ppf(q)) / math.sqrt(k)
    if family == "gaussian" and estimator == "debiased_mean":
        return float(dist.ppf(q)) * math.sqrt(buckets / (k * (buckets - 1.0)))
    return float(np.quantile(_simulated(estimator, family, k), q))


@functools.lru_cache(maxsize=32)
def _simulated(estimator: str, family: str, k: int) -> np.ndarray:
    # Not privacy noise: a fixed-seed simulation of the noise *law* (public) to read its quantiles.
    rng = np.random.default_rng(_SEED)
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
    so a counter's noise is M·σ.
    """
    from spark_dp.release.release import noise_of

    family, scale = noise_of(manifest["privacy"])
    if not isinstance(scale, int | float) or isinstance(scale, bool):
        return family, scale
    return family, float(scale) * weight_scale(manifest)


def estimate_intervals(release, items, *, estimator: str | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(estimates, low, high) of ``items`` from a count_sketch release (or its directory).

    At the release's level (manifest ``uncertainty.level``; 0.95 for a
    release made before error bars). The interval is for the noise part of
    each estimate (module doc); NaN where the estimate is NaN.
    """
    from spark_dp.release import load_release
    from spark_dp.sketch.estimate import SketchView, estimate

    release = load_release(release) if isinstance(release, str) else release
    view = SketchView.of(release)
    est = estimate(view, items, estimator=estimator)
    family, scale = counter_noise(release.manifest)  # in the stored arrays' units (the weight's, with bounds)
    level = float((release.manifest.get("uncertainty") or {}).get("level", DEFAULT_CONFIDENCE))
    name = view.estimator(estimator)
    k = 1 if name in ONE_COUNTER else int(view.table.shape[0])
    lo, hi, _ = estimate_noise(name, family, float(scale), k, level, view.buckets)
    return est, est - hi, est - lo
