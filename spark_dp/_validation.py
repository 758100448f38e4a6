"""Parameter checks with one message template (after scikit-learn's).

``The 'epsilon' parameter of second_moment must be a float in the range
(0, inf). Got -1 instead.``
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from numbers import Integral, Real
from typing import Any

from spark_dp.errors import ConfigError


def _fmt(value: Any) -> str:
    return repr(value) if isinstance(value, str) else str(value)


def check_real(
    name: str,
    value: Any,
    *,
    owner: str,
    low: float = -math.inf,
    high: float = math.inf,
    low_open: bool = False,
    high_open: bool = False,
    allow_inf: bool = False,
) -> float:
    """Returns ``value`` as a float after checking it lies in the interval."""
    lo = "(" if low_open else "["
    hi = ")" if high_open else "]"
    rng = f"{lo}{low:g}, {high:g}{hi}".replace("inf", "inf")
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ConfigError(
            f"The {name!r} parameter of {owner} must be a float in the range {rng}. "
            f"Got {_fmt(value)} instead."
        )
    v = float(value)
    bad = (
        math.isnan(v)
        or (math.isinf(v) and not allow_inf)
        or v < low
        or v > high
        or (low_open and v == low)
        or (high_open and v == high)
    )
    if bad:
        raise ConfigError(
            f"The {name!r} parameter of {owner} must be a float in the range {rng}. "
            f"Got {_fmt(value)} instead."
        )
    return v


def check_int(name: str, value: Any, *, owner: str, low: int = 1, high: int | None = None) -> int:
    """Returns ``value`` as an int after checking ``low <= value <= high``."""
    rng = f"[{low}, {'inf' if high is None else high}]"
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise ConfigError(
            f"The {name!r} parameter of {owner} must be an int in the range {rng}. "
            f"Got {_fmt(value)} instead."
        )
    v = int(value)
    if v < low or (high is not None and v > high):
        raise ConfigError(
            f"The {name!r} parameter of {owner} must be an int in the range {rng}. "
            f"Got {_fmt(value)} instead."
        )
    return v


def check_option(name: str, value: Any, options: Iterable[str], *, owner: str) -> str:
    """Returns ``value`` after checking it is one of ``options``."""
    opts = sorted(options)
    if not isinstance(value, str) or value not in opts:
        raise ConfigError(
            f"The {name!r} parameter of {owner} must be one of {opts}. Got {_fmt(value)} instead."
        )
    return value


def check_str(name: str, value: Any, *, owner: str) -> str:
    """Returns ``value`` after checking it is a non-empty string."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(
            f"The {name!r} parameter of {owner} must be a non-empty string. Got {_fmt(value)} instead."
        )
    return value
