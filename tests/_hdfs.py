"""A real HDFS for the tests: Hadoop's MiniDFSCluster (one NameNode, one DataNode) on 127.0.0.1.

The cluster is ``org.apache.hadoop:hadoop-client-minicluster`` (Hadoop 3.5.0, the client
pyspark 4.3 bundles) run by a small launcher, tests/hdfs/MiniHdfs.java, that the tests
compile here:

1. ``mvn dependency:build-classpath -f tests/hdfs/pom.xml`` resolves the jars into the local
   Maven repository (``~/.m2/repository``; the first run downloads about 60 MB) and writes
   their class path;
2. ``javac`` builds MiniHdfs.class against them.

Both land in ``${SPARK_DP_HDFS_DIR:-~/.cache/spark-dp/hdfs}/<hash of pom.xml and
MiniHdfs.java>/``, so a warm machine (CI keeps ``~/.m2`` and ``~/.cache``) skips them and
starts the cluster directly (about 10-20 s on the 2-core machine).

The cluster is stopped on every exit path: the fixture's finalizer and ``atexit`` stop its
process group and every descendant (tests/_servers.py ``ManagedProcess``), and the launcher
itself exits when the test process is gone (it watches that pid), so even a ``kill -9`` of
pytest leaves no NameNode behind.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from tests._servers import REPO, ManagedProcess, ServerError, wait_until

SOURCES = REPO / "tests" / "hdfs"
READY_TIMEOUT = 120.0  # seconds; the cluster was up after 10-25 s here (Jersey scans the shaded jar)
BUILD_TIMEOUT = 600.0  # a cold ~/.m2 downloads the minicluster jars (~60 MB)


def cache_dir() -> Path:
    root = os.environ.get("SPARK_DP_HDFS_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "spark-dp", "hdfs")
    key = hashlib.sha256(b"".join((SOURCES / n).read_bytes() for n in ("pom.xml", "MiniHdfs.java"))).hexdigest()
    return Path(root) / key[:16]


def _run(cmd: list[str], what: str, cwd: Path) -> None:
    try:
        done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=BUILD_TIMEOUT,
                              stdin=subprocess.DEVNULL)
    except FileNotFoundError as exc:
        raise ServerError(f"{what}: {exc.filename} is not installed (the HDFS tests need a JDK and Maven)") from exc
    if done.returncode != 0:
        raise ServerError(f"{what} failed ({done.returncode}): {' '.join(cmd)}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")


def launcher() -> tuple[Path, str]:
    """(directory of MiniHdfs.class, the jars' class path), built once per cache key."""
    out = cache_dir()
    cp_file, klass = out / "classpath.txt", out / "classes" / "MiniHdfs.class"
    if cp_file.is_file() and klass.is_file() and all(Path(j).is_file() for j in cp_file.read_text().split(os.pathsep)):
        return klass.parent, cp_file.read_text()
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out) as tmp:  # built aside, moved into place: a concurrent run sees all or nothing
        tmp = Path(tmp)
        _run(["mvn", "-q", "-B", "-f", str(SOURCES / "pom.xml"), "dependency:build-classpath",
              f"-Dmdep.outputFile={tmp / 'classpath.txt'}"], "resolving hadoop-client-minicluster", tmp)
        classpath = (tmp / "classpath.txt").read_text().strip()
        _run(["javac", "-cp", classpath, "-d", str(tmp / "classes"), str(SOURCES / "MiniHdfs.java")],
             "compiling tests/hdfs/MiniHdfs.java", tmp)
        shutil.rmtree(out / "classes", ignore_errors=True)
        (tmp / "classes").rename(out / "classes")
        (tmp / "classpath.txt").rename(cp_file)
    return klass.parent, cp_file.read_text()


class MiniHdfs:
    """The cluster: ``start()`` builds the launcher if needed and waits for ``READY hdfs://…``."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.proc: ManagedProcess | None = None
        self.url: str | None = None
        self.startup_seconds: float | None = None
        self.build_seconds: float | None = None

    def _ready(self) -> str | None:
        try:
            text = (self.workdir / "minihdfs.stdout").read_text()
        except OSError:
            return None
        return next((line.split()[1] for line in text.splitlines() if line.startswith("READY hdfs://")), None)

    def start(self) -> MiniHdfs:
        t0 = time.monotonic()
        classes, classpath = launcher()
        self.build_seconds = time.monotonic() - t0
        self.workdir.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HADOOP_", "SPARK_"))}
        cmd = ["java", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
               "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
               "-cp", os.pathsep.join([str(classes), classpath]),
               "MiniHdfs", str(self.workdir / "cluster"), str(os.getpid())]
        self.proc = ManagedProcess("MiniDFSCluster", cmd, env=env, cwd=self.workdir,
                                   log=self.workdir / "minihdfs.log", stdout=self.workdir / "minihdfs.stdout")
        try:
            self.url = wait_until(self._ready, what="the MiniDFSCluster's READY line", procs=[self.proc],
                                  timeout=READY_TIMEOUT)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - t0
        return self

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()

    def leftovers(self) -> list[int]:
        return self.proc.leftovers() if self.proc else []

    def __enter__(self) -> MiniHdfs:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
