"""Python API of the sketch family: ``DPSession.count_sketch`` delegates here."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from pyspark.sql import DataFrame

from spark_dp import _validation as V
from spark_dp import params as P
from spark_dp.aggregates._scan import choose_source_paths
from spark_dp.errors import ConfigError, SchemaError
from spark_dp.privacy import Chokepoint
from spark_dp.release import Release
from spark_dp.release.lineage import input_lineage
from spark_dp.release.pipeline import Noised, ReleasePlan, confidence_of, confidence_request, run_release
from spark_dp.sketch.constraints import (  # noqa: F401 - re-exported
    NULL_ITEMS,
    UNIT_CLIPPING,
    WEIGHT_NONFINITE,
    WEIGHT_SCALING_NOTE,
    check_domain,
    check_sketch_request,
    check_weight_bounds,
)
from spark_dp.sketch.constraints import PARAMS as SKETCH_PARAMS
from spark_dp.sketch.estimate import heavy_hitters_note, seeds_to_payload
from spark_dp.sketch.hashing import MASK, SIGN_SALT, to_signed
from spark_dp.sketch.mechanisms import REGISTRY, accepting, plan_sketch, release_table
from spark_dp.sketch.uncertainty import (
    counter_uncertainty,
    estimate_interval_info,
    false_positive_rate,
    false_positive_rate_bound,
)

if TYPE_CHECKING:
    from spark_dp.session import DPSession

OWNER = "count_sketch"
HASH_FAMILY = (
    "bucket h_i(x) = pmod(xxhash64(seed_i, x), b); sign s_i(x) = 1 - 2*(xxhash64(seed_i XOR "
    f"{SIGN_SALT:#x}, x) & 1); Spark SQL xxhash64 (XXH64, chained: seed enters first, initial seed 42); "
    "integral items hashed as bigint, strings as UTF-8, a null item leaves the chain unchanged"
)
SEEDS_PAYLOAD = "seeds[i, 0] = high 32 bits, seeds[i, 1] = low 32 bits of repetition i's 64-bit seed (two's complement)"


def _item_column(columns: Any, *, owner: str) -> str:
    """The one item column, from a name or a list holding one name."""
    if isinstance(columns, list | tuple) and len(columns) == 1:
        columns = columns[0]
    if not isinstance(columns, str) or not columns:
        raise ConfigError(f"The 'columns' parameter of {owner} must name one item column (a string or a list of one "
                          f"string). Got {columns!r} instead.")
    return columns


def _source_info(source: Any, source_paths: list[str] | None, *, owner: str = OWNER) -> dict | None:
    """The manifest's optional ``source`` field: {'paths': [...], 'tables': [...]} (None: not recorded).

    Only names the caller gave (public configuration), never file listings:
    partition directory names are values of the data.
    """
    from spark_dp.sketch.estimate import normalize_location

    if source is None:
        return None if not source_paths else {"paths": [normalize_location(p) for p in source_paths], "tables": []}
    keys = ("path", "paths", "table", "tables")
    if not isinstance(source, dict) or not source or set(source) - set(keys):
        raise ConfigError(f"The 'source' parameter of {owner} must be a mapping with keys among {list(keys)}. "
                          f"Got {source!r} instead.")
    out: dict[str, list[str]] = {"paths": [], "tables": []}
    for key, value in source.items():
        values = [value] if key in ("path", "table") else value
        if isinstance(values, str) or not isinstance(values, Sequence) or \
                not all(isinstance(x, str) and x for x in values):
            raise ConfigError(f"The 'source.{key}' parameter of {owner} must be "
                              f"{'a non-empty string' if key in ('path', 'table') else 'a list of non-empty strings'}. "
                              f"Got {value!r} instead.")
        if key.startswith("path"):
            out["paths"] += [normalize_location(x) for x in values]
        else:
            out["tables"] += list(values)
    return out


@dataclass(frozen=True)
class _HashSeeds:
    """A release's hash seeds: ``seeds`` (the table; level L of a dyadic stack), ``level_seeds`` (dyadic: levels
    1…L) and the public domain hash's ``hash_seed`` (dyadic over hashed items).
    """

    seeds: list[int]
    level_seeds: list[list[int]] | None = None
    hash_seed: int | None = None


def _fresh_seeds(session: DPSession, n: int) -> list[int]:
    """``n`` fresh 64-bit hash seeds: OS entropy from the session's sampler (privacy does not depend on them)."""
    return [to_signed(session.sampler.key() & MASK) for _ in range(n)]


