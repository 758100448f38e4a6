"""Frequency estimates and heavy hitters from a released sketch (post-processing).

Nothing here touches private data or the budget: every function reads a
released table (and its public seeds) and candidate items the caller supplies.
Candidate items must be public (or come from data disjoint from the sketched
data): choosing candidates *from* the private data would leak through the
choice, not through the sketch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from spark_dp.errors import ConfigError, SchemaError
from spark_dp.params import is_dataframe
from spark_dp.release import Release, load_release, storage
from spark_dp.sketch.count_sketch import combine, simple_estimates, table_total
from spark_dp.sketch.hashing import MASK, buckets_and_signs, to_signed
from spark_dp.sketch.mechanisms import DEFAULT_ESTIMATOR, REGISTRY, SIGNED

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def _is_dataframe(x: Any) -> bool:
    """Whether ``x`` is a Spark DataFrame (classic or Connect); pyspark loads only with one.

    (Estimates and plans from released tables need no Spark: ``spark_dp.sketch``
    imports without it.)
    """
    return is_dataframe(x)

def _distinct_items(candidates: DataFrame, column: str, typ: Any, *, non_null: bool = False) -> DataFrame:
    """The distinct candidate items (one column ``item`` of type ``typ``), shuffled by spark-dp's own rule.

    One explicit hash exchange on the item, of :func:`~spark_dp.aggregates._partitioning.partitions_for`
    partitions (never ``spark.sql.shuffle.partitions``): ``distinct`` then plans no exchange of its own.
    """
    from pyspark.sql import functions as F

    from spark_dp.aggregates._partitioning import partitions_for

    items = candidates.select(F.col(column).cast(typ).alias("item"))
    if non_null:
        items = items.where(F.col("item").isNotNull())
    return items.repartition(partitions_for(items), F.col("item")).distinct()


def seeds_to_payload(seeds: Sequence[int]) -> np.ndarray:
    """64-bit seeds as a (k, 2) float64 array: [i, 0] = high 32 bits, [i, 1] = low 32 bits (unsigned).

    Each half is < 2³² and therefore exact in float64, the release writer's type.
    """
    u = [int(s) & MASK for s in seeds]
    return np.array([[x >> 32, x & 0xFFFFFFFF] for x in u], dtype=np.float64).reshape(len(u), 2)


def seeds_from_payload(arr: np.ndarray) -> list[int]:
    """Inverse of :func:`seeds_to_payload`: signed 64-bit seeds."""
    arr = np.asarray(arr)
    return [to_signed((int(hi) << 32) | int(lo)) for hi, lo in arr.reshape(-1, 2)]


@dataclass(frozen=True)
class SketchView:
    """A released sketch, ready for estimation."""

    mechanism: str
    kind: str
    table: np.ndarray
    seeds: list[int]
    domain: list | int | None
    threshold: float | None
    top: int | None
    stack: np.ndarray | None = None  # dyadic releases: the (L, k, b) stack (``table`` is its level L)
    level_seeds: list[list[int]] | None = None
    hash_seed: int | None = None  # hashed domains: items map to ids xxhash64(hash_seed, item) & (2^L − 1)

    @property
    def buckets(self) -> int:
        return int(self.table.shape[-1])

    @property
    def levels(self) -> int | None:
        return None if self.stack is None else int(self.stack.shape[0])

    def ids(self, items: Sequence[Any]) -> list:
        """The ids the level-L sketch counts: the items themselves, or their public hash (None stays None)."""
        if self.hash_seed is None:
            return list(items)
        from spark_dp.sketch.hashing import hashed_ids

        return [None if x is None else int(i) for x, i in
                zip(items, hashed_ids(list(items), self.hash_seed, self.levels, self.kind), strict=True)]

    @classmethod
    def of(cls, release: Release | str) -> SketchView:
        if isinstance(release, str):
            release = load_release(release)
        m = release.manifest
        if m.get("task") != "count_sketch":
            raise ConfigError(f"Release {release.release_id!r} is a {m.get('task')!r} release, not a count_sketch one.")
        info = m["sketch"]
        hh = m.get("heavy_hitters") or {}
        if not REGISTRY[m["mechanism"]].hashed:
            dom = info["domain"]
            return cls(m["mechanism"], info["item_kind"], release["histogram"], [], dom, hh.get("threshold"), hh.get("top"))
        stack = level_seeds = hash_seed = None
        if info.get("levels") is not None:
            from spark_dp.sketch.dyadic import stack_of

            stack = stack_of(release.arrays)
            level_seeds = [seeds_from_payload(s) for s in release.arrays.get("dyadic_seeds", np.zeros((0, 1, 2)))]
            level_seeds.append(seeds_from_payload(release["seeds"]))
            if info.get("domain_hash") is not None:
                hash_seed = int(info["domain_hash"]["seed"])
        return cls(m["mechanism"], info["item_kind"], release["sketch"], seeds_from_payload(release["seeds"]), None,
                   hh.get("threshold"), hh.get("top"), stack, level_seeds, hash_seed)

    def estimator(self, estimator: str | None) -> str:
        allowed = REGISTRY[self.mechanism].estimators
        est = estimator or DEFAULT_ESTIMATOR[self.mechanism]
        if est not in allowed:
            raise ConfigError(
                f"The 'estimator' parameter must be one of {sorted(allowed)} for "
                f"{self.mechanism}. Got {est!r} instead."
            )
        return est


def coerce_items(items: Sequence[Any], kind: str, *, parse: bool = False) -> list:
    """Checks (or, with ``parse``, converts text) items to the sketch's item type.

    Raises:
        SchemaError: an item of the wrong type (or unparseable text).
    """
    out = []
    for x in items:
        if x is None:
            out.append(None)
        elif kind == "long":
            if isinstance(x, bool):
                raise SchemaError(f"Item {x!r} is not an integer; the sketch was built on integer items.")
            if isinstance(x, int | np.integer):
                out.append(int(x))
            elif parse and isinstance(x, str):
                try:
                    out.append(int(x.strip()))
                except ValueError:
                    raise SchemaError(f"Item {x!r} is not an integer; the sketch was built on integer items.") from None
            else:
                raise SchemaError(f"Item {x!r} is not an integer; the sketch was built on integer items.")
        else:
            if not isinstance(x, str):
                raise SchemaError(f"Item {x!r} is not a string; the sketch was built on string items.")
            out.append(x)
    return out


def estimate(release: Release | str | SketchView, items: Sequence[Any], *, estimator: str | None = None) -> np.ndarray:
    """Estimates x̂ for a short list of items, on the driver (no Spark).

    Args:
        release: a count_sketch release (or its directory).
        items: items of the sketch's type (``None`` is the null item).
        estimator: overrides the mechanism's default (``median`` for Private
            CountSketch, ``min`` for Count-Min, ``debiased_mean`` for
            Count-Mean).

    Returns:
        float64 array of estimates (NaN for items outside a histogram's domain, and for
        the null item of a hashed dyadic release, which is never counted).
    """
    view = release if isinstance(release, SketchView) else SketchView.of(release)
    est = view.estimator(estimator)
    items = coerce_items(items, view.kind)
    if not REGISTRY[view.mechanism].hashed:
        dom = range(view.domain) if isinstance(view.domain, int) else view.domain
        index = {x: i for i, x in enumerate(dom)}
        return np.array([view.table[index[x]] if x in index else np.nan for x in items], dtype=np.float64)
    if view.hash_seed is not None:  # hashed domain: the level-L sketch counts the ids (never the null item)
        ids = view.ids(items)
        out = np.full(len(items), np.nan)
        ok = [j for j, i in enumerate(ids) if i is not None]
        if ok:
            h, s = buckets_and_signs([ids[j] for j in ok], view.seeds, view.buckets, "long")
            out[ok] = combine(simple_estimates(view.table, h, s), est, buckets=view.buckets,
                              total=table_total(view.table))
        return out
    h, s = buckets_and_signs(items, view.seeds, view.buckets, view.kind)
    values = simple_estimates(view.table, h, s if SIGNED[view.mechanism] else None)
    return combine(values, est, buckets=view.buckets, total=table_total(view.table))


def estimate_df(
    release: Release | str | SketchView, candidates: DataFrame, column: str, *, estimator: str | None = None
) -> DataFrame:
    """Estimates for a candidate DataFrame of any size, as a distributed join.

    Returns:
        DataFrame ``(item, estimate)``, one row per distinct candidate (items
        outside a histogram's domain get a null estimate).

    Raises:
        SchemaError: the column is missing or its type is not the sketch's item type.
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from spark_dp.aggregates.sketch import item_kind, sketch_lookup

    view = release if isinstance(release, SketchView) else SketchView.of(release)
    est = view.estimator(estimator)
    if not _is_dataframe(candidates):
        raise SchemaError(f"The 'candidates' parameter must be a Spark DataFrame. Got {type(candidates).__name__} instead.")
    if not REGISTRY[view.mechanism].hashed:
        ckind = item_kind(candidates, column)
        if ckind != view.kind:
            raise SchemaError(f"Candidate column {column!r} holds {ckind} items but the histogram was built on {view.kind} items.")
        dom = list(range(view.domain)) if isinstance(view.domain, int) else list(view.domain)
        typ = T.LongType() if view.kind == "long" else T.StringType()
        spark = candidates.sparkSession
        table = spark.createDataFrame(
            [(x, float(v)) for x, v in zip(dom, view.table.tolist(), strict=True)],
            T.StructType([T.StructField("item", typ, True), T.StructField("estimate", T.DoubleType(), False)]),
        )
        items = _distinct_items(candidates, column, typ)
        return items.join(F.broadcast(table), on=items["item"].eqNullSafe(table["item"]), how="left").select(
            items["item"], table["estimate"]
        )
    mapped = None
    if view.hash_seed is not None:  # hashed domain: look up each candidate's public id
        from spark_dp.aggregates.sketch import hashed_id_column

        ckind = item_kind(candidates, column)
        if ckind != view.kind:
            raise SchemaError(f"Candidate column {column!r} holds {ckind} items but the sketch was built on {view.kind} items.")
        typ = T.LongType() if view.kind == "long" else T.StringType()
        mapped = _distinct_items(candidates, column, typ).withColumn(
            "__id", F.when(F.col("item").isNotNull(), hashed_id_column(F.col("item"), view.hash_seed, view.levels)))
        values = sketch_lookup(mapped.where(F.col("__id").isNotNull()).select("__id"), "__id", kind="long",
                               seeds=view.seeds, sketch=view.table, signed=True)
    else:
        values = sketch_lookup(candidates, column, kind=view.kind, seeds=view.seeds, sketch=view.table,
                               signed=SIGNED[view.mechanism])
    v = F.col("value")
    if est == "median":
        agg = F.median(v)
    elif est == "min":
        agg = F.min(v)
    elif est == "mean":
        agg = F.avg(v)
    else:  # debiased_mean
        b, total = view.buckets, table_total(view.table)
        agg = (F.lit(float(b)) * F.avg(v) - F.lit(total)) / F.lit(float(b - 1))
    # sketch_lookup's rows are partitioned by item already (its distinct): the groupBy plans no exchange.
    out = values.groupBy("item").agg(agg.cast("double").alias("estimate"))
    if mapped is not None:
        # Both sides hash-partitioned on the id into the same count (the rule's, from the candidates):
        # the join plans no exchange of spark.sql.shuffle.partitions.
        from spark_dp.aggregates._partitioning import partitions_for

        n = partitions_for(mapped)
        ests = out.withColumnRenamed("item", "__id").repartition(n, F.col("__id"))
        out = mapped.repartition(n, F.col("__id")).join(ests, on="__id", how="left").select("item", "estimate")
    return out


def heavy_hitters(
    release: Release | str | SketchView,
    candidates: DataFrame | Sequence[Any] | None = None,
    column: str | None = None,
    *,
    top: int | None = None,
    threshold: float | None = None,
    estimator: str | None = None,
) -> list[tuple[Any, float]]:
    """The top-t candidates by estimate whose estimate is at least the threshold.

    For a dyadic release (``levels``) the heavy ids are decoded from the
    released stack (:func:`spark_dp.sketch.dyadic.dyadic_heavy_hitters`:
    post-processing, with this ``top`` and ``threshold``). Without candidates
    they are returned as they are — the integer items, or for a hashed domain
    the *hashed ids* xxhash64(hash_seed, item) & (2^L − 1). With candidates
    over a hashed domain, each candidate is mapped through the released hash
    and kept if its id was decoded as heavy, with that id's estimate (so a
    candidate colliding with a heavy item is reported too; see the birthday
    bound in :mod:`spark_dp.sketch.dyadic`).

    Candidates must be public (the result names those that clear the
    threshold): given a release (not a view) whose manifest records its input
    (``source``), a candidate DataFrame reading any file of it is refused.

    Args:
        candidates: a DataFrame (with ``column``) or a list of items; None
            only for a dyadic release.
        top: t; defaults to the release's ``heavy_hitters.top`` (else 50).
        threshold: defaults to the release-time threshold in the manifest
            (3 standard deviations of one counter's noise unless the release
            set another); ``None`` there means no threshold.

    Returns:
        ``[(item, estimate), …]`` sorted by decreasing estimate.
    """
    if isinstance(release, str):
        release = load_release(release)
    if isinstance(release, Release) and _is_dataframe(candidates) and release_source(release.manifest):
        check_candidate_files(candidates.inputFiles(), release.manifest)
    view = release if isinstance(release, SketchView) else SketchView.of(release)
    top = top if top is not None else (view.top or 50)
    if isinstance(top, bool) or not isinstance(top, int) or top < 1:
        raise ConfigError(f"The 'top' parameter must be an int in the range [1, inf). Got {top!r} instead.")
    thr = view.threshold if threshold is None else threshold
    if candidates is None and view.stack is None:
        raise ConfigError("The 'candidates' parameter is required: the release has no dyadic hierarchy "
                          "(heavy hitters without candidates need a release built with 'levels').")
    if view.stack is not None and (candidates is None or view.hash_seed is not None):
        from spark_dp.sketch.dyadic import dyadic_heavy_hitters_of

        thr = float("-inf") if thr is None else float(thr)
        if _is_dataframe(candidates):
            if column is None:
                raise ConfigError("The 'column' parameter is required with a candidate DataFrame.")
            from pyspark.sql import functions as F

            from spark_dp.aggregates.sketch import hashed_id_column, item_kind

            ckind = item_kind(candidates, column)
            if ckind != view.kind:
                raise SchemaError(f"Candidate column {column!r} holds {ckind} items but the sketch was built on "
                                  f"{view.kind} items.")
            found = dyadic_heavy_hitters_of(view.stack, view.level_seeds, top=top, threshold=thr, hash_seed=None,
                                            kind="long")
            if not found:
                return []
            heavy = candidates.sparkSession.createDataFrame(
                [(int(i), float(v)) for i, v in found], "__id bigint, estimate double")
            typ = "bigint" if view.kind == "long" else "string"
            items = _distinct_items(candidates, column, typ, non_null=True)
            items = items.withColumn("__id", hashed_id_column(F.col("item"), view.hash_seed, view.levels))
            rows = items.join(F.broadcast(heavy), on="__id", how="inner").orderBy(
                F.col("estimate").desc(), F.col("item")).limit(top).collect()
            return [(r["item"], float(r["estimate"])) for r in rows]
        if candidates is not None:
            if isinstance(candidates, str | bytes) or not isinstance(candidates, Sequence):
                raise SchemaError("The 'candidates' parameter must be a DataFrame or a list of items. "
                                  f"Got {type(candidates).__name__} instead.")
            candidates = coerce_items(list(candidates), view.kind)
        return dyadic_heavy_hitters_of(view.stack, view.level_seeds, top=top, threshold=thr,
                                       hash_seed=view.hash_seed, kind=view.kind, candidates=candidates)
    if _is_dataframe(candidates):
        from pyspark.sql import functions as F

        if column is None:
            raise ConfigError("The 'column' parameter is required with a candidate DataFrame.")
        est = estimate_df(view, candidates, column, estimator=estimator).where(F.col("estimate").isNotNull())
        if thr is not None:
            est = est.where(F.col("estimate") >= F.lit(float(thr)))
        rows = est.orderBy(F.col("estimate").desc(), F.col("item")).limit(top).collect()
        return [(r["item"], float(r["estimate"])) for r in rows]
    if isinstance(candidates, str | bytes) or not isinstance(candidates, Sequence):
        raise SchemaError(
            f"The 'candidates' parameter must be a DataFrame or a list of items. Got {type(candidates).__name__} instead."
        )
    items = list(dict.fromkeys(candidates))
    values = estimate(view, items, estimator=estimator)
    keep = [(x, float(v)) for x, v in zip(items, values, strict=True) if not np.isnan(v) and (thr is None or v >= thr)]
    keep.sort(key=lambda t: (-t[1], str(t[0])))
    return keep[:top]


def precision_recall(found: Sequence[Any], truth: Sequence[Any]) -> tuple[float, float]:
    """Precision and recall of a heavy-hitter list against the true heavy hitters."""
    f, t = set(found), set(truth)
    hit = len(f & t)
    return (hit / len(f) if f else 1.0), (hit / len(t) if t else 1.0)


# -- candidates must be public -------------------------------------------------------------------
#
# Heavy hitters over candidates report the candidates whose estimate clears the threshold, so the
# *list of candidates* is part of what is published. Candidates read from the sketched data turn
# "is this item in the data" into an event of unbounded privacy loss (an item held by one unit is a
# candidate with it and absent without it, whatever the noise). The checks below refuse the cases
# that can be recognised: a path or table that is (or holds, or lies inside) the release's own
# input, and a candidate DataFrame that reads the sketched DataFrame's files or is derived from it.
# A list of items cannot be traced; it is the caller's responsibility (docs/sketch.md).

def normalize_location(path: str) -> str:
    """A comparable form of a path or URI (local paths and ``file:`` URIs → their realpath)."""
    return storage.normalize(path)


_inside = storage.inside  # ``a`` is ``b`` or lies under it (both normalised)


def locations_overlap(a: str, b: str) -> bool:
    """Two normalised locations are the same, or one lies inside the other (a directory of parts)."""
    return _inside(a, b) or _inside(b, a)


def _table_parts(name: str) -> list[str]:
    parts, cur, quoted = [], "", False
    for ch in name.strip():
        if ch == "`":
            quoted = not quoted
        elif ch == "." and not quoted:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p.lower() for p in parts]


