"""Task ``count_sketch``: a private CountSketch (or a baseline) of one item column.

Config contract::

    task: count_sketch
    mechanism: private_count_sketch   # | count_min | count_mean | histogram
    dataset: {id: logs.queries, path: data/q.parquet, format: parquet, columns: [query],
              weight: null, privacy_unit: user_id, max_rows_per_unit: 10,
              nulls: item, unit_clipping: l1, unit_l2_bound: null,
              bounds: null}          # or {<weight column>: [lo, hi]}: public bounds of the weight, its units
    privacy: {epsilon: 1.0, delta: 1.0e-6}
    params: {repetitions: 15, buckets: 65536,
             heavy_hitters: {top: 50, candidates: null, threshold: null, levels: null,
                             hash_items: null},
             domain: null}            # histogram: a list of items or an int d

``dataset.bounds`` bounds the weight column only (``dataset.weight``; any
other column, or bounds without a weight, is refused before Spark starts):
each weight is clamped to [lo, hi] and divided by M = max(|lo|, |hi|) for the
mechanism (sensitivity and calibration as for weights in [−1, 1]), and the
release reports counters, estimates, intervals and heavy hitters in the
weight's units (:func:`spark_dp.sketch.api.count_sketch`).

``heavy_hitters.candidates`` is a path: a ``.txt`` file (one item a line) or
a dataset in ``dataset.format`` holding the item column (with ``dataset.table``:
a table name). Candidates must be public — never the sketched dataset or
derived from it: the release lists the candidates whose estimate clears the
threshold, so candidates from the private data would publish which items it
holds. A candidates path that is, holds or lies inside ``dataset.path``, a
table named like ``dataset.table``, and a candidate dataset reading any of the
input's files are refused before Spark work and before any charge. ``levels`` = L asks
for dyadic heavy hitters without candidates over item ids in [0, 2^L)
(:mod:`spark_dp.sketch.dyadic`): integer items are their own ids, string
items (or integers with ``hash_items: true``) are mapped to ids by a public,
released hash (L = 32 is a good choice for strings; the release then names
heavy hashed ids, which ``spark-dp heavy-hitters --candidates`` maps back).
"""

from __future__ import annotations

import os
from typing import Any

from spark_dp import _validation as V
from spark_dp import params as P
from spark_dp.cli.tasks import TaskSpec, register
from spark_dp.errors import ConfigError
from spark_dp.sketch.constraints import PARAMS as SKETCH_PARAMS
from spark_dp.sketch.constraints import check_sketch_request, check_weight_bounds
from spark_dp.sketch.mechanisms import MECHANISMS, REGISTRY, accepting, plan_sketch

OWNER = "the config"
HH_KEYS = ("top", "candidates", "threshold", "levels", "hash_items")


def _check_hh(key: str, value: Any) -> dict:
    if not isinstance(value, dict):
        raise ConfigError(f"The {key!r} parameter of {OWNER} must be a mapping with keys {list(HH_KEYS)}. Got {value!r} instead.")
    unknown = sorted(set(value) - set(HH_KEYS))
    if unknown:
        raise ConfigError(f"Unknown key '{key}.{unknown[0]}' in the config; expected one of {sorted(HH_KEYS)}.")
    out = dict(value)
    for name in ("top", "threshold", "levels"):
        if out.get(name) is not None:
            out[name] = P.check(name, out[name], owner=OWNER, key=f"{key}.{name}")
    if out.get("candidates") is not None:
        out["candidates"] = V.check_str(f"{key}.candidates", out["candidates"], owner=OWNER)
    if out.get("levels") is not None:
        if out.get("candidates") is not None:
            raise ConfigError(f"Give either '{key}.candidates' or '{key}.levels' in the config, not both.")
    if out.get("hash_items") is not None:
        SKETCH_PARAMS.check("hash_items", out["hash_items"], owner=OWNER, key=f"{key}.hash_items")
        if out.get("levels") is None:
            raise ConfigError(f"The '{key}.hash_items' parameter of {OWNER} applies only with '{key}.levels'.")
    return out


