"""Bounded caches of prepared row blocks: shared by a host's Python workers, or inside each one.

Spark reuses its Python worker processes between tasks
(``spark.python.worker.reuse``, true by default), and a module imported in a
worker stays imported there. Iterative passes over the same Parquet rows
(the power method's rounds) keep each work unit's clipped, policy-applied
float64 rows here, so a later round that lands on the same worker does only
BLAS instead of reading and decoding the file again.

* **Key**: everything the rows depend on: the file's URI, size and
  modification time (read in the task through ``pyarrow.fs``; local files
  also their inode and status-change time), the unit's
  row-group share (part, parts), the columns, the layout, d, the norm bound
  and the non-finite policy. A changed file has a new size or time, so it
  is read again (and the stale entry dropped), never served stale.
* **Bound**: at most ``cap`` bytes of rows per worker process (the caller
  passes it each time); least recently used units are evicted first; a unit
  larger than the cap is never stored. Memory on an executor is at most the
  cap times its Python workers (one per running task). Spark kills Python
  workers idle for about a minute, which frees their cache.
* **Never mutated**: stored arrays are read-only (``writeable = False``).
* **Never needed**: a unit that is not here (another worker ran it before,
  it was evicted, first round) is read from its file; results never depend
  on the cache, only speed does.

The per-worker store above (:class:`BlockCache`) is the fallback. **Shared by
the workers of a host** (:class:`HostCache`, used first when
Spark gives the worker its local directories in ``SPARK_LOCAL_DIRS``, as it
does for every Python worker): the prepared rows of a unit are one file
``<SPARK_LOCAL_DIRS[0]>/spark-dp-rows/<key hash>.rows`` of raw float64 rows,
written once and mapped read-only by every worker of
the host that runs the unit later. Spark chooses which idle worker runs a
task, so without sharing a later round often lands on a worker that has not
seen the unit, and each worker ends up holding its own copy of everything.
With it, one copy per host lives in the page cache (the kernel's memory,
written back to the local disk under pressure), any worker hits it from the
second pass on, and Spark deletes the directory with its block manager's
when the application stops.

* **Bound**: ``cap`` bytes of files per host; the least recently used files
  are deleted first (a worker that still maps a deleted file keeps reading
  it until it drops the mapping; it drops it at its next lookup).
* **Atomic**: a file is written under a temporary name with plain writes as
  the blocks are prepared (no second copy of the rows in the worker; a full
  disk is an ``OSError``, never a ``SIGBUS`` as through a writable map) and
  renamed into place complete; readers never see a partial file. An
  ``OSError`` while writing leaves the unit uncached (it is read from its
  file next time); one before writing falls back to the per-worker cache.
* **Private**: the directory is created owner-only (0700) and each file
  0600: the rows are the data set's clipped rows, readable only by the
  user Spark's workers run as (like Spark's own shuffle files there).
* The key hash covers the same fields as the per-worker key, so a changed
  file gets new names and its old files are deleted at the next lookup.

Pure numpy/pyarrow; no Spark, no privacy.
"""

from __future__ import annotations

import hashlib
import os
import time
import uuid
from collections import OrderedDict
from collections.abc import Hashable, Sequence

import numpy as np

#: Default cap of the cache (bytes of cached float64 rows): per host for the shared files, else per worker process.
DEFAULT_CACHE_BYTES = 2 << 30


class BlockCache:
    """LRU map from a unit key to one read-only (n, d) float64 array."""

    def __init__(self) -> None:
        self._entries: OrderedDict[Hashable, np.ndarray] = OrderedDict()
        self.nbytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable) -> np.ndarray | None:
        rows = self._entries.get(key)
        if rows is not None:
            self._entries.move_to_end(key)
        return rows

    def shrink(self, cap: int) -> None:
        """Evicts least recently used entries until at most ``cap`` bytes remain."""
        while self._entries and self.nbytes > cap:
            _, rows = self._entries.popitem(last=False)
            self.nbytes -= rows.nbytes

    def reserve(self, nbytes: int, cap: int) -> bool:
        """Makes room for ``nbytes`` under ``cap``; False when it can never fit."""
        if nbytes > cap:
            return False
        self.shrink(cap - nbytes)
        return True

    def put(self, key: Hashable, rows: np.ndarray, cap: int) -> bool:
        """Stores ``rows`` (made read-only) unless larger than ``cap``; True if stored."""
        self.drop(key)
        if not self.reserve(rows.nbytes, cap):
            return False
        rows.flags.writeable = False
        self._entries[key] = rows
        self.nbytes += rows.nbytes
        return True

    def drop(self, key: Hashable) -> None:
        rows = self._entries.pop(key, None)
        if rows is not None:
            self.nbytes -= rows.nbytes

    def drop_where(self, pred) -> int:
        """Drops every entry whose key satisfies ``pred``; returns how many."""
        gone = [k for k in self._entries if pred(k)]
        for k in gone:
            self.drop(k)
        return len(gone)


