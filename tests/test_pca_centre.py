"""PCA centred at a privately released mean (``standardize="mean"``): accuracy on a real table against numpy's
mean-centred PCA, the budget split and its exact composition, the mean's noise (white- and black-box audits),
refusals, empty input, the config task, the report and the dry run."""

from __future__ import annotations

import math
import os

import dp_accounting
import numpy as np
import pyarrow.csv as pcsv
import pytest

import spark_dp
from spark_dp.errors import ConfigError
from spark_dp.privacy import NumpySampler
from spark_dp.privacy.accountant import compose_epsilon
from spark_dp.privacy.events import EpsilonDeltaEvent
from spark_dp.report import write_report
from spark_dp.second_moment.centre import (
    CentrePlan,
    centred_gram,
    centred_norm_bound,
    mean_l2_sensitivity,
    mean_uncertainty,
    plan_centre,
    release_mean,
)
from spark_dp.second_moment.mechanisms import bound_planner
from tests._audit import chi2_variance_pvalue
from tests._samplers import FakeChokepoint, UnderNoised
from tests.test_reliability_audits import additive_black_box, charged, eps_lb, single_release_epsilon

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: The shared public datasets sit beside the project (a worktree one level deeper); else the synthetic table of
#: the same shape that the examples ship (spark_dp.cli.example_data).
DATA = [os.path.join(ROOT, *[".."] * up, "shared", "data", "baseball_batting.csv") for up in (1, 2)]
FEATURES = ["ab", "r", "h", "X2b", "hr", "bb"]
BOUNDS = {"ab": (0.0, 720.0), "r": (0.0, 190.0), "h": (0.0, 260.0), "X2b": (0.0, 70.0), "hr": (0.0, 75.0),
          "bb": (0.0, 240.0)}
EPS, DELTA = 1.0, 1e-6


@pytest.fixture(scope="module")
def batting(spark, tmp_path_factory):
    """(DataFrame, numpy rows of FEATURES without NA, whether it is the real table)."""
    path = next((p for p in DATA if os.path.exists(p)), None)
    if path is None:
        from spark_dp.cli.example_data import baseball_batting

        path = str(tmp_path_factory.mktemp("batting") / "batting.csv")
        pcsv.write_csv(baseball_batting(), path)
    table = pcsv.read_csv(path, convert_options=pcsv.ConvertOptions(null_values=["NA", ""], include_columns=FEATURES))
    x = np.column_stack([table[c].to_numpy(zero_copy_only=False).astype(float) for c in FEATURES])
    x = x[np.isfinite(x).all(axis=1)]
    df = spark.read.csv(path, header=True, nullValue="NA").selectExpr(*[f"CAST({c} AS DOUBLE) AS {c}"
                                                                       for c in FEATURES])
    return df, x, path in DATA


def _dp(tmp_path, limit=100.0):
    return spark_dp.DPSession("t.batting", ledger=f"sqlite:///{tmp_path}/ledger.db", epsilon_limit=limit,
                              delta_limit=1e-5, output=str(tmp_path / "out"), sampler="numpy")


def _numpy_pca(x):
    """numpy's (and scikit-learn's) PCA of the rows scaled by the bounds' half-width, centred at their mean."""
    lo, hi = np.array([BOUNDS[c] for c in FEATURES]).T
    z = x / ((hi - lo) / 2)
    zc = z - z.mean(axis=0)
    vals, vecs = np.linalg.eigh(zc.T @ zc)
    return vals[::-1], vecs[:, ::-1].T


