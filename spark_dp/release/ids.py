"""Release ids and request digests: the one owner of both (issue #13).

* :func:`check_release_id` — the release-id rule every entry point applies
  (API, jobs, non-private runs, merges): a non-empty string that names one
  directory under the output root, so no ``/`` (nor the platform's
  separator) and no leading ``.`` (hidden and temporary directories are the
  writer's).
* :func:`new_release_id` — ``<task>-<UTC time>-<8 hex>`` for a release
  without one.
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
