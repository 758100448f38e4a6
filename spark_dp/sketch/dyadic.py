"""Heavy hitters without candidates: a dyadic hierarchy of Private CountSketches.

For item ids in [0, 2^L), level ℓ = 1…L holds a Private CountSketch of
the prefixes id >> (L − ℓ) (Cormode & Muthukrishnan's dyadic decomposition,
with Pagh & Thorup's Gaussian noise and median estimator at every level).

Item domains: integer items are their own ids (items outside [0, 2^L) are
not counted); any items (strings, or integers on request) can instead be
mapped to ids by a *public* hash, id = xxhash64(hash_seed, item) & (2^L − 1)
(:func:`spark_dp.sketch.hashing.hashed_ids`), with ``hash_seed`` drawn from
OS entropy by the driver and released. The hash is a fixed, data-independent
map applied to every row before the sketch, so neighbours stay neighbours
(a unit's ≤ m rows map to ≤ m ids) and Δ₂ below is unchanged; privacy does
not depend on the seed being secret. The release then names heavy *ids*;
:func:`dyadic_heavy_hitters_of` maps public candidates back through the hash.
Two distinct items share an id with probability 2^−L; among n distinct items
about n²/2^(L+1) pairs collide (birthday bound), and a given item collides
with some other with probability ≤ n/2^L — with L = 32 (the default for
hashed domains) and n = 10⁶, 2.3·10⁻⁴.

Privacy: every row adds its weight to one prefix per level, so the L stacked
k×b tables move by Δ₂ = √(L·k)·m under add/remove of a unit (each level
√k·m, disjoint coordinates), and by twice that under replace (signed
tables; :func:`spark_dp.sketch.mechanisms.replace_factor`). One Gaussian release of the whole stack with
σ = z(ε, δ)·Δ₂ — the same as splitting the budget over the L levels by exact
Gaussian composition (μ² adds up).

Decoding (post-processing): start from the prefixes {0, 1} at level 1; at
each level keep the children whose estimate is ≥ the threshold, at most
``beam`` of them (largest first), and descend; the survivors at level L are
the heavy hitters.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from spark_dp.privacy import Budget, GaussianEvent, gaussian_noise_multiplier
from spark_dp.sketch.count_sketch import combine, simple_estimates
from spark_dp.sketch.hashing import buckets_and_signs
from spark_dp.sketch.mechanisms import SketchPlan, replace_factor


def plan_dyadic(*, epsilon: float, delta: float, repetitions: int, levels: int, max_items_per_unit: int = 1,
                neighbors: str = "add_remove") -> SketchPlan:
    """Events, σ and Δ₂ = f·√(L·k)·m of a dyadic release (f = 1 add/remove, 2 replace: signed tables)."""
    f = replace_factor("private_count_sketch", neighbors=neighbors, weighted=True)
    sens = f * math.sqrt(levels * repetitions) * max_items_per_unit
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


DEFAULT_HASHED_LEVELS = 32  # L for hashed domains: n distinct items collide pairwise with probability ≤ n/2^32


def stack_of(arrays: dict[str, np.ndarray]) -> np.ndarray:
    """The released (L, k, b) stack of a dyadic release's arrays (``dyadic_sketch`` levels 1…L−1, then ``sketch``)."""
    top = arrays["sketch"][None]
    return np.concatenate([arrays["dyadic_sketch"], top]) if "dyadic_sketch" in arrays else top


def dyadic_heavy_hitters_of(
    stack: np.ndarray,
    seeds: list[list[int]],
    *,
    top: int,
    threshold: float,
    hash_seed: int | None,
    kind: str,
    candidates: list[Any] | None = None,
) -> list[tuple[Any, float]]:
    """Decoded heavy ids, or (with ``candidates``) the candidates whose id is among them (post-processing).

    Args:
        stack, seeds, top, threshold: as for :func:`dyadic_heavy_hitters`.
        hash_seed: the release's public domain hash seed (None: ids are the integer items).
        kind: the item type of the candidates (``string`` or ``long``).
        candidates: public items; each is mapped to its id (through the
            released hash) and kept if that id was decoded as heavy, with the
            id's estimate. Distinct candidates that collide share an id and
            its estimate.

    Returns:
        ``[(id or candidate, estimate), …]`` by decreasing estimate, at most ``top``.
    """
    from spark_dp.sketch.hashing import hashed_ids

    found = dyadic_heavy_hitters(stack, seeds, top=top, threshold=threshold)
    if candidates is None:
        return found
    heavy = dict(found)
    items = list(dict.fromkeys(candidates))
    if hash_seed is None:
        ids = [x if x is not None else -1 for x in items]
    else:
        ids = hashed_ids(items, hash_seed, stack.shape[0], kind).tolist()
    keep = [(x, heavy[i]) for x, i in zip(items, ids, strict=True) if i in heavy]
    keep.sort(key=lambda t: (-t[1], str(t[0])))
    return keep[:top]