def test_mean_centred_pca_matches_numpy_on_a_real_table(batting, tmp_path):
    df, x, real = batting
    dp = _dp(tmp_path)
    rel = dp.pca(df, FEATURES, 2, epsilon=20.0, delta=1e-6, bounds=BOUNDS, standardize="mean")
    vals, vecs = _numpy_pca(x)
    # the first component is numpy's (sign-free); the second within the Davis-Kahan bound the release's own noise
    # bound gives (Yu, Wang & Samworth 2015: sin <= 2 ||E|| / gap), and close on the real table, whose second gap is
    # wide (the synthetic stand-in's second and third eigenvalues are close: its second component may turn)
    assert abs(rel["eigenvectors"][0] @ vecs[0]) > 0.999
    noise = rel.manifest["accuracy"]["noise_spectral_norm_bound"]
    sin = min(1.0, 2.0 * noise / min(vals[0] - vals[1], vals[1] - vals[2]))
    assert abs(rel["eigenvectors"][1] @ vecs[1]) >= math.sqrt(1.0 - sin**2) - 1e-9
    assert abs(rel["eigenvectors"][1] @ vecs[1]) > 0.98 or not real
    assert rel["eigenvalues"][0] == pytest.approx(vals[0], rel=0.02)
    np.testing.assert_allclose(rel["mean"], x.mean(axis=0), rtol=0.01)
    assert rel["count"][0] == pytest.approx(len(x), rel=0.01)
    low, high = rel.interval("mean")  # (coverage: test_mean_interval_covers)
    assert np.all(np.abs(rel["mean"] - x.mean(axis=0)) <= 5 * rel.stderr("mean")) and np.all(low < high)
    # centring at the bounds' midpoint instead (free) gives another first component on this table
    mid = dp.pca(df, FEATURES, 1, epsilon=20.0, delta=1e-6, bounds=BOUNDS, standardize="bounds")
    assert abs(mid["eigenvectors"][0] @ vecs[0]) < 0.95 or not real  # 0.87 without noise
    # the manifest: the coordinates, the released mean's privacy, the centred rows' bound; one charge
    m = rel.manifest
    assert m["standardize"]["how"] == "mean" and m["params"]["standardize"] == "mean"
    assert m["params"]["mean_share"] == 0.1 and m["privacy"]["mean"]["share"] == 0.1
    assert m["centre"]["norm_bound"] == pytest.approx(centred_norm_bound(
        (rel["mean"] - 0.0) / (np.array([BOUNDS[c][1] for c in FEATURES]) / 2) - 1.0))
    assert m["privacy"]["mean"]["sensitivity"] == pytest.approx(math.sqrt(len(FEATURES) + 1))
    assert list(m["centre"]["mean"].values()) == pytest.approx(list(rel["mean"]))
    assert m["uncertainty"]["arrays"]["mean"]["kind"] == "bound"  # recorded with its method
    assert dp.budget().releases == 2
    again = dp.pca(df, FEATURES, 2, epsilon=20.0, delta=1e-6, bounds=BOUNDS, standardize="mean")
    assert again.reused and dp.budget().releases == 2  # the same call spends once: the stored release, no new noise
    np.testing.assert_array_equal(again["mean"], rel["mean"])
    # the matrix is the scatter about the released mean, in the data's units
    centred = x - rel["mean"]
    np.testing.assert_allclose(rel["matrix"], centred.T @ centred, rtol=0.05, atol=1e-3 * np.abs(centred.T @ centred).max())
    # results a Python user holds: labelled by feature
    frame = rel.to_pandas("mean")
    assert list(frame["feature"]) == FEATURES and {"value", "stderr", "low", "high"} <= set(frame.columns)
    assert list(rel.to_pandas("count")["value"]) == [rel["count"][0]]
    text = open(write_report(rel, out=str(tmp_path / "r.md")).path).read()
    assert "standardize: mean" in text and "mean" in text and FEATURES[0] in text


def test_budget_split_composes_exactly():
    """The mean's Gaussian gets share·μ² of the whole budget; the mechanism the largest ε′ that still fits."""
    z = dp_accounting.get_sigma_gaussian(EPS, DELTA)  # independent: σ/Δ of one (ε, δ) Gaussian
    for mechanism, share in (("analyze_gauss", 0.1), ("analyze_gauss", 0.5), ("jl_ridge", 0.1),
                             ("inverse_wishart", 0.2), ("wishart", 0.1)):
        def planner(e, dl, mechanism=mechanism):
            return bound_planner(mechanism, size=3, epsilon=e, quantile=None, owner="pca", delta=dl,
                                 neighbors="add_remove", max_rows_per_unit=1, postprocess="none")

        centre, plan_for = plan_centre(planner, d=3, epsilon=EPS, delta=DELTA, share=share, neighbors="add_remove",
                                       max_rows_per_unit=1)
        events = [centre.event, *plan_for(1.0).events]
        total = compose_epsilon(events, DELTA)
        assert total <= EPS and total > EPS * 0.995, (mechanism, total)
        assert centre.event.noise_multiplier == pytest.approx(z / math.sqrt(share), rel=1e-6)
        if mechanism == "analyze_gauss":  # μ-GDP: the two μ² add up to the whole budget's
            mu2 = sum(e.mu**2 for e in events)
            assert mu2 == pytest.approx(1 / z**2, rel=2e-3)
            assert (1 / events[1].noise_multiplier) ** 2 == pytest.approx((1 - share) / z**2, rel=2e-3)
        if any(isinstance(e, EpsilonDeltaEvent) for e in plan_for(1.0).events):
            assert centre.mechanism_delta == DELTA / 2
    with pytest.raises(ConfigError, match="'mean_share' parameter of pca"):
        plan_centre(lambda e, dl: bound_planner("wishart", size=3, epsilon=e, quantile=None, owner="pca", delta=dl,
                                                neighbors="add_remove", max_rows_per_unit=1, postprocess="none"),
                    d=3, epsilon=1e-4, delta=DELTA, share=0.999, neighbors="add_remove", max_rows_per_unit=1)