def _given_seeds(given: Sequence[int] | Release | None, k: int, mechanism: str) -> list[int] | None:
    """The ``seeds`` parameter checked (k signed 64-bit ints), or None: fresh seeds, drawn by the release."""
    if not REGISTRY[mechanism].hashed and given is not None:
        raise ConfigError(f"The 'seeds' parameter of {OWNER} does not apply to the {mechanism} mechanism.")
    if given is None:
        return None
    if isinstance(given, Release):
        from spark_dp.sketch.estimate import seeds_from_payload

        if "seeds" not in given.arrays:
            raise ConfigError(f"The 'seeds' parameter of {OWNER}: release {given.release_id!r} has no seeds.")
        given = seeds_from_payload(given["seeds"])
    given = list(given)
    if len(given) != k or not all(isinstance(x, int | np.integer) and not isinstance(x, bool) for x in given):
        raise ConfigError(f"The 'seeds' parameter of {OWNER} must hold {k} integers (one per repetition).")
    if any(not (-(1 << 63) <= int(x) < (1 << 64)) for x in given):
        raise ConfigError(f"The 'seeds' parameter of {OWNER} must hold 64-bit integers.")
    return [to_signed(int(x)) for x in given]


@V.renamed_parameters(column="columns", max_items_per_unit="max_rows_per_unit")
def count_sketch(
    session: DPSession,
    df: DataFrame,
    columns: str | Sequence[str],
    *,
    epsilon: float,
    delta: float,
    neighbors: str = "add_remove",
    mechanism: str = "private_count_sketch",
    repetitions: int = 15,
    buckets: int = 65536,
    weight: str | None = None,
    bounds: dict[str, Sequence[float]] | None = None,
    privacy_unit: str | None = None,
    max_rows_per_unit: int = 1,
    unit_clipping: str = "l1",
    unit_l2_bound: float | None = None,
    nulls: str = "item",
    nonfinite: str = "drop",
    domain: Sequence | int | None = None,
    top: int = 50,
    threshold: float | None = None,
    seeds: Sequence[int] | Release | None = None,
    candidates: DataFrame | Sequence[Any] | None = None,
    candidate_column: str | None = None,
    levels: int | None = None,
    hash_items: bool | None = None,
    release_id: str | None = None,
    confidence: float = 0.95,
    config_sha256: str | None = None,
    source_paths: Sequence[str] | None = None,
    source: dict[str, Any] | None = None,
) -> Release:
    """Releases a private sketch (or known-domain histogram) of the item column ``df[columns]``.

    Mechanisms (see :mod:`spark_dp.sketch.count_sketch` for neighbours and
    sensitivities): ``private_count_sketch`` (Pagh & Thorup 2022; Gaussian,
    Δ₂ = √k·m), ``count_min`` (Laplace, Δ₁ = k·m, pure ε-DP, δ unused),
    ``count_mean`` (Gaussian, Δ₂ = √k·m, debiased mean estimator) and
    ``histogram`` (Gaussian on the exact histogram over ``domain``, Δ₂ = m).

    Args:
        df: the data.
        columns: the item column (strings or integers): its name, or a list
            of that one name (``column`` is the deprecated old name).
        epsilon, delta: the release's (ε, δ) (Count-Min charges (ε, 0)).
        neighbors: ``add_remove`` (default, the paper's) or ``replace`` (one
            unit's rows replaced by another's: Δ doubles, ×√2 for unweighted
            Count-Mean and histograms; :mod:`spark_dp.sketch.count_sketch`).
        mechanism: one of the four above.
        repetitions: k ≥ 1 (odd k gives a unique median).
        buckets: b ≥ 1 (≥ 2 for count_mean).
        weight: optional numeric column; each row adds its weight clipped to
            [−1, 1] (default: 1 per row), or with ``bounds`` its weight in
            the weight's own units.
        bounds: optional public bounds of the weight column,
            ``{weight: [lo, hi]}`` (finite, lo < hi; the weight column only:
            bounds on the item column or any other column, or without a
            ``weight``, are a ConfigError naming the column, nothing
            charged). Each finite weight is clamped to [lo, hi] and divided
            by the public M = max(|lo|, |hi|), so the mechanism sees weights
            in [−1, 1] exactly as without bounds: the neighbour relation,
            the sensitivity (Δ as for weights in [−1, 1]) and the
            calibration are unchanged. Everything the release reports is then
            multiplied by M — exact post-processing, since a sketch is linear
            in the weights: the stored counters (``sketch``,
            ``dyadic_sketch``, ``histogram``) and their intervals, heavy
            hitters and their threshold (a given ``threshold`` is in the
            weight's units; the default is 3·M·σ), so estimates, intervals
            and reports are in the weight's units. The counters are stored
            in the weight's units (not in the scaled ones with M applied by
            readers) so that every reader, old ones and third-party Parquet
            readers included, gets the weight's units without knowing M; the
            manifest records ``sketch.weight_scaling`` (column, bounds, M)
            and keeps ``privacy.noise_scale`` the mechanism's σ (scaled
            units; a counter's noise is M·σ). Releases merge only with equal
            weight bounds. There is no centring (the other families'
            bounds clamp *and* centre): a shift is not post-processing here,
            since undoing it would need the per-item unweighted counts, which
            a weighted sketch does not release. Non-finite weights follow
            ``nonfinite`` first (``zero``: the row counts 0, not clamped).
        privacy_unit: unit column (default: each row is a unit).
        max_rows_per_unit: m, rows kept per unit (``max_items_per_unit`` is
            the deprecated old name) (chosen by a keyed hash of the unit and the row's content:
            pseudo-random, and the same if Spark recomputes the frame).
        unit_clipping: ``l1`` (Δ from m) or ``sketch_l2``: clip each unit's
            per-repetition contribution to L2 ≤ ``unit_l2_bound`` (default √m).
        nulls: ``item`` (a null item is counted as an item of its own) or
            ``drop`` (rows with a null item are ignored).
        nonfinite: ``drop`` or ``zero`` for null/NaN/inf weights.
        domain: histogram only: list of items or an int d (items 0…d−1).
        top, threshold: heavy-hitter defaults recorded in the manifest
            (threshold default: 3 standard deviations of one counter's noise).
        seeds: reuse the hash seeds of an earlier release (a Release or k
            ints) so the sketches can be merged (daily → weekly); default:
            fresh seeds from OS entropy. Privacy does not depend on the seeds,
            but published seeds let whoever supplies later data aim collisions.
        candidates: optional public candidate items (a DataFrame with
            ``candidate_column``, or a list): the release's manifest then lists
            the top-``top`` candidates whose estimate is ≥ ``threshold``
            (post-processing). Candidates must be public — a fixed vocabulary,
            another dataset — never read from or derived from ``df``: the
            published list would then say which items the private data holds
            (an item of one unit is listed with it and missing without it,
            whatever the noise). A candidate DataFrame that is ``df``, reads
            any of ``df``'s input files, or is built on ``df`` is refused
            (ConfigError, nothing charged); a list cannot be traced.
        levels: L, for heavy hitters without candidates over item ids in
            [0, 2^L): also release Private CountSketches of the dyadic
            prefixes (arrays ``dyadic_sketch`` (L−1, k, b) and
            ``dyadic_seeds`` (L−1, k, 2)); Δ₂ = √(L·k)·m for the whole stack
            (neighbours: add/remove one unit of ≤ m rows, as for the plain
            sketch); the manifest lists the heavy ids found by descending it
            (see :mod:`spark_dp.sketch.dyadic`). Null items are not counted.
            Integer items are their own ids (items outside [0, 2^L) are not
            counted); strings are mapped to ids by the public hash
            xxhash64(hash_seed, item) & (2^L − 1), with ``hash_seed`` fresh
            from OS entropy and released (array ``hash_seed`` (1, 2) and
            ``sketch.domain_hash``): the release names heavy *hashed ids*;
            :func:`~spark_dp.sketch.estimate.heavy_hitters` with candidates
            maps them back. L = 32 (:data:`~spark_dp.sketch.dyadic.DEFAULT_HASHED_LEVELS`)
            suits hashed domains (collision bound in the dyadic module).
        hash_items: with ``levels``: map items to ids through the public hash
            (default: for string items only; True hashes integers too, so
            any integers count).
        release_id: idempotency key (a release id seen before returns the
            stored release: no new noise, no new charge). None: the default
            id from the dataset, this request and the input's lineage
            (:func:`spark_dp.release.ids.default_release_id`).
        confidence: the level of the noise intervals of the release's
            arrays and estimates, in (0, 1) (post-processing, no privacy cost).
        config_sha256: the job config's digest, recorded in the manifest.
        source_paths: the Parquet files ``df`` is a plain read of (as the job
            passes for ``format: parquet``); the exact sketch is then built by
            tasks reading them with pyarrow
            (:func:`~spark_dp.aggregates.sketch.sketch_table_parquet`) — the
            same table, without Spark's Parquet reader and the JVM → Arrow
            conversion. Leave None for any other DataFrame. Used for the
            sketch mechanisms, ``histogram``
            (:func:`~spark_dp.aggregates.sketch.histogram_table_parquet`) and
            ``levels`` (:func:`~spark_dp.aggregates.sketch.dyadic_tables_parquet`).
        source: where ``df`` was read from, ``{"path": …}`` / ``{"paths": […]}``
            or ``{"table": …}`` / ``{"tables": […]}`` (public names, as in a
            job config; default: ``source_paths``). Recorded in the manifest
            (``source``: local paths resolved to absolute ones) so that
            ``spark-dp heavy-hitters --candidates`` can refuse candidates read
            from the release's own input later.

    Returns:
        A :class:`Release` with arrays ``sketch`` (k, b) and ``seeds`` (k, 2)
        — or ``histogram`` (d,) for the histogram mechanism.

    Raises:
        ConfigError, SchemaError: bad parameters or columns, before anything
            is charged or written.
    """
    # validate → plan → the one release pipeline (every parameter, as given, goes to _validate)
    return run_release(session, _release_plan(_validate(**locals())))


