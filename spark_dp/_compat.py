"""The few PySpark APIs that differ between the supported versions (3.5.x and 4.0–4.3).

Everything version-dependent that library code needs goes through here, so a
call site reads the same on every version:

* :func:`to_arrow` — ``DataFrame.toArrow()`` is new in Spark 4.0 (classic and
  Connect). On 3.5 the same Arrow batches come from the collect path that
  ``toPandas`` uses (``_collect_as_arrow`` on classic, the Connect client's
  ``to_table`` on Connect), without going through pandas.
* :func:`supports_job_tags` — ``SparkSession.addTag``/``removeTag`` work on
  classic sessions from 4.0; on 3.5 only Spark Connect has them (classic 3.5
  raises ``RuntimeError``).
* ``spark_dp.params.is_dataframe`` — pyspark 3.5's Connect ``DataFrame`` is
  not a ``pyspark.sql.DataFrame`` (4.0 made it a subclass); it lives in
  ``params`` because it must work where pyspark is not imported.

Nothing here touches SparkContext or the RDD API (the deployment test's
static check covers this module too).
"""

from __future__ import annotations

import pyarrow as pa
import pyspark

PYSPARK_VERSION: tuple[int, int] = tuple(int(p) for p in pyspark.__version__.split(".")[:2])  # type: ignore[assignment]
SPARK4 = PYSPARK_VERSION >= (4, 0)


def is_connect(obj) -> bool:
    """True for a Spark Connect DataFrame or SparkSession (``pyspark.sql.connect.*``)."""
    return type(obj).__module__.startswith("pyspark.sql.connect")


def to_arrow(df) -> pa.Table:
    """``df.toArrow()``: all rows of ``df`` collected to the driver as one ``pyarrow.Table``."""
    if hasattr(df, "toArrow"):  # Spark >= 4.0, classic and Connect
        return df.toArrow()
    from pyspark.sql.pandas.types import to_arrow_schema

    if is_connect(df):  # Spark 3.5 Connect: what DataFrame.collect/toPandas do underneath
        client = df.sparkSession.client
        table, _ = client.to_table(df._plan.to_proto(client))
        return table
    # Spark 3.5 classic: the Arrow batches toPandas collects (in partition order).
    batches = df._collect_as_arrow()
    if batches:
        return pa.Table.from_batches(batches)
    return to_arrow_schema(df.schema).empty_table()


def supports_job_tags(spark) -> bool:
    """Whether ``spark.addTag``/``removeTag``/``interruptTag`` work on this session."""
    return SPARK4 or is_connect(spark)
