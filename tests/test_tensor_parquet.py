"""Power-method passes over Parquet read by the tasks, with the Python-worker block cache."""

import json
import os
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import spark_dp
from spark_dp.aggregates import _worker_cache as wc
from spark_dp.aggregates.moments import (
    ParquetRows,
    clear_worker_cache,
    parquet_moment_fn,
    parquet_rows,
    prepare_rows,
    second_moment_sums,
    third_moment_sums,
)
from spark_dp.errors import ConfigError, SchemaError
from spark_dp.privacy import SeededSampler
from spark_dp.tensor.api import tensor_decomposition

D, L = 5, 3


def write_list_files(path, parts, row_group_size=40):
    """One list<double> column ``x`` per file; NaN entries and null rows kept as written."""
    os.makedirs(path, exist_ok=True)
    for i, X in enumerate(parts):
        values = pa.array(X.reshape(-1), type=pa.float64())
        offsets = pa.array(np.arange(0, X.size + 1, X.shape[1], dtype=np.int32))
        col = pa.ListArray.from_arrays(offsets, values)
        if i == 0:  # a null row and a row of the wrong length (both become NaN rows)
            col = pa.concat_arrays([col, pa.array([None, [1.0, 2.0]], type=pa.list_(pa.float64()))])
        pq.write_table(pa.table({"x": col}), os.path.join(path, f"part-{i}.parquet"), row_group_size=row_group_size)
    return path


def data(seed=0, sizes=(150, 90, 61)):
    rng = np.random.default_rng(seed)  # test data, not noise
    parts = [rng.normal(size=(m, D)) * 0.8 for m in sizes]
    parts[1][3, 2] = np.nan
    parts[2][5, 0] = np.inf
    return parts


def expected(parts, U, B, policy, extra_bad=2):
    X = np.vstack(parts + [np.full((extra_bad, D), np.nan)])
    bad = ~np.isfinite(X).all(axis=1)
    X = X[~bad] if policy == "drop" else np.where(np.isfinite(X), X, 0.0)
    X = X * np.minimum(1.0, B / np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-300))
    P = X @ U
    return X.T @ P**2, (P**3).sum(0), X.shape[0], X.T @ X


@pytest.fixture
def small_splits(spark):
    """Files split by row groups into several units (as large files are)."""
    key = "spark.sql.files.maxPartitionBytes"
    spark.conf.set(key, "3k")
    yield
    spark.conf.unset(key)


@pytest.mark.parametrize("policy", ["drop", "zero"])
def test_direct_pass_equals_numpy_and_the_spark_pass(spark, tmp_path, small_splits, policy):
    parts = data()
    path = write_list_files(str(tmp_path / "x"), parts)
    U = np.random.default_rng(1).standard_normal((D, L))
    B = 1.2  # most rows are clipped
    S_np, m3_np, n_np, M2_np = expected(parts, U, B, policy)
    rows = parquet_rows(path, ["x"], dimension=D, spark=spark)
    assert isinstance(rows, ParquetRows) and rows.d == D and rows.layout == "list"
    units = [u for t in rows.tasks for u in t]
    assert len(rows.uris) == 3 and any(parts_ > 1 for _, _, parts_ in units)  # several files, split by row groups
    S, m3, n = third_moment_sums(rows, U, norm_bound=B, nonfinite=policy)
    assert n == n_np and np.allclose(S, S_np, rtol=1e-12, atol=1e-12) and np.allclose(m3, m3_np, rtol=1e-12)
    assert rows.last_pass.rows == n_np and rows.last_pass.units_cached + rows.last_pass.units_read == len(units)
    M2, n2 = second_moment_sums(rows, D, norm_bound=B, nonfinite=policy)
    assert n2 == n_np and np.allclose(M2, M2_np, rtol=1e-12, atol=1e-12)
    frame, _ = prepare_rows(spark.read.parquet(path), ["x"], dimension=D)
    S_sp, m3_sp, n_sp = third_moment_sums(frame, U, norm_bound=B, nonfinite=policy)
    M2_sp, _ = second_moment_sums(frame, D, norm_bound=B, nonfinite=policy)
    frame.unpersist()
    assert n_sp == n and np.allclose(S_sp, S, rtol=1e-12, atol=1e-12) and np.allclose(m3_sp, m3, rtol=1e-12)
    assert np.allclose(M2_sp, M2, rtol=1e-12, atol=1e-12)
    # every unit was read or served exactly once again on a repeat (same sums)
    S2, m32, n2 = third_moment_sums(rows, U, norm_bound=B, nonfinite=policy)
    assert n2 == n and np.allclose(S2, S, rtol=1e-12, atol=1e-13) and np.allclose(m32, m3, rtol=1e-12)


