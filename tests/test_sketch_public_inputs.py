"""Issue #12 (sketch family): heavy-hitter candidates must be public; merged parts must protect the same unit.

* candidates read from the release's own input are refused — job config (path, a part inside it,
  ``file://`` URI, symlink, table name), ``spark-dp heavy-hitters --candidates`` (against the
  manifest's ``source``) and the API (the sketched DataFrame, its files, frames derived from it) —
  with an error naming the parameter, nothing charged and nothing written;
* public candidates still work, and the manifest records ``source``;
* ``merge_sketches`` refuses parts with another privacy unit or m, and a plain merge does not
  carry a part's heavy-hitter list.
"""

import json
import math
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import spark_dp
from spark_dp.cli.main import main as cli_main
from spark_dp.errors import ConfigError
from spark_dp.sketch import heavy_hitters, merge_sketches
from spark_dp.sketch.api import count_sketch
from tests._jobs import charges, write_config

KW = dict(epsilon=1.0, delta=1e-6, repetitions=3, buckets=16)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A private dataset as a directory of two Parquet parts, and public candidates (.txt and Parquet)."""
    d = tmp_path_factory.mktemp("pub")
    parts = d / "private_q"
    parts.mkdir()
    gen = np.random.default_rng(7)
    for i in range(2):
        q = [f"q{int(x)}" for x in np.minimum(gen.zipf(1.5, size=300), 40)]
        pq.write_table(pa.table({"query": q, "user_id": gen.integers(0, 60, 300)}), str(parts / f"part-{i}.parquet"))
    (d / "cands.txt").write_text("".join(f"q{i}\n" for i in range(20)))
    pq.write_table(pa.table({"query": [f"q{i}" for i in range(20)]}), str(d / "public_cands.parquet"))
    os.symlink(str(parts), str(d / "alias"))
    return {"dir": str(parts), "part": str(parts / "part-0.parquet"), "txt": str(d / "cands.txt"),
            "public": str(d / "public_cands.parquet"), "alias": str(d / "alias")}


def _session(tmp_path, name="t.pub"):
    return spark_dp.DPSession(name, ledger=f"sqlite:///{tmp_path}/l.db", epsilon_limit=20.0, delta_limit=1e-4,
                              output=str(tmp_path / "out"), sampler="numpy")


def _nothing_done(sess, tmp_path):
    assert sess.budget() is None  # nothing charged
    assert not os.path.exists(tmp_path / "out")  # nothing written


# -- the API ------------------------------------------------------------------------------------
def test_api_refuses_candidates_from_the_sketched_files(spark, tmp_path, data):
    df = spark.read.parquet(data["dir"])
    sess = _session(tmp_path)
    for cands in [
        df,  # the sketched DataFrame itself
        df.select("query").distinct(),  # derived from it
        spark.read.parquet(data["dir"]),  # a second read of the same path
        spark.read.parquet(data["part"]),  # one part file inside it
        spark.read.parquet("file://" + data["part"]),  # a file:// URI of a part
        spark.read.parquet(data["alias"]),  # a symlink to the directory
    ]:
        with pytest.raises(ConfigError, match="'candidates' parameter of count_sketch") as e:
            count_sketch(sess, df, "query", candidates=cands, candidate_column="query", **KW)
        assert "public" in str(e.value) and "\n" not in str(e.value)
    _nothing_done(sess, tmp_path)


def test_api_refuses_candidates_derived_from_an_in_memory_frame(spark, tmp_path):
    """Classic Spark: the sketched frame itself is refused; a frame DERIVED from an in-memory one cannot be
    traced without the JVM (library code never touches it) — the Spark Connect test below covers derivation."""
    df = spark.createDataFrame([(f"q{i % 7}", i) for i in range(50)], "query string, user_id long")
    sess = _session(tmp_path)
    for cands in [df]:
        with pytest.raises(ConfigError, match="'candidates' parameter of count_sketch"):
            count_sketch(sess, df, "query", candidates=cands, candidate_column="query", **KW)
    _nothing_done(sess, tmp_path)
    # a public frame (not built on df) is accepted; the list lands in the manifest
    public = spark.createDataFrame([(f"q{i}",) for i in range(7)], "c string")
    rel = count_sketch(sess, df, "query", candidates=public, candidate_column="c", top=3, threshold=-1e9, **KW)
    assert len(rel.manifest["heavy_hitters"]["items"]) == 3 and rel.manifest["source"] is None


def test_api_accepts_public_files_and_records_source(spark, tmp_path, data):
    df = spark.read.parquet(data["dir"])
    sess = _session(tmp_path)
    cands = spark.read.parquet(data["public"])
    rel = count_sketch(sess, df, "query", candidates=cands, candidate_column="query", top=5, threshold=-1e9,
                       source={"path": data["alias"]}, **KW)
    assert len(rel.manifest["heavy_hitters"]["items"]) == 5
    assert rel.manifest["source"] == {"paths": [os.path.realpath(data["dir"])], "tables": []}
    assert spark_dp.load_release(rel.path).manifest["source"]["paths"] == [os.path.realpath(data["dir"])]
    # post-processing: heavy_hitters on the release refuses a candidate dataset from its recorded input
    assert len(heavy_hitters(rel.path, cands, "query", top=2, threshold=-1e9)) == 2
    with pytest.raises(ConfigError, match="'candidates' dataset reads"):
        heavy_hitters(rel.path, spark.read.parquet(data["part"]), "query")
    with pytest.raises(ConfigError, match="'source'"):
        count_sketch(_session(tmp_path / "b"), df, "query", source={"file": "x"}, **KW)


# -- the job ------------------------------------------------------------------------------------
def _config(tmp_path, data, candidates, **dataset):
    cfg = {
        "release_id": "pub-001", "task": "count_sketch", "mechanism": "count_min",
        "dataset": {"id": "t.pubjob", "path": data["dir"], "format": "parquet", "columns": ["query"], **dataset},
        "privacy": {"epsilon": 1.0, "delta": 1e-6, "sampler": "numpy"},
        "params": {"repetitions": 3, "buckets": 16, "heavy_hitters": {"top": 5, "candidates": candidates}},
        "ledger": {"uri": f"sqlite:///{tmp_path}/ledger.db", "epsilon_limit": 10.0, "delta_limit": 1e-5},
        "output": {"path": str(tmp_path / "releases")},
    }
    if "table" in dataset:
        del cfg["dataset"]["path"], cfg["dataset"]["format"]
    return write_config(tmp_path, cfg, "c.yaml")


@pytest.mark.parametrize("which", ["dir", "part", "file_uri", "alias", "table"])
def test_job_refuses_candidates_from_its_own_input(spark, tmp_path, data, capsys, which):
    if which == "table":
        path = _config(tmp_path, data, "Sales.`Private_Q`", table="sales.private_q")
    else:
        cand = "file://" + data["part"] if which == "file_uri" else data[which]
        path = _config(tmp_path, data, cand)
    assert cli_main(["release", path]) == 2
    err = capsys.readouterr().err
    assert err.startswith("spark-dp: error:") and "params.heavy_hitters.candidates" in err and "public" in err, err
    assert len(err.strip().splitlines()) == 1
    assert charges(tmp_path) == 0 and not os.path.exists(tmp_path / "releases")


def test_job_source_and_heavy_hitters_command(spark, tmp_path, data, capsys):
    assert cli_main(["release", _config(tmp_path, data, data["txt"])]) == 0
    rel = spark_dp.load_release(json.loads(capsys.readouterr().out)["path"])
    assert rel.manifest["source"] == {"paths": [os.path.realpath(data["dir"])], "tables": []}
    assert rel.manifest["heavy_hitters"]["items"]
    before = sorted(os.listdir(tmp_path / "releases"))
    for cand in [data["dir"], data["part"], "file://" + data["dir"], data["alias"]]:
        assert cli_main(["heavy-hitters", rel.path, "--candidates", cand, "--top", "3"]) == 2
        cap = capsys.readouterr()
        assert "'--candidates'" in cap.err and "public" in cap.err and cap.out == "", cap.err
    # public candidates: a text file and a Parquet dataset
    assert cli_main(["heavy-hitters", rel.path, "--candidates", data["txt"], "--top", "3", "--threshold=-1e9"]) == 0
    txt = capsys.readouterr().out.strip().splitlines()
    assert cli_main(["heavy-hitters", rel.path, "--candidates", data["public"], "--top", "3",
                     "--threshold=-1e9"]) == 0
    assert capsys.readouterr().out.strip().splitlines() == txt and len(txt) == 4
    assert sorted(os.listdir(tmp_path / "releases")) == before and charges(tmp_path) == 1


def test_heavy_hitters_command_refuses_the_source_table(spark, tmp_path, data, capsys):
    df = spark.read.parquet(data["dir"])
    rel = count_sketch(_session(tmp_path), df, "query", source={"table": "sales.private_q"}, **KW)
    assert rel.manifest["source"] == {"paths": [], "tables": ["sales.private_q"]}
    assert cli_main(["heavy-hitters", rel.path, "--format", "table", "--candidates", "SALES.private_q"]) == 2
    err = capsys.readouterr().err
    assert "'--candidates' table" in err and "public" in err, err


# -- merging ------------------------------------------------------------------------------------
def test_merge_refuses_another_privacy_unit_or_m(spark, tmp_path, data):
    df = spark.read.parquet(data["dir"])
    # One ledger fixes a dataset's unit, but parts can come from several ledgers (or per-period
    # ledger datasets, as plans merge them): each part here has its own ledger, same dataset id.
    users = count_sketch(_session(tmp_path / "a"), df, "query", privacy_unit="user_id", max_rows_per_unit=2, **KW)
    rows = count_sketch(_session(tmp_path / "b"), df, "query", seeds=users, max_rows_per_unit=2, **KW)
    with pytest.raises(ConfigError, match=r"privacy 'privacy_unit': 'column:user_id' .* vs 'row'"):
        merge_sketches([users, rows])
    other_m = count_sketch(_session(tmp_path / "c"), df, "query", seeds=users, privacy_unit="user_id",
                           max_rows_per_unit=3, **KW)
    with pytest.raises(ConfigError, match=r"privacy 'max_rows_per_unit': 2 .* vs 3"):
        merge_sketches([users, other_m])
    other_unit = count_sketch(_session(tmp_path / "d"), df, "query", seeds=users, privacy_unit="query",
                              max_rows_per_unit=2, **KW)
    with pytest.raises(ConfigError, match=r"privacy 'privacy_unit': 'column:user_id' .* vs 'column:query'"):
        merge_sketches([users, other_unit])
    same = count_sketch(_session(tmp_path / "a"), df, "query", seeds=users, privacy_unit="user_id",
                        max_rows_per_unit=2, **KW)
    assert np.array_equal(merge_sketches([users, same])["sketch"], users["sketch"] + same["sketch"])


def test_plain_merge_does_not_carry_a_parts_heavy_hitters(spark, tmp_path, data, capsys):
    df = spark.read.parquet(data["dir"])
    sess = _session(tmp_path)
    cands = [f"q{i}" for i in range(20)]
    a = count_sketch(sess, df, "query", candidates=cands, top=5, source={"path": data["dir"]}, **KW)
    b = count_sketch(sess, df, "query", candidates=cands, top=5, seeds=a, **KW)
    assert a.manifest["heavy_hitters"]["items"]
    merged = merge_sketches([a, b], output=str(tmp_path / "merged"))
    hh = merged.manifest["heavy_hitters"]
    assert hh["items"] is None and "not carried over" in hh["items_note"]
    assert hh["top"] == 5 and hh["threshold_rule"] == "3 sigma"
    ta, tb = a.manifest["heavy_hitters"]["threshold"], b.manifest["heavy_hitters"]["threshold"]
    assert hh["threshold"] == pytest.approx(math.hypot(ta, tb))  # 3 σ of the merged noise
    # the merged release's source is the union of its parts' (one part had none)
    assert merged.manifest["source"]["paths"] == [os.path.realpath(data["dir"])]
    assert merged.manifest["source"]["unrecorded_parts"] == [b.release_id]
    # the CLI has no stored list to print, and still refuses the parts' input as candidates
    assert cli_main(["heavy-hitters", merged.path]) == 2
    assert "no heavy hitters of its own" in capsys.readouterr().err
    assert cli_main(["heavy-hitters", merged.path, "--candidates", data["part"]]) == 2
    assert "'--candidates'" in capsys.readouterr().err


# -- Spark Connect ----------------------------------------------------------------------------------
CONNECT_CLIENT = r'''
import json, os, sys
from pyspark import SparkContext
from pyspark.sql.connect.session import SparkSession as ConnectSession
import spark_dp
from spark_dp.errors import ConfigError
from spark_dp.runtime import get_spark
from spark_dp.sketch.api import count_sketch

parts, public, work = sys.argv[1:4]
spark = get_spark()
assert isinstance(spark, ConnectSession)
sess = spark_dp.DPSession("t.cx", ledger=f"sqlite:///{work}/l.db", epsilon_limit=10.0, delta_limit=1e-4,
                          output=f"{work}/out", sampler="numpy")
kw = dict(epsilon=1.0, delta=1e-6, repetitions=3, buckets=16, candidate_column="query")
files = spark.read.parquet(parts)
mem = spark.createDataFrame([(f"q{i % 7}", i) for i in range(50)], "query string, user_id long")
refused = []
for df, cands in [(files, files), (files, files.select("query").distinct()), (files, spark.read.parquet(parts)),
                  (mem, mem), (mem, mem.select("query").distinct()), (mem, mem.where("user_id < 9"))]:
    try:
        count_sketch(sess, df, "query", candidates=cands, **kw)
        refused.append(None)
    except ConfigError as e:
        refused.append(str(e))
nothing = sess.budget() is None and not os.path.exists(f"{work}/out")
rel = count_sketch(sess, mem, "query", candidates=spark.read.parquet(public), top=3, threshold=-1e9, **kw)
assert SparkContext._active_spark_context is None, "a SparkContext was started"
print(json.dumps({"refused": refused, "nothing": nothing, "items": len(rel.manifest["heavy_hitters"]["items"])}))
'''


def test_candidates_checks_over_spark_connect(tmp_path, data, connect_server):
    import sys

    from tests._servers import run_client, spark_env

    script = tmp_path / "client.py"
    script.write_text(CONNECT_CLIENT)
    (tmp_path / "client").mkdir()
    (tmp_path / "work").mkdir()
    env = spark_env(tmp_path / "client-local", SPARK_REMOTE=connect_server.url)
    run = run_client([sys.executable, str(script), data["dir"], data["public"], str(tmp_path / "work")], env=env,
                     cwd=tmp_path / "client", name="candidates-connect")
    assert run.returncode == 0, run.describe(connect_server)
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert all(r is not None and "'candidates' parameter" in r for r in out["refused"]), out["refused"]
    assert out["nothing"] and out["items"] == 3
