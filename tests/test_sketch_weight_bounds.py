"""count_sketch with public bounds of the weight column (issue #14, item 1).

``bounds={w: [lo, hi]}``: each weight is clamped to [lo, hi] and divided by
M = max(|lo|, |hi|) before the unchanged mechanism; the release reports
everything in the weight's units (M × the mechanism's output, exact
post-processing). These tests check that exactness against a release on a
pre-scaled column, the clamping, both input paths, the refusals (nothing
charged), merges, the dry run, the digest of requests without bounds, and a
black-box audit under replace neighbours at m = 2.
"""

from __future__ import annotations

import hashlib
import json
import math
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import spark_dp
from spark_dp.aggregates.sketch import sketch_table, sketch_table_parquet
from spark_dp.cli.main import main as cli_main
from spark_dp.errors import ConfigError
from spark_dp.privacy import NumpySampler, SeededSampler
from spark_dp.sketch import estimate, estimate_df, heavy_hitters, merge_sketches, plan_sketch, release_table
from spark_dp.sketch.api import count_sketch
from spark_dp.sketch.uncertainty import estimate_intervals
from tests._audit import empirical_epsilon
from tests._jobs import charges, load_conf, localise, write_config
from tests._samplers import Recorder, UnderNoised

SEEDS = [11, 22, 33]
KW = dict(epsilon=1.0, delta=1e-6, repetitions=3, buckets=16, seeds=SEEDS)
LO, HI = -20.0, 50.0
M = 50.0
# weights in the data's units: inside, above hi (clamped to 50), below lo (clamped to -20), non-finite (dropped)
ROWS = [("a", 12.5), ("a", 400.0), ("b", -3.0), ("b", -75.0), ("c", 50.0), ("c", 7.25), ("d", float("nan")),
        ("d", 1.5), ("e", None), ("a", 30.0), ("f", float("inf")), ("e", -20.0)]
ITEMS = ["a", "b", "c", "d", "e", "f", "zz"]


def _scaled(w):
    """The weight as the library feeds the mechanism: clamped to [LO, HI], divided by M (None if non-finite)."""
    return None if w is None or not math.isfinite(w) else min(max(w, LO), HI) / M


def _session(tmp_path, name="s", seed=7, **kw):
    return spark_dp.DPSession("t.wb", ledger=f"sqlite:///{tmp_path}/{name}.db", epsilon_limit=20.0, delta_limit=1e-4,
                              output=str(tmp_path / f"out-{name}"),
                              sampler=SeededSampler(np.random.default_rng(seed)), **kw)


@pytest.fixture(scope="module")
def frames(spark):
    df = spark.createDataFrame([(i, w, _scaled(w)) for i, w in ROWS], "item string, w double, w_scaled double")
    return df


def test_weights_are_clamped_to_the_bounds(spark):
    df = spark.createDataFrame([("a", 1000.0), ("b", -5.0), ("c", 4.0)], "item string, w double")
    ref = spark.createDataFrame([("a", 1.0), ("b", 0.0), ("c", 0.4)], "item string, w double")
    got = sketch_table(df, "item", seeds=SEEDS, buckets=16, weight="w", weight_bounds=(0.0, 10.0))
    assert np.array_equal(got, sketch_table(ref, "item", seeds=SEEDS, buckets=16, weight="w"))


