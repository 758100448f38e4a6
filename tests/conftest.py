"""Shared fixtures: one local SparkSession for the whole run, temp ledgers."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


@pytest.fixture(scope="session")
def spark():
    from spark_dp.runtime import get_spark

    os.environ.pop("SPARK_REMOTE", None)
    session = get_spark(
        "spark-dp-tests",
        master="local[2]",
        conf={"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "2g"},
    )
    yield session
    session.stop()


@pytest.fixture
def ledger_uri(tmp_path):
    return f"sqlite:///{tmp_path}/ledger.db"
