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


_CONNECT_USERS: list = []  # the collected tests that use connect_server, in run order


def pytest_collection_finish(session):
    _CONNECT_USERS[:] = [item for item in session.items if "connect_server" in getattr(item, "fixturenames", ())]


@pytest.fixture(scope="session")
def _connect_server_holder(tmp_path_factory):
    """The run's one Spark Connect server (started on first use); stopped after its last user, or at the end."""
    holder = {"server": None, "starts": 0, "dir": tmp_path_factory.mktemp("connect-server")}
    yield holder
    _stop_connect_server(holder)


def _stop_connect_server(holder) -> None:
    server, holder["server"] = holder["server"], None
    if server is not None:
        server.stop()
        assert not server.leftovers(), f"Spark Connect server processes left behind: {server.leftovers()}"


@pytest.fixture
def connect_server(request, _connect_server_holder):
    """A local Spark Connect server on a free 127.0.0.1 port; always stopped, nothing left behind.

    One server serves every test that asks for it (a start costs 6-17 s here): each client is its own
    Connect session (own conf, artifacts and temp views); the tests' catalog objects have distinct names.
    A server that died is replaced before the next test; the server stops after its last user's teardown.
    """
    from tests._servers import ConnectServer

    holder = _connect_server_holder
    server = holder["server"]
    if server is None or not server.proc.running():
        if server is not None:  # died in an earlier test: clean up its tree, start afresh
            _stop_connect_server(holder)
        holder["starts"] += 1
        server = ConnectServer(holder["dir"] / f"server-{holder['starts']}", python=sys.executable)
        try:
            server.start()
        except BaseException:
            server.stop()
            raise
        holder["server"] = server
    yield server
    if not _CONNECT_USERS or request.node is _CONNECT_USERS[-1]:
        _stop_connect_server(holder)


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