def test_estimates_are_m_times_those_of_the_prescaled_column(spark, tmp_path, frames):
    bounded = count_sketch(_session(tmp_path, "b"), frames, "item", weight="w", bounds={"w": [LO, HI]},
                           candidates=ITEMS, **KW)
    plain = count_sketch(_session(tmp_path, "p"), frames, "item", weight="w_scaled", candidates=ITEMS, **KW)
    # same exact table, same noise draws: the stored counters are M × the pre-scaled release's, bit for bit
    assert np.array_equal(bounded["sketch"], M * plain["sketch"])
    np.testing.assert_allclose(estimate(bounded, ITEMS), M * estimate(plain, ITEMS), rtol=1e-12)
    cands = spark.createDataFrame([(x,) for x in ITEMS], "item string")
    got = {r["item"]: r["estimate"] for r in estimate_df(bounded, cands, "item").collect()}
    ref = {r["item"]: r["estimate"] for r in estimate_df(plain, cands, "item").collect()}
    assert got.keys() == ref.keys() and all(got[x] == pytest.approx(M * ref[x], rel=1e-12) for x in ref)
    for a, b in zip(estimate_intervals(bounded, ITEMS, collisions=False), estimate_intervals(plain, ITEMS, collisions=False),
                    strict=True):
        np.testing.assert_allclose(a, M * b, rtol=1e-12)
    # the payload's error bars (uncertainty columns) are in the weight's units too
    for a, b in zip(bounded.interval("sketch"), plain.interval("sketch"), strict=True):
        np.testing.assert_allclose(a, M * b, rtol=1e-12)
    # heavy hitters: default threshold 3·M·σ (same false-positive rate), same items, estimates × M
    hb, hp = bounded.manifest["heavy_hitters"], plain.manifest["heavy_hitters"]
    assert hb["threshold"] == pytest.approx(M * hp["threshold"], rel=1e-12)
    assert hb["false_positive_rate"] == pytest.approx(hp["false_positive_rate"], rel=1e-9)
    assert [x["item"] for x in hb["items"]] == [x["item"] for x in hp["items"]]
    np.testing.assert_allclose([x["estimate"] for x in hb["items"]], [M * x["estimate"] for x in hp["items"]],
                               rtol=1e-12)
    # a user-given threshold is in the weight's units
    assert heavy_hitters(bounded, ITEMS, threshold=M * 1.0) == [
        (x, M * v) for x, v in heavy_hitters(plain, ITEMS, threshold=1.0)]
    # the mechanism, its sensitivity and calibration are the unbounded ones; the manifest records the scaling
    pb, pp = bounded.privacy, plain.privacy
    for key in ("sensitivity", "noise_scale", "epsilon", "delta", "events"):
        assert pb[key] == pp[key], key
    ws = bounded.manifest["sketch"]["weight_scaling"]
    assert ws["column"] == "w" and ws["bounds"] == [LO, HI] and ws["scale"] == M
    assert "weight_scaling" not in plain.manifest["sketch"]


def test_dyadic_heavy_hitters_in_the_weights_units(spark, tmp_path):
    rows = [(i % 5, w) for i, w in enumerate([30.0, 45.0, 400.0, -8.0, 12.0] * 4)]
    df = spark.createDataFrame([(i, w, _scaled(w)) for i, w in rows], "iid long, w double, w_scaled double")
    kw = dict(epsilon=1.0, delta=1e-6, repetitions=3, buckets=16, levels=3, top=5)
    base = count_sketch(_session(tmp_path, "0"), df, "iid", weight="w_scaled", **kw)  # the levels' seeds, reused
    # a low threshold (given: in the weight's units, resp. the scaled ones) so the descent reports items
    bounded = count_sketch(_session(tmp_path, "b"), df, "iid", weight="w", bounds={"w": [LO, HI]}, seeds=base,
                           threshold=-100.0 * M, **kw)
    plain = count_sketch(_session(tmp_path, "p"), df, "iid", weight="w_scaled", seeds=base, threshold=-100.0, **kw)
    assert np.array_equal(bounded["dyadic_sketch"], M * plain["dyadic_sketch"])
    assert np.array_equal(bounded["sketch"], M * plain["sketch"])
    hb, hp = bounded.manifest["heavy_hitters"], plain.manifest["heavy_hitters"]
    assert hb["false_positive_rate"] == pytest.approx(hp["false_positive_rate"], rel=1e-9)
    assert len(hb["items"]) == 5 and [x["item"] for x in hb["items"]] == [x["item"] for x in hp["items"]]
    np.testing.assert_allclose([x["estimate"] for x in hb["items"]], [M * x["estimate"] for x in hp["items"]],
                               rtol=1e-12)


