"""The second-moment family's mechanism registry: one line per mechanism, and the generic planner.

Each mechanism module declares its constraints and planner (a
:class:`~spark_dp.second_moment._registry.MechanismSpec`); the API and the
config tasks look mechanisms up here. No pyspark: configs are planned before
Spark starts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from spark_dp import params as P
from spark_dp.errors import ConfigError
from spark_dp.params import ROW_IDS
from spark_dp.privacy.quantile import BoundsPlan, QuantilePlan
from spark_dp.second_moment._postprocess import POSTPROCESS
from spark_dp.second_moment._registry import (  # noqa: F401 - default_projection_rows is re-exported
    OPTIONAL_PARAMS,
    MechanismPlan,
    MechanismSpec,
    PlanRequest,
    default_projection_rows,
)
from spark_dp.second_moment.adassp import MECHANISM as ADASSP
from spark_dp.second_moment.analyze_gauss import MECHANISM as ANALYZE_GAUSS
from spark_dp.second_moment.clipping import ClippingPlan
from spark_dp.second_moment.inverse_wishart import MECHANISM as INVERSE_WISHART
from spark_dp.second_moment.jl_ridge import CALIBRATIONS, PROJECTIONS
from spark_dp.second_moment.jl_ridge import MECHANISM as JL_RIDGE
from spark_dp.second_moment.wishart import MECHANISM as WISHART

# The registry: one line per mechanism; each module declares its constraints and planner.
MECHANISMS: dict[str, MechanismSpec] = {spec.name: spec for spec in (
    ANALYZE_GAUSS, JL_RIDGE, WISHART, INVERSE_WISHART, ADASSP,
)}
SECOND_MOMENT_MECHANISMS = tuple(n for n, s in MECHANISMS.items() if "second_moment" in s.tasks)
REGRESSION_MECHANISMS = tuple(n for n, s in MECHANISMS.items() if "linear_regression" in s.tasks)
PCA_MECHANISMS = tuple(n for n, s in MECHANISMS.items() if "pca" in s.tasks)
THEOREM_NEIGHBORS = {n: s.theorem_neighbors for n, s in MECHANISMS.items()}
#: The family's own parameters (API keyword → constraint), checked by the API and the config tasks alike.
PARAMS = P.Constraints({
    "postprocess": P.Options(POSTPROCESS), "calibration": P.Options(CALIBRATIONS), "row_ids": P.Options(ROW_IDS),
    "projection": P.Options(PROJECTIONS), "label": P.Str(),
    "standardize": P.Options(("none", "bounds", "mean")),
    "mean_share": P.Real(0, 1, low_open=True, high_open=True),  # standardize="mean": the mean's share (mu-GDP)
})


def _accepting(what: str, value: Any) -> str:
    names = [n for n, s in MECHANISMS.items() if (value in s.calibrations if what == "calibration" else what in s.params)]
    return "mechanism" + ("s " if len(names) > 1 else " ") + ", ".join(repr(n) for n in names)


def plan_mechanism(
    mechanism: str, *, d: int, epsilon: float, delta: float, norm_bound: float, neighbors: str = "add_remove",
    max_rows_per_unit: int = 1, postprocess: str = "none", projection_rows: int | None = None, dof: int | None = None,
    public_n: int | None = None, prior_dof: int | None = None,
    calibration: str = "exact", row_ids: str = "content", projection: str = "gram", owner: str = "second_moment",
) -> MechanismPlan:
    """Validates the mechanism's parameters against its registry entry and plans its events.

    Generic checks, from each mechanism's :class:`MechanismSpec` (a
    ConfigError naming the parameter): an optional parameter the mechanism
    does not take (``projection_rows``, ``row_ids`` and ``projection`` are
    jl_ridge's; ``dof`` wishart's and inverse_wishart's; ``public_n`` and
    ``prior_dof`` inverse_wishart's), a calibration it has no published
    constant for (``paper``: analyze_gauss with ε < 1, jl_ridge, wishart), a
    post-processing it does not release a matrix for (adassp), and
    ``max_rows_per_unit`` > 1 where its proof is for one row per unit (only
    analyze_gauss and adassp take m > 1). The mechanism's own planner then
    checks the rest (r or m < d + 2, Wishart's k and ε, ``public_n`` with
    add/remove neighbours or with ``dof``; see the mechanism modules).

    ``public_n`` (inverse_wishart): the paper's posterior m = n + m₀ with n
    public (given by the user, recorded in the manifest) and m₀ =
    ``prior_dof`` (default d + 2); Sheffet's neighbours (replace one row).
    """
    for name, value in (("calibration", calibration), ("row_ids", row_ids), ("projection", projection)):
        PARAMS.check(name, value, owner=owner)
    spec = MECHANISMS.get(mechanism)
    if spec is None:
        raise ConfigError(f"unknown mechanism {mechanism!r}")
    given = {"projection_rows": projection_rows, "dof": dof, "public_n": public_n, "prior_dof": prior_dof,
             "row_ids": row_ids, "projection": projection}
    for name, value in given.items():
        if value != OPTIONAL_PARAMS[name] and name not in spec.params:
            raise ConfigError(f"The {name!r} parameter of {owner} applies to {_accepting(name, value)} only. "
                              f"Got {value!r} for {mechanism!r}.")
    if calibration not in spec.calibrations:
        raise ConfigError(f"The 'calibration' parameter of {owner} may be {calibration!r} only for "
                          f"{_accepting('calibration', calibration)} (no published constant to reproduce for "
                          f"{mechanism!r}). Got {calibration!r} for {mechanism!r}.")
    if postprocess not in spec.postprocess:
        raise ConfigError(f"The 'postprocess' parameter of {owner} must be one of {list(spec.postprocess)} for "
                          f"mechanism {mechanism!r}. Got {postprocess!r} instead.")
    if not spec.units and max_rows_per_unit != 1:
        raise ConfigError(
            f"The 'max_rows_per_unit' parameter of {owner} must be 1 for mechanism {mechanism!r} "
            f"(its privacy proof is for one row per unit). Got {max_rows_per_unit} instead."
        )
    base = {"epsilon": epsilon, "delta": delta, "neighbors": neighbors, "norm_bound": norm_bound,
            "privacy_unit_rows": max_rows_per_unit, "theorem_neighbors": spec.theorem_neighbors}
    return spec.plan(PlanRequest(
        d=d, epsilon=epsilon, delta=delta, norm_bound=norm_bound, neighbors=neighbors,
        max_rows_per_unit=max_rows_per_unit, postprocess=postprocess, calibration=calibration, owner=owner,
        base_privacy=base, projection_rows=projection_rows, dof=dof, public_n=public_n, prior_dof=prior_dof,
        row_ids=row_ids, projection=projection,
    ))


def bound_planner(mechanism: str, *, size: int, epsilon: float, quantile: QuantilePlan | None, owner: str,
                  **kw: Any) -> Callable[[float], MechanismPlan]:
    """``plan_for(B)``: the mechanism's plan on vectors of length ``size`` at norm bound B.

    With ``quantile`` (``norm_bound="auto"``) the mechanism gets ε minus the
    quantile's share, and its events must not depend on B (they are charged
    before B is chosen): a ConfigError names the parameter otherwise.
    """
    eps = epsilon if quantile is None else epsilon - quantile.epsilon

    def plan_for(norm_bound: float) -> MechanismPlan:
        return plan_mechanism(mechanism, d=size, epsilon=eps, norm_bound=norm_bound, owner=owner, **kw)

    if quantile is not None and list(plan_for(1.0).events) != list(plan_for(2.0).events):
        raise ConfigError(f"The 'norm_bound' parameter of {owner} may be 'auto' only for mechanisms whose privacy "
                          f"events do not depend on the bound; not for {mechanism!r}.")
    return plan_for


def release_events(plan_for: Callable[[float], MechanismPlan], norm_bound: float | str,
                   quantile: QuantilePlan | None, clipping: ClippingPlan | None = None,
                   bounds: BoundsPlan | None = None) -> list:
    """All events of a release: ``bounds="auto"``'s and the norm quantile's (``auto``) first, then the
    mechanism's, then the clipping report's.
    """
    first = [] if bounds is None else [bounds.event]
    last = [] if clipping is None else [clipping.event]
    if quantile is None:
        return [*first, *plan_for(float(norm_bound)).events, *last]
    return [*first, quantile.event, *plan_for(1.0).events, *last]
