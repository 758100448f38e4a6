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
(:func:`replace_factor`).

Noise: Gaussian σ = z(ε, δ)·Δ₂ with the exact calibration of Balle & Wang
(2018); Laplace b = Δ₁/ε. All noise is drawn through the chokepoint.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from spark_dp.privacy import Budget, Chokepoint, GaussianEvent, LaplaceEvent, gaussian_noise_multiplier
from spark_dp.privacy.events import Event

MECHANISMS = ("private_count_sketch", "count_min", "count_mean", "histogram")
ESTIMATORS = ("median", "min", "mean", "debiased_mean", "lookup")
DEFAULT_ESTIMATOR = {
    "private_count_sketch": "median",
    "count_min": "min",
    "count_mean": "debiased_mean",
    "histogram": "lookup",
}
SIGNED = {"private_count_sketch": True, "count_min": False, "count_mean": False}


@dataclass(frozen=True)
class SketchPlan:
    """Everything about a release's privacy that follows from public parameters.

    Attributes:
        mechanism: one of :data:`MECHANISMS`.
        events: the privacy events charged (one).
        budget: the (ε, δ) claimed (δ = 0 for Count-Min).
        noise: ``gaussian`` or ``laplace``.
        scale: σ (Gaussian) or b (Laplace) per counter.
        sensitivity: Δ₂ (Gaussian) or Δ₁ (Laplace) of the whole table.
        sensitivity_norm: ``l2`` or ``l1``.
        unit_bound: description of the per-unit bound behind Δ.
    """

    mechanism: str
    events: list[Event]
    budget: Budget
    noise: str
    scale: float
    sensitivity: float
    sensitivity_norm: str
    unit_bound: dict = field(default_factory=dict)

    @property
    def counter_std(self) -> float:
        """Standard deviation of the noise on one counter."""
        return self.scale if self.noise == "gaussian" else math.sqrt(2.0) * self.scale


def replace_factor(mechanism: str, *, neighbors: str, weighted: bool) -> float:
    """Δ under ``neighbors`` / Δ under add/remove (module docstring): 1, 2, or √2 for unweighted unsigned L2."""
    if neighbors == "add_remove":
        return 1.0
    if neighbors != "replace":
        raise ValueError(f"unknown neighbour relation {neighbors!r}; expected 'add_remove' or 'replace'")
    if mechanism in ("count_mean", "histogram") and not weighted:
        return math.sqrt(2.0)  # contributions ≥ 0: ‖c' − c‖₂² ≤ ‖c‖₂² + ‖c'‖₂²
    return 2.0  # triangle inequality; tight for signed or weighted contributions and for L1


def sketch_sensitivity(
    mechanism: str, *, repetitions: int, max_items_per_unit: int = 1, unit_l2_bound: float | None = None,
    neighbors: str = "add_remove", weighted: bool = False,
) -> tuple[float, str]:
    """(Δ, norm) of the released table; see the module docstring for the argument."""
    k, m = repetitions, max_items_per_unit
    f = replace_factor(mechanism, neighbors=neighbors, weighted=weighted)
    if mechanism in ("private_count_sketch", "count_mean"):
        per_rep = m if unit_l2_bound is None else unit_l2_bound
        return f * math.sqrt(k) * per_rep, "l2"
    if mechanism == "count_min":
        if unit_l2_bound is not None:
            raise ValueError("count_min bounds L1, not L2: per-unit L2 clipping does not apply")
        return f * float(k * m), "l1"
    if mechanism == "histogram":
        if unit_l2_bound is not None:
            raise ValueError("histogram: per-unit L2 clipping in sketch space does not apply")
        return f * float(m), "l2"
    raise ValueError(f"unknown mechanism {mechanism!r}; expected one of {list(MECHANISMS)}")


def plan_sketch(
    mechanism: str,
    *,
    epsilon: float,
    delta: float,
    repetitions: int = 1,
    max_items_per_unit: int = 1,
    unit_l2_bound: float | None = None,
    neighbors: str = "add_remove",
    weighted: bool = False,
) -> SketchPlan:
    """The privacy events, noise scale and sensitivity of a sketch release (all public)."""
    sens, norm = sketch_sensitivity(
        mechanism, repetitions=repetitions, max_items_per_unit=max_items_per_unit, unit_l2_bound=unit_l2_bound,
        neighbors=neighbors, weighted=weighted,
    )
    unit_bound = {"max_items_per_unit": max_items_per_unit, "unit_l2_bound": unit_l2_bound, "neighbors": neighbors}
    if norm == "l1":
        # Laplace mechanism: b = Δ₁/ε is ε-DP (Dwork et al. 2006); z = b/Δ₁ = 1/ε.
        z = 1.0 / epsilon
        return SketchPlan(mechanism, [LaplaceEvent(noise_multiplier=z)], Budget(epsilon, 0.0), "laplace",
                          z * sens, sens, "l1", unit_bound)
    z = gaussian_noise_multiplier(epsilon, delta)
    return SketchPlan(mechanism, [GaussianEvent(noise_multiplier=z)], Budget(epsilon, delta), "gaussian",
                      z * sens, sens, "l2", unit_bound)


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


def release_table(plan: SketchPlan, table: np.ndarray, chokepoint: Chokepoint) -> np.ndarray:
    """Noises an exact table with the mechanism of ``plan`` (through the chokepoint)."""
    if plan.mechanism == "private_count_sketch":
        return private_count_sketch(table, chokepoint=chokepoint, sigma=plan.scale, sensitivity=plan.sensitivity)
    if plan.mechanism == "count_mean":
        return count_mean_sketch(table, chokepoint=chokepoint, sigma=plan.scale, sensitivity=plan.sensitivity)
    if plan.mechanism == "count_min":
        return private_count_min(table, chokepoint=chokepoint, scale=plan.scale, l1_sensitivity=plan.sensitivity)
    if plan.mechanism == "histogram":
        return gaussian_histogram(table, chokepoint=chokepoint, sigma=plan.scale, sensitivity=plan.sensitivity)
    raise ValueError(f"unknown mechanism {plan.mechanism!r}")


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
