"""The validation and planning the second-moment family's functions share (bounds, intercept, norm bound).

:func:`prepare` checks the parameters every family function takes, builds
the release's :class:`Vector` (columns, public ``bounds``, the constant
column of an intercept or of bounds, the norm bound or the plan of
``norm_bound="auto"``) and plans the mechanism at a norm bound
(``plan_for``). The result, a :class:`Prepared`, then builds the request and
the manifest fields, and maps released matrices back to the data's units, so
:func:`~spark_dp.second_moment.api.second_moment`,
:func:`~spark_dp.second_moment.api.linear_regression` and
:func:`~spark_dp.second_moment.api.pca` keep only what is their own.
No Spark job: the schema is read, nothing else.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from spark_dp import _validation as V
from spark_dp import params as P
from spark_dp.aggregates import vector_dimension
from spark_dp.aggregates._vectors import Affine
from spark_dp.errors import ConfigError
from spark_dp.privacy.quantile import NORM_GRID, BoundsPlan, QuantilePlan, plan_quantile
from spark_dp.release.pipeline import confidence_request
from spark_dp.release.uncertainty import Uncertainty
from spark_dp.second_moment._registry import MechanismPlan
from spark_dp.second_moment._scaling import Scaling
from spark_dp.second_moment.clipping import DEFAULT_SHARE as CLIPPING_SHARE
from spark_dp.second_moment.clipping import ClippingPlan, check_shares, plan_clipping_report
from spark_dp.second_moment.mechanisms import PARAMS as SM_PARAMS
from spark_dp.second_moment.mechanisms import bound_planner
from spark_dp.second_moment.uncertainty import drop_index, matrix_uncertainty

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from spark_dp.session import DPSession

DEFAULT_NORM_BOUND_SHARE = 0.1
DEFAULT_NORM_BOUND_QUANTILE = 0.95
#: A regression's rows are clipped with their constant and label, which only reweights them (the linear
#: relation y = xβ + b·c survives scaling the row): a low quantile costs little bias and saves noise
#: (docs/accuracy.md: the median is within 1.1x of the best hand-chosen bound on the worked example).
REGRESSION_NORM_BOUND_QUANTILE = 0.5
DEFAULT_CLIPPING_SHARE = CLIPPING_SHARE  # the clipping report's share of ε (spark_dp.second_moment.clipping)
DEFAULT_BOUNDS_SHARE = 0.1  # bounds="auto": the share of ε of all the columns' private bounds


def _check_common(owner, epsilon, delta, norm_bound, neighbors, postprocess, nonfinite, max_rows_per_unit, privacy_unit,
                  bounds=None, norm_bound_share=DEFAULT_NORM_BOUND_SHARE,
                  norm_bound_quantile=DEFAULT_NORM_BOUND_QUANTILE, clipping=False, clipping_share=DEFAULT_CLIPPING_SHARE):
    epsilon, delta = (P.check(n, v, owner=owner) for n, v in (("epsilon", epsilon), ("delta", delta)))
    norm_bound = P.check("norm_bound_or_auto", norm_bound, owner=owner, key="norm_bound")
    for name, value in (("neighbors", neighbors), ("nonfinite", nonfinite), ("privacy_unit", privacy_unit)):
        P.check(name, value, owner=owner)
    SM_PARAMS.check("postprocess", postprocess, owner=owner)
    bounds = P.check("bounds", bounds, owner=owner)
    share = P.check("norm_bound_share", norm_bound_share, owner=owner)
    quantile = P.check("norm_bound_quantile", norm_bound_quantile, owner=owner)
    clipping = P.check("clipping_report", clipping, owner=owner)
    clipping_share = P.check("clipping_report_share", clipping_share, owner=owner)
    return (epsilon, delta, norm_bound, P.check("max_rows_per_unit", max_rows_per_unit, owner=owner), bounds,
            share, quantile, clipping_share if clipping else None)


@dataclass(frozen=True)
class Vector:
    """What a release's vector is: its columns, public bounds, constant column and norm bound.

    ``norm_bound`` is a number, or ``"auto"`` with ``quantile`` the plan of
    its private choice. The constant column holds 1 with bounds (every
    bounded entry is in [-1, 1]); without bounds (a regression intercept on
    raw columns) it holds B/√d, an equal share of the norm bound.
    """

    columns: list[str] | str
    names: tuple[str, ...]
    bounds: dict[str, tuple[float, float]] | None
    constant_at: int | None
    size: int
    norm_bound: float | str
    quantile: QuantilePlan | None = None
    clipping: ClippingPlan | None = None
    auto_bounds: BoundsPlan | None = None

    def with_bounds(self, bounds: dict[str, tuple[float, float]]) -> Vector:
        """The vector with the bounds ``bounds="auto"`` chose (after the charge)."""
        return dataclasses.replace(self, bounds=bounds)

    @property
    def scaled(self) -> bool:
        return self.bounds is not None or self.constant_at is not None

    def constant_value(self, norm_bound: float) -> float:
        return 1.0 if self.bounds is not None else norm_bound / math.sqrt(self.size)

    def scaling(self, norm_bound: float) -> Scaling:
        return Scaling.of(self.names, self.bounds, constant_at=self.constant_at,
                          constant_value=self.constant_value(norm_bound))

    def affine(self, norm_bound: float | None, *, flag: bool = False) -> Affine | None:
        """The vector's Affine; ``norm_bound`` None: for the row norms of ``auto`` (no constant without bounds).

        ``flag``: with bounds, the array also carries the clamping flag (the clipping report's count).
        """
        if not self.scaled:
            return None
        bounds = tuple((self.bounds or {}).get(c) for c in self.names)
        if norm_bound is None and self.bounds is None:
            return Affine(bounds)
        return Affine(bounds, self.constant_at, self.constant_value(norm_bound or 1.0),
                      flag=flag and self.bounds is not None)

    @property
    def fully_bounded(self) -> bool:
        return self.bounds is not None and all(c in self.bounds for c in self.names)

    def grid(self) -> np.ndarray:
        """The public candidates of ``auto``: 2^(j/4); with every column bounded only those in [√d/256, √d], and √d."""
        if not self.fully_bounded:
            return NORM_GRID
        top = math.sqrt(self.size)
        return np.append(NORM_GRID[(NORM_GRID >= top / 256) & (NORM_GRID < top * (1 - 1e-12))], top)

    def bound_from_quantile(self, q: float) -> float:
        """B from the selected row-norm quantile (rows without the B/√d constant: B² = q²·d/(d − 1))."""
        if self.bounds is None and self.constant_at is not None:
            return q * math.sqrt(self.size / (self.size - 1))
        return q


def vector(owner: str, df: DataFrame, columns, dimension, *, bounds, norm_bound, constant_at, epsilon, share,
           quantile, max_rows_per_unit, neighbors, what: str = "column", clipping_share: float | None = None,
           bounds_share: float = DEFAULT_BOUNDS_SHARE, norm_bound_auto: bool = True) -> Vector:
    """Validates the vector's definition against the schema (no Spark job), plans ``norm_bound="auto"`` and the
    clipping report (``clipping_share``: its share of ε, None without one). ``norm_bound_auto``: whether the
    caller's family offers ``norm_bound="auto"`` (the tensor family does not; its errors then do not suggest it).
    """
    names = (columns,) if isinstance(columns, str) else tuple(columns)
    d = vector_dimension(df, columns, dimension)  # schema check, no Spark job
    bplan = None
    if bounds == "auto":
        if norm_bound == "auto":
            raise ConfigError(f"The 'norm_bound' parameter of {owner} may not be 'auto' with bounds 'auto' (every "
                              "column is then bounded: omit it, B = sqrt(d), or give a number).")
        check_shares(owner, clipping_share or 0.0, bounds_share, what="bounds_share", other="clipping_report_share")
        bplan = BoundsPlan(epsilon * bounds_share, names, max_rows_per_unit, neighbors)
        bounds = {c: (-1.0, 1.0) for c in names}  # placeholders: the structure is public, the values chosen later
    if bounds is not None:
        unknown = [c for c in bounds if c not in names]
        if unknown:
            raise ConfigError(f"The 'bounds' parameter of {owner} names {unknown[0]!r}, which is not one of the "
                              f"release's columns {list(names)}.")
        if d != len(names):
            raise ConfigError(f"The 'bounds' parameter of {owner} applies to numeric columns only; give the "
                              "elements of an array or vector column as columns.")
    size = d + (constant_at is not None)
    if norm_bound is None:
        if bounds is None or any(c not in bounds for c in names):
            raise ConfigError(f"The 'norm_bound' parameter of {owner} is required unless every {what} has bounds; "
                              "give a number" + (" or 'auto'." if norm_bound_auto else "."))
        norm_bound = math.sqrt(size)
    qplan = None
    if norm_bound == "auto":
        qplan = plan_quantile(epsilon * share, quantile, max_rows_per_unit=max_rows_per_unit, neighbors=neighbors)
    cplan = None
    if clipping_share is not None:
        if qplan is not None:
            check_shares(owner, share, clipping_share)
        cplan = plan_clipping_report(epsilon * clipping_share, max_rows_per_unit=max_rows_per_unit,
                                     neighbors=neighbors)
    return Vector(columns, names, bounds, constant_at, size, norm_bound, qplan, cplan, bplan)


def mechanism_budget(vec: Vector, epsilon: float) -> float:
    """The ε the mechanism is calibrated to: what ``norm_bound="auto"``, ``bounds="auto"`` and the clipping report
    leave.
    """
    return epsilon - (0.0 if vec.quantile is None else vec.quantile.epsilon) - reserved_budget(vec)


def reserved_budget(vec: Vector) -> float:
    """The ε taken before ``bound_planner`` (which subtracts the norm quantile's): the report's and the bounds'."""
    return ((0.0 if vec.clipping is None else vec.clipping.epsilon)
            + (0.0 if vec.auto_bounds is None else vec.auto_bounds.epsilon))


def auto_privacy(plan_for: Callable[[float], MechanismPlan], epsilon: float, vec: Vector) -> dict:
    """The manifest privacy fields of an ``auto`` release: the B-dependent numbers are stated after the choice."""
    one, two = plan_for(1.0).privacy, plan_for(2.0).privacy
    later = "chosen with the norm bound: see norm_bound_auto"
    out = {k: (later if one[k] != two.get(k) else v) for k, v in one.items()}
    assert vec.quantile is not None
    return {**out, "epsilon": epsilon, "mechanism_epsilon": mechanism_budget(vec, epsilon),
            "norm_bound": "auto", "norm_bound_epsilon": vec.quantile.epsilon}


@dataclass(frozen=True)
class Prepared:
    """A validated, planned request of the family (:func:`prepare`): what the three functions share.

    ``plan_for(B)`` is the mechanism's plan at norm bound B; ``params`` the
    plan's parameters as the request and manifest record them.
    """

    owner: str
    mechanism: str
    epsilon: float
    delta: float
    vec: Vector
    plan_for: Callable[[float], MechanismPlan]
    params: dict
    neighbors: str
    postprocess: str
    nonfinite: str
    privacy_unit: str | None
    max_rows_per_unit: int

    @property
    def d(self) -> int:
        """The data's dimension (the constant column not counted)."""
        return self.vec.size - (self.vec.constant_at is not None)

    def request(self, session: DPSession, task: str, columns, d: int, *, params: dict, confidence: float,
                config_sha256: str | None, **more: Any) -> dict:
        """The request (hashed into the release's digest); ``confidence`` is checked here."""
        more = {**more, **confidence_request(P.check("confidence", confidence, owner=self.owner))}
        # Fields added by issue #14 enter the request only when used, so older requests keep their digest.
        vec = self.vec
        if vec.auto_bounds is not None:
            more["bounds"] = "auto"
            more["bounds_auto"] = {"share": vec.auto_bounds.epsilon / self.epsilon}
        elif vec.bounds is not None:
            more["bounds"] = {c: list(b) for c, b in vec.bounds.items()}
        if vec.quantile is not None:
            more["norm_bound_auto"] = {"share": vec.quantile.epsilon / self.epsilon, "quantile": vec.quantile.alpha}
        if vec.clipping is not None:
            more["clipping_report"] = {"share": vec.clipping.epsilon / self.epsilon}
        return {
            "dataset_id": session.dataset_id, "task": task, "mechanism": self.mechanism, "columns": columns,
            "dimension": d, "params": params, "epsilon": self.epsilon, "delta": self.delta,
            "norm_bound": vec.norm_bound, "neighbors": self.neighbors, "nonfinite": self.nonfinite,
            "privacy_unit": self.privacy_unit, "max_rows_per_unit": self.max_rows_per_unit,
            "sampler": session.sampler.name, "config_sha256": config_sha256, **more,
        }

    def extra(self, columns, params: dict, **more: Any) -> dict:
        """The manifest's ``columns``, ``params``, ``policies`` (and ``scaling``) fields."""
        vec, norm_bound = self.vec, self.vec.norm_bound
        clipping = (f"rows scaled to L2 norm <= {norm_bound:g}" if not isinstance(norm_bound, str) else
                    "rows scaled to L2 norm <= B, B chosen privately (norm_bound_auto)")
        if vec.scaled:
            more["scaling"] = vec.scaling(1.0 if isinstance(norm_bound, str) else norm_bound).manifest()
            if vec.bounds is None:
                more["scaling"]["constant_column"]["value"] = "B/sqrt(d)"
            if vec.auto_bounds is not None:
                more["scaling"]["bounds"] = "auto: chosen privately, see bounds_auto"
        return {"columns": columns, "params": params, "policies": {
            "nonfinite": nonfinite_policy(self.nonfinite, vec.bounds is not None),
            "clipping": clipping,
            "null_privacy_unit": "rows with a null unit form one unit" if self.privacy_unit else None,
        }, **more}

    def data_matrix(self, matrix: np.ndarray, norm_bound: float, *, keep_constant: bool = False) -> np.ndarray:
        return data_matrix(self.vec, matrix, norm_bound, keep_constant=keep_constant)

    def data_matrix_uncertainty(self, plan: MechanismPlan, released: np.ndarray, norm_bound: float, level: float, *,
                                keep_constant: bool = False) -> dict[str, Uncertainty]:
        """The intervals of :meth:`data_matrix`'s result; ``released`` is the matrix in the noise's units."""
        return data_matrix_uncertainty(self.vec, plan, released, norm_bound, self.postprocess, level,
                                       keep_constant=keep_constant)


def nonfinite_policy(nonfinite: str, bounded: bool) -> str:
    """The manifest's ``policies.nonfinite``: the policy, and with bounds what it does to a scaled entry."""
    return nonfinite if not bounded else (f"{nonfinite} (with bounds: NaN/inf/null are not clamped; 'zero' sets the "
                                          "scaled entry to the bounds' centre)")


def prepare(owner, df, columns, dimension, *, constant_at, mechanism, allowed, epsilon, delta, norm_bound, bounds,
            neighbors, postprocess, nonfinite, max_rows_per_unit, privacy_unit, share, quantile, what="column",
            clipping=False, clipping_share=DEFAULT_CLIPPING_SHARE, bounds_share=DEFAULT_BOUNDS_SHARE,
            **mech_kw) -> Prepared:
    """The validation and planning the three family functions share (ConfigError/SchemaError, nothing charged)."""
    epsilon, delta, norm_bound, max_rows_per_unit, bounds, share, quantile, clipping_share = _check_common(
        owner, epsilon, delta, norm_bound, neighbors, postprocess, nonfinite, max_rows_per_unit, privacy_unit,
        bounds, share, quantile, clipping, clipping_share)
    bounds_share = P.check("bounds_share", bounds_share, owner=owner)
    V.check_option("mechanism", mechanism, allowed, owner=owner)
    vec = vector(owner, df, columns, dimension, bounds=bounds, norm_bound=norm_bound, constant_at=constant_at,
                 epsilon=epsilon, share=share, quantile=quantile, max_rows_per_unit=max_rows_per_unit,
                 neighbors=neighbors, what=what, clipping_share=clipping_share, bounds_share=bounds_share)
    # the quantile's share is subtracted by bound_planner, the others here
    plan_for = bound_planner(mechanism, size=vec.size, epsilon=epsilon - reserved_budget(vec), quantile=vec.quantile,
                             owner=owner, delta=delta, neighbors=neighbors, max_rows_per_unit=max_rows_per_unit,
                             postprocess=postprocess, **mech_kw)
    plan = plan_for(1.0 if vec.quantile is not None else float(vec.norm_bound))
    if vec.clipping is not None and not plan.needs_gram:
        raise ConfigError(f"The 'clipping_report' parameter of {owner} needs the Gram pass, which counts the "
                          f"clipped rows; mechanism {mechanism!r} with projection 'rows' projects the rows instead. "
                          "Use projection 'gram' (the same release distribution).")
    params = plan.params
    return Prepared(owner, mechanism, epsilon, delta, vec, plan_for, params, neighbors, postprocess, nonfinite,
                    privacy_unit, max_rows_per_unit)


def data_matrix(vec: Vector, matrix: np.ndarray, norm_bound: float, *, keep_constant: bool = False) -> np.ndarray:
    """A released second moment of the vector in the data's units (exact post-processing); as is when unscaled."""
    if not vec.scaled:
        return matrix
    out = vec.scaling(norm_bound).to_data_units(matrix)
    k = vec.constant_at
    if keep_constant or k is None:
        return out
    return np.delete(np.delete(out, k, axis=0), k, axis=1)


def data_matrix_uncertainty(vec: Vector, plan: MechanismPlan, released: np.ndarray, norm_bound: float,
                            postprocess: str, level: float, *, keep_constant: bool = False) -> dict[str, Uncertainty]:
    """``{"matrix": …}`` for the release mapped to the data's units (:func:`.uncertainty.matrix_uncertainty`);
    ``released`` is in the noise's units.
    """
    t = vec.scaling(norm_bound).transform() if vec.scaled else None
    u = matrix_uncertainty(plan.mechanism, plan.privacy, plan.params, released, norm_bound, level, transform=t)
    k = vec.constant_at
    return {} if u is None else {"matrix": drop_index(u, k) if vec.scaled and not keep_constant and k is not None
                                 else u}