def test_numeric_columns_layout_and_fallbacks(spark, tmp_path):
    rng = np.random.default_rng(2)
    X = rng.normal(size=(80, 3))
    X[4, 1] = np.nan
    path = str(tmp_path / "cols.parquet")
    pq.write_table(pa.table({f"c{i}": X[:, i] for i in range(3)} | {"g": np.arange(80) % 4}), path, row_group_size=25)
    U = rng.standard_normal((3, 2))
    rows = parquet_rows([path], ["c0", "c1", "c2"], spark=spark)
    assert rows.layout == "columns"
    S, m3, n = third_moment_sums(rows, U, norm_bound=2.0, nonfinite="drop")
    Xk = X[np.isfinite(X).all(axis=1)]
    Xk = Xk * np.minimum(1.0, 2.0 / np.linalg.norm(Xk, axis=1, keepdims=True))
    assert n == 79 and np.allclose(S, Xk.T @ (Xk @ U) ** 2, rtol=1e-12) and np.allclose(m3, ((Xk @ U) ** 3).sum(0))
    # contribution bounding needs a shuffle: no direct path
    assert parquet_rows([path], ["c0", "c1", "c2"], privacy_unit="g", spark=spark) is None
    with pytest.raises(SchemaError, match="nope"):
        parquet_rows([path], ["c0", "nope"], spark=spark)
    with pytest.raises(ConfigError, match="cache_bytes"):
        parquet_rows([path], ["c0"], spark=spark, cache_bytes=-1)
    with pytest.raises(ValueError, match="pass index"):
        third_moment_sums(rows, U, norm_bound=1.0, pass_index=0)


# -- the cache, in this process (the worker function run directly) -------------------------


def run_fn(rows, U, cap, policy="drop", B=1.2):
    """Runs the tasks' function here, task by task; returns the summed partials and the counters."""
    width = rows.d * U.shape[1] + U.shape[1]
    fn = parquet_moment_fn(rows.tasks, rows.columns, rows.layout, rows.d, B, policy, U, cap)
    total, hits, reads = np.zeros(width + 1), 0, 0
    for i in range(len(rows.tasks)):
        (out,) = list(fn(iter([pa.record_batch([pa.array([i], pa.int64())], names=["id"])])))
        part = np.frombuffer(out.column(0)[0].as_py(), dtype=np.float64)
        total += part[: width + 1]
        hits, reads = hits + int(part[width + 1]), reads + int(part[width + 2])
    return total, hits, reads


def replace_file(uri, tmp_path, parts, name, shift_ns=10**9):
    """Rewrites the file at ``uri`` with other rows, its mtime set to the old one + ``shift_ns``."""
    f = uri.removeprefix("file://")
    st = os.stat(f)
    write_list_files(str(tmp_path / "tmp"), parts)
    os.replace(str(tmp_path / "tmp" / name), f)
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + shift_ns))


@pytest.fixture
def empty_cache(monkeypatch):
    """The per-worker cache, empty, in this process (no SPARK_LOCAL_DIRS here: no host-shared files)."""
    monkeypatch.delenv("SPARK_LOCAL_DIRS", raising=False)
    wc.CACHE.shrink(0)
    yield wc.CACHE
    wc.CACHE.shrink(0)


