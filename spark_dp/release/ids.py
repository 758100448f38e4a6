"""Release ids and request digests: the one owner of both (issue #13).

* :func:`check_release_id` — the release-id rule every entry point applies
  (API, jobs, non-private runs, merges): a non-empty string that names one
  directory under the output root, so no ``/`` (nor the platform's
  separator) and no leading ``.`` (hidden and temporary directories are the
  writer's).
* :func:`default_release_id` — the id of a private release called without
  one: ``<task>-<16 hex>``, a digest of the dataset id, the request digest
  and the input's lineage (:mod:`spark_dp.release.lineage`). The same call on
  the same input therefore finds its earlier release in the ledger and
  returns it (no new noise, no second charge: a re-run notebook cell spends
  once); another parameter, another dataset or changed input files / table
  versions give another id, so a new release. An input with nothing to
  fingerprint (a DataFrame built in memory) counts as unchanged: a new
  release of it needs an explicit new ``release_id``.
* :func:`new_release_id` — ``<task>-<UTC time>-<8 hex>``, for releases that
  charge nothing (non-private and public-input runs) and merged sketches.
* :func:`canonical_sha256` — the digest of a request or config: SHA-256 of
  its canonical JSON (sorted keys, no spaces), so equal requests hash equal
  whatever their key order.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from datetime import UTC, datetime
from typing import Any

from spark_dp import _validation as V
from spark_dp.errors import ConfigError


def canonical_sha256(obj: Any) -> str:
    """SHA-256 of the canonical JSON of ``obj`` (sorted keys, no spaces)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()


def check_release_id(release_id: Any, *, owner: str) -> str:
    """``release_id`` if it names one directory under the output root; ConfigError naming it otherwise."""
    release_id = V.check_str("release_id", release_id, owner=owner)
    if "/" in release_id or os.sep in release_id or release_id.startswith("."):
        raise ConfigError(f"The 'release_id' parameter must not contain '/' or start with '.'. Got {release_id!r} instead.")
    return release_id


def new_release_id(task: str) -> str:
    """A fresh release id: ``<task>-<UTC yyyymmddThhmmss>-<8 hex>``."""
    return f"{task}-{datetime.now(UTC).strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"


def default_release_id(task: str, dataset_id: str, request_sha256: str, lineage: Any) -> str:
    """The release id of a call without one: ``<task>-<first 16 hex of a digest of dataset, request and input>``."""
    digest = canonical_sha256({"dataset_id": dataset_id, "request_sha256": request_sha256, "input": lineage})
    return f"{task}-{digest[:16]}"
