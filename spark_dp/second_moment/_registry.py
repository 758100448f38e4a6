"""The second-moment mechanisms as a registry: each mechanism module declares one :class:`MechanismSpec`.

A spec says what the mechanism accepts (its optional parameters,
calibrations, post-processing, whether a unit may hold m > 1 rows) and how
it plans a release from public parameters (:class:`PlanRequest` →
:class:`MechanismPlan`). The family API validates a request against the
spec generically and calls ``spec.plan``; adding a mechanism is one module
with one spec plus one line in :data:`spark_dp.second_moment.api.MECHANISMS`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from spark_dp.errors import ConfigError

# Optional parameters a mechanism may accept, with the value meaning "not given".
OPTIONAL_PARAMS: dict[str, Any] = {
    "projection_rows": None, "dof": None, "public_n": None, "prior_dof": None, "row_ids": "content",
    "projection": "gram",
}


@dataclass(frozen=True)
class PlanRequest:
    """Everything public a second-moment release is planned from (validated by the family API)."""

    d: int
    epsilon: float
    delta: float
    norm_bound: float
    neighbors: str
    max_rows_per_unit: int
    postprocess: str
    calibration: str
    owner: str
    base_privacy: dict[str, Any]  # the manifest fields every mechanism shares
    projection_rows: int | None = None
    dof: int | None = None
    public_n: int | None = None
    prior_dof: int | None = None
    row_ids: str = "content"
    projection: str = "gram"


@dataclass
class MechanismPlan:
    """The public plan of one release: events, privacy fields, and how to noise."""

    mechanism: str
    events: list
    privacy: dict[str, Any]
    params: dict[str, Any]
    noise: Callable[..., Any] = field(repr=False)
    needs_gram: bool = True


@dataclass(frozen=True)
class MechanismSpec:
    """One mechanism's constraints and planner.

    Attributes:
        name: the ``mechanism`` value.
        plan: ``plan(request) -> MechanismPlan``; raises ConfigError for
            mechanism-specific constraints (naming the parameter).
        params: the optional parameters (:data:`OPTIONAL_PARAMS`) it accepts.
        calibrations: accepted ``calibration`` values.
        postprocess: accepted ``postprocess`` values.
        units: whether a privacy unit may hold m > 1 rows (its proof covers m).
        theorem_neighbors: the neighbour relation its theorem is for (manifest).
        tasks: the family functions that offer it.
    """

    name: str
    plan: Callable[[PlanRequest], MechanismPlan]
    params: frozenset[str]
    calibrations: tuple[str, ...]
    postprocess: tuple[str, ...]
    units: bool
    theorem_neighbors: str
    tasks: tuple[str, ...] = ("second_moment", "linear_regression", "pca")


DEFAULT_PROJECTION_ROWS = 400


def default_projection_rows(d: int) -> int:
    """Default r (JL) and m (inverse-Wishart): max(400, 2d)."""
    return max(DEFAULT_PROJECTION_ROWS, 2 * d)


def check_rows_at_least_d_plus_2(r: int, d: int, *, name: str, mechanism: str, owner: str) -> None:
    """JL's r and inverse-Wishart's m must be ≥ d + 2 (the release must be positive definite)."""
    if r < d + 2:
        raise ConfigError(
            f"The {name!r} parameter of {owner} must be at least d + 2 = {d + 2} for mechanism {mechanism!r} "
            f"(the release must be positive definite). Got {r} instead."
        )