#: The cache of this process (one per Python worker).
CACHE = BlockCache()


def file_version(uri: str) -> tuple[int, ...]:
    """The version of the file at ``uri``: (size, mtime in ns), read through ``pyarrow.fs`` (errors propagate).

    Local files add their inode and status-change time (``st_ctime_ns``,
    which a rewrite or rename always moves and ``utime`` cannot set back), so
    a same-size rewrite within the file system's mtime resolution is caught
    too. Other stores give what ``pyarrow.fs`` reports (size and time).
    """
    import pyarrow.fs as pafs

    fs, path = pafs.FileSystem.from_uri(uri)
    info = fs.get_file_info(path)
    if info.type != pafs.FileType.File:
        raise FileNotFoundError(f"{uri!r} is not a file")
    version: tuple[int, ...] = (int(info.size or 0), int(info.mtime_ns or 0))
    if isinstance(fs, pafs.LocalFileSystem):
        st = os.stat(path)
        version += (int(st.st_ino), int(st.st_ctime_ns))
    return version


def unit_key(unit: tuple[str, int, int], version: tuple[int, ...], columns: Sequence[str], layout: str, d: int,
             norm_bound: float, nonfinite: str) -> tuple:
    """The cache key of one unit's prepared rows: ``(uri, version, part, parts, columns, layout, d, B, policy)``."""
    uri, part, parts = unit
    return (uri, tuple(version), int(part), int(parts), tuple(columns), layout, int(d), float(norm_bound), nonfinite)


def drop_stale(key: tuple) -> int:
    """Drops ``key``'s file at any other version, here and in the host's files: it can never be hit again."""
    return CACHE.drop_where(lambda k: k[0] == key[0] and k[1] != key[1]) + HOST.drop_stale(key)


def worker_id() -> int:
    return os.getpid()


# -- the cache shared by the Python workers of one host ---------------------------
HOST_SUBDIR = "spark-dp-rows"
_SUFFIX = ".rows"
_TMP = ".tmp-"
_STALE_TMP_SECONDS = 3600.0  # a temporary file this old belongs to a worker that died while writing


def host_dir() -> str | None:
    """The shared directory of this host: under the first of ``SPARK_LOCAL_DIRS`` (None outside Spark workers).

    ``SPARK_DP_HOST_CACHE=off`` in the workers' environment
    (``spark.executorEnv.SPARK_DP_HOST_CACHE``) turns the shared files off:
    each worker then keeps its own rows.
    """
    if os.environ.get("SPARK_DP_HOST_CACHE", "").strip().lower() in ("off", "0", "false", "no"):
        return None
    first = os.environ.get("SPARK_LOCAL_DIRS", "").split(",")[0].strip()
    return os.path.join(first, HOST_SUBDIR) if first else None


def _h(value, n: int) -> str:
    return hashlib.sha256(repr(value).encode()).hexdigest()[:n]


def file_prefix(key: tuple) -> str:
    """``<uri hash>-<version hash>-<rest hash>`` of a :func:`unit_key`."""
    return f"{_h(key[0], 16)}-{_h(tuple(key[1]), 12)}-{_h(tuple(key[2:]), 16)}"


class HostWriter:
    """Streams one unit's prepared blocks into a temporary file, then renames it into place complete.

    Plain ``write`` calls (a full disk is an ``OSError`` there, never a
    ``SIGBUS`` as with a writable map); any error leaves the unit uncached.
    """

    def __init__(self, key: tuple, tmp: str, f, rows: int) -> None:
        self.key, self.tmp, self._f, self._left = key, tmp, f, rows

    def write(self, X: np.ndarray) -> bool:
        """Appends rows; False (and the file is dropped) when they exceed the reserved count or cannot be written."""
        if self._f is None:
            return False
        self._left -= X.shape[0]
        try:
            if self._left < 0:
                raise OSError("more rows than the unit's metadata said")
            self._f.write(memoryview(np.ascontiguousarray(X, dtype=np.float64)).cast("B"))
            return True
        except OSError:
            self.abandon()
            return False

    def commit(self) -> bool:
        """Publishes the rows written under the unit's name (False: left uncached)."""
        if self._f is None:
            return False
        try:
            size = self._f.tell()
            self._f.close()
            self._f = None
            if size <= 0:
                raise OSError("nothing to cache")
            os.replace(self.tmp, os.path.join(os.path.dirname(self.tmp), file_prefix(self.key) + _SUFFIX))
            return True
        except OSError:
            self.abandon()
            return False

    def abandon(self) -> None:
        if self._f is not None:
            try:
                self._f.close()
            except OSError:
                pass
            self._f = None
        HostCache.abandon(self.tmp)


