"""``hdfs://`` for real: a MiniDFSCluster (tests/_hdfs.py) started on 127.0.0.1 for this module.

Spark (its bundled Hadoop client) reads the job's Parquet input from ``hdfs://``; the
release is written to and loaded from ``hdfs://`` through ``pyarrow.fs`` — here with
``hdfs-native`` behind ``pyarrow.fs.PyFileSystem``, since this machine has no libhdfs
(spark_dp/release/storage.py says when each is used). The commit protocol is the remote
one: payload staged under ``.tmp-…``, renamed into the release directory, manifest last;
a writer SIGKILLed between payload and manifest leaves a release no reader sees.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

import spark_dp
from spark_dp.audit import audit_releases
from spark_dp.cli.main import main as cli_main
from spark_dp.errors import SchemaError
from spark_dp.privacy import open_ledger
from spark_dp.release import Release, release_exists, storage, write_release
from tests._hdfs import MiniHdfs
from tests._jobs import charges, write_config
from tests._servers import REPO, free_ports

pytest.importorskip("hdfs_native", reason="needs the test extra (hdfs-native)")


@pytest.fixture(scope="module")
def hdfs(tmp_path_factory):
    """The cluster for this module's tests: started once, always stopped, nothing left behind."""
    cluster = MiniHdfs(tmp_path_factory.mktemp("minihdfs"))
    cluster.start()
    print(f"\n[hdfs] {cluster.url}: launcher ready in {cluster.build_seconds:.1f} s, "
          f"cluster up in {cluster.startup_seconds:.1f} s")
    try:
        yield cluster
    finally:
        cluster.stop()
        assert not cluster.leftovers(), f"MiniDFSCluster processes left behind: {cluster.leftovers()}"


def _files(uri: str) -> list[str]:
    """Every file under ``uri``, relative to it."""
    loc = storage.locate(uri)
    infos = loc.fs.get_file_info(pafs.FileSelector(loc.path, recursive=True, allow_not_found=True))
    return sorted(i.path[len(loc.path) + 1:] for i in infos if i.type == pafs.FileType.File)


def _data(hdfs, name: str) -> tuple[str, np.ndarray]:
    """A Parquet file of 300 rows written to HDFS; (its URI, the rows)."""
    X = np.random.default_rng(5).normal(size=(300, 3)) * 0.5
    uri = f"{hdfs.url}/{name}/data/points.parquet"
    loc = storage.locate(uri)
    loc.fs.create_dir(loc.path.rsplit("/", 1)[0], recursive=True)
    pq.write_table(pa.table({"x1": X[:, 0], "x2": X[:, 1], "x3": X[:, 2]}), loc.path, filesystem=loc.fs)
    return uri, X


def _job(tmp_path, data: str, root: str, release_id: str = "job-001") -> str:
    return write_config(tmp_path, {
        "release_id": release_id,
        "dataset": {"id": "t.points", "path": data, "format": "parquet", "columns": ["x1", "x2", "x3"]},
        "task": "second_moment", "mechanism": "analyze_gauss",
        "privacy": {"epsilon": 1.0, "delta": 1e-6, "norm_bound": 1.0, "sampler": "numpy"},
        "params": {},
        "ledger": {"uri": f"sqlite:///{tmp_path}/ledger.db", "epsilon_limit": 3.0, "delta_limit": 1e-5},
        "output": {"path": root},
    }, name=f"{release_id}.yaml")


def test_hdfs_uses_libhdfs_or_hdfs_native(hdfs):
    fs = storage.locate(f"{hdfs.url}/").fs
    try:
        pafs.FileSystem.from_uri(hdfs.url)
    except OSError:  # this machine: no libhdfs, so the pure client behind pyarrow.fs.PyFileSystem
        assert isinstance(fs, pafs.PyFileSystem) and type(fs.handler.fs).__module__ == "hdfs_native.fsspec"
    else:
        assert isinstance(fs, pafs.HadoopFileSystem)


