"""A new user's first hour: a plain SparkSession.builder, re-run cells, budget wording, refusals, labelled results.

* a script run with this venv's Python and a plain ``SparkSession.builder.master("local[2]")`` releases (and a
  re-run of the same call spends once); workers that run another Python stop the first release with one line;
* a call without ``release_id`` gets a default id from the dataset, the request and the input's lineage: the
  same call returns the stored release, a changed parameter or input makes a new one, an explicit new id too
  (the API and a config without ``release_id``);
* a DPSession naming another limit than the ledger's is refused, not ignored;
* a budget refusal says what the release needs and what is left; the CLI's stderr is free of warnings;
* heavy hitters say which threshold cut them; ``Release.to_pandas`` labels every family's arrays.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import spark_dp
from spark_dp.cli.main import main as cli_main
from spark_dp.errors import BudgetExceededError, ConfigError
from spark_dp.privacy import Budget, GaussianEvent, SeededSampler, open_ledger
from tests._jobs import write_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SYSTEM_PYTHON = "/usr/bin/python3"


def _clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without what the test session set for its own Spark (a user's shell)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET",
                        "SPARK_REMOTE", "SPARK_DP_MASTER")}
    env.update(SPARK_LOCAL_IP="127.0.0.1", PYTHONPATH=ROOT, **extra)
    return env


_SCRIPT = textwrap.dedent("""
    import json, sys
    from pyspark.sql import SparkSession
    import spark_dp

    spark = SparkSession.builder.master("local[2]").getOrCreate()
    rows = [(i % 7 / 7, i % 5 / 5, (i % 7 / 7) - (i % 5 / 5)) for i in range(200)]
    df = spark.createDataFrame(rows, ["x1", "x2", "y"])
    dp = spark_dp.DPSession("first.hour", ledger=sys.argv[1], epsilon_limit=10.0, delta_limit=1e-5, output=sys.argv[2])
    a = dp.linear_regression(df, ["x1", "x2"], "y", epsilon=1.0, delta=1e-6, norm_bound=2.0)
    b = dp.linear_regression(df, ["x1", "x2"], "y", epsilon=1.0, delta=1e-6, norm_bound=2.0)
    t = a.to_pandas("coefficients")
    print(json.dumps({"ids": [a.release_id, b.release_id], "reused": [a.reused, b.reused],
                      "same": bool((a["coefficients"] == b["coefficients"]).all()), "releases": dp.budget().releases,
                      "features": t["feature"].tolist(), "columns": list(t.columns)}))
    spark.stop()
