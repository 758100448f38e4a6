"""The direct-Parquet CountSketch build (tasks read the files with pyarrow) equals the Spark builds.

``sketch_table_parquet`` must give exactly the table of
``sketch_table(spark.read.parquet(...), method="sql")`` (counts and dyadic
weights, so float sums are exact in any order): strings with empty, unicode
and null items under both null policies, several files and row groups with
different dictionaries, dictionary pages that fall back to plain encoding
(the batches of one row group then carry growing dictionaries), a file
written without dictionary encoding, an Arrow-dictionary (categorical)
column, integers, weights with NaN/±inf/null and out-of-range values, a
column missing from one file, large k·b (sparse partials). It must take the
Spark path where it cannot read the files itself, and the release path
(API and job) must route Parquet sources to it.
"""

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

import spark_dp
import spark_dp.aggregates._parquet_tasks as pt
import spark_dp.aggregates.sketch as sk
import spark_dp.aggregates.sketch._kernels as sk_kernels
import spark_dp.aggregates.sketch._parquet as sk_parquet
import spark_dp.aggregates.sketch._sql as sk_sql
from spark_dp.aggregates.sketch import sketch_table, sketch_table_parquet
from spark_dp.errors import ConfigError, SchemaError
from spark_dp.privacy import SeededSampler

SEEDS = [3, -11, 2**62 + 5, 0x123456789ABCDEF0, -(2**63), 77, 1]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORDS = ["", "a", "ab", "abc", "abcd", "hello w", "x" * 31, "y" * 32, "z" * 45, "ünïcødé ☃", "日本語", "🙂" * 9]


def _strings(gen, n, vocab):
    idx = np.minimum(gen.zipf(1.3, size=n) - 1, vocab - 1)
    items = [WORDS[i] if i < len(WORDS) else f"w{i}" for i in idx]
    return [None if gen.random() < 0.05 else s for s in items]


def _weights(gen, n):
    w = gen.choice([0.5, -0.25, 1.0, -1.0, 0.125, 3.0, -2.5, np.nan, np.inf, -np.inf, 0.0], size=n)
    return pa.array(w, pa.float64(), mask=gen.random(n) < 0.05)


@pytest.fixture(scope="module")
def strings_dir(tmp_path_factory):
    """Four files: small row groups, a dictionary page that falls back to plain, no dictionary, a categorical."""
    d = tmp_path_factory.mktemp("skpq")
    gen = np.random.default_rng(5)
    for i, kw in enumerate([
        dict(row_group_size=300),
        dict(row_group_size=2000, dictionary_pagesize_limit=64),  # dictionary → plain fallback within a chunk
        dict(use_dictionary=False),
        dict(row_group_size=700),
    ]):
        n = 1500 + 500 * i
        items = pa.array(_strings(gen, n, 300 + 100 * i), pa.string())
        if i == 3:
            items = items.dictionary_encode()  # an Arrow dictionary column (pandas categorical)
        t = pa.table({"item": items, "w": _weights(gen, n), "wi": pa.array(gen.integers(-3, 4, n), pa.int32()),
                      "unit": pa.array(gen.integers(0, 50, n))})
        pq.write_table(t, str(d / f"part-{i}.parquet"), **kw)
    return str(d)


@pytest.fixture(scope="module")
def ints_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("skpq_int")
    gen = np.random.default_rng(6)
    vals = [0, 1, -1, 2**63 - 1, -(2**63), 123456789012, 7, None]
    for i, typ in enumerate([pa.int64(), pa.int64()]):
        n = 1200
        v = [vals[j] if j < len(vals) else int(j) for j in gen.integers(0, 40, n)]
        pq.write_table(pa.table({"item": pa.array(v, typ), "w": _weights(gen, n)}), str(d / f"p{i}.parquet"),
                       row_group_size=500)
    small = pa.table({"item": pa.array([5, None, 5, -7, 2**31 - 1], pa.int32()), "w": pa.array([0.5] * 5)})
    pq.write_table(small, str(d / "p9.parquet"))
    return str(d)