def test_mean_sensitivity_by_hand():
    """Worst cases for (Σa, n): a unit of m rows at a corner of [-1, 1]^d added, or replaced by its opposite."""
    for d in (1, 3, 6):
        for m in (1, 3):
            corner = np.ones(d)
            add = np.append(m * corner, m)  # the (sum, count) change of adding m rows at the corner
            assert mean_l2_sensitivity(d, max_rows_per_unit=m) == pytest.approx(np.linalg.norm(add))
            swap = np.append(2 * m * corner, 0.0)  # m rows at +1 replaced by m rows at -1
            assert mean_l2_sensitivity(d, max_rows_per_unit=m, neighbors="replace") == pytest.approx(
                np.linalg.norm(swap))
            for p in range(m + 1):  # every replacement of p rows by q rows (0 … m) stays within it
                for q in range(m + 1):
                    worst = math.sqrt(d * (p + q) ** 2 + (p - q) ** 2)
                    assert worst <= mean_l2_sensitivity(d, max_rows_per_unit=m, neighbors="replace") + 1e-12


def test_centred_gram_is_exact_and_bounded():
    rng = np.random.default_rng(0)  # data for the test, not noise
    a = rng.uniform(-1, 1, size=(50, 3))
    rows = np.hstack([a, np.ones((50, 1))])
    rows[:5, :] = 0.0  # rows the nonfinite policy zeroed entirely (constant included) contribute nothing
    mean = np.array([0.9, -1.0, 0.1])
    u = rows[:, :3] - rows[:, 3:] * mean
    np.testing.assert_allclose(centred_gram(rows.T @ rows, mean), u.T @ u, atol=1e-10)
    assert np.linalg.norm(u, axis=1).max() <= centred_norm_bound(mean)
    corner = np.array([-1.0, 1.0, -1.0]) - mean  # the farthest point of the box from the mean attains B_c
    assert np.linalg.norm(corner) == pytest.approx(centred_norm_bound(mean))


def _mean_plan(d=4, share=0.1, neighbors="add_remove", m=1) -> CentrePlan:
    def planner(e, dl):
        return bound_planner("analyze_gauss", size=d, epsilon=e, quantile=None, owner="pca", delta=dl,
                             neighbors=neighbors, max_rows_per_unit=m, postprocess="none")

    return plan_centre(planner, d=d, epsilon=EPS, delta=DELTA, share=share, neighbors=neighbors,
                       max_rows_per_unit=m)[0]


@pytest.mark.parametrize("neighbors,m", [("add_remove", 1), ("replace", 3)])
def test_mean_noise_white_box(tmp_path, neighbors, m):
    """The noise on a zero (Σa, n) has the variance an independently computed σ says; σ/2 is rejected."""
    d = 30
    plan = _mean_plan(d=d, neighbors=neighbors, m=m)
    delta_2 = m * math.sqrt(d + 1) if neighbors == "add_remove" else 2 * m * math.sqrt(d)
    sigma = dp_accounting.get_sigma_gaussian(EPS, DELTA) / math.sqrt(0.1) * delta_2
    pvalues = []
    for under in (False, True):
        draws = []
        for _ in range(4):  # 4 × 31 draws
            cp = charged(tmp_path, [plan.event], UnderNoised() if under else NumpySampler())
            _, _, noisy = release_mean(cp, plan, np.zeros((d + 1, d + 1)))
            assert not cp.unused_events
            draws.append(noisy)
        pvalues.append(chi2_variance_pvalue(np.concatenate(draws), sigma))
    assert pvalues[0] > 1e-6 and pvalues[1] < 1e-6, pvalues


