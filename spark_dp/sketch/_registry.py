"""The sketch mechanisms as a registry: each mechanism declares one :class:`SketchSpec` next to its noise step.

A spec says what the mechanism releases (a hashed table, signed or not, or a
histogram over a public domain), its noise family (Gaussian on an L2
sensitivity, Laplace on an L1 one), its default estimator, and what it
accepts (per-unit L2 clipping in sketch space, the fewest buckets, dyadic
levels). Sensitivity and planning are generic over the spec
(:func:`sensitivity`, :func:`replace_factor`); adding a mechanism is its
noise step with one spec plus one line in
:data:`spark_dp.sketch.mechanisms.REGISTRY`. No pyspark.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from spark_dp.privacy import Budget, Chokepoint
from spark_dp.privacy.events import Event

NOISE_FAMILIES = {"gaussian": "l2", "laplace": "l1"}  # noise family -> the sensitivity norm it is calibrated to


@dataclass(frozen=True)
class SketchSpec:
    """One sketch mechanism's constraints and noise step.

    Attributes:
        name: the ``mechanism`` value.
        noise: ``gaussian`` (σ = z(ε, δ)·Δ₂) or ``laplace`` (b = Δ₁/ε, pure ε-DP).
        release: ``release(table, chokepoint, scale, sensitivity) -> noisy
            table``; draws only through the chokepoint.
        estimators: the estimators its released tables may be read with, the default first.
        signed: whether a hashed table adds sᵢ(x) = ±1 per row (CountSketch);
            None for a histogram over a public domain (no hashing, one table).
        unit_l2_clipping: whether it accepts ``unit_clipping="sketch_l2"``
            (L2 sketches: Δ from the per-unit bound C instead of m).
        min_buckets: the fewest buckets b its estimator works with.
        dyadic: whether it can stack dyadic prefix levels (``levels``).
    """

    name: str
    noise: str
    release: Callable[[np.ndarray, Chokepoint, float, float], np.ndarray] = field(repr=False)
    estimators: tuple[str, ...]
    signed: bool | None
    unit_l2_clipping: bool = False
    min_buckets: int = 1
    dyadic: bool = False

    def __post_init__(self) -> None:
        if self.noise not in NOISE_FAMILIES:
            raise ValueError(f"bug: sketch mechanism {self.name!r} has noise {self.noise!r}; "
                             f"expected one of {list(NOISE_FAMILIES)}")

    @property
    def estimator(self) -> str:
        """The default estimator."""
        return self.estimators[0]

    @property
    def hashed(self) -> bool:
        """Whether the release is a k × b hashed table (False: a histogram over a public domain)."""
        return self.signed is not None

    @property
    def norm(self) -> str:
        """``l2`` or ``l1``: the norm its sensitivity is taken in."""
        return NOISE_FAMILIES[self.noise]


@dataclass(frozen=True)
class SketchPlan:
    """Everything about a release's privacy that follows from public parameters.

    Attributes:
        mechanism: the mechanism's name (:data:`spark_dp.sketch.mechanisms.MECHANISMS`).
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


def replace_factor(spec: SketchSpec, *, neighbors: str, weighted: bool) -> float:
    """Δ under ``neighbors`` / Δ under add/remove (:mod:`spark_dp.sketch.count_sketch`): 1, 2, or √2.

    √2 for an unweighted unsigned L2 table (Count-Mean, histogram): its
    contributions are ≥ 0, so ‖c' − c‖₂² ≤ ‖c‖₂² + ‖c'‖₂²; 2 otherwise
    (triangle inequality; tight for signed or weighted contributions and for L1).
    """
    if neighbors == "add_remove":
        return 1.0
    if neighbors != "replace":
        raise ValueError(f"unknown neighbour relation {neighbors!r}; expected 'add_remove' or 'replace'")
    if spec.signed is not True and spec.norm == "l2" and not weighted:
        return math.sqrt(2.0)
    return 2.0


def sensitivity(
    spec: SketchSpec, *, repetitions: int, max_items_per_unit: int = 1, unit_l2_bound: float | None = None,
    neighbors: str = "add_remove", weighted: bool = False,
) -> tuple[float, str]:
    """(Δ, norm) of the released table (:mod:`spark_dp.sketch.count_sketch` has the argument).

    Each of the k repetitions (one table for a histogram) moves by ≤ m in L1,
    hence ≤ m (or the per-unit bound C) in L2, and the repetitions are
    disjoint coordinates: Δ₂ = f·√k·m (or f·√k·C), Δ₁ = f·k·m, f the
    :func:`replace_factor`.
    """
    k, m = (repetitions if spec.hashed else 1), max_items_per_unit
    f = replace_factor(spec, neighbors=neighbors, weighted=weighted)
    if unit_l2_bound is not None and not spec.unit_l2_clipping:
        raise ValueError(f"{spec.name}: per-unit L2 clipping in sketch space does not apply "
                         f"(its sensitivity is in {spec.norm}, from m)")
    if spec.norm == "l2":
        per_rep = m if unit_l2_bound is None else unit_l2_bound
        return f * math.sqrt(k) * per_rep, "l2"
    return f * float(k * m), "l1"
