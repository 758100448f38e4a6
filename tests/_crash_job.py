"""Runs the release CLI in this process and kills it with SIGKILL at one point.

Used by the crash tests in ``tests/test_job.py``, in a subprocess::

    python -m tests._crash_job <point> release <config.yaml>

The faults are injected from the test side, by wrapping library functions in
this process before the real CLI runs; the library has no test hooks. The
death is a real ``kill -9`` of the process itself: no ``finally`` blocks, no
``except BaseException`` cleanup, no atexit handlers. Points:

``after_check``
    right after ``Chokepoint.check`` (the budget dry run) returns: before any
    Spark work and before the charge.
``after_charge``
    right after ``Chokepoint.charge`` returns, i.e. the charge is durable in
    the ledger and no noise has been drawn.
``during_write``
    right after the first payload file is written into the release's hidden
    temporary directory (``<output>/.tmp-…``): before the manifest and before
    the atomic rename.
``before_manifest``
    on an object store (``output.path`` ``s3://…``), right after the first
    payload file is moved from the temporary prefix into the release's own
    prefix: the payload is there, the manifest (the commit marker) is not.

If the point is never reached the job exits normally, and the test's
``returncode == -9`` check fails.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _kill_after(owner, name: str, when=None) -> None:
    """Replaces ``owner.name`` by a wrapper that kills the process after the real call returns."""
    real = getattr(owner, name)

    @functools.wraps(real)
    def wrapper(*args, **kwargs):
        out = real(*args, **kwargs)
        if when is None or when(*args, **kwargs):
            _die()
        return out

    setattr(owner, name, wrapper)


def _into_release_tmp_dir(table, where, *args, **kwargs) -> bool:
    parent = os.path.basename(os.path.dirname(os.fspath(where)))
    return parent.startswith(".tmp-")


def _payload_not_manifest(src, dst) -> bool:
    return os.path.basename(dst.path) != "manifest.json"


def install(point: str) -> None:
    from spark_dp.privacy.chokepoint import Chokepoint

    if point == "after_check":
        _kill_after(Chokepoint, "check")
    elif point == "after_charge":
        _kill_after(Chokepoint, "charge")
    elif point == "during_write":
        import pyarrow.parquet as pq

        import spark_dp.release.release as release_module

        # write_release calls pq.write_table through the module object it imported
        assert release_module.pq is pq
        _kill_after(pq, "write_table", when=_into_release_tmp_dir)
    elif point == "before_manifest":
        import spark_dp.release.release as release_module

        # _write_remote calls _publish through the module's globals, once per file, the manifest last
        _kill_after(release_module, "_publish", when=_payload_not_manifest)
    else:
        raise SystemExit(f"unknown fault point {point!r}")


def run_crash_job(config_path: str, fault: str) -> subprocess.CompletedProcess:
    """Runs ``spark-dp release config_path`` in a subprocess that SIGKILLs itself at ``fault``.

    The subprocess inherits the environment (e.g. the AWS variables of an object-store test),
    with this checkout first on ``PYTHONPATH`` and no ``SPARK_REMOTE``.
    """
    env = dict(os.environ, PYTHONPATH=_ROOT)
    env.pop("SPARK_REMOTE", None)
    # The child's driver JVM lives for one tiny job and is killed: C1-only JIT starts and runs it ~1/3 faster
    # (21.6 -> 14.2 s for after_charge, mean of 3 back-to-back pairs). A JIT setting: nothing the test checks
    # depends on it. (IgnoreUnrecognizedVMOptions: harmless on a JVM without the flag.)
    env.setdefault("PYSPARK_SUBMIT_ARGS", "--driver-java-options "
                   "'-XX:+IgnoreUnrecognizedVMOptions -XX:TieredStopAtLevel=1' pyspark-shell")
    return subprocess.run([sys.executable, "-m", "tests._crash_job", fault, "release", config_path],
                          env=env, cwd=_ROOT, capture_output=True, text=True, timeout=300)


def main(argv: list[str]) -> int:
    point, *cli_args = argv
    install(point)
    from spark_dp.cli.main import main as cli_main

    return cli_main(cli_args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
