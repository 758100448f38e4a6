"""Input lineage: what a release was computed from, without revealing data (issue #16, item 4).

Every release's manifest (field ``input``) and its ledger charge record one
lineage dict, computed once per release by the pipeline before any Spark job
(:func:`input_lineage`), under the ledger's lineage key
(:attr:`spark_dp.privacy.ledger.Ledger.lineage_key`):

``{"kind": "table", "tables": [...], "files_hmac_sha256": ..., "files_stats": ...}``
    the input reads catalog tables. Each table entry is ``{"name", "provider",
    "version", "version_kind"}``: a Delta table's latest version (``DESCRIBE
    HISTORY t LIMIT 1``) or an Iceberg table's ``current-snapshot-id`` table
    property, read through Spark SQL's metadata commands; null where the
    source has none (a plain Parquet table). Unless every table has a
    version, ``files_hmac_sha256`` digests the input files as below.
``{"kind": "files", "files_hmac_sha256": ..., "files_stats": ...}``
    the input is files (a path read, or a ``.npy`` tensor):
    ``files_hmac_sha256`` is the HMAC-SHA256, under the ledger's secret
    lineage key, of the sorted list of (normalised URI, size, modification
    time in ns) of every input file. ``files_stats`` says what was digested:
    ``size+mtime``, or ``names`` for files whose file system pyarrow cannot
    open (the digest then changes only when file names do).
``{"kind": "in_memory"}``
    a DataFrame built in memory (no files, no table) or a numpy tensor:
    nothing to digest.

What it never holds: file names or paths (partition directory names are
values of the data), file counts or sizes (they grow with the rows), the
``where`` filter (it is in the request). Table names are public
configuration, as in the job config. The file digest is keyed because an
unkeyed hash of (name, size, mtime) can be inverted by enumeration where the
names and times are known or guessable: one more row changes a file's size,
and the size (hence the row count) was recovered from a plain SHA-256 that
way. Without the key (32 bytes from the OS, held only by the ledger) the
HMAC gives nothing to enumerate against; with it, one input gives one digest
on every run against the same ledger, so a changed input is still detected.
Lineages of releases from before the key (field ``files_sha256``) cannot be
compared with a keyed one: :func:`input_changed` then compares the rest
(table names and versions) and otherwise says it cannot tell.

Where the files come from: ``DataFrame.inputFiles()`` (a metadata call on
classic Spark and Spark Connect: it plans the query and lists files, never
runs a job over the rows); their sizes and times come from ``pyarrow.fs`` on
the driver, never the JVM. Tables are found in the analysed plan of
``EXPLAIN EXTENDED`` over a temporary view of the DataFrame (also
metadata; the view is dropped at once), keeping only names the catalog knows.

:func:`input_changed` compares a stored release's lineage with a re-run's:
True / False, or None when it cannot tell (a release from before lineage,
or an in-memory input).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import unquote, urlparse

from spark_dp.release import storage

log = logging.getLogger("spark_dp")

IN_MEMORY = "in_memory"
FILES = "files"
TABLE = "table"
DIGEST = "files_hmac_sha256"  # keyed (ledger schema 5 on)
UNKEYED_DIGEST = "files_sha256"  # releases from before the key: a plain SHA-256, not comparable with DIGEST
_MIN_KEY_BYTES = 16
_STATS = "size+mtime"
_NAMES = "names"
# Hadoop's object-store schemes and the pyarrow file system that reads them.
_ARROW_SCHEMES = {"s3a": "s3", "s3n": "s3", "gcs": "gs", "abfss": "abfs"}
_SUBQUERY = re.compile(r"SubqueryAlias\s+([^\s,()\[\]]+)")


def in_memory() -> dict[str, Any]:
    """The lineage of an input with nothing to digest."""
    return {"kind": IN_MEMORY}


def _normalise(uri: str) -> str:
    """One spelling per file: local paths and ``file:`` URIs → the absolute path; other URIs unquoted."""
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        return os.path.abspath(unquote(parsed.path) if parsed.scheme else uri)
    return f"{parsed.scheme}://{parsed.netloc}{unquote(parsed.path)}"


def _arrow_fs(uri: str, cache: dict[str, Any]):
    """(pyarrow file system, its path of ``uri``), or (None, None) if pyarrow cannot open the scheme."""
    from pyarrow import fs as pafs

    parsed = urlparse(uri)
    scheme = parsed.scheme or "file"
    key = f"{scheme}://{parsed.netloc}"
    if key not in cache:
        if scheme == "file":
            cache[key] = pafs.LocalFileSystem()
        else:
            try:
                arrow_uri = f"{_ARROW_SCHEMES.get(scheme, scheme)}://{parsed.netloc}/"
                # hdfs://: libhdfs or, where it cannot be loaded, hdfs-native (the releases' own file system)
                cache[key] = (storage.locate(arrow_uri).fs if scheme == "hdfs"
                              else pafs.FileSystem.from_uri(arrow_uri)[0])
            except Exception as exc:  # noqa: BLE001 - an unknown scheme or missing credentials: digest names only
                log.info("input lineage: no pyarrow file system for %s (%s); digesting file names only",
                         key, type(exc).__name__)
                cache[key] = None
    fs = cache[key]
    if fs is None:
        return None, None
    path = unquote(parsed.path) if scheme in ("file", "hdfs") else f"{parsed.netloc}{unquote(parsed.path)}"
    return fs, path


def files_digest(uris: Iterable[str], key: bytes) -> tuple[str, str]:
    """(HMAC-SHA256 under ``key`` of the sorted (URI, size, mtime_ns) list, what was digested).

    What was digested: ``size+mtime`` or ``names``. ``key`` is the ledger's
    lineage key (:attr:`spark_dp.privacy.ledger.Ledger.lineage_key`): without
    it the digest cannot be checked against guessed sizes. Sizes and times
    come from ``pyarrow.fs`` (one batched ``get_file_info`` per file system);
    a file whose file system cannot be opened contributes its name only, and
    the result then says ``names``.
    """
    if not isinstance(key, bytes) or len(key) < _MIN_KEY_BYTES:
        raise RuntimeError(f"bug: the input lineage needs the ledger's lineage key (at least {_MIN_KEY_BYTES} bytes)")
    cache: dict[str, Any] = {}
    groups: dict[int, tuple[Any, list[tuple[str, str]]]] = {}
    entries: list[str] = []
    for uri in sorted({_normalise(u) for u in uris}):
        fs, path = _arrow_fs(uri, cache)
        if fs is None:
            entries.append(f"{uri}\t?\t?")
        else:
            groups.setdefault(id(fs), (fs, []))[1].append((uri, path))
    stats = _STATS if not entries else _NAMES
    for fs, items in groups.values():
        try:
            infos = fs.get_file_info([p for _, p in items])
        except Exception as exc:  # noqa: BLE001 - e.g. no permission to stat: fall back to names
            log.info("input lineage: cannot stat input files (%s); digesting file names only", type(exc).__name__)
            entries += [f"{u}\t?\t?" for u, _ in items]
            stats = _NAMES
            continue
        for (uri, _), info in zip(items, infos, strict=True):
            entries.append(f"{uri}\t{info.size}\t{info.mtime_ns}")
    digest = hmac.new(key, "\n".join(sorted(entries)).encode(), hashlib.sha256).hexdigest()
    return digest, stats


def _sql_rows(spark, text: str) -> list:
    return spark.sql(text).collect()  # metadata commands: their results are local (no job over the rows)


def _quoted(name: str) -> str:
    return ".".join(f"`{part.strip('`')}`" for part in name.split("."))


def table_version(spark, name: str) -> dict[str, Any]:
    """``{"name", "provider", "version", "version_kind"}`` of catalog table ``name`` (version null: none).

    Delta: the latest ``DESCRIBE HISTORY`` version. Iceberg: the
    ``current-snapshot-id`` table property. Other providers (Parquet, CSV,
    views…) have no version. Any failure leaves the version null (logged):
    the lineage must never stop a release.
    """
    out: dict[str, Any] = {"name": name, "provider": None, "version": None, "version_kind": None}
    q = _quoted(name)
    try:
        for row in _sql_rows(spark, f"DESCRIBE TABLE EXTENDED {q}"):
            if str(row[0]).strip().lower() == "provider":
                out["provider"] = str(row[1]).strip().lower() or None
    except Exception as exc:  # noqa: BLE001
        log.info("input lineage: DESCRIBE TABLE EXTENDED %s failed (%s)", name, type(exc).__name__)
        return out
    try:
        if out["provider"] == "delta":
            rows = _sql_rows(spark, f"DESCRIBE HISTORY {q} LIMIT 1")
            if rows:
                out["version"], out["version_kind"] = str(rows[0]["version"]), "delta_version"
        else:
            props = {str(r[0]): r[1] for r in _sql_rows(spark, f"SHOW TBLPROPERTIES {q}")}
            if props.get("current-snapshot-id") not in (None, "", "none"):
                out["version"], out["version_kind"] = str(props["current-snapshot-id"]), "iceberg_snapshot_id"
    except Exception as exc:  # noqa: BLE001 - a provider without the command: no version
        log.info("input lineage: no version for table %s (%s)", name, type(exc).__name__)
    return out


def plan_tables(df) -> list[str]:
    """The catalog tables ``df`` reads, from its analysed plan (``explain(extended)``); [] if none or unknown.

    ``df``'s own explain (no temporary view, no SQL statement to parse: the
    plan is already analysed), shared with the fast-path detection
    (:func:`spark_dp.aggregates._scan.plan_text`); classic and Spark Connect.
    """
    from spark_dp.aggregates._scan import plan_text

    spark = df.sparkSession
    try:
        text = plan_text(df)  # the same text the fast-path detection reads (one explain per release)
    except Exception as exc:  # noqa: BLE001
        log.info("input lineage: cannot read the plan's tables (%s)", type(exc).__name__)
        return []
    analysed = text.split("== Analyzed Logical Plan ==", 1)[-1].split("== Optimized Logical Plan ==", 1)[0]
    names = []
    for name in _SUBQUERY.findall(analysed):
        if "." in name and name not in names:  # catalog tables are qualified; aliases are not
            try:
                if spark.catalog.tableExists(name):
                    names.append(name)
            except Exception:  # noqa: BLE001 - not a table name the catalog parses
                continue
    return names


def dataframe_lineage(df, key: bytes) -> dict[str, Any]:
    """The lineage of a DataFrame: its tables (with versions) and/or a keyed digest of its input files."""
    files = list(df.inputFiles())
    tables = [table_version(df.sparkSession, t) for t in plan_tables(df)]
    if not files and not tables:
        return in_memory()
    out: dict[str, Any] = {"kind": TABLE if tables else FILES}
    if tables:
        out["tables"] = tables
    if files and not (tables and all(t["version"] is not None for t in tables)):
        out[DIGEST], out["files_stats"] = files_digest(files, key)
    return out


def input_lineage(source: Any, key: bytes) -> dict[str, Any]:
    """The lineage of a release's input: a DataFrame, a file path (e.g. a ``.npy`` tensor) or an in-memory value.

    ``key``: the ledger's lineage key (file digests are keyed with it).
    """
    if isinstance(source, str | os.PathLike):
        digest, stats = files_digest([os.fspath(source)], key)
        return {"kind": FILES, DIGEST: digest, "files_stats": stats}
    if hasattr(source, "inputFiles") and hasattr(source, "sparkSession"):
        return dataframe_lineage(source, key)
    return in_memory()


def _spark_hidden(name: str) -> bool:
    """Names Spark's file listing skips (HadoopFSUtils.shouldFilterOutPathName, and data files only)."""
    return (name.startswith("_") and "=" not in name) or name.startswith(".") or name.endswith("._COPYING_")