def test_release_reads_from_and_writes_to_hdfs(spark, tmp_path, hdfs, capsys):
    data, X = _data(hdfs, "job")
    root = f"{hdfs.url}/job/releases"
    config = _job(tmp_path, data, root)
    assert cli_main(["release", config]) == 0
    first = json.loads(capsys.readouterr().out)
    path = f"{root}/job-001"
    assert first["path"] == path and first["reused"] is False
    assert _files(root) == ["job-001/manifest.json", "job-001/matrix.parquet"]  # no staging prefix left
    rel = spark_dp.load_release(path)
    clipped = X * np.minimum(1.0, 1.0 / np.linalg.norm(X, axis=1, keepdims=True))
    exact = clipped.T @ clipped
    assert np.abs(rel["matrix"] - exact).max() < 8 * rel.privacy["noise_sigma"]
    # the input's lineage: Spark listed the hdfs:// file, pyarrow.fs gave its size and time
    lineage = rel.manifest["input"]
    assert lineage["kind"] == "files" and lineage["files_stats"] == "size+mtime", lineage
    # a re-run is the stored release (read back from HDFS), no new noise, no new charge
    assert cli_main(["release", config]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["reused"] is True and again["dataset_epsilon_spent"] == first["dataset_epsilon_spent"]
    np.testing.assert_array_equal(spark_dp.load_release(path)["matrix"], rel["matrix"])
    report = audit_releases(open_ledger(f"sqlite:///{tmp_path}/ledger.db"), root)
    assert report.releases == 1 and not report.problems


_WRITER = """
import os, signal, sys
import numpy as np
import spark_dp.release.release as release_module
from spark_dp.release import Release, write_release

real = release_module._publish

def publish_then_die(src, dst):  # _write_remote moves each payload file, then the manifest last
    real(src, dst)
    if os.path.basename(dst.path) != "manifest.json":
        os.kill(os.getpid(), signal.SIGKILL)  # a real kill -9: no finally, no cleanup

release_module._publish = publish_then_die
manifest = {"release_id": "r-001", "task": "second_moment", "privacy": {"private": False, "epsilon": None}}
write_release(Release("r-001", {"matrix": np.eye(3)}, manifest), sys.argv[1])
"""


def test_kill_between_payload_and_manifest_is_never_read(tmp_path, hdfs):
    """A writer SIGKILLed right after the payload was renamed into the release directory, before the manifest.

    The writer is a bare ``write_release`` (no Spark, no ledger: what a kill does to the ledger is the
    same on every store, and tests/test_object_store.py runs that with whole jobs); here it is HDFS's
    side: its rename, the leftover staging directory, and a later write over the debris.
    """
    root = f"{hdfs.url}/crash/releases"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-c", _WRITER, root], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr[-3000:]
    left = _files(root)
    assert "r-001/matrix.parquet" in left and "r-001/manifest.json" not in left  # payload, no commit marker
    assert any(f.startswith(".tmp-r-001-") for f in left)  # and the staging directory, never cleaned by a kill
    path = f"{root}/r-001"
    assert not release_exists(path)
    with pytest.raises(SchemaError, match="no manifest.json"):
        spark_dp.load_release(path)
    assert audit_releases(open_ledger(f"sqlite:///{tmp_path}/ledger.db"), root).releases == 0
    # the id was never released: a later write completes it over the debris (HDFS refuses to rename
    # onto an existing file: the writer deletes the stale payload first)
    rel = Release("r-001", {"matrix": np.full((3, 3), 2.0)},
                  {"release_id": "r-001", "task": "second_moment", "privacy": {"private": False, "epsilon": None}})
    assert write_release(rel, root) == path
    np.testing.assert_array_equal(spark_dp.load_release(path)["matrix"], np.full((3, 3), 2.0))
    assert "r-001/manifest.json" in _files(root)


def test_an_unreachable_namenode_is_refused_before_the_charge(spark, tmp_path, hdfs, capsys):
    data, _ = _data(hdfs, "refused")
    (port,) = free_ports(1)  # nothing listens there
    output = f"hdfs://127.0.0.1:{port}/releases"
    assert cli_main(["release", _job(tmp_path, data, output)]) == 2
    err = capsys.readouterr().err
    assert "cannot be reached" in err and repr(output) in err and err.count("\n") == 1
    assert charges(tmp_path) == 0