@dataclass(frozen=True)
class _SketchRequest:
    """A validated count_sketch request: everything its release plan is built from."""

    mechanism: Any
    column: Any
    kind: Any
    k: Any
    b: Any
    C: Any
    domain: Any
    weight: Any
    nulls: Any
    nonfinite: Any
    privacy_unit: Any
    max_items_per_unit: Any
    unit_clipping: Any
    neighbors: Any
    levels: Any
    hashed: Any
    draw_seeds: Any
    candidates: Any
    candidate_column: Any
    top: Any
    threshold: Any
    threshold_given: Any
    plan: Any
    source_paths: Any
    df: Any
    weight_bounds: Any
    weight_scale: Any
    source_info: Any
    request: Any
    params: Any
    release_id: Any
    config_sha256: Any


def _validate(
    session: DPSession, df: Any, columns: Any, *, epsilon: Any, delta: Any, neighbors: Any, mechanism: Any,
    repetitions: Any, buckets: Any, weight: Any, bounds: Any, privacy_unit: Any, max_rows_per_unit: Any, unit_clipping: Any,
    unit_l2_bound: Any, nulls: Any, nonfinite: Any, domain: Any, top: Any, threshold: Any, seeds: Any,
    candidates: Any, candidate_column: Any, levels: Any, hash_items: Any, release_id: Any, confidence: Any,
    config_sha256: Any,
    source_paths: Any, source: Any,
) -> _SketchRequest:
    """Checks every parameter and the schema (no Spark job), draws fresh hash seeds, plans the privacy events."""
    owner = OWNER
    column = _item_column(columns, owner=owner)
    max_items_per_unit = max_rows_per_unit  # one row = one item
    epsilon, delta = P.check("epsilon", epsilon, owner=owner), P.check("delta", delta, owner=owner)
    P.check("neighbors", neighbors, owner=owner)
    k, b, C, domain = check_sketch_request(
        mechanism=mechanism, repetitions=repetitions, buckets=buckets, max_rows_per_unit=max_rows_per_unit,
        unit_clipping=unit_clipping, unit_l2_bound=unit_l2_bound, privacy_unit=privacy_unit, domain=domain,
    )
    for name, value in (("nulls", nulls), ("nonfinite", nonfinite), ("hash_items", hash_items)):
        SKETCH_PARAMS.check(name, value, owner=owner)
    if hash_items is not None and levels is None:
        raise ConfigError(f"The 'hash_items' parameter of {owner} applies only with 'levels' (dyadic heavy hitters).")
    if levels is not None:
        levels = P.check("levels", levels, owner=owner)
        if not REGISTRY[mechanism].dyadic or unit_clipping != "l1" or candidates is not None:
            raise ConfigError(f"The 'levels' parameter of {owner} (dyadic heavy hitters) needs mechanism "
                              f"{accepting('dyadic')!r}, unit_clipping 'l1' and no candidates.")
        if seeds is not None and not (isinstance(seeds, Release) and
                                      (seeds.manifest.get("sketch") or {}).get("levels") == levels):
            raise ConfigError(f"The 'seeds' parameter of {owner} with 'levels' must be an earlier dyadic release "
                              f"with levels={levels} (its level seeds and domain hash are reused so the stacks merge).")
    top, threshold = P.check("top", top, owner=owner), P.check("threshold", threshold, owner=owner)
    if not P.is_dataframe(df):
        raise SchemaError(f"The 'df' parameter of {owner} must be a Spark DataFrame. Got {type(df).__name__} instead.")
    if source_paths is not None:
        if isinstance(source_paths, str):
            source_paths = [source_paths]
        if not isinstance(source_paths, Sequence) or not all(isinstance(x, str) for x in source_paths):
            raise ConfigError(f"The 'source_paths' parameter of {owner} must be a list of Parquet paths. "
                              f"Got {source_paths!r} instead.")
        source_paths = list(source_paths)
    source_info = _source_info(source, source_paths, owner=owner)
    if weight is not None:
        SKETCH_PARAMS.check("weight", weight, owner=owner)
    # the weight column's public bounds (any other column, or no weight: refused, naming it)
    weight_bounds = check_weight_bounds(bounds, weight=weight, column=column, owner=owner)
    weight_scale = 1.0 if weight_bounds is None else max(abs(weight_bounds[0]), abs(weight_bounds[1]))
    P.check("privacy_unit", privacy_unit, owner=owner)
    from spark_dp.aggregates.sketch import item_kind, prepare_items

    if candidates is not None:
        if P.is_dataframe(candidates):
            SKETCH_PARAMS.check("candidate_column", candidate_column, owner=owner)
            ckind = item_kind(candidates, candidate_column)
            if ckind != item_kind(df, column):
                raise SchemaError(f"Candidate column {candidate_column!r} holds {ckind} items; "
                                  f"column {column!r} does not.")
        elif isinstance(candidates, str | bytes) or not isinstance(candidates, Sequence):
            raise SchemaError(f"The 'candidates' parameter of {owner} must be a DataFrame or a list of items. "
                              f"Got {type(candidates).__name__} instead.")
        else:
            from spark_dp.sketch.estimate import coerce_items

            candidates = coerce_items(list(candidates), item_kind(df, column))
        if P.is_dataframe(candidates):
            from spark_dp.sketch.estimate import check_candidates_frame

            # Candidates from the private data would publish which items it holds (before any charge).
            check_candidates_frame(candidates, df, owner=owner)

    kind = item_kind(df, column)  # schema checks only, no Spark job
    prepare_items(df, column, weight=weight, nulls=nulls, nonfinite=nonfinite, privacy_unit=privacy_unit,
                  max_items_per_unit=max_items_per_unit, weight_bounds=weight_bounds)
    if not REGISTRY[mechanism].hashed:  # a histogram over a public domain: one table
        if isinstance(domain, int) and kind != "long":
            raise SchemaError(f"Column {column!r} holds strings; an integer domain size needs an integer item column.")
        if isinstance(domain, list) and (kind == "string") != isinstance(domain[0], str):
            raise SchemaError(f"The 'domain' items are not of the type of column {column!r} ({kind}).")
        k = 1
    hashed = levels is not None and (kind == "string" if hash_items is None else hash_items)
    if levels is not None and kind != "long" and not hashed:
        raise SchemaError(f"Column {column!r} holds strings; 'hash_items' false (dyadic heavy hitters over the items "
                          "themselves) needs integer items in [0, 2^levels).")

    if levels is None:
        plan = plan_sketch(mechanism, epsilon=epsilon, delta=delta, repetitions=k,
                           max_items_per_unit=max_items_per_unit, unit_l2_bound=C, neighbors=neighbors,
                           weighted=weight is not None)
    else:
        from spark_dp.sketch.dyadic import plan_dyadic

        plan = plan_dyadic(epsilon=epsilon, delta=delta, repetitions=k, levels=levels,
                           max_items_per_unit=max_items_per_unit, neighbors=neighbors)
    threshold_given = threshold
    if threshold is None:  # in the weight's units (a counter's noise is M·σ with bounds)
        threshold = 3.0 * plan.counter_std * weight_scale
    # Hash seeds: given ones are checked here; fresh ones are drawn by the release (compute), after the
    # release-id lookup and the budget check, so a re-run of a stored release draws nothing.
    given_seeds = seeds
    seeds = _given_seeds(seeds, k, mechanism)
    hash_seeds = None if seeds is None else _HashSeeds(seeds)
    if levels is not None and given_seeds is not None:  # reuse an earlier dyadic release's hash functions
        from spark_dp.sketch.estimate import seeds_from_payload

        level_seeds = [seeds_from_payload(x) for x in given_seeds.arrays.get("dyadic_seeds", np.zeros((0, k, 2)))]
        level_seeds.append(seeds)
        if any(len(x) != k for x in level_seeds):
            raise ConfigError(f"The 'seeds' parameter of {owner}: release {given_seeds.release_id!r} has other "
                              "repetitions per level.")
        given_hash = (given_seeds.manifest["sketch"].get("domain_hash") or {}).get("seed")
        if (given_hash is not None) != hashed:
            raise ConfigError(f"The 'seeds' parameter of {owner}: release {given_seeds.release_id!r} "
                              f"{'hashes' if given_hash is not None else 'does not hash'} its items; this one "
                              f"{'does' if hashed else 'does not'}.")
        hash_seeds = _HashSeeds(seeds, level_seeds, None if given_hash is None else int(given_hash))
    elif seeds is None and not REGISTRY[mechanism].hashed:  # a histogram: no hashing
        hash_seeds = _HashSeeds([])

    def draw_seeds() -> _HashSeeds:
        """The release's hash seeds; fresh ones drawn in the order seeds, levels 1…L−1, domain hash."""
        if hash_seeds is not None:
            return hash_seeds
        fresh = _fresh_seeds(session, k)
        if levels is None:
            return _HashSeeds(fresh)
        # level L (the items) uses `fresh`; levels 1…L−1 get their own; the public domain hash's seed is
        # OS entropy too, released with the sketch
        level_seeds = [_fresh_seeds(session, k) for _ in range(levels - 1)] + [fresh]
        return _HashSeeds(fresh, level_seeds, _fresh_seeds(session, 1)[0] if hashed else None)
    params = {"repetitions": k, "buckets": b if REGISTRY[mechanism].hashed else None,
              "heavy_hitters": {"top": top, "threshold": threshold, "levels": levels}}
    if hashed:  # (only then: earlier requests keep their digests, so their release ids stay idempotent)
        params["heavy_hitters"]["hash_items"] = True
    request = {
        "dataset_id": session.dataset_id, "task": "count_sketch", "mechanism": mechanism, "column": column,
        "params": params, "epsilon": epsilon, "delta": delta, "weight": weight, "privacy_unit": privacy_unit,
        "max_items_per_unit": max_items_per_unit, "unit_clipping": unit_clipping, "unit_l2_bound": C,
        "nulls": nulls, "nonfinite": nonfinite, "domain": domain,
        "seeds": [str(x) for x in seeds] if given_seeds is not None else "fresh",
        "candidates": None if candidates is None else (candidates if isinstance(candidates, list) else "dataframe"),
        "sampler": session.sampler.name,
        "config_sha256": config_sha256,
        # only with bounds: the digests of requests without them, hence their release ids, stay as they were
        **({"bounds": {weight: list(weight_bounds)}} if weight_bounds is not None else {}),
        # Request keys keep their pre-0.2 names (column, max_items_per_unit) and "neighbors" is added only
        # when not the default, so the digests of earlier requests, hence their release ids, stay valid.
        **({"neighbors": neighbors} if neighbors != "add_remove" else {}),
        **confidence_request(P.check("confidence", confidence, owner=owner)),
    }

    return _SketchRequest(mechanism=mechanism, column=column, kind=kind, k=k, b=b, C=C, domain=domain, weight=weight, nulls=nulls, nonfinite=nonfinite, privacy_unit=privacy_unit, max_items_per_unit=max_items_per_unit, unit_clipping=unit_clipping, neighbors=neighbors, levels=levels, hashed=hashed, draw_seeds=draw_seeds, candidates=candidates, candidate_column=candidate_column, top=top, threshold=threshold, threshold_given=threshold_given, plan=plan, source_paths=source_paths, df=df, weight_bounds=weight_bounds, weight_scale=weight_scale, source_info=source_info, request=request, params=params, release_id=release_id, config_sha256=config_sha256)