def path_lineage(path: str, key: bytes) -> dict[str, Any] | None:
    """The lineage of a read of ``path`` (a file or a directory of files), without Spark.

    Lists the files as Spark's file index does (recursively, skipping names
    starting with ``_`` — not partition directories — or ``.``), so the
    digest equals :func:`dataframe_lineage`'s for ``spark.read.load(path)``.
    Lets a job answer a re-run from the ledger without starting Spark and
    still tell whether its input changed. None when it cannot tell (a glob,
    a file system pyarrow cannot open).
    """
    from pyarrow import fs as pafs

    if any(c in path for c in "*?[{"):
        return None
    uri = _normalise(path)
    fs, fs_path = _arrow_fs(uri, {})
    if fs is None:
        return None
    try:
        info = fs.get_file_info(fs_path)
        if info.type == pafs.FileType.File:
            files = [uri]
        elif info.type == pafs.FileType.Directory:
            prefix = uri[: len(uri) - len(fs_path)] if "://" in uri else ""
            base = fs_path.rstrip("/")
            files = [prefix + f.path for f in fs.get_file_info(pafs.FileSelector(fs_path, recursive=True))
                     if f.type == pafs.FileType.File
                     and not any(_spark_hidden(part) for part in f.path[len(base) + 1:].split("/"))]
        else:
            return None
    except Exception as exc:  # noqa: BLE001
        log.info("input lineage: cannot list %s (%s)", path, type(exc).__name__)
        return None
    if not files:
        return None
    digest, stats = files_digest(files, key)
    return {"kind": FILES, DIGEST: digest, "files_stats": stats}


def input_changed(stored: Mapping[str, Any] | None, now: Mapping[str, Any] | None) -> bool | None:
    """Whether the input changed between a stored release's lineage and a re-run's (None: cannot tell).

    A stored lineage from before the keyed digest (``files_sha256``) cannot
    be compared with today's keyed one: only the rest (tables and their
    versions) is, and a match there says None (cannot tell), not False.
    """
    if not stored or not now or IN_MEMORY in (stored.get("kind"), now.get("kind")):
        return None
    stored, now = dict(stored), dict(now)
    if (UNKEYED_DIGEST in stored) != (UNKEYED_DIGEST in now):
        rest = ("kind", "tables")
        if any(stored.get(k) != now.get(k) for k in rest):
            return True
        return None
    return stored != now
