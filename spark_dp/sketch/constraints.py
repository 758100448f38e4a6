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


def check_weight_bounds(bounds: Any, *, weight: str | None, column: str | None, owner: str = OWNER,
                        name: str = "bounds") -> tuple[float, float] | None:
    """The public bounds [lo, hi] of the weight column, from ``bounds = {weight: [lo, hi]}``; None without bounds.

    A sketch has one numeric input, the weight: bounds on any other column
    (the item column is hashed, never summed) or bounds without a ``weight``
    are refused, naming the parameter and the column (before any charge).

    Raises:
        ConfigError: not a mapping of finite [lo, hi] with lo < hi, no weight
            column, or a column other than the weight.
    """
    if bounds is None:
        return None
    got = P.Bounds().check(name, bounds, owner=owner)
    if weight is None:
        raise ConfigError(f"The {name!r} parameter of {owner} bounds the weight column only, and no 'weight' is "
                          f"given (got bounds for {sorted(got)}); an unweighted sketch counts 1 per row and needs none.")
    for col in got:
        if col != weight:
            what = "the item column (hashed, never summed)" if col == column else "not the weight column"
            raise ConfigError(f"The {name!r} parameter of {owner} gives bounds for column {col!r}, {what}: a sketch "
                              f"takes bounds for its weight column {weight!r} only.")
    return got[weight]


#: Manifest ``sketch.weight_scaling.applied``: how stored values relate to the weights (docs, reports).
WEIGHT_SCALING_NOTE = (
    "each finite weight clamped to [lo, hi] and divided by M = max(|lo|, |hi|) before the mechanism (which sees "
    "weights in [-1, 1], as without bounds); the released counters (arrays, intervals, heavy hitters, threshold) are "
    "the mechanism's output multiplied by M, in the weight's units; privacy.noise_scale is the mechanism's, in the "
    "scaled units: a counter's noise in the weight's units is M * noise_scale")


#: The family's own parameters (API keyword → constraint), checked by the API and the config task alike.
PARAMS = P.Constraints({
    "nulls": P.Options(NULL_ITEMS),
    "unit_clipping": P.Options(UNIT_CLIPPING),
    "nonfinite": P.Options(WEIGHT_NONFINITE),  # of the weights
    "weight": P.Str(),
    "candidate_column": P.Str(),
    "hash_items": P.Bool(nullable=True),
    "domain": P.Check(lambda name, value, owner: check_domain(value, owner=owner, name=name)),
    "bounds": P.Bounds(),  # of the weight column only (check_weight_bounds)
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
