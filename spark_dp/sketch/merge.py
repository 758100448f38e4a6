"""Merging sketches built with the same seeds and shape (daily → weekly).

CountSketch, Count-Min and Count-Mean tables are linear in the frequency
vector, so tables built with the same hash functions add up: the sum is a
private sketch of the union of the parts, with noise variance the sum of the
parts' (Gaussian) — pure post-processing of releases, nothing is charged.
The merged release records the composed privacy of its parts, composed
sequentially (the parts may hold the same privacy units): Gaussian parts
compose exactly (μ_tot = √Σμᵢ²), mixed ones through the PLD accountant, at
δ = the sum of the parts' δ.
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
    """Adds up count_sketch releases of equal mechanism, seeds and shape.

    Args:
        releases: two or more releases (or their directories).
        release_id: id of the merged release (default: a new one).
        output: if given, the merged release is written under this directory.

    Raises:
        ConfigError: fewer than two releases, or parts that do not match.
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
        for key in ("item_kind", "repetitions", "buckets", "signed", "domain"):
            if m["sketch"].get(key) != first["sketch"].get(key):
                raise ConfigError(f"Releases differ in sketch {key!r}; cannot merge.")
        if "dyadic_sketch" in p.arrays:
            raise ConfigError(f"Release {p.release_id!r} holds a dyadic hierarchy; merging those is not supported.")
        if set(p.arrays) != set(parts[0].arrays):
            raise ConfigError("Releases hold different arrays; cannot merge.")
        if "seeds" in p.arrays and not np.array_equal(p["seeds"], parts[0]["seeds"]):
            raise ConfigError(
                f"Release {p.release_id!r} was built with other hash seeds; only sketches with equal seeds add up "
                "(pass seeds=<earlier release> when building them)."
            )
        if m["privacy"].get("unit_l2_bound") != first["privacy"].get("unit_l2_bound") or \
                m["privacy"].get("max_items_per_unit") != first["privacy"].get("max_items_per_unit"):
            raise ConfigError("Releases differ in their per-unit bounds; cannot merge.")
    table = "histogram" if "histogram" in parts[0].arrays else "sketch"
    arrays = {table: np.sum([p[table] for p in parts], axis=0)}
    if "seeds" in parts[0].arrays:
        arrays["seeds"] = parts[0]["seeds"].copy()

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
    rid = release_id or f"count_sketch-merged-{datetime.now(UTC).strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"
    manifest = {
        "schema_version": MANIFEST_SCHEMA_VERSION, "release_id": rid, "dataset_id": first["dataset_id"],
        "task": "count_sketch", "mechanism": first["mechanism"], "columns": first.get("columns"),
        "params": first.get("params"), "policies": first.get("policies"), "sketch": first["sketch"],
        "heavy_hitters": first.get("heavy_hitters"), "merged_from": [p.release_id for p in parts],
        "privacy": privacy, "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "library_version": __version__, "request_sha256": None, "config_sha256": None,
    }
    release = Release(release_id=rid, arrays=arrays, manifest=manifest)
    if output is not None:
        write_release(release, output)
    return release