class _Layout:
    """One of the three payload shapes of a sketch release, chosen by the spec and ``levels``.

    ``exact`` builds the exact table(s) on Spark (or from the Parquet files
    the tasks read themselves), ``arrays`` lays the noisy table out as the
    release's payload arrays, ``heavy_hitters`` finds the reported items
    (post-processing of the noisy table; None when the release has none).
    """

    table = "sketch"  # the payload array(s) whose counters carry the noise

    def exact(self, r: _SketchRequest, hs: _HashSeeds, paths: list[str] | None, common: dict) -> np.ndarray:
        from spark_dp.aggregates.sketch import sketch_table, sketch_table_parquet

        spec = REGISTRY[r.mechanism]
        if paths:  # the same table, the tasks reading the Parquet files (docs/benchmarks_sketch.md)
            return sketch_table_parquet(paths, r.column, seeds=hs.seeds, buckets=r.b, signed=spec.signed,
                                        unit_l2_bound=r.C, spark=r.df.sparkSession, **common)
        return sketch_table(r.df, r.column, seeds=hs.seeds, buckets=r.b, signed=spec.signed, unit_l2_bound=r.C,
                            **common)

    def arrays(self, r: _SketchRequest, noisy: np.ndarray, hs: _HashSeeds) -> dict[str, np.ndarray]:
        return {"sketch": noisy, "seeds": seeds_to_payload(hs.seeds)}

    def heavy_hitters(self, r: _SketchRequest, noisy: np.ndarray, arrays: dict, hs: _HashSeeds) -> list | None:
        if r.candidates is None:
            return None
        # Heavy hitters from public candidates: post-processing of the noisy table.
        from spark_dp.sketch.estimate import SketchView, heavy_hitters

        view = SketchView(r.mechanism, r.kind, arrays.get("sketch", noisy), hs.seeds, r.domain, r.threshold, r.top)
        return heavy_hitters(view, r.candidates, r.candidate_column, top=r.top, threshold=r.threshold)