@pytest.mark.parametrize("nonfinite", ["drop", "zero"])
def test_both_input_paths_give_the_same_table(spark, tmp_path, nonfinite):
    path = str(tmp_path / "w.parquet")
    items, ws = zip(*ROWS, strict=True)
    pq.write_table(pa.table({"item": pa.array(items), "w": pa.array(ws, pa.float64())}), path)
    kw = dict(seeds=SEEDS, buckets=16, weight="w", nonfinite=nonfinite, weight_bounds=(LO, HI))
    direct = sketch_table_parquet([path], "item", spark=spark, **kw)
    via_spark = sketch_table(spark.read.parquet(path), "item", **kw)
    np.testing.assert_allclose(direct, via_spark, rtol=0, atol=1e-12)
    # and through the API: detected source paths vs an explicit non-Parquet frame, same seeds → same release
    a = count_sketch(_session(tmp_path, "d"), spark.read.parquet(path), "item", weight="w", bounds={"w": [LO, HI]},
                     nonfinite=nonfinite, **KW)
    b = count_sketch(_session(tmp_path, "f"), spark.createDataFrame(list(ROWS), "item string, w double"), "item",
                     weight="w", bounds={"w": [LO, HI]}, nonfinite=nonfinite, **KW)
    np.testing.assert_allclose(a["sketch"], b["sketch"], rtol=0, atol=1e-9)


@pytest.mark.parametrize("bounds, match", [
    ({"item": [0, 5]}, r"'bounds' parameter of count_sketch gives bounds for column 'item', the item column"),
    ({"w": [0, 5], "other": [0, 1]}, r"column 'other', not the weight column"),
    ({"w": [5, 5]}, r"'bounds'.*lo < hi"),
    ({"w": [0, float("inf")]}, r"'bounds'.*finite"),
    ("auto", r"'bounds'.*mapping"),
])
def test_bad_bounds_charge_nothing(spark, tmp_path, frames, bounds, match):
    sess = _session(tmp_path)
    with pytest.raises(ConfigError, match=match):
        count_sketch(sess, frames, "item", weight="w", bounds=bounds, **KW)
    with pytest.raises(ConfigError, match=r"'bounds'.*no 'weight' is given"):
        count_sketch(sess, frames, "item", bounds={"w": [0, 5]}, **KW)
    assert sess.budget() is None and not os.path.exists(tmp_path / "out-s")


def test_merge_needs_equal_weight_bounds(spark, tmp_path, frames):
    sess = _session(tmp_path)
    a = count_sketch(sess, frames, "item", weight="w", bounds={"w": [LO, HI]}, release_id="m1", **KW)
    b = count_sketch(sess, frames, "item", weight="w", bounds={"w": [LO, HI]}, release_id="m2", **KW)
    merged = merge_sketches([a, b])
    assert np.array_equal(merged["sketch"], a["sketch"] + b["sketch"])
    assert merged.manifest["sketch"]["weight_scaling"]["scale"] == M
    # the merged noise: σ√2 in the mechanism's units, M·σ√2 in the stored counters' (the intervals' scale)
    sigma = a.privacy["noise_scale"]
    _, lo, hi = estimate_intervals(merged, ["a"], collisions=False)  # the noise part (3 x 16 counters: too few to
    _, lo1, hi1 = estimate_intervals(a, ["a"], collisions=False)  # bound the collisions, NaN with them)
    assert np.isnan(estimate_intervals(merged, ["a"])[1]).all()
    assert (hi - lo)[0] == pytest.approx(math.sqrt(2) * (hi1 - lo1)[0], rel=1e-9)
    assert merged.privacy["noise_scale"] == pytest.approx(math.sqrt(2) * sigma)
    other = count_sketch(sess, frames, "item", weight="w", bounds={"w": [0.0, 10.0]}, release_id="m3", **KW)
    with pytest.raises(ConfigError, match="differ in weight bounds"):
        merge_sketches([a, other])
    unbounded = count_sketch(sess, frames, "item", weight="w_scaled", release_id="m4", **KW)
    with pytest.raises(ConfigError, match="differ in weight bounds"):
        merge_sketches([unbounded, a])


