"""Getting a SparkSession the way the user runs spark-dp.

Order: the active session (notebooks, Databricks, spark-submit after the
user built one) → ``SPARK_REMOTE`` (Spark Connect) → a session from the
spark-submit launcher's conf → a local session sized for this machine.
Library code never touches ``SparkContext`` or the RDD API.
"""

from __future__ import annotations

import logging
import os
import sys

from pyspark.sql import SparkSession

log = logging.getLogger("spark_dp")

LOCAL_CONF = {
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "4",
    "spark.executorEnv.OPENBLAS_NUM_THREADS": "1",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.memory": "4g",
    "spark.sql.session.timeZone": "UTC",
}


def get_spark(app_name: str = "spark-dp", *, master: str | None = None, conf: dict[str, str] | None = None) -> SparkSession:
    """The SparkSession to use.

    Args:
        app_name: application name for a new session.
        master: master URL for a new classic session; defaults to
            ``SPARK_DP_MASTER`` or ``local[N]`` with N = this machine's cores.
        conf: extra settings for a new session.
    """
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    remote = os.environ.get("SPARK_REMOTE")
    if remote:
        log.info("connecting to Spark Connect at %s", remote)
        builder = SparkSession.builder.remote(remote)
        return builder.getOrCreate()
    builder = SparkSession.builder.appName(app_name)
    launched_by_submit = "PYSPARK_GATEWAY_PORT" in os.environ
    if not launched_by_submit:
        # Local workers must run the driver's interpreter (its numpy/pyarrow).
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = builder.master(master or os.environ.get("SPARK_DP_MASTER") or f"local[{os.cpu_count() or 2}]")
        for key, value in LOCAL_CONF.items():
            builder = builder.config(key, value)
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