""")


def _system_python_lacks_spark_dp() -> str | None:
    if not os.path.isfile(SYSTEM_PYTHON):
        return f"{SYSTEM_PYTHON} does not exist"
    probe = subprocess.run([SYSTEM_PYTHON, "-c", "import spark_dp"], capture_output=True, cwd="/", env={})
    return None if probe.returncode != 0 else f"{SYSTEM_PYTHON} has spark_dp"


def test_a_plain_builder_session_releases_and_spends_once(tmp_path):
    """The issue's done-criterion, as a user runs it: .venv/bin/python script.py, no PYSPARK_PYTHON set."""
    script = tmp_path / "script.py"
    script.write_text(_SCRIPT)
    ledger = f"sqlite:///{tmp_path}/ledger.db"
    proc = subprocess.run([sys.executable, str(script), ledger, str(tmp_path / "out")], capture_output=True,
                          text=True, cwd=tmp_path, env=_clean_env(), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["ids"][0] == out["ids"][1] and out["reused"] == [False, True] and out["same"], out
    assert out["releases"] == 1 and len(open_ledger(ledger).charges("first.hour")) == 1
    assert out["features"] == ["x1", "x2"] and out["columns"] == ["feature", "value", "stderr", "low", "high"]
    assert "Traceback" not in proc.stderr and "ModuleNotFoundError" not in proc.stderr


def test_workers_without_spark_dp_stop_the_release_with_one_line(tmp_path):
    """PYSPARK_PYTHON naming a Python without spark_dp (or numpy): one line naming it and the fix; nothing charged."""
    if (why := _system_python_lacks_spark_dp()) is not None:
        pytest.skip(why)
    script = tmp_path / "script.py"
    script.write_text(_SCRIPT)
    ledger = f"sqlite:///{tmp_path}/ledger.db"
    proc = subprocess.run([sys.executable, str(script), ledger, str(tmp_path / "out")], capture_output=True,
                          text=True, cwd=tmp_path, env=_clean_env(PYSPARK_PYTHON=SYSTEM_PYTHON), timeout=600)
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("spark_dp.errors.WorkerEnvironmentError: "), proc.stderr[-3000:]
    assert SYSTEM_PYTHON in last and sys.executable in last and "PYSPARK_PYTHON" in last, last
    # no worker trace: the probe runs in the workers without failing there, and the error hides Spark's chain
    assert "ModuleNotFoundError" not in proc.stderr and "Py4JJavaError" not in proc.stderr
    assert "During handling of the above exception" not in proc.stderr
    assert proc.stderr.count("\n") < 40, proc.stderr
    assert open_ledger(ledger).charges("first.hour") == []


# -- default release ids ------------------------------------------------------------------------------------------


def _session(tmp_path, name="ids", **kw):
    return spark_dp.DPSession(name, ledger=f"sqlite:///{tmp_path}/l.db", epsilon_limit=20.0, delta_limit=1e-5,
                              output=str(tmp_path / "out"), sampler=kw.pop("sampler", "numpy"), **kw)


def _points(path, seed=0, n=120):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3)) * 0.4
    pq.write_table(pa.table({"x1": X[:, 0], "x2": X[:, 1], "y": X[:, 0] - X[:, 2]}), path)


def test_the_same_call_spends_once_and_changes_make_new_releases(spark, tmp_path, caplog):
    data = tmp_path / "data.parquet"
    _points(data)
    dp = _session(tmp_path)
    df = spark.read.parquet(str(data))
    kw = dict(epsilon=1.0, delta=1e-6, norm_bound=2.0)
    a = dp.linear_regression(df, ["x1", "x2"], "y", **kw)
    spent = dp.budget().spent_epsilon
    b = dp.linear_regression(spark.read.parquet(str(data)), ["x1", "x2"], "y", **kw)  # a re-run cell
    assert b.release_id == a.release_id and b.reused and not a.reused
    assert np.array_equal(a["coefficients"], b["coefficients"]) and np.array_equal(a["matrix"], b["matrix"])
    assert dp.budget().releases == 1 and dp.budget().spent_epsilon == spent
    assert a.release_id.startswith("linear_regression-")

    c = dp.linear_regression(df, ["x1", "x2"], "y", **{**kw, "norm_bound": 3.0})  # another parameter
    assert c.release_id != a.release_id and not c.reused
    _points(data, seed=1)  # the input files change (same path)
    d = dp.linear_regression(spark.read.parquet(str(data)), ["x1", "x2"], "y", **kw)
    assert d.release_id not in (a.release_id, c.release_id) and not d.reused
    e = dp.linear_regression(spark.read.parquet(str(data)), ["x1", "x2"], "y", release_id="again-on-purpose", **kw)
    assert e.release_id == "again-on-purpose" and not e.reused
    assert dp.budget().releases == 4

    # in memory: nothing to fingerprint; the same call returns the earlier release and says so
    mem = spark.createDataFrame([(0.1, 0.2, 0.3), (0.3, -0.1, 0.0)], ["x1", "x2", "y"])
    f = dp.second_moment(mem, ["x1", "x2"], **kw)
    with caplog.at_level(logging.WARNING, logger="spark_dp"):
        g = dp.second_moment(mem, ["x1", "x2"], **kw)
    assert g.reused and g.release_id == f.release_id and dp.budget().releases == 5
    assert "cannot tell whether the data changed" in caplog.text and "release_id=" in caplog.text

    # the dry run names the id the release would use, and knows it is stored
    p = dp.preview.linear_regression(spark.read.parquet(str(data)), ["x1", "x2"], "y", **kw)
    assert p.release_id == d.release_id and p.stored and p.cost["epsilon"] == 0.0


