"""Merging sketches built with the same seeds and shape (daily → weekly).

CountSketch, Count-Min and Count-Mean tables are linear in the frequency
vector, so tables built with the same hash functions add up: the sum is a
private sketch of the union of the parts, with noise variance the sum of the
parts' (Gaussian) — pure post-processing of releases, nothing is charged.
The merged release records the composed privacy of its parts, composed
sequentially (the parts may hold the same privacy units): Gaussian parts
compose exactly (μ_tot = √Σμᵢ²), mixed ones through the PLD accountant, at
δ = the sum of the parts' δ.

Dyadic releases (heavy hitters without candidates) merge the same way when
their parts agree on levels, shape, every level's seeds, the domain hash
(seed and levels) and the per-unit bounds: the (L, k, b) stacks add up, and
the heavy ids are decoded again from the merged stack (post-processing), with
the default threshold (3 σ of one counter) recomputed for the merged noise
σ = √Σσᵢ² unless the parts set one.

Parts with weight bounds (``sketch.weight_scaling``) store their counters in
the weight's units, M times the mechanism's output: they merge only with
parts of equal bounds (hence equal M), so the merged table is M times the
merged mechanism output and its noise is M·√Σσᵢ², as every reader assumes.

The parts must protect the same thing: equal privacy unit (the unit column,
or ``row``), per-unit row cap m, unit clipping and per-unit L2 bound. A
composed guarantee over parts that bound different units (rows one day,
users the next) or different m is not the guarantee the merged manifest
would state, so a mismatch is refused.

A plain (non-dyadic) merge does not carry any part's heavy-hitter ``items``
over: each list was computed from that part's own noisy table, not from the
merged one, and the candidates they came from are not stored in the
release, so the merged list cannot be recomputed here. The merged
``heavy_hitters`` keeps ``top`` and the threshold (recomputed for the merged
noise when the parts used the 3 σ default), ``items`` is None and a note
says to run :func:`~spark_dp.sketch.estimate.heavy_hitters` on the merged
release with public candidates.

Error bars of the merged release are read again for the merged table and
noise (:func:`_merged_uncertainty`): Gaussian parts σ = √Σσᵢ²; Laplace parts
a sum of Laplaces, whose law :mod:`spark_dp.sketch.laplace_sum` gives in
closed form (equal scales; bounds for unequal ones) — a Gaussian or a single
Laplace would not hold.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np

from spark_dp._version import __version__
from spark_dp.errors import ConfigError
from spark_dp.privacy.accountant import compose_epsilon
from spark_dp.privacy.events import event_from_dict
from spark_dp.release import MANIFEST_SCHEMA_VERSION, Release, load_release, write_release
from spark_dp.release.ids import check_release_id, new_release_id
from spark_dp.release.release import noise_of


def merge_sketches(
    releases: Sequence[Release | str], *, release_id: str | None = None, output: str | None = None
) -> Release:
    """Adds up count_sketch releases of equal mechanism, seeds and shape (dyadic stacks included).

    Args:
        releases: two or more releases (or their directories).
        release_id: id of the merged release (default: a new one).
        output: if given, the merged release is written under this directory.

    Raises:
        ConfigError: fewer than two releases, or parts that do not match
            (mechanism, dataset, item type, shape, seeds, levels, domain
            hash, privacy unit, per-unit bounds, arrays).
    """
    parts = [load_release(r) if isinstance(r, str) else r for r in releases]
    if len(parts) < 2:
        raise ConfigError(f"The 'releases' parameter of merge_sketches must hold at least 2 releases. Got {len(parts)}.")
    first = parts[0].manifest
    for p in parts:
        m = p.manifest
        if m.get("task") != "count_sketch":
            raise ConfigError(f"Release {p.release_id!r} is not a count_sketch release.")
        for key in ("mechanism", "dataset_id"):
            if m.get(key) != first.get(key):
                raise ConfigError(f"Releases differ in {key!r}: {first.get(key)!r} vs {m.get(key)!r}; cannot merge.")
        # Counters are stored in the weight's units (M × the mechanism's): parts with other weight bounds
        # would add differently clamped weights, and their noise scales would not compose as one release's.
        ws_a, ws_b = (_weight_bounds(x) for x in (first, m))
        if ws_a != ws_b:
            raise ConfigError(f"Releases differ in weight bounds: {ws_a!r} ({parts[0].release_id!r}) vs {ws_b!r} "
                              f"({p.release_id!r}); only sketches with equal weight bounds (equal M) merge.")
        for key in ("item_kind", "repetitions", "buckets", "signed", "domain", "levels", "domain_hash"):
            if m["sketch"].get(key) != first["sketch"].get(key):
                raise ConfigError(f"Releases differ in sketch {key!r}: {first['sketch'].get(key)!r} vs "
                                  f"{m['sketch'].get(key)!r}; cannot merge.")
        if set(p.arrays) != set(parts[0].arrays):
            raise ConfigError(f"Releases hold different arrays ({sorted(parts[0].arrays)} vs {sorted(p.arrays)}); "
                              "cannot merge.")
        for name in ("seeds", "dyadic_seeds", "hash_seed"):
            if name in p.arrays and not np.array_equal(p[name], parts[0][name]):
                raise ConfigError(
                    f"Release {p.release_id!r} was built with other hash seeds ({name!r}); only sketches with equal "
                    "seeds add up (pass seeds=<earlier release> when building them)."
                )
        # The composed guarantee is about one privacy unit with one contribution bound: parts that bound
        # other units or other m do not compose into the guarantee the merged manifest would state.
        for key, default in _UNIT_FIELDS:
            a, b = _unit_field(first["privacy"], key, default), _unit_field(m["privacy"], key, default)
            if a != b:
                raise ConfigError(f"Releases differ in privacy {key!r}: {a!r} ({parts[0].release_id!r}) vs {b!r} "
                                  f"({p.release_id!r}); cannot merge.")
    table = "histogram" if "histogram" in parts[0].arrays else "sketch"
    arrays = {table: np.sum([p[table] for p in parts], axis=0)}
    for name in ("seeds", "dyadic_seeds", "hash_seed"):
        if name in parts[0].arrays:
            arrays[name] = parts[0][name].copy()
    if "dyadic_sketch" in parts[0].arrays:
        arrays["dyadic_sketch"] = np.sum([p["dyadic_sketch"] for p in parts], axis=0)

    events = [event_from_dict(e) for p in parts for e in p.privacy["events"]]
    delta = math.fsum(p.privacy["delta"] for p in parts)
    epsilon = compose_epsilon(events, delta)
    privacy = {k: v for k, v in first["privacy"].items() if k not in ("ledger_entry", "noise_sigma", "noise_scale",
                                                                     "noise_family")}
    privacy.update(
        epsilon=epsilon, delta=delta, events=[e for p in parts for e in p.privacy["events"]],
        composition="sequential over the parts (exact for Gaussian parts, PLD otherwise)",
        private=all(p.privacy.get("private", False) for p in parts),
        parts=[{"release_id": p.release_id, "epsilon": p.privacy["epsilon"], "delta": p.privacy["delta"],
                "ledger_entry": p.privacy.get("ledger_entry")} for p in parts],
    )
    family = noise_of(first["privacy"])[0]
    if family == "gaussian":  # a sum of independent Gaussians is Gaussian
        privacy["noise_scale"] = privacy["noise_sigma"] = math.sqrt(math.fsum(noise_of(p.privacy)[1] ** 2
                                                                              for p in parts))
        privacy["noise_family"] = "gaussian"
    else:  # a sum of Laplace variables has no single scale
        privacy["noise_family"], privacy["noise_scale"] = "sum_of_laplace", None
        privacy["noise_scales"] = [noise_of(p.privacy)[1] for p in parts]
    if first["sketch"].get("levels") is not None:
        heavy = _redecode(parts, arrays, privacy)
    else:
        heavy = _defaults_only(parts)
    rid = new_release_id("count_sketch-merged") if release_id is None else check_release_id(release_id,
                                                                                           owner="merge_sketches")
    manifest = {
        "schema_version": MANIFEST_SCHEMA_VERSION, "release_id": rid, "dataset_id": first["dataset_id"],
        "task": "count_sketch", "mechanism": first["mechanism"], "columns": first.get("columns"),
        "params": first.get("params"), "policies": first.get("policies"),
        # a part's estimate intervals and false-positive bound were read from its own table: read again from the
        # merged table and noise below (_merged_uncertainty; post-processing)
        "sketch": {k: v for k, v in first["sketch"].items() if k != "estimate_intervals"},
        "heavy_hitters": heavy, "merged_from": [p.release_id for p in parts], "source": _merged_source(parts),
        "privacy": privacy, "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "library_version": __version__, "request_sha256": None, "config_sha256": None,
    }
    for key in ("false_positive_rate_bound", "false_positive_rate_bound_meaning"):
        (heavy or {}).pop(key, None)
    unc = _merged_uncertainty(parts, arrays, manifest)
    release = Release(release_id=rid, arrays=arrays, manifest=manifest, uncertainty=unc)
    if output is not None:
        write_release(release, output)
    return release


def _merged_uncertainty(parts: list[Release], arrays: dict[str, np.ndarray], manifest: dict) -> dict:
    """The merged counters' intervals, the estimates' (``sketch.estimate_intervals``) and the threshold's
    false-positive rates, all read again for the merged noise and table (post-processing, no budget).

    The merged noise is Gaussian with σ = √Σσᵢ², or for Laplace parts a sum
    of Laplaces (:class:`~spark_dp.sketch.laplace_sum.LaplaceSum`: its exact
    law for equal scales, bounds otherwise) — never the Gaussian or
    single-Laplace law of one part. Adds ``uncertainty`` to ``manifest``
    and returns the arrays' :class:`Uncertainty`.
    """
    from spark_dp.release.uncertainty import DEFAULT_CONFIDENCE, manifest_block
    from spark_dp.sketch.uncertainty import (
        _nonnegative_weights,
        counter_noise,
        counter_uncertainty,
        estimate_interval_info,
        false_positive_rate,
        false_positive_rate_bound,
    )

    family, scale = counter_noise(manifest)
    if family is None or scale is None:
        return {}
    first = parts[0].manifest
    level = float((first.get("uncertainty") or {}).get("level", DEFAULT_CONFIDENCE))
    unc = {name: counter_uncertainty(arrays[name], family, float(scale), level)
           for name in ("sketch", "dyadic_sketch", "histogram") if name in arrays}
    manifest["uncertainty"] = manifest_block(unc, level)
    estimator = manifest["sketch"].get("estimator")
    if "sketch" not in arrays or estimator is None:
        return unc
    k, b = (int(x) for x in np.shape(arrays["sketch"])[-2:])
    info, mass = estimate_interval_info(arrays["sketch"], manifest["mechanism"], estimator, family, float(scale),
                                        level, nonnegative=_nonnegative_weights(first))
    manifest["sketch"]["estimate_intervals"] = info
    hh = manifest.get("heavy_hitters")
    if hh and hh.get("threshold") is not None:
        thr = float(hh["threshold"])
        hh["false_positive_rate"] = false_positive_rate(estimator, family, float(scale), k, thr, b)
        hh["false_positive_rate_bound"] = None if mass.reason is not None else false_positive_rate_bound(
            estimator, family, float(scale), mass, thr)
        hh["false_positive_rate_bound_meaning"] = (
            "upper bound on the probability that an item absent from the data has an estimate >= threshold, hash "
            "collisions included, for the merged noise (post-processing of the merged table; "
            + (mass.reason if mass.reason else "Markov/Cantelli on the collision mass") + ")")
    return unc


def _weight_bounds(manifest: dict) -> dict | None:
    """A part's weight bounds (column, [lo, hi], M), or None (no bounds: weights in [-1, 1], or unweighted)."""
    ws = (manifest.get("sketch") or {}).get("weight_scaling")
    return None if ws is None else {"column": ws.get("column"), "bounds": list(ws.get("bounds") or []),
                                    "scale": ws.get("scale")}


