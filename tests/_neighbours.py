"""The neighbour search's machinery: neighbouring datasets, a coupled sampler, and the sensitivity checks.

Used by tests/test_neighbour_search.py. The idea: run a release through the
public API (``DPSession``, the library's own compute path, Spark reader or
direct Parquet) on a dataset D and on a neighbour D′, with a sampler that

* records every draw the release makes: the exact pre-noise values handed to
  ``gaussian``/``laplace`` with the Δ and scale stated for them, and the
  exact scores handed to ``noisy_min_index`` (the exponential mechanism of
  ``norm_bound``/``bounds`` ``"auto"``) with their stated L∞ sensitivity;
* on D′, *replays* D's outputs: the noisy values and the selected indices
  are D's, so every later, adaptively chosen query (the norm bound the
  exponential mechanism picked, the tensor power method's next vectors, the
  bounds) is the same query on both datasets. That is the coupling of the
  adaptive composition proof: each step must have sensitivity ≤ its stated
  Δ *for the same earlier outputs*.

Then each recorded pair must satisfy ‖v′ − v‖ ≤ Δ in the noise's norm (L2
Gaussian, L1 Laplace, L∞ for exponential-mechanism scores), the same public Δ
and scale on both sides, and Δ must be one the manifest states.

Mechanisms whose privacy is not an additive-noise sensitivity (Wishart,
inverse Wishart, JL ridge: Sheffet's proofs) are checked on the quantity
their proofs bound: the exact Gram matrix (captured from the library's Gram
pass; for JL with ``projection="rows"``, recovered exactly from the
projection R·A, :func:`jl_projected_gram`) changes by the outer products of at most m clipped rows, ‖x‖ ≤ B,
added (add/remove: one side only) or replaced (both sides, each of trace
≤ m·B²).

The per-unit row selection is keyed by a per-release secret; the search
fixes it (:func:`fixed_selection_secret`) so that D and D′ select the same
rows of the units they share, as the proof conditions on the secret.
"""

from __future__ import annotations

import contextlib
import math
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from spark_dp.privacy import NoiseSampler

NAN, INF = float("nan"), float("inf")
COLUMNS = ["x1", "x2"]
LABEL = "y"
B = 1.0  # the norm bound the cases state
BOUNDS = {"x1": (-1.0, 1.0), "x2": (-2.0, 2.0), "y": (-1.0, 1.0)}
SCHEMA = "x1 double, x2 double, y double, item string, w double, uid long"
ROW_FIELDS = ("x1", "x2", "y", "item", "w")
EPS, DELTA = 1.0, 1e-6
TOL = 1e-7  # relative slack for float sums


# -- datasets --------------------------------------------------------------------------------------------------
Row = tuple  # (x1, x2, y, item, w): floats may be NaN/±inf/None, item a string or None


@dataclass(frozen=True)
class Dataset:
    """Units of rows; ``units[i] = (key, rows)``, key an int or None (the null unit). Row level: key unused."""

    units: tuple[tuple[int | None, tuple[Row, ...]], ...]

    def rows(self) -> list[tuple]:
        """The rows with their unit key appended (the ``uid`` column)."""
        return [(*r, key) for key, rows in self.units for r in rows]

    def __len__(self) -> int:
        return sum(len(rows) for _, rows in self.units)


@dataclass(frozen=True)
class Pair:
    """A base dataset, a legal neighbour of it under (``neighbors``, m) and how to run them.

    ``unit``: the privacy-unit column (``"uid"``), or None for row-level
    privacy (every row its own unit; then m = 1). ``path``: ``spark`` (a
    DataFrame built in memory, the Spark reader path) or ``parquet`` (the
    rows written to two Parquet files, consecutive rows alternating between
    them, and ``source_paths`` given as the job does: the direct path).
    """

    family: str
    variant: str
    neighbors: str
    m: int
    unit: str | None
    path: str
    base: Dataset
    other: Dataset
    edit: str
    only: str | None = None  # run only this registry entry (None: every entry the variant takes)
    nonfinite: str = "drop"  # the nonfinite policy every release of the pair is run with
    nulls: str = "item"  # sketches: a null item counted as an item, or dropped

    def __repr__(self) -> str:  # what hypothesis prints for a failing example: enough to rebuild it
        return (f"Pair(family={self.family!r}, variant={self.variant!r}, neighbors={self.neighbors!r}, m={self.m}, "
                f"unit={self.unit!r}, path={self.path!r}, only={self.only!r}, nonfinite={self.nonfinite!r}, "
                f"nulls={self.nulls!r}, edit={self.edit!r},\n  base={self.base!r},\n"
                f"  other={self.other!r})")


