"""Releases: payload arrays + privacy metadata, written atomically.

Layout of a release directory ``<root>/<release_id>/``::

    manifest.json        metadata (schema below)
    <name>.parquet       one file per payload array, long format:
                         index columns i, j, k, … then ``value``, then
                         (arrays with an uncertainty) ``stderr``, ``low``,
                         ``high`` (float64; ``stderr`` null for bounds)

Manifest schema (version 2). Compatibility rules: never remove a field or
change its meaning; add only optional fields; readers accept every earlier
version. Payload files follow the same rule: a reader takes the index
columns by name (``i``, ``j``, …) and ``value``, and ignores columns it does
not know. Readers older than the error bars (before this rule) took every
other column for an index and cannot read files with ``stderr``/``low``/
``high``: upgrade readers before writers.

Version 2 (one vocabulary across families) adds to ``privacy``:

* ``noise_family`` — ``gaussian``, ``laplace``, ``wishart``,
  ``inverse_wishart`` or ``jl_projection``: what was added;
* ``noise_scale`` — the Gaussian σ or Laplace b of every noisy coordinate
  (a list for mechanisms with several Gaussian releases, e.g. AdaSSP's
  three), or null where the noise has no single additive scale (Wishart,
  JL, the tensor power method's data-dependent σ);
* ``max_rows_per_unit`` in sketch releases too.

Optional top-level ``uncertainty`` (added within version 2; a reader that
does not know it ignores it, and a manifest without it has no
uncertainty): ``{"level": 0.95, "arrays": {name: {"method", "kind",
"covers"}}}`` — the confidence level of every interval of the release and,
per array that has one, how it was derived (``method``, one sentence),
whether it claims nominal coverage (``kind: interval``) or holds with
probability at least the level (``kind: bound``), and what it covers
(``noise`` or ``noise+sampling``). The values are the array file's
``stderr``/``low``/``high`` columns (:mod:`spark_dp.release.uncertainty`).

Optional in version 2 (issue #16; absent from older manifests, which stay
readable): ``input`` — the input lineage (:mod:`spark_dp.release.lineage`):
``kind`` (``table``, ``files``, ``in_memory`` or ``unknown``), the tables
with their version where the source has one, and/or ``files_hmac_sha256``, a
digest of the input files' names, sizes and modification times keyed by the
ledger's secret lineage key (no size is recoverable from it). Never data.

Kept from version 1, deprecated: ``noise_sigma`` (= ``noise_scale`` of a
Gaussian release) and the sketches' ``max_items_per_unit`` (=
``max_rows_per_unit``). Read the noise with :func:`noise_of`, which
understands both versions.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import uuid
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from spark_dp.errors import ReleaseConflictError, SchemaError
from spark_dp.release import storage
from spark_dp.release.uncertainty import Uncertainty

log = logging.getLogger("spark_dp")

MANIFEST = "manifest.json"
MANIFEST_SCHEMA_VERSION = 2
_INDEX_NAMES = ("i", "j", "k", "l", "m", "n")
UNCERTAINTY_COLUMNS = ("stderr", "low", "high")
ESTIMATES = "estimates"  # count_sketch: interval("estimates", items=[...]), the named items' frequency estimates


class NoUncertaintyError(KeyError):
    """A release array has no uncertainty (or the release has no such array)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


