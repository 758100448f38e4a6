"""Private CountSketch and the sketches it is compared with.

Implements Private CountSketch of Pagh & Thorup, "Improved Utility Analysis
of Private CountSketch", NeurIPS 2022 (arXiv 2205.08397): the CountSketch of
Charikar, Chen & Farach-Colton (2004) plus i.i.d. Gaussian noise on every
counter, read with the median estimator. Baselines from the paper's
comparison: private Count-Min (Laplace noise, pure ε-DP; Melis et al. 2016
with Cormode & Muthukrishnan's min estimator), the Count-Mean sketch (central
version of Apple's 2017 sketch with its debiasing) and the Gaussian mechanism
on the exact histogram over a known domain.

Neighbour relations (all mechanisms): ``add_remove`` (the paper's; default)
adds or removes one privacy unit — one row, or all rows of one
``privacy_unit`` value after keeping at most m = ``max_rows_per_unit`` of
them; ``replace`` replaces one unit's rows by another unit's. Each row adds
w ∈ [−1, 1] (1 without a weight column) to its item, so a unit changes the
frequency vector x by a vector of L1 norm ≤ m (the paper's neighbours are
m = 1).

Sensitivities of the released table (repetitions k, buckets b) under
add/remove:

* CountSketch and Count-Mean, L2: each repetition's table moves by a vector
  of L1 ≤ m, hence L2 ≤ m (worst case: all the unit's items in one bucket),
  and the k repetitions are disjoint coordinates: Δ₂ = √k·m (Pagh & Thorup §2,
  "the sensitivity of the sketch is √k", for m = 1).
* With per-unit clipping in sketch space (``unit_l2_bound`` = C): each
  repetition's contribution of a unit is scaled to L2 ≤ C, so Δ₂ = √k·C
  (C = √m by default: equal to m·1/√m per item when the unit's items do not
  collide, so clipping seldom bites when b ≫ m).
* Count-Min, L1: each repetition moves by ≤ m in L1, Δ₁ = k·m.
* Histogram over a known domain, L2: Δ₂ = m (all m rows on one item).

Under ``replace`` the table moves by c' − c, the added unit's contribution
minus the removed one's (each bounded as above): ‖c' − c‖ ≤ ‖c'‖ + ‖c‖, so
every Δ doubles. That is tight when contributions can have either sign (the
signed CountSketch, any weighted sketch: the removed unit's −m and the added
unit's +m land in one counter) and for L1 (Count-Min: two disjoint buckets).
Unweighted *unsigned* L2 tables (Count-Mean, histogram) have contributions
≥ 0, so ⟨c, c'⟩ ≥ 0 and ‖c' − c‖₂² ≤ ‖c‖₂² + ‖c'‖₂²: the factor is √2
(:func:`spark_dp.sketch._registry.replace_factor`).

Noise: Gaussian σ = z(ε, δ)·Δ₂ with the exact calibration of Balle & Wang
(2018); Laplace b = Δ₁/ε. All noise is drawn through the chokepoint.
"""

from __future__ import annotations

import numpy as np

from spark_dp.privacy import Chokepoint
from spark_dp.sketch._registry import SketchSpec

ESTIMATORS = ("median", "min", "mean", "debiased_mean", "lookup")


# -- the mechanisms (driver side; the exact tables come from spark_dp.aggregates.sketch) --
def private_count_sketch(table: np.ndarray, *, chokepoint: Chokepoint, sigma: float, sensitivity: float) -> np.ndarray:
    """PCS(x) = CS(x) + ν, ν ~ N(0, σ²I_{k×b}) (Pagh & Thorup 2022, §2).

    Args:
        table: the exact CountSketch CS(x), shape (k, b).
        chokepoint: a charged chokepoint covering GaussianEvent(σ/Δ₂).
        sigma: σ per counter.
        sensitivity: Δ₂ = √k·m (or √k·C) of the table.
    """
    # §2: "sampling a symmetric noise vector ν independent of CS(x) and releasing CS(x) + ν".
    return chokepoint.gaussian(table, sigma=sigma, l2_sensitivity=sensitivity)