def check_legal(pair: Pair) -> None:
    """Asserts that ``pair.other`` is a neighbour of ``pair.base`` under the pair's relation (a harness self-check)."""
    a = {k: sorted(map(repr, rows)) for k, rows in pair.base.units}
    b = {k: sorted(map(repr, rows)) for k, rows in pair.other.units}
    if pair.unit is None:  # row level: the multisets of rows differ by one row (add/remove) or one swap (replace)
        ra = sorted(repr(r) for _, rows in pair.base.units for r in rows)
        rb = sorted(repr(r) for _, rows in pair.other.units for r in rows)
        only_a, only_b = _multiset_minus(ra, rb), _multiset_minus(rb, ra)
        if pair.neighbors == "add_remove":
            assert len(only_a) + len(only_b) == 1, (only_a, only_b)
        else:
            assert len(only_a) == len(only_b) == 1 or (not only_a and not only_b), (only_a, only_b)
        return
    changed = {k for k in set(a) | set(b) if a.get(k) != b.get(k)}
    assert len(changed) <= 1, changed
    if pair.neighbors == "replace":
        assert set(a) == set(b), "replace keeps the set of units"
        for k in changed:
            assert b[k], "a replacing unit has at least one row"


def _multiset_minus(a: list, b: list) -> list:
    out, rest = [], list(b)
    for x in a:
        if x in rest:
            rest.remove(x)
        else:
            out.append(x)
    return out


# -- the coupled sampler --------------------------------------------------------------------------------------
@dataclass
class Draw:
    """One use of the sampler: kind, the exact input, the public scale and Δ, and what was returned."""

    kind: str  # gaussian | laplace | noisy_min
    values: np.ndarray
    scale: float
    sensitivity: float
    out: Any


class Coupled(NoiseSampler):
    """Records every draw; with ``replay`` (the D run's sampler), returns D's outputs in D′'s run (module doc).

    ``standard_normal`` and ``key`` come from their own seeded generator, the
    same on both runs (Wishart's Gaussians, a sketch's hash seeds, JL's key).
    Not private: a test instrument.
    """

    name = "coupled-test"
    private = False

    def __init__(self, seed: int = 0, replay: Coupled | None = None):
        self.noise_rng = np.random.default_rng(seed)
        self.public_rng = np.random.default_rng(seed + 1)
        self.replay = replay
        self.draws: list[Draw] = []

    def _replayed(self, kind: str, values: np.ndarray) -> Any:
        i = len(self.draws)
        if self.replay is None:
            return None
        ref = self.replay.draws[i] if i < len(self.replay.draws) else None
        if ref is None or ref.kind != kind or np.shape(ref.values) != np.shape(values):
            raise AssertionError(f"draw {i}: the neighbour's release drew {kind} of shape {np.shape(values)}, the "
                                 f"base's {None if ref is None else (ref.kind, np.shape(ref.values))}: the sequence of "
                                 "draws depends on the data")
        return ref.out

    def _additive(self, kind: str, values, scale: float, sens: float) -> np.ndarray:
        values = np.ascontiguousarray(values, dtype=np.float64).reshape(-1)
        if not (scale > 0 and math.isfinite(scale)):
            raise ValueError(f"scale must be positive and finite, got {scale}")
        if not np.isfinite(values).all():
            raise AssertionError(f"{kind}: non-finite exact values reached the sampler (data content must never)")
        out = self._replayed(kind, values)
        if out is None:
            noise = (self.noise_rng.normal(0.0, scale, values.size) if kind == "gaussian"
                     else self.noise_rng.laplace(0.0, scale, values.size))
            out = values + noise
        self.draws.append(Draw(kind, values.copy(), float(scale), float(sens), np.array(out, copy=True)))
        return np.array(out, copy=True)

    def gaussian(self, values, sigma, l2_sensitivity):
        return self._additive("gaussian", values, sigma, l2_sensitivity)

    def laplace(self, values, scale, l1_sensitivity):
        return self._additive("laplace", values, scale, l1_sensitivity)

    def noisy_min_index(self, scores, scale, sensitivity):
        scores = np.ascontiguousarray(scores, dtype=np.float64).reshape(-1)
        out = self._replayed("noisy_min", scores)
        if out is None:
            out = self._noisy_min(self.noise_rng, scores, scale)
        self.draws.append(Draw("noisy_min", scores.copy(), float(scale), float(sensitivity), int(out)))
        return int(out)

    def standard_normal(self, size):
        return self.public_rng.standard_normal(size)

    def key(self):
        return int(self.public_rng.integers(0, 2**63)) << 64 | int(self.public_rng.integers(0, 2**63))


