"""Calibration of the sketch, PCA and tensor error bars on real tables (no Spark; the library's own functions).

Sketches: the exact table of a real item column is built with the library's
hash family (:func:`spark_dp.sketch.hashing.buckets_and_signs`, fresh random
seeds per release, as a release draws them), noised with the library's
mechanism (:func:`spark_dp.sketch.mechanisms.release_table` through a seeded
test chokepoint) and read with its estimators and intervals
(:func:`spark_dp.sketch.uncertainty.collision_quantiles`, the function
``estimate_bounds`` applies to a release). The truth of an item is its
frequency as the sketch counts it (after keeping at most m rows per unit).
Both the noise-only interval (the old one, kept as the dry run's lower
limit) and the collision-aware one are measured, with the heavy-hitter
false-positive claim on items absent from the data.

PCA: :func:`tests._calibration.pca_cell`. Tensors: the private online power
method on a real table's rows scaled to [-1, 1] by public bounds
(:func:`tensor_cell`).
"""

from __future__ import annotations

import functools
import math
import os

import numpy as np

from tests._samplers import FakeChokepoint

DATA = os.environ.get("SPARK_DP_SHARED_DATA") or next(
    (p for p in (os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data"), "/work/shared/data")
     if os.path.isdir(p)), "")

#: Sketch tables: name -> (what, loader). Each loader returns (items as int ids, unit ids or None).
SKETCH_TABLES = ("cities", "flights_tailnum", "diamonds_price", "baseball_team", "zipf")
#: Mechanisms with their default estimators.
SKETCH_MECHANISMS = (("private_count_sketch", "median"), ("count_min", "min"), ("count_mean", "debiased_mean"))


def _codes(values) -> np.ndarray:
    import pandas as pd

    return pd.factorize(pd.Series(values).astype(str))[0].astype(np.int64)


@functools.lru_cache(maxsize=None)
def sketch_data(name: str) -> tuple[np.ndarray, np.ndarray | None, str]:
    """(item id per row or per item, unit per row or None, description) of a real (or the synthetic) table.

    ``cities``: the 40,999 world-city populations of Pagh & Thorup's experiments used as the frequency vector
    (frequency of city i = its population): returned as per-item frequencies (units None, ``freq:`` prefix).
    """
    import pandas as pd

    if name == "cities":
        pop = np.loadtxt(os.path.join(DATA, "world_cities_population.txt"), dtype=np.int64)
        return pop, None, "freq"
    if name == "zipf":
        rng = np.random.default_rng(7)
        return rng.zipf(1.3, 200_000).astype(np.int64) % 50_000, None, "rows"
    if name == "baseball_team":  # items: team of a season record; privacy unit: the player (m > 1)
        df = pd.read_csv(os.path.join(DATA, "baseball_batting.csv"))
        return _codes(df["team"]), _codes(df["id"]), "rows"
    from tests._calibration import _rdataset

    if name == "flights_tailnum":
        df = _rdataset("nycflights13", "flights")
        return _codes(df["tailnum"].dropna()), None, "rows"
    if name == "diamonds_price":
        df = _rdataset("ggplot2", "diamonds")
        return df["price"].to_numpy().astype(np.int64), None, "rows"
    raise ValueError(name)


def frequencies(name: str, m: int) -> tuple[np.ndarray, np.ndarray]:
    """(distinct item ids, their counted frequency): at most m rows per unit kept (the first m; any rule will do)."""
    items, units, how = sketch_data(name)
    if how == "freq":
        return np.arange(items.size, dtype=np.int64), items.astype(np.float64)
    if units is not None:
        order = np.argsort(units, kind="stable")
        u = units[order]
        first = np.r_[0, np.flatnonzero(np.diff(u)) + 1]
        rank = np.arange(u.size) - np.repeat(first, np.diff(np.r_[first, u.size]))
        items = items[order][rank < m]
    ids, counts = np.unique(items, return_counts=True)
    return ids, counts.astype(np.float64)


def _buckets_and_signs(ids: np.ndarray, seeds: list[int], buckets: int, signed: bool):
    """:func:`spark_dp.sketch.hashing.buckets_and_signs` for non-null integer items, on the arrays directly (fast)."""
    from spark_dp.aggregates.xxh64 import sign_seed, spark_seed_state, xxh64_long_array

    h = np.empty((len(seeds), ids.size), dtype=np.int64)
    s = np.ones((len(seeds), ids.size), dtype=np.int64)
    for i, seed in enumerate(seeds):
        h[i] = np.mod(xxh64_long_array(ids, spark_seed_state(seed)).view(np.int64), np.int64(buckets))
        if signed:
            s[i] = 1 - 2 * (xxh64_long_array(ids, spark_seed_state(sign_seed(seed))).view(np.int64) & np.int64(1))
    return h, s


class _Chokepoint(FakeChokepoint):
    """FakeChokepoint with Count-Min's Laplace draws (tests/_coverage.py's)."""

    def laplace(self, values, *, scale, l1_sensitivity):
        return self.sampler.laplace(np.asarray(values, dtype=float).reshape(-1), scale, l1_sensitivity).reshape(
            np.shape(values))


def sketch_cell(name: str, mechanism: str, *, epsilon: float, m: int = 1, k: int = 5, buckets: int = 1024,
                reps: int = 100, level: float = 0.95, absent: int = 2000, seed: int = 0,
                estimator: str | None = None, parts: int = 1) -> dict:
    """Coverage of the estimates' intervals (noise-only and collision-aware) and the false-positive claim.

    ``parts`` > 1: the release is a merge of that many sketches of equal ε
    with the same seeds (:func:`spark_dp.sketch.merge.merge_sketches`): the
    data split over the parts adds up to the whole table, and every part adds
    its own noise, so the merged counters carry the sum of ``parts`` noises
    (for Laplace a :class:`~spark_dp.sketch.laplace_sum.LaplaceSum`; for
    Gaussian σ√parts), read as the merged release reads it.

    Per release: fresh hash seeds, the exact table of the counted frequencies, the mechanism's noise, every present
    item's estimate and ``absent`` items that are not in the data (the false-positive measurement at the release's
    default threshold 3σ). ``heavy``: the present items of the top 1 % by frequency (at least 20).
    """
    from spark_dp.sketch.count_sketch import combine, simple_estimates, table_total
    from spark_dp.sketch.mechanisms import DEFAULT_ESTIMATOR, SIGNED, plan_sketch, release_table
    from spark_dp.sketch.uncertainty import (
        collision_quantiles,
        estimate_noise,
        false_positive_rate,
        false_positive_rate_bound,
        release_collision_mass,
    )

    ids, x = frequencies(name, m)
    est_name = estimator or DEFAULT_ESTIMATOR[mechanism]
    plan = plan_sketch(mechanism, epsilon=epsilon, delta=1e-6, repetitions=k, max_items_per_unit=m)
    signed = SIGNED[mechanism]
    heavy = np.argsort(-x)[: max(20, x.size // 100)]
    fake = np.arange(absent, dtype=np.int64) + int(ids.max()) + 1_000_000  # never in the data
    queried = np.concatenate([ids, fake])
    family, scale = plan.noise, plan.scale
    if parts > 1 and family == "laplace":
        from spark_dp.sketch.laplace_sum import LaplaceSum

        family, scale = LaplaceSum.of([plan.scale] * parts)
    elif parts > 1:
        scale = plan.scale * math.sqrt(parts)
    lo0, hi0, _ = estimate_noise(est_name, family, scale, k, level, buckets)
    threshold = 3.0 * plan.counter_std * math.sqrt(parts)
    fp_claim = false_positive_rate(est_name, family, scale, k, threshold, buckets)
    rng = np.random.default_rng(seed)
    old = new = old_h = new_h = passes = refused = 0
    widths, fp_bounds = [], []
    for r in range(reps):
        seeds = [int(s) for s in rng.integers(-(2 ** 63), 2 ** 63 - 1, size=k, dtype=np.int64)]
        h, s = _buckets_and_signs(queried, seeds, buckets, signed)
        table = np.zeros((k, buckets))
        n = ids.size
        for i in range(k):
            np.add.at(table[i], h[i, :n], x * (s[i, :n] if signed else 1.0))
        noisy = release_table(plan, table, _Chokepoint.seeded(seed * 100_003 + r))
        for p in range(1, parts):  # the other parts' noise (their data is already in the table: it adds up)
            noisy = noisy + release_table(plan, np.zeros_like(table), _Chokepoint.seeded(seed * 100_003 + r + p * 7919))
        est = combine(simple_estimates(noisy, h, s if signed else None), est_name, buckets=buckets,
                      total=table_total(noisy))
        e, fe = est[:n], est[n:]
        ok0 = (e - hi0 <= x) & (x <= e - lo0)
        old += int(ok0.sum())
        old_h += int(ok0[heavy].sum())
        passes += int(np.sum(fe >= threshold))
        mass = release_collision_mass(noisy, mechanism, family, scale, level, True)
        if mass.reason is not None:
            refused += 1
            continue
        qlo, qhi = collision_quantiles(est_name, family, scale, mass, level)
        ok = (e - qhi <= x) & (x <= e - qlo)
        new += int(ok.sum())
        new_h += int(ok[heavy].sum())
        widths.append(qhi - qlo)
        fp_bounds.append(false_positive_rate_bound(est_name, family, scale, mass, threshold))
    n_items = ids.size
    stated = reps - refused
    return {"table": name, "mechanism": mechanism, "estimator": est_name, "epsilon": epsilon, "m": m, "k": k,
            "parts": parts,
            "buckets": buckets, "reps": reps, "items": int(n_items), "rows": float(x.sum()),
            "noise_scale": scale, "noise_only_coverage": old / (reps * n_items),
            "noise_only_coverage_heavy": old_h / (reps * heavy.size), "noise_only_width": hi0 - lo0,
            "coverage": new / (stated * n_items) if stated else math.nan,
            "coverage_heavy": new_h / (stated * heavy.size) if stated else math.nan,
            "refused": refused / reps, "width": float(np.median(widths)) if widths else math.nan,
            "false_positive_rate": passes / (reps * absent), "false_positive_claim": fp_claim,
            "false_positive_bound": float(np.median(fp_bounds)) if fp_bounds else math.nan}


# -- tensors: the private online power method on a real table's scaled rows ----------------------------------------
def tensor_cell(name: str, *, epsilon: float, k: int = 2, reps: int = 100, level: float = 0.95, restarts: int = 1,
                iterations: int = 5, m: int = 1, seed: int = 0) -> dict:
    """Coverage of the rows mechanism's eigenvalue intervals on a real table (reuse mode, bounds from the table).

    The rows (features and label of :data:`tests._calibration.TABLES`, clamped to its public bounds) are mapped to
    a = (x − c)/h ∈ [−1, 1]^d as a release with ``bounds`` does; norm bound √d. Truth of component i: the pass's
    sum over the rows of the deflated cube at the released vector, Σ (aᵀv̂ᵢ)³ − Σⱼ<ᵢ λ̂ⱼ(v̂ⱼᵀv̂ᵢ)³ (the interval
    covers the noise of the pass, not the power method's convergence).
    """
    from spark_dp.tensor.private import eigenvalue_uncertainty, private_online_power_method, rows_plan
    from tests._calibration import TABLE, load

    x, y, _ = load(name)
    t = TABLE[name]
    cols = list(t.features) + [t.label]
    data = np.column_stack([x[:, :-1], y])
    lo = np.array([t.bounds[c][0] for c in cols])
    hi = np.array([t.bounds[c][1] for c in cols])
    a = (data - (lo + hi) / 2) / ((hi - lo) / 2)
    d = a.shape[1]
    bound = math.sqrt(d)
    plan = rows_plan(epsilon=epsilon, delta=1e-6, k=k, L=restarts, R=iterations, norm_bound=bound, mode="reuse",
                     max_rows_per_unit=m)

    def moments(U, _pass):
        P = a @ U
        return a.T @ (P ** 2), (P ** 3).sum(axis=0), a.shape[0]

    hits = total = 0
    widths = []
    kind = None
    for r in range(reps):
        dec = private_online_power_method(moments, d=d, k=k, L=restarts, R=iterations, plan=plan,
                                          chokepoint=FakeChokepoint.seeded(seed * 100_003 + r),
                                          rng=np.random.default_rng(seed * 7919 + r))
        u = eigenvalue_uncertainty(dec.eigenvalues, np.full(k, plan.sigma), restarts=restarts, level=level,
                                   source="rows")
        kind = u.kind
        lam, V = dec.eigenvalues, dec.eigenvectors
        for i in range(k):
            truth = float(((a @ V[i]) ** 3).sum()) - sum(lam[j] * float(V[j] @ V[i]) ** 3 for j in range(i))
            hits += bool(u.low[i] <= truth <= u.high[i])
            total += 1
        widths.append(float(np.median(u.high - u.low)))
    return {"table": name, "epsilon": epsilon, "m": m, "k": k, "restarts": restarts, "reps": reps,
            "rows": int(a.shape[0]), "features": d, "coverage": hits / total, "kind": kind,
            "width": float(np.median(widths))}


def in_memory_release(noisy: np.ndarray, seeds: list[int], mechanism: str, plan, *, threshold: float | None = None,
                      nonnegative: bool = True, level: float = 0.95):
    """A count_sketch :class:`~spark_dp.release.Release` of a released table, as the API writes it (no Spark).

    Its manifest's ``sketch.estimate_intervals`` and ``heavy_hitters`` come from the same functions the API calls.
    """
    from spark_dp.release.release import Release
    from spark_dp.sketch.estimate import seeds_to_payload
    from spark_dp.sketch.mechanisms import DEFAULT_ESTIMATOR, SIGNED
    from spark_dp.sketch.uncertainty import estimate_interval_info, false_positive_rate, false_positive_rate_bound

    est = DEFAULT_ESTIMATOR[mechanism]
    k, b = noisy.shape
    info, mass = estimate_interval_info(noisy, mechanism, est, plan.noise, plan.scale, level, nonnegative=nonnegative)
    threshold = 3.0 * plan.counter_std if threshold is None else threshold
    hh = {"threshold": threshold, "top": 10,
          "false_positive_rate": false_positive_rate(est, plan.noise, plan.scale, k, threshold, b),
          "false_positive_rate_bound": None if mass.reason else false_positive_rate_bound(
              est, plan.noise, plan.scale, mass, threshold)}
    manifest = {"release_id": "calibration", "task": "count_sketch", "mechanism": mechanism,
                "sketch": {"item_kind": "long", "repetitions": k, "buckets": b, "signed": SIGNED[mechanism],
                           "estimator": est, "estimate_intervals": info},
                "heavy_hitters": hh, "uncertainty": {"level": level, "arrays": {}},
                "policies": {"weights": "each row counts 1" if nonnegative else "clipped to [-1, 1] per row"},
                "privacy": {"noise_family": plan.noise, "noise_scale": plan.scale, "epsilon": plan.budget.epsilon,
                            "delta": plan.budget.delta}}
    from spark_dp.sketch.uncertainty import counter_uncertainty

    u = counter_uncertainty(noisy, plan.noise, plan.scale, level)
    manifest["uncertainty"]["arrays"]["sketch"] = u.describe()
    return Release(release_id="calibration", arrays={"sketch": noisy, "seeds": seeds_to_payload(seeds)},
                   manifest=manifest, uncertainty={"sketch": u})


def pca_units_cell(name: str, mechanism: str, *, epsilon: float, m: int, reps: int = 100, seed: int = 0) -> dict:
    """:func:`tests._calibration.pca_cell` with privacy units of m consecutive rows (none dropped: the truth is
    unchanged, the noise is the one planned for m rows per unit)."""
    from spark_dp.second_moment._scaling import Scaling
    from tests._calibration import TABLE, load
    from tests._coverage import second_moment_coverage

    x, y, scaling = load(name)
    t = TABLE[name]
    cols = list(t.features) + [t.label]
    bounds = {c: b for c, b in zip(scaling.columns, scaling.bounds, strict=True)}
    data = np.column_stack([x[:, :-1], y])
    lo = np.array([bounds[c][0] for c in cols])
    hi = np.array([bounds[c][1] for c in cols])
    scaled = np.hstack([(data - (lo + hi) / 2) / ((hi - lo) / 2), np.ones((len(data), 1))])
    sc = Scaling.of(cols, bounds, constant_at=len(cols))
    return second_moment_coverage(mechanism, d=len(cols), n=len(data), epsilon=epsilon, reps=reps, seed=seed,
                                  bounded=True, data=(scaled, sc), max_rows_per_unit=m)
