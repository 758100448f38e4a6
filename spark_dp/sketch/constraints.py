"""The sketch family's parameter constraints, shared by the API and the config task (no pyspark)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from spark_dp import _validation as V
from spark_dp import params as P
from spark_dp.errors import ConfigError
from spark_dp.sketch.mechanisms import MECHANISMS, REGISTRY, accepting

OWNER = "count_sketch"
UNIT_CLIPPING = ("l1", "sketch_l2")
NULL_ITEMS = ("item", "drop")
WEIGHT_NONFINITE = ("drop", "zero")


def check_domain(domain: Any, *, owner: str = OWNER, name: str = "domain") -> list | int:
    """A histogram domain: an int d (items 0…d−1) or a non-empty list of distinct strings or ints."""
    if isinstance(domain, int | np.integer) and not isinstance(domain, bool):
        return V.check_int(name, int(domain), owner=owner, low=1)
    if isinstance(domain, str) or not isinstance(domain, Sequence) or len(domain) == 0:
        raise ConfigError(
            f"The {name!r} parameter of {owner} must be an int or a non-empty list of items. Got {domain!r} instead."
        )
    items = list(domain)
    kinds = {"string" if isinstance(x, str) else "long" if isinstance(x, int) and not isinstance(x, bool) else "bad"
             for x in items}
    if "bad" in kinds or len(kinds) != 1:
        raise ConfigError(f"The {name!r} parameter of {owner} must list items of one type, strings or ints.")
    if len(set(items)) != len(items):
        raise ConfigError(f"The {name!r} parameter of {owner} must not repeat items.")
    return items


def _no_bounds(name: str, value: Any, owner: str) -> None:
    """``bounds`` is not a sketch parameter: the weights have their own fixed public bound (the error says why)."""
    if value is None:
        return None
    raise ConfigError(
        f"The {name!r} parameter does not apply to {owner}: its one numeric input, the weight column, is clipped to "
        "the fixed public bound [-1, 1] per row, the unit of the sketch's sensitivity. For weights in other units, "
        "divide the column by a public bound M (e.g. F.col('w') / M) and multiply the estimates and their intervals "
        "by M: a sketch is linear in the weights, so that is exact post-processing. A shift (the other families' "
        "centring) is not: undoing it needs the unweighted counts, which a weighted sketch does not release.")


#: The family's own parameters (API keyword → constraint), checked by the API and the config task alike.
PARAMS = P.Constraints({
    "nulls": P.Options(NULL_ITEMS),
    "unit_clipping": P.Options(UNIT_CLIPPING),
    "nonfinite": P.Options(WEIGHT_NONFINITE),  # of the weights
    "weight": P.Str(),
    "candidate_column": P.Str(),
    "hash_items": P.Bool(nullable=True),
    "domain": P.Check(lambda name, value, owner: check_domain(value, owner=owner, name=name)),
    "bounds": P.Check(_no_bounds),  # refused with the reason: the weights' bound is fixed, [-1, 1]
})


def check_sketch_request(
    *,
    mechanism: str,
    repetitions: int,
    buckets: int,
    max_rows_per_unit: int,
    unit_clipping: str,
    unit_l2_bound: float | None,
    privacy_unit: str | None,
    domain: Any,
    owner: str = OWNER,
) -> tuple[int, int, float | None, list | int | None]:
    """Validates the public parameters; returns (k, b, C or None, domain)."""
    spec = REGISTRY[V.check_option("mechanism", mechanism, MECHANISMS, owner=owner)]
    k = P.check("repetitions", repetitions, owner=owner)
    b = P.Int(spec.min_buckets).check("buckets", buckets, owner=owner)
    P.check("max_rows_per_unit", max_rows_per_unit, owner=owner)
    PARAMS.check("unit_clipping", unit_clipping, owner=owner)
    C = None
    if unit_clipping == "sketch_l2":
        if not spec.unit_l2_clipping:
            raise ConfigError(f"The 'unit_clipping' parameter of {owner} can be 'sketch_l2' only for L2 sketches "
                              f"({accepting('unit_l2_clipping')}). Got mechanism {mechanism!r}.")
        if privacy_unit is None:
            raise ConfigError(f"The 'unit_clipping' parameter of {owner} is 'sketch_l2' but no 'privacy_unit' is given.")
        C = math.sqrt(max_rows_per_unit) if unit_l2_bound is None else P.check(
            "unit_l2_bound", unit_l2_bound, owner=owner)
    elif unit_l2_bound is not None:
        raise ConfigError(f"The 'unit_l2_bound' parameter of {owner} needs unit_clipping='sketch_l2'.")
    if not spec.hashed:  # a histogram over a public domain
        if domain is None:
            raise ConfigError(f"The 'domain' parameter of {owner} is required for the {mechanism} mechanism.")
        domain = check_domain(domain, owner=owner)
    elif domain is not None:
        names = [n for n, s in REGISTRY.items() if not s.hashed]
        raise ConfigError(f"The 'domain' parameter of {owner} applies only to the {', '.join(names)} mechanism"
                          f"{'s' if len(names) > 1 else ''}.")
    return k, b, C, domain