# -- the checks -----------------------------------------------------------------------------------------------
_NORMS = {"gaussian": ("L2", 2), "laplace": ("L1", 1), "noisy_min": ("Linf", np.inf)}


def stated_sensitivities(manifest: Any) -> list[float]:
    """Every number the manifest states under a key containing ``sensitivity`` (any depth)."""
    out: list[float] = []
    if isinstance(manifest, dict):
        for k, v in manifest.items():
            numbers = v if isinstance(v, list) else [v]
            if "sensitivity" in str(k) and numbers and all(
                    isinstance(x, int | float) and not isinstance(x, bool) for x in numbers):
                out.extend(float(x) for x in numbers)
            else:
                out.extend(stated_sensitivities(v))
    elif isinstance(manifest, list):
        for v in manifest:
            out.extend(stated_sensitivities(v))
    return out


def event_multipliers(manifest: dict) -> list[float]:
    """The noise multipliers (σ/Δ, b/Δ) of the events the manifest says were charged."""
    events = (manifest.get("privacy") or {}).get("events") or []
    return [float(e["noise_multiplier"]) for e in events if "noise_multiplier" in e]


#: How the manifest of a whitened tensor release states its power passes' Δ (evaluated by the next function).
WHITENED_PASSES = "f*m*sqrt(L)*B_y^3 per unit (f = 1 add/remove, 2 replace; m rows per unit), B_y = ||W||_op * B"


def whitened_sensitivities(manifest: dict, draws: list[Draw]) -> tuple[float, float] | None:
    """(Δ of the second moment M2, Δ of each power pass) as a whitened tensor release's manifest states them.

    The second moment's is a number (``sensitivity.second_moment``); the
    passes' is a formula, evaluated here on the coupled run: Δ = f·m·√L·B_y³
    with B_y = ‖W‖op·B and W the whitening of the *released* M2 (the
    release's first draw: its upper triangle, replayed on D′, so the same W on
    both sides); f, m, L and B are the manifest's own (relation,
    ``max_rows_per_unit``, ``restarts``, ``norm_bound``). None: not a
    whitened release. A manifest stating another formula raises (the check
    would no longer be the one it states).
    """
    from spark_dp.tensor.whiten import whitening

    privacy = manifest.get("privacy") or {}
    sens = privacy.get("sensitivity")
    if not (isinstance(sens, dict) and "power_passes" in sens):
        return None
    if not str(sens["power_passes"]).startswith(WHITENED_PASSES):
        raise AssertionError(f"the manifest states the whitened passes' sensitivity as {sens['power_passes']!r}, "
                             f"not {WHITENED_PASSES!r}: update the search's evaluation of it")
    d, k = int(manifest["dimension"]), int(manifest["params"]["k"])
    if not draws or draws[0].kind != "gaussian" or draws[0].values.size != d * (d + 1) // 2:
        raise AssertionError("a whitened release's first draw is not the second moment's upper triangle")
    iu = np.triu_indices(d)
    M2 = np.zeros((d, d))
    M2[iu] = np.asarray(draws[0].out, dtype=float)
    M2 = M2 + np.triu(M2, 1).T
    B_y = float(np.linalg.norm(whitening(M2, k)[0], 2)) * float(privacy["norm_bound"])
    f = 2.0 if privacy["neighbors"] == "replace" else 1.0
    passes = f * int(privacy["max_rows_per_unit"]) * math.sqrt(int(manifest["params"]["restarts"])) * B_y**3
    return float(sens["second_moment"]), passes


