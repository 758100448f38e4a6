"""Releases on an object store: a local S3-compatible server (moto) started and stopped by the tests.

The same commands as for a local output root: ``spark-dp release`` with ``output.path: s3://…``,
``spark_dp.load_release("s3://bucket/prefix/<release_id>")``, ``estimate``, ``heavy-hitters``,
``report``, ``merge_sketches`` and ``audit``. S3 has no atomic rename, so the manifest is the
commit marker, written last: the crash tests kill a job between payload and manifest and check that
no reader ever sees the half-written release. The server is reached through the standard AWS
environment (keys, ``AWS_ENDPOINT_URL``), set for each test only.
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
from tests._moto import AWS_SCRUB, aws_env, moto_server, unavailable


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory):
    """moto's server for the whole run (started once, always stopped)."""
    reason = unavailable()
    if reason:
        pytest.skip(reason)
    with moto_server(str(tmp_path_factory.mktemp("moto") / "moto.log")) as endpoint:
        yield endpoint


@pytest.fixture
def s3_root(s3_endpoint, monkeypatch):
    """``s3://<fresh bucket>/releases``, with the AWS environment of the local server set for this test only."""
    for key in AWS_SCRUB:
        monkeypatch.delenv(key, raising=False)
    for key, value in aws_env(s3_endpoint).items():
        monkeypatch.setenv(key, value)
    bucket = f"dp-{uuid.uuid4().hex[:12]}"
    pafs.S3FileSystem(endpoint_override=s3_endpoint, region="us-east-1", allow_bucket_creation=True).create_dir(bucket)
    return f"s3://{bucket}/releases"


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


# -- the release layer on S3 (no Spark) ----------------------------------------------------------
def test_write_and_load_on_s3(s3_root):
    rel = _release()
    path = write_release(rel, s3_root)
    assert path == f"{s3_root}/r-001" and rel.path == path and release_exists(path)
    assert _objects(s3_root) == ["r-001/manifest.json", "r-001/matrix.parquet", "r-001/vector.parquet"]
    back = spark_dp.load_release(path)
    assert back.release_id == "r-001" and back.path == path
    for name, arr in rel.arrays.items():
        np.testing.assert_array_equal(back[name], arr)
    np.testing.assert_array_equal(back.interval("matrix")[0], rel.interval("matrix")[0])
    np.testing.assert_array_equal(back.stderr("matrix"), rel.stderr("matrix"))
    # Hadoop's name for S3 reads the same objects
    np.testing.assert_array_equal(load_release(path.replace("s3://", "s3a://"))["matrix"], rel["matrix"])
    with pytest.raises(ReleaseConflictError, match="never overwritten"):
        write_release(_release(), s3_root)
    assert not release_exists(f"{s3_root}/r-002")


def test_manifest_is_the_last_object_written(s3_root, monkeypatch):
    seen = []
    real = release_module._publish

    def spy(src, dst):
        # when each file arrives, which objects of the release are visible
        seen.append((os.path.basename(dst.path), _objects(f"{s3_root}/r-001")))
        real(src, dst)

    monkeypatch.setattr(release_module, "_publish", spy)
    write_release(_release(), s3_root)
    assert [name for name, _ in seen] == ["matrix.parquet", "vector.parquet", "manifest.json"]
    assert seen[-1][1] == ["matrix.parquet", "vector.parquet"]  # all payload in place, no manifest yet
    assert not any(o.startswith(".tmp-") for o in _objects(s3_root))  # the temporary prefix is gone


def test_a_release_without_its_manifest_is_absent_and_replaced(s3_root, monkeypatch):
    real = release_module._publish

    def fail_at_manifest(src, dst):
        if os.path.basename(dst.path) == "manifest.json":
            raise OSError("connection reset")
        real(src, dst)

    monkeypatch.setattr(release_module, "_publish", fail_at_manifest)
    with pytest.raises(OSError, match="connection reset"):
        write_release(_release(), s3_root)
    assert _objects(s3_root) == ["r-001/matrix.parquet", "r-001/vector.parquet"]  # payload, no commit marker
    path = f"{s3_root}/r-001"
    assert not release_exists(path)
    with pytest.raises(SchemaError, match="no manifest.json"):
        load_release(path)
    monkeypatch.setattr(release_module, "_publish", real)
    rel = _release()
    rel.arrays["matrix"] = rel.arrays["matrix"] + 1.0
    write_release(rel, s3_root)  # the id was never released: a later write completes it
    np.testing.assert_array_equal(load_release(path)["matrix"], rel["matrix"])


def test_endpoint_comes_from_the_aws_environment(s3_root, s3_endpoint, monkeypatch):
    write_release(_release(), s3_root)
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_endpoint)  # the service-specific variable, as the AWS SDKs read it
    assert release_exists(f"{s3_root}/r-001")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9")  # nothing listens there
    with pytest.raises(OSError):
        load_release(f"{s3_root}/r-001")


def test_unknown_scheme_is_a_clear_error():
    with pytest.raises(ConfigError, match="'nope://bucket/r-001'"):
        load_release("nope://bucket/r-001")


# -- jobs and commands with output.path on S3 ---------------------------------------------------
def _data(tmp_path, n=300):
    X = np.random.default_rng(5).normal(size=(n, 3)) * 0.5
    pq.write_table(pa.table({"x1": X[:, 0], "x2": X[:, 1], "x3": X[:, 2]}), tmp_path / "data.parquet")


