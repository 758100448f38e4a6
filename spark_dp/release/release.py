"""Releases: payload arrays + privacy metadata, written atomically.

Layout of a release directory ``<root>/<release_id>/``::

    manifest.json        metadata (schema below)
    <name>.parquet       one file per payload array, long format:
                         index columns i, j, k, … then ``value``

Manifest schema (version 2). Compatibility rules: never remove a field or
change its meaning; add only optional fields; readers accept every earlier
version.

Version 2 (one vocabulary across families) adds to ``privacy``:

* ``noise_family`` — ``gaussian``, ``laplace``, ``wishart``,
  ``inverse_wishart`` or ``jl_projection``: what was added;
* ``noise_scale`` — the Gaussian σ or Laplace b of every noisy coordinate
  (a list for mechanisms with several Gaussian releases, e.g. AdaSSP's
  three), or null where the noise has no single additive scale (Wishart,
  JL, the tensor power method's data-dependent σ);
* ``max_rows_per_unit`` in sketch releases too.

Optional in version 2 (issue #16; absent from older manifests, which stay
readable): ``input`` — the input lineage (:mod:`spark_dp.release.lineage`):
``kind`` (``table``, ``files``, ``in_memory`` or ``unknown``), the tables
with their version where the source has one, and/or ``files_sha256``, a
digest of the input files' names, sizes and modification times. Never data.

Kept from version 1, deprecated: ``noise_sigma`` (= ``noise_scale`` of a
Gaussian release) and the sketches' ``max_items_per_unit`` (=
``max_rows_per_unit``). Read the noise with :func:`noise_of`, which
understands both versions.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from spark_dp.errors import ReleaseConflictError, SchemaError

MANIFEST = "manifest.json"
MANIFEST_SCHEMA_VERSION = 2
_INDEX_NAMES = ("i", "j", "k", "l", "m", "n")


@dataclass
class Release:
    """A released payload (numpy arrays) and its manifest."""

    release_id: str
    arrays: dict[str, np.ndarray]
    manifest: dict[str, Any]
    path: str | None = None
    reused: bool = field(default=False, compare=False)
    # On a re-run that returned a stored release: whether its input changed since (lineage differs);
    # None when it cannot be told (a new release, no lineage stored, or an in-memory input).
    input_changed: bool | None = field(default=None, compare=False)

    def __getitem__(self, name: str) -> np.ndarray:
        return self.arrays[name]

    @property
    def privacy(self) -> dict[str, Any]:
        return self.manifest["privacy"]

    def __repr__(self) -> str:
        shapes = {k: v.shape for k, v in self.arrays.items()}
        return f"Release(id={self.release_id!r}, arrays={shapes}, path={self.path!r}, reused={self.reused})"


def noise_of(privacy: dict[str, Any]) -> tuple[str | None, Any]:
    """(noise family, noise scale) of a manifest's ``privacy`` fields, schema 2 or 1.

    Schema 1 manifests state the family only in the free-text ``noise``
    field and the scale as ``noise_sigma`` (Gaussian) or ``noise_scale``
    (Laplace).
    """
    if "noise_family" in privacy:
        return privacy["noise_family"], privacy.get("noise_scale")
    text = str(privacy.get("noise", ""))
    if text.startswith("gaussian"):
        return "gaussian", privacy.get("noise_sigma")
    if text.startswith("laplace"):
        return "laplace", privacy.get("noise_scale")
    return None, None


def array_to_table(array: np.ndarray) -> pa.Table:
    """Long format: one row per entry, index columns then ``value``."""
    array = np.asarray(array, dtype=np.float64)
    if array.ndim > len(_INDEX_NAMES):
        raise ValueError(f"arrays of more than {len(_INDEX_NAMES)} dimensions are not supported")
    idx = np.indices(array.shape).reshape(array.ndim, -1)
    cols = {name: pa.array(idx[a].astype(np.int32)) for a, name in enumerate(_INDEX_NAMES[: array.ndim])}
    cols["value"] = pa.array(array.reshape(-1))
    return pa.table(cols)


def table_to_array(table: pa.Table) -> np.ndarray:
    """The inverse of :func:`array_to_table`: long format (index columns, ``value``) back to an array."""
    names = [n for n in table.column_names if n != "value"]
    if not names:
        return np.asarray(table.column("value").to_numpy(), dtype=np.float64).reshape(())
    idx = [table.column(n).to_numpy() for n in names]
    shape = tuple(int(i.max()) + 1 if i.size else 0 for i in idx)
    out = np.zeros(shape, dtype=np.float64)
    out[tuple(idx)] = table.column("value").to_numpy()
    return out


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_release(release: Release, root: str) -> str:
    """Writes ``release`` under ``root/<release_id>`` atomically; returns the path.

    Files go to a hidden temporary directory first, are fsynced, and the
    directory is renamed into place, so a reader never sees half a release.
    """
    os.makedirs(root, exist_ok=True)
    final = os.path.join(root, release.release_id)
    if os.path.exists(final):
        raise ReleaseConflictError(f"Release directory {final!r} exists already; releases are never overwritten.")
    tmp = os.path.join(root, f".tmp-{release.release_id}-{uuid.uuid4().hex}")
    os.makedirs(tmp)
    try:
        files = {}
        for name, arr in release.arrays.items():
            fname = f"{name}.parquet"
            pq.write_table(array_to_table(arr), os.path.join(tmp, fname))
            files[name] = {"file": fname, "shape": list(np.shape(arr))}
        manifest = dict(release.manifest)
        manifest["payload"] = files
        with open(os.path.join(tmp, MANIFEST), "w") as fh:
            json.dump(manifest, fh, indent=2, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        for fname in os.listdir(tmp):
            with open(os.path.join(tmp, fname), "rb") as fh:
                os.fsync(fh.fileno())
        _fsync_dir(tmp)
        os.rename(tmp, final)
        _fsync_dir(root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    release.manifest = manifest
    release.path = final
    return final


def load_release(path: str) -> Release:
    """Reads a release directory written by :func:`write_release`."""
    mpath = os.path.join(path, MANIFEST)
    if not os.path.isfile(mpath):
        raise SchemaError(f"{path!r} is not a spark-dp release directory (no {MANIFEST}).")
    with open(mpath) as fh:
        manifest = json.load(fh)
    arrays = {}
    for name, info in manifest.get("payload", {}).items():
        arr = table_to_array(pq.read_table(os.path.join(path, info["file"])))
        shape = tuple(info.get("shape", arr.shape))
        if arr.shape != shape:  # trailing zero-size or all-index-absent cases
            full = np.zeros(shape)
            full[tuple(slice(0, s) for s in arr.shape)] = arr
            arr = full
        arrays[name] = arr
    return Release(release_id=manifest["release_id"], arrays=arrays, manifest=manifest, path=path)
