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
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime

import numpy as np

from spark_dp._version import __version__
from spark_dp.errors import ConfigError
from spark_dp.privacy.accountant import compose_epsilon
from spark_dp.privacy.events import event_from_dict
from spark_dp.release import MANIFEST_SCHEMA_VERSION, Release, load_release, write_release


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
            hash, per-unit bounds, arrays).
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
        if m["privacy"].get("unit_l2_bound") != first["privacy"].get("unit_l2_bound") or \
                m["privacy"].get("max_items_per_unit") != first["privacy"].get("max_items_per_unit"):
            raise ConfigError("Releases differ in their per-unit bounds; cannot merge.")
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
    privacy = {k: v for k, v in first["privacy"].items() if k not in ("ledger_entry", "noise_sigma", "noise_scale")}
    privacy.update(
        epsilon=epsilon, delta=delta, events=[e for p in parts for e in p.privacy["events"]],
        composition="sequential over the parts (exact for Gaussian parts, PLD otherwise)",
        private=all(p.privacy.get("private", False) for p in parts),
        parts=[{"release_id": p.release_id, "epsilon": p.privacy["epsilon"], "delta": p.privacy["delta"],
                "ledger_entry": p.privacy.get("ledger_entry")} for p in parts],
    )
    if first["privacy"].get("noise") == "gaussian":
        privacy["noise_sigma"] = math.sqrt(math.fsum(p.privacy["noise_sigma"] ** 2 for p in parts))
    else:
        privacy["noise_scales"] = [p.privacy.get("noise_scale") for p in parts]
    heavy = first.get("heavy_hitters")
    if first["sketch"].get("levels") is not None:
        heavy = _redecode(parts, arrays, privacy)
    rid = release_id or f"count_sketch-merged-{datetime.now(UTC).strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"
    manifest = {
        "schema_version": MANIFEST_SCHEMA_VERSION, "release_id": rid, "dataset_id": first["dataset_id"],
        "task": "count_sketch", "mechanism": first["mechanism"], "columns": first.get("columns"),
        "params": first.get("params"), "policies": first.get("policies"), "sketch": first["sketch"],
        "heavy_hitters": heavy, "merged_from": [p.release_id for p in parts],
        "privacy": privacy, "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "library_version": __version__, "request_sha256": None, "config_sha256": None,
    }
    release = Release(release_id=rid, arrays=arrays, manifest=manifest)
    if output is not None:
        write_release(release, output)
    return release


def _redecode(parts: list[Release], arrays: dict[str, np.ndarray], privacy: dict) -> dict:
    """The heavy ids of the merged dyadic stack (post-processing of the merged release)."""
    from spark_dp.sketch.dyadic import dyadic_heavy_hitters_of, stack_of
    from spark_dp.sketch.estimate import seeds_from_payload

    hh = dict(parts[0].manifest.get("heavy_hitters") or {})
    if all((p.manifest.get("heavy_hitters") or {}).get("threshold_rule") == "3 sigma" for p in parts):
        hh["threshold"] = 3.0 * privacy["noise_sigma"]
    seeds = [seeds_from_payload(s) for s in arrays.get("dyadic_seeds", np.zeros((0, 1, 2)))]
    seeds.append(seeds_from_payload(arrays["seeds"]))
    found = dyadic_heavy_hitters_of(stack_of(arrays), seeds, top=int(hh.get("top") or 50),
                                    threshold=float(hh["threshold"]), hash_seed=None, kind="long")
    hh["items"] = [{"item": x, "estimate": v} for x, v in found]
    hh["decoded_from"] = "the merged stack"
    return hh
