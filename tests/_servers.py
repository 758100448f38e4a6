"""Local Spark servers for the deployment tests (tests/test_deploy.py).

Starts, from the pip-installed pyspark, a Spark Connect server or a
standalone cluster (master + workers) bound to 127.0.0.1 on free ports, waits
until it is ready (bounded), and always stops it: every server runs in its own
session/process group, and stopping kills that group *and* every descendant
seen in /proc (PySpark's worker daemons move to process groups of their own,
so a group kill alone can miss them).

Nothing here uses SparkContext: servers are separate JVMs driven from the
command line, like a user would start them.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pyspark

SPARK_HOME = Path(pyspark.__file__).resolve().parent
REPO = Path(__file__).resolve().parents[1]
CONNECT_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
READY_TIMEOUT = 90.0  # seconds; servers were ready after 6-17 s on this 2-core machine
STOP_GRACE = 15.0  # seconds between SIGTERM and SIGKILL

# Environment variables that would make a child attach to the wrong Spark.
_SCRUB = (
    "SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "SPARK_CONNECT_MODE", "SPARK_LOCAL_REMOTE",
    "PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET", "PYSPARK_SUBMIT_ARGS", "_PYSPARK_DRIVER_CONN_INFO_PATH",
    "SPARK_CONF_DIR", "SPARK_DP_MASTER", "PYTHONPATH", "SPARK_MASTER_OPTS", "SPARK_WORKER_OPTS",
    "SPARK_DAEMON_JAVA_OPTS", "SPARK_SUBMIT_OPTS",
)


class ServerError(AssertionError):
    """A server did not come up, or a client run failed; the message carries the log tails."""


# --------------------------------------------------------------------------- ports, env, logs


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports free on 127.0.0.1 right now (all bound at once, then released)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1.0):
        return True
    return False


def spark_env(local_dir: Path, **extra: str) -> dict[str, str]:
    """Environment for a Spark child process: this pyspark, 127.0.0.1, scratch dirs under ``local_dir``."""
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    tmp = local_dir / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    java_tmp = f"-Djava.io.tmpdir={tmp}"
    env.update(
        SPARK_HOME=str(SPARK_HOME),
        SPARK_LOCAL_IP="127.0.0.1",
        # scratch (block manager, shuffle, temp files, Connect's model cache) under local_dir, not /tmp
        SPARK_LOCAL_DIRS=str(local_dir),
        TMPDIR=str(tmp),
        SPARK_SUBMIT_OPTS=java_tmp,  # JVMs started by spark-submit (Connect server, drivers)
        SPARK_DAEMON_JAVA_OPTS=java_tmp,  # master and workers
        PYTHONUNBUFFERED="1",
        OPENBLAS_NUM_THREADS="1",
    )
    env.update(extra)
    return env


def tail(path: Path | str, lines: int = 40) -> str:
    try:
        text = Path(path).read_text(errors="replace")
    except OSError as exc:
        return f"<no log: {exc}>"
    return "\n".join(text.splitlines()[-lines:])


def _section(title: str, path: Path | str, lines: int = 40) -> str:
    return f"\n----- {title} (last {lines} lines of {path}) -----\n{tail(path, lines)}"


# --------------------------------------------------------------------------- process trees


def _proc_stat(pid: int) -> tuple[int, str, int] | None:
    """(ppid, state, start time) of ``pid`` from /proc, or None if gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2:].split()
    return int(fields[1]), fields[0], int(fields[19])


