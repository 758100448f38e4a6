"""The parameter vocabulary: every shared parameter's constraint, declared once.

The family APIs (``spark_dp/*/api.py``) and the config tasks
(``spark_dp/cli/task_*.py``) validate with these same objects (after
scikit-learn's ``_param_validation``), so a parameter accepts the same values
in both, and the error names it the same way — by its keyword in the API
(``The 'epsilon' parameter of second_moment …``) and by its key in a config
(``The 'privacy.epsilon' parameter of the config …``)::

    epsilon = params.check("epsilon", epsilon, owner="second_moment")
    PARAMS["repetitions"].validator(owner)   # a config task's (key, value) -> value

Nothing here imports pyspark: ``spark_dp.cli.config`` validates a whole job
config before Spark is even imported.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from spark_dp import _validation as V
from spark_dp.errors import ConfigError, SchemaError

# -- option lists shared across layers (the aggregates and families re-export them) --
FORMATS = ("parquet", "csv", "json", "orc")
TABLE = "table"  # the format of a catalog table dataset
NONFINITE_POLICIES = ("drop", "zero")
NEIGHBORS = ("add_remove", "replace")
#: What linear_regression's intervals cover (``covers``; the first is the default): the privacy noise only, or
#: also a constant-variance model's sampling error (spark_dp.second_moment.intervals).
REGRESSION_COVERS = ("noise", "noise+sampling")
ROW_IDS = ("content", "partition")  # jl_ridge's row ids with projection "rows" (spark_dp.aggregates.jl)


class Constraint:
    """A parameter's accepted values; :meth:`check` returns the value (normalised) or raises ConfigError."""

    def check(self, name: str, value: Any, *, owner: str) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def validator(self, owner: str):
        """``(qualified_key, value) -> value``: the form the config tasks' key tables take."""
        return lambda key, value: self.check(key, value, owner=owner)


@dataclass(frozen=True)
class Real(Constraint):
    """A float in an interval (open ends where stated)."""

    low: float = -math.inf
    high: float = math.inf
    low_open: bool = False
    high_open: bool = False

    def check(self, name: str, value: Any, *, owner: str) -> float:
        return V.check_real(name, value, owner=owner, low=self.low, high=self.high, low_open=self.low_open,
                            high_open=self.high_open)


@dataclass(frozen=True)
class Int(Constraint):
    """An int in [low, high]."""

    low: int = 1
    high: int | None = None

    def check(self, name: str, value: Any, *, owner: str) -> int:
        return V.check_int(name, value, owner=owner, low=self.low, high=self.high)


@dataclass(frozen=True)
class Options(Constraint):
    """One of a fixed set of strings."""

    options: tuple[str, ...]

    def check(self, name: str, value: Any, *, owner: str) -> str:
        return V.check_option(name, value, self.options, owner=owner)


@dataclass(frozen=True)
class Str(Constraint):
    """A non-empty string (a column name, an id)."""

    def check(self, name: str, value: Any, *, owner: str) -> str:
        return V.check_str(name, value, owner=owner)


@dataclass(frozen=True)
class Bool(Constraint):
    """True or False (not 0/1, not 'yes'); with ``nullable``, None too."""

    nullable: bool = False

    def check(self, name: str, value: Any, *, owner: str) -> bool | None:
        if value is None and self.nullable:
            return None
        if not isinstance(value, bool):
            accepted = "true, false or null" if self.nullable else "true or false"
            raise ConfigError(f"The {name!r} parameter of {owner} must be {accepted}. Got {value!r} instead.")
        return value


@dataclass(frozen=True)
class Optional(Constraint):
    """None, or a value ``inner`` accepts."""

    inner: Constraint

    def check(self, name: str, value: Any, *, owner: str) -> Any:
        return None if value is None else self.inner.check(name, value, owner=owner)


@dataclass(frozen=True)
class OrAuto(Constraint):
    """The string ``"auto"`` (chosen privately from the data), or a value ``inner`` accepts."""

    inner: Constraint

    def check(self, name: str, value: Any, *, owner: str) -> Any:
        if value == "auto":
            return "auto"
        try:
            return self.inner.check(name, value, owner=owner)
        except ConfigError:
            raise ConfigError(f"The {name!r} parameter of {owner} must be a positive float or 'auto'. "
                              f"Got {value!r} instead.") from None


