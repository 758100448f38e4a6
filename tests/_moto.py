"""A local S3-compatible server for the object-store tests: moto's standalone server on 127.0.0.1.

:func:`moto_server` starts ``python -m moto.server`` (``moto[server]``, in the test extra) in its
own process group on a free port, waits until it answers (bounded), yields its endpoint URL and
always stops it (SIGTERM, then SIGKILL of the group). The tests reach it the way users reach any
S3 endpoint: the standard AWS environment (:func:`aws_env`), never a config file.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import subprocess
import sys
import time
import urllib.request

from tests._servers import free_ports

READY_TIMEOUT = 60.0  # seconds; the server answered after about 2 s here
STOP_GRACE = 10.0


def unavailable() -> str | None:
    """Why the server cannot start here (None: it can)."""
    if importlib.util.find_spec("moto") is None or importlib.util.find_spec("flask") is None:
        return "moto[server] is not installed (pip install -e '.[test]')"
    return None


def aws_env(endpoint: str) -> dict[str, str]:
    """The standard AWS environment for the local server: fixed test keys, its endpoint, a region."""
    return {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_ENDPOINT_URL": endpoint,
            "AWS_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}


#: AWS variables a developer's shell may hold that would point the tests at another account or endpoint.
AWS_SCRUB = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3",
             "AWS_DEFAULT_REGION", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE")


@contextlib.contextmanager
def moto_server(log_path: str):
    """Runs moto's server on a free 127.0.0.1 port; yields ``http://127.0.0.1:<port>``; always stops it."""
    port = free_ports(1)[0]
    endpoint = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if k not in AWS_SCRUB}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + READY_TIMEOUT
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"moto server exited with {proc.returncode}: {_tail(log_path)}")
            try:
                with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise AssertionError(f"moto server not ready after {READY_TIMEOUT:.0f} s: {_tail(log_path)}")
                time.sleep(0.2)
        yield endpoint
    finally:
        _stop(proc)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(STOP_GRACE)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(STOP_GRACE)


def _tail(path: str, n: int = 2000) -> str:
    with open(path, "rb") as fh:
        return fh.read()[-n:].decode("utf-8", "replace")