def test_a_config_without_release_id_spends_once(spark, tmp_path, capsys):
    data = tmp_path / "data.parquet"
    _points(data)
    cfg = {"dataset": {"id": "cfg.points", "path": str(data), "format": "parquet", "columns": ["x1", "x2", "y"]},
           "task": "second_moment", "mechanism": "analyze_gauss",
           "privacy": {"epsilon": 1.0, "delta": 1e-6, "norm_bound": 1.0, "sampler": "numpy"},
           "ledger": {"uri": f"sqlite:///{tmp_path}/ledger.db", "epsilon_limit": 3.0, "delta_limit": 1e-5},
           "output": {"path": str(tmp_path / "releases")}}
    path = write_config(tmp_path, cfg)
    assert cli_main(["release", path]) == 0
    first = json.loads(capsys.readouterr().out)
    assert cli_main(["release", path]) == 0
    second = json.loads(capsys.readouterr().out)
    assert second["release_id"] == first["release_id"] and second["reused"] is True
    assert second["dataset_epsilon_spent"] == first["dataset_epsilon_spent"]
    assert len(open_ledger(f"{tmp_path}/ledger.db").charges("cfg.points")) == 1
    # spent is named: the composition at the dataset's delta_limit, next to what the release was charged
    assert first["dataset_delta_limit"] == 1e-5 and "delta_limit" in first["note"] and first["epsilon"] == 1.0
    assert first["dataset_epsilon_spent"] < first["epsilon"]  # 0.87 at delta 1e-5: the note explains it
    assert cli_main(["ledger", "--uri", f"sqlite:///{tmp_path}/ledger.db", "--dataset", "cfg.points"]) == 0
    table = capsys.readouterr().out
    assert "delta_limit" in table.splitlines()[0] and "exact composition" in table

    # over the limit: exit 3, one line saying what the release needs and what is left
    cfg["privacy"]["epsilon"] = 4.0
    assert cli_main(["release", write_config(tmp_path, cfg)]) == 3
    err = capsys.readouterr().err
    assert err.startswith("spark-dp: refused: ") and err.count("\n") == 1 and "needs epsilon=" in err
    assert len(open_ledger(f"{tmp_path}/ledger.db").charges("cfg.points")) == 1


# -- limits and refusals (no Spark) ----------------------------------------------------------------------------


def test_another_epsilon_limit_is_refused_not_ignored(tmp_path):
    ledger = open_ledger(f"sqlite:///{tmp_path}/l.db")
    ledger.ensure_dataset("lim", Budget(10.0, 1e-5))
    with pytest.raises(ConfigError, match=r"ledger limit epsilon=10.*epsilon=3.*set-limit"):
        spark_dp.DPSession("lim", ledger=f"sqlite:///{tmp_path}/l.db", epsilon_limit=3.0, delta_limit=1e-5)
    same = spark_dp.DPSession("lim", ledger=f"sqlite:///{tmp_path}/l.db", epsilon_limit=10.0, delta_limit=1e-5)
    none = spark_dp.DPSession("lim", ledger=f"sqlite:///{tmp_path}/l.db")  # no limit given: the ledger's
    assert same.limit == Budget(10.0, 1e-5) and none.limit is None
    ledger.set_limit("lim", Budget(3.0, 1e-5))  # the explicit, recorded way
    spark_dp.DPSession("lim", ledger=f"sqlite:///{tmp_path}/l.db", epsilon_limit=3.0, delta_limit=1e-5)