def test_request_digest_without_bounds_is_unchanged(spark, tmp_path):
    """Same request, seeds and sampler → the digest and arrays of the code before bounds existed (2d72ed8^)."""
    df = spark.createDataFrame([("a", 1.0), ("b", 0.5), ("a", -0.25), ("c", 2.0), ("b", None)], "item string, w double")
    sess = spark_dp.DPSession("t.digest", ledger=f"sqlite:///{tmp_path}/l.db", epsilon_limit=10.0, delta_limit=1e-5,
                              output=str(tmp_path / "out"), sampler=SeededSampler(np.random.default_rng(7)))
    r = count_sketch(sess, df, "item", weight="w", epsilon=1.0, delta=1e-6, repetitions=3, buckets=8,
                     seeds=[11, 22, 33], release_id="digest-1")
    assert r.manifest["request_sha256"] == "44d2f2f3fbc69046d4a9ad0cb5e4fa07bed8eecd1fab34c1aa772ac69d3eb7d5"
    assert hashlib.sha256(np.ascontiguousarray(r["sketch"], dtype=np.float64).tobytes()).hexdigest() == (
        "0fda88d87b8b169c37754f3350acc285861a30d29134f0b268cd97db4d15b49b")
    assert "weight_scaling" not in r.manifest["sketch"]


def test_dry_run_predicts_in_the_weights_units(spark, tmp_path, frames):
    sess = _session(tmp_path)
    pb = sess.preview.count_sketch(frames, "item", weight="w", bounds={"w": [LO, HI]}, **KW)
    pp = sess.preview.count_sketch(frames, "item", weight="w_scaled", **KW)
    eb, ep = pb.accuracy["per_estimate"], pp.accuracy["per_estimate"]
    for key in ("low", "high", "stderr"):
        assert eb[key] == pytest.approx(M * ep[key], rel=1e-12)
    assert "weight's" in pb.accuracy["units"]
    assert pb.request_sha256 != pp.request_sha256 and sess.budget() is None


def test_config_and_cli(spark, tmp_path, capsys):
    data = str(tmp_path / "q.parquet")
    items, ws = zip(*ROWS, strict=True)
    pq.write_table(pa.table({"query": pa.array(items), "weight": pa.array(ws, pa.float64())}), data)
    cfg = load_conf("count_sketch_count_min.yaml")
    localise(cfg, tmp_path, data=data)
    cfg["params"] = {"repetitions": 3, "buckets": 16}
    cfg["dataset"]["bounds"] = {"query": [0, 5]}  # the item column: refused before Spark work, nothing charged
    assert cli_main(["release", write_config(tmp_path, cfg, "bad.yaml")]) == 2
    assert "'dataset.bounds'" in capsys.readouterr().err and charges(tmp_path) == 0
    cfg["dataset"]["bounds"] = {"weight": [LO, HI]}
    assert cli_main(["release", write_config(tmp_path, cfg, "ok.yaml")]) == 0
    out = json.loads(capsys.readouterr().out)["path"]
    rel = spark_dp.load_release(out)
    assert rel.manifest["sketch"]["weight_scaling"]["bounds"] == [LO, HI]
    (tmp_path / "items.txt").write_text("a\nc\n")
    assert cli_main(["estimate", out, "--items", str(tmp_path / "items.txt")]) == 0
    lines = capsys.readouterr().out.strip().splitlines()[1:]
    est, lo, hi = estimate_intervals(rel, ["a", "c"])
    got = np.array([[float(x) for x in ln.split(",")[1:]] for ln in lines])
    np.testing.assert_allclose(got, np.column_stack([est, lo, hi]), rtol=1e-12)
    # spark-dp report: the counters' noise band is in the weight's units (M·σ), and it says so
    report = tmp_path / "r.md"
    assert cli_main(["report", out, "--out", str(report)]) == 0
    capsys.readouterr()
    text = report.read_text()
    assert "weight's units" in text and "M = 50" in text
    laplace_b = rel.privacy["noise_scale"] * M  # Count-Min: b of one counter, in the weight's units
    assert f"{laplace_b * math.sqrt(2):.4g}" in text  # the per-estimate sd of Count-Min, M·b·√2


