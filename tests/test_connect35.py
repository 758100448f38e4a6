"""Spark Connect on pyspark 3.5 — the Databricks LTS shape (15.4 / 16.4 LTS serverless and shared clusters).

A Connect server of the 3.5 line (pyspark 3.5.7's ``spark-submit --class SparkConnectServer
--packages org.apache.spark:spark-connect_2.12:3.5.7``: what ``start-connect-server.sh`` runs;
pyspark's pip package has neither the script nor the jar) on a free 127.0.0.1 port, and the
built wheel on a pyspark 3.5 client: the matrix venv ``spark35`` (scripts/matrix_env.sh), in
which pyspark 3.5's ``[connect]`` extra is not installed (it pins numpy < 2) but the client's
real dependencies are (grpcio, grpcio-status, googleapis-common-protos, pandas, pyarrow). The
client runs scripts/smoke_connect.py: one release of each family, a dry run and a budget refusal.

Cost: the venv is cached (~/.cache/spark-dp/matrix, shared with tests/test_version_matrix.py);
the jar (14 MB) is fetched once by Spark's Ivy into ~/.cache/spark-dp/ivy; the server starts in 15-30 s here.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests._servers import REPO, ConnectServer, run_client, spark_env

pytestmark = pytest.mark.matrix

CONNECT_PACKAGE = "org.apache.spark:spark-connect_2.12:3.5.7"  # = the spark35 venv's pyspark (matrix_env.sh)
ENV_TIMEOUT = 1500.0  # a cold pip cache downloads and builds pyspark 3.5.7 (~4 min measured here)
SERVER_TIMEOUT = 600.0  # a cold ~/.m2 / ~/.ivy2: Ivy fetches the jar from Maven Central first


def ivy_dir() -> Path:
    """Where Spark's Ivy keeps the Connect jar it fetched: outside the checkout, so CI's next run reuses it."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(os.environ.get("SPARK_DP_IVY_DIR") or os.path.join(root, "spark-dp", "ivy"))


def test_release_families_dry_run_and_refusal_over_connect_35(built_wheel, tmp_path):
    base_python = getattr(sys, "_base_executable", sys.executable)
    env = spark_env(tmp_path / "local")
    del env["SPARK_HOME"]
    made = run_client(["bash", str(REPO / "scripts" / "matrix_env.sh"), "spark35", str(built_wheel), base_python],
                      env=env, cwd=tmp_path / "env", name="matrix-env", timeout=ENV_TIMEOUT)
    assert made.returncode == 0, made.describe()
    python = made.stdout.strip().splitlines()[-1]
    probe = run_client([python, "-I", "-c", "import json, pathlib, pyspark; print(json.dumps("
                        "[pyspark.__version__, str(pathlib.Path(pyspark.__file__).parent)]))"],
                       env=env, cwd=tmp_path / "probe", name="probe", timeout=120)
    assert probe.returncode == 0, probe.describe()
    version, spark_home = json.loads(probe.stdout.strip().splitlines()[-1])
    assert CONNECT_PACKAGE.endswith(":" + version), (CONNECT_PACKAGE, version)

    ivy = {"spark.jars.ivySettings": str(REPO / "tests" / "connect35-ivysettings.xml"), "spark.jars.ivy": str(ivy_dir())}
    with ConnectServer(tmp_path / "server", python=python, spark_home=Path(spark_home), packages=(CONNECT_PACKAGE,),
                       conf=ivy, ready_timeout=SERVER_TIMEOUT) as server:
        client_env = spark_env(tmp_path / "client-local", SPARK_REMOTE=server.url)
        del client_env["SPARK_HOME"]
        client_env.pop("PYTHONPATH", None)
        run = run_client([python, "-I", str(REPO / "scripts" / "smoke_connect.py"), "--repo", str(REPO),
                          "--workdir", str(tmp_path / "w")], env=client_env, cwd=tmp_path / "client",
                         name="smoke-connect", timeout=600)
        lines = run.stdout.strip().splitlines()
        summary = next((json.loads(line) for line in reversed(lines) if line.startswith("{")), None)
        assert summary is not None, run.describe(server)
        failed = [f"{c['name']}: {c['error']}" for c in summary["checks"] if not c["ok"]]
        assert not failed and run.returncode == 0, "\n".join(failed) + "\n" + run.describe(server)
    assert not server.leftovers(), f"Connect server processes left behind: {server.leftovers()}"
    assert [c["name"] for c in summary["checks"]] == [
        "connect_session", "second_moment", "tensor", "count_sketch", "dry_run", "budget_refusal"]
    versions = summary["versions"]
    assert versions["pyspark"] == version == versions["spark"], versions  # a 3.5 client on a 3.5 server
    assert versions["numpy"].split(".")[0] == "2", versions
    times = ", ".join(f"{c['name']} {c['seconds']}" for c in summary["checks"])
    print(f"\n[connect35] {versions}: env {made.seconds:.1f} s, server ready in {server.startup_seconds:.1f} s, "
          f"client {run.seconds:.1f} s ({times})")