def test_second_call_is_served_from_the_cache_and_a_changed_file_is_read_again(spark, tmp_path, empty_cache):
    parts = data(3)
    path = write_list_files(str(tmp_path / "x"), parts)
    rows = parquet_rows(path, ["x"], dimension=D, spark=spark)
    units = sum(len(t) for t in rows.tasks)
    U = np.random.default_rng(4).standard_normal((D, L))
    first, h1, r1 = run_fn(rows, U, 1 << 30)
    assert (h1, r1) == (0, units) and len(empty_cache) == units
    assert all(not a.flags.writeable for a in empty_cache._entries.values())  # cached rows are read-only
    second, h2, r2 = run_fn(rows, U, 1 << 30)
    assert (h2, r2) == (units, 0) and np.allclose(second, first, rtol=1e-13)
    S_np, m3_np, n_np, _ = expected(parts, U, 1.2, "drop")
    assert second[-1] == n_np and np.allclose(second[: D * L], S_np.ravel(), rtol=1e-12)
    # different preparation (norm bound, policy) is a different key
    _, h3, r3 = run_fn(rows, U, 1 << 30, policy="zero")
    assert (h3, r3) == (0, units)
    # rewrite one file with other rows: never served stale
    f = sorted(rows.uris)[1]
    new = np.random.default_rng(5).normal(size=parts[1].shape)
    replace_file(f, tmp_path, [np.zeros((1, D)), new], "part-1.parquet")
    third, h4, r4 = run_fn(rows, U, 1 << 30)
    changed = sum(1 for t in rows.tasks for u in t if u[0] == f)
    assert (h4, r4) == (units - changed, changed)
    S_new, m3_new, n_new, _ = expected([parts[0], new, parts[2]], U, 1.2, "drop")
    assert third[-1] == n_new and np.allclose(third[: D * L], S_new.ravel(), rtol=1e-12)
    # the stale version of that file's units is gone, not just shadowed
    assert sum(1 for k in empty_cache._entries if k[0] == f) == changed
    # a rewrite that keeps the mtime (coarse clocks, copies with preserved times) is caught by inode/ctime
    newer = np.random.default_rng(6).normal(size=parts[1].shape)
    replace_file(f, tmp_path, [np.zeros((1, D)), newer], "part-1.parquet", shift_ns=0)
    fourth, h5, r5 = run_fn(rows, U, 1 << 30)
    assert (h5, r5) == (units - changed, changed)
    S_newer, _, n_newer, _ = expected([parts[0], newer, parts[2]], U, 1.2, "drop")
    assert fourth[-1] == n_newer and np.allclose(fourth[: D * L], S_newer.ravel(), rtol=1e-12)


def test_eviction_under_a_tiny_cap(spark, tmp_path, empty_cache):
    parts = data(6, sizes=(100, 100, 100))
    path = write_list_files(str(tmp_path / "x"), parts, row_group_size=1000)
    rows = parquet_rows(path, ["x"], dimension=D, spark=spark)
    units = sum(len(t) for t in rows.tasks)
    assert units == 3
    U = np.random.default_rng(7).standard_normal((D, L))
    one_unit = 102 * D * 8  # the largest unit's rows (file 0 has two more rows)
    full, _, _ = run_fn(rows, U, 1 << 30)
    empty_cache.shrink(0)
    capped, h, r = run_fn(rows, U, one_unit)
    assert (h, r) == (0, 3) and len(empty_cache) == 1 and empty_cache.nbytes <= one_unit
    again, h, r = run_fn(rows, U, one_unit)  # LRU: only the last unit run is held, and it is run last
    assert (h, r) == (0, 3) and len(empty_cache) == 1
    assert np.allclose(capped, full, rtol=1e-13) and np.allclose(again, full, rtol=1e-13)
    nothing, h, r = run_fn(rows, U, 100)  # smaller than any unit: never stored
    assert (h, r) == (0, 3) and len(empty_cache) == 0 and empty_cache.nbytes == 0
    assert np.allclose(nothing, full, rtol=1e-13)
    off, h, r = run_fn(rows, U, 0)  # cache off
    assert (h, r) == (0, 3) and len(empty_cache) == 0 and np.allclose(off, full, rtol=1e-13)


# -- the cache in Spark's reused Python workers -----------------------------------------------