def test_a_refusal_says_what_is_needed_and_what_is_left(tmp_path):
    from spark_dp.privacy.accountant import compose_epsilon
    from spark_dp.privacy.calibration import gaussian_noise_multiplier

    ledger = open_ledger(f"sqlite:///{tmp_path}/l.db")
    limit = Budget(5.0, 1e-5)
    z = gaussian_noise_multiplier(1.0, 1e-6)
    for i, eps in enumerate((1.0, 0.5, 0.5)):
        ledger.charge(release_id=f"r{i}", dataset_id="ds", request_sha256="x",
                      events=[GaussianEvent(gaussian_noise_multiplier(eps, 1e-6))], budget=Budget(eps, 1e-6),
                      limit=limit)
    spent = ledger.status("ds")[0].spent_epsilon
    assert 1.0 < spent < 1.2  # 1 + 0.5 + 0.5 composed exactly at delta 1e-5 (the README's example)
    big = [GaussianEvent(z / 6)]  # a release of epsilon ~ 6 on its own
    with pytest.raises(BudgetExceededError) as info:
        ledger.check("ds", big, limit)
    msg = str(info.value)
    need = compose_epsilon(big, 1e-5)
    assert "\n" not in msg and f"needs epsilon={need:.4g}" in msg and f"left: epsilon={5.0 - spent:.4g}" in msg
    assert f"spent (epsilon={spent:.4g})" in msg and "delta_limit 1e-05" in msg and "exhausted" not in msg


# -- console, heavy hitters, labelled results ------------------------------------------------------------------


def test_cli_stderr_has_no_warning_or_trace(tmp_path):
    data = tmp_path / "data.parquet"
    _points(data)
    cfg = {"release_id": "quiet", "dataset": {"id": "quiet", "path": str(data), "format": "parquet",
                                              "columns": ["x1", "x2"]},
           "task": "second_moment", "mechanism": "analyze_gauss",
           "privacy": {"epsilon": 1.0, "delta": 1e-6, "norm_bound": 1.0, "sampler": "numpy"},
           "ledger": {"uri": f"sqlite:///{tmp_path}/ledger.db", "epsilon_limit": 3.0, "delta_limit": 1e-5},
           "output": {"path": str(tmp_path / "releases")}}
    proc = subprocess.run([sys.executable, "-m", "spark_dp.cli.main", "--master", "local[1]", "release",
                           write_config(tmp_path, cfg)], capture_output=True, text=True, cwd=tmp_path,
                          env=_clean_env(), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout)["reused"] is False
    for noise in ("FutureWarning", "Traceback", "Failed to delete", "[Stage "):
        assert noise not in proc.stderr, proc.stderr


def test_heavy_hitters_say_what_cut_them(spark, tmp_path, capsys):
    from spark_dp.sketch.estimate import heavy_hitters

    items = ["a"] * 400 + ["b"] * 300 + ["c"] * 3 + ["d"] * 2
    df = spark.createDataFrame([(x,) for x in items], ["item"])
    dp = _session(tmp_path, "hh", sampler=SeededSampler(np.random.default_rng(3)))
    rel = dp.count_sketch(df, "item", epsilon=1.0, delta=1e-6, repetitions=5, buckets=1024,
                          candidates=["a", "b", "c", "d", "e"], top=4)
    hh = rel.manifest["heavy_hitters"]
    assert [r["item"] for r in hh["items"]] == ["a", "b"], hh  # c, d, e are far below 3 sigma of the noise
    assert "2 of top 4" in hh["note"] and f"{hh['threshold']:.6g}" in hh["note"]
    found = heavy_hitters(rel, ["a", "b", "c", "d", "e"], top=4)
    assert [x for x, _ in found] == ["a", "b"] and found.top == 4 and found.threshold == hh["threshold"]
    assert "2 of top 4" in found.note and "threshold" in found.note
    assert heavy_hitters(rel, ["a", "b"], top=2).note is None  # top reached: nothing to say
    frame = rel.to_pandas("heavy_hitters")
    assert frame["item"].tolist() == ["a", "b"] and (frame["low"] < frame["value"]).all()
    assert (frame["value"] < frame["high"]).all() and frame.attrs["note"] == hh["note"]
    est = rel.to_pandas("estimates", items=["a", "e"])
    # The estimates' interval is a bound that includes hash collisions (5 x 1,024 counters; a sketch of a few
    # hundred counters is refused): finite ends, no standard error (a bound has none).
    assert est["item"].tolist() == ["a", "e"] and np.isfinite(est[["low", "high"]].to_numpy()).all()
    assert est["stderr"].isna().all() and (est["low"] < est["high"]).all()

    candidates = tmp_path / "candidates.txt"
    candidates.write_text("a\nb\nc\nd\ne\n")
    assert cli_main(["heavy-hitters", rel.path, "--candidates", str(candidates), "--top", "4"]) == 0
    out = capsys.readouterr()
    assert out.out.splitlines()[0] == "item,estimate" and len(out.out.splitlines()) == 3
    assert out.err.startswith("spark-dp: heavy-hitters: 2 of top 4") and "threshold" in out.err
    assert cli_main(["heavy-hitters", rel.path, "--top", "4"]) == 0  # the release's own stored list
    assert "2 of top 4" in capsys.readouterr().err