class _HistogramLayout(_Layout):
    """A histogram over a public domain: one table, no hashing."""

    def exact(self, r: _SketchRequest, hs: _HashSeeds, paths: list[str] | None, common: dict) -> np.ndarray:
        from spark_dp.aggregates.sketch import histogram_table, histogram_table_parquet

        if paths:
            return histogram_table_parquet(paths, r.column, domain=r.domain, spark=r.df.sparkSession, **common)
        return histogram_table(r.df, r.column, domain=r.domain, **common)

    def arrays(self, r: _SketchRequest, noisy: np.ndarray, hs: _HashSeeds) -> dict[str, np.ndarray]:
        return {"histogram": noisy}


class _DyadicLayout(_Layout):
    """A stack of L hashed tables over the dyadic prefixes of the items: one Gaussian release, Δ₂ = √(L·k)·m."""

    def exact(self, r: _SketchRequest, hs: _HashSeeds, paths: list[str] | None, common: dict) -> np.ndarray:
        from spark_dp.aggregates.sketch import dyadic_tables, dyadic_tables_parquet

        common = {key: v for key, v in common.items() if key != "nulls"}  # null items are never counted
        if paths:
            return dyadic_tables_parquet(paths, r.column, seeds=hs.level_seeds, buckets=r.b, levels=r.levels,
                                         hash_seed=hs.hash_seed, spark=r.df.sparkSession, **common)
        return dyadic_tables(r.df, r.column, seeds=hs.level_seeds, buckets=r.b, levels=r.levels,
                             hash_seed=hs.hash_seed, **common)

    def arrays(self, r: _SketchRequest, noisy: np.ndarray, hs: _HashSeeds) -> dict[str, np.ndarray]:
        arrays = {"sketch": noisy[-1], "seeds": seeds_to_payload(hs.seeds)}
        if r.levels > 1:
            arrays["dyadic_sketch"] = noisy[:-1]
            arrays["dyadic_seeds"] = np.stack([seeds_to_payload(x) for x in hs.level_seeds[:-1]])
        if hs.hash_seed is not None:
            arrays["hash_seed"] = seeds_to_payload([hs.hash_seed])
        return arrays

    def heavy_hitters(self, r: _SketchRequest, noisy: np.ndarray, arrays: dict, hs: _HashSeeds) -> list | None:
        from spark_dp.sketch.dyadic import dyadic_heavy_hitters

        return dyadic_heavy_hitters(noisy, hs.level_seeds, top=r.top, threshold=r.threshold)


