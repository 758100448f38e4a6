"""The ledger as a table: ``spark-dp ledger --export PATH_OR_TABLE`` (issue #16, item 3).

One row per charge, in charge order, the form a governance dashboard reads
(Snowflake's ``PRIVACY_BUDGETS`` view is the model). Two targets
(:func:`is_table_target` tells them apart):

* a Parquet file (a target with a ``/`` or ending in ``.parquet``): written
  with pyarrow (no Spark needed), atomically (temporary file, then rename
  over ``PATH``), so a dashboard never reads half an export;
* a catalog table (``db.tbl``, ``catalog.db.tbl``; anything else): the same
  rows through ``spark.createDataFrame(arrow table)`` and
  ``saveAsTable(mode="overwrite")`` in the session's default table format or
  the one ``--export-format`` names (``delta``, ``iceberg``; classic Spark and
  Spark Connect). Each export replaces the table with the
  whole ledger; on Delta the overwrite is one atomic commit, on plain Parquet
  tables a reader during the overwrite may see it missing or partial.

Columns (:data:`SCHEMA`):

* ``seq`` — the ledger entry (``privacy.ledger_entry`` of the manifest);
* ``release_id``, ``dataset`` (the dataset whose lifetime the charge counts
  against: the id before ``@``), ``ledger_dataset`` (the id charged, e.g.
  ``shop.events@2026-11-30``), ``period`` (the part after ``@``; null for
  a dataset without renewing periods);
* ``task``, ``mechanism`` — from the release's manifest when it was written
  (the ledger itself records events, not mechanism names); null otherwise;
* ``event_kinds`` (e.g. ``gaussian``), ``events`` (the charged events as
  JSON, the ledger's own representation), ``epsilon``, ``delta`` (what the
  release claims);
* ``lifetime_epsilon`` — the dataset's lifetime ε after this charge, at the
  lifetime cap's δ (null: no cap in force, or a charge from before schema 3),
  ``lifetime_epsilon_limit``, ``lifetime_delta_limit`` (the cap now);
* ``created_at`` (UTC timestamp), ``written`` and ``location`` (where the
  release was recorded as written), ``crash`` (the recorded reason, if it
  crashed before being written), ``request_sha256``.

* ``input_kind`` (``table``, ``files``, ``in_memory``, ``unknown``; null for
  charges from before ledger schema 4) and ``input`` — the release's input
  lineage (:mod:`spark_dp.release.lineage`) as JSON: table names with their
  version where the source has one, or a keyed digest of the input files
  (HMAC under the ledger's lineage key, which is never exported). Never data.
"""

from __future__ import annotations

import json
import os
import uuid
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from spark_dp.privacy.events import events_to_json
from spark_dp.privacy.ledger import PERIOD_SEPARATOR, Ledger, lifetime_dataset

SCHEMA = pa.schema([
    ("seq", pa.int64()),
    ("release_id", pa.string()),
    ("dataset", pa.string()),
    ("ledger_dataset", pa.string()),
    ("period", pa.string()),
    ("task", pa.string()),
    ("mechanism", pa.string()),
    ("event_kinds", pa.list_(pa.string())),
    ("events", pa.string()),
    ("epsilon", pa.float64()),
    ("delta", pa.float64()),
    ("lifetime_epsilon", pa.float64()),
    ("lifetime_epsilon_limit", pa.float64()),
    ("lifetime_delta_limit", pa.float64()),
    ("created_at", pa.timestamp("us", tz="UTC")),
    ("written", pa.bool_()),
    ("location", pa.string()),
    ("crash", pa.string()),
    ("request_sha256", pa.string()),
    ("input_kind", pa.string()),
    ("input", pa.string()),
])


def _manifest_names(location: str | None) -> tuple[str | None, str | None]:
    """(task, mechanism) from the written release's manifest; (None, None) if it cannot be read."""
    if location is None:
        return None, None
    from spark_dp.release import storage

    try:
        manifest = json.loads(storage.read_bytes(storage.join(location, "manifest.json")))
    except (OSError, ValueError):
        return None, None
    return manifest.get("task"), manifest.get("mechanism")