@pytest.fixture()
def spy(monkeypatch):
    """Records calls of the Spark path (``sketch_table``): the API's (the package's name) and
    ``sketch_table_parquet``'s fallback (the name in the SQL-build module)."""
    calls = []
    original = sk.sketch_table

    def spying(*a, **kw):
        calls.append(kw)
        return original(*a, **kw)

    monkeypatch.setattr(sk, "sketch_table", spying)
    monkeypatch.setattr(sk_sql, "sketch_table", spying)
    return calls


def _sql(spark, path, column, **kw):
    return sketch_table(spark.read.parquet(path), column, seeds=kw.pop("seeds", SEEDS), method="sql", **kw)


@pytest.mark.parametrize("nulls", ["item", "drop"])
@pytest.mark.parametrize("signed", [True, False])
def test_strings_equal_the_sql_build(spark, strings_dir, spy, nulls, signed):
    for b in (64, 1000):
        ref = _sql(spark, strings_dir, "item", buckets=b, nulls=nulls, signed=signed)
        got = sketch_table_parquet(strings_dir, "item", seeds=SEEDS, buckets=b, nulls=nulls, signed=signed)
        assert np.array_equal(got, ref)
    assert spy == []  # the direct path, not the Spark reader
    assert ref.any()


def test_growing_dictionaries_carry_over_and_small_batches_agree(spark, strings_dir, monkeypatch, spy):
    """Batches far smaller than a row group: same table, and fewer dictionaries hashed than batches read."""
    ref = _sql(spark, strings_dir, "item", buckets=256)
    monkeypatch.setattr(sk_parquet, "PARQUET_BATCH_ROWS", 97)
    assert np.array_equal(sketch_table_parquet(strings_dir, "item", seeds=SEEDS, buckets=256), ref)
    # In-process: count the dictionaries hashed (flushes) against the batches read.
    files = sorted(spark.read.parquet(strings_dir).inputFiles())
    tasks = [[(f, 0, 1)] for f in files]
    kern = sk_kernels._SketchKernel("string", SEEDS, 256, signed=True, weighted=False, preaggregate=True, dense=True)
    flushes = []
    original = kern.distinct
    kern.distinct = lambda items, w: flushes.append(len(items)) or original(items, w)
    fn = sk_parquet._ParquetSketchTask(tasks, "item", None, kern, nulls="item", nonfinite="drop", batch_rows=97)
    ids = pa.RecordBatch.from_arrays([pa.array(range(len(tasks)), pa.int64())], names=["id"])
    out = list(fn(iter([ids])))
    assert len(out) == 1 and out[0].column(0)[0].as_py()  # one dense partial
    assert np.array_equal(np.frombuffer(out[0].column(2)[0].as_py(), np.float64).reshape(7, 256), ref)
    batches = sum(-(-pq.ParquetFile(f).metadata.row_group(g).num_rows // 97)
                  for f in files for g in range(pq.ParquetFile(f).num_row_groups))
    groups = sum(pq.ParquetFile(f).num_row_groups for f in files)
    assert len(flushes) <= groups + 1 < batches  # one hash pass per dictionary (+ the null item)


def test_integers_equal_the_sql_build(spark, ints_dir, spy):
    for nulls in ("item", "drop"):
        ref = _sql(spark, ints_dir, "item", buckets=128, nulls=nulls)
        assert np.array_equal(sketch_table_parquet([ints_dir], "item", seeds=SEEDS, buckets=128, nulls=nulls), ref)
    assert spy == []


@pytest.mark.parametrize("nonfinite", ["drop", "zero"])
def test_weights_equal_the_sql_build(spark, strings_dir, ints_dir, spy, nonfinite):
    for path, col, w in ((strings_dir, "item", "w"), (strings_dir, "item", "wi"), (ints_dir, "item", "w")):
        for nulls in ("item", "drop"):
            ref = _sql(spark, path, col, buckets=200, weight=w, nulls=nulls, nonfinite=nonfinite)
            got = sketch_table_parquet(path, col, seeds=SEEDS, buckets=200, weight=w, nulls=nulls,
                                       nonfinite=nonfinite)
            assert np.array_equal(got, ref), (path, w, nulls)
    assert spy == []


def test_non_dyadic_weights_and_sparse_partials(spark, tmp_path, monkeypatch):
    gen = np.random.default_rng(8)
    n = 3000
    t = pa.table({"item": pa.array(_strings(gen, n, 500)), "w": pa.array(gen.normal(size=n))})
    pq.write_table(t, str(tmp_path / "a.parquet"), row_group_size=600)
    ref = _sql(spark, str(tmp_path), "item", buckets=300, weight="w")
    got = sketch_table_parquet(str(tmp_path), "item", seeds=SEEDS, buckets=300, weight="w")
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-9)  # float sums: summation order only
    monkeypatch.setattr(sk_kernels, "DENSE_MAX_COUNTERS", 100)  # k·b > this: sparse rows merged by a groupBy
    ref = _sql(spark, str(tmp_path), "item", buckets=300)
    assert np.array_equal(sketch_table_parquet(str(tmp_path), "item", seeds=SEEDS, buckets=300), ref)


