"""Is a DataFrame a plain scan of Parquet files? (the direct-Parquet fast paths without ``source_paths``).

The families' Parquet fast paths read the files themselves with pyarrow in
the tasks. They are taken when the caller names the files (``source_paths``,
a ``path:`` config) and, through :func:`parquet_scan`, when the DataFrame
itself is one: ``spark.table("db.t")`` of a Parquet table, with column
pruning and *partition* filters (``.where("day = '2026-01-01'")`` on a
partition column), or ``spark.read.parquet(p)`` with column pruning.

How it is decided (no job runs over the data; classic and Spark Connect):

* the physical plan of ``df`` (:func:`plan_text`, ``explain(mode="extended")``:
  analysed, optimised and planned on the driver) must be nothing but one
  ``FileScan parquet`` over Spark's own file index (``InMemoryFileIndex`` /
  ``CatalogFileIndex``: no Delta/Iceberg/Hive table, whose files are not
  the table's rows), with ``DataFilters: []``, under at most
  ``ColumnarToRow`` and a ``Project`` of plain column references (no
  derived or renamed column). Any filter on data columns, join, union,
  aggregate, limit, sample, cache, local or RDD source shows up as another
  node, and the Spark reader is used;
* the requested columns must be in the scan's ``ReadSchema`` (the data
  columns in the files; a partition column lives in directory names);
* the files are ``df.inputFiles()``, which Spark takes from the optimised
  plan. A partition filter has pruned that plan's file index only for a
  catalog table whose partitions the catalog tracks (a ``CatalogFileIndex``:
  Spark's ``PruneFileSourcePartitions``; ``saveAsTable`` tables are); then
  the listed files are exactly the files the scan reads. A path-based read
  (``spark.read.parquet(p).where(<partition filter>)``) prunes its files
  only when the scan is planned, so ``inputFiles()`` lists them all: that
  case falls back to the Spark reader, as does an untracked table.

The rows the fast path reads are then the rows the Spark reader would
produce for those columns. Anything the check does not recognise is a
fallback, never an error: :func:`parquet_scan` returns the reason, and the
family logs which path ran and why (:func:`choose_source_paths`).

Tested on pyspark 4.3, classic (tests/test_fast_path_auto.py) and Spark
Connect (tests/test_fast_path_auto_connect.py). The plan text is Spark's
explain output, not a stable API: a format this check does not recognise
makes it fall back, never read other files.
"""

from __future__ import annotations

import contextlib
import logging
import re
import weakref
from collections.abc import Iterator, Sequence
from typing import NamedTuple

from pyspark.sql import DataFrame

from spark_dp.aggregates._partitioning import explain_text

log = logging.getLogger("spark_dp")

_DATA_FILTER = "a filter on data columns (only a catalog table's partition filters can be honoured)"
_FILE_INDEXES = ("InMemoryFileIndex", "CatalogFileIndex")
_ATTRIBUTE = re.compile(r"^[^\s()]+#\d+L?$")  # a plain column reference, e.g. a#7 or p#9L
#: explain abbreviates a scan's metadata (ReadSchema, Location) to ``spark.sql.maxMetadataStringLength``
#: characters (default 100: the ReadSchema of ten double columns is longer) and a node's field list to
#: ``spark.sql.debug.maxToStringFields`` fields (default 25). The check needs them whole, so both are
#: raised for the one ``explain`` call (runtime SQL confs; classic and Spark Connect).
_WHOLE_PLAN_TEXT = {"spark.sql.maxMetadataStringLength": str(1 << 30), "spark.sql.debug.maxToStringFields": str(1 << 30)}


class Scan(NamedTuple):
    """The outcome: ``files`` when ``df`` is a plain Parquet scan (else None), and why."""

    files: list[str] | None
    reason: str


def _node(line: str) -> str:
    """A physical-plan line without its tree drawing and whole-stage-codegen marker."""
    text = line.lstrip(" :|+-")
    return re.sub(r"^\*\(\d+\)\s*", "", text).strip()


def _top_level_fields(struct: str) -> list[str]:
    """The top-level field names of a ``struct<a:double,b:array<int>>`` string."""
    inner = struct[len("struct<"):-1] if struct.startswith("struct<") and struct.endswith(">") else ""
    fields, depth, start = [], 0, 0
    for i, ch in enumerate(inner + ","):
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif ch == "," and depth == 0:
            part = inner[start:i]
            if part:
                fields.append(part.split(":", 1)[0].strip("`"))
            start = i + 1
    return fields


def _check_plan(plan: str, columns: Sequence[str]) -> str | None:
    """None when ``plan`` (explain's text) is a plain Parquet scan of ``columns``, else the reason it is not."""
    at = plan.find("== Physical Plan ==")
    if at < 0:
        return "no physical plan in explain's output"
    nodes = [_node(line) for line in plan[at:].splitlines()[1:] if line.strip()]
    scans = [n for n in nodes if n.startswith("FileScan ")]
    if len(scans) != 1:
        other = next((n for n in nodes if not n.startswith(("ColumnarToRow", "Project ["))), "no file scan")
        return f"the plan is not one file scan ({other.split(' ', 1)[0]})"
    for n in nodes:
        if n.startswith("FileScan ") or n == "ColumnarToRow":
            continue
        if n.startswith("Project [") and n.endswith("]"):
            items = [x.strip() for x in n[len("Project ["):-1].split(",")]
            if all(_ATTRIBUTE.match(x) for x in items):
                continue
            return "the plan derives or renames a column"
        if n.startswith("Filter "):
            return _DATA_FILTER
        return f"the plan has a {n.split(' ', 1)[0].split('(', 1)[0]} node"
    scan = scans[0]
    if not scan.startswith("FileScan parquet"):
        return f"the source is not Parquet ({scan.split(' ', 2)[1]})"
    if "DataFilters: []" not in scan:
        return _DATA_FILTER
    location = re.search(r"Location: (\w+)", scan)
    if location is None or location.group(1) not in _FILE_INDEXES:
        return f"the table's file index is {location.group(1) if location else 'unknown'} (not Spark's own Parquet files)"
    schema = re.search(r"ReadSchema: (struct<.*>)\s*$", scan)
    if schema is None:
        return "the scan's ReadSchema is missing or abbreviated in the plan text"
    fields = set(_top_level_fields(schema.group(1)))
    missing = [c for c in columns if c not in fields]
    if missing:
        return f"column {missing[0]!r} is not a data column of the files (e.g. a partition column)"
    return None


