"""End to end: the demo release job on a Spark Connect server and on a standalone cluster.

Both start real servers from the installed pyspark on 127.0.0.1 (free ports,
bounded readiness waits, everything killed in teardown; see tests/_servers.py)
and run the job the way a user would, in a subprocess:

* Spark Connect: ``SPARK_REMOTE=sc://… python -m spark_dp.cli.main release``;
  plus a probe that runs library code in a client where SparkContext cannot
  start, since Connect (Databricks serverless, shared clusters) has none.
* Standalone: the README's spark-submit lines, with what ``make dist`` builds
  (scripts/dist.sh: the wheel and the packed environment ``spark-dp-env.tar.gz``):
  ``--archives dist/spark-dp-env.tar.gz#environment`` with
  ``PYSPARK_PYTHON=./environment/bin/python``, the driver on the same archive
  unpacked locally. Driver and executors run an interpreter that cannot see
  the editable install, so they import spark_dp from the archive or fail.
"""

from __future__ import annotations

import ast
import json
import sys
import tarfile
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml

import spark_dp
from spark_dp.cli.demo import make_demo_data
from spark_dp.privacy import open_ledger
from tests._servers import (
    REPO,
    SPARK_HOME,
    StandaloneCluster,
    run_client,
    spark_env,
)

pytestmark = pytest.mark.cluster

COLUMNS = ["x1", "x2", "x3"]
DATASET_ID = "demo.points"


# --------------------------------------------------------------------------- helpers


def write_job_config(tmp_path: Path, release_id: str, data: Path) -> Path:
    """conf/demo_second_moment.yaml with data, ledger and output moved under tmp_path."""
    config = yaml.safe_load((REPO / "conf" / "demo_second_moment.yaml").read_text())
    config["release_id"] = release_id
    config["dataset"]["path"] = str(data)
    config["ledger"]["uri"] = f"sqlite:///{tmp_path / 'ledger.db'}"  # sqlite:////abs/path
    config["output"]["path"] = str(tmp_path / "releases")
    path = tmp_path / f"{release_id}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def clipped_gram(data: Path, norm_bound: float = 1.0) -> np.ndarray:
    """The exact AᵀA the job noises, computed in numpy (rows scaled to norm ≤ B)."""
    X = pq.read_table(data, columns=COLUMNS).to_pandas().to_numpy(dtype=np.float64)
    X = X * np.minimum(1.0, norm_bound / np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-300))
    return X.T @ X


def summary_of(run) -> dict:
    """The JSON summary ``spark-dp release`` prints on stdout."""
    out = run.stdout
    try:
        return json.loads(out[out.index("{"): out.rindex("}") + 1])
    except ValueError:
        raise AssertionError(f"no JSON summary on stdout: {out!r}") from None


def check_release(path: str, release_id: str, data: Path, *, sampler: str = "secure") -> spark_dp.Release:
    """The release directory holds a correct private 3×3 second-moment matrix and its manifest."""
    rel = spark_dp.load_release(path)
    m, p = rel.manifest, rel.privacy
    assert rel.release_id == m["release_id"] == release_id
    assert (m["task"], m["mechanism"], m["dataset_id"]) == ("second_moment", "analyze_gauss", DATASET_ID)
    assert m["columns"] == COLUMNS
    assert m["library_version"] == spark_dp.__version__
    assert m["payload"]["matrix"]["shape"] == [3, 3]
    assert len(m["config_sha256"]) == 64
    assert (p["epsilon"], p["delta"], p["norm_bound"], p["neighbors"]) == (1.0, 1e-6, 1.0, "add_remove")
    assert (p["sampler"], p["private"], p["sensitivity"]) == (sampler, True, 1.0)
    assert p["noise_sigma"] == pytest.approx(4.2247, abs=1e-3)  # exact Gaussian profile at ε=1, δ=1e-6
    matrix = rel["matrix"]
    assert matrix.shape == (3, 3)
    assert np.array_equal(matrix, matrix.T), "noise is added to the upper triangle and mirrored"
    # 6 independent N(0, σ²) entries: all within 8σ except with probability ~1e-14.
    err = np.abs(matrix - clipped_gram(data))
    assert err.max() < 8 * p["noise_sigma"], f"release is {err.max():.1f} from the exact AᵀA (σ = {p['noise_sigma']:.3f})"
    return rel


FORBIDDEN_ATTRIBUTES = {"rdd", "sparkContext", "_jsc", "_jvm", "_jdf", "_jsparkSession"}
FORBIDDEN_NAMES = {"SparkContext", "RDD"}
FORBIDDEN_MODULES = {"pyspark.rdd", "pyspark.context"}