def test_column_missing_from_a_file_reads_as_nulls(spark, tmp_path, spy):
    pq.write_table(pa.table({"item": ["a", "b", None, "a"], "w": [0.5, 1.0, 0.25, 2.0]}), str(tmp_path / "a.parquet"))
    pq.write_table(pa.table({"w": [0.5, 1.0, -1.0]}), str(tmp_path / "b.parquet"))  # no item column
    pq.write_table(pa.table({"item": ["c", "a"]}), str(tmp_path / "c.parquet"))  # no weight column
    for kw in (dict(), dict(weight="w"), dict(weight="w", nonfinite="zero"), dict(nulls="drop")):
        files = [str(tmp_path / f) for f in ("a.parquet", "b.parquet", "c.parquet")]
        ref = sketch_table(spark.read.parquet(*files), "item", seeds=SEEDS, buckets=16, method="sql", **kw)
        assert np.array_equal(sketch_table_parquet(files, "item", seeds=SEEDS, buckets=16, **kw), ref), kw
    assert spy == []


def test_empty_input(spark, tmp_path):
    pq.write_table(pa.table({"item": pa.array([], pa.string())}), str(tmp_path / "e.parquet"))
    got = sketch_table_parquet(str(tmp_path), "item", seeds=SEEDS, buckets=8)
    assert got.shape == (7, 8) and not got.any()


def test_fallbacks_take_the_spark_path(spark, strings_dir, tmp_path, monkeypatch, spy):
    # privacy units: contribution bounding needs a shuffle (random rows kept: compare the total mass only)
    got = sketch_table_parquet(strings_dir, "item", seeds=SEEDS, buckets=32, signed=False, privacy_unit="unit",
                               max_items_per_unit=3)
    assert len(spy) == 1 and spy[0]["privacy_unit"] == "unit"
    assert got.sum() == 7 * 3 * 50  # every unit keeps 3 rows, k = 7 counters each
    sketch_table_parquet(strings_dir, "item", seeds=SEEDS, buckets=32, privacy_unit="unit", unit_l2_bound=1.0)
    assert len(spy) == 2 and spy[1]["unit_l2_bound"] == 1.0
    # a partition column lives in directory names, not in the files
    part = tmp_path / "parted"
    for day in ("x", "y"):
        (part / f"day={day}").mkdir(parents=True)
        pq.write_table(pa.table({"item": ["a", "b", day]}), str(part / f"day={day}" / "f.parquet"))
    ref = sketch_table(spark.read.parquet(str(part)), "day", seeds=SEEDS, buckets=16, method="sql")
    assert np.array_equal(sketch_table_parquet(str(part), "day", seeds=SEEDS, buckets=16), ref)
    assert len(spy) == 3
    # URIs pyarrow cannot open (e.g. s3a://): the planner gives up
    monkeypatch.setattr(pt, "_plan_units", lambda *a: None)
    ref = _sql(spark, strings_dir, "item", buckets=16)
    assert np.array_equal(sketch_table_parquet(strings_dir, "item", seeds=SEEDS, buckets=16), ref)
    assert len(spy) == 4


