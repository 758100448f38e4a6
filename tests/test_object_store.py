"""Releases on object stores: local S3, GCS and Azure Blob servers started and stopped by the tests.

Each test runs once per store (``[s3]``, ``[gs]``, ``[abfss]``; servers in tests/_stores.py: moto,
fake-gcs-server, Azurite) with the same commands as for a local output root: ``spark-dp release``
with ``output.path: s3://…`` (``gs://…``, ``abfss://…``), ``spark_dp.load_release(<URI>)``,
``estimate``, ``heavy-hitters``, ``report``, ``merge_sketches``, plans and ``audit``. These stores
have no atomic rename, so the manifest is the commit marker, written last: the crash tests kill a
job between payload and manifest and check that no reader ever sees the half-written release. Each
server is reached through its store's standard environment (``AWS_ENDPOINT_URL`` and keys,
``STORAGE_EMULATOR_HOST``, ``AZURE_STORAGE_CONNECTION_STRING``), set for each test only.
"""

import json
import os
import uuid

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

import spark_dp
import spark_dp.release.release as release_module
from spark_dp.audit import audit_releases
from spark_dp.cli.main import main as cli_main
from spark_dp.errors import ConfigError, ReleaseConflictError, SchemaError
from spark_dp.privacy import SeededSampler, open_ledger
from spark_dp.release import Release, load_release, release_exists, storage, write_release
from spark_dp.release.uncertainty import gaussian_interval, manifest_block
from tests._crash_job import run_crash_job
from tests._jobs import charges, write_config
from tests._stores import SCHEMES, SCRUB, azurite_connection_string, serve


@pytest.fixture(scope="session", params=SCHEMES)
def store(request, tmp_path_factory):
    """The local server of one store for all the tests of that store (started once, always stopped)."""
    with serve(request.param, tmp_path_factory.mktemp(request.param)) as running:
        yield running


def _point_at(store, monkeypatch):
    for key in SCRUB[store.scheme]:
        monkeypatch.delenv(key, raising=False)
    for key, value in store.env.items():
        monkeypatch.setenv(key, value)


@pytest.fixture
def root(store, monkeypatch):
    """``<scheme>://<fresh bucket>/releases``, with the store's environment for the local server set for this test."""
    _point_at(store, monkeypatch)
    bucket = f"dp-{uuid.uuid4().hex[:12]}"
    store.create_bucket(bucket)
    return store.uri(bucket)


def _objects(uri: str) -> list[str]:
    """Every object (file) under ``uri``, relative to it."""
    loc = storage.locate(uri)
    infos = loc.fs.get_file_info(pafs.FileSelector(loc.path, recursive=True, allow_not_found=True))
    return sorted(i.path[len(loc.path) + 1:] for i in infos if i.type == pafs.FileType.File)


def _release(rid="r-001"):
    rng = np.random.default_rng(1)
    matrix = rng.normal(size=(3, 4))
    bars = {"matrix": gaussian_interval(matrix, 0.5, 0.95)}  # stderr/low/high columns beside the values
    return Release(rid, {"matrix": matrix, "vector": rng.normal(size=5)},
                   {"release_id": rid, "task": "second_moment", "privacy": {"private": False, "epsilon": None},
                    "uncertainty": manifest_block(bars, 0.95)}, uncertainty=bars)


# -- the release layer on each store (no Spark) ---------------------------------------------------
def test_write_and_load(store, root):
    rel = _release()
    path = write_release(rel, root)
    assert path == f"{root}/r-001" and rel.path == path and release_exists(path)
    assert _objects(root) == ["r-001/manifest.json", "r-001/matrix.parquet", "r-001/vector.parquet"]
    back = spark_dp.load_release(path)
    assert back.release_id == "r-001" and back.path == path
    for name, arr in rel.arrays.items():
        np.testing.assert_array_equal(back[name], arr)
    np.testing.assert_array_equal(back.interval("matrix")[0], rel.interval("matrix")[0])
    np.testing.assert_array_equal(back.stderr("matrix"), rel.stderr("matrix"))
    # the other names of the scheme read the same objects: Hadoop's for S3, plain-HTTP ABFS
    alias = {"s3": "s3a", "abfss": "abfs"}.get(store.scheme)
    if alias:
        np.testing.assert_array_equal(load_release(f"{alias}://{path.split('://', 1)[1]}")["matrix"], rel["matrix"])
    with pytest.raises(ReleaseConflictError, match="never overwritten"):
        write_release(_release(), root)
    assert not release_exists(f"{root}/r-002")


