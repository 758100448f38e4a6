"""A property-based search for neighbouring datasets that break a release's stated sensitivity.

Every entry of every mechanism registry (second moment / regression / PCA,
sketches, tensors) is run through the public API on a base dataset D and a
neighbour D′ that hypothesis draws from a grammar of adversarial edits
(:func:`pairs`): add, remove or replace a whole unit; rows with NaN, ±inf and
nulls; a replacing unit whose rows all vanish under the ``nonfinite`` policy;
the null unit; rows at and far above the norm bound and the bounds;
duplicated rows (consecutive copies land in different Parquet files); units
with more than m rows; the empty dataset; ``nonfinite`` drop or zero (and a
sketch's null items counted or dropped). Both relations, m ∈ {1, 3} (m = 1
also at row level), both input paths (an in-memory frame through Spark's
reader, and two Parquet files read by the tasks with ``source_paths``).

What is checked (tests/_neighbours.py has the coupling): each value the
release hands the noise sampler moves by at most the Δ the manifest states,
in the noise's norm (L2 Gaussian, L1 Laplace); the exponential mechanism's
scores (``norm_bound``/``bounds`` ``"auto"``) move by at most their stated
L∞ score sensitivity; for Wishart, inverse Wishart and JL ridge, whose
proofs are not an additive-noise sensitivity, the exact Gram matrix changes
by at most m clipped rows of norm ≤ B (added or removed; both under
``replace``), which is what Sheffet's theorems assume — with
``projection="rows"``, the Gram of the rows the projection R·A read,
recovered from R·A; whitened tensor rows: M2's stated Δ, then the passes'
Δ = f·m·√L·B_y³ evaluated on the released M2. Parameter variants searched
besides the registry entries: ``jl_ridge`` with ``projection="rows"``,
tensor rows with ``whiten=True`` in both modes, and every PCA entry with
``standardize="mean"`` (the private mean's Gaussian, then the Gram of the
rows centred at it, checked at the centred rows' bound B_c computed from the
replayed mean; :func:`expected_parameters`).

Profiles: ``SPARK_DP_SEARCH_PROFILE=fast`` (default, ``make test``): the seed
examples (one per family variant) and a few derandomised draws;
``audit`` (``make audit``): many more draws. Aggregates are computed once per
dataset per distinct argument set (the same library function, same input,
same fixed selection secret) and shared by the mechanisms that ask for them.
"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from tests._neighbours import (
    BOUNDS,
    COLUMNS,
    DELTA,
    EPS,
    INF,
    LABEL,
    NAN,
    B,
    Call,
    Coupled,
    Dataset,
    Pair,
    Runner,
    check_legal,
    draw_violations,
    gram_violations,
    run_pair,
)

# -- profiles ----------------------------------------------------------------------------------------------------
# No shrink phase: a failing pair is printed whole (it is small) and a Spark example costs seconds.
_COMMON = dict(derandomize=True, deadline=None, database=None, print_blob=True,
               phases=[Phase.explicit, Phase.reuse, Phase.generate],
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                      HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much])
settings.register_profile("neighbour-search-fast", max_examples=2, **_COMMON)
settings.register_profile("neighbour-search-audit", max_examples=60, **_COMMON)
PROFILE = os.environ.get("SPARK_DP_SEARCH_PROFILE", "fast")
if PROFILE not in ("fast", "audit"):
    raise ValueError(f"SPARK_DP_SEARCH_PROFILE must be 'fast' or 'audit', got {PROFILE!r}")
SEARCH = settings.get_profile(f"neighbour-search-{PROFILE}")
#: examples per family in the audit profile (the fast one draws SEARCH.max_examples)
AUDIT_EXAMPLES = {"second_moment": 30, "sketch": 24, "tensor_rows": 10, "tensor_explicit": 100}


def _settings(family: str):
    n = AUDIT_EXAMPLES[family] if PROFILE == "audit" else SEARCH.max_examples
    return settings(SEARCH, max_examples=n)


# -- the cases: every registry entry × variant ----------------------------------------------------------------
def _second_moment_calls(variant: str, neighbors: str, m: int, unit: str | None) -> list[Call]:
    from spark_dp.second_moment.api import MECHANISMS

    calls = []
    for name, spec in MECHANISMS.items():
        if m > 1 and not spec.units:
            continue  # refused (ConfigError): its proof is for one row per unit
        task = {"pca": "pca", "pca_mean": "pca", "intercept": "linear_regression"}.get(variant)
        if task is None:
            task = "second_moment" if "second_moment" in spec.tasks else "linear_regression"
        if task not in spec.tasks:
            continue
        kw = dict(columns=COLUMNS, epsilon=EPS, delta=DELTA, mechanism=name, neighbors=neighbors,
                  max_rows_per_unit=m, privacy_unit=unit, norm_bound=B)
        if task == "linear_regression":  # adassp maps bounds back through the intercept: it needs one
            kw.update(label=LABEL, fit_intercept=variant in ("intercept", "bounds", "bounds_auto"))
        if task == "pca":
            kw.update(k=1)
        if variant == "clipping_report":
            kw.update(clipping_report=True)
        elif variant == "norm_bound_auto":
            kw.update(norm_bound="auto")
        elif variant == "bounds_auto":
            kw.update(bounds="auto", norm_bound=None)
        elif variant == "bounds":  # given bounds, clamped values counted by the clipping report
            cols = COLUMNS + ([LABEL] if task == "linear_regression" else [])
            kw.update(bounds={c: BOUNDS[c] for c in cols}, norm_bound=None, clipping_report=True)
        elif variant == "intercept":
            kw.update(clipping_report=True)
        elif variant == "pca_mean":  # centred at a private mean: its Gaussian, then the centred matrix at B_c
            kw.update(bounds={c: BOUNDS[c] for c in COLUMNS}, norm_bound=None, standardize="mean")
        elif variant == "rows_projection":  # JL drawn per data row on the executors (not from the exact Gram)
            if "projection" not in spec.params:
                continue
            kw.update(projection="rows")
        calls.append(Call(f"{task}/{name}+{variant}", task, kw, gram=True))
    return calls


def _sketch_calls(variant: str, neighbors: str, m: int, unit: str | None) -> list[Call]:
    from spark_dp.sketch.mechanisms import REGISTRY

    calls = []
    for name, spec in REGISTRY.items():
        kw = dict(columns="item", epsilon=EPS, delta=DELTA, mechanism=name, neighbors=neighbors,
                  max_rows_per_unit=m, privacy_unit=unit, repetitions=3, buckets=8)
        if not spec.hashed:
            kw.pop("repetitions"), kw.pop("buckets")
            kw.update(domain=["a", "b", "c", "d"])
        if variant == "weighted":
            kw.update(weight="w", bounds={"w": (-2.0, 3.0)})
        elif variant == "sketch_l2":
            if not spec.unit_l2_clipping or unit is None:
                continue  # per-unit clipping needs a unit column
            kw.update(unit_clipping="sketch_l2", weight="w")
        elif variant == "dyadic":
            if not spec.dyadic:
                continue
            kw.update(levels=4, hash_items=True)
        calls.append(Call(f"count_sketch/{name}+{variant}", "count_sketch", kw))
    return calls


def _tensor_rows_calls(variant: str, neighbors: str, m: int, unit: str | None) -> list[Call]:
    from spark_dp.tensor.mechanisms import REGISTRY

    calls = []
    whiten, mode = variant.startswith("whiten-"), variant.removeprefix("whiten-")
    for name, spec in REGISTRY.items():
        if spec.rows is None or spec.rows.plan is None:
            continue  # explicit tensors only, or not private (nothing charged: no neighbour to search)
        if whiten and spec.rows.run_whitened is None:
            continue  # no whitened variant
        if mode == "fresh" and m > 1:
            continue  # refused: a unit's rows could reach several passes
        kw = dict(columns=COLUMNS, k=1, epsilon=EPS, delta=DELTA, mechanism=name, norm_bound=B, mode=mode,
                  neighbors=neighbors, max_rows_per_unit=m, privacy_unit=unit, restarts=2, iterations=2)
        if whiten:  # the private second moment M2 first, then the passes on the rows whitened by it
            kw.update(whiten=True)
        calls.append(Call(f"tensor_decomposition/{name}+rows-{variant}", "tensor_decomposition", kw))
    return calls


VARIANTS = {
    "second_moment": ("plain", "clipping_report", "norm_bound_auto", "bounds_auto", "bounds", "intercept", "pca",
                      "rows_projection", "pca_mean"),
    "sketch": ("unweighted", "weighted", "sketch_l2", "dyadic"),
    "tensor_rows": ("reuse", "fresh", "whiten-reuse", "whiten-fresh"),
}
CALLS = {"second_moment": _second_moment_calls, "sketch": _sketch_calls, "tensor_rows": _tensor_rows_calls}
RELATIONS = ("replace", "add_remove")
MS = (1, 3)


def search_cases() -> set[tuple[str, str]]:
    """(family, registry entry) pairs the search runs, over every variant × relation × m × unit level."""
    out = set()
    for family, variants in VARIANTS.items():
        for v in variants:
            for rel in RELATIONS:
                for m in MS:
                    for unit in ("uid", None) if m == 1 else ("uid",):
                        for call in CALLS[family](v, rel, m, unit):
                            out.add((family, call.kwargs["mechanism"]))
    for name in _explicit_mechanisms():
        out.add(("tensor_explicit", name))
    return out


def _parameters(family: str, call: Call) -> set[tuple[str, str, str]]:
    """The parameter variants a call runs that take a different privacy path: JL per data row, whitened rows."""
    kw, out = call.kwargs, set()
    if kw.get("projection") == "rows":
        out.add((family, kw["mechanism"], "projection=rows"))
    if kw.get("whiten"):
        out.add((family, kw["mechanism"], f"whiten+{kw['mode']}"))
    if kw.get("standardize") == "mean":
        out.add((family, kw["mechanism"], "standardize=mean"))
    return out


def searched_parameters() -> set[tuple[str, str, str]]:
    """(family, registry entry, parameter variant) the search runs (:func:`_parameters`)."""
    return {p for family, variants in VARIANTS.items() for v in variants for rel in RELATIONS for m in MS
            for unit in (("uid", None) if m == 1 else ("uid",)) for c in CALLS[family](v, rel, m, unit)
            for p in _parameters(family, c)}


def expected_parameters() -> set[tuple[str, str, str]]:
    """The parameter variants the registries offer: every second-moment entry with a ``projection`` parameter
    (its ``rows`` projection), every private tensor-rows entry with a whitened variant (both modes)."""
    from spark_dp.second_moment.api import MECHANISMS as SM
    from spark_dp.tensor.mechanisms import REGISTRY as TE

    out = {("second_moment", n, "projection=rows") for n, s in SM.items() if "projection" in s.params}
    out |= {("second_moment", n, "standardize=mean") for n, s in SM.items() if "pca" in s.tasks}
    out |= {("tensor_rows", n, f"whiten+{mode}") for n, s in TE.items()
            if s.rows is not None and s.rows.plan is not None and s.rows.run_whitened is not None
            for mode in ("reuse", "fresh")}
    return out


def _explicit_mechanisms() -> list[str]:
    from spark_dp.tensor.mechanisms import REGISTRY

    return [n for n, s in REGISTRY.items() if s.explicit is not None and s.explicit.plan is not None]


def test_every_registry_entry_is_searched():
    """A registry entry the search does not run fails here (enumerated from the registries at test time)."""
    from spark_dp.second_moment.api import MECHANISMS as SM
    from spark_dp.sketch.mechanisms import REGISTRY as SK
    from spark_dp.tensor.mechanisms import REGISTRY as TE

    cases = search_cases()
    expected = {("second_moment", n) for n in SM} | {("sketch", n) for n in SK}
    expected |= {("tensor_rows", n) for n, s in TE.items() if s.rows is not None and s.rows.plan is not None}
    expected |= {("tensor_explicit", n) for n, s in TE.items() if s.explicit is not None and s.explicit.plan is not None}
    assert expected <= cases, f"registry entries the neighbour search does not run: {sorted(expected - cases)}"
    # every second-moment task a mechanism offers is run by some variant
    tasks = {(c.method, c.kwargs["mechanism"]) for v in VARIANTS["second_moment"] for rel in RELATIONS
             for c in _second_moment_calls(v, rel, 1, "uid")}
    assert {(t, n) for n, s in SM.items() for t in s.tasks} <= tasks
    # the parameter variants that change the privacy path: JL per data row, whitened tensor rows
    expected = expected_parameters()
    assert {("second_moment", "jl_ridge", "projection=rows")} <= expected and any(
        e[0] == "tensor_rows" for e in expected), f"the registries no longer offer these variants: {expected}"
    assert expected <= searched_parameters(), \
        f"parameter variants the neighbour search does not run: {sorted(expected - searched_parameters())}"
    # the not-private entries have nothing to search: say which they are, so a new private one cannot hide there
    assert {n for n, s in TE.items() if not s.private} == {"power_method", "online_power_method"}


# -- the grammar -----------------------------------------------------------------------------------------------
# Values: the adversarial ones first (hypothesis shrinks towards the first), then any float in a small range.
SPECIAL = [1e3, NAN, INF, -INF, None, 1.0, -1.0, 0.0, 0.6, 0.8, 2.0, -2.0, 3.0, 1e6, -1e6]
values = st.one_of(st.sampled_from(SPECIAL), st.floats(-3, 3, allow_nan=False))
items = st.sampled_from(["a", "b", "c", "d", None, "zz"])
CLIPPED = (1e3, 1e3, 1e3, "a", 1e3)  # far above B, the bounds and the weight bounds
VANISHING = (NAN, NAN, NAN, "a", NAN)  # dropped by nonfinite="drop" (and a null-ish weight)
ROWS = [CLIPPED, VANISHING, (0.6, 0.8, 0.0, "b", 1.0),  # at the norm bound
        (1.0, -2.0, 1.0, "c", 3.0),  # at the bounds
        (None, 0.5, 0.1, None, None), (INF, 0.0, -INF, "a", INF), (0.1, -0.2, 0.3, "d", -2.0)]
rows = st.one_of(st.sampled_from(ROWS), st.tuples(values, values, values, items, values))


def unit_rows(m: int):
    """1 … m + 2 rows, sometimes with copies of its own rows (duplicates)."""
    base = st.lists(rows, min_size=1, max_size=m + 2)
    return base.flatmap(lambda rs: st.lists(st.sampled_from(rs), max_size=2).map(lambda extra: tuple(rs + extra)))


def vanishing_unit(m: int):
    """A unit whose rows all vanish under nonfinite='drop' (each has a NaN, ±inf or null value)."""
    bad = st.tuples(st.sampled_from([NAN, INF, -INF, None]), values, values, items, st.sampled_from([NAN, None]))
    return st.lists(bad, min_size=1, max_size=m + 1).map(tuple)


KEYS = [0, 1, None, 2, 3]


@st.composite
def pairs(draw, family: str) -> Pair:
    """A dataset and a legal neighbour of it (module doc)."""
    variant = draw(st.sampled_from(VARIANTS.get(family, ("explicit",))))
    neighbors = draw(st.sampled_from(RELATIONS))
    m = draw(st.sampled_from(MS))
    if not CALLS.get(family, lambda *a: [None])(variant, neighbors, m, "uid"):
        m = 1  # the variant takes one row per unit only (tensor rows in fresh mode)
    unit = "uid" if m > 1 else draw(st.sampled_from(["uid", None]))
    if unit is None and not CALLS.get(family, lambda *a: [None])(variant, neighbors, m, None):
        unit = "uid"  # the variant needs a unit column (a sketch's per-unit clipping)
    path = draw(st.sampled_from(["spark", "parquet"]))
    only = None
    if PROFILE == "fast":  # one registry entry per example (the audit profile runs them all on every pair)
        names = [c.kwargs["mechanism"] for c in CALLS[family](variant, neighbors, m, unit)]
        only = draw(st.sampled_from(names))
    if unit is None:  # row level: every row is a unit
        raw = draw(st.lists(rows, max_size=6))
        units = [(i, (r,)) for i, r in enumerate(raw)]
    else:
        units_ = {}
        for key, rs in draw(st.lists(st.tuples(st.sampled_from(KEYS), unit_rows(m)), max_size=4)):
            units_[key] = units_.get(key, ()) + rs
        units = list(units_.items())
    if neighbors == "replace" and not units:  # replace needs a unit to replace
        units = [(0, draw(unit_rows(m)) if unit else (draw(rows),))]
    base = Dataset(tuple(units))
    op = "replace" if neighbors == "replace" else draw(st.sampled_from(["remove", "add"]))
    if op == "remove" and not units:
        op = "add"
    if op == "remove":
        i = draw(st.integers(0, len(units) - 1))
        other, edit = units[:i] + units[i + 1:], f"remove unit {units[i][0]!r}"
    elif op == "add":
        new = [k for k in KEYS if k not in dict(units)] if unit else [len(units)]
        key = draw(st.sampled_from(new))
        rs = (draw(rows),) if unit is None else draw(st.one_of(unit_rows(m), vanishing_unit(m)))
        other, edit = units + [(key, rs)], f"add unit {key!r}"
    else:
        i = draw(st.integers(0, len(units) - 1))
        rs = (draw(rows),) if unit is None else draw(st.one_of(vanishing_unit(m), unit_rows(m)))
        other, edit = units[:i] + [(units[i][0], rs)] + units[i + 1:], f"replace unit {units[i][0]!r}"
    nonfinite = draw(st.sampled_from(["drop", "zero"]))
    nulls = draw(st.sampled_from(["item", "drop"])) if family == "sketch" else "item"
    return Pair(family, variant, neighbors, m, unit, path, base, Dataset(tuple(other)), edit, only, nonfinite, nulls)


def _check(runner: Runner, pair: Pair, *, pinned: bool = False) -> None:
    check_legal(pair)
    calls = [c for c in CALLS[pair.family](pair.variant, pair.neighbors, pair.m, pair.unit)
             if pair.only in (None, c.kwargs["mechanism"])]
    assert calls, f"no registry entry runs {pair!r}"
    t0 = time.time()
    found, passes = run_pair(runner, pair, calls)
    STATS.append((pair.family, pair.variant, pair.neighbors, pair.m, pair.unit, pair.path, len(calls), passes,
                  time.time() - t0))
    if PROFILE == "audit" and not pinned and found:  # keep searching; the test fails at the end (_searched)
        FINDINGS.append(f"{pair!r}\n" + "\n".join(found))
        return
    assert not found, "neighbour search: stated sensitivity exceeded\n" + "\n".join(found) + f"\n{pair!r}"


STATS: list[tuple] = []  # one row per example run (the report's coverage matrix)
FINDINGS: list[str] = []  # audit profile: every violating pair (the run goes on to find more)


def _searched(search, runner) -> None:
    """Runs a hypothesis search; in the audit profile, fails at the end if any example broke a sensitivity."""
    before = len(FINDINGS)
    search(runner=runner)
    found = FINDINGS[before:]
    assert not found, f"neighbour search: {len(found)} violating pair(s)\n" + "\n\n".join(found)


@pytest.fixture(scope="module")
def runner(spark, tmp_path_factory):
    return Runner(spark, str(tmp_path_factory.mktemp("neighbour-search")))


def _seed(family: str, variant: str, neighbors: str, m: int, unit, path: str, only: str | None = None) -> Pair:
    """The seed example of a variant: a unit of clipped rows replaced (or removed) by one whose rows vanish,
    next to a unit over m rows, a duplicated row, a null unit and a row at the bound."""
    clipped = (0, (CLIPPED,) * m)
    over = (1, ((0.6, 0.8, 0.0, "b", 1.0),) * (m + 1) + ((0.1, -0.2, 0.3, "d", -2.0),))
    null = (None, ((None, 0.5, 0.1, None, None), (1.0, -2.0, 1.0, "c", 3.0)))
    if unit is None:
        base = ((0, (CLIPPED,)), (1, ((0.6, 0.8, 0.0, "b", 1.0),)), (2, ((0.6, 0.8, 0.0, "b", 1.0),)))
        other = ((0, (VANISHING,)),) + base[1:] if neighbors == "replace" else base[1:]
    else:
        base = (clipped, over, null)
        other = ((0, (VANISHING,) * m),) + base[1:] if neighbors == "replace" else base[1:]
    return Pair(family, variant, neighbors, m, unit, path, Dataset(base), Dataset(other),
                "replace the clipped unit by a vanishing one" if neighbors == "replace" else "remove the clipped unit",
                only)


def _seeds(family: str) -> list[Pair]:
    """One seed per variant; relations, m, input paths and (fast profile) registry entries rotate over them.

    Fast profile: the seeds together run every registry entry of the family
    (a rotation over the entries each variant takes, checked below).
    """
    out, ran = [], []
    takers = {}  # entry -> how many variants take it (the rarest unrun entry goes first)
    for v in VARIANTS[family]:
        for n in {c.kwargs["mechanism"] for c in CALLS[family](v, "add_remove", 1, "uid")}:
            takers[n] = takers.get(n, 0) + 1
    for i, v in enumerate(VARIANTS[family]):
        rel = RELATIONS[i % 2]
        m = MS[(i // 2) % 2] if not (family == "tensor_rows" and v.endswith("fresh")) else 1
        path = ("parquet", "spark")[(i // 3) % 2] if family != "tensor_rows" else ("spark", "parquet")[i % 2]
        names = [c.kwargs["mechanism"] for c in CALLS[family](v, rel, m, "uid")]
        at_one = [c.kwargs["mechanism"] for c in CALLS[family](v, rel, 1, "uid")]
        if not names or (not [n for n in names if n not in ran] and [n for n in at_one if n not in ran]):
            m, names = 1, at_one  # an entry not run yet (or a variant: JL per data row) that takes one row per unit
        fresh = sorted((n for n in names if n not in ran), key=lambda n: takers[n])
        only = (fresh or names)[0] if fresh else names[i % len(names)]
        ran.append(only)
        out.append(_seed(family, v, rel, m, "uid", path, None if PROFILE == "audit" else only))
        if v in EVERY_ENTRY.get(family, ()) and PROFILE != "audit":
            # every entry on one pair (their Spark passes are shared), at row level; then the other relation at m = 3
            out[-1] = _seed(family, v, rel, 1, None, path, None)
            out.append(_seed(family, v, RELATIONS[(i + 1) % 2], MS[-1], "uid", ("spark", "parquet")[i % 2], None))
    return out


#: Variants whose seeds run every registry entry in the fast profile (a parameter that changes every entry's
#: privacy path: PCA centred at a private mean), on two pairs: both relations, m = 1 (row level) and m = 3.
EVERY_ENTRY = {"second_moment": ("pca_mean",)}


def test_fast_seeds_run_every_registry_entry():
    """In the fast profile the seeds alone run every registry entry of each family (once at least)."""
    if PROFILE == "audit":
        pytest.skip("the audit profile runs every entry on every pair")
    for family in VARIANTS:
        ran = {n for p in _seeds(family) for n in _seed_entries(p)}
        every = {c.kwargs["mechanism"] for v in VARIANTS[family] for rel in RELATIONS for m in MS
                 for c in CALLS[family](v, rel, m, "uid")}
        assert ran == every, (family, sorted(every - ran))
    # and every parameter variant (JL per data row, whitened tensor rows in both modes)
    seeded = {p for family in VARIANTS for pair in _seeds(family)
              for c in CALLS[family](pair.variant, pair.neighbors, pair.m, pair.unit)
              if pair.only in (None, c.kwargs["mechanism"]) for p in _parameters(family, c)}
    assert expected_parameters() <= seeded, sorted(expected_parameters() - seeded)


def _seed_entries(pair: Pair) -> set[str]:
    """The registry entries a seed runs: its ``only``, or (None) every entry its variant takes at its m."""
    if pair.only is not None:
        return {pair.only}
    return {c.kwargs["mechanism"] for c in CALLS[pair.family](pair.variant, pair.neighbors, pair.m, pair.unit)}


def _with_seeds(family: str):
    def deco(fn):
        for pair in _seeds(family):
            fn = example(pair=pair)(fn)
        return fn
    return deco


# The defect this search found on its first run: the clipping report under replace, a clipped row replaced by an
# all-NaN row (dropped by nonfinite="drop") moves (clipped, rows) by 2m in L1, where the manifest stated 2m-1.
DEFECT_CLIPPING_REPLACE = {
    m: Pair("second_moment", "clipping_report", "replace", m, "uid", "spark",
            Dataset(((0, (CLIPPED,) * m), (1, ((0.1, -0.2, 0.3, "d", -2.0),)))),
            Dataset(((0, (VANISHING,) * m), (1, ((0.1, -0.2, 0.3, "d", -2.0),)))),
            "replace the clipped unit by all-NaN rows", "analyze_gauss")
    for m in (1, 2)
}


# -- the searches ------------------------------------------------------------------------------------------------
@_settings("second_moment")
@given(pair=pairs("second_moment"))
@_with_seeds("second_moment")
@example(pair=DEFECT_CLIPPING_REPLACE[1])
@example(pair=DEFECT_CLIPPING_REPLACE[2])
def _second_moment_search(runner, pair):
    _check(runner, pair, pinned=pair in DEFECT_CLIPPING_REPLACE.values())


def test_second_moment_neighbours(runner):
    _searched(_second_moment_search, runner)


@_settings("sketch")
@given(pair=pairs("sketch"))
@_with_seeds("sketch")
def _sketch_search(runner, pair):
    _check(runner, pair)


def test_sketch_neighbours(runner):
    _searched(_sketch_search, runner)


@_settings("tensor_rows")
@given(pair=pairs("tensor_rows"))
@_with_seeds("tensor_rows")
def _tensor_rows_search(runner, pair):
    _check(runner, pair)


def test_tensor_rows_neighbours(runner):
    _searched(_tensor_rows_search, runner)


# -- explicit tensors: tensor_entry neighbours (no Spark) ----------------------------------------------------
def _sym_entry(d: int, i: int, j: int, k: int) -> np.ndarray:
    """symmetrize(eᵢ⊗eⱼ⊗eₖ): the sum over the 6 orderings (each scaled unique entry moves by exactly c)."""
    from itertools import permutations

    E = np.zeros((d, d, d))
    for p in permutations((i, j, k)):
        E[p] += 1.0
    return E


@st.composite
def explicit_pairs(draw):
    d = 3
    entries = draw(st.lists(st.floats(-1, 1), min_size=d**3, max_size=d**3))
    A = np.array(entries).reshape(d, d, d)
    from itertools import permutations

    T = sum(np.transpose(A, p) for p in permutations(range(3))) / 6
    i, j, k = draw(st.tuples(*[st.integers(0, d - 1)] * 3))
    c = draw(st.sampled_from([1.0, 0.5, 3.0]))
    sign = draw(st.sampled_from([1.0, -1.0]))
    name = draw(st.sampled_from(_explicit_mechanisms()))
    return name, c, T, T + sign * c * _sym_entry(d, i, j, k)


@_settings("tensor_explicit")
@given(case=explicit_pairs())
def test_explicit_tensor_neighbours(runner, case):
    name, c, T0, T1 = case
    samplers, manifests = [], []
    for T in (T0, T1):
        sampler = Coupled(seed=3, replay=samplers[0] if samplers else None)
        rel = runner.release("tensor_decomposition", T, sampler, k=1, epsilon=EPS, delta=DELTA, mechanism=name,
                             entry_scale=c, restarts=2, iterations=3, rng=np.random.default_rng(5))
        samplers.append(sampler)
        manifests.append(rel.manifest)
    bad = draw_violations(f"tensor_decomposition/{name}+explicit", samplers[0].draws, samplers[1].draws,
                          (manifests[0], manifests[1]))
    assert samplers[0].draws, "the release drew no noise"
    assert not bad, "\n".join(bad)


def test_search_machinery_catches_an_understated_sensitivity():
    """The check itself: a draw that moves by more than its Δ, or with a Δ the manifest does not state, is caught."""
    from tests._neighbours import Draw

    d0 = [Draw("laplace", np.array([1.0, 19.0]), 20.0, 1.0, None)]
    d1 = [Draw("laplace", np.array([0.0, 18.0]), 20.0, 1.0, None)]
    events = [{"type": "laplace", "noise_multiplier": 20.0}]
    bad = draw_violations("x", d0, d1, ({"privacy": {"l1_sensitivity": 1.0, "events": events}}, {}))
    assert len(bad) == 1 and "moved by 2" in bad[0]
    bad = draw_violations("x", d0, d0, ({"privacy": {"sensitivity": 2.0, "events": events}}, {}))
    assert len(bad) == 1 and "does not state" in bad[0]
    bad = draw_violations("x", d0, d0, ({"privacy": {"sensitivity": 1.0, "events": [{"noise_multiplier": 10.0}]}}, {}))
    assert len(bad) == 1 and "no charged event" in bad[0]
    g = np.diag([1.0, 0.0])
    assert gram_violations("x", g, g + np.diag([0.0, 2.0]), norm_bound=1.0, m=1, neighbors="add_remove")
    assert not gram_violations("x", g, g + np.diag([0.0, 1.0]), norm_bound=1.0, m=1, neighbors="add_remove")
    assert gram_violations("x", g, np.diag([0.0, 1.0]), norm_bound=1.0, m=1, neighbors="add_remove")  # both ways
    assert not gram_violations("x", g, np.diag([0.0, 1.0]), norm_bound=1.0, m=1, neighbors="replace")
    # whitened tensor rows: the second moment's Δ as stated, then the passes' Δ = f·m·√L·B_y³ from the released
    # M2 = diag(4, 1), k = 1: ‖W‖op = 1/2, B_y = 1/2, so at L = 4, m = 1, add/remove Δ = 2/8 = 0.25 (0.5 replace)
    from tests._neighbours import WHITENED_PASSES, whitened_sensitivities

    m2 = Draw("gaussian", np.zeros(3), 2.0, 1.0, np.array([4.0, 0.0, 1.0]))
    privacy = {"sensitivity": {"second_moment": 1.0, "power_passes": WHITENED_PASSES}, "norm_bound": 1.0,
               "neighbors": "add_remove", "max_rows_per_unit": 1, "events": [{"noise_multiplier": 2.0}]}
    manifest = {"privacy": privacy, "dimension": 2, "params": {"k": 1, "restarts": 4}}
    assert whitened_sensitivities(manifest, [m2]) == pytest.approx((1.0, 0.25))
    replace_ = {**manifest, "privacy": {**privacy, "neighbors": "replace"}}
    assert whitened_sensitivities(replace_, [m2]) == pytest.approx((1.0, 0.5))
    ok = [m2, Draw("gaussian", np.array([0.0, 0.0]), 0.5, 0.25, None)]
    assert not draw_violations("x", ok, [m2, Draw("gaussian", np.array([0.2, 0.1]), 0.5, 0.25, None)],
                               (manifest, manifest))
    bad = draw_violations("x", ok, [m2, Draw("gaussian", np.array([0.3, 0.0]), 0.5, 0.25, None)], (manifest, manifest))
    assert len(bad) == 1 and "moved by 0.3" in bad[0]
    for wrong in ([m2, Draw("gaussian", np.zeros(2), 1.0, 0.5, None)],  # a pass Δ the formula does not give
                  [Draw("gaussian", np.zeros(3), 4.0, 2.0, m2.out)] + ok[1:]):  # M2 with a Δ not stated for it
        bad = draw_violations("x", wrong, wrong, (manifest, manifest))
        assert len(bad) == 1 and "the manifest states" in bad[0], bad

def test_jl_projected_gram_is_the_gram_of_the_projected_rows(runner):
    """JL per data row: the Gram the search checks, recovered from R·A, is Σ cᵢ·clip(aᵢ)clip(aᵢ)ᵀ of the rows the
    projection read (a duplicated row counted twice, a NaN row dropped, a row far above B clipped to it)."""
    from spark_dp.aggregates.jl import jl_projection
    from tests._neighbours import jl_projected_gram

    rows = [(0.6, 0.8, 0.0, "b", 1.0, 0), (0.6, 0.8, 0.0, "b", 1.0, 1), (3e2, -4e2, 0.0, "a", 1.0, 2),
            (NAN, 1.0, 0.0, "a", 1.0, 3), (0.1, -0.2, 0.3, "d", -2.0, 4)]
    df = runner.spark.createDataFrame(rows, "x1 double, x2 double, y double, item string, w double, uid long")
    kwargs = dict(r=40, key=12345, norm_bound=B, nonfinite="drop")
    projected = jl_projection(df, COLUMNS, **kwargs)
    a = np.array([[0.6, 0.8], [0.6, 0.8], [0.6, -0.8], [0.1, -0.2]])
    np.testing.assert_allclose(jl_projected_gram((df, COLUMNS), kwargs, projected), a.T @ a, atol=1e-10)
    # R·A with a term that is not one of the rows' columns of R is refused
    with pytest.raises(AssertionError, match="not a combination"):
        jl_projected_gram((df, COLUMNS), kwargs, projected + 1e-3)


@pytest.fixture(scope="module", autouse=True)
def _write_stats():
    """With SPARK_DP_SEARCH_STATS=<file>: one JSON line per example run (coverage matrix, timings)."""
    yield
    path = os.environ.get("SPARK_DP_SEARCH_STATS")
    if path:
        import json

        with open(path, "a") as f:
            for row in STATS:
                f.write(json.dumps(dict(zip(("family", "variant", "neighbors", "m", "unit", "path", "entries",
                                             "spark_passes", "seconds"), row))) + "\n")