def test_bad_requests(spark, strings_dir, tmp_path):
    with pytest.raises(SchemaError, match="'nope'"):
        sketch_table_parquet(strings_dir, "nope", seeds=SEEDS, buckets=8)
    with pytest.raises(SchemaError, match="'w' has type double; sketch items"):
        sketch_table_parquet(strings_dir, "w", seeds=SEEDS, buckets=8)
    with pytest.raises(SchemaError, match="'item' has type string; a weight must be numeric"):
        sketch_table_parquet(strings_dir, "unit", seeds=SEEDS, buckets=8, weight="item")
    with pytest.raises(SchemaError, match="does not exist"):
        sketch_table_parquet(str(tmp_path / "missing"), "item", seeds=SEEDS, buckets=8)
    with pytest.raises(ConfigError, match="'buckets'"):
        sketch_table_parquet(strings_dir, "item", seeds=SEEDS, buckets=0)
    with pytest.raises(ConfigError, match="'nulls'"):
        sketch_table_parquet(strings_dir, "item", seeds=SEEDS, buckets=8, nulls="keep")
    with pytest.raises(ConfigError, match="'paths'"):
        sketch_table_parquet([], "item", seeds=SEEDS, buckets=8)


def _session(tmp_path, seed):
    return spark_dp.DPSession("t.q", ledger=f"sqlite:///{tmp_path}/l{seed}.db", epsilon_limit=10.0, delta_limit=1e-5,
                              output=str(tmp_path / f"out{seed}"), sampler=SeededSampler(np.random.default_rng(seed)))


def test_api_source_paths_give_the_same_release(spark, tmp_path, strings_dir, monkeypatch, spy):
    calls = []
    original = sk.sketch_table_parquet
    monkeypatch.setattr(sk, "sketch_table_parquet", lambda *a, **kw: calls.append(a) or original(*a, **kw))
    df = spark.read.parquet(strings_dir)
    kw = dict(epsilon=1.0, delta=1e-6, repetitions=5, buckets=64, weight="w", seeds=SEEDS[:5])
    direct = _session(tmp_path, 1).count_sketch(df, "item", source_paths=[strings_dir], release_id="direct", **kw)
    assert calls == [([strings_dir], "item")] and spy == []
    auto = _session(tmp_path, 1).count_sketch(df, "item", release_id="auto", **kw)  # detected: a plain Parquet scan (issue 15)
    assert len(calls) == 2 and calls[1][0] == sorted(df.inputFiles()) and spy == []
    import spark_dp.sketch.api as sketch_api

    monkeypatch.setattr(sketch_api, "choose_source_paths", lambda *a, **k: None)  # the Spark reader
    via_spark = _session(tmp_path, 1).count_sketch(df, "item", release_id="via-spark", **kw)  # ids: three releases
    assert len(spy) == 1
    assert np.array_equal(direct["sketch"], via_spark["sketch"])  # same exact table + same noise draws
    assert np.array_equal(auto["sketch"], via_spark["sketch"])
    with pytest.raises(ConfigError, match="'source_paths'"):
        _session(tmp_path, 2).count_sketch(df, "item", source_paths=[3], **kw)


def test_job_on_parquet_uses_the_direct_path(spark, tmp_path, monkeypatch, capsys, spy):
    from benchmarks.sketch_data import make_sketch_data
    from spark_dp.cli.main import main as cli_main

    data = str(tmp_path / "q.parquet")
    make_sketch_data(data, str(tmp_path / "c.txt"), n=2000, vocab=200, users=300)
    with open(os.path.join(ROOT, "conf", "count_sketch_count_min.yaml")) as fh:  # no privacy unit
        cfg = yaml.safe_load(fh)
    cfg["dataset"]["path"] = data
    cfg["params"]["heavy_hitters"]["candidates"] = None
    cfg["ledger"]["uri"] = f"sqlite:///{tmp_path}/ledger.db"
    cfg["output"]["path"] = str(tmp_path / "releases")
    cfg["privacy"]["sampler"] = "numpy"
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    calls = []
    original = sk.sketch_table_parquet
    monkeypatch.setattr(sk, "sketch_table_parquet", lambda *a, **kw: calls.append((a, kw)) or original(*a, **kw))
    assert cli_main(["release", str(tmp_path / "c.yaml")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert calls and calls[0][0] == ([data], cfg["dataset"]["columns"][0]) and spy == []
    assert spark_dp.load_release(out["path"])["sketch"].shape == (cfg["params"]["repetitions"],
                                                                   cfg["params"]["buckets"])
