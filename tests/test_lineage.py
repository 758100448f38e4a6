"""Input lineage (issue #16, item 4): manifests and ledger charges record what a release was computed from.

Without Spark: the file digest (pyarrow.fs stats), the pipeline's ``input``
field and ``input_changed`` on re-runs, the plan's time-travel parsing, and a
schema-3 ledger file migrated to schema 4. Delta and Iceberg versions are
tested against the real formats in ``tests/warehouse/``. With Spark: a Parquet path, a plain Parquet
catalog table and an in-memory DataFrame through a family function, a re-run
after the input changed, and no Spark job started by the lineage.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import time

import numpy as np
import pytest

from spark_dp import DPSession
from spark_dp.privacy import Budget, gaussian_noise_multiplier, open_ledger
from spark_dp.privacy.events import GaussianEvent
from spark_dp.privacy.ledger import SCHEMA_VERSION
from spark_dp.release import lineage as L
from spark_dp.release.pipeline import Noised, ReleasePlan, run_release
from tests._samplers import Recorder

EPS, DELTA = 1.0, 1e-6
SIGMA = gaussian_noise_multiplier(EPS, DELTA)
KEY = bytes(range(32))  # a ledger's lineage key (a test's fixed one)


def _touch(path, data: bytes, mtime_ns: int | None = None) -> None:
    path.write_bytes(data)
    if mtime_ns is not None:
        os.utime(path, ns=(mtime_ns, mtime_ns))


# -- the digest ------------------------------------------------------------------------
def test_files_digest_follows_names_sizes_and_times_and_not_the_spelling(tmp_path):
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    _touch(a, b"1234", 1_700_000_000_000_000_000)
    _touch(b, b"56", 1_700_000_000_000_000_000)
    d0, stats = L.files_digest([str(a), str(b)], KEY)
    assert stats == "size+mtime"
    assert L.files_digest([f"file://{b}", f"file://{a}"], KEY)[0] == d0  # order and file: URIs do not matter
    _touch(b, b"57", 1_700_000_000_000_000_000)  # same size and time, other bytes: not seen (metadata only)
    assert L.files_digest([str(a), str(b)], KEY)[0] == d0
    _touch(b, b"57", 1_700_000_001_000_000_000)  # touched
    d1 = L.files_digest([str(a), str(b)], KEY)[0]
    _touch(b, b"578", 1_700_000_001_000_000_000)  # grown
    d2 = L.files_digest([str(a), str(b)], KEY)[0]
    d3 = L.files_digest([str(a)], KEY)[0]  # a file less
    assert len({d0, d1, d2, d3}) == 4


def test_the_digest_is_keyed_so_a_size_cannot_be_enumerated_without_the_key(tmp_path):
    """An unkeyed hash of (URI, size, mtime) gives the size (hence the rows) away by enumeration; the HMAC does not."""
    import hashlib
    import hmac

    f = tmp_path / "part-0.parquet"
    mtime = 1_700_000_000_000_000_000
    _touch(f, b"x" * 1234, mtime)  # the size the attacker is after; the name and the time they know
    digest, _ = L.files_digest([str(f)], KEY)

    def entry(size):
        return f"{os.path.abspath(f)}\t{size}\t{mtime}".encode()

    def enumerate_sizes(mac):
        return [n for n in range(4096) if mac(entry(n)) == digest]

    assert enumerate_sizes(lambda b: hashlib.sha256(b).hexdigest()) == []  # the unkeyed digest's enumeration
    assert enumerate_sizes(lambda b: hmac.new(bytes(32), b, hashlib.sha256).hexdigest()) == []  # a wrong key
    assert enumerate_sizes(lambda b: hmac.new(KEY, b, hashlib.sha256).hexdigest()) == [1234]  # only the key gives it
    assert L.files_digest([str(f)], KEY)[0] == digest  # one input, one digest under one key
    assert L.files_digest([str(f)], bytes(32))[0] != digest
    with pytest.raises(RuntimeError, match="lineage key"):
        L.files_digest([str(f)], b"")


def test_each_ledger_holds_its_own_lineage_key_and_keeps_it(any_ledger_uri, tmp_path):
    key = open_ledger(any_ledger_uri).lineage_key
    assert len(key) == 32 and open_ledger(any_ledger_uri).lineage_key == key  # kept across opens
    assert open_ledger(f"sqlite:///{tmp_path}/other.db").lineage_key != key  # drawn from the OS per ledger
    ledger = open_ledger(any_ledger_uri)
    ledger.charge(release_id="r", dataset_id="d", request_sha256="x", events=[GaussianEvent(SIGMA)],
                  budget=Budget(EPS, DELTA), limit=Budget(5.0, DELTA))
    assert key.hex() not in ledger.to_json()  # the key stays in the ledger


def test_a_scheme_pyarrow_cannot_open_is_digested_by_name(tmp_path):
    digest, stats = L.files_digest(["nosuchscheme://bucket/x/part-0.parquet"], KEY)
    assert stats == "names" and len(digest) == 64
    assert L.files_digest(["nosuchscheme://bucket/x/part-1.parquet"], KEY)[0] != digest


def test_lineage_of_a_path_and_of_memory(tmp_path):
    path = tmp_path / "t.npy"
    np.save(path, np.zeros((2, 2, 2)))
    got = L.input_lineage(str(path), KEY)
    assert got["kind"] == "files" and got["files_stats"] == "size+mtime" and str(tmp_path) not in json.dumps(got)
    assert L.input_lineage(np.zeros((2, 2, 2)), KEY) == {"kind": "in_memory"}


def test_input_changed_says_none_when_it_cannot_tell():
    files = {"kind": "files", "files_sha256": "a", "files_stats": "size+mtime"}
    assert L.input_changed(files, dict(files)) is False
    assert L.input_changed(files, {**files, "files_sha256": "b"}) is True
    assert L.input_changed(None, files) is None  # a release from before lineage
    assert L.input_changed(files, None) is None
    assert L.input_changed({"kind": "in_memory"}, {"kind": "in_memory"}) is None
    # A release from before the keyed digest: its plain SHA-256 cannot be compared with today's HMAC.
    keyed = {"kind": "files", "files_hmac_sha256": "k", "files_stats": "size+mtime"}
    assert L.input_changed(files, keyed) is None and L.input_changed(keyed, files) is None
    table = {"kind": "table", "tables": [{"name": "db.t", "version": None}]}
    assert L.input_changed({**table, **files}, {**table, **keyed}) is None
    assert L.input_changed({**table, **files}, {"kind": "table", "tables": [{"name": "db.u", "version": None}],
                                                "files_hmac_sha256": "k"}) is True


# -- table versions: Delta and Iceberg are tested for real in tests/warehouse/ (suite_delta.py, suite_iceberg.py,
# run by tests/test_warehouse.py in a Spark with their jars); here only what needs no table format ---------------
_PARSED = """== Parsed Logical Plan ==
'Project [*]
+- 'RelationTimeTravel 'UnresolvedRelation [t], [], false, 0
== Analyzed Logical Plan ==
"""


def test_plan_reads_finds_reader_options_and_sql_time_travel():
    text = ("== Parsed Logical Plan ==\n'UnresolvedRelation [local, db, t], [snapshot-id=31743], false\n"
            "== Analyzed Logical Plan ==\nSubqueryAlias local.db.t\n")
    assert L.plan_reads(text) == {"local.db.t": {"options": {"snapshot-id": "31743"}, "time_travel": None}}
    assert L.plan_reads(_PARSED) == {"t": {"options": {}, "time_travel": "0"}}
    assert L._read_of(L.plan_reads(_PARSED), "spark_catalog.default.t") == {"options": {}, "time_travel": "0"}
    assert L._read_of(L.plan_reads(_PARSED), "spark_catalog.default.other") is None


def test_a_directory_without_a_delta_log_has_no_delta_version(tmp_path):
    (tmp_path / "part-0.parquet").write_bytes(b"x")
    assert L.delta_versions([str(tmp_path / "part-0.parquet")]) == {}
    assert L.delta_path_lineage(str(tmp_path)) is None


# -- the pipeline: manifest field, ledger charge, re-runs ----------------------------------------
def _session(tmp_path):
    return DPSession("ds", ledger=f"sqlite:///{tmp_path}/ledger.db", epsilon_limit=3.0, delta_limit=1e-5,
                     output=str(tmp_path / "out"), sampler=Recorder())


def _plan(lineage, *, release_id="r1", mode="private", **over) -> ReleasePlan:
    private = mode == "private"
    return ReleasePlan(
        task="test_task", mechanism="gauss", request={"value": 1.0}, release_id=release_id,
        events=(GaussianEvent(SIGMA),) if private else (), budget=Budget(EPS, DELTA) if private else None,
        privacy={"neighbors": "add_remove", "noise_family": "gaussian", "noise_scale": SIGMA} if private else {},
        manifest={}, compute=lambda: np.ones(3),
        noise=(lambda x, cp: Noised({"v": cp.gaussian(x, sigma=SIGMA, l2_sensitivity=1.0)})) if private
        else (lambda x, cp: Noised({"v": x})), lineage=lineage, mode=mode, **over)


def test_the_pipeline_records_lineage_and_flags_a_rerun_over_changed_input(tmp_path, caplog):
    data = tmp_path / "data.npy"
    np.save(data, np.ones(3))
    dp = _session(tmp_path)
    calls = []

    def lineage(key):
        calls.append(1)
        return L.input_lineage(str(data), key)

    rel = run_release(dp, _plan(lineage))
    assert len(calls) == 1 and rel.input_changed is None  # once per release; a new release has nothing to compare
    assert rel.manifest["input"]["kind"] == "files"
    # Nothing in the manifest from which a size could be recovered without the key: no size or time fields.
    assert set(rel.manifest["input"]) == {"kind", "files_hmac_sha256", "files_stats"}
    assert str(os.stat(data).st_mtime_ns) not in json.dumps(rel.manifest["input"])
    assert rel.manifest["input"] == L.input_lineage(str(data), dp.ledger.lineage_key)
    charge = dp.ledger.lookup("r1")
    assert charge.lineage == rel.manifest["input"]
    with open(os.path.join(rel.path, "manifest.json")) as fh:
        assert json.load(fh)["input"] == rel.manifest["input"]

    again = run_release(dp, _plan(lineage))
    assert again.reused and again.input_changed is False and len(calls) == 2

    np.save(data, np.ones(4))  # the input changes (size)
    with caplog.at_level(logging.WARNING, logger="spark_dp"):
        changed = run_release(dp, _plan(lineage))
    assert changed.reused and changed.input_changed is True
    np.testing.assert_array_equal(changed["v"], rel["v"])  # the stored release, no new noise
    assert len(dp.ledger.all_charges()) == 1  # no new charge
    assert any("input changed" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)


def test_lineage_is_not_part_of_the_request_digest():
    assert _plan(lambda key: {"kind": "files", "files_hmac_sha256": "a"}).request_sha256 == \
        _plan(lambda key: {"kind": "files", "files_hmac_sha256": "b"}).request_sha256 == _plan(None).request_sha256


def test_a_failing_lineage_never_stops_a_release(tmp_path, caplog):
    def broken(key):
        raise OSError("no such bucket")

    with caplog.at_level(logging.WARNING, logger="spark_dp"):
        rel = run_release(_session(tmp_path), _plan(broken))
    assert rel.manifest["input"] == {"kind": "unknown"} and "input lineage" in caplog.text


def test_a_plan_without_lineage_writes_no_input_field(tmp_path):
    rel = run_release(_session(tmp_path), _plan(None))
    assert "input" not in rel.manifest and _session(tmp_path).ledger.lookup("r1").lineage is None


def test_a_nonprivate_rerun_over_changed_input_says_so(tmp_path):
    data = tmp_path / "public.npy"
    np.save(data, np.ones(3))
    dp = DPSession("public", ledger=f"sqlite:///{tmp_path}/ledger.db", output=str(tmp_path / "out"))
    plan = _plan(lambda key: L.input_lineage(str(data), key), mode="public_input")
    first = run_release(dp, plan)
    assert first.manifest["input"]["kind"] == "files"
    assert run_release(dp, plan).input_changed is False
    np.save(data, np.ones(5))
    assert run_release(dp, plan).input_changed is True


def test_a_rerun_of_a_release_from_before_lineage_cannot_tell(tmp_path):
    dp = _session(tmp_path)
    run_release(dp, _plan(None))
    again = run_release(dp, _plan(lambda key: {"kind": "files", "files_hmac_sha256": "x", "files_stats": "size+mtime"}))
    assert again.reused and again.input_changed is None


# -- a ledger file of schema 3, as spark-dp wrote it before lineage ---------------------------------
_SCHEMA_3 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE datasets (dataset_id TEXT PRIMARY KEY, epsilon_limit DOUBLE PRECISION NOT NULL,
    delta_limit DOUBLE PRECISION NOT NULL, created_at TEXT NOT NULL, privacy_unit TEXT, max_per_unit INTEGER,
    neighbors TEXT);
CREATE TABLE charges (seq INTEGER PRIMARY KEY AUTOINCREMENT, release_id TEXT NOT NULL UNIQUE,
    dataset_id TEXT NOT NULL REFERENCES datasets(dataset_id), request_sha256 TEXT NOT NULL, events TEXT NOT NULL,
    epsilon DOUBLE PRECISION NOT NULL, delta DOUBLE PRECISION NOT NULL, created_at TEXT NOT NULL,
    lifetime_epsilon DOUBLE PRECISION);
CREATE TABLE releases (release_id TEXT PRIMARY KEY REFERENCES charges(release_id), location TEXT NOT NULL,
    written_at TEXT NOT NULL);
CREATE TABLE limit_changes (seq INTEGER PRIMARY KEY AUTOINCREMENT, dataset_id TEXT NOT NULL,
    epsilon_limit DOUBLE PRECISION NOT NULL, delta_limit DOUBLE PRECISION NOT NULL, changed_at TEXT NOT NULL,
    scope TEXT);
CREATE TABLE lifetime_limits (dataset_id TEXT PRIMARY KEY, epsilon_limit DOUBLE PRECISION NOT NULL,
    delta_limit DOUBLE PRECISION NOT NULL, created_at TEXT NOT NULL);
CREATE TABLE crashes (release_id TEXT PRIMARY KEY REFERENCES charges(release_id), reason TEXT NOT NULL,
    recorded_at TEXT NOT NULL);
INSERT INTO meta VALUES ('schema_version', '3');
INSERT INTO datasets VALUES ('ds', 3.0, 1e-05, '2026-01-01T00:00:00', 'row', 1, 'add_remove');
INSERT INTO charges (release_id, dataset_id, request_sha256, events, epsilon, delta, created_at, lifetime_epsilon)
    VALUES ('old-1', 'ds', 'x', '[{"type": "gaussian", "noise_multiplier": %Z%}]', 1.0, 1e-06,
            '2026-01-01T00:00:00', NULL);
INSERT INTO limit_changes (dataset_id, epsilon_limit, delta_limit, changed_at) VALUES ('ds', 3.0, 1e-05,
    '2026-01-01T00:00:00');
"""