def draw_violations(label: str, d0: list[Draw], d1: list[Draw], manifests: tuple[dict, dict]) -> list[str]:
    """The ways the recorded draws of D (``d0``) and D′ (``d1``) break their stated sensitivity.

    Per draw: the same public scale and Δ on both sides; the change of the
    exact values at most Δ in the noise's norm; Δ one the manifest states —
    a number under a ``*sensitivity*`` key (a manifest that states none has
    a Δ that depends on earlier outputs, e.g. the explicit tensor power
    method's 6c‖u‖∞²: there the next check carries it; a formula of the
    released second moment, whitened tensor passes: evaluated by
    :func:`whitened_sensitivities`, draw by draw) — and, for additive
    draws, scale = Δ × the noise multiplier of a charged event (what the
    ledger accounts).
    """
    bad: list[str] = []
    if len(d0) != len(d1):
        return [f"{label}: {len(d0)} draws on the base, {len(d1)} on the neighbour (the draws depend on the data)"]
    stated = stated_sensitivities(manifests[0]) + stated_sensitivities(manifests[1])
    # whitened tensor rows: M2's Δ, then the passes' (a formula of the released M2), each where the manifest says
    whitened = [whitened_sensitivities(m, d) for m, d in zip(manifests, (d0, d1))]
    if whitened[0] is not None and whitened[1] is not None and not np.allclose(whitened[0], whitened[1], rtol=1e-9):
        bad.append(f"{label}: the whitened release's stated (M2, pass) Δ differ: {whitened[0]} vs {whitened[1]}")
    multipliers = event_multipliers(manifests[0])
    for i, (a, b) in enumerate(zip(d0, d1)):
        norm_name, order = _NORMS[a.kind]
        if a.kind != b.kind or not math.isclose(a.scale, b.scale) or not math.isclose(a.sensitivity, b.sensitivity):
            bad.append(f"{label}: draw {i} differs in public parameters: {a.kind} scale {a.scale} Δ {a.sensitivity} "
                       f"vs {b.kind} scale {b.scale} Δ {b.sensitivity}")
            continue
        charged = a.kind == "noisy_min" or any(
            math.isclose(a.scale, z * a.sensitivity, rel_tol=1e-9) for z in multipliers)
        if not charged:
            bad.append(f"{label}: draw {i} ({a.kind}) has scale {a.scale} for Δ = {a.sensitivity}: no charged event "
                       f"has that noise multiplier (charged: {multipliers})")
        elif a.kind == "noisy_min" and not any(math.isclose(a.sensitivity, s, rel_tol=1e-9) for s in stated):
            bad.append(f"{label}: draw {i} (noisy_min) uses score sensitivity {a.sensitivity}, which the manifest "
                       f"does not state (stated: {sorted(set(stated))})")
        elif whitened[0] is not None:
            want = whitened[0][0 if i == 0 else 1]
            if not math.isclose(a.sensitivity, want, rel_tol=1e-9):
                bad.append(f"{label}: draw {i} ({a.kind}) uses Δ = {a.sensitivity}, the manifest states {want} for "
                           f"{'the second moment' if i == 0 else 'a whitened power pass'}")
        elif stated and not any(math.isclose(a.sensitivity, s, rel_tol=1e-9) for s in stated):
            bad.append(f"{label}: draw {i} ({a.kind}) uses Δ = {a.sensitivity}, which the manifest does not state "
                       f"(stated: {sorted(set(stated))})")
        change = float(np.linalg.norm(b.values - a.values, ord=order))
        if change > a.sensitivity * (1 + TOL) + TOL:
            where = np.flatnonzero(np.abs(b.values - a.values) > 1e-12)[:8]
            bad.append(f"{label}: draw {i} ({a.kind}) moved by {change:.6g} in {norm_name}, stated Δ = "
                       f"{a.sensitivity:.6g}; base {a.values[where].tolist()} -> neighbour {b.values[where].tolist()} "
                       f"at {where.tolist()}")
    return bad