def test_manifest_is_the_last_object_written(root, monkeypatch):
    seen = []
    real = release_module._publish

    def spy(src, dst):
        # when each file arrives, which objects of the release are visible
        seen.append((os.path.basename(dst.path), _objects(f"{root}/r-001")))
        real(src, dst)

    monkeypatch.setattr(release_module, "_publish", spy)
    write_release(_release(), root)
    assert [name for name, _ in seen] == ["matrix.parquet", "vector.parquet", "manifest.json"]
    assert seen[-1][1] == ["matrix.parquet", "vector.parquet"]  # all payload in place, no manifest yet
    assert not any(o.startswith(".tmp-") for o in _objects(root))  # the temporary prefix is gone


def test_a_release_without_its_manifest_is_absent_and_replaced(root, monkeypatch):
    real = release_module._publish

    def fail_at_manifest(src, dst):
        if os.path.basename(dst.path) == "manifest.json":
            raise OSError("connection reset")
        real(src, dst)

    monkeypatch.setattr(release_module, "_publish", fail_at_manifest)
    with pytest.raises(OSError, match="connection reset"):
        write_release(_release(), root)
    assert _objects(root) == ["r-001/matrix.parquet", "r-001/vector.parquet"]  # payload, no commit marker
    path = f"{root}/r-001"
    assert not release_exists(path)
    with pytest.raises(SchemaError, match="no manifest.json"):
        load_release(path)
    monkeypatch.setattr(release_module, "_publish", real)
    rel = _release()
    rel.arrays["matrix"] = rel.arrays["matrix"] + 1.0
    write_release(rel, root)  # the id was never released: a later write completes it
    np.testing.assert_array_equal(load_release(path)["matrix"], rel["matrix"])


@pytest.mark.parametrize("store", ["s3"], indirect=True)
def test_s3_endpoint_comes_from_the_aws_environment(store, root, monkeypatch):
    write_release(_release(), root)
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", store.url)  # the service-specific variable, as the AWS SDKs read it
    assert release_exists(f"{root}/r-001")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9")  # nothing listens there
    with pytest.raises(OSError):
        load_release(f"{root}/r-001")


@pytest.mark.parametrize("store", ["gs"], indirect=True)
def test_gcs_emulator_comes_from_either_standard_variable(store, root, monkeypatch):
    rel = _release()
    write_release(rel, root)
    path = f"{root}/r-001"
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"127.0.0.1:{store.port}")  # host:port, as Go's client takes it
    assert release_exists(path)
    # google-cloud-cpp's own variable, which it applies under pyarrow whatever spark-dp passes, wins
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:9")
    monkeypatch.setenv("CLOUD_STORAGE_EMULATOR_ENDPOINT", store.url)
    np.testing.assert_array_equal(load_release(path)["matrix"], rel["matrix"])


@pytest.mark.parametrize("store", ["abfss"], indirect=True)
def test_azure_key_and_endpoint_come_from_the_connection_string(store, root, monkeypatch):
    write_release(_release(), root)
    path = f"{root}/r-001"
    assert release_exists(path.replace("abfss://", "abfs://"))
    wrong_key = azurite_connection_string(store.url).replace("AccountKey=", "AccountKey=AAAA")
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", wrong_key)
    with pytest.raises(OSError, match="AuthorizationFailure|403"):  # the server checks the key in use
        load_release(path)


def _azure_fs(**options):
    return pafs.AzureFileSystem(account_name="acct", **options)


@pytest.mark.parametrize("connection, expected", [
    ("DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=a2V5;EndpointSuffix=core.windows.net",
     _azure_fs(account_key="a2V5", blob_storage_authority=".blob.core.windows.net", blob_storage_scheme="https",
               dfs_storage_authority=".dfs.core.windows.net", dfs_storage_scheme="https")),
    ("BlobEndpoint=https://acct.blob.core.chinacloudapi.cn/;SharedAccessSignature=sv=2024-11-04&sig=x",
     _azure_fs(sas_token="sv=2024-11-04&sig=x", blob_storage_authority=".blob.core.chinacloudapi.cn",
               blob_storage_scheme="https", dfs_storage_authority=".dfs.core.chinacloudapi.cn",
               dfs_storage_scheme="https")),
    ("DefaultEndpointsProtocol=http;AccountName=acct;AccountKey=a2V5;BlobEndpoint=http://127.0.0.1:10000/acct;",
     _azure_fs(account_key="a2V5", blob_storage_authority="127.0.0.1:10000", blob_storage_scheme="http",
               dfs_storage_authority="127.0.0.1:10000", dfs_storage_scheme="http")),
], ids=["account-key", "sas-token", "emulator"])
def test_azure_connection_string_forms(monkeypatch, connection, expected):
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", connection)
    assert storage.locate("abfss://cont@acct.dfs.core.windows.net/releases/r-1").fs == expected
    assert storage.locate("abfss://cont@acct.dfs.core.windows.net/releases/r-1").path == "cont/releases/r-1"