def test_a_schema_3_ledger_file_is_migrated_and_keeps_working(tmp_path):
    assert SCHEMA_VERSION == 5
    con = sqlite3.connect(tmp_path / "ledger.db")
    con.executescript(_SCHEMA_3.replace("%Z%", repr(SIGMA)))
    con.close()
    ledger = open_ledger(f"sqlite:///{tmp_path}/ledger.db")  # migrates 3 → 5
    with ledger._reading() as c:
        assert c.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == "5"
    assert len(ledger.lineage_key) == 32
    old = ledger.lookup("old-1")
    assert old.lineage is None and old.budget == Budget(1.0, 1e-6)
    lineage = {"kind": "files", "files_hmac_sha256": "ab" * 32, "files_stats": "size+mtime"}
    new = ledger.charge(release_id="new-1", dataset_id="ds", request_sha256="y", events=[GaussianEvent(SIGMA)],
                        budget=Budget(EPS, DELTA), lineage=lineage)
    assert new.lineage == lineage and ledger.lookup("new-1").lineage == lineage
    assert ledger.status("ds")[0].releases == 2  # the old charge still counts
    assert open_ledger(f"sqlite:///{tmp_path}/ledger.db").lineage_key == ledger.lineage_key  # not migrated again


# -- with Spark: family functions over files, a catalog table and memory --------------------------------
@pytest.fixture
def parquet_dir(spark, tmp_path):
    path = str(tmp_path / "rows")
    spark.createDataFrame([(float(i % 3) / 3, float(i % 5) / 5, "fr" if i % 2 else "de") for i in range(40)],
                          "x double, y double, country string").write.partitionBy("country").parquet(path)
    return path


