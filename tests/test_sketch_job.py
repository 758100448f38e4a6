"""count_sketch end to end through the CLI, the API, and its bad-request catalogue."""

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import spark_dp
from benchmarks.sketch_data import make_sketch_data
from spark_dp.cli.main import main as cli_main
from spark_dp.errors import ConfigError, SchemaError
from spark_dp.privacy import SeededSampler
from spark_dp.sketch import estimate, estimate_df, heavy_hitters, merge_sketches, precision_recall
from spark_dp.sketch.api import count_sketch
from tests._jobs import charges, load_conf, localise, override, write_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFS = ["private_count_sketch", "count_min", "count_mean", "histogram"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("sketchdata")
    path, cands = str(d / "q.parquet"), str(d / "cands.txt")
    make_sketch_data(path, cands, n=4000, vocab=400, users=800)
    return path, cands


def _conf(tmp_path, data, name, **over):
    cfg = load_conf(f"count_sketch_{name}.yaml")
    hh = cfg["params"].get("heavy_hitters") or {}
    if hh.get("candidates"):
        hh["candidates"] = data[1]
    # keep the suite fast; the PCS config keeps the secure sampler
    localise(cfg, tmp_path, data=data[0], sampler=None if name == "private_count_sketch" else "numpy")
    override(cfg, over)
    return write_config(tmp_path, cfg, f"{name}.yaml"), cfg


@pytest.mark.parametrize("name", CONFS)
def test_each_config_runs_with_the_job(spark, tmp_path, data, capsys, name):
    path, cfg = _conf(tmp_path, data, name)
    assert cli_main(["release", path]) == 0
    out = json.loads(capsys.readouterr().out)
    rel = spark_dp.load_release(out["path"])
    m = rel.manifest
    assert m["task"] == "count_sketch" and m["mechanism"] == name
    assert m["privacy"]["neighbors"] == "add_remove"
    if name == "histogram":
        assert rel["histogram"].shape == (5000,)
    else:
        k, b = cfg["params"]["repetitions"], cfg["params"]["buckets"]
        assert rel["sketch"].shape == (k, b) and rel["seeds"].shape == (k, 2)
        seeds = spark_dp.sketch.seeds_from_payload(rel["seeds"])
        assert [str(s) for s in seeds] == m["sketch"]["seeds"]  # lossless 64-bit round trip
    m_units = cfg["dataset"].get("max_rows_per_unit", 1)
    k = cfg["params"].get("repetitions", 1) if name != "histogram" else 1
    expected_sens = {"private_count_sketch": np.sqrt(k) * np.sqrt(m_units), "count_min": k * 1.0,
                     "count_mean": np.sqrt(k) * m_units, "histogram": m_units}[name]
    assert m["privacy"]["sensitivity"] == pytest.approx(expected_sens)
    # estimates of the most frequent items are within a few noise scales of the truth
    t = pq.read_table(cfg["dataset"]["path"]).to_pandas()
    col = cfg["dataset"]["columns"][0]
    if cfg["dataset"].get("weight"):
        counts = t.assign(w=t["weight"].clip(-1, 1)).groupby(col)["w"].sum().sort_values(ascending=False)
    else:
        counts = t[col].value_counts()
    top = counts.index[:5].tolist()
    est = estimate(rel, [int(x) for x in top] if col == "query_id" else top)
    scale = m["privacy"].get("noise_sigma") or m["privacy"]["noise_scale"] * 2 * k
    # user-level bounding drops rows of heavy users: the estimate may be below the raw count
    assert np.all(est < counts.values[:5] + 6 * scale)
    assert np.all(est > 0.5 * counts.values[:5] - 6 * scale)
    assert cli_main(["release", path]) == 0  # re-run: the stored release, no new charge
    again = json.loads(capsys.readouterr().out)
    assert again["reused"] is True and again["dataset_epsilon_spent"] == out["dataset_epsilon_spent"]
    if cfg["params"].get("heavy_hitters", {}).get("candidates"):
        items = m["heavy_hitters"]["items"]
        assert 0 < len(items) <= cfg["params"]["heavy_hitters"]["top"]
        assert all(r["estimate"] >= m["heavy_hitters"]["threshold"] for r in items)
        prec, rec = precision_recall([r["item"] for r in items], counts.index[: len(items)].tolist())
        assert prec >= 0.5


def test_estimate_and_heavy_hitters_commands(spark, tmp_path, data, capsys):
    path, cfg = _conf(tmp_path, data, "private_count_sketch")
    assert cli_main(["release", path]) == 0
    rdir = json.loads(capsys.readouterr().out)["path"]
    items = tmp_path / "items.txt"
    items.write_text("q0\nq1\nnever-seen\n")
    assert cli_main(["estimate", rdir, "--items", str(items)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == "item,estimate,low,high" and [ln.split(",")[0] for ln in lines[1:]] == ["q0", "q1", "never-seen"]
    direct = estimate(rdir, ["q0", "q1", "never-seen"])
    assert [float(ln.split(",")[1]) for ln in lines[1:]] == direct.tolist()
    rows = [[float(v) for v in ln.split(",")[1:]] for ln in lines[1:]]  # estimate, low, high (noise interval)
    assert all(low < est < high for est, low, high in rows) and len({round(h - lo, 9) for _, lo, h in rows}) == 1
    assert cli_main(["heavy-hitters", rdir, "--candidates", data[1], "--top", "3", "--threshold", "0"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 4 and lines[1].startswith("q0,")
    assert cli_main(["heavy-hitters", rdir, "--top", "1"]) == 0  # the release's own list (q0: 715 rows, far above)
    assert capsys.readouterr().out.strip().splitlines()[1:] == lines[1:2]
    # a (public) candidate dataset: distributed join, same answer as the driver path
    # (the sketched dataset itself is refused: candidates must be public, tests/test_sketch_public_inputs.py)
    public = str(tmp_path / "public_cands.parquet")
    pq.write_table(pa.table({"query": [f"q{i}" for i in range(200)]}), public)
    assert cli_main(["heavy-hitters", rdir, "--candidates", data[0], "--top", "3", "--threshold", "0"]) == 2
    assert "'--candidates'" in capsys.readouterr().err
    assert cli_main(["heavy-hitters", rdir, "--candidates", public, "--top", "3", "--threshold", "0"]) == 0
    dist = capsys.readouterr().out.strip().splitlines()
    assert [ln.split(",")[0] for ln in dist] == [ln.split(",")[0] for ln in lines]
    assert np.allclose([float(ln.split(",")[1]) for ln in dist[1:]], [float(ln.split(",")[1]) for ln in lines[1:]])
    assert cli_main(["estimate", rdir, "--items", str(tmp_path / "nope.txt")]) == 2


def test_api_estimates_distributed_join_and_merge(spark, tmp_path, data):
    df = spark.read.parquet(data[0])
    sess = spark_dp.DPSession("t.q", ledger=f"sqlite:///{tmp_path}/l.db", epsilon_limit=10.0, delta_limit=1e-5,
                              output=str(tmp_path / "out"), sampler=SeededSampler(np.random.default_rng(3)))
    r1 = count_sketch(sess, df, "query", epsilon=1.0, delta=1e-6, repetitions=5, buckets=256)
    cands = spark.createDataFrame([(f"q{i}",) for i in range(50)] + [(None,)], "c string")
    got = {r["item"]: r["estimate"] for r in estimate_df(r1, cands, "c").collect()}
    items = [f"q{i}" for i in range(50)] + [None]
    ref = estimate(r1, items)
    assert np.allclose([got[x] for x in items], ref, rtol=0, atol=1e-9)
    hh = heavy_hitters(r1, cands, "c", top=5)
    assert hh == heavy_hitters(r1, items, top=5)
    # the same seeds (from r1), a second day: the sketches add up
    r2 = count_sketch(sess, df, "query", epsilon=1.0, delta=1e-6, repetitions=5, buckets=256, seeds=r1)
    merged = merge_sketches([r1, r2], output=str(tmp_path / "out"))
    assert np.array_equal(merged["sketch"], r1["sketch"] + r2["sketch"])
    assert merged.privacy["epsilon"] > 1.0 and len(merged.privacy["events"]) == 2
    assert merged.privacy["noise_sigma"] == pytest.approx(np.sqrt(2) * r1.privacy["noise_sigma"])
    assert np.allclose(estimate(merged, ["q0"]), 2 * estimate(r1, ["q0"]), atol=8 * merged.privacy["noise_sigma"])
    # a new release on purpose (an explicit id: the same call without one returns r1), with fresh seeds
    r3 = count_sketch(sess, df, "query", epsilon=1.0, delta=1e-6, repetitions=5, buckets=256, release_id="r3")
    with pytest.raises(ConfigError, match="other hash seeds"):
        merge_sketches([r1, r3])
    with pytest.raises(SchemaError, match="holds long items"):
        estimate_df(r1, spark.createDataFrame([(1,)], "c long"), "c")
    with pytest.raises(SchemaError, match="not a string"):
        estimate(r1, [1])
    with pytest.raises(SchemaError, match="DataFrame"):
        estimate_df(r1, ["q1"], "c")


@pytest.mark.parametrize("name, over, match", [
    ("private_count_sketch", {"params": {"repetitions": 0, "buckets": 8}}, "params.repetitions"),
    ("private_count_sketch", {"params": {"repetitions": 3, "buckets": 0}}, "params.buckets"),
    ("count_mean", {"params": {"repetitions": 3, "buckets": 1}}, "'buckets'"),
    ("private_count_sketch", {"params": {"heavy_hitters": {"levels": 20, "candidates": "x.txt"}}}, "not both"),
    ("private_count_sketch", {"dataset.unit_clipping": "l1",
                              "params": {"heavy_hitters": {"levels": 8, "hash_items": False}}}, "'hash_items' false"),
    ("private_count_sketch", {"params": {"heavy_hitters": {"levels": 8}}}, "unit_clipping 'l1'"),
    ("count_min", {"dataset.columns": ["query_id"], "params": {"heavy_hitters": {"levels": 8}}}, "levels"),
    ("private_count_sketch", {"params": {"heavy_hitters": {"levels": 63}}}, "levels"),
    ("private_count_sketch", {"params": {"heavy_hitters": {"topp": 2}}}, "heavy_hitters.topp"),
    ("private_count_sketch", {"params": {"domain": 10}}, "'domain'"),
    ("histogram", {"params": {}}, "'domain'"),
    ("private_count_sketch", {"mechanism": "count_sketchy"}, "mechanism"),
    ("count_min", {"dataset.unit_clipping": "sketch_l2"}, "unit_clipping"),
    ("count_mean", {"dataset.unit_clipping": "sketch_l2", "dataset.privacy_unit": None}, "privacy_unit"),
    ("count_min", {"dataset.columns": ["query", "user_id"]}, "one item column"),
    ("count_min", {"dataset.max_rows_per_unit": 0}, "max_rows_per_unit"),
    ("count_min", {"dataset.nulls": "reject"}, "dataset.nulls"),
    ("count_min", {"dataset.weight": "nope"}, "'nope' not found"),
    ("count_min", {"dataset.weight": "query"}, "weight must be numeric"),
    ("count_min", {"dataset.columns": ["weight"]}, "strings or integers"),
    ("histogram", {"params": {"domain": ["a", "b"]}}, "domain"),
    ("count_min", {"privacy.neighbors": "tensor_entry"}, "neighbors"),
    # bounds apply to the weight column only (the item column is hashed, never summed)
    ("count_min", {"dataset.weight": "weight", "dataset.bounds": {"query": [0, 500]}}, "'dataset.bounds'"),
])
def test_bad_requests_charge_nothing(spark, tmp_path, data, capsys, name, over, match):
    path, _ = _conf(tmp_path, data, name, **over)
    assert cli_main(["release", path]) == 2
    err = capsys.readouterr().err
    assert "spark-dp: error:" in err and match in err, err
    assert charges(tmp_path) == 0 and not os.path.exists(tmp_path / "releases")


def test_api_bad_requests(spark, tmp_path, data):
    df = spark.read.parquet(data[0])
    sess = spark_dp.DPSession("t.q", ledger=f"sqlite:///{tmp_path}/l.db", epsilon_limit=10.0, delta_limit=1e-5,
                              output=str(tmp_path / "out"), sampler="numpy")
    kw = dict(epsilon=1.0, delta=1e-6, repetitions=3, buckets=16)
    with pytest.raises(ConfigError, match="'repetitions'"):
        count_sketch(sess, df, "query", **{**kw, "repetitions": 0})
    with pytest.raises(ConfigError, match="'buckets'"):
        count_sketch(sess, df, "query", **{**kw, "buckets": 0})
    with pytest.raises(SchemaError, match="DataFrame"):
        count_sketch(sess, [("a",)], "query", **kw)
    with pytest.raises(SchemaError, match="holds long items"):
        count_sketch(sess, df, "query", candidates=df, candidate_column="query_id", **kw)
    with pytest.raises(SchemaError, match="not a string"):
        count_sketch(sess, df, "query", candidates=[1, 2], **kw)
    with pytest.raises(SchemaError, match="DataFrame or a list"):
        count_sketch(sess, df, "query", candidates="q1", **kw)
    with pytest.raises(ConfigError, match="'seeds'"):
        count_sketch(sess, df, "query", seeds=[1, 2], **kw)
    with pytest.raises(SchemaError, match="domain"):
        count_sketch(sess, df, "query", mechanism="histogram", domain=10, epsilon=1.0, delta=1e-6)
    with pytest.raises(ConfigError, match=r"'bounds'.*column 'query', the item column"):
        count_sketch(sess, df, "query", weight="weight", bounds={"query": [0, 500]}, **kw)
    assert sess.budget() is None and not os.path.exists(tmp_path / "out")


def test_dyadic_heavy_hitters_without_candidates(spark, tmp_path, data, capsys):
    path, cfg = _conf(tmp_path, data, "dyadic")
    assert cli_main(["release", path]) == 0
    rel = spark_dp.load_release(json.loads(capsys.readouterr().out)["path"])
    m = rel.manifest
    assert rel["dyadic_sketch"].shape == (8, 5, 512) and rel["dyadic_seeds"].shape == (8, 5, 2)
    assert m["privacy"]["sensitivity"] == pytest.approx(np.sqrt(9 * 5))
    t = pq.read_table(data[0]).to_pandas()
    counts = np.bincount(t["query_id"].to_numpy()[t["query_id"].to_numpy() < 512], minlength=512)
    found = [r["item"] for r in m["heavy_hitters"]["items"]]
    thr = m["heavy_hitters"]["threshold"]
    clear = [i for i in np.argsort(-counts)[:10] if counts[i] >= 2 * thr]  # well above the threshold
    assert clear and set(clear) <= set(found)  # recall 1 on the clear heavy hitters
    assert all(counts[i] >= thr / 2 for i in found)  # no item far below the threshold
    assert cli_main(["heavy-hitters", rel.path, "--top", "3"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[1].split(",")[0] == str(int(np.argmax(counts)))
