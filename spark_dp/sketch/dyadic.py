"""Heavy hitters without candidates: a dyadic hierarchy of Private CountSketches.

For integer items in [0, 2^L), level ℓ = 1…L holds a Private CountSketch of
the prefixes x >> (L − ℓ) (Cormode & Muthukrishnan's dyadic decomposition,
with Pagh & Thorup's Gaussian noise and median estimator at every level).

Privacy: every row adds its weight to one prefix per level, so the L stacked
k×b tables move by Δ₂ = √(L·k)·m under add/remove of a unit (each level
√k·m, disjoint coordinates). One Gaussian release of the whole stack with
σ = z(ε, δ)·Δ₂ — the same as splitting the budget over the L levels by exact
Gaussian composition (μ² adds up).

Decoding (post-processing): start from the prefixes {0, 1} at level 1; at
each level keep the children whose estimate is ≥ the threshold, at most
``beam`` of them (largest first), and descend; the survivors at level L are
the heavy hitters.
"""

from __future__ import annotations

import math

import numpy as np

from spark_dp.privacy import Budget, GaussianEvent, gaussian_noise_multiplier
from spark_dp.sketch.count_sketch import SketchPlan, combine, simple_estimates
from spark_dp.sketch.hashing import buckets_and_signs


def plan_dyadic(*, epsilon: float, delta: float, repetitions: int, levels: int, max_items_per_unit: int = 1) -> SketchPlan:
    """Events, σ and Δ₂ = √(L·k)·m of a dyadic release."""
    sens = math.sqrt(levels * repetitions) * max_items_per_unit
    z = gaussian_noise_multiplier(epsilon, delta)
    return SketchPlan("private_count_sketch", [GaussianEvent(noise_multiplier=z)], Budget(epsilon, delta), "gaussian",
                      z * sens, sens, "l2", {"max_items_per_unit": max_items_per_unit, "levels": levels})


def level_estimates(tables: np.ndarray, seeds: list[list[int]], level: int, prefixes: list[int]) -> np.ndarray:
    """Median estimates of the given prefixes at ``level`` (1-based)."""
    table = tables[level - 1]
    h, s = buckets_and_signs(prefixes, seeds[level - 1], table.shape[-1], "long")
    return combine(simple_estimates(table, h, s), "median")


def dyadic_heavy_hitters(
    tables: np.ndarray, seeds: list[list[int]], *, top: int, threshold: float, beam: int | None = None
) -> list[tuple[int, float]]:
    """Descends the hierarchy; returns up to ``top`` (item, estimate) pairs, largest first.

    Args:
        tables: the released stack, shape (L, k, b).
        seeds: per level, the k seeds.
        top: how many heavy hitters to return.
        threshold: minimum estimate at every level.
        beam: prefixes kept per level (default 4·top).
    """
    levels = tables.shape[0]
    beam = beam or 4 * top
    prefixes = [0, 1]
    kept: list[tuple[int, float]] = []
    for level in range(1, levels + 1):
        est = level_estimates(tables, seeds, level, prefixes)
        order = np.argsort(-est, kind="stable")
        kept = [(prefixes[j], float(est[j])) for j in order if est[j] >= threshold][:beam]
        if not kept:
            return []
        if level < levels:
            prefixes = [c for p, _ in kept for c in (2 * p, 2 * p + 1)]
    return kept[:top]