class HostCache:
    """Read-only memory-mapped row files shared by the Python workers of one host (see the module text)."""

    def __init__(self) -> None:
        self._maps: dict[str, np.ndarray] = {}  # this process's mappings, by file path

    # -- reading ----------------------------------------------------------------
    def _files(self, root: str):
        try:
            return [e for e in os.scandir(root) if e.is_file(follow_symlinks=False)]
        except OSError:
            return []

    def get(self, key: tuple) -> np.ndarray | None:
        """The unit's rows mapped read-only, or None (no directory, not cached, unreadable)."""
        root = host_dir()
        if root is None:
            return None
        path = os.path.join(root, file_prefix(key) + _SUFFIX)
        d = int(key[6])
        try:
            size = os.stat(path).st_size
            os.utime(path)  # least recently used goes first
        except OSError:
            self._maps.pop(path, None)
            return None
        rows = self._maps.get(path)
        if rows is None or rows.nbytes != size:
            m = size // (8 * d) if d > 0 else 0
            if m <= 0 or m * 8 * d != size:
                return None
            try:
                rows = np.asarray(np.memmap(path, dtype=np.float64, mode="r", shape=(m, d)))  # a plain read-only view
            except (OSError, ValueError):
                return None
            self._maps[path] = rows
        return rows

    def forget_missing(self) -> None:
        """Drops this process's mappings of files another worker deleted (frees their pages)."""
        for path in [p for p in self._maps if not os.path.exists(p)]:
            del self._maps[path]

    # -- writing ----------------------------------------------------------------
    def create(self, key: tuple, rows: int, cap: int) -> HostWriter | None:
        """A writer of at most ``rows`` rows to a new temporary file, room made under ``cap``; None if it cannot be."""
        root = host_dir()
        d = int(key[6])
        nbytes = rows * d * 8
        if root is None or rows <= 0 or d <= 0 or nbytes > cap:
            return None
        tmp = os.path.join(root, f"{_TMP}{os.getpid()}-{uuid.uuid4().hex}")
        try:
            os.makedirs(root, mode=0o700, exist_ok=True)  # the rows are private data: owner only, like the files
            self.shrink(cap - nbytes)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            return HostWriter(key, tmp, os.fdopen(fd, "wb", buffering=0), rows)
        except OSError:
            self.abandon(tmp)
            return None

    @staticmethod
    def abandon(tmp: str) -> None:
        try:
            os.unlink(tmp)
        except OSError:
            pass

    # -- bounding and dropping --------------------------------------------------
    def nbytes(self) -> int:
        root = host_dir()
        return 0 if root is None else sum(self._size(e) for e in self._files(root))

    @staticmethod
    def _size(e) -> int:
        try:
            return e.stat(follow_symlinks=False).st_size
        except OSError:
            return 0

    def shrink(self, limit: int) -> None:
        """Deletes least recently used row files (and dead workers' temporaries) until at most ``limit`` bytes remain."""
        root = host_dir()
        if root is None:
            return
        now = time.time()
        entries = []
        for e in self._files(root):
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            if e.name.startswith(_TMP):
                if now - st.st_mtime > _STALE_TMP_SECONDS:
                    self.abandon(e.path)
                else:
                    entries.append((float("inf"), st.st_size, None))  # being written: counted, never deleted
            elif e.name.endswith(_SUFFIX):
                entries.append((st.st_mtime, st.st_size, e.path))
        total = sum(size for _, size, _ in entries)
        for _, size, path in sorted(entries, key=lambda t: t[0]):
            if total <= limit or path is None:
                break
            self.abandon(path)
            total -= size
        self.forget_missing()

    def drop_where(self, pred) -> int:
        """Deletes the row files whose name satisfies ``pred``; returns how many."""
        root = host_dir()
        if root is None:
            return 0
        gone = 0
        for e in self._files(root):
            if e.name.endswith(_SUFFIX) and pred(e.name):
                try:
                    os.unlink(e.path)
                    gone += 1
                except OSError:
                    pass
        self.forget_missing()
        return gone

    def drop_stale(self, key: tuple) -> int:
        """Deletes the files of ``key``'s Parquet file at any other version."""
        uri_h, ver_h = _h(key[0], 16), _h(tuple(key[1]), 12)
        return self.drop_where(lambda name: name.startswith(uri_h + "-") and not name.startswith(f"{uri_h}-{ver_h}-"))

    def drop_uris(self, uris: Sequence[str] | None) -> int:
        """Deletes the files of ``uris`` (all if None)."""
        wanted = None if uris is None else {_h(u, 16) for u in uris}
        return self.drop_where(lambda name: wanted is None or name.split("-", 1)[0] in wanted)


#: The shared cache as seen from this process.
HOST = HostCache()