def gram_violations(label: str, g0: np.ndarray, g1: np.ndarray, *, norm_bound: float, m: int,
                    neighbors: str) -> list[str]:
    """Sheffet's proofs bound the change of the exact Gram by at most m rows of norm ≤ B (module doc).

    Checked: the positive and the negative part of G′ − G each have trace
    ≤ m·B² and rank ≤ m, and under add/remove one of them is zero.
    """
    diff = np.asarray(g1, dtype=float) - np.asarray(g0, dtype=float)
    lam = np.linalg.eigvalsh((diff + diff.T) / 2)
    scale = max(1.0, float(np.abs(g0).max(initial=0)), float(np.abs(g1).max(initial=0)))
    tol = 1e-9 * scale
    pos, neg = lam[lam > tol], -lam[lam < -tol]
    cap = m * norm_bound**2 * (1 + TOL) + tol
    bad = []
    if pos.sum() > cap or neg.sum() > cap:
        bad.append(f"{label}: the exact Gram changed by rows of total squared norm +{pos.sum():.6g} / "
                   f"-{neg.sum():.6g}, more than m·B² = {m * norm_bound**2:g}")
    if len(pos) > m or len(neg) > m:
        bad.append(f"{label}: the exact Gram changed in rank +{len(pos)} / -{len(neg)}, more than m = {m} rows")
    if neighbors == "add_remove" and len(pos) and len(neg):
        bad.append(f"{label}: add/remove changed the exact Gram both ways (eigenvalues {lam.tolist()})")
    return bad


# -- running releases ------------------------------------------------------------------------------------------
@contextlib.contextmanager
def fixed_selection_secret(value: int = 0x5EED) -> Iterator[None]:
    """The per-unit row selection's secret, fixed for both datasets (module doc)."""
    from spark_dp.aggregates import _bounding

    old = _bounding.new_secret
    _bounding.new_secret = lambda: value
    try:
        yield
    finally:
        _bounding.new_secret = old


_CACHED = {
    "spark_dp.second_moment.api": ("gram_matrix", "gram_matrix_parquet", "value_counts"),
    "spark_dp.aggregates.norms": ("norm_counts",),
    "spark_dp.aggregates.jl": ("jl_projection",),
    "spark_dp.aggregates.sketch": ("sketch_table", "sketch_table_parquet", "histogram_table",
                                   "histogram_table_parquet", "dyadic_tables", "dyadic_tables_parquet"),
}
_GRAMS = ("gram_matrix", "gram_matrix_parquet")
#: Recorded, not cached: PCA's ``standardize="mean"`` derives the centred Gram on the driver from the exact Gram
#: and the released mean; the Sheffet mechanisms' proofs are then about that matrix, at the centred rows' bound.
_RECORDED = {"spark_dp.second_moment.api": ("centred_gram",)}