def test_mean_noise_black_box(tmp_path):
    """Worst-case neighbours (∅ and one row at the corner of the box): the empirical ε stays under the mean
    event's own ε; an under-noised sampler breaks it."""
    d = 3
    plan = _mean_plan(d=d)
    claim = single_release_epsilon(plan.event.noise_multiplier)
    row = np.append(np.ones(d), 1.0)
    grams = (np.zeros((d + 1, d + 1)), np.outer(row, row))
    results = []
    for under in (False, True):
        def run(which, cp_for):
            release_mean(cp_for([plan.event]), plan, grams[which])

        x0, x1 = additive_black_box(run, UnderNoised(divisor=3) if under else NumpySampler(), tmp_path,
                                    expected_sensitivity=math.sqrt(d + 1))
        results.append(eps_lb(x0, x1, DELTA))
    assert results[0] < claim < results[1], (results, claim)


@pytest.mark.parametrize("n", [300, 5])
def test_mean_bound_covers(n):
    """The mean's bound covers the mean of the rows at least at its level over the noise, and is not loose at
    n = 300 (at most 2x the delta method's interval); at n = 5 the count's noise dominates: the whole range."""
    d, reps, level = 3, 400, 0.9
    plan = _mean_plan(d=d)
    rng = np.random.default_rng(11)  # data for the test; the release noise is the seeded sampler's
    a = np.clip(rng.uniform(-1, 1, size=(n, d)) * np.array([0.3, 0.8, 1.0]) + np.array([0.5, 0.0, -0.1]), -1, 1)
    rows = np.hstack([a, np.ones((n, 1))])
    centres, halves = np.array([10.0, 0.0, -5.0]), np.array([2.0, 1.0, 5.0])
    truth = centres + halves * a.mean(axis=0)
    cp = FakeChokepoint.seeded(5)
    hits, ratio = np.zeros(d), []
    for _ in range(reps):
        _, _, noisy = release_mean(cp, plan, rows.T @ rows)
        u = mean_uncertainty(noisy, plan, centres, halves, level)["mean"]
        hits += (u.low <= truth) & (truth <= u.high)
        ratio.append((u.high - u.low) / (2 * 1.645 * u.stderr))
    assert np.all(hits / reps >= level), hits / reps
    if n >= 300:
        assert np.median(ratio) < 2.0, np.median(ratio)
    else:
        np.testing.assert_allclose(u.low, centres - halves)


def test_empty_and_nonfinite_input_release(spark, tmp_path):
    """Data content is never an error: an empty table and all-NaN rows release noise like any other."""
    dp = _dp(tmp_path)
    empty = spark.createDataFrame([], "ab double, r double")
    bounds = {"ab": (0.0, 720.0), "r": (0.0, 190.0)}
    rel = dp.pca(empty, ["ab", "r"], 1, epsilon=1.0, delta=1e-6, bounds=bounds, standardize="mean")
    assert np.all((rel["mean"] >= 0) & (rel["mean"] <= [720.0, 190.0])) and np.isfinite(rel["eigenvalues"]).all()
    nan = spark.createDataFrame([(float("nan"), 3.0), (None, 1.0), (10.0, float("inf"))], "ab double, r double")
    # (with "drop" every row goes: the empty case above; the neighbour search runs both policies)
    rel = dp.pca(nan, ["ab", "r"], 1, epsilon=1.0, delta=1e-6, bounds=bounds, standardize="mean", nonfinite="zero")
    assert np.isfinite(rel["mean"]).all() and rel.manifest["policies"]["nonfinite"].startswith("zero")