def classic_only_uses(package: Path) -> list[str]:
    """Code (not strings or comments) in ``package`` that needs SparkContext, the RDD API or the JVM."""
    hits = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            bad = None
            if isinstance(node, ast.Attribute) and node.attr in FORBIDDEN_ATTRIBUTES | FORBIDDEN_NAMES:
                bad = node.attr
            elif isinstance(node, ast.Name) and node.id in FORBIDDEN_NAMES:
                bad = node.id
            elif isinstance(node, ast.Import):
                bad = next((a.name for a in node.names if a.name in FORBIDDEN_MODULES), None)
            elif isinstance(node, ast.ImportFrom):
                if node.module in FORBIDDEN_MODULES:
                    bad = node.module
                else:
                    bad = next((a.name for a in node.names if a.name in FORBIDDEN_NAMES), None)
            if bad:
                hits.append(f"{path.relative_to(package.parent)}:{node.lineno}: {bad}")
    return hits


# A Spark Connect client that cannot start a SparkContext: any library code path
# reaching for one (which in a plain Connect client would silently launch a local
# JVM instead of using the server) raises.
CONNECT_PROBE = r'''
import json, sys
import numpy as np
import pyspark
from pyspark import SparkContext

def _no_spark_context(*args, **kwargs):
    raise RuntimeError("library code tried to start a SparkContext under Spark Connect")

import pyspark.context, pyspark.java_gateway
SparkContext._ensure_initialized = classmethod(_no_spark_context)
pyspark.context.launch_gateway = pyspark.java_gateway.launch_gateway = _no_spark_context

from pyspark.sql.connect.session import SparkSession as ConnectSession
import spark_dp
from spark_dp.aggregates import gram_matrix
from spark_dp.privacy import SeededSampler
from spark_dp.runtime import get_spark

data, ledger, out = sys.argv[1:4]
spark = get_spark()
assert isinstance(spark, ConnectSession), f"get_spark() gave {type(spark)} with SPARK_REMOTE set"
assert spark.range(3).count() == 3  # trivial query
try:
    spark.sparkContext
except Exception:
    pass
else:
    raise AssertionError("spark.sparkContext worked: this is not a Spark Connect session")

df = spark.read.parquet(data)
gram = gram_matrix(df, ["x1", "x2", "x3"], norm_bound=1.0)
dp = spark_dp.DPSession("probe.points", ledger=ledger, epsilon_limit=5.0, delta_limit=1e-5, output=out,
                        sampler=SeededSampler(np.random.default_rng(0)))
rel = dp.second_moment(df, ["x1", "x2", "x3"], epsilon=1.0, delta=1e-6, norm_bound=1.0, release_id="probe")
assert SparkContext._active_spark_context is None and SparkContext._gateway is None, "a SparkContext was started"
print(json.dumps({"gram": gram.tolist(), "release": rel.path}))
'''


# --------------------------------------------------------------------------- fixtures


@pytest.fixture
def standalone_cluster(tmp_path):
    cluster = StandaloneCluster(tmp_path / "cluster", workers=2, worker_memory="1g")
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        assert not cluster.leftovers(), f"standalone cluster processes left behind: {cluster.leftovers()}"


# --------------------------------------------------------------------------- tests


def test_demo_release_over_spark_connect(tmp_path, connect_server):
    t0 = time.monotonic()
    # Static half of "works without SparkContext": no classic-only API in library code.
    assert classic_only_uses(REPO / "spark_dp") == [], "spark_dp/ must not use SparkContext, RDDs or the JVM"

    data = tmp_path / "demo.parquet"
    make_demo_data(str(data))
    config = write_job_config(tmp_path, "deploy-connect-001", data)
    env = spark_env(tmp_path / "client-local", SPARK_REMOTE=connect_server.url)
    client = tmp_path / "client"

    # Library code in a client that has no SparkContext and cannot start one.
    probe_py = tmp_path / "connect_probe.py"
    probe_py.write_text(CONNECT_PROBE)
    probe = run_client([sys.executable, str(probe_py), str(data), f"sqlite:///{tmp_path / 'probe-ledger.db'}",
                        str(tmp_path / "probe-releases")], env=env, cwd=client, name="probe")
    assert probe.returncode == 0, probe.describe(connect_server)
    probe_out = json.loads(probe.stdout.strip().splitlines()[-1])
    np.testing.assert_allclose(np.array(probe_out["gram"]), clipped_gram(data), rtol=1e-10, atol=1e-9)
    assert spark_dp.load_release(probe_out["release"])["matrix"].shape == (3, 3)

    # The demo job, as a user runs it against a Connect endpoint.
    cli = [sys.executable, "-m", "spark_dp.cli.main", "release", str(config)]
    first = run_client(cli, env=env, cwd=client, name="release-1")
    assert first.returncode == 0, first.describe(connect_server)
    s1 = summary_of(first)
    assert (s1["release_id"], s1["reused"], s1["dataset_id"]) == ("deploy-connect-001", False, DATASET_ID)
    rel = check_release(s1["path"], "deploy-connect-001", data)
    assert Path(s1["path"]).parent == tmp_path / "releases"

    # Same release id again: the stored release comes back, no new noise, no second charge.
    second = run_client(cli, env=env, cwd=client, name="release-2")
    assert second.returncode == 0, second.describe(connect_server)
    s2 = summary_of(second)
    assert s2["reused"] is True and s2["path"] == s1["path"]
    assert np.array_equal(spark_dp.load_release(s2["path"])["matrix"], rel["matrix"])
    (status,) = open_ledger(f"sqlite:///{tmp_path / 'ledger.db'}").status(DATASET_ID)
    assert status.releases == 1
    assert s2["dataset_epsilon_spent"] == s1["dataset_epsilon_spent"] == pytest.approx(status.spent_epsilon)
    print(f"\n[deploy] Spark Connect: server ready in {connect_server.startup_seconds:.1f} s, probe {probe.seconds:.1f} s, "
          f"release {first.seconds:.1f} s, re-run {second.seconds:.1f} s, test body {time.monotonic() - t0:.1f} s")


