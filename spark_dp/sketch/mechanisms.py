"""The sketch family's mechanism registry: one line per mechanism, and the generic planner (no pyspark).

Each mechanism declares its constraints and noise step as a
:class:`~spark_dp.sketch._registry.SketchSpec` next to its code
(:mod:`spark_dp.sketch.count_sketch`); the API, the config task and the
estimators look mechanisms up here.
"""

from __future__ import annotations

from spark_dp.privacy import Budget, Chokepoint, GaussianEvent, LaplaceEvent, gaussian_noise_multiplier
from spark_dp.sketch import _registry
from spark_dp.sketch._registry import SketchPlan, SketchSpec
from spark_dp.sketch.count_sketch import COUNT_MEAN, COUNT_MIN, HISTOGRAM, PRIVATE_COUNT_SKETCH

# The registry: one line per mechanism; each declares its constraints and noise step.
REGISTRY: dict[str, SketchSpec] = {spec.name: spec for spec in (
    PRIVATE_COUNT_SKETCH, COUNT_MIN, COUNT_MEAN, HISTOGRAM,
)}
MECHANISMS = tuple(REGISTRY)
DEFAULT_ESTIMATOR = {name: spec.estimator for name, spec in REGISTRY.items()}
SIGNED = {name: spec.signed for name, spec in REGISTRY.items() if spec.hashed}


def spec_of(mechanism: str) -> SketchSpec:
    """The registry entry of ``mechanism`` (ValueError if unknown: the API checks names first)."""
    spec = REGISTRY.get(mechanism)
    if spec is None:
        raise ValueError(f"unknown mechanism {mechanism!r}; expected one of {list(MECHANISMS)}")
    return spec


def accepting(flag: str) -> str:
    """The mechanisms whose spec has ``flag`` set, for error messages: ``'a, b'``."""
    return ", ".join(name for name, spec in REGISTRY.items() if getattr(spec, flag))


def replace_factor(mechanism: str, *, neighbors: str, weighted: bool) -> float:
    """Δ under ``neighbors`` / Δ under add/remove: 1, 2, or √2 (:func:`spark_dp.sketch._registry.replace_factor`)."""
    return _registry.replace_factor(spec_of(mechanism), neighbors=neighbors, weighted=weighted)


def sketch_sensitivity(
    mechanism: str, *, repetitions: int, max_items_per_unit: int = 1, unit_l2_bound: float | None = None,
    neighbors: str = "add_remove", weighted: bool = False,
) -> tuple[float, str]:
    """(Δ, norm) of the released table (:func:`spark_dp.sketch._registry.sensitivity`)."""
    return _registry.sensitivity(spec_of(mechanism), repetitions=repetitions, max_items_per_unit=max_items_per_unit,
                                 unit_l2_bound=unit_l2_bound, neighbors=neighbors, weighted=weighted)


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
    if spec_of(mechanism).noise == "laplace":
        # Laplace mechanism: b = Δ₁/ε is ε-DP (Dwork et al. 2006); z = b/Δ₁ = 1/ε.
        z = 1.0 / epsilon
        return SketchPlan(mechanism, [LaplaceEvent(noise_multiplier=z)], Budget(epsilon, 0.0), "laplace",
                          z * sens, sens, norm, unit_bound)
    z = gaussian_noise_multiplier(epsilon, delta)
    return SketchPlan(mechanism, [GaussianEvent(noise_multiplier=z)], Budget(epsilon, delta), "gaussian",
                      z * sens, sens, norm, unit_bound)


def release_table(plan: SketchPlan, table, chokepoint: Chokepoint):
    """Noises an exact table with the mechanism of ``plan`` (through the chokepoint)."""
    return spec_of(plan.mechanism).release(table, chokepoint, plan.scale, plan.sensitivity)