def _unit_bound(config) -> tuple[int, str, float | None]:
    ex = config.dataset.extra
    return config.dataset.max_rows_per_unit, ex.get("unit_clipping", "l1"), ex.get("unit_l2_bound")


def _check(config) -> None:
    if len(config.dataset.columns) != 1:
        raise ConfigError(f"The 'dataset.columns' parameter of {OWNER} must name one item column for count_sketch. "
                          f"Got {list(config.dataset.columns)!r} instead.")
    if config.dataset.dimension is not None:
        raise ConfigError("The 'dataset.dimension' parameter does not apply to count_sketch.")
    m, clip, C = _unit_bound(config)
    p = config.params
    check_sketch_request(
        mechanism=config.mechanism, repetitions=p.get("repetitions", 15), buckets=p.get("buckets", 65536),
        max_rows_per_unit=m, unit_clipping=clip, unit_l2_bound=C, privacy_unit=config.dataset.privacy_unit,
        domain=p.get("domain"), owner=OWNER,
    )
    ex = config.dataset.extra
    check_weight_bounds(ex.get("bounds"), weight=ex.get("weight"), column=config.dataset.columns[0], owner=OWNER,
                        name="dataset.bounds")
    levels = (p.get("heavy_hitters") or {}).get("levels")
    if levels is not None and (not REGISTRY[config.mechanism].dyadic or clip != "l1"):
        raise ConfigError("The 'params.heavy_hitters.levels' parameter (dyadic heavy hitters) needs mechanism "
                          f"{accepting('dyadic')!r} and dataset.unit_clipping 'l1'.")
    cand = (p.get("heavy_hitters") or {}).get("candidates")
    if cand is None:
        return
    from spark_dp.sketch.estimate import check_candidates_location

    # Candidates must be public: refuse the release's own input before Spark starts (nothing charged).
    source = {"source": _source(config)}
    if _candidates_table(config, cand):
        from spark_dp.params import check_table_name

        check_table_name(cand, key="params.heavy_hitters.candidates")
        check_candidates_location(cand, source, param="params.heavy_hitters.candidates", table=True)
        return
    if not os.path.exists(cand) and "://" not in cand:
        raise ConfigError(f"The 'params.heavy_hitters.candidates' path {cand!r} does not exist.")
    check_candidates_location(cand, source, param="params.heavy_hitters.candidates")


def _candidates_table(config, cand: str) -> bool:
    """With a table dataset, candidates other than a ``.txt`` file are a table name (read_candidates)."""
    from spark_dp.params import TABLE

    return config.dataset.format == TABLE and not cand.endswith(".txt")


def _source(config, spark=None) -> dict:
    """The manifest's ``source``: the dataset's path, or its table name (and, given Spark, its qualified name)."""
    from spark_dp.sketch.estimate import normalize_location

    table = config.dataset.table
    if table is None:
        return {"paths": [normalize_location(config.dataset.path)], "tables": []}
    return {"paths": [], "tables": [table, *qualified_table(spark, table)]}


def qualified_table(spark, name: str) -> list[str]:
    """``catalog.db.table`` of a table name, when Spark resolves it (classic and Connect); else []."""
    if spark is None:
        return []
    try:
        t = spark.catalog.getTable(name)
    except Exception:  # noqa: BLE001 - the read reports a missing table; this only adds a spelling
        return []
    if not t.catalog or not t.namespace:
        return []
    return [".".join(f"`{x}`" for x in [t.catalog, *t.namespace, t.name])]


def _plan(config):
    m, clip, C = _unit_bound(config)
    if clip == "sketch_l2" and C is None:
        C = m**0.5
    k = config.params.get("repetitions", 15) if REGISTRY[config.mechanism].hashed else 1
    levels = (config.params.get("heavy_hitters") or {}).get("levels")
    if levels is not None:
        from spark_dp.sketch.dyadic import plan_dyadic

        return plan_dyadic(epsilon=config.privacy.epsilon, delta=config.privacy.delta, repetitions=k, levels=levels,
                           max_items_per_unit=m, neighbors=config.privacy.neighbors).events
    return plan_sketch(config.mechanism, epsilon=config.privacy.epsilon, delta=config.privacy.delta,
                       repetitions=k, max_items_per_unit=m, unit_l2_bound=C, neighbors=config.privacy.neighbors,
                       weighted=config.dataset.extra.get("weight") is not None).events


