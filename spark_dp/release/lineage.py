"""Input lineage: what a release was computed from, without revealing data (issue #16, item 4).

Every release's manifest (field ``input``) and its ledger charge record one
lineage dict, computed once per release by the pipeline before any Spark job
(:func:`input_lineage`), under the ledger's lineage key
(:attr:`spark_dp.privacy.ledger.Ledger.lineage_key`):

``{"kind": "table", "tables": [...], "files_hmac_sha256": ..., "files_stats": ...}``
    the input reads catalog tables or Delta tables by path. Each table entry
    is ``{"name", "provider", "version", "version_kind"}`` (``name`` null for
    a Delta table read by path: paths are never recorded), with the version
    **actually read**, time travel included:

    * Delta (``delta_version``): for a catalog table, the read's
      ``versionAsOf`` option or SQL ``VERSION AS OF``, the version current
      at its ``timestampAsOf`` (``DESCRIBE HISTORY``), else the version
      whose files are exactly the files the read lists, else (no time
      travel) the latest version. For a table read by path, whose options
      the plan does not show, the version whose files are exactly the files
      the read lists (``DataFrame.inputFiles()`` matched against the
      table's ``_delta_log`` commits, read with pyarrow on the driver), so a
      ``versionAsOf`` / ``timestampAsOf`` path read records what it read;
      where that cannot tell (a read whose files were pruned by a filter,
      commits before a checkpoint already cleaned up, two versions with the
      same files but other deletion vectors) the version is null and the
      files digest stays.
    * Iceberg (``iceberg_snapshot_id``): the ``snapshot-id`` read option, or
      the snapshot current at the ``as-of-timestamp`` read option (from the
      table's ``history`` metadata table), or a SQL ``VERSION AS OF`` id;
      without time travel the ``current-snapshot-id`` table property. A time
      travel it cannot resolve leaves the version null rather than name the
      wrong snapshot.

    Null where the source has no versions (a plain Parquet table). Unless
    every table has a version, ``files_hmac_sha256`` digests the input files as
    below.
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
# The parsed plan's table reads: UnresolvedRelation [parts], [options], streaming — and SQL time travel.
_UNRESOLVED = re.compile(r"UnresolvedRelation \[([^\]]*)\], \[([^\]]*)\]")
_TIME_TRAVEL = re.compile(r"RelationTimeTravel '?UnresolvedRelation \[([^\]]*)\], \[[^\]]*\], (?:true|false), (.+)")
_DELTA_COMMIT = re.compile(r"^(\d{20})\.json$")
# <v>.checkpoint.parquet, <v>.checkpoint.<part>.<parts>.parquet, <v>.checkpoint.<uuid>.json|parquet (V2)
_DELTA_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint(?:\.(\d{10})\.(\d{10})|\.[0-9a-fA-F-]{36})?\.(?:parquet|json)$")
DELTA_LOG = "_delta_log"


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


def table_version(spark, name: str, *, read: Mapping[str, Any] | None = None,
                  delta_versions: Mapping[str, int | None] | None = None) -> dict[str, Any]:
    """``{"name", "provider", "version", "version_kind"}`` of catalog table ``name`` (version null: none).

    ``read``: how the plan reads the table (:func:`plan_reads`: its reader
    options and SQL time travel). ``delta_versions``: the versions matched
    from the read's files, by table root (:func:`delta_versions`).

    Delta: the version whose files were read (``delta_versions``), else the
    ``versionAsOf`` option, else (no time travel) the latest ``DESCRIBE
    HISTORY`` version. Iceberg: the snapshot read (options or SQL time
    travel), else the ``current-snapshot-id`` table property. Other providers
    (Parquet, CSV, views…) have no version. Any failure leaves the version
    null (logged): the lineage must never stop a release.
    """
    out: dict[str, Any] = {"name": name, "provider": None, "version": None, "version_kind": None}
    q = _quoted(name)
    read = read or {}
    options = {str(k).lower(): v for k, v in (read.get("options") or {}).items()}
    location = None
    try:
        for row in _sql_rows(spark, f"DESCRIBE TABLE EXTENDED {q}"):
            key = str(row[0]).strip().lower()
            if key == "provider":
                out["provider"] = str(row[1]).strip().lower() or None
            elif key == "location" and row[1]:
                location = _normalise(str(row[1]).strip())
    except Exception as exc:  # noqa: BLE001
        log.info("input lineage: DESCRIBE TABLE EXTENDED %s failed (%s)", name, type(exc).__name__)
        return out
    travel = read.get("time_travel") or any(k in options for k in (
        "versionasof", "timestampasof", "snapshot-id", "as-of-timestamp", "branch", "tag"))
    try:
        if out["provider"] == "delta":
            version = None
            sql_travel = (read.get("time_travel") or "").strip()
            if "versionasof" in options:
                version = int(options["versionasof"])
            elif sql_travel.isdigit():
                version = int(sql_travel)
            elif "timestampasof" in options:
                version = _delta_version_at(spark, q, str(options["timestampasof"]))
            if version is None and travel and location:  # a time travel not parsed: the files read, if a version's
                version = (delta_versions or {}).get(location.rstrip("/"))
            if version is None and not travel:
                rows = _sql_rows(spark, f"DESCRIBE HISTORY {q} LIMIT 1")
                version = rows[0]["version"] if rows else None
            if version is not None:
                out["version"], out["version_kind"] = str(version), "delta_version"
        elif out["provider"] == "iceberg" and travel:
            snapshot = _iceberg_snapshot_read(spark, q, options, read.get("time_travel"))
            if snapshot is not None:
                out["version"], out["version_kind"] = str(snapshot), "iceberg_snapshot_id"
        else:
            props = {str(r[0]): r[1] for r in _sql_rows(spark, f"SHOW TBLPROPERTIES {q}")}
            if props.get("current-snapshot-id") not in (None, "", "none"):
                out["version"], out["version_kind"] = str(props["current-snapshot-id"]), "iceberg_snapshot_id"
    except Exception as exc:  # noqa: BLE001 - a provider without the command: no version
        log.info("input lineage: no version for table %s (%s)", name, type(exc).__name__)
    return out


def _delta_version_at(spark, quoted: str, timestamp: str) -> int | None:
    """The Delta version current at ``timestamp`` (the last commit at or before it, as ``timestampAsOf`` reads)."""
    from pyspark.sql import functions as F

    history = spark.sql(f"DESCRIBE HISTORY {quoted}")  # a command's local result: filtering it starts no job
    rows = history.filter(F.col("timestamp") <= F.lit(timestamp).cast("timestamp")) \
        .agg(F.max("version")).collect()
    return None if not rows or rows[0][0] is None else int(rows[0][0])


def _iceberg_snapshot_read(spark, quoted: str, options: Mapping[str, Any], sql_travel: str | None) -> int | None:
    """The Iceberg snapshot a time-travel read gets (None: cannot tell, e.g. a branch or tag).

    ``snapshot-id``, a numeric ``versionAsOf`` (Spark's option, which the
    Iceberg runtime for Spark 4.1 on reads instead) or a numeric SQL
    ``VERSION AS OF`` is the snapshot; an ``as-of-timestamp`` (ms) or a
    ``timestampAsOf`` is resolved as Iceberg does, the last snapshot
    made current at or before it, from the table's ``history`` metadata
    table (a small read of the table's metadata, never of its rows).
    """
    if "snapshot-id" in options:
        return int(options["snapshot-id"])
    if str(options.get("versionasof", "")).strip().isdigit():  # Spark's option (Iceberg for Spark 4.1 on)
        return int(str(options["versionasof"]).strip())
    if sql_travel is not None and sql_travel.strip().isdigit():
        return int(sql_travel.strip())
    if "as-of-timestamp" in options:
        at = f"timestamp_millis({int(options['as-of-timestamp'])})"
    elif "timestampasof" in options:
        text = str(options["timestampasof"]).replace("\\", "\\\\").replace("'", "\\'")
        at = f"CAST('{text}' AS TIMESTAMP)"
    else:
        return None
    rows = _sql_rows(spark, f"SELECT snapshot_id FROM {quoted}.`history` WHERE "
                            f"made_current_at <= {at} ORDER BY made_current_at DESC LIMIT 1")
    return int(rows[0][0]) if rows else None


def plan_reads(text: str) -> dict[str, dict[str, Any]]:
    """The tables the parsed plan of ``explain(extended)`` text reads: ``{name parts joined by '.': read}``.

    Each read is ``{"options": {...}, "time_travel": str | None}``: the
    reader options of ``spark.read.options(...).table(t)`` (Delta's
    ``versionAsOf``, Iceberg's ``snapshot-id`` …) and the argument of a SQL
    ``VERSION`` / ``TIMESTAMP AS OF``. Names are as written in the query
    (``t``, ``db.t``, ``cat.db.t``).
    """
    parsed = text.split("== Parsed Logical Plan ==", 1)[-1].split("== Analyzed Logical Plan ==", 1)[0]
    reads: dict[str, dict[str, Any]] = {}
    for parts, opts in _UNRESOLVED.findall(parsed):
        name = ".".join(p.strip() for p in parts.split(","))
        options = {}
        for item in filter(None, (o.strip() for o in opts.split(", "))):
            key, _, value = item.partition("=")
            options[key] = value
        reads.setdefault(name, {"options": {}, "time_travel": None})["options"].update(options)
    for line in parsed.splitlines():
        m = _TIME_TRAVEL.search(line)
        if m:
            name = ".".join(p.strip() for p in m.group(1).split(","))
            reads.setdefault(name, {"options": {}, "time_travel": None})["time_travel"] = m.group(2).strip()
    return reads


def _read_of(reads: Mapping[str, Mapping[str, Any]], qualified: str) -> Mapping[str, Any] | None:
    """The plan's read of catalog table ``qualified`` (``spark_catalog.default.t``), matched by name suffix."""
    parts = [p.strip("`").lower() for p in qualified.split(".")]
    for name, read in reads.items():
        written = [p.strip("`").lower() for p in name.split(".")]
        if written and parts[-len(written):] == written:
            return read
    return None


# -- Delta: the version whose files were read ------------------------------------------------------
def _delta_root(uri: str, cache: dict[str, Any], roots: dict[str, str | None]) -> str | None:
    """The Delta table root above file ``uri`` (a directory holding ``_delta_log``), or None."""
    from pyarrow import fs as pafs

    parent = uri.rsplit("/", 1)[0]
    chain = []
    for _ in range(16):  # partition directories nest a few levels at most
        if parent in roots:
            break
        chain.append(parent)
        fs, path = _arrow_fs(parent, cache)
        if fs is None:
            roots[parent] = None
            break
        try:
            if fs.get_file_info(f"{path.rstrip('/')}/{DELTA_LOG}").type == pafs.FileType.Directory:
                roots[parent] = parent
                break
        except Exception:  # noqa: BLE001 - no permission / not a file system path: not Delta as far as we know
            roots[parent] = None
            break
        up = parent.rsplit("/", 1)[0]
        if up == parent or not up or up.endswith(":/") or up.endswith("://"):
            roots[parent] = None
            break
        parent = up
    found = roots.get(parent)
    for p in chain:
        roots[p] = found
    return found


def delta_log_states(root: str) -> list[tuple[int, frozenset, frozenset, int | None]] | None:
    """The versions of the Delta table at ``root`` its log can rebuild: (version, files, files with DVs, commit ms).

    Oldest first, consecutive. Replays the JSON commits
    ``_delta_log/<version>.json`` (``add`` and ``remove`` actions) with
    pyarrow on the driver, from version 0 when every commit since is there;
    otherwise (Delta's log clean-up removed the first commits after a
    checkpoint) from the oldest checkpoint (classic, multi-part or V2 with
    sidecars) followed by all the later commits: the versions before it
    cannot be read by Delta either and are left out. None when the log
    cannot be read or has no such starting point.
    """
    import json

    cache: dict[str, Any] = {}
    fs, path = _arrow_fs(root, cache)
    if fs is None:
        return None
    from pyarrow import fs as pafs

    log_dir = f"{path.rstrip('/')}/{DELTA_LOG}"
    try:
        names = sorted(i.base_name for i in fs.get_file_info(pafs.FileSelector(log_dir)))
    except Exception as exc:  # noqa: BLE001
        log.info("input lineage: cannot list a Delta log (%s)", type(exc).__name__)
        return None
    commits = {int(m.group(1)): n for n in names if (m := _DELTA_COMMIT.match(n))}
    if not commits:
        return None
    latest = max(commits)
    start, active, from_checkpoint = None, {}, False
    if all(v in commits for v in range(latest + 1)):
        start = 0
    else:  # the oldest checkpoint from which every later commit is still there
        for version, parts in sorted(_delta_checkpoints(names).items()):
            if version <= latest and all(v in commits for v in range(version + 1, latest + 1)):
                files = _delta_checkpoint_files(fs, log_dir, parts, root)
                if files is not None:
                    start, active, from_checkpoint = version, files, True
                    break
        if start is None:
            return None
    states = []
    for version in range(start, latest + 1):
        committed, apply = None, not from_checkpoint or version > start  # a checkpoint includes its commit
        if version not in commits:  # the checkpoint's own commit was cleaned up: its state, no commit time
            states.append((version, frozenset(active), frozenset(active.items()), None))
            continue
        with fs.open_input_stream(f"{log_dir}/{commits[version]}") as fh:
            for line in fh.read().decode().splitlines():
                if not line.strip():
                    continue
                action = json.loads(line)
                if "add" in action and apply:
                    add = action["add"]
                    active[_delta_file(root, add["path"])] = _delta_dv(add.get("deletionVector"))
                elif "remove" in action and apply:
                    active.pop(_delta_file(root, action["remove"]["path"]), None)
                elif "commitInfo" in action:
                    committed = action["commitInfo"].get("inCommitTimestamp") or action["commitInfo"].get("timestamp")
        states.append((version, frozenset(active), frozenset(active.items()), committed))
    return states


def _delta_dv(dv: Mapping[str, Any] | None) -> str:
    """A deletion vector descriptor as a comparable string ("" for none), the same from a commit or a checkpoint."""
    import json

    if not dv:
        return ""
    return json.dumps({k: v for k, v in dv.items() if v is not None}, sort_keys=True)


def _delta_checkpoints(names: Iterable[str]) -> dict[int, list[str]]:
    """``{version: the files of one complete checkpoint}`` among the log's file names.

    Classic ``<v>.checkpoint.parquet``, multi-part
    ``<v>.checkpoint.<part>.<parts>.parquet`` (kept only with every part) and
    V2 ``<v>.checkpoint.<uuid>.json|parquet``.
    """
    out: dict[int, list[str]] = {}
    multi: dict[tuple[int, int], list[str]] = {}
    for name in names:
        m = _DELTA_CHECKPOINT.match(name)
        if not m:
            continue
        version = int(m.group(1))
        if m.group(2):  # multi-part
            multi.setdefault((version, int(m.group(3))), []).append(name)
        else:
            out.setdefault(version, [name])
    for (version, parts), files in multi.items():
        if len(files) == parts and version not in out:
            out[version] = sorted(files)
    return out


def _delta_checkpoint_files(fs, log_dir: str, parts: list[str], root: str) -> dict[str, str] | None:
    """``{file: deletion vector}`` of a checkpoint's ``add`` actions (V2 sidecars included), or None if unreadable."""
    import json

    import pyarrow.parquet as pq

    adds: list[dict[str, Any]] = []
    sidecars: list[str] = []
    try:
        for name in parts:
            full = f"{log_dir}/{name}"
            if name.endswith(".json"):  # a V2 checkpoint written as JSON
                with fs.open_input_stream(full) as fh:
                    for line in fh.read().decode().splitlines():
                        action = json.loads(line) if line.strip() else {}
                        if "add" in action:
                            adds.append(action["add"])
                        elif "sidecar" in action:
                            sidecars.append(action["sidecar"]["path"])
                continue
            with fs.open_input_file(full) as fh:
                schema = pq.read_schema(fh)
                fh.seek(0)
                cols = [c for c in ("add", "sidecar") if c in schema.names]
                table = pq.read_table(fh, columns=cols)
            adds += _struct_rows(table, "add")
            sidecars += [r["path"] for r in _struct_rows(table, "sidecar")]
        for side in sidecars:  # V2: the file actions live in _delta_log/_sidecars/
            with fs.open_input_file(f"{log_dir}/_sidecars/{side.rsplit('/', 1)[-1]}") as fh:
                adds += _struct_rows(pq.read_table(fh, columns=["add"]), "add")
    except Exception as exc:  # noqa: BLE001 - a checkpoint this reader cannot read: no version from it
        log.info("input lineage: cannot read a Delta checkpoint (%s)", type(exc).__name__)
        return None
    return {_delta_file(root, a["path"]): _delta_dv(a.get("deletionVector")) for a in adds}


def _struct_rows(table, column: str) -> list[dict[str, Any]]:
    """The non-null rows of struct ``column`` as dicts, only their ``path`` and ``deletionVector`` fields."""
    import pyarrow.compute as pc

    if column not in table.column_names:
        return []
    col = table.column(column).combine_chunks()
    col = col.filter(pc.is_valid(col))
    fields = [f.name for f in col.type if f.name in ("path", "deletionVector")]
    return [dict(zip(fields, values, strict=True))
            for values in zip(*(col.field(f).to_pylist() for f in fields), strict=True)] if fields else []


def _delta_file(root: str, path: str) -> str:
    """An ``add``/``remove`` path (relative and URL-encoded, or an absolute URI) as a normalised URI."""
    if "://" in path or path.startswith("file:") or path.startswith("/"):
        return _normalise(path)
    return _normalise(f"{root.rstrip('/')}/{unquote(path)}")


def delta_versions(files: Iterable[str], *, filtered: bool = False) -> dict[str, int | None]:
    """``{Delta table root: the version whose files are exactly those read}`` for the Delta tables among ``files``.

    The latest such version where several have the same files and the same
    deletion vectors (a commit that changed only metadata); None where the
    log cannot tell (see :func:`delta_log_states`), or where versions with the
    same files differ in deletion vectors. ``filtered``: the query filters
    its rows, so Delta may have pruned the files it lists (partitions, data
    skipping); a match is then kept only if no later version still holds
    every file read (else the read may be of that later version).
    """
    cache: dict[str, Any] = {}
    roots: dict[str, str | None] = {}
    by_root: dict[str, set[str]] = {}
    for uri in {_normalise(u) for u in files}:
        root = _delta_root(uri, cache, roots)
        if root is not None:
            by_root.setdefault(root, set()).add(uri)
    out: dict[str, int | None] = {}
    for root, read in by_root.items():
        states = delta_log_states(root)
        matches = [s for s in states or () if s[1] == read]
        version = matches[-1][0] if matches and len({s[2] for s in matches}) == 1 else None
        if version is not None and filtered and any(read <= s[1] for s in states if s[0] > version):
            version = None
        out[root] = version
    return out


def delta_path_lineage(path: str, as_of: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """The lineage a Spark read of the Delta table at ``path`` would record, from its log alone (no Spark).

    ``as_of``: ``{"version": N}`` (that version), ``{}`` (the latest). A
    ``timestamp`` needs Delta's own rules (commit times): None, cannot tell
    without Spark. Equals :func:`dataframe_lineage` of
    ``spark.read.format("delta").load(path)`` at that version.
    """
    as_of = dict(as_of or {})
    if set(as_of) - {"version"}:
        return None
    states = delta_log_states(_normalise(path).rstrip("/"))
    if not states:
        return None
    version = as_of.get("version", states[-1][0])
    state = next((s for s in states if s[0] == version), None)
    if state is None:  # no such version, or one the log no longer holds
        return None
    same = [s for s in states if s[1] == state[1]]
    if len({s[2] for s in same}) != 1:
        return None
    return {"kind": TABLE, "tables": [_path_delta_entry(same[-1][0])]}


def _path_delta_entry(version: int | None) -> dict[str, Any]:
    """The table entry of a Delta table read by path (no name: paths are never recorded)."""
    return {"name": None, "provider": "delta", "version": None if version is None else str(version),
            "version_kind": None if version is None else "delta_version"}


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
    """The lineage of a DataFrame: its tables (with the versions read) and/or a keyed digest of its input files."""
    from spark_dp.aggregates._scan import plan_text

    files = list(df.inputFiles())
    names = plan_tables(df)
    reads: dict[str, dict[str, Any]] = {}
    filtered = True  # unless the optimised plan shows no filter (then Delta lists every file of the version)
    try:
        text = plan_text(df)
        reads = plan_reads(text) if names else {}
        optimised = text.split("== Optimized Logical Plan ==", 1)[-1].split("== Physical Plan ==", 1)[0]
        filtered = re.search(r"\bFilter\b", optimised) is not None
    except Exception as exc:  # noqa: BLE001
        log.info("input lineage: cannot read the plan's time travel (%s)", type(exc).__name__)
    deltas = delta_versions(files, filtered=filtered) if files else {}
    tables = [table_version(df.sparkSession, t, read=_read_of(reads, t), delta_versions=deltas) for t in names]
    claimed = set()
    for t in names:  # the roots of catalog tables: their DESCRIBE location (a path read of the same root is a table too)
        claimed.update(root for root in deltas if any(e["name"] == t for e in tables) and _table_root(df, t) == root)
    tables += [_path_delta_entry(v) for root, v in sorted(deltas.items()) if root not in claimed]
    if not files and not tables:
        return in_memory()
    out: dict[str, Any] = {"kind": TABLE if tables else FILES}
    if tables:
        out["tables"] = tables
    if files and not (tables and all(t["version"] is not None for t in tables)):
        out[DIGEST], out["files_stats"] = files_digest(files, key)
    return out


def _table_root(df, name: str) -> str | None:
    """The normalised location of catalog table ``name`` (DESCRIBE TABLE EXTENDED), or None."""
    try:
        for row in _sql_rows(df.sparkSession, f"DESCRIBE TABLE EXTENDED {_quoted(name)}"):
            if str(row[0]).strip().lower() == "location" and row[1]:
                return _normalise(str(row[1]).strip()).rstrip("/")
    except Exception:  # noqa: BLE001
        return None
    return None


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