def _catalog_table(scan: str) -> str | None:
    """The table name of a ``FileScan parquet <table>[...]`` line, or None for a path-based read."""
    m = re.match(r"FileScan parquet ([^\s\[]+)\[", scan)
    return m.group(1) if m else None


def _pruned_before_planning(df: DataFrame, plan: str) -> str | None:
    """None when the scan's partition filters (if any) have pruned ``inputFiles()``, else why not.

    Spark prunes a catalog table's partitions in the optimised plan
    (``PruneFileSourcePartitions``) only when the table's index is a
    ``CatalogFileIndex`` (partitions tracked in the catalog); otherwise, and
    for path-based reads, the files are pruned only when the scan is planned,
    and ``inputFiles()`` lists them all.
    """
    scan = next(n for n in map(_node, plan.splitlines()) if n.startswith("FileScan "))
    if "PartitionFilters: []" in scan:
        return None
    table = _catalog_table(scan)
    if table is None:
        return "a partition filter on a path-based read (its files are pruned only when Spark plans the scan)"
    try:
        whole = explain_text(df.sparkSession.table(table), mode="simple")
    except Exception as e:  # noqa: BLE001
        return f"a partition filter on table {table}, whose index could not be read ({type(e).__name__})"
    if "Location: CatalogFileIndex" not in whole:
        return f"a partition filter on table {table}, whose partitions are not tracked in the catalog"
    return None


def parquet_scan(df: DataFrame, columns: Sequence[str]) -> Scan:
    """Whether ``df[columns]`` is a plain scan of Parquet files (see the module doc); no Spark job.

    Returns ``Scan(files, reason)``: ``files`` (sorted, as Spark lists them,
    partition filters applied) or None, and a sentence saying why.
    """
    columns = [columns] if isinstance(columns, str) else list(columns)
    try:
        # The whole frame's plan, not ``df.select(columns)``'s: selecting d
        # columns by name costs d JVM round trips on classic Spark (one
        # Column per name), the driver cost issue #17 removed elsewhere. A
        # plain scan's plan stays plain under a selection of its columns,
        # and the columns are checked against the scan's ReadSchema below.
        plan = plan_text(df)
    except Exception as e:  # noqa: BLE001 -- a frame that cannot explain itself goes through the Spark reader
        return Scan(None, f"the plan could not be read ({type(e).__name__})")
    reason = _check_plan(plan, columns) or _pruned_before_planning(df, plan)
    if reason is not None:
        return Scan(None, reason)
    try:
        files = sorted(df.inputFiles())
    except Exception as e:  # noqa: BLE001
        return Scan(None, f"the input files could not be listed ({type(e).__name__})")
    if not files:
        return Scan(None, "the scan has no files")
    return Scan(files, "a plain Parquet scan")  # never the file count: it grows with the data (logged at INFO)


_PLAN_TEXTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def plan_text(df: DataFrame) -> str:
    """``df.explain("extended")``'s whole text (abbreviation limits raised), computed once per DataFrame.

    The release's lineage (the analysed plan's tables) and the fast-path
    detection (the physical plan) read the same text: one explain per
    release instead of two. A DataFrame's plan does not change, so the text
    is kept while the DataFrame lives.
    """
    text = _PLAN_TEXTS.get(df)
    if text is None:
        with _whole_plan_text(df.sparkSession):
            text = explain_text(df, mode="extended")
        _PLAN_TEXTS[df] = text
    return text


@contextlib.contextmanager
def _whole_plan_text(spark) -> Iterator[None]:
    """Raises explain's abbreviation limits (:data:`_WHOLE_PLAN_TEXT`) while the block runs, then restores them.

    A session setting: another query explained at the same moment in the
    same session gets the longer text too (its results do not change).
    """
    saved = {}
    for key, value in _WHOLE_PLAN_TEXT.items():
        with contextlib.suppress(Exception):  # a server that refuses the conf: the check may then fall back
            saved[key] = spark.conf.get(key, None)
            spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in saved.items():
            with contextlib.suppress(Exception):
                if value is None:
                    spark.conf.unset(key)
                else:
                    spark.conf.set(key, value)


def choose_source_paths(df: DataFrame, columns: Sequence[str], source_paths: Sequence[str] | None, *,
                        owner: str, unsupported: str | None = None) -> list[str] | None:
    """The Parquet files the family's fast path reads: ``source_paths`` if given, else detected, else None.

    ``unsupported``: why the family's fast path cannot serve this request
    (then nothing is detected). Logs (INFO, logger ``spark_dp``) which path
    runs and why.
    """
    if source_paths:
        log.info("%s: direct Parquet path (source_paths given)", owner)
        return list(source_paths)
    scan = Scan(None, unsupported) if unsupported else parquet_scan(df, columns)
    if scan.files is None:
        log.info("%s: Spark reader path (%s)", owner, scan.reason)
    else:
        log.info("%s: direct Parquet path, detected (%s)", owner, scan.reason)
    return scan.files
