"""How many partitions the shuffles and caches spark-dp creates get: one rule, here.

Spark sizes a shuffle by the session's ``spark.sql.shuffle.partitions``
(200 unless the user changed it, for any data size). On a small input
that is 200 tasks per stage, and a cached frame built from that shuffle
keeps its 200 partitions, so every later pass over it runs 200 Python
tasks (issue #17 measured a 20,000-row tensor release at 58 s, 7–20 s a
round). spark-dp therefore never relies on that conf for its own
shuffles: each one gets an explicit partition count from
:func:`partitions_for`, set per operation (``repartition(n, key)`` right
before the operation that needs rows of one key together: Spark then
plans no second exchange), never by changing the session's conf.

The rule, from the size of the data to shuffle and the task slots:

    n = max(⌈bytes / MAX_PARTITION_BYTES⌉, min(slots, ⌈bytes / MIN_PARTITION_BYTES⌉)),

rounded up to a multiple of ``slots`` when above it (whole waves), at
least 1 and at most :data:`MAX_PARTITIONS`. A small input gets one
partition per ~``MIN_PARTITION_BYTES`` (fewer tasks than cores when a
task would be nearly empty); a large one gets partitions of at most
``MAX_PARTITION_BYTES``. An input whose size Spark does not know (no
statistics: RDD-backed frames, some connectors) gets one partition per
task slot.

* ``bytes`` is Spark's own size estimate of the rows to shuffle (the
  optimized plan's ``sizeInBytes`` statistic: file sizes for files, the
  data for local relations), read from ``explain(mode="cost")`` — no job,
  and the same on Spark Connect. Array columns count as d elements (the
  planner assumes one).
* ``slots`` (:func:`task_slots`): ``local[N]`` gives N; otherwise
  ``spark.default.parallelism`` or ``spark.sql.leafNodeDefaultParallelism``
  when the user set one, else Spark's own default parallelism (the cores of
  the registered executors, at least 2), read as the ``splits`` of
  ``spark.range(1)``'s physical plan (no job, Spark Connect safe; neither
  conf is set by a standalone, YARN or Kubernetes cluster); 8 if even that
  cannot be read.
  No SparkContext (Spark Connect safe).

Adaptive query execution: a ``repartition(n, key)`` with an explicit n is
kept as is by AQE (it neither coalesces nor splits it), so the count is
the rule's whether AQE is on or off; AQE still optimises everything else
(joins, the user's own shuffles). Shuffles whose volume would not gain from
a fixed count are avoided instead: final sums over a small bounded index
(sketch counters, histogram bins) are summed per partition in Arrow and
on the driver, with no shuffle at all.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import re

from pyspark.sql import DataFrame, SparkSession

#: Largest partition the rule plans (bytes of the rows as Spark estimates them).
MAX_PARTITION_BYTES = 128 << 20
#: Below this much data per task, fewer partitions than task slots.
MIN_PARTITION_BYTES = 4 << 20
#: Upper bound of the rule.
MAX_PARTITIONS = 100_000
#: Spark's "unknown size" is ``Long.MaxValue`` bytes (8.0 EiB), scaled down by projections; estimates
#: at or above 1 PiB are taken as unknown.
_UNKNOWN_BYTES = 1 << 50

_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40, "PiB": 1 << 50, "EiB": 1 << 60}
_SIZE = re.compile(r"sizeInBytes=([0-9.]+(?:E[0-9]+)?)\s*(B|KiB|MiB|GiB|TiB|PiB|EiB)")


def task_slots(spark: SparkSession) -> int:
    """How many tasks run at once, without a SparkContext (see the module doc)."""
    master = spark.conf.get("spark.master", None) or ""
    if master.startswith("local"):
        inner = master[master.find("[") + 1 : master.find("]")] if "[" in master else "1"
        inner = inner.split(",")[0]
        return int(inner) if inner.isdigit() else (os.cpu_count() or 1)
    for key in ("spark.default.parallelism", "spark.sql.leafNodeDefaultParallelism"):
        value = spark.conf.get(key, None)
        if value and value.isdigit() and int(value) > 0:
            return int(value)
    try:  # Range (0, 1, step=1, splits=N): N is the session's default parallelism
        found = re.search(r"\bsplits=(\d+)", explain_text(spark.range(1), mode="simple"))
    except Exception:  # noqa: BLE001 -- a plan that cannot be read: the fixed default
        found = None
    return int(found.group(1)) if found and int(found.group(1)) > 0 else 8


def explain_text(df: DataFrame, mode: str = "cost") -> str:
    """``df.explain(mode)``'s text (the plan is analysed and optimised on the driver; no job runs)."""
    explain_string = getattr(df, "_explain_string", None)  # Spark Connect's DataFrame
    if callable(explain_string):
        return explain_string(mode=mode)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        df.explain(mode=mode)
    return buf.getvalue()


def estimated_bytes(df: DataFrame, *, array_length: int = 1) -> int | None:
    """Spark's size estimate of ``df`` (bytes), or None when Spark does not know it.

    Read from the optimized plan's statistics (``explain(mode="cost")``: the
    query is analysed and optimised on the driver, no job runs). Spark
    counts one element per array; ``array_length`` scales the estimate for
    frames whose rows are mostly one array of that length.
    """
    try:
        text = explain_text(df)
    except Exception:  # noqa: BLE001 -- an estimate only: a source that cannot explain itself is "unknown"
        return None
    at = text.find("Optimized Logical Plan")
    m = _SIZE.search(text, max(at, 0))
    if m is None:
        return None
    size = float(m.group(1)) * _UNITS[m.group(2)]
    if not math.isfinite(size) or size >= _UNKNOWN_BYTES:
        return None
    return int(size * max(1, int(array_length)))


def partitions_for_bytes(size: int | None, slots: int) -> int:
    """The rule of the module doc for ``size`` bytes (None: unknown) and ``slots`` task slots."""
    slots = max(1, int(slots))
    if size is None:
        return slots
    n = max(-(-size // MAX_PARTITION_BYTES), min(slots, -(-size // MIN_PARTITION_BYTES)), 1)
    if n > slots:
        n = -(-n // slots) * slots
    return int(min(n, MAX_PARTITIONS))


def partitions_for(df: DataFrame, *, array_length: int = 1) -> int:
    """The partition count of a shuffle or cache of ``df``'s rows (see the module doc)."""
    return partitions_for_bytes(estimated_bytes(df, array_length=array_length), task_slots(df.sparkSession))