@dataclass
class Release:
    """A released payload (numpy arrays) and its manifest."""

    release_id: str
    arrays: dict[str, np.ndarray]
    manifest: dict[str, Any]
    path: str | None = None
    reused: bool = field(default=False, compare=False)
    uncertainty: dict[str, Uncertainty] = field(default_factory=dict, compare=False)
    # On a re-run that returned a stored release: whether its input changed since (lineage differs);
    # None when it cannot be told (a new release, no lineage stored, or an in-memory input).
    input_changed: bool | None = field(default=None, compare=False)

    def __getitem__(self, name: str) -> np.ndarray:
        return self.arrays[name]

    @property
    def confidence(self) -> float | None:
        """The level of the release's intervals (None when it has none)."""
        block = self.manifest.get("uncertainty")
        return None if not block else float(block["level"])

    def uncertainty_of(self, name: str, items: Any = None) -> Uncertainty:
        """The :class:`Uncertainty` of array ``name``; NoUncertaintyError (a KeyError) naming it if it has none.

        count_sketch releases: ``uncertainty_of("estimates", items=[...])`` is
        that of the named items' frequency estimates (post-processing of the
        released table, :func:`spark_dp.sketch.uncertainty.estimate_bounds`):
        a ``bound`` covering noise and hash collisions for hashed sketches,
        an exact ``interval`` for a histogram, ``none`` (NaN, the reason in
        ``method``) where the release refuses it.
        """
        if self._asks_estimates(name, items):
            return self._estimates(name, items)[0]
        if name not in self.arrays:
            raise NoUncertaintyError(f"Release {self.release_id!r} has no array {name!r}; "
                                     f"its arrays are {sorted(self.arrays)}.")
        if name not in self.uncertainty:
            have = sorted(self.uncertainty)
            raise NoUncertaintyError(
                f"Array {name!r} of release {self.release_id!r} has no uncertainty "
                + (f"(arrays with one: {have})." if have else "(the release has none: made before error bars, "
                   "or by a mechanism without them)."))
        return self.uncertainty[name]

    def interval(self, name: str, items: Any = None) -> tuple[np.ndarray, np.ndarray]:
        """(low, high) of array ``name`` at the release's level (``confidence``); see :meth:`uncertainty_of`.

        NoUncertaintyError with the reason when the release refused its interval (kind ``none``); for
        ``interval("estimates", items=[...])`` also when some of the items have none (each named with its reason).
        """
        u = self._stated(name, items)
        return u.low, u.high

    def _asks_estimates(self, name: str, items: Any) -> bool:
        return items is not None or (name == ESTIMATES and name not in self.arrays
                                     and self.manifest.get("task") == "count_sketch")

    def _estimates(self, name: str, items: Any) -> tuple[Uncertainty, dict[int, str], list]:
        """The named items' estimate uncertainty, the refused positions with their reasons, and the items."""
        from spark_dp.errors import ConfigError

        if self.manifest.get("task") != "count_sketch" or name != ESTIMATES:
            raise ConfigError(f"The 'items' parameter applies to 'estimates' of a count_sketch release only. Got "
                              f"name {name!r} for release {self.release_id!r} (task {self.manifest.get('task')!r}).")
        if items is None or isinstance(items, str | bytes):
            raise ConfigError(f"The 'items' parameter of {name!r} must be a list of items to estimate. Got "
                              f"{items!r} instead.")
        from spark_dp.sketch.estimate import SketchView, coerce_items
        from spark_dp.sketch.uncertainty import estimate_bounds

        items = coerce_items(list(items), SketchView.of(self).kind)
        got = estimate_bounds(self, items)
        covers = "noise" if got.covers == "noise" else "noise+collisions"
        u = Uncertainty(got.low, got.high, None if got.kind == "bound" else got.stderr, got.method, kind=got.kind,
                        covers=covers)
        return u, got.refused(), items

    def _stated(self, name: str, items: Any = None) -> Uncertainty:
        if self._asks_estimates(name, items):
            u, refused, items = self._estimates(name, items)
            if u.kind == "none":
                raise NoUncertaintyError(f"The estimates of release {self.release_id!r} have no interval: {u.method}")
            if refused:
                said = "; ".join(f"{items[i]!r}: {why}" for i, why in refused.items())
                raise NoUncertaintyError(f"{len(refused)} of the {len(items)} item(s) have no interval in release "
                                         f"{self.release_id!r} ({said}); to_pandas('estimates', items=...) gives "
                                         "the others, NaN for these")
            return u
        u = self.uncertainty_of(name)
        if u.kind == "none":
            raise NoUncertaintyError(f"Array {name!r} of release {self.release_id!r} has no interval: {u.method}")
        return u

    def stderr(self, name: str, items: Any = None) -> np.ndarray:
        """The standard error of each entry of array ``name``; NoUncertaintyError if it has none (or a bound).

        ``stderr("estimates", items=[...])`` for a count_sketch release: a histogram's estimates have one (exact
        noise); a hashed sketch's bound (noise and collisions) has none.
        """
        u = self._stated(name, items)
        if u.stderr is None:
            what = f"Array {name!r} of release {self.release_id!r} has" if name != ESTIMATES else \
                f"The estimates of release {self.release_id!r} have"
            raise NoUncertaintyError(f"{what} a bound ({u.method}), "
                                     "not a standard error; use interval().")
        return u.stderr

    @property
    def privacy(self) -> dict[str, Any]:
        return self.manifest["privacy"]

    def to_pandas(self, name: str, items: Any = None):
        """Array ``name`` as a pandas DataFrame: labelled entries with ``value``, ``stderr``, ``low``, ``high``.

        One row per entry; its position is named from the manifest (feature
        columns for coefficients and matrix rows/columns, ``component``,
        ``repetition``/``bucket``…; :mod:`spark_dp.release.frame`). Error
        columns are NaN where the array has none (``stderr`` also for bounds).
        count_sketch releases also give ``to_pandas("heavy_hitters")`` and
        ``to_pandas("estimates", items=[...])``.

        Args:
            name: a payload array (``rel.arrays``), or for sketches ``heavy_hitters`` / ``estimates``.
            items: the items to estimate, with ``estimates`` only.
        """
        from spark_dp.release.frame import to_pandas

        return to_pandas(self, name, items)

    def __repr__(self) -> str:
        shapes = {k: v.shape for k, v in self.arrays.items()}
        return f"Release(id={self.release_id!r}, arrays={shapes}, path={self.path!r}, reused={self.reused})"

    def __post_init__(self) -> None:
        for name, u in self.uncertainty.items():
            if name not in self.arrays or u.shape != np.shape(self.arrays[name]):
                raise RuntimeError(f"bug: uncertainty of {name!r} does not match a payload array of that shape")


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