_UNIT_FIELDS = (("privacy_unit", "row"), ("max_rows_per_unit", 1), ("unit_clipping", "l1"), ("unit_l2_bound", None),
                ("neighbors", "add_remove"))


def _unit_field(privacy: dict, key: str, default: Any) -> Any:
    if key == "max_rows_per_unit":  # manifest schema 1 called it max_items_per_unit
        return privacy.get(key, privacy.get("max_items_per_unit", default))
    if key == "privacy_unit" and "privacy_unit_column" in privacy:
        # the unit column (None: each row is a unit); privacy_unit alone cannot tell a column named 'row' from
        # row level, so manifests without privacy_unit_column keep the old reading ('row': row level)
        column = privacy["privacy_unit_column"]
        return "row" if column is None else f"column:{column}"
    legacy = privacy.get(key, default)
    return legacy if key != "privacy_unit" or legacy == "row" else f"column:{legacy}"


def _merged_threshold(parts: list[Release]) -> tuple[float | None, str]:
    """The merged release's default threshold and its rule.

    3 σ defaults add as independent noise does: √Σ(3σᵢ)² = 3·√Σσᵢ² (Gaussian
    or Laplace counters alike). Given thresholds are kept when equal, else the
    largest is used (the cautious default for a later heavy-hitter query).
    """
    hhs = [p.manifest.get("heavy_hitters") or {} for p in parts]
    thr = [h.get("threshold") for h in hhs]
    if any(t is None for t in thr):
        return None, "none"
    if all(h.get("threshold_rule") == "3 sigma" for h in hhs):
        return math.sqrt(math.fsum(float(t) ** 2 for t in thr)), "3 sigma"
    return max(float(t) for t in thr), "given" if len(set(thr)) == 1 else "given (the largest of the parts')"