def tables_may_match(a: Sequence[str], b: Sequence[str]) -> bool:
    """Whether table names ``a`` (one table's spellings) and ``b`` (another's) may name the same table.

    Two fully qualified (catalog.db.table) spellings decide it exactly; otherwise
    the shorter name matching the tail of the longer counts as a match (``t``
    may be ``db.t`` under another current database): refusing then is the safe side.
    """
    pa, pb = [_table_parts(x) for x in a], [_table_parts(x) for x in b]
    full_a, full_b = [x for x in pa if len(x) >= 3], [x for x in pb if len(x) >= 3]
    if full_a and full_b:
        return any(x == y for x in full_a for y in full_b)
    return any(x[-min(len(x), len(y)):] == y[-min(len(x), len(y)):] for x in pa for y in pb)


def release_source(manifest: dict) -> dict | None:
    """The manifest's optional ``source`` ({'paths': [...], 'tables': [...]}); None when not recorded."""
    src = manifest.get("source")
    return src if isinstance(src, dict) else None


def check_candidates_location(
    location: str, manifest: dict, *, param: str = "candidates", table: bool = False,
    qualified: Sequence[str] = (),
) -> None:
    """Refuses candidates read from the release's own input (path, directory of parts, or table).

    Args:
        location: the candidates' path / URI, or with ``table`` their table name.
        manifest: the release's manifest (its ``source`` field; a manifest
            without one cannot be checked and passes).
        param: the parameter named in the error.
        qualified: further spellings of the candidate table (e.g. catalog.db.table).

    Raises:
        ConfigError: the candidates are (or lie inside, or contain) the sketched data.
    """
    src = release_source(manifest)
    if src is None:
        return
    if table:
        tables = [str(t) for t in src.get("tables") or []]
        if tables and tables_may_match([location, *qualified], tables):
            raise ConfigError(
                f"The {param!r} table {location!r} is the release's own input table ({tables[0]!r}): "
                "candidates must be public, never read from the sketched data.")
        return
    here = normalize_location(location)
    for p in src.get("paths") or []:
        if locations_overlap(here, normalize_location(str(p))):
            raise ConfigError(
                f"The {param!r} path {location!r} is the release's own input {p!r} (or lies inside it or holds "
                "it): candidates must be public, never read from the sketched data.")


