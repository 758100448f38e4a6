"""Shared fixtures: one local SparkSession for the whole run, temp ledgers."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import uuid

import pytest

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
# Tests run many small BLAS calls on a 2-core machine shared with Spark's
# workers: oversubscribed OpenBLAS threads only slow them down.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


@pytest.fixture(scope="session")
def spark():
    from spark_dp.runtime import get_spark

    os.environ.pop("SPARK_REMOTE", None)
    session = get_spark(
        "spark-dp-tests",
        master="local[2,2]",  # 2 cores; a failed task is retried once, as on a cluster
        conf={"spark.sql.shuffle.partitions": "2", "spark.driver.memory": "2g"},
    )
    yield session
    session.stop()


@pytest.fixture
def ledger_uri(tmp_path):
    return f"sqlite:///{tmp_path}/ledger.db"


@pytest.fixture(scope="session")
def postgres_base():
    """A PostgreSQL server for the whole run (started once, always stopped)."""
    from tests._postgres import available, postgres_server

    reason = available()
    if reason:
        pytest.skip(f"PostgreSQL ledger tests need a server: {reason}")
    # Not under pytest's tmp dir: as root the server runs as 'postgres', which
    # must be able to reach its directory.
    workdir = tempfile.mkdtemp(prefix="spark-dp-pg-")
    try:
        with postgres_server(workdir) as base:
            yield base
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(params=["sqlite", "postgres"])
def any_ledger_uri(request, tmp_path):
    """A fresh, empty ledger on each backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/ledger.db"
    from tests._postgres import create_database

    base = request.getfixturevalue("postgres_base")
    return create_database(base, f"ledger_{uuid.uuid4().hex[:12]}")


@pytest.fixture
def connect_server(tmp_path):
    """A local Spark Connect server on a free 127.0.0.1 port; always stopped, nothing left behind."""
    from tests._servers import ConnectServer

    server = ConnectServer(tmp_path / "connect-server", python=sys.executable)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        assert not server.leftovers(), f"Spark Connect server processes left behind: {server.leftovers()}"


@pytest.fixture(scope="session")
def dist_artifacts(tmp_path_factory):
    """(wheel, packed environment) of ``make dist``: from dist/ under ``make test``, else built now."""
    from tests._servers import dist_artifacts

    return dist_artifacts(tmp_path_factory.mktemp("dist"))


@pytest.fixture(scope="session")
def built_wheel(tmp_path_factory):
    """The wheel ``make dist`` builds (from dist/ under ``make test``, else built now)."""
    from tests._servers import dist_artifacts

    return dist_artifacts(tmp_path_factory.mktemp("wheel"), wheel_only=True)[0]