def _defaults_only(parts: list[Release]) -> dict | None:
    """heavy_hitters of a plain merge: defaults for later queries, never a part's list.

    Each part's ``items`` were chosen from that part's noisy table; copying one
    part's list would present it as the merged release's. Recomputing needs the
    candidates, which a release does not store (only its request digest covers
    them), so the list is dropped: ``heavy_hitters(merged, candidates)`` with
    public candidates gives the merged list (post-processing, no charge).
    """
    first = parts[0].manifest.get("heavy_hitters")
    if first is None:
        return None
    hh = {k: v for k, v in first.items() if k != "items"}
    hh["threshold"], hh["threshold_rule"] = _merged_threshold(parts)
    hh["items"] = None
    if any((p.manifest.get("heavy_hitters") or {}).get("items") is not None for p in parts):
        hh["items_note"] = ("not carried over from the parts (each part's list came from its own noisy table; the "
                            "candidates are not stored): run heavy_hitters(merged release, public candidates)")
    return hh


def _merged_source(parts: list[Release]) -> dict | None:
    """The union of the parts' recorded inputs (``source``), so candidates can be checked against every part."""
    srcs = [p.manifest.get("source") for p in parts]
    if all(s is None for s in srcs):
        return None
    out: dict = {"paths": [], "tables": []}
    for s in srcs:
        for key in ("paths", "tables"):
            out[key] += [x for x in (s or {}).get(key) or [] if x not in out[key]]
    missing = [p.release_id for p, s in zip(parts, srcs, strict=True) if s is None]
    if missing:
        out["unrecorded_parts"] = missing
    return out


def _redecode(parts: list[Release], arrays: dict[str, np.ndarray], privacy: dict) -> dict:
    """The heavy ids of the merged dyadic stack (post-processing of the merged release)."""
    from spark_dp.sketch.dyadic import dyadic_heavy_hitters_of, stack_of
    from spark_dp.sketch.estimate import seeds_from_payload

    hh = dict(parts[0].manifest.get("heavy_hitters") or {})
    hh["threshold"], hh["threshold_rule"] = _merged_threshold(parts)  # 3 σ: = 3 · privacy["noise_sigma"]
    seeds = [seeds_from_payload(s) for s in arrays.get("dyadic_seeds", np.zeros((0, 1, 2)))]
    seeds.append(seeds_from_payload(arrays["seeds"]))
    thr = float("-inf") if hh["threshold"] is None else float(hh["threshold"])
    found = dyadic_heavy_hitters_of(stack_of(arrays), seeds, top=int(hh.get("top") or 50),
                                    threshold=thr, hash_seed=None, kind="long")
    hh["items"] = [{"item": x, "estimate": v} for x, v in found]
    hh["decoded_from"] = "the merged stack"
    return hh