def charge_rows(ledger: Ledger) -> list[dict[str, Any]]:
    """Every charge of ``ledger`` as a row of :data:`SCHEMA` (``created_at`` as its ISO text)."""
    caps: dict[str, Any] = {}
    rows = []
    for c in ledger.all_charges():
        base = lifetime_dataset(c.dataset_id)
        if base not in caps:
            caps[base] = ledger.lifetime_limit(base)
        cap = caps[base]
        task, mechanism = _manifest_names(c.location)
        rows.append({
            "seq": c.seq, "release_id": c.release_id, "dataset": base, "ledger_dataset": c.dataset_id,
            "period": c.dataset_id.split(PERIOD_SEPARATOR, 1)[1] if PERIOD_SEPARATOR in c.dataset_id else None,
            "task": task, "mechanism": mechanism, "event_kinds": [e.kind for e in c.events],
            "events": events_to_json(list(c.events)), "epsilon": c.budget.epsilon, "delta": c.budget.delta,
            "lifetime_epsilon": c.lifetime_epsilon,
            "lifetime_epsilon_limit": cap.epsilon if cap else None, "lifetime_delta_limit": cap.delta if cap else None,
            "created_at": c.created_at, "written": c.location is not None, "location": c.location,
            "crash": c.crash, "request_sha256": c.request_sha256,
            "input_kind": None if c.lineage is None else c.lineage.get("kind"),
            "input": None if c.lineage is None else json.dumps(c.lineage, sort_keys=True),
        })
    return rows


def _utc(text: str) -> datetime:
    """The ledger's ISO time as an aware UTC datetime (times without an offset are UTC: the ledger writes UTC)."""
    t = datetime.fromisoformat(text)
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)


def charges_table(ledger: Ledger) -> pa.Table:
    """Every charge of ``ledger`` as an Arrow table of :data:`SCHEMA`."""
    return pa.Table.from_pylist([{**r, "created_at": _utc(r["created_at"])} for r in charge_rows(ledger)],
                                schema=SCHEMA)


def is_table_target(target: str) -> bool:
    """Whether an export target names a catalog table (no ``/``, not ending in ``.parquet``) rather than a file."""
    return "/" not in target and os.sep not in target and not target.lower().endswith(".parquet")


def export_charges_table(spark, ledger: Ledger, table: str, *, format: str | None = None) -> int:  # noqa: A002
    """Replaces the catalog table ``table`` with every charge of ``ledger``; returns the row count.

    ``format``: the table format (``parquet``, ``delta``, ``iceberg``), or None
    for the session's default (``spark.sql.sources.default``).
    """
    from spark_dp.params import check_table_name

    check_table_name(table, key="--export")
    rows = charges_table(ledger)
    from spark_dp._compat import SPARK4

    if SPARK4:
        frame = spark.createDataFrame(rows)
    else:  # pyspark 3.5's createDataFrame takes no Arrow table: its pandas form, with the same (Arrow) schema
        from pyspark.sql.pandas.types import from_arrow_schema

        frame = spark.createDataFrame(rows.to_pandas(), schema=from_arrow_schema(rows.schema))
    if format in (None, "parquet"):
        writer = frame.write.mode("overwrite")
        writer = writer if format is None else writer.format(format)
        writer.saveAsTable(table)
    else:  # Delta / Iceberg: one atomic REPLACE TABLE ... AS SELECT (DataFrameWriterV2; classic and Connect)
        frame.writeTo(table).using(format).createOrReplace()
    return rows.num_rows


def export_charges(ledger: Ledger, path: str) -> int:
    """Writes every charge of ``ledger`` to the Parquet file ``path`` (atomically); returns the row count."""
    table = charges_table(ledger)
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    tmp = os.path.join(parent, f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")
    try:
        pq.write_table(table, tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    return table.num_rows