def _dp(tmp_path, name="ds"):
    return DPSession(name, ledger=f"sqlite:///{tmp_path}/ledger.db", epsilon_limit=5.0, delta_limit=1e-5,
                     output=str(tmp_path / "out"), sampler="numpy")


def test_a_parquet_path_release_records_a_file_digest_and_a_rerun_sees_new_files(spark, tmp_path, parquet_dir,
                                                                                  caplog):
    dp = _dp(tmp_path)
    kw = dict(epsilon=EPS, delta=DELTA, norm_bound=1.0, release_id="sm-1")
    rel = dp.second_moment(spark.read.parquet(parquet_dir), ["x", "y"], **kw)
    lineage = rel.manifest["input"]
    assert lineage["kind"] == "files" and len(lineage["files_hmac_sha256"]) == 64
    assert lineage == L.input_lineage(spark.read.parquet(parquet_dir), dp.ledger.lineage_key)  # keyed by the ledger
    text = json.dumps(lineage)
    assert "country" not in text and "rows" not in text  # no paths: partition values are data
    assert dp.ledger.lookup("sm-1").lineage == lineage
    assert dp.second_moment(spark.read.parquet(parquet_dir), ["x", "y"], **kw).input_changed is False

    time.sleep(0.01)
    spark.createDataFrame([(0.5, 0.5, "it")], "x double, y double, country string") \
        .write.mode("append").partitionBy("country").parquet(parquet_dir)
    with caplog.at_level(logging.WARNING, logger="spark_dp"):
        again = dp.second_moment(spark.read.parquet(parquet_dir), ["x", "y"], **kw)
    assert again.reused and again.input_changed is True
    np.testing.assert_array_equal(again["matrix"], rel["matrix"])
    assert again.manifest["request_sha256"] == rel.manifest["request_sha256"]
    assert "input changed" in caplog.text and len(dp.ledger.all_charges()) == 1