def _job(tmp_path, s3_root, release_id="job-001"):
    return write_config(tmp_path, {
        "release_id": release_id,
        "dataset": {"id": "t.points", "path": str(tmp_path / "data.parquet"), "format": "parquet",
                    "columns": ["x1", "x2", "x3"]},
        "task": "second_moment", "mechanism": "analyze_gauss",
        "privacy": {"epsilon": 1.0, "delta": 1e-6, "norm_bound": 1.0, "sampler": "numpy"},
        "params": {},
        "ledger": {"uri": f"sqlite:///{tmp_path}/ledger.db", "epsilon_limit": 3.0, "delta_limit": 1e-5},
        "output": {"path": s3_root},
    })


def test_release_job_report_and_audit_on_s3(spark, tmp_path, s3_root, capsys):
    _data(tmp_path)
    config = _job(tmp_path, s3_root)
    assert cli_main(["release", config]) == 0
    first = json.loads(capsys.readouterr().out)
    path = f"{s3_root}/job-001"
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
    assert cli_main(["audit", "--ledger", f"sqlite:///{tmp_path}/ledger.db", s3_root, "--json"]) == 0
    audit = json.loads(capsys.readouterr().out)
    assert audit["releases_matched"] == 1 and audit["counts"] == {}


def test_an_output_that_cannot_be_written_is_refused_before_the_charge(spark, tmp_path, s3_root, capsys):
    _data(tmp_path)
    missing = f"s3://no-such-bucket-{uuid.uuid4().hex[:8]}/releases"
    for output, needle in ((missing, "does not exist"), ("nope://bucket/releases", "Cannot open")):
        assert cli_main(["release", _job(tmp_path, output)]) == 2
        err = capsys.readouterr().err
        assert needle in err and repr(output) in err and err.count("\n") == 1
        assert charges(tmp_path) == 0  # nothing charged: the job would not have been able to write


def test_sketch_estimate_heavy_hitters_and_merge_on_s3(spark, tmp_path, s3_root, capsys):
    from spark_dp.sketch import estimate, merge_sketches
    from spark_dp.sketch.api import count_sketch

    df = spark.createDataFrame([(f"q{i % 7 if i % 3 else 0}",) for i in range(400)], "query string")
    sess = spark_dp.DPSession("t.q", ledger=f"sqlite:///{tmp_path}/l.db", epsilon_limit=10.0, delta_limit=1e-5,
                              output=s3_root, sampler=SeededSampler(np.random.default_rng(3)))
    r1 = count_sketch(sess, df, "query", epsilon=1.0, delta=1e-6, repetitions=3, buckets=64)
    r2 = count_sketch(sess, df, "query", epsilon=1.0, delta=1e-6, repetitions=3, buckets=64, seeds=r1)
    assert r1.path == f"{s3_root}/{r1.release_id}" and release_exists(r2.path)
    items = tmp_path / "items.txt"
    items.write_text("q0\nq1\nnever-seen\n")
    assert cli_main(["estimate", r1.path, "--items", str(items)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [float(ln.split(",")[1]) for ln in lines[1:]] == estimate(r1, ["q0", "q1", "never-seen"]).tolist()
    assert cli_main(["heavy-hitters", r1.path, "--candidates", str(items), "--top", "1", "--threshold", "0"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[1].startswith("q0,")
    merged = merge_sketches([r1.path, r2.path], output=s3_root)  # parts named by their URIs
    assert merged.path == f"{s3_root}/{merged.release_id}"
    np.testing.assert_array_equal(load_release(merged.path)["sketch"], r1["sketch"] + r2["sketch"])
    report = audit_releases(open_ledger(f"{tmp_path}/l.db"), s3_root)
    assert report.ok and report.releases == 2 and report.counts() == {"derived": 1}


def test_plan_runs_and_finds_its_stored_releases_on_s3(spark, tmp_path, s3_root):
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
                                 "output": {"path": s3_root}, "entries": [entry]}))
    plan, day = load_plan(str(p)), date(2026, 11, 30)
    [first] = run_plan(plan, day)
    assert first.status == "released" and first.path == f"{s3_root}/shop.cov.2026-11-30"
    [again] = run_plan(plan, day)
    assert again.status == "stored" and again.path == first.path  # the ledger's location, an S3 URI
    stored = _stored(plan, plan.entry("cov"), day)  # what merges and seed anchors read
    assert stored is not None and stored.path == first.path


def test_kill_between_payload_and_manifest_is_never_read(spark, tmp_path, s3_root, capsys):
    """SIGKILL right after the payload reached the release's prefix, before the manifest (tests/_crash_job.py).

    A kill while staging (the local ``during_write`` point) leaves less: only the temporary prefix.
    """
    _data(tmp_path)
    config = _job(tmp_path, s3_root)
    proc = run_crash_job(config, "before_manifest")  # inherits this test's AWS environment
    assert proc.returncode == -9, proc.stderr[-2000:]
    ledger = f"sqlite:///{tmp_path}/ledger.db"
    charge = open_ledger(ledger).lookup("job-001")
    assert charge is not None and not charge.written  # the charge stands: no refund
    left = _objects(s3_root)
    assert "job-001/matrix.parquet" in left and "job-001/manifest.json" not in left  # payload, no commit marker
    assert any(o.startswith(".tmp-job-001-") for o in left)  # and the staging prefix, never cleaned by a kill
    path = f"{s3_root}/job-001"
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
    report = audit_releases(open_ledger(ledger), s3_root)
    assert report.releases == 0 and [f.kind for f in report.problems] == ["unwritten"]
    # the next release id is written normally next to the debris
    assert cli_main(["release", _job(tmp_path, s3_root, "job-002")]) == 0
    assert json.loads(capsys.readouterr().out)["path"] == f"{s3_root}/job-002"
