"""The warehouse suite's one SparkSession: Delta Lake and Iceberg jars from the start, made by spark-dp itself.

This directory is not part of the main pytest run (its modules are not named
``test_*.py``): ``tests/test_warehouse.py`` runs it in a separate process on
the pyspark 3.5 virtualenv of the version matrix, with the built wheel, because
the jars must be on the classpath when the JVM starts and no Delta or Iceberg
release supports the project's main pyspark line yet. The session is created
by :func:`spark_dp.runtime.get_spark` with ``formats=("delta", "iceberg")``,
so the library's own arrangement of the jars (coordinates, SQL extensions,
Delta's catalog) is what these tests run on; ``PYSPARK_SUBMIT_ARGS`` only
points Spark's Ivy at ``ivysettings.xml`` and the cache. ``SPARK_DP_TEST_FORMATS``
names the formats the suites of this run need (a Spark line without an
Iceberg build runs the Delta suite alone).
"""

from __future__ import annotations

import os

import pytest

WAREHOUSE = os.environ.get("SPARK_DP_TEST_WAREHOUSE")
FORMATS = tuple(os.environ.get("SPARK_DP_TEST_FORMATS", "delta,iceberg").split(","))


@pytest.fixture(scope="session")
def warehouse(tmp_path_factory):
    """The Iceberg Hadoop catalog's warehouse directory (catalog ``local``)."""
    return WAREHOUSE or str(tmp_path_factory.mktemp("iceberg-warehouse"))


@pytest.fixture(scope="session")
def spark(warehouse, tmp_path_factory):
    from spark_dp.runtime import get_spark

    iceberg = {
        "spark.sql.catalog.local": "org.apache.iceberg.spark.SparkCatalog",
        "spark.sql.catalog.local.type": "hadoop",
        "spark.sql.catalog.local.warehouse": warehouse,
    } if "iceberg" in FORMATS else {}
    session = get_spark("spark-dp warehouse tests", master="local[2]", formats=FORMATS, conf={
        **iceberg,
        "spark.sql.warehouse.dir": str(tmp_path_factory.mktemp("spark-warehouse")),
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.databricks.delta.snapshotPartitions": "1",  # Delta's log replay: 50 tasks by default, for 2 rows
        "spark.ui.enabled": "false",
        "spark.driver.memory": "2g",
    })
    yield session
    session.stop()