def test_azure_connection_string_of_another_account_is_not_used(monkeypatch):
    uri = "abfss://cont@acct.dfs.core.windows.net/releases"
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", azurite_connection_string("http://127.0.0.1:10000"))
    assert storage.locate(uri).fs == pafs.FileSystem.from_uri(uri)[0]  # the default credential chain
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", "AccountName=acct;AccountKey=a2V5;"
                       "BlobEndpoint=https://storage.example.com/")
    with pytest.raises(ConfigError, match="storage.example.com"):
        storage.locate(uri)


def test_unknown_scheme_is_a_clear_error():
    with pytest.raises(ConfigError, match="'nope://bucket/r-001'"):
        load_release("nope://bucket/r-001")


# -- jobs and commands with output.path on each store ---------------------------------------------
def _data(tmp_path, n=300):
    X = np.random.default_rng(5).normal(size=(n, 3)) * 0.5
    pq.write_table(pa.table({"x1": X[:, 0], "x2": X[:, 1], "x3": X[:, 2]}), tmp_path / "data.parquet")


def _job(tmp_path, root, release_id="job-001"):
    return write_config(tmp_path, {
        "release_id": release_id,
        "dataset": {"id": "t.points", "path": str(tmp_path / "data.parquet"), "format": "parquet",
                    "columns": ["x1", "x2", "x3"]},
        "task": "second_moment", "mechanism": "analyze_gauss",
        "privacy": {"epsilon": 1.0, "delta": 1e-6, "norm_bound": 1.0, "sampler": "numpy"},
        "params": {},
        "ledger": {"uri": f"sqlite:///{tmp_path}/ledger.db", "epsilon_limit": 3.0, "delta_limit": 1e-5},
        "output": {"path": root},
    })


