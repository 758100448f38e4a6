"""Parameter checks with one message template (after scikit-learn's).

``The 'epsilon' parameter of second_moment must be a float in the range
(0, inf). Got -1 instead.``
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from numbers import Integral, Real
from typing import Any

from spark_dp.errors import ConfigError, SparkDPDeprecationWarning


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


# -- renamed parameters and config keys (one vocabulary across families) ------
def renamed_parameters(**renames: str):
    """Decorator: keyword ``old=new`` renames still accepted for one minor version, with a warning.

    The warning is a :class:`~spark_dp.errors.SparkDPDeprecationWarning`
    naming the new parameter.

    ``help()`` and ``inspect.signature`` show only the new names (the wrapper
    sets ``__wrapped__``). Passing both the old and the new name is a
    ConfigError naming both.
    """
    import functools
    import warnings

    def decorate(fn):
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any):
            for old, new in renames.items():
                if old in kwargs:
                    if new in kwargs:
                        raise ConfigError(f"Give the {new!r} parameter of {fn.__name__} only; {old!r} is its "
                                          "deprecated old name.")
                    warnings.warn(f"The {old!r} parameter of {fn.__name__} is deprecated; use {new!r}.",
                                  SparkDPDeprecationWarning, stacklevel=2)
                    kwargs[new] = kwargs.pop(old)
            return fn(*args, **kwargs)

        wrapper.renamed_parameters = dict(renames)  # type: ignore[attr-defined]
        return wrapper

    return decorate


def rename_keys(section: dict, renames: dict[str, str], *, prefix: str, owner: str) -> dict:
    """A copy of a config ``section`` with deprecated keys renamed (a SparkDPDeprecationWarning names the new key)."""
    import warnings

    out = dict(section)
    for old, new in renames.items():
        if old in out:
            if new in out:
                raise ConfigError(f"Give '{prefix}.{new}' only in {owner}; '{prefix}.{old}' is its deprecated "
                                  "old name.")
            warnings.warn(f"The '{prefix}.{old}' key of {owner} is deprecated; use '{prefix}.{new}'.",
                          SparkDPDeprecationWarning, stacklevel=2)
            out[new] = out.pop(old)
    return out