def jl_projected_gram(args: tuple, kwargs: dict, projected: np.ndarray) -> np.ndarray:
    """The Gram matrix of the rows a JL projection R·A summed, recovered exactly from R·A itself.

    R·A = Σ √cᵢ·gᵢ·aᵢᵀ over the distinct rows (content ids, multiplicities
    cᵢ), gᵢ = R's column of row i, a function of its ids and the key only
    (:mod:`spark_dp.aggregates.jl`). The driver recomputes the gᵢ of every
    distinct row of the input (the same ``vectorize`` and ``row_id_frame``)
    and solves R·A = Gᵀ W by least squares (r ≫ rows: G has full rank), so
    W's rows are √cᵢ·aᵢ as the executors clipped (or dropped, or zeroed) them
    and WᵀW = Σ cᵢ aᵢaᵢᵀ is the Gram of what was projected: the matrix JL's
    proof is about (the release is W_d(AᵀA + w²I, r)). An R·A that is not such
    a combination fails here (a row projected twice, or with another column).
    """
    from spark_dp.aggregates._vectors import VECTOR_COL, vectorize
    from spark_dp.aggregates.jl import row_id_frame, row_normals

    if kwargs.get("row_ids", "content") != "content":
        raise AssertionError("jl_projection: the search recovers the Gram through content row ids only")
    frame, d = vectorize(args[0], args[1], dimension=kwargs.get("dimension"), privacy_unit=kwargs.get("privacy_unit"),
                         max_rows_per_unit=kwargs.get("max_rows_per_unit", 1), affine=kwargs.get("affine"))
    ids = row_id_frame(frame).select(VECTOR_COL, "h1", "h2").collect()
    projected = np.asarray(projected, dtype=float)
    if not ids:
        if np.abs(projected).max(initial=0) > 0:
            raise AssertionError("jl_projection: a nonzero R·A from an input with no rows")
        return np.zeros((d, d))
    G = row_normals(np.array([i["h1"] for i in ids]), np.array([i["h2"] for i in ids]), int(kwargs["r"]),
                    int(kwargs["key"]))
    W = np.linalg.lstsq(G.T, projected, rcond=None)[0]
    residual = float(np.abs(G.T @ W - projected).max(initial=0))
    if residual > 1e-9 * max(1.0, float(np.abs(projected).max(initial=0))):
        raise AssertionError(f"jl_projection: R·A is not a combination of its distinct rows' columns of R "
                             f"(residual {residual:.3g})")
    return W.T @ W


def _key(name: str, args: tuple, kwargs: dict) -> str:
    """The call's arguments but the data (first argument) and the session: the cache is per dataset."""
    return repr((name, args[1:], sorted((k, v) for k, v in kwargs.items() if k != "spark")))


@dataclass
class AggregateCache:
    """One dataset's exact aggregates, computed once per distinct call by the library's own functions.

    Every release of an example asks the same Spark passes (the Gram matrix
    of the clipped rows, a sketch's table for given seeds): with the selection
    secret fixed they are deterministic functions of (data, arguments), so
    the mechanisms that share one share its result. Also records the Gram
    matrices handed out (with their norm bound) for the Gram checks.
    """

    results: dict = field(default_factory=dict)
    grams: list[tuple[np.ndarray, float]] = field(default_factory=list)
    misses: int = 0

    @contextlib.contextmanager
    def installed(self) -> Iterator[AggregateCache]:
        import importlib

        saved = []
        for module_name, names in _CACHED.items():
            module = importlib.import_module(module_name)
            for name in names:
                saved.append((module, name, getattr(module, name)))
                setattr(module, name, self._wrap(name, getattr(module, name)))
        for module_name, names in _RECORDED.items():
            module = importlib.import_module(module_name)
            for name in names:
                saved.append((module, name, getattr(module, name)))
                setattr(module, name, self._record_centred(getattr(module, name)))
        try:
            yield self
        finally:
            for module, name, fn in saved:
                setattr(module, name, fn)

    def _record_centred(self, fn):
        """The centred Gram Σ(a − μ̂)(a − μ̂)ᵀ with its stated bound B_c = √Σ(1 + |μ̂ᵢ|)² (μ̂ replayed on D′)."""
        from spark_dp.second_moment.centre import centred_norm_bound

        def wrapped(gram, mean, *args, **kwargs):
            out = fn(gram, mean, *args, **kwargs)
            self.grams.append((np.array(out, dtype=float, copy=True), centred_norm_bound(mean)))
            return out
        return wrapped

    def _wrap(self, name: str, fn):
        def wrapped(*args, **kwargs):
            key = _key(name, args, kwargs)
            if key not in self.results:
                self.misses += 1
                self.results[key] = fn(*args, **kwargs)
                if name == "jl_projection":  # with the Gram of the rows it projected (one more small pass)
                    self.results[key] = (self.results[key], jl_projected_gram(args, kwargs, self.results[key]))
            out = self.results[key]
            if name == "jl_projection":
                out, gram = out
                self.grams.append((np.array(gram, dtype=float, copy=True), float(kwargs["norm_bound"])))
            elif name in _GRAMS:
                gram = out[0] if isinstance(out, tuple) else out
                self.grams.append((np.array(gram, dtype=float, copy=True), float(kwargs["norm_bound"])))
            return out
        return wrapped