@dataclass(frozen=True)
class Bounds(Constraint):
    """Public per-column bounds ``{column: (lo, hi)}``: finite numbers with lo < hi, in the data's units.

    ``auto``: the string ``"auto"`` is accepted too (bounds chosen privately from the data).
    """

    auto: bool = False

    def check(self, name: str, value: Any, *, owner: str) -> dict[str, tuple[float, float]] | str:
        if self.auto and value == "auto":
            return "auto"
        if not isinstance(value, dict) or not value:
            also = " or 'auto'" if self.auto else ""
            raise ConfigError(f"The {name!r} parameter of {owner} must be a mapping of column names to [lo, hi]"
                              f"{also}. Got {value!r} instead.")
        out = {}
        for col, pair in value.items():
            ok = isinstance(col, str) and col and isinstance(pair, list | tuple) and len(pair) == 2 and all(
                isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in pair)
            if not ok or not pair[0] < pair[1]:
                raise ConfigError(f"The {name!r} parameter of {owner} must give each column finite bounds [lo, hi] "
                                  f"with lo < hi. Got {col!r}: {pair!r} instead.")
            out[col] = (float(pair[0]), float(pair[1]))
        return out
class TableName(Constraint):
    """A catalog table name: ``tbl``, ``db.tbl`` or ``catalog.db.tbl`` (backquoted parts allowed)."""

    def check(self, name: str, value: Any, *, owner: str) -> str:
        return check_table_name(V.check_str(name, value, owner=owner), key=name)


@dataclass(frozen=True)
class Check(Constraint):
    """A family's own check, ``fn(name, value, owner) -> value`` (e.g. a histogram's domain)."""

    fn: Callable[[str, Any, str], Any]

    def check(self, name: str, value: Any, *, owner: str) -> Any:
        return self.fn(name, value, owner)


class Constraints(dict):
    """A table of constraints by API keyword, checked the same way from the API and from a config.

    ``FAMILY.check("postprocess", value, owner="second_moment")`` checks an API
    parameter; ``FAMILY.validator("postprocess", "the config")`` is a config
    key's ``(key, value) -> value``.
    """

    def check(self, name: str, value: Any, *, owner: str, key: str | None = None) -> Any:
        """``value`` checked against ``self[name]``; errors name ``key`` (a config key) or ``name``."""
        return self[name].check(key or name, value, owner=owner)

    def validator(self, name: str, owner: str):
        """The config form of ``self[name]``: ``(qualified_key, value) -> value``."""
        return self[name].validator(owner)


POSITIVE = Real(0, math.inf, low_open=True)
#: A norm bound B: positive and at most 1e100, since the sensitivities take B² (second moments) and B³ (tensors),
#: which overflow a float near 1e154.
NORM_BOUND = Real(0, 1e100, low_open=True)
#: A release's ε: positive and at most 1000. Above that no privacy worth stating is left (the non-private opt-in,
#: ``private=False``, is the honest form of such a run), and the calibration fails: dp_accounting's σ search
#: returns NaN near ε = 1e155 (found by CI's config fuzz) and is off by orders of magnitude from ε ≈ 1e50.
EPSILON = Real(0, 1000, low_open=True)