def _descendants(root: int) -> set[tuple[int, int]]:
    """(pid, start time) of every live descendant of ``root``."""
    if not os.path.isdir("/proc"):
        return set()
    children: dict[int, list[tuple[int, int]]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = _proc_stat(int(entry))
            if st is not None:
                children.setdefault(st[0], []).append((int(entry), st[2]))
    out, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out:
                out.add(child)
                todo.append(child[0])
    return out


def _alive(pid: int, start: int) -> bool:
    st = _proc_stat(pid)
    return st is not None and st[2] == start and st[1] not in ("Z", "X")


def _signal_tree(leader: int, tree: set[tuple[int, int]], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(leader, sig)  # the leader's own group (start_new_session=True: pgid == pid)
    for pid, start in tree:
        if _alive(pid, start):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)


_LIVE: list[ManagedProcess] = []


@atexit.register
def _stop_leftovers() -> None:  # last resort, e.g. after a KeyboardInterrupt outside fixtures
    for proc in list(_LIVE):
        proc.stop()


class ManagedProcess:
    """A child in its own session, logging to a file; ``stop()`` kills its whole tree."""

    def __init__(self, name: str, cmd: list[str], *, env: dict[str, str], cwd: Path, log: Path,
                 stdout: Path | None = None) -> None:
        """``log`` gets stderr, and stdout too unless ``stdout`` names a file of its own."""
        self.name, self.cmd, self.log = name, cmd, log
        log.parent.mkdir(parents=True, exist_ok=True)
        cwd.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as err, open(stdout or os.devnull, "ab") as out:
            self.popen = subprocess.Popen(cmd, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                                          stdout=out if stdout else err, stderr=err, start_new_session=True)
        self.pid = self.popen.pid
        self._tree: set[tuple[int, int]] = set()
        _LIVE.append(self)

    def running(self) -> bool:
        return self.popen.poll() is None

    def failure(self, what: str) -> str:
        rc = self.popen.poll()
        state = "still running" if rc is None else f"exited with code {rc}"
        return f"{self.name} {what} ({state}); command: {' '.join(self.cmd)}" + _section(self.name, self.log)

    def stop(self) -> None:
        """SIGTERM to the group and all descendants, SIGKILL what is left after STOP_GRACE s; reaps."""
        if self in _LIVE:
            _LIVE.remove(self)
        self._tree |= _descendants(self.pid)
        _signal_tree(self.pid, self._tree, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE
        while time.monotonic() < deadline:
            self._tree |= _descendants(self.pid)
            if self.popen.poll() is not None and not any(_alive(*p) for p in self._tree):
                break
            time.sleep(0.2)
        _signal_tree(self.pid, self._tree, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=10)

    def leftovers(self) -> list[int]:
        """PIDs of this process's tree still alive (should be [] after stop())."""
        alive = [p for p, s in self._tree if _alive(p, s)]
        return alive + ([self.pid] if self.popen.poll() is None else [])


def wait_until(predicate, *, what: str, procs: list[ManagedProcess], timeout: float | None = None,
               interval: float = 0.5):
    """Polls ``predicate()`` until truthy (at most ``timeout``, default READY_TIMEOUT s); fails fast
    if a process dies, with log tails."""
    timeout = READY_TIMEOUT if timeout is None else timeout
    deadline = time.monotonic() + timeout
    while True:
        for proc in procs:
            if not proc.running():
                raise ServerError(proc.failure(f"died while waiting for {what}"))
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise ServerError(f"timed out after {timeout:.0f} s waiting for {what}\n"
                              + "\n".join(p.failure("not ready") for p in procs))
        time.sleep(interval)


def _bind_failed(proc: ManagedProcess) -> bool:
    log = tail(proc.log, 200)
    return not proc.running() and any(s in log for s in ("BindException", "Address already in use",
                                                         "Failed to bind", "Service '"))


# --------------------------------------------------------------------------- client runs


@dataclass
class Run:
    cmd: list[str]
    returncode: int | None  # None: killed after the timeout
    stdout: str
    stderr_log: Path
    seconds: float

    def describe(self, *servers) -> str:
        msg = (f"command {' '.join(self.cmd)!r} "
               + ("timed out" if self.returncode is None else f"exited with code {self.returncode}")
               + f" after {self.seconds:.1f} s\n----- stdout -----\n{self.stdout[-4000:]}"
               + _section("stderr", self.stderr_log, 60))
        for server in servers:
            msg += server.log_tails()
        return msg


def run_client(cmd: list[str], *, env: dict[str, str], cwd: Path, name: str, timeout: float = 240.0) -> Run:
    """Runs a client to completion in its own session (killed with its tree after ``timeout``)."""
    cwd.mkdir(parents=True, exist_ok=True)
    out_path, err_path = cwd / f"{name}.stdout", cwd / f"{name}.stderr"
    t0 = time.monotonic()
    proc = ManagedProcess(name, cmd, env=env, cwd=cwd, log=err_path, stdout=out_path)
    try:
        rc: int | None = proc.popen.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        rc = None
    finally:
        proc.stop()
    return Run(cmd, rc, out_path.read_text(errors="replace"), err_path, time.monotonic() - t0)


def run_connect_client(tmp_path: Path, server: ConnectServer, source: str, *, name: str) -> dict:
    """Runs ``source`` as a Spark Connect client of ``server``; asserts it succeeded; the JSON of its last line.

    The client runs this checkout's spark_dp (PYTHONPATH) and gets, as
    ``sys.argv[1]``, a zip of it for ``spark.addArtifacts(..., pyfile=True)``
    (the server's Python workers).
    """
    script = tmp_path / f"{name}.py"
    script.write_text(source)
    package = shutil.make_archive(str(tmp_path / "spark_dp_pkg"), "zip", root_dir=REPO, base_dir="spark_dp")
    env = spark_env(tmp_path / "client-local", SPARK_REMOTE=server.url, PYTHONPATH=str(REPO))
    run = run_client([sys.executable, str(script), package], env=env, cwd=tmp_path / "client", name=name)
    assert run.returncode == 0, run.describe(server)
    return json.loads(run.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- Spark Connect


class ConnectServer:
    """``spark-submit --class SparkConnectServer`` in the foreground (what start-connect-server.sh
    runs, without its daemonizing, global /tmp pid file and $SPARK_HOME/logs), master local[2],
    gRPC on 127.0.0.1:<free port>.

    ``spark_home`` is another pyspark's directory (default: this process's); ``packages`` are
    Maven coordinates for ``--packages``: pyspark 3.5's pip package has no Connect server jar, so
    ``start-connect-server.sh --packages org.apache.spark:spark-connect_2.12:<version>`` is how a
    3.5 server starts (Spark's Ivy resolver reads ~/.m2/repository first, then Maven Central, and
    keeps what it fetched in ~/.ivy2). A 3.5 server has no ``spark.connect.grpc.binding.address``
    (4.0 added it): it listens on all interfaces, and the tests reach it on 127.0.0.1 only.
    """

    def __init__(self, workdir: Path, *, python: str = sys.executable, master: str = "local[2]",
                 spark_home: Path = SPARK_HOME, packages: tuple[str, ...] = (), conf: dict[str, str] | None = None,
                 ready_timeout: float = READY_TIMEOUT) -> None:
        self.workdir, self.python, self.master = workdir, python, master
        self.spark_home, self.packages, self.ready_timeout = Path(spark_home), tuple(packages), ready_timeout
        self.conf = dict(conf or {})
        self.proc: ManagedProcess | None = None
        self.port: int | None = None
        self.startup_seconds: float | None = None

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    def _ready(self) -> bool:
        if not port_open(self.port):
            return False
        log = tail(self.proc.log, 400)
        started = re.search(rf"Spark Connect server started at: \S*:{self.port}\b", log)  # 3.5 logs "0:0:0:0:0:0:0:0%0:<port>"
        return bool(started) or f"SparkConnectService' on port {self.port}" in log

    def start(self, attempts: int = 3) -> ConnectServer:
        t0 = time.monotonic()
        for attempt in range(1, attempts + 1):
            (self.port,) = free_ports(1)
            env = spark_env(self.workdir / "local", SPARK_HOME=str(self.spark_home),
                            # the server's Python workers run mapInArrow: they need spark_dp, numpy, pyarrow
                            PYSPARK_PYTHON=self.python, PYSPARK_DRIVER_PYTHON=self.python)
            cmd = [
                str(self.spark_home / "bin" / "spark-submit"), "--class", CONNECT_SERVER_CLASS,
                *(["--packages", ",".join(self.packages)] if self.packages else []),
                "--name", "spark-dp test Connect server", "--master", self.master,
                "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
                "--conf", f"spark.connect.grpc.binding.port={self.port}",
                "--conf", "spark.port.maxRetries=0",  # bind exactly our port or die (then we retry)
                "--conf", "spark.ui.enabled=false",
                "--conf", "spark.sql.shuffle.partitions=2",
                "--conf", "spark.executorEnv.OPENBLAS_NUM_THREADS=1",
                "--conf", f"spark.sql.warehouse.dir={self.workdir / 'warehouse'}",
                *[arg for key, value in self.conf.items() for arg in ("--conf", f"{key}={value}")],
            ]
            self.proc = ManagedProcess("Spark Connect server", cmd, env=env, cwd=self.workdir,
                                       log=self.workdir / f"connect-server-{attempt}.log")
            try:
                wait_until(self._ready, what=f"Spark Connect on 127.0.0.1:{self.port}", procs=[self.proc],
                           timeout=self.ready_timeout)
            except ServerError:
                retry = attempt < attempts and _bind_failed(self.proc)
                self.stop()
                if retry:
                    continue
                raise
            self.startup_seconds = time.monotonic() - t0
            return self
        raise AssertionError("unreachable")

    def log_tails(self) -> str:
        return _section("Spark Connect server", self.proc.log, 60) if self.proc else ""

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()

    def leftovers(self) -> list[int]:
        return self.proc.leftovers() if self.proc else []

    def __enter__(self) -> ConnectServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# --------------------------------------------------------------------------- standalone cluster


class StandaloneCluster:
    """A master and ``workers`` workers (``--cores 1 --memory 1g`` each) via ``spark-class``."""

    def __init__(self, workdir: Path, *, workers: int = 2, worker_memory: str = "1g") -> None:
        self.workdir, self.n_workers, self.worker_memory = workdir, workers, worker_memory
        self.master: ManagedProcess | None = None
        self.workers: list[ManagedProcess] = []
        self.port = self.webui_port = None
        self.startup_seconds: float | None = None

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    @property
    def worker_dirs(self) -> list[Path]:
        return [self.workdir / f"worker-{i}" for i in range(self.n_workers)]

    def state(self) -> dict | None:
        """The master's /json/ page, or None if it does not answer (yet)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.webui_port}/json/", timeout=2) as resp:
                return json.load(resp)
        except (OSError, ValueError, urllib.error.URLError):
            return None

    def _master_up(self) -> bool:
        st = self.state()
        return bool(st) and st.get("url") == self.url and st.get("status", "ALIVE") == "ALIVE"

    def _workers_alive(self) -> int:
        st = self.state() or {}
        return sum(1 for w in st.get("workers", []) if w.get("state") == "ALIVE")

    def start(self, attempts: int = 3) -> StandaloneCluster:
        t0 = time.monotonic()
        spark_class = str(SPARK_HOME / "bin" / "spark-class")
        for attempt in range(1, attempts + 1):
            self.port, self.webui_port = free_ports(2)
            env = spark_env(self.workdir / "local",
                            # The master binds exactly our ports or dies (then we retry with new ones).
                            # Its REST submission server would want the fixed port 6066, which a
                            # concurrent test run may hold: it is off (spark-submit does not need it).
                            SPARK_MASTER_OPTS="-Dspark.port.maxRetries=0 -Dspark.master.rest.enabled=false")
            self.master = ManagedProcess(
                "master",
                [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                 "--port", str(self.port), "--webui-port", str(self.webui_port)],
                env=env, cwd=self.workdir, log=self.workdir / f"master-{attempt}.log")
            try:
                wait_until(self._master_up, what=f"the master at {self.url}", procs=[self.master])
            except ServerError:
                retry = attempt < attempts and _bind_failed(self.master)
                self.master.stop()
                if retry:
                    continue
                raise
            break
        try:
            for i, (wdir, webui) in enumerate(zip(self.worker_dirs, free_ports(self.n_workers), strict=True)):
                wdir.mkdir(parents=True, exist_ok=True)
                self.workers.append(ManagedProcess(
                    f"worker {i}",
                    [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                     "--cores", "1", "--memory", self.worker_memory, "--webui-port", str(webui),
                     "--work-dir", str(wdir), self.url],
                    env=spark_env(self.workdir / "local"), cwd=wdir, log=self.workdir / f"worker-{i}.log"))
            wait_until(lambda: self._workers_alive() >= self.n_workers,
                       what=f"{self.n_workers} workers registered at {self.url}",
                       procs=[self.master, *self.workers])
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - t0
        return self

    def processes(self) -> list[ManagedProcess]:
        return [p for p in (self.master, *self.workers) if p is not None]

    def log_tails(self) -> str:
        out = "".join(_section(p.name, p.log, 40) for p in self.processes())
        for wdir in self.worker_dirs:  # executor logs: <work-dir>/<app-id>/<executor-id>/stderr
            for err in sorted(wdir.glob("*/*/stderr")):
                out += _section(f"executor {err.parent.name}", err, 40)
        return out

    def stop(self) -> None:
        for proc in reversed(self.processes()):  # workers (and their executors) first
            proc.stop()

    def leftovers(self) -> list[int]:
        return [pid for p in self.processes() for pid in p.leftovers()]

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# --------------------------------------------------------------------------- what `make dist` builds


def dist_artifacts(out: Path, *, python: str = sys.executable, wheel_only: bool = False) -> tuple[Path, Path | None]:
    """(wheel, packed environment) as ``make dist`` builds them (scripts/dist.sh), or only the wheel.

    ``make test`` builds them once into dist/ before pytest and says so in
    ``SPARK_DP_DIST``; otherwise they are built into ``out`` with the same script.
    """
    import spark_dp

    ready = os.environ.get("SPARK_DP_DIST")
    if ready:
        wheel, archive = Path(ready) / f"spark_dp-{spark_dp.__version__}-py3-none-any.whl", Path(ready) / "spark-dp-env.tar.gz"
        assert wheel.is_file() and archive.is_file(), f"SPARK_DP_DIST={ready} lacks {wheel.name} or {archive.name}"
        return wheel, (None if wheel_only else archive)
    script = "build_wheel.sh" if wheel_only else "dist.sh"
    args = [str(out), python] if wheel_only else [python, str(out)]
    run = run_client(["bash", str(REPO / "scripts" / script), *args], env=spark_env(out / "local"),
                     cwd=out / "build", name=script, timeout=900)
    assert run.returncode == 0, run.describe()
    wheel = out / f"spark_dp-{spark_dp.__version__}-py3-none-any.whl"
    return wheel, (None if wheel_only else out / "spark-dp-env.tar.gz")
