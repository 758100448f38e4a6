"""A throwaway PostgreSQL server on 127.0.0.1 for the ledger tests.

Uses the machine's PostgreSQL binaries (``pg_ctl``/``initdb`` on PATH or in
/usr/lib/postgresql/*/bin; ``scripts/bootstrap.sh`` installs them when it can).
PostgreSQL refuses to run as root, so as root the server runs as the
``postgres`` user. A free port is picked, readiness is awaited with a
timeout, and the server is always stopped.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import time
from contextlib import contextmanager


def _bindir() -> str | None:
    found = shutil.which("pg_ctl")
    if found:
        return os.path.dirname(os.path.realpath(found))
    cands = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return os.path.dirname(cands[-1]) if cands else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def available() -> str | None:
    """None if a server can be started here, else the reason it cannot."""
    if _bindir() is None:
        return "no PostgreSQL server binaries (pg_ctl) on this machine"
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "running as root without runuser"
    return None


@contextmanager
def postgres_server(workdir: str, timeout: float = 60.0):
    """Starts a server in ``workdir``; yields its base URI (database ``postgres``)."""
    bindir = _bindir()
    assert bindir is not None
    os.makedirs(workdir, exist_ok=True)
    data, sock, log = (os.path.join(workdir, n) for n in ("data", "sock", "server.log"))
    os.makedirs(sock, exist_ok=True)
    prefix: list[str] = []
    if os.geteuid() == 0:
        import pwd

        pw = pwd.getpwnam("postgres")
        for path in (workdir, sock):
            os.chown(path, pw.pw_uid, pw.pw_gid)
        os.chmod(workdir, 0o700)
        prefix = ["runuser", "-u", "postgres", "--"]
    port = free_port()
    run = lambda *args: subprocess.run([*prefix, *args], capture_output=True, text=True, timeout=timeout)  # noqa: E731
    init = run(os.path.join(bindir, "initdb"), "-D", data, "-A", "trust", "-U", "spark_dp", "--no-sync")
    if init.returncode != 0:
        raise RuntimeError(f"initdb failed: {init.stderr[-2000:]}")
    start = run(os.path.join(bindir, "pg_ctl"), "-D", data, "-l", log, "-w", "-t", str(int(timeout)),
                "-o", f"-p {port} -k {sock} -c listen_addresses=127.0.0.1", "start")
    try:
        if start.returncode != 0:
            tail = open(log).read()[-2000:] if os.path.exists(log) else ""
            raise RuntimeError(f"PostgreSQL did not start: {start.stderr[-1000:]} {tail}")
        deadline = time.monotonic() + timeout
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("PostgreSQL did not accept connections in time") from None
                time.sleep(0.2)
        yield f"postgresql://spark_dp@127.0.0.1:{port}"
    finally:
        run(os.path.join(bindir, "pg_ctl"), "-D", data, "-m", "immediate", "-w", "stop")


def create_database(base_uri: str, name: str) -> str:
    import psycopg

    with psycopg.connect(f"{base_uri}/postgres", autocommit=True) as con:
        con.execute(f'CREATE DATABASE "{name}"')
    return f"{base_uri}/{name}"