def test_spark_passes_are_served_from_worker_caches_and_see_changed_files(spark, tmp_path):
    parts = data(8)
    path = write_list_files(str(tmp_path / "x"), parts)
    rows = parquet_rows(path, ["x"], dimension=D, spark=spark)
    U = np.random.default_rng(9).standard_normal((D, L))
    S0, m30, n0 = third_moment_sums(rows, U, norm_bound=1.2)
    units = sum(len(t) for t in rows.tasks)
    assert rows.last_pass.units_read == units
    # Spark picks which idle worker runs a task; the rows a worker prepared are
    # files shared by the host's workers, so every later pass reads no file.
    for _ in range(3):
        S, m3, n = third_moment_sums(rows, U, norm_bound=1.2)
        assert n == n0 and np.allclose(S, S0, rtol=1e-12) and np.allclose(m3, m30, rtol=1e-12)
        assert rows.last_pass.units_read == 0 and rows.last_pass.units_cached == units
    assert sum(rows.last_pass.cache_bytes.values()) > 0
    f = rows.uris[0]
    new = np.random.default_rng(10).normal(size=parts[0].shape)
    replace_file(f, tmp_path, [new], "part-0.parquet")
    S_new, m3_new, n_new, _ = expected([new, parts[1], parts[2]], U, 1.2, "drop")
    S, m3, n = third_moment_sums(rows, U, norm_bound=1.2)
    assert n == n_new and np.allclose(S, S_new, rtol=1e-12) and np.allclose(m3, m3_new, rtol=1e-12)
    assert rows.last_pass.units_read >= 1
    assert clear_worker_cache(spark, rows.uris) >= 1


# -- the decomposition over Parquet equals the one over the DataFrame -------------------------


def mixture_files(tmp_path, n=600, seed=0):
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((D, 3)))
    h = rng.integers(0, 3, size=n)
    X = Q[:, h].T * np.array([1.0, 0.8, 0.6])[h][:, None] + 0.01 * rng.standard_normal((n, D))
    X[7, 1] = np.nan
    path = str(tmp_path / "mix")
    os.makedirs(path)
    for i, chunk in enumerate(np.array_split(X, 3)):
        pq.write_table(pa.table({f"x{j}": chunk[:, j] for j in range(D)}), f"{path}/p{i}.parquet", row_group_size=64)
    return path


@pytest.mark.parametrize("mechanism,whiten", [("online_power_method", False), ("private_power_method", False),
                                              ("private_power_method", True)])
def test_decomposition_over_parquet_equals_the_dataframe_path(spark, tmp_path, monkeypatch, caplog, mechanism, whiten):
    import spark_dp.aggregates._scan as scan

    caplog.set_level("INFO", logger="spark_dp")

    path = mixture_files(tmp_path)
    cols = [f"x{j}" for j in range(D)]
    out = {}
    detect = scan.choose_source_paths
    for name, sources in (("frame", None), ("parquet", [path]), ("detected", None)):
        # "frame": the cached-frame path (detection off); "detected": found from the plain read (issue 15)
        monkeypatch.setattr(scan, "choose_source_paths", (lambda *a, **k: None) if name == "frame" else detect)
        public = mechanism == "online_power_method"  # not private: no budget, explicit opt-in
        session = spark_dp.DPSession("t.pq", ledger=f"sqlite:///{tmp_path}/{name}.db",
                                     epsilon_limit=None if public else 100.0, delta_limit=None if public else 1e-3,
                                     output=str(tmp_path / name), sampler=SeededSampler(np.random.default_rng(5)))
        rel = tensor_decomposition(
            session, spark.read.parquet(path), k=2, mechanism=mechanism, columns=cols, norm_bound=1.0,
            epsilon=None if public else 50.0, delta=1e-4, mode="reuse",
            restarts=3, iterations=4, whiten=whiten, rng=np.random.default_rng(11), source_paths=sources,
            clear_worker_cache=name != "frame", private=False if public else None)
        out[name] = rel
    assert any("tensor_decomposition: direct Parquet path, detected" in r.getMessage() for r in caplog.records)
    for other in ("parquet", "detected"):
        a, b = out["frame"].arrays, out[other].arrays
        assert a.keys() == b.keys()
        for key in a:
            assert np.allclose(a[key], b[key], rtol=1e-7, atol=1e-9), key
        assert out["frame"].manifest["params"] == out[other].manifest["params"]


def test_bad_cache_options_fail_before_anything(spark, tmp_path):
    session = spark_dp.DPSession("t.pq", ledger=f"sqlite:///{tmp_path}/l.db", output=str(tmp_path / "out"))
    df = spark.createDataFrame([(1.0, 2.0)], ["a", "b"])
    with pytest.raises(ConfigError, match="worker_cache_bytes"):
        tensor_decomposition(session, df, k=1, mechanism="online_power_method", columns=["a", "b"], norm_bound=1.0,
                             mode="reuse", worker_cache_bytes=-5, source_paths=["/x"], private=False)
    with pytest.raises(ConfigError, match="source_paths"):
        tensor_decomposition(session, df, k=1, mechanism="online_power_method", columns=["a", "b"], norm_bound=1.0,
                             mode="reuse", source_paths="/x", private=False)
    assert not os.path.exists(tmp_path / "out") or not os.listdir(tmp_path / "out")