@pytest.mark.parametrize("kwargs,name", [
    (dict(norm_bound=2.0), "norm_bound"),
    (dict(norm_bound="auto"), "norm_bound"),
    (dict(mean_share=0.0), "mean_share"),
    (dict(mean_share=1.5), "mean_share"),
    (dict(clipping_report=True), "clipping_report"),
    (dict(mechanism="jl_ridge", projection="rows"), "projection"),
    (dict(bounds={"ab": (0.0, 720.0)}), "standardize"),
    (dict(bounds="auto"), "standardize"),
    (dict(bounds=None, norm_bound=None), "standardize"),
    (dict(standardize="zscore"), "standardize"),
    (dict(standardize="bounds", mean_share=0.2), "mean_share"),
])
def test_bad_parameters_are_refused_before_anything_is_charged(batting, tmp_path, kwargs, name):
    df, _, _ = batting
    dp = _dp(tmp_path)
    args = dict(epsilon=1.0, delta=1e-6, bounds={c: BOUNDS[c] for c in FEATURES[:2]}, standardize="mean")
    args.update(kwargs)
    with pytest.raises(ConfigError, match=f"'{name}' parameter of pca") as err:
        dp.pca(df, FEATURES[:2], 1, **args)
    assert "\n" not in str(err.value)
    assert dp.budget() is None  # nothing charged (no ledger row for the dataset)
    assert not os.path.exists(tmp_path / "out") or not os.listdir(tmp_path / "out")


def test_config_task_runs_and_validates(batting, tmp_path):
    """The config's params.standardize: mean (with mean_share) runs the same release; bad keys fail first."""
    from spark_dp.cli.main import main as cli_main
    from tests._jobs import charges, load_conf, localise, write_config

    df, _, _ = batting
    data = str(tmp_path / "batting.parquet")
    df.limit(3000).write.parquet(data)
    cfg = localise(load_conf("pca_analyze_gauss.yaml"), tmp_path, data=data)
    cfg["dataset"].update(columns=FEATURES[:3], bounds={c: list(BOUNDS[c]) for c in FEATURES[:3]})
    cfg["privacy"].pop("norm_bound")
    cfg["params"] = {"k": 2, "standardize": "mean", "mean_share": 0.2}
    for how in (["--dry-run"], ["--dry-run", "--json", "--n", "3000"]):  # the dry run reads no rows, spends nothing
        assert cli_main(["release", *how, write_config(tmp_path, cfg)]) == 0
    assert charges(tmp_path) == 0
    assert cli_main(["release", write_config(tmp_path, cfg)]) == 0
    assert charges(tmp_path) == 1
    from spark_dp.release import load_release

    found = [os.path.join(r, f) for r, _, fs in os.walk(tmp_path / "releases") for f in fs if f == "manifest.json"]
    rel = load_release(os.path.dirname(found[0]))
    assert rel.manifest["privacy"]["mean"]["share"] == 0.2 and rel["mean"].shape == (3,)
    for params, key in (({"k": 2, "standardize": "mean", "mean_share": 2.0}, "mean_share"),
                        ({"k": 2, "mean_share": 0.2}, "mean_share"),
                        ({"k": 2, "standardize": "mean", "clipping_report": True}, "clipping_report")):
        bad = {**cfg, "params": params}
        assert cli_main(["release", write_config(tmp_path, bad, name="bad.yaml")]) != 0
        assert charges(tmp_path) == 1
    bad = {**cfg, "privacy": {"epsilon": 1.0, "delta": 1e-6, "norm_bound": 2.0}}
    assert cli_main(["release", write_config(tmp_path, bad, name="bad.yaml")]) != 0
    assert charges(tmp_path) == 1


def test_dry_run_estimates_without_spending(batting, tmp_path):
    df, _, _ = batting
    dp = _dp(tmp_path)
    preview = dp.preview.pca(df, FEATURES[:3], 2, epsilon=1.0, delta=1e-6,
                             bounds={c: BOUNDS[c] for c in FEATURES[:3]}, standardize="mean", n=20_000)
    out = preview.to_dict()
    assert dp.budget() is None
    assert len(out["events"]) == 2  # the mean's Gaussian and the mechanism's
    acc = out["accuracy"]
    assert acc["predicted"] is False and "standardize 'mean'" in acc["why"]
    assert acc["mean"]["noise_sigma"] == pytest.approx(
        dp_accounting.get_sigma_gaussian(1.0, 1e-6) / math.sqrt(0.1) * 2.0, rel=1e-3)  # Δ = sqrt(d + 1) = 2