def test_to_pandas_labels_every_family(spark, tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(150, 3)) / 3
    df = spark.createDataFrame([(*map(float, r), float(r[0] - r[1])) for r in X], ["a", "b", "c", "y"])
    dp = _session(tmp_path, "frames", sampler=SeededSampler(np.random.default_rng(1)))
    kw = dict(epsilon=1.0, delta=1e-6)

    sm = dp.second_moment(df, ["a", "b", "c"], norm_bound=1.0, **kw)
    t = sm.to_pandas("matrix")
    assert list(t.columns) == ["row", "column", "value", "stderr", "low", "high"] and len(t) == 9
    assert t.set_index(["row", "column"]).loc[("a", "c"), "value"] == sm["matrix"][0, 2]
    assert np.array_equal(t["low"].to_numpy(), sm.interval("matrix")[0].reshape(-1))

    lr = dp.linear_regression(df, ["a", "b"], "y", norm_bound=2.0, fit_intercept=True, **kw)
    c = lr.to_pandas("coefficients")
    assert c["feature"].tolist() == ["a", "b"] and np.array_equal(c["value"], lr["coefficients"])
    assert np.array_equal(c["stderr"], lr.stderr("coefficients")) and (c["low"] <= c["high"]).all()
    assert lr.to_pandas("intercept")["feature"].tolist() == ["intercept"]
    m = lr.to_pandas("matrix")
    assert m["row"].unique().tolist() == ["a", "b", "intercept", "y"]  # the constant column, then the label

    ad = dp.linear_regression(df, ["a", "b"], "y", norm_bound=2.0, mechanism="adassp", **kw)
    assert ad.to_pandas("coefficients")["feature"].tolist() == ["a", "b"]
    assert ad.to_pandas("xtx")["row"].unique().tolist() == ["a", "b", "intercept"]  # fit_intercept: the constant
    assert ad.to_pandas("lambda")["parameter"].tolist() == ["lambda"]

    pca = dp.pca(df, ["a", "b", "c"], 2, norm_bound=1.0, **kw)
    v = pca.to_pandas("eigenvectors")
    assert list(v.columns[:2]) == ["component", "feature"] and v["feature"].tolist()[:3] == ["a", "b", "c"]
    assert v["stderr"].isna().all() and v["high"].notna().all()  # a bound: no standard error
    assert pca.to_pandas("eigenvalues")["component"].tolist() == [0, 1]

    td = dp.tensor_decomposition(df, ["a", "b", "c"], 2, norm_bound=1.0, restarts=2, iterations=3, **kw)
    e = td.to_pandas("eigenvectors")
    assert list(e.columns[:2]) == ["component", "feature"] and set(e["feature"]) == {"a", "b", "c"}
    assert td.to_pandas("eigenvalues")["component"].tolist() == [0, 1]

    cs = dp.count_sketch(df.selectExpr("cast(cast(a * 4 as int) as string) as item"), "item", repetitions=3,
                         buckets=16, **kw)
    s = cs.to_pandas("sketch")
    assert list(s.columns[:2]) == ["repetition", "bucket"] and len(s) == 48 and s["low"].notna().all()
    with pytest.raises(ConfigError, match="'name'.*'sketch'"):
        cs.to_pandas("coefficients")
    for rel in (sm, lr, ad, pca, td, cs):  # every array of every family has a table
        for name in rel.arrays:
            assert len(rel.to_pandas(name)) == np.size(rel[name])