def array_to_table(array: np.ndarray, uncertainty: Uncertainty | None = None) -> pa.Table:
    """Long format: one row per entry, index columns then ``value`` (then ``stderr``, ``low``, ``high``)."""
    array = np.asarray(array, dtype=np.float64)
    if array.ndim > len(_INDEX_NAMES):
        raise ValueError(f"arrays of more than {len(_INDEX_NAMES)} dimensions are not supported")
    idx = np.indices(array.shape).reshape(array.ndim, -1)
    cols = {name: pa.array(idx[a].astype(np.int32)) for a, name in enumerate(_INDEX_NAMES[: array.ndim])}
    cols["value"] = pa.array(array.reshape(-1))
    if uncertainty is not None:
        se = uncertainty.stderr
        cols["stderr"] = pa.nulls(array.size, pa.float64()) if se is None else pa.array(se.reshape(-1))
        cols["low"] = pa.array(uncertainty.low.reshape(-1))
        cols["high"] = pa.array(uncertainty.high.reshape(-1))
    return pa.table(cols)


def table_to_array(table: pa.Table) -> np.ndarray:
    """The inverse of :func:`array_to_table`: long format (index columns, ``value``) back to an array."""
    return _column_to_array(table, "value")


def _column_to_array(table: pa.Table, column: str, shape: tuple[int, ...] | None = None) -> np.ndarray:
    # Index columns by name only: a column this reader does not know (added by a later version, as
    # stderr/low/high once were) is ignored, never taken for an index (readers before the error bars
    # did that and fail on such files with an IndexError).
    names = [n for n in table.column_names if n in _INDEX_NAMES]
    values = np.asarray(table.column(column).to_numpy(zero_copy_only=False), dtype=np.float64)
    if not names:
        return values.reshape(())
    idx = [table.column(n).to_numpy() for n in names]
    found = tuple(int(i.max()) + 1 if i.size else 0 for i in idx)
    if shape is None or len(shape) != len(found):
        shape = found
    out = np.zeros(shape, dtype=np.float64)  # trailing zero-size or all-index-absent cases: zeros
    out[tuple(idx)] = values
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


def release_exists(path: str) -> bool:
    """Whether ``path`` (a directory or URI) holds a release: its manifest, the commit marker, is there."""
    return storage.is_file(storage.locate(path).child(MANIFEST))


def _write_table(directory: storage.Location, fname: str, table: pa.Table) -> None:
    """Writes one payload table (every payload file goes through here, local or remote)."""
    where = directory.child(fname)
    pq.write_table(table, where.path, filesystem=None if where.local else where.fs)


def _read_table(directory: storage.Location, fname: str) -> pa.Table:
    """Reads one payload table written by :func:`_write_table`."""
    where = directory.child(fname)
    return pq.read_table(where.path, filesystem=None if where.local else where.fs)


def _stage(release: Release, directory: storage.Location) -> dict[str, Any]:
    """Writes the payload files into ``directory``; returns the manifest that lists them."""
    files = {}
    for name, arr in release.arrays.items():
        fname = f"{name}.parquet"
        _write_table(directory, fname, array_to_table(arr, release.uncertainty.get(name)))
        files[name] = {"file": fname, "shape": list(np.shape(arr))}
    manifest = dict(release.manifest)
    manifest["payload"] = files
    described = set((manifest.get("uncertainty") or {}).get("arrays", {}))
    if described != set(release.uncertainty):
        raise RuntimeError(f"bug: the manifest's uncertainty block names {sorted(described)}, "
                           f"the release has uncertainty for {sorted(release.uncertainty)}")
    return manifest


def _manifest_bytes(manifest: dict[str, Any]) -> bytes:
    return json.dumps(manifest, indent=2, sort_keys=True).encode("utf-8")


def _conflict(final: str) -> ReleaseConflictError:
    return ReleaseConflictError(f"Release directory {final!r} exists already; releases are never overwritten.")