def _layout(r: _SketchRequest) -> _Layout:
    """The payload shape of ``r``'s release."""
    if not REGISTRY[r.mechanism].hashed:
        return _HistogramLayout()
    return _Layout() if r.levels is None else _DyadicLayout()


def _release_plan(r: _SketchRequest) -> ReleasePlan:
    """The release plan of a validated request: the exact table (compute), its noise and heavy hitters, the manifest."""
    spec = REGISTRY[r.mechanism]
    plan = r.plan
    layout = _layout(r)

    def compute() -> tuple[np.ndarray, _HashSeeds]:
        """The hash seeds (fresh ones drawn here: after the release-id lookup) and the exact table."""
        hs = r.draw_seeds()
        common = dict(weight=r.weight, nulls=r.nulls, nonfinite=r.nonfinite, privacy_unit=r.privacy_unit,
                      max_items_per_unit=r.max_items_per_unit)
        if r.weight_bounds is not None:  # (only then: the builds' calls without bounds stay as they were)
            common["weight_bounds"] = r.weight_bounds
        # Given, or detected when df is a plain Parquet scan (aggregates/_scan.py).
        paths = choose_source_paths(r.df, [c for c in (r.column, r.weight, r.privacy_unit) if c], r.source_paths,
                                    owner=OWNER,
                                    unsupported="privacy_unit needs a shuffle" if r.privacy_unit else None)
        return layout.exact(r, hs, paths, common), hs

    hh_info: dict[str, Any] = {"top": r.top, "threshold": r.threshold,
                               "threshold_rule": "3 sigma" if r.threshold_given is None else "given"}
    level = confidence_of(r.request)
    counter_scale = plan.scale * r.weight_scale  # a released counter's noise, in the weight's units
    if r.threshold is not None:  # the threshold's false-positive rate from the noise alone (sketch/uncertainty.py)
        hh_info["false_positive_rate"] = false_positive_rate(spec.estimator, plan.noise, counter_scale, r.k,
                                                             r.threshold, r.b)
        hh_info["false_positive_rate_meaning"] = (
            f"probability that an item of true frequency 0 has a {spec.estimator} estimate >= threshold from the "
            "privacy noise alone, assuming no hash collisions (a lower limit: false_positive_rate_bound includes them)")
    if r.hashed:
        hh_info["items_are"] = ("hashed ids xxhash64(domain_hash.seed, item) & (2^levels - 1); map public "
                                "candidates through the hash to name them (spark-dp heavy-hitters --candidates)")

    def noise(exact: tuple[np.ndarray, _HashSeeds], cp: Chokepoint) -> Noised:
        table, hs = exact
        noisy = release_table(plan, table, cp)  # one release of the whole table (a dyadic stack included)
        if r.weight_bounds is not None:  # back to the weight's units: exact post-processing (linear in the weights)
            noisy = noisy * r.weight_scale
        arrays = layout.arrays(r, noisy, hs)
        manifest: dict[str, Any] = {"sketch": sketch_info(hs.seeds, hs.hash_seed)}
        found = layout.heavy_hitters(r, noisy, arrays, hs)
        if found is not None:
            manifest["heavy_hitters"] = {**hh_info, "items": [{"item": x, "estimate": v} for x, v in found]}
            cut = heavy_hitters_note(len(found), r.top or 50, r.threshold, hh_info["threshold_rule"])
            if cut is not None:  # fewer than top: say what cut them (post-processing of the released values)
                manifest["heavy_hitters"]["note"] = cut
        unc = {name: counter_uncertainty(arrays[name], plan.noise, counter_scale, level)
               for name in ("sketch", "dyadic_sketch", "histogram") if name in arrays}
        if "sketch" in arrays:  # the estimates' intervals: post-processing of the released (level-L) table
            info, mass = estimate_interval_info(
                arrays["sketch"], r.mechanism, spec.estimator, plan.noise, counter_scale, level,
                nonnegative=r.weight is None or (r.weight_bounds is not None and r.weight_bounds[0] >= 0))
            manifest["sketch"]["estimate_intervals"] = info
            if r.threshold is not None:
                hh = manifest.setdefault("heavy_hitters", dict(hh_info))
                hh["false_positive_rate_bound"] = None if mass.reason is not None else false_positive_rate_bound(
                    spec.estimator, plan.noise, counter_scale, mass, r.threshold)
                hh["false_positive_rate_bound_meaning"] = (
                    "upper bound on the probability that an item absent from the data has an estimate >= threshold, "
                    "hash collisions included (post-processing of the released table; "
                    + (mass.reason if mass.reason else "Markov/Cantelli on the collision mass") + ")")
        return Noised(arrays, manifest, uncertainty=unc)

    privacy = {
        "epsilon": plan.budget.epsilon, "delta": plan.budget.delta, "neighbors": r.neighbors,
        "sensitivity": plan.sensitivity, "sensitivity_norm": f"{plan.sensitivity_norm} of the whole released table",
        "noise": plan.noise, "noise_family": plan.noise, "noise_scale": plan.scale,
        **({"noise_sigma": plan.scale} if plan.noise == "gaussian" else {}),
        "calibration": "exact (Balle & Wang 2018)" if plan.noise == "gaussian" else "Laplace b = sensitivity/epsilon",
        "privacy_unit": r.privacy_unit or "row", "privacy_unit_column": r.privacy_unit,  # None: each row is a unit
        "max_rows_per_unit": r.max_items_per_unit,
        "max_items_per_unit": r.max_items_per_unit,  # deprecated duplicate of max_rows_per_unit (manifest schema 1)
        "unit_clipping": r.unit_clipping, "unit_l2_bound": r.C, "levels": r.levels,
    }

    def sketch_info(seeds: list[int] | None, hash_seed: int | None) -> dict[str, Any]:
        """The manifest's ``sketch`` field (the seeds are known once drawn: the noise step adds them)."""
        info = {
            "item_kind": r.kind, "repetitions": r.k, "buckets": r.b if spec.hashed else None,
            "signed": spec.signed, "estimator": spec.estimator,
        }
        if r.weight_bounds is not None:
            lo, hi = r.weight_bounds
            info["weight_scaling"] = {"column": r.weight, "bounds": [lo, hi], "scale": r.weight_scale,
                                      "applied": WEIGHT_SCALING_NOTE}
        if not spec.hashed:
            info["domain"] = r.domain
        elif seeds is not None:
            info.update(hash=HASH_FAMILY, seeds=[str(s) for s in seeds], seeds_payload=SEEDS_PAYLOAD)
        return _dyadic_info(info, r.levels, r.hashed, hash_seed)

    policies = {
        "nulls": "a null item is an item of its own" if r.nulls == "item" else "rows with a null item are dropped",
        "weights": ("each row counts 1" if not r.weight else
                    f"clipped to [-1, 1] per row; non-finite weights: {r.nonfinite}" if r.weight_bounds is None else
                    f"clamped to [{r.weight_bounds[0]:g}, {r.weight_bounds[1]:g}] per row and divided by M = "
                    f"{r.weight_scale:g}; non-finite weights: {r.nonfinite} (not clamped; 'zero' counts 0)"),
        "contribution_bounding": (f"at most {r.max_items_per_unit} rows per unit, chosen by a keyed hash of (secret, "
                                  "unit, content)") if r.privacy_unit else None,
        "null_privacy_unit": "rows with a null unit form one unit" if r.privacy_unit else None,
        "domain": None if spec.hashed else "items outside the public domain are not counted",
    }
    return ReleasePlan(
        task="count_sketch", mechanism=r.mechanism, release_id=r.release_id, request=r.request,
        events=tuple(plan.events), budget=plan.budget, compute=compute, noise=noise, privacy=privacy,
        manifest={"columns": [r.column], "params": r.params, "policies": policies, "sketch": sketch_info(None, None),
                  "heavy_hitters": hh_info, "source": r.source_info},
        config_sha256=r.config_sha256, lineage=functools.partial(input_lineage, r.df),
        spark=getattr(r.df, "sparkSession", None),
    )


def _dyadic_info(info: dict[str, Any], levels: int | None, hashed: bool, hash_seed: int | None) -> dict[str, Any]:
    """``info`` with the dyadic stack's description, if any (with the domain hash's seed once drawn)."""
    if levels is None:
        return info
    info.update(levels=levels, dyadic=(
        "dyadic_sketch[l-1] sketches the prefixes x >> (L - l) of level l = 1..L-1 with seeds dyadic_seeds[l-1] "
        "(same halves layout); sketch/seeds are level L; " + (
            "ids = xxhash64(domain_hash.seed, item) & (2^L - 1) (every non-null item counts)" if hashed else
            "ids = the integer items; items outside [0, 2^L) not counted") + "; null items not counted"))
    if hashed and hash_seed is not None:
        info["domain_hash"] = {
            "seed": str(hash_seed), "levels": levels, "payload": "hash_seed[0] = (high, low) 32-bit halves",
            "function": "id = xxhash64(seed, item) & (2^levels - 1): Spark SQL xxhash64 (bigint seed first, "
                        "strings as UTF-8, integers as bigint); public and data-independent",
            "collisions": f"two distinct items share an id with probability 2^-{levels}",
        }
    return info