def read_candidates(spark, path: str, fmt: str, column: str, kind: str):
    """Candidates from a ``.txt`` file (a list, one item a line) or a dataset (a DataFrame)."""
    if path.endswith(".txt"):
        from spark_dp.sketch.estimate import coerce_items

        with open(path, encoding="utf-8") as fh:
            lines = [ln.rstrip("\n") for ln in fh if ln.rstrip("\n") != ""]
        return coerce_items(lines, kind, parse=True), None
    from spark_dp.aggregates import read_dataset

    return read_dataset(spark, path, fmt), column


def _run(session, config, spark, *, seeds=None):
    """Runs the sketch job; ``seeds`` (a release) reuses its hash seeds so the sketches merge."""
    from spark_dp.aggregates import read_dataset
    from spark_dp.aggregates.sketch import item_kind
    from spark_dp.sketch.api import count_sketch

    df = read_dataset(spark, config.dataset.path, config.dataset.format, config.dataset.options,
                        schema=config.dataset.schema)
    column = config.dataset.columns[0]
    m, clip, C = _unit_bound(config)
    hh = config.params.get("heavy_hitters") or {}
    candidates = cand_col = None
    source = _source(config, spark)
    if hh.get("candidates") is not None:
        cand = hh["candidates"]
        if _candidates_table(config, cand):  # again with the catalog's qualified names (still before any charge)
            from spark_dp.sketch.estimate import check_candidates_location

            check_candidates_location(cand, {"source": source}, param="params.heavy_hitters.candidates",
                                      table=True, qualified=qualified_table(spark, cand))
        candidates, cand_col = read_candidates(spark, cand, config.dataset.format, column, item_kind(df, column))
    return count_sketch(
        session, df, [column],
        epsilon=config.privacy.epsilon, delta=config.privacy.delta, neighbors=config.privacy.neighbors,
        mechanism=config.mechanism,
        repetitions=config.params.get("repetitions", 15), buckets=config.params.get("buckets", 65536),
        weight=config.dataset.extra.get("weight"), bounds=config.dataset.extra.get("bounds"),
        privacy_unit=config.dataset.privacy_unit,
        max_rows_per_unit=m, unit_clipping=clip, unit_l2_bound=C,
        nulls=config.dataset.extra.get("nulls", "item"), nonfinite=config.dataset.nonfinite,
        domain=config.params.get("domain"), top=hh.get("top") or 50, threshold=hh.get("threshold"),
        candidates=candidates, candidate_column=cand_col, levels=hh.get("levels"), seeds=seeds,
        hash_items=hh.get("hash_items"),
        release_id=config.release_id, config_sha256=config.sha256, confidence=config.output.confidence, source=source,
        # A plain Parquet read: let the tasks read the files themselves (same table, faster).
        source_paths=[config.dataset.path] if (config.dataset.format == "parquet" and config.dataset.path
                                               and not config.dataset.options) else None,
    )


SPEC = register(TaskSpec(
    name="count_sketch",
    mechanisms=MECHANISMS,
    params={
        "repetitions": P.validator("repetitions", OWNER),
        "buckets": P.validator("buckets", OWNER),
        "heavy_hitters": _check_hh,
        "domain": SKETCH_PARAMS.validator("domain", OWNER),
    },
    plan=_plan,
    run=_run,
    dataset_keys={
        # bounds: of the weight column only (checked against dataset.weight in _check)
        **{name: SKETCH_PARAMS.validator(name, OWNER) for name in ("weight", "nulls", "unit_clipping", "bounds")},
        "unit_l2_bound": P.validator("unit_l2_bound", OWNER),
    },
    requires_norm_bound=False,
    check=_check,
    renamed_keys={"dataset": {"max_items_per_unit": "max_rows_per_unit"}},
))