def test_demo_release_on_standalone_cluster_with_packed_environment(tmp_path, standalone_cluster, dist_artifacts):
    t0 = time.monotonic()
    data = tmp_path / "demo.parquet"
    make_demo_data(str(data))
    config = write_job_config(tmp_path, "deploy-cluster-001", data)
    _, archive = dist_artifacts

    # The README's client-mode steps, in the driver's working directory: the archive unpacked
    # as ./environment is the driver's Python; --archives unpacks it as ./environment in
    # every executor's directory. That Python is a venv of the base interpreter: neither the
    # project venv nor its editable install of spark_dp is visible to it.
    driver = tmp_path / "driver"
    (driver / "environment").mkdir(parents=True)
    with tarfile.open(archive) as tar:
        tar.extractall(driver / "environment", filter="tar")
    python = "./environment/bin/python"
    check = run_client([python, "-c", "import spark_dp, sys; print(spark_dp.__file__); print(sys.prefix)"],
                       env=spark_env(tmp_path / "check-local"), cwd=driver, name="driver-python", timeout=60)
    assert check.returncode == 0, check.describe()
    where, prefix = check.stdout.split()
    assert Path(where).resolve().is_relative_to((driver / "environment").resolve()), f"spark_dp from {where}"
    assert Path(prefix).resolve() == (driver / "environment").resolve(), prefix

    (tmp_path / "executor-tmp").mkdir()
    env = spark_env(tmp_path / "driver-local", PYSPARK_PYTHON=python, PYSPARK_DRIVER_PYTHON=python)
    submit = run_client(
        [str(SPARK_HOME / "bin" / "spark-submit"), "--master", standalone_cluster.url,
         "--name", "spark-dp deploy test", "--archives", f"{archive}#environment",
         "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.driver.bindAddress=127.0.0.1",
         "--conf", "spark.ui.enabled=false", "--conf", "spark.executor.memory=1g",
         "--conf", "spark.executorEnv.OPENBLAS_NUM_THREADS=1",
         "--conf", f"spark.executor.extraJavaOptions=-Djava.io.tmpdir={tmp_path / 'executor-tmp'}",
         "--conf", f"spark.sql.warehouse.dir={tmp_path / 'warehouse'}",
         str(REPO / "jobs" / "release.py"), str(config)],
        env=env, cwd=driver, name="spark-submit")
    assert submit.returncode == 0, submit.describe(standalone_cluster)

    s = summary_of(submit)
    assert (s["release_id"], s["reused"], s["dataset_id"]) == ("deploy-cluster-001", False, DATASET_ID)
    assert s["path"] == str(tmp_path / "releases" / "deploy-cluster-001")
    check_release(s["path"], "deploy-cluster-001", data)
    (status,) = open_ledger(f"sqlite:///{tmp_path / 'ledger.db'}").status(DATASET_ID)
    assert status.releases == 1

    # The archive was unpacked in the executors' directories; their Python workers could only
    # import spark_dp (the release's mapInArrow pass needs it) from there.
    worker_dirs = [d.resolve() for d in standalone_cluster.worker_dirs]
    unpacked = [p for d in worker_dirs for p in d.glob("*/*/environment/bin/python")]
    assert unpacked, "no executor unpacked the environment archive" + standalone_cluster.log_tails()
    print(f"\n[deploy] standalone: cluster ready in {standalone_cluster.startup_seconds:.1f} s, "
          f"spark-submit {submit.seconds:.1f} s, test body {time.monotonic() - t0:.1f} s, "
          f"executors with the environment: {len(unpacked)}")