#: The shared parameters, by their API keyword. Each family declares its own
#: parameters (mechanism options: postprocess, calibration, mode, …) as a
#: :class:`Constraints` table in its module without pyspark
#: (``second_moment.mechanisms.PARAMS``, ``sketch.constraints.PARAMS``,
#: ``tensor.mechanisms.PARAMS``), used by its API and its config task alike.
PARAMS: Constraints = Constraints({
    # privacy
    "epsilon": EPSILON,
    "delta": Real(0, 1, low_open=True, high_open=True),
    "norm_bound": NORM_BOUND,
    "neighbors": Options(NEIGHBORS),
    # rows and units
    "nonfinite": Options(NONFINITE_POLICIES),
    "privacy_unit": Optional(Str()),
    "max_rows_per_unit": Int(1),
    "dimension": Optional(Int(1)),
    # uncertainty: the level of every interval of a release (configs: output.confidence)
    "confidence": Real(0, 1, low_open=True, high_open=True),
    # components, repetitions, iterations
    "k": Int(1),
    "repetitions": Int(1),
    "restarts": Int(1),
    "iterations": Int(1),
    "rows_per_round": Optional(Int(1)),
    # second moment
    "projection_rows": Optional(Int(1)),
    "dof": Optional(Int(1)),
    "public_n": Optional(Int(1)),
    "prior_dof": Optional(Int(1)),
    "ridge": Real(0),
    "bounds": Optional(Bounds(auto=True)),  # "auto": chosen privately per column (bounds_share of ε)
    "bounds_share": Real(0, 1, low_open=True, high_open=True),
    "fit_intercept": Bool(),
    "covers": Options(REGRESSION_COVERS),
    # the second-moment family's norm bound: a number, "auto", or None (derived from full bounds)
    "norm_bound_or_auto": Optional(OrAuto(NORM_BOUND)),
    "norm_bound_share": Real(0, 1, low_open=True, high_open=True),   # ε share of norm_bound="auto"
    "norm_bound_quantile": Real(0, 1, low_open=True, high_open=True),  # the row-norm quantile it targets
    "clipping_report": Bool(),  # release the private clipping report (opt-in)
    "clipping_report_share": Real(0, 1, low_open=True, high_open=True),  # its share of the release's ε
    # sketch
    "buckets": Int(1),
    "top": Int(1),
    "threshold": Optional(Real()),
    "levels": Optional(Int(1, 62)),
    "unit_l2_bound": Optional(POSITIVE),
    # tensor
    "entry_scale": POSITIVE,
    "whiten": Bool(),
})


def check(name: str, value: Any, *, owner: str, key: str | None = None) -> Any:
    """``value`` checked against :data:`PARAMS` ``[name]``; errors name ``key`` (a config key) or ``name``."""
    return PARAMS.check(name, value, owner=owner, key=key)


def validator(name: str, owner: str):
    """The config form of :data:`PARAMS` ``[name]``: ``(qualified_key, value) -> value``."""
    return PARAMS.validator(name, owner)


# -- where a dataset is (config values; Spark reads it later) ---------------------------
def check_table_name(name: str, *, key: str = "dataset.table") -> str:
    """Raises ConfigError unless ``name`` is ``tbl``, ``db.tbl`` or ``catalog.db.tbl`` (backquotes allowed)."""
    import re

    part = r"(?:`[^`]+`|[A-Za-z_][A-Za-z0-9_]*)"
    if not isinstance(name, str) or not re.match(rf"^{part}(?:\.{part}){{0,2}}$", name):
        raise ConfigError(f"The {key!r} parameter must be a table name like db.tbl. Got {name!r} instead.")
    return name


def is_local_path(path: str) -> bool:
    """Whether ``path`` is on the driver's file system (no scheme, ``file:``, or a Windows drive)."""
    scheme = urlparse(path).scheme
    return scheme in ("", "file") or (len(scheme) == 1 and os.name == "nt")


def check_path_exists(path: str) -> None:
    """Raises SchemaError for a local path that does not exist (remote paths are checked by Spark)."""
    if is_local_path(path):
        local = urlparse(path).path if path.startswith("file:") else path
        if not os.path.exists(local):
            raise SchemaError(f"Input path {path!r} does not exist.")


def is_dataframe(x: Any) -> bool:
    """Whether ``x`` is a Spark DataFrame: classic, or a Spark Connect one.

    pyspark 3.5's Connect ``DataFrame`` (``pyspark.sql.connect.dataframe``) is
    not a subclass of ``pyspark.sql.DataFrame`` (4.x made it one), so
    ``isinstance(x, pyspark.sql.DataFrame)`` is False on a Databricks 15.4 / 16.4
    LTS serverless or shared cluster. Nothing is imported: a DataFrame exists
    only once its module is loaded.
    """
    import sys

    for name in ("pyspark.sql.dataframe", "pyspark.sql.connect.dataframe"):
        module = sys.modules.get(name)
        if module is not None and isinstance(x, module.DataFrame):
            return True
    return False