def test_release_job_report_and_audit(spark, tmp_path, root, capsys):
    _data(tmp_path)
    config = _job(tmp_path, root)
    assert cli_main(["release", config]) == 0
    first = json.loads(capsys.readouterr().out)
    path = f"{root}/job-001"
    assert first["path"] == path and first["reused"] is False
    assert open_ledger(f"{tmp_path}/ledger.db").lookup("job-001").location == path
    rel = spark_dp.load_release(path)
    assert rel["matrix"].shape == (3, 3) and rel.privacy["epsilon"] == 1.0
    # idempotence comes from the ledger: the stored release, no new noise, no new charge
    assert cli_main(["release", config]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["reused"] is True and again["dataset_epsilon_spent"] == first["dataset_epsilon_spent"]
    np.testing.assert_array_equal(spark_dp.load_release(path)["matrix"], rel["matrix"])
    # report: next to the release on the store, by default
    assert cli_main(["report", path]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["report"] == f"{path}.report.md" and report["plots"]
    text = storage.read_bytes(report["report"]).decode()
    assert "# Release job-001" in text and all(storage.is_file(p) for p in report["plots"])
    # audit: the release matches its charge; the report files are not releases
    assert cli_main(["audit", "--ledger", f"sqlite:///{tmp_path}/ledger.db", root, "--json"]) == 0
    audit = json.loads(capsys.readouterr().out)
    assert audit["releases_matched"] == 1 and audit["counts"] == {}


def test_an_output_that_cannot_be_written_is_refused_before_the_charge(spark, tmp_path, store, root, capsys):
    _data(tmp_path)
    missing = store.uri(f"no-such-bucket-{uuid.uuid4().hex[:8]}")
    for output, needle in ((missing, "does not exist"), ("nope://bucket/releases", "Cannot open")):
        assert cli_main(["release", _job(tmp_path, output)]) == 2
        err = capsys.readouterr().err
        assert needle in err and repr(output) in err and err.count("\n") == 1
        assert charges(tmp_path) == 0  # nothing charged: the job would not have been able to write


def test_sketch_estimate_heavy_hitters_and_merge(spark, tmp_path, root, capsys):
    from spark_dp.sketch import estimate, merge_sketches
    from spark_dp.sketch.api import count_sketch

    df = spark.createDataFrame([(f"q{i % 7 if i % 3 else 0}",) for i in range(400)], "query string")
    sess = spark_dp.DPSession("t.q", ledger=f"sqlite:///{tmp_path}/l.db", epsilon_limit=10.0, delta_limit=1e-5,
                              output=root, sampler=SeededSampler(np.random.default_rng(3)))
    r1 = count_sketch(sess, df, "query", epsilon=1.0, delta=1e-6, repetitions=3, buckets=64)
    r2 = count_sketch(sess, df, "query", epsilon=1.0, delta=1e-6, repetitions=3, buckets=64, seeds=r1)
    assert r1.path == f"{root}/{r1.release_id}" and release_exists(r2.path)
    items = tmp_path / "items.txt"
    items.write_text("q0\nq1\nnever-seen\n")
    assert cli_main(["estimate", r1.path, "--items", str(items)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [float(ln.split(",")[1]) for ln in lines[1:]] == estimate(r1, ["q0", "q1", "never-seen"]).tolist()
    assert cli_main(["heavy-hitters", r1.path, "--candidates", str(items), "--top", "1", "--threshold", "0"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[1].startswith("q0,")
    merged = merge_sketches([r1.path, r2.path], output=root)  # parts named by their URIs
    assert merged.path == f"{root}/{merged.release_id}"
    np.testing.assert_array_equal(load_release(merged.path)["sketch"], r1["sketch"] + r2["sketch"])
    report = audit_releases(open_ledger(f"{tmp_path}/l.db"), root)
    assert report.ok and report.releases == 2 and report.counts() == {"derived": 1}


def test_plan_runs_and_finds_its_stored_releases(spark, tmp_path, root):
    from datetime import date

    import yaml

    from spark_dp.plans import load_plan, run_plan
    from spark_dp.plans.runner import _stored

    _data(tmp_path)
    entry = {"name": "cov", "schedule": "daily", "budget": {"epsilon": 1.0, "delta": 1e-5, "renew": "per_period"},
             "inline": {"dataset": {"id": "shop.events", "path": str(tmp_path / "data.parquet"), "format": "parquet",
                                    "columns": ["x1", "x2", "x3"]},
                        "task": "second_moment", "mechanism": "analyze_gauss",
                        "privacy": {"epsilon": 0.5, "delta": 1e-6, "norm_bound": 1.0, "sampler": "numpy"},
                        "ledger": {"uri": "unused"}, "output": {"path": "unused"}}}
    p = tmp_path / "plan.yaml"
    p.write_text(yaml.safe_dump({"plan": "shop", "ledger": {"uri": f"sqlite:///{tmp_path}/ledger.db"},
                                 "output": {"path": root}, "entries": [entry]}))
    plan, day = load_plan(str(p)), date(2026, 11, 30)
    [first] = run_plan(plan, day)
    assert first.status == "released" and first.path == f"{root}/shop.cov.2026-11-30"
    [again] = run_plan(plan, day)
    assert again.status == "stored" and again.path == first.path  # the ledger's location, the store's URI
    stored = _stored(plan, plan.entry("cov"), day)  # what merges and seed anchors read
    assert stored is not None and stored.path == first.path


def test_kill_between_payload_and_manifest_is_never_read(spark, tmp_path, root, capsys):
    """SIGKILL right after the payload reached the release's prefix, before the manifest (tests/_crash_job.py).

    A kill while staging (the local ``during_write`` point) leaves less: only the temporary prefix.
    """
    _data(tmp_path)
    config = _job(tmp_path, root)
    proc = run_crash_job(config, "before_manifest")  # inherits this test's AWS environment
    assert proc.returncode == -9, proc.stderr[-2000:]
    ledger = f"sqlite:///{tmp_path}/ledger.db"
    charge = open_ledger(ledger).lookup("job-001")
    assert charge is not None and not charge.written  # the charge stands: no refund
    left = _objects(root)
    assert "job-001/matrix.parquet" in left and "job-001/manifest.json" not in left  # payload, no commit marker
    assert any(o.startswith(".tmp-job-001-") for o in left)  # and the staging prefix, never cleaned by a kill
    path = f"{root}/job-001"
    assert not release_exists(path)
    with pytest.raises(SchemaError, match="no manifest.json"):
        load_release(path)
    for command in (["report", path], ["estimate", path, "--items", config]):
        assert cli_main(command) == 2
        assert "no manifest.json" in capsys.readouterr().err
    # a re-run reports that the charge stands and asks for a new id; it never returns the half release
    assert cli_main(["release", config]) == 2
    assert "charge stands" in capsys.readouterr().err
    # the audit lists the charge as never written, and no release under the root
    report = audit_releases(open_ledger(ledger), root)
    assert report.releases == 0 and [f.kind for f in report.problems] == ["unwritten"]
    # the next release id is written normally next to the debris
    assert cli_main(["release", _job(tmp_path, root, "job-002")]) == 0
    assert json.loads(capsys.readouterr().out)["path"] == f"{root}/job-002"
