"""A bounded cache of prepared row blocks inside each Python worker process.

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

Pure numpy/pyarrow; no Spark, no privacy.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Hashable, Sequence

import numpy as np

#: Default cap per Python worker process (bytes of cached float64 rows).
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
    """Drops every entry of ``key``'s file whose version differs: they can never be hit again."""
    return CACHE.drop_where(lambda k: k[0] == key[0] and k[1] != key[1])


def worker_id() -> int:
    return os.getpid()