def count_mean_sketch(table: np.ndarray, *, chokepoint: Chokepoint, sigma: float, sensitivity: float) -> np.ndarray:
    """Central Count-Mean sketch: the unsigned table plus N(0, σ²) per counter."""
    return chokepoint.gaussian(table, sigma=sigma, l2_sensitivity=sensitivity)


def private_count_min(table: np.ndarray, *, chokepoint: Chokepoint, scale: float, l1_sensitivity: float) -> np.ndarray:
    """Private Count-Min: the unsigned table plus Lap(b) per counter, b = Δ₁/ε (pure ε-DP)."""
    return chokepoint.laplace(table, scale=scale, l1_sensitivity=l1_sensitivity)


def gaussian_histogram(hist: np.ndarray, *, chokepoint: Chokepoint, sigma: float, sensitivity: float) -> np.ndarray:
    """The Gaussian mechanism on the exact histogram over a known domain (the paper's yardstick)."""
    return chokepoint.gaussian(hist, sigma=sigma, l2_sensitivity=sensitivity)


# -- the registry entries (spark_dp.sketch.mechanisms.REGISTRY) -----------
PRIVATE_COUNT_SKETCH = SketchSpec(
    "private_count_sketch", "gaussian", estimators=("median", "mean", "min"), signed=True, unit_l2_clipping=True,
    dyadic=True,
    release=lambda table, cp, scale, sens: private_count_sketch(table, chokepoint=cp, sigma=scale, sensitivity=sens),
)
COUNT_MIN = SketchSpec(
    "count_min", "laplace", estimators=("min", "median", "mean"), signed=False,
    release=lambda table, cp, scale, sens: private_count_min(table, chokepoint=cp, scale=scale, l1_sensitivity=sens),
)
COUNT_MEAN = SketchSpec(
    "count_mean", "gaussian", estimators=("debiased_mean", "mean", "median", "min"), signed=False,
    unit_l2_clipping=True, min_buckets=2,
    release=lambda table, cp, scale, sens: count_mean_sketch(table, chokepoint=cp, sigma=scale, sensitivity=sens),
)
HISTOGRAM = SketchSpec(
    "histogram", "gaussian", estimators=("lookup",), signed=None,
    release=lambda table, cp, scale, sens: gaussian_histogram(table, chokepoint=cp, sigma=scale, sensitivity=sens),
)


# -- estimators (post-processing of a released table) ----------------------
def simple_estimates(sketch: np.ndarray, h: np.ndarray, s: np.ndarray | None = None) -> np.ndarray:
    """Xᵢ = sᵢ(x)·T[i, hᵢ(x)] for every repetition i and item; shape (k, n)."""
    k = sketch.shape[0]
    vals = sketch[np.arange(k)[:, None], h]
    return vals if s is None else vals * s


def combine(values: np.ndarray, estimator: str, *, buckets: int | None = None, total: float | None = None) -> np.ndarray:
    """Combines the k simple estimates (rows of ``values``) of each item.

    * ``median`` — x̂ = median_i Xᵢ (Pagh & Thorup, eq. (1)/(2));
    * ``min`` — Count-Min's x̂ = min_i Xᵢ (an upper bound without noise);
    * ``mean`` — the plain mean;
    * ``debiased_mean`` — Count-Mean: E[T[i, hᵢ(x)]] = x + (N − x)/b, so
      x̂ = (b·mean_i Xᵢ − N̂)/(b − 1) with N̂ the released table's mean row sum.
    """
    if estimator == "median":
        return np.median(values, axis=0)
    if estimator == "min":
        return values.min(axis=0)
    if estimator == "mean":
        return values.mean(axis=0)
    if estimator == "debiased_mean":
        if buckets is None or total is None or buckets < 2:
            raise ValueError("debiased_mean needs buckets >= 2 and the total N̂")
        return (buckets * values.mean(axis=0) - total) / (buckets - 1)
    raise ValueError(f"unknown estimator {estimator!r}; expected one of {list(ESTIMATORS)}")


def table_total(sketch: np.ndarray) -> float:
    """N̂: the mean over repetitions of the released table's row sums (post-processing)."""
    return float(sketch.sum(axis=1).mean())