def test_a_plain_parquet_table_is_named_with_no_version_and_a_file_digest(spark, tmp_path, parquet_dir):
    name = f"lineage_t_{os.getpid()}"
    spark.read.parquet(parquet_dir).write.format("parquet").saveAsTable(name)
    try:
        dp = _dp(tmp_path)
        kw = dict(epsilon=EPS, delta=DELTA, buckets=64, repetitions=3, release_id="cs-1")
        rel = dp.count_sketch(spark.table(name).filter("x > 0"), "country", **kw)
        lineage = rel.manifest["input"]
        assert lineage["kind"] == "table"
        [table] = lineage["tables"]
        assert table["name"].endswith(f"default.{name}") and table["provider"] == "parquet"
        assert table["version"] is None and len(lineage["files_hmac_sha256"]) == 64
        assert dp.ledger.lookup("cs-1").lineage == lineage
        spark.sql(f"INSERT INTO {name} VALUES (0.1, 0.2, 'es')")
        again = dp.count_sketch(spark.table(name).filter("x > 0"), "country", **kw)
        assert again.reused and again.input_changed is True
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {name}")


def test_an_in_memory_dataframe_says_so_and_a_rerun_cannot_tell(spark, tmp_path):
    dp = _dp(tmp_path)
    df = spark.createDataFrame([(0.1, 0.2), (0.3, 0.4)], "x double, y double")
    kw = dict(epsilon=EPS, delta=DELTA, norm_bound=1.0, release_id="mem-1")
    rel = dp.second_moment(df, ["x", "y"], **kw)
    assert rel.manifest["input"] == {"kind": "in_memory"}
    assert dp.second_moment(df, ["x", "y"], **kw).input_changed is None