# -- audit: the calibration is the unscaled one, on the scaled weights (replace neighbours, m = 2) ----------------
EPS, DELTA, K, B, MU = 1.0, 1e-6, 3, 16, 2


def _neighbour_tables(spark):
    """Exact tables of D and D' (unit 'x' holding m rows of item 'hot' with weight +1e6, replaced by the same rows
    with weight −1e6): bounds ±50 clamp and scale them to ±1, so the counter moves by 2m·sᵢ in every repetition."""
    background = [(f"u{i}", f"i{i % 3}", float(i) - 2.5) for i in range(6)]
    tables = []
    for w in (1e6, -1e6):
        df = spark.createDataFrame(background + [("x", "hot", w)] * MU, "unit string, item string, w double")
        tables.append(sketch_table(df, "item", seeds=SEEDS, buckets=B, weight="w", weight_bounds=(-50.0, 50.0),
                                   privacy_unit="unit", max_items_per_unit=MU))
    return tables


def test_audit_weight_bounds_replace_m2_black_box(spark, tmp_path):
    from tests.test_reliability_audits import additive_black_box

    plan = plan_sketch("private_count_sketch", epsilon=EPS, delta=DELTA, repetitions=K, max_items_per_unit=MU,
                       neighbors="replace", weighted=True)
    sens = 2 * math.sqrt(K) * MU  # replace: the unit's m rows move from +1 to −1 (scaled) in each repetition
    assert plan.sensitivity == pytest.approx(sens)
    tables = _neighbour_tables(spark)

    def black(sampler):
        def run(w, cp_for):
            release_table(plan, tables[w], cp_for(plan.events))

        # asserts the exact tables differ by exactly Δ (the scaled weights are the unscaled mechanism's inputs)
        x0, x1 = additive_black_box(run, sampler, tmp_path, expected_sensitivity=sens)
        return max(empirical_epsilon(x0, x1, DELTA), empirical_epsilon(x1, x0, DELTA))

    assert black(NumpySampler()) < EPS
    assert black(UnderNoised()) > EPS


def test_audit_weight_bounds_release_is_calibrated_unscaled(spark, tmp_path):
    """End to end (replace, m = 2): the release's one draw has the unbounded plan's σ and Δ (ε exactly the claim),
    the mechanism's input is the scaled table, and the stored table is M × its output."""
    from tests.test_reliability_audits import single_release_epsilon

    plan = plan_sketch("private_count_sketch", epsilon=EPS, delta=DELTA, repetitions=K, max_items_per_unit=MU,
                       neighbors="replace", weighted=True)
    sens = 2 * math.sqrt(K) * MU
    df = spark.createDataFrame([("x", "hot", 1e6)] * MU + [("u1", "i1", 3.0)], "unit string, item string, w double")
    rec = Recorder(NumpySampler())
    sess = spark_dp.DPSession("t.audit", ledger=f"sqlite:///{tmp_path}/a.db", epsilon_limit=10.0, delta_limit=1e-5,
                              output=str(tmp_path / "out-a"), sampler=rec)
    rel = count_sketch(sess, df, "item", weight="w", bounds={"w": [-50.0, 50.0]}, privacy_unit="unit",
                       max_rows_per_unit=MU, neighbors="replace", epsilon=EPS, delta=DELTA, repetitions=K, buckets=B,
                       seeds=SEEDS)
    (draw,) = rec.draws
    assert draw.scale == pytest.approx(plan.scale, rel=1e-12) and draw.sensitivity == pytest.approx(sens)
    assert single_release_epsilon(plan.scale / sens) == pytest.approx(EPS, rel=1e-6)
    np.testing.assert_allclose(rel["sketch"], 50.0 * (draw.values + draw.noise).reshape(K, B), rtol=1e-12)
    assert np.abs(draw.values).max() <= MU  # the mechanism saw weights in [−1, 1]: at most m per counter