def check_candidate_files(files: Sequence[str], manifest: dict, *, param: str = "candidates") -> None:
    """Refuses a candidate dataset any of whose files lie in the release's recorded input paths."""
    src = release_source(manifest)
    if src is None or not src.get("paths"):
        return
    roots = [normalize_location(str(p)) for p in src["paths"]]
    for f in files:
        nf = normalize_location(f)
        if any(_inside(nf, r) for r in roots):
            raise ConfigError(f"The {param!r} dataset reads {f!r}, a file of the release's own input: "
                              "candidates must be public, never read from the sketched data.")


def _connect_ancestors(plan: Any) -> set[int]:
    """ids of a Spark Connect client plan and of all the plans under it (pure Python, no RPC)."""
    seen, stack = set(), [plan]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        for v in vars(node).values():
            for c in v if isinstance(v, list | tuple) else (v,):
                if type(c).__module__ == "pyspark.sql.connect.plan":
                    stack.append(c)
    return seen


def check_candidates_frame(candidates: DataFrame, df: DataFrame, *, param: str = "candidates",
                           owner: str = "count_sketch") -> None:
    """Refuses a candidate DataFrame that is the sketched DataFrame, reads its files, or is derived from it.

    Checks (no Spark job; ``inputFiles`` lists files, works on classic Spark and
    Spark Connect): the same object; the same plan (``sameSemantics``); a
    shared input file (after resolving ``file:`` URIs and symlinks); and
    whether ``candidates`` is built on ``df`` on Spark Connect (``df``'s
    client plan inside the candidates', pure Python). On classic Spark a frame
    derived from an in-memory (file-less) sketched frame cannot be recognised
    without the JVM, which library code does not touch; frames over files are
    caught by their input files on both. A candidate frame built from a copy
    of the private rows cannot be recognised either: candidates must be public.

    Raises:
        ConfigError: naming ``param``.
    """
    def refuse(why: str) -> ConfigError:
        return ConfigError(f"The {param!r} parameter of {owner} {why}: candidates must be public, never "
                           "derived from the sketched data.")

    if candidates is df:
        raise refuse("is the sketched DataFrame itself")
    files_c = {normalize_location(f) for f in candidates.inputFiles()}
    files_d = {normalize_location(f) for f in df.inputFiles()}
    shared = sorted(files_c & files_d)
    if shared:
        raise refuse(f"reads the sketched DataFrame's input ({shared[0]!r})")
    try:
        same = candidates.sameSemantics(df)
    except Exception:  # noqa: BLE001 - a best-effort extra check; the schemas may simply differ
        same = False
    if same:
        raise refuse("has the sketched DataFrame's plan")
    derived = False
    try:
        if type(df).__module__.startswith("pyspark.sql.connect"):
            derived = id(df._plan) in _connect_ancestors(candidates._plan)
    except Exception:  # noqa: BLE001 - private plan APIs changed: fall back to the checks above
        derived = False
    if derived:
        raise refuse("is derived from the sketched DataFrame")