def _job(tmp_path, path, **params):
    import yaml

    cfg = {"release_id": "pq-1", "task": "tensor_decomposition", "mechanism": "private_power_method",
           "dataset": {"id": "t.pq", "path": path, "format": "parquet", "columns": [f"x{j}" for j in range(D)]},
           "privacy": {"epsilon": 50.0, "delta": 1e-4, "norm_bound": 1.0, "sampler": "numpy"},
           "params": {"k": 2, "restarts": 3, "iterations": 3, "mode": "reuse", **params},
           "ledger": {"uri": f"sqlite:///{tmp_path}/ledger.db", "epsilon_limit": 100.0, "delta_limit": 1e-3},
           "output": {"path": str(tmp_path / "releases"), "format": "parquet"}}
    p = tmp_path / "job.yaml"
    p.write_text(yaml.safe_dump(cfg))
    return str(p)


def test_job_reuse_mode_on_parquet_with_the_cache_option(spark, tmp_path, capsys):
    from spark_dp.cli.main import main as cli_main

    path = mixture_files(tmp_path)
    assert cli_main(["release", _job(tmp_path, path, worker_cache_bytes=1 << 20)]) == 0
    manifest = json.load(open(tmp_path / "releases" / "pq-1" / "manifest.json"))
    assert "worker_cache_bytes" not in json.dumps(manifest["params"])  # speed only: not part of the request
    capsys.readouterr()
    (tmp_path / "bad").mkdir()
    rc = cli_main(["release", _job(tmp_path / "bad", path, worker_cache_bytes=-1)])
    err = capsys.readouterr().err
    assert rc == 2 and "'params.worker_cache_bytes'" in err and err.count("\n") == 1
    assert not (tmp_path / "bad" / "releases").exists()


CONNECT_CLIENT = r'''
import json, sys
import numpy as np
from pyspark.sql.connect.session import SparkSession as ConnectSession
from spark_dp.runtime import get_spark
from spark_dp.aggregates.moments import clear_worker_cache, parquet_rows, third_moment_sums

spark = get_spark()
assert isinstance(spark, ConnectSession), type(spark)
path, U = sys.argv[1], np.array(json.loads(sys.argv[2]))
rows = parquet_rows(path, ["x"], dimension=U.shape[0], spark=spark)
out = []
for _ in range(6):
    S, m3, n = third_moment_sums(rows, U, norm_bound=1.2)
    out.append({"S": S.tolist(), "m3": m3.tolist(), "n": n, "read": rows.last_pass.units_read,
                "cached": rows.last_pass.units_cached})
print(json.dumps({"passes": out, "units": sum(len(t) for t in rows.tasks), "cleared": clear_worker_cache(spark)}))
'''


def test_direct_pass_and_worker_cache_over_spark_connect(tmp_path, connect_server):
    from tests._servers import run_client, spark_env

    parts = data(12)
    path = write_list_files(str(tmp_path / "x"), parts)
    U = np.random.default_rng(13).standard_normal((D, L))
    S_np, m3_np, n_np, _ = expected(parts, U, 1.2, "drop")
    script = tmp_path / "client.py"
    script.write_text(CONNECT_CLIENT)
    run = run_client([sys.executable, str(script), path, json.dumps(U.tolist())],
                     env=spark_env(tmp_path / "client-local", SPARK_REMOTE=connect_server.url),
                     cwd=tmp_path / "client", name="tensor-pass")
    assert run.returncode == 0, run.describe(connect_server)
    res = json.loads(run.stdout.strip().splitlines()[-1])
    for p in res["passes"]:
        assert p["n"] == n_np and np.allclose(p["S"], S_np, rtol=1e-12) and np.allclose(p["m3"], m3_np, rtol=1e-12)
        assert p["read"] + p["cached"] == res["units"]
    assert res["passes"][0]["read"] == res["units"] and sum(p["cached"] for p in res["passes"]) > 0
    assert res["cleared"] >= 1