class Runner:
    """Builds the datasets' frames (both input paths) and runs releases in fresh sessions on one ledger."""

    def __init__(self, spark, root: str):
        self.spark, self.root = spark, root
        os.makedirs(root, exist_ok=True)

    def frame(self, data: Dataset, path: str):
        """(DataFrame, source_paths): an in-memory frame, or two Parquet files read by Spark."""
        rows = data.rows()
        if path == "spark":
            return self.spark.createDataFrame(rows, SCHEMA), None
        import pyarrow as pa
        import pyarrow.parquet as pq

        schema = pa.schema([("x1", pa.float64()), ("x2", pa.float64()), ("y", pa.float64()), ("item", pa.string()),
                            ("w", pa.float64()), ("uid", pa.int64())])
        d = os.path.join(self.root, uuid.uuid4().hex[:10])
        os.makedirs(d)
        files = []
        for part in (0, 1):  # consecutive rows alternate between the files: a repeated row is in both
            chunk = rows[part::2]
            cols = list(zip(*chunk)) if chunk else [[] for _ in schema]
            table = pa.table({f.name: pa.array(list(c), type=f.type) for f, c in zip(schema, cols)}, schema=schema)
            files.append(os.path.join(d, f"part-{part}.parquet"))
            pq.write_table(table, files[-1])
        return self.spark.read.parquet(*files), files

    def release(self, method: str, data, sampler: Coupled, **kwargs):
        import spark_dp

        dp = spark_dp.DPSession(f"search-{uuid.uuid4().hex[:10]}", ledger=f"sqlite:///{self.root}/ledger.db",
                                epsilon_limit=1e6, delta_limit=0.5, output=os.path.join(self.root, "releases"),
                                sampler=sampler)
        return getattr(dp, method)(data, **kwargs)


@dataclass(frozen=True)
class Call:
    """One release to run on both datasets: the session method, its arguments and what to check."""

    label: str  # registry entry + variant, e.g. "second_moment/analyze_gauss+clipping_report"
    method: str
    kwargs: dict
    gram: bool = False  # also check the exact Gram (second-moment family)


def run_pair(runner: Runner, pair: Pair, calls: list[Call]) -> tuple[list[str], int]:
    """Runs every call on D and D′ (coupled samplers); returns the violations found and the Spark passes run."""
    bad: list[str] = []
    frames = [runner.frame(pair.base, pair.path), runner.frame(pair.other, pair.path)]
    caches = [AggregateCache(), AggregateCache()]
    for call in calls:
        samplers, manifests, grams = [], [], []
        for side, (df, paths) in enumerate(frames):
            sampler = Coupled(seed=7, replay=samplers[0] if side else None)
            kwargs = dict(call.kwargs, nonfinite=pair.nonfinite)
            if call.method == "count_sketch":
                kwargs["nulls"] = pair.nulls
            if paths is not None:
                kwargs["source_paths"] = paths
            cache = caches[side]
            before = len(cache.grams)
            with fixed_selection_secret(), cache.installed():
                try:
                    release = runner.release(call.method, df, sampler, **kwargs)
                except AssertionError as exc:  # the coupling itself broke: the draws depend on the data
                    bad.append(f"{call.label}: {exc}")
                    break
            samplers.append(sampler)
            manifests.append(release.manifest)
            grams.append(cache.grams[before:])
        else:
            bad += draw_violations(call.label, samplers[0].draws, samplers[1].draws, (manifests[0], manifests[1]))
            if call.gram:
                if len(grams[0]) != len(grams[1]):
                    bad.append(f"{call.label}: {len(grams[0])} Gram passes on the base, {len(grams[1])} on the "
                               "neighbour")
                for (a, bound), (b, _) in zip(grams[0], grams[1]):
                    bad += gram_violations(call.label, a, b, norm_bound=bound, m=pair.m, neighbors=pair.neighbors)
    return bad, caches[0].misses + caches[1].misses


def with_(pair: Pair, **changes) -> Pair:
    """``pair`` with fields replaced (pinned examples)."""
    return replace(pair, **changes)