def write_release(release: Release, root: str) -> str:
    """Writes ``release`` under ``root/<release_id>``; returns its path (a URI for a remote ``root``).

    Readers never see half a release. On the driver's disk the files go to a
    hidden temporary directory, are fsynced, and the directory is renamed into
    place. On a store without an atomic directory rename (``s3://``, ``gs://``,
    and every remote store, for one protocol everywhere) the payload files are
    written under a hidden temporary prefix ``root/.tmp-<id>-<uuid>/``, moved
    to ``root/<release_id>/``, and the manifest is moved there last: it is the
    commit marker, and a release without one is absent to every reader
    (:func:`release_exists`, :func:`load_release`). A write that crashes leaves
    at most a temporary prefix and payload files without a manifest, both
    ignored; a later write of the same id replaces them.
    """
    if storage.is_local(root):
        return _write_local(release, root)
    return _write_remote(release, root)


def _write_local(release: Release, root: str) -> str:
    local = storage.locate(root)
    os.makedirs(local.path, exist_ok=True)
    final = os.path.join(root, release.release_id)
    if os.path.exists(local.child(release.release_id).path):
        raise _conflict(final)
    tmp = local.child(f".tmp-{release.release_id}-{uuid.uuid4().hex}")
    os.makedirs(tmp.path)
    try:
        manifest = _stage(release, tmp)
        with open(tmp.child(MANIFEST).path, "wb") as fh:
            fh.write(_manifest_bytes(manifest))
            fh.flush()
            os.fsync(fh.fileno())
        for fname in os.listdir(tmp.path):
            with open(tmp.child(fname).path, "rb") as fh:
                os.fsync(fh.fileno())
        _fsync_dir(tmp.path)
        os.rename(tmp.path, local.child(release.release_id).path)
        _fsync_dir(local.path)
    except BaseException:
        shutil.rmtree(tmp.path, ignore_errors=True)
        raise
    release.manifest = manifest
    release.path = final
    return final


def _publish(src: storage.Location, dst: storage.Location) -> None:
    """Moves one staged file into the release directory (visible whole: a copy or a rename, never a stream)."""
    if storage.is_file(dst):  # payload of a write that crashed before its manifest (HDFS refuses to rename over it)
        dst.fs.delete_file(dst.path)
    try:
        dst.fs.move(src.path, dst.path)
    except (NotImplementedError, OSError):  # e.g. Azure without a hierarchical namespace: server-side copy
        dst.fs.copy_file(src.path, dst.path)


def _write_remote(release: Release, root: str) -> str:
    base = storage.locate(root)
    final = storage.join(root, release.release_id)
    dest = base.child(release.release_id)
    if storage.is_file(dest.child(MANIFEST)):
        raise _conflict(final)
    tmp = base.child(f".tmp-{release.release_id}-{uuid.uuid4().hex}")
    try:
        if not storage.is_object_store(base):
            base.fs.create_dir(tmp.path, recursive=True)
            base.fs.create_dir(dest.path, recursive=True)
        manifest = _stage(release, tmp)
        storage.write_bytes(tmp.child(MANIFEST), _manifest_bytes(manifest))
        for info in manifest["payload"].values():
            _publish(tmp.child(info["file"]), dest.child(info["file"]))
        _publish(tmp.child(MANIFEST), dest.child(MANIFEST))  # the commit marker: last
    finally:
        try:
            storage.delete_dir(tmp)
        except OSError:  # the release (or the error being raised) stands; a stale prefix is ignored by readers
            log.warning("could not delete the temporary prefix %s", tmp.path)
    release.manifest = manifest
    release.path = final
    return final


def load_release(path: str) -> Release:
    """Reads a release written by :func:`write_release` (a directory or a URI such as ``s3://bucket/prefix/<id>``).

    Raises:
        SchemaError: ``path`` holds no manifest (a write that crashed before its commit marker included).
    """
    where = storage.locate(path)
    if not storage.is_file(where.child(MANIFEST)):
        raise SchemaError(f"{path!r} is not a spark-dp release directory (no {MANIFEST}).")
    manifest = json.loads(storage.read_bytes(where.child(MANIFEST)))
    arrays, uncertainty = {}, {}
    described = (manifest.get("uncertainty") or {}).get("arrays", {})
    for name, info in manifest.get("payload", {}).items():
        table = _read_table(where, info["file"])
        shape = tuple(info["shape"]) if "shape" in info else None
        arrays[name] = _column_to_array(table, "value", shape)
        if name in described and set(UNCERTAINTY_COLUMNS) <= set(table.column_names):
            low, high = (_column_to_array(table, c, arrays[name].shape) for c in ("low", "high"))
            se = None if table.column("stderr").null_count == table.num_rows and table.num_rows else (
                _column_to_array(table, "stderr", arrays[name].shape))
            d = described[name]
            uncertainty[name] = Uncertainty(low, high, se, d["method"], kind=d.get("kind", "interval"),
                                            covers=d.get("covers", "noise"), target=d.get("target"))
    return Release(release_id=manifest["release_id"], arrays=arrays, manifest=manifest, path=path,
                   uncertainty=uncertainty)