def test_computing_lineage_starts_no_spark_job(spark, parquet_dir):
    name = f"lineage_j_{os.getpid()}"
    spark.read.parquet(parquet_dir).write.format("parquet").saveAsTable(name)
    sc = spark.sparkContext  # tests only: the library never touches the SparkContext
    try:
        for group, df in (("lineage-files", spark.read.parquet(parquet_dir)),
                          ("lineage-table", spark.table(name).filter("x > 0"))):
            sc.setJobGroup(group, group)
            try:
                assert L.input_lineage(df, KEY)["kind"] in ("files", "table")
            finally:
                sc.setLocalProperty("spark.jobGroup.id", None)
            assert list(sc.statusTracker().getJobIdsForGroup(group)) == []
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {name}")


def test_a_job_rerun_tells_a_changed_input_without_starting_spark(spark, tmp_path, parquet_dir, capsys):
    from spark_dp.cli.main import main as cli_main
    from tests._jobs import write_config

    assert any(n.startswith("_") for n in os.listdir(parquet_dir))  # Spark's _SUCCESS: skipped as Spark skips it
    cfg = write_config(tmp_path, {
        "release_id": "job-1", "task": "second_moment", "mechanism": "analyze_gauss",
        "dataset": {"id": "jobs", "path": parquet_dir, "format": "parquet", "columns": ["x", "y"]},
        "privacy": {"epsilon": 1.0, "delta": 1e-6, "norm_bound": 1.0, "sampler": "numpy"}, "params": {},
        "ledger": {"uri": f"sqlite:///{tmp_path}/jobs.db", "epsilon_limit": 3.0, "delta_limit": 1e-5},
        "output": {"path": str(tmp_path / "job-releases")}})
    assert cli_main(["release", cfg]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["reused"] is False and first["input_changed"] is None
    # The re-run answers from the ledger (no Spark); its pyarrow listing digests exactly what inputFiles() listed.
    assert L.path_lineage(parquet_dir, KEY) == L.input_lineage(spark.read.parquet(parquet_dir), KEY)
    assert cli_main(["release", cfg]) == 0
    assert json.loads(capsys.readouterr().out)["input_changed"] is False
    spark.createDataFrame([(0.5, 0.5, "it")], "x double, y double, country string") \
        .write.mode("append").partitionBy("country").parquet(parquet_dir)
    assert cli_main(["release", cfg]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["reused"] is True and again["input_changed"] is True


def test_a_job_rerun_over_a_catalog_table_tells_whether_it_changed(spark, tmp_path, parquet_dir, capsys):
    from spark_dp.cli.main import main as cli_main
    from tests._jobs import write_config

    name = f"default.lineage_rerun_{os.getpid()}"
    spark.read.parquet(parquet_dir).write.format("parquet").saveAsTable(name)
    try:
        cfg = write_config(tmp_path, {
            "release_id": "table-1", "task": "second_moment", "mechanism": "analyze_gauss",
            "dataset": {"id": "jobs", "table": name, "columns": ["x", "y"]},
            "privacy": {"epsilon": 1.0, "delta": 1e-6, "norm_bound": 1.0, "sampler": "numpy"}, "params": {},
            "ledger": {"uri": f"sqlite:///{tmp_path}/jobs.db", "epsilon_limit": 3.0, "delta_limit": 1e-5},
            "output": {"path": str(tmp_path / "job-releases")}})
        assert cli_main(["release", cfg]) == 0
        assert json.loads(capsys.readouterr().out)["reused"] is False
        assert cli_main(["release", cfg]) == 0  # the catalog is asked: the same files, so unchanged
        same = json.loads(capsys.readouterr().out)
        assert same["reused"] is True and same["input_changed"] is False
        spark.sql(f"INSERT INTO {name} VALUES (0.5, 0.5, 'it')")
        assert cli_main(["release", cfg]) == 0
        moved = json.loads(capsys.readouterr().out)
        assert moved["reused"] is True and moved["input_changed"] is True
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {name}")


def test_path_lineage_cannot_tell_for_globs_and_missing_paths(tmp_path):
    assert L.path_lineage(str(tmp_path / "*.parquet"), KEY) is None
    assert L.path_lineage(str(tmp_path / "missing"), KEY) is None
