"""Dry runs (DPSession.preview): no Spark job, nothing charged or written, and exactly the release's plan.

Every case previews a release, checks that no Spark job ran (a job group
around the preview; tests may use the SparkContext, the library may not),
that the ledger's rows and the output directory are unchanged, then runs the
same call for real and checks that the preview's σ, noise scale, events,
sensitivity, request digest and budget figures are the manifest's and the
ledger's.
"""

from __future__ import annotations

import inspect
import os
import sqlite3

import numpy as np
import pytest

from spark_dp import DPSession
from spark_dp.errors import BudgetExceededError, ConfigError
from spark_dp.privacy import Budget, GaussianEvent, SeededSampler
from spark_dp.privacy.events import event_to_dict
from spark_dp.privacy.ledger import UnitDeclaration
from spark_dp.release.preview import Preview, dry_run, predict_accuracy
from spark_dp.release.release import NoUncertaintyError, load_release

LIMIT = (20.0, 1e-4)


@pytest.fixture(scope="module")
def frames(spark):
    rng = np.random.default_rng(3)
    x = rng.uniform(-0.5, 0.5, size=(40, 3))
    rows = [(float(a), float(b), float(c), float(a + 0.5 * b), f"u{i % 13}", f"item{i % 5}", int(i % 9),
             [float(a), float(b), float(c)]) for i, (a, b, c) in enumerate(x)]
    return spark.createDataFrame(rows, "a double, b double, c double, y double, u string, item string, iid long, "
                                       "v array<double>")


def _session(tmp_path, **kw) -> DPSession:
    return DPSession("ds", ledger=f"sqlite:///{tmp_path}/ledger.db", epsilon_limit=kw.pop("epsilon_limit", LIMIT[0]),
                     delta_limit=LIMIT[1], output=str(tmp_path / "out"), sampler=SeededSampler(), **kw)


def _ledger_rows(tmp_path) -> dict:
    path = tmp_path / "ledger.db"
    if not path.exists():
        return {}
    con = sqlite3.connect(path)
    try:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        return {t: sorted(map(repr, con.execute(f"SELECT * FROM {t}").fetchall())) for t in tables}
    finally:
        con.close()


def _files(root) -> list[str]:
    return sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs) if os.path.exists(root) else []


XY = dict(epsilon=1.0, delta=1e-6, norm_bound=1.0)
SKETCH = dict(epsilon=1.0, delta=1e-6, repetitions=5, buckets=64)
TENSOR = dict(epsilon=1.0, delta=1e-6, norm_bound=1.0, restarts=2, iterations=2)
UNIT = dict(privacy_unit="u", max_rows_per_unit=3)

CASES = {
    "sm_gauss": ("second_moment", (["a", "b", "c"],), XY),
    "sm_gauss_m3": ("second_moment", (["a", "b", "c"],), {**XY, **UNIT}),
    "sm_gauss_replace_shift": ("second_moment", (["a", "b", "c"],), {**XY, "neighbors": "replace", "postprocess": "shift"}),
    "sm_wishart": ("second_moment", (["a", "b", "c"],), {**XY, "mechanism": "wishart"}),
    "sm_jl_replace": ("second_moment", (["a", "b", "c"],), {**XY, "mechanism": "jl_ridge", "neighbors": "replace"}),
    "sm_invwishart": ("second_moment", (["a", "b", "c"],), {**XY, "mechanism": "inverse_wishart"}),
    "lr_gauss": ("linear_regression", (["a", "b"], "y"), XY),
    "lr_adassp_m2_replace": ("linear_regression", (["a", "b"], "y"),
                             {**XY, "mechanism": "adassp", "neighbors": "replace", "privacy_unit": "u",
                              "max_rows_per_unit": 2}),
    "pca_gauss_m3": ("pca", (["a", "b", "c"], 2), {**XY, **UNIT}),
    "cs_private_m2_replace": ("count_sketch", ("item",), {**SKETCH, "privacy_unit": "u", "max_rows_per_unit": 2,
                                                          "neighbors": "replace"}),
    "cs_candidates_weighted": ("count_sketch", ("item",), {**SKETCH, "weight": "a", "candidates": ["item1", "item7"],
                                                           "top": 2}),
    # weight bounds: the prediction in the weight's units (M = 8), as the release's intervals and threshold
    "cs_weight_bounds_m2": ("count_sketch", ("item",), {**SKETCH, "weight": "a", "bounds": {"a": [-3.0, 8.0]},
                                                        "privacy_unit": "u", "max_rows_per_unit": 2}),
    "sm_vector_column": ("second_moment", (["v"],), {**XY, "dimension": 3}),
    "cs_count_min": ("count_sketch", ("item",), {**SKETCH, "mechanism": "count_min"}),
    "cs_count_mean": ("count_sketch", ("item",), {**SKETCH, "mechanism": "count_mean"}),
    "cs_histogram": ("count_sketch", ("iid",), {"epsilon": 1.0, "delta": 1e-6, "mechanism": "histogram", "domain": 9}),
    "cs_dyadic": ("count_sketch", ("iid",), {**SKETCH, "levels": 4}),
    "tensor_rows_fresh": ("tensor_decomposition", (["a", "b", "c"], 1), TENSOR),
    "tensor_rows_reuse_m2_replace": ("tensor_decomposition", (["a", "b", "c"], 1),
                                     {**TENSOR, "mode": "reuse", "neighbors": "replace", "privacy_unit": "u",
                                      "max_rows_per_unit": 2}),
    "tensor_rows_whiten": ("tensor_decomposition", (["a", "b", "c"], 1), {**TENSOR, "whiten": True, "mode": "reuse"}),
    # bounds / norm_bound chosen from the data: their event first, predicted: false (as the second-moment family's)
    "tensor_rows_bounds_auto": ("tensor_decomposition", (["a", "b", "c"], 1),
                                {**{k: v for k, v in TENSOR.items() if k != "norm_bound"}, "bounds": "auto",
                                 "mode": "reuse"}),
    "tensor_rows_norm_auto_m2_replace": ("tensor_decomposition", (["a", "b", "c"], 1),
                                         {**TENSOR, "norm_bound": "auto", "mode": "reuse", "neighbors": "replace",
                                          "privacy_unit": "u", "max_rows_per_unit": 2}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_preview_runs_no_job_charges_nothing_and_is_the_release_plan(spark, frames, tmp_path, case):
    method, args, kwargs = CASES[case]
    dp = _session(tmp_path)
    # some budget already spent, by a release of the same privacy unit (charged directly: no Spark needed)
    unit = UnitDeclaration("u" if ("m2" in case or "m3" in case) else None, 3 if "m3" in case else 2 if "m2" in case
                           else 1, "replace" if "replace" in case else "add_remove")
    dp.ledger.charge(release_id="earlier", dataset_id="ds", request_sha256="0" * 64, events=[GaussianEvent(3.0)],
                     budget=Budget(0.5, 1e-7), limit=dp.limit, unit=unit)
    ledger, files = _ledger_rows(tmp_path), _files(tmp_path / "out")
    sc = spark.sparkContext
    group = f"preview-{case}"
    sc.setJobGroup(group, "preview must not run Spark jobs")
    try:
        preview = getattr(dp.preview, method)(frames, *args, release_id=f"r-{case}", **kwargs)
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    assert sc.statusTracker().getJobIdsForGroup(group) == [], "a preview ran a Spark job"
    assert _ledger_rows(tmp_path) == ledger and _files(tmp_path / "out") == files
    assert isinstance(preview, Preview) and not preview.would_refuse and not preview.stored

    release = getattr(dp, method)(frames, *args, release_id=f"r-{case}", **kwargs)
    privacy = release.manifest["privacy"]
    assert preview.request_sha256 == release.manifest["request_sha256"]
    assert preview.events == privacy["events"]
    for key in ("noise_scale", "noise_sigma", "sensitivity", "noise_family", "neighbors", "max_rows_per_unit",
                "privacy_unit", "dof", "projection_rows", "ridge_w", "nu", "second_moment_sigma"):
        assert preview.privacy.get(key) == privacy.get(key), key
    assert (preview.noise_scale, preview.noise_family, preview.sensitivity) == \
        (privacy["noise_scale"], privacy["noise_family"], privacy.get("sensitivity"))
    charged = dp.ledger.lookup(f"r-{case}").budget
    assert preview.cost == {"epsilon": charged.epsilon, "delta": charged.delta}
    assert (preview.epsilon, preview.delta) == (privacy["epsilon"], privacy["delta"])
    status = dp.budget()
    assert preview.budget["epsilon_spent_after"] == pytest.approx(status.spent_epsilon, rel=1e-12)
    assert preview.budget["epsilon_remaining_after"] == pytest.approx(status.remaining_epsilon, rel=1e-12)
    assert preview.accuracy["level"] == 0.95 and "predicted" in preview.accuracy

    _predicted_equals_released(preview, release, method, args)

    # the same call again: the release id is known, so the release would return the stored one, for free
    again = getattr(dp.preview, method)(frames, *args, release_id=f"r-{case}", **kwargs)
    assert again.stored and not again.would_refuse and again.cost == {"epsilon": 0.0, "delta": 0.0}


def _predicted_equals_released(preview, release, method, args) -> None:
    """Where the release's error bars do not depend on the data, the preview predicted them exactly."""
    acc = preview.accuracy
    if not acc["predicted"]:
        assert acc["why"]
        return
    if method == "second_moment":
        low, high = release.interval("matrix")
        assert (high - low)[0, 1] / 2 == pytest.approx(acc["per_entry"]["half_width"], rel=1e-9)
        assert (high - low)[0, 0] / 2 == pytest.approx(acc["per_entry"]["half_width_diagonal"], rel=1e-9)
    elif method == "pca":
        low, high = release.interval("eigenvalues")
        assert high - release["eigenvalues"] == pytest.approx(acc["eigenvalue_error_bound"], rel=1e-9)
    elif method == "count_sketch":
        from spark_dp.sketch.uncertainty import estimate_intervals

        # the prediction is the noise part alone: a lower limit without hash collisions (the release adds them)
        items = [1] if args == ("iid",) else ["item1"]
        est, low, high = estimate_intervals(release, items, collisions=False)
        assert est - high == pytest.approx([acc["per_estimate"]["low"]], rel=1e-9)
        assert est - low == pytest.approx([acc["per_estimate"]["high"]], rel=1e-9)
        if release.manifest["mechanism"] != "histogram":
            assert acc["lower_limit"] and "LOWER LIMIT" in acc["what"] and "no hash collisions" in acc["what"]
            _, c_low, c_high = estimate_intervals(release, items)  # with collisions: wider, or refused (NaN)
            assert np.isnan(c_low).all() or (c_high - c_low >= high - low - 1e-9).all()
        hh = release.manifest["heavy_hitters"]
        if "heavy_hitter_threshold" in acc:
            assert acc["heavy_hitter_threshold"]["false_positive_rate_per_absent_item"] == hh["false_positive_rate"]
    elif method == "tensor_decomposition":
        low, high = release.interval("eigenvalues")
        assert high - release["eigenvalues"] == pytest.approx(acc["per_eigenvalue"]["half_width"], rel=1e-9)
    elif method == "linear_regression":
        assert acc["per_coefficient"] and acc["noise"]["entry_stderr_xty"] > 0


def test_explicit_tensor_previews_match_the_release(tmp_path):
    rng = np.random.default_rng(0)
    v = rng.standard_normal(4)
    T = np.einsum("i,j,k->ijk", v, v, v) / np.linalg.norm(v) ** 3
    dp = _session(tmp_path)
    for mech in ("private_power_method", "input_perturbation", "power_method"):
        kw = {} if mech == "power_method" else {"epsilon": 1.0, "delta": 1e-6}
        ledger, files = _ledger_rows(tmp_path), _files(tmp_path / "out")
        p = dp.preview.tensor_decomposition(T, k=1, mechanism=mech, restarts=2, iterations=2, release_id=f"t-{mech}", **kw)
        assert _ledger_rows(tmp_path) == ledger and _files(tmp_path / "out") == files
        rel = dp.tensor_decomposition(T, k=1, mechanism=mech, restarts=2, iterations=2, release_id=f"t-{mech}", **kw)
        assert p.request_sha256 == rel.manifest["request_sha256"]
        assert p.private is (mech != "power_method")
        if p.private:
            assert p.events == rel.manifest["privacy"]["events"]
            assert p.privacy.get("nu") == rel.manifest["privacy"].get("nu")
            assert p.noise_scale == rel.manifest["privacy"]["noise_scale"]
            assert p.accuracy["predicted"]
        else:
            assert p.cost == {"epsilon": 0.0, "delta": 0.0} and p.events == []


def test_over_budget_is_reported_not_raised_and_the_release_then_refuses(frames, tmp_path):
    dp = _session(tmp_path, epsilon_limit=1.0)
    p = dp.preview.second_moment(frames, ["a", "b"], epsilon=2.0, delta=1e-6, norm_bound=1.0)
    assert p.would_refuse and "would be exceeded" in p.reason and p.cost["epsilon"] == 0.0
    assert p.budget["epsilon_spent_after"] == p.budget["epsilon_spent_before"] == 0.0
    assert _ledger_rows(tmp_path).get("charges", []) == []
    with pytest.raises(BudgetExceededError):
        dp.second_moment(frames, ["a", "b"], epsilon=2.0, delta=1e-6, norm_bound=1.0)


def test_bad_requests_raise_as_the_release_does_and_a_reused_id_is_a_refusal(frames, tmp_path):
    dp = _session(tmp_path)
    with pytest.raises(ConfigError, match="epsilon"):
        dp.preview.second_moment(frames, ["a"], epsilon=-1.0, delta=1e-6, norm_bound=1.0)
    with pytest.raises(Exception, match="nope"):
        dp.preview.second_moment(frames, ["nope"], epsilon=1.0, delta=1e-6, norm_bound=1.0)
    with pytest.raises(ConfigError, match="'n'"):
        dp.preview.second_moment(frames, ["a"], epsilon=1.0, delta=1e-6, norm_bound=1.0, n=0)
    dp.second_moment(frames, ["a"], epsilon=1.0, delta=1e-6, norm_bound=1.0, release_id="rid")
    p = dp.preview.second_moment(frames, ["a", "b"], epsilon=1.0, delta=1e-6, norm_bound=1.0, release_id="rid")
    assert p.would_refuse and "different request" in p.reason and not p.stored


def test_releases_of_one_dry_run_are_checked_one_after_the_other(frames, tmp_path):
    dp = _session(tmp_path, epsilon_limit=1.0)  # one fits (0.73 at delta 1e-4), two do not (1.08)
    with dry_run() as run:
        first = dp.second_moment(frames, ["a"], epsilon=1.0, delta=1e-6, norm_bound=1.0)
        second = dp.second_moment(frames, ["a"], epsilon=1.0, delta=1e-6, norm_bound=1.0)
    assert run.previews == [first, second]
    assert not first.would_refuse and second.would_refuse  # together they exceed the limit
    assert second.budget["epsilon_spent_before"] == pytest.approx(first.budget["epsilon_spent_after"])
    assert _ledger_rows(tmp_path).get("charges", []) == []


def test_both_call_shapes_and_real_signatures(frames, tmp_path):
    dp = _session(tmp_path)
    a = dp.preview.linear_regression(frames, ["a", "b"], "y", n=5000, **XY)
    b = dp.preview(dp.linear_regression, frames, ["a", "b"], "y", n=5000, **XY)
    assert a.request_sha256 == b.request_sha256 and a.accuracy == b.accuracy
    assert [r["n"] for r in a.accuracy["per_coefficient"]] == [5000]
    sig = inspect.signature(dp.preview.linear_regression)
    assert list(sig.parameters)[:3] == ["df", "columns", "label"] and "n" in sig.parameters
    assert "mechanism" in sig.parameters and "Dry run" in dp.preview.linear_regression.__doc__
    with pytest.raises(ConfigError, match="release"):
        dp.preview(print, frames)


# -- the accuracy predictions hold for the noise they describe (no Spark) -------------------------

def test_sketch_estimate_intervals_cover_their_noise():
    rng = np.random.default_rng(2)
    k, b, sigma = 5, 16, 3.0
    mean = predict_accuracy("count_sketch", "count_mean", {"params": {"repetitions": k, "buckets": b}},
                            {"noise_scale": sigma, "noise_family": "gaussian"},
                            {"sketch": {"estimator": "debiased_mean"}})["per_estimate"]
    noise = rng.normal(0.0, sigma, size=(20_000, k, b))
    # item in bucket 0 of every repetition; the debiased estimate's noise part
    est = (b * noise[:, :, 0].mean(axis=1) - noise.sum(axis=2).mean(axis=1)) / (b - 1)
    assert np.std(est) == pytest.approx(mean["stderr"], rel=0.03)
    cmin = predict_accuracy("count_sketch", "count_min", {"params": {"repetitions": k, "buckets": b}},
                            {"noise_scale": sigma, "noise_family": "laplace"}, {"sketch": {"estimator": "min"}})
    cmin = cmin["per_estimate"]
    m = rng.laplace(0.0, sigma, size=(20_000, k)).min(axis=1)
    assert np.mean((m >= cmin["low"]) & (m <= cmin["high"])) == pytest.approx(0.95, abs=0.01)


def test_regression_prediction_matches_the_noise_of_the_solve():
    """Analyze Gauss on an isotropic design at the norm bound: the coefficients' noise is what the preview says."""
    d, n, sigma = 3, 20_000, 4.0
    rng = np.random.default_rng(8)
    X = rng.choice([-1.0, 1.0], size=(n, d - 1)) / np.sqrt(d)  # rows of norm < 1, E[x x^T] = I/d
    y = rng.choice([-1.0, 1.0], size=n) / np.sqrt(d)  # beta = 0
    A = np.column_stack([X, y])
    G = A.T @ A
    acc = predict_accuracy("linear_regression", "analyze_gauss", {"dimension": d, "norm_bound": 1.0},
                           {"noise_scale": sigma}, n=n)
    betas = []
    for _ in range(2000):
        E = np.triu(rng.normal(0.0, sigma, size=(d, d)))
        M = G + E + np.triu(E, 1).T
        betas.append(np.linalg.solve(M[:-1, :-1], M[:-1, -1]))
    sd = np.std(np.array(betas) - np.linalg.solve(G[:-1, :-1], G[:-1, -1]), axis=0)
    assert sd == pytest.approx(acc["per_coefficient"][0]["stderr"], rel=0.1)


def test_regression_prediction_is_a_best_case_and_says_so():
    """The prediction assumes the most favourable design; a design with values inside the norm bound and
    correlated columns (as real data has) gets more noise on every coefficient, never less."""
    d, n, sigma = 3, 20_000, 4.0
    rng = np.random.default_rng(9)
    x1 = rng.uniform(-0.4, 0.4, n)
    X = np.column_stack([x1, 0.6 * x1 + rng.uniform(-0.25, 0.25, n)]) / np.sqrt(d)
    y = rng.uniform(-0.4, 0.4, n) / np.sqrt(d)
    G = np.column_stack([X, y]).T @ np.column_stack([X, y])
    acc = predict_accuracy("linear_regression", "analyze_gauss", {"dimension": d, "norm_bound": 1.0},
                           {"noise_scale": sigma}, n=n)
    assert acc["best_case"] is True and "best case" in acc["warning"]
    betas = []
    for _ in range(500):
        E = np.triu(rng.normal(0.0, sigma, size=(d, d)))
        M = G + E + np.triu(E, 1).T
        betas.append(np.linalg.solve(M[:-1, :-1], M[:-1, -1]))
    sd = np.std(np.array(betas), axis=0)  # 45-57x the prediction here (XᵀX's eigenvalues 93 and 530, not n/d)
    assert np.all(sd > 10 * acc["per_coefficient"][0]["stderr"])


def test_auto_norm_bound_is_said_unpredictable():
    acc = predict_accuracy("linear_regression", "analyze_gauss", {"dimension": 3, "norm_bound": "auto"},
                           {"noise_scale": None})
    assert acc["predicted"] is False and "auto" in acc["why"]


def test_preview_events_are_ledger_events(frames, tmp_path):
    dp = _session(tmp_path)
    p = dp.preview.count_sketch(frames, "item", **SKETCH)
    from spark_dp.sketch.mechanisms import plan_sketch

    plan = plan_sketch("private_count_sketch", epsilon=1.0, delta=1e-6, repetitions=5, max_items_per_unit=1,
                       unit_l2_bound=None, neighbors="add_remove", weighted=False)
    assert p.events == [event_to_dict(e) for e in plan.events]


def test_preview_with_bounds_does_not_claim_the_release_units(frames, tmp_path):
    """With public bounds and a noise that scales with the data (JL) the scaled-unit prediction must not pass for
    the release's units."""
    dp = _session(tmp_path)
    cols = list(frames.columns[:2])
    p = dp.preview.second_moment(frames, cols, epsilon=1.0, delta=1e-6, mechanism="jl_ridge",
                                 bounds={c: (-10.0, 10.0) for c in cols})
    assert p.accuracy["predicted"] is False and "bounds" in p.accuracy["why"]
    assert p.accuracy["in_scaled_units"]["predicted"] is False  # JL: relative sizes only


@pytest.mark.parametrize("mechanism, postprocess", [("analyze_gauss", "none"), ("analyze_gauss", "shift"),
                                                    ("wishart", "none"), ("analyze_gauss", "psd")])
def test_preview_of_a_bounded_regression_and_pca_is_the_release_in_data_units(frames, tmp_path, mechanism,
                                                                              postprocess):
    """Regression and PCA with bounds: the matrix half-widths (constant column kept for the regression) and PCA's
    eigenvalue bound are the release's to 1e-9; the coefficients' table is marked approximate."""
    dp = _session(tmp_path, epsilon_limit=100.0)
    kw = dict(epsilon=1.0, delta=1e-6, mechanism=mechanism, postprocess=postprocess,
              bounds={"a": (-10.0, 10.0), "b": (0.0, 500.0), "c": (5.0, 7.0), "y": (-3.0, 3.0)})
    p = dp.preview.linear_regression(frames, ["a", "b"], "y", **{**kw, "bounds": {
        c: kw["bounds"][c] for c in ("a", "b", "y")}})
    assert p.accuracy["predicted"] is True and "data's" in p.accuracy["units"]
    coef = p.accuracy["coefficients"]
    assert coef["exact"] is False and set(coef["per_coefficient"][0]["stderr"]) == {"a", "b", "intercept"}
    rel = dp.linear_regression(frames, ["a", "b"], "y", **{**kw, "bounds": {c: kw["bounds"][c] for c in ("a", "b", "y")}})
    u = rel.uncertainty["matrix"]
    assert np.shape(p.accuracy["half_width_matrix"]) == rel["matrix"].shape == (4, 4)
    assert np.allclose(p.accuracy["half_width_matrix"], (u.high - u.low) / 2, rtol=1e-9, atol=0)
    if u.stderr is not None:
        assert np.allclose(p.accuracy["stderr_matrix"], u.stderr, rtol=1e-9, atol=0)
    pca_kw = {**kw, "bounds": {c: kw["bounds"][c] for c in ("a", "b", "c")}}
    p = dp.preview.pca(frames, ["a", "b", "c"], 2, **pca_kw)
    rel = dp.pca(frames, ["a", "b", "c"], 2, **pca_kw)
    u = rel.uncertainty["matrix"]
    assert np.allclose(p.accuracy["half_width_matrix"], (u.high - u.low) / 2, rtol=1e-9, atol=0)
    bound = rel.manifest["accuracy"]["noise_spectral_norm_bound"]
    assert p.accuracy["eigenvalue_error_bound"] == pytest.approx(bound, rel=1e-9)
    assert np.allclose(rel.uncertainty["eigenvalues"].high - rel["eigenvalues"], bound, rtol=1e-9)


def test_preview_of_a_bounded_second_moment_is_the_release_in_data_units(frames, tmp_path):
    """The map back is affine entry by entry: the predicted per-entry sd equals the release's (issue #14)."""
    dp = _session(tmp_path)
    cols = list(frames.columns[:3])
    kw = dict(epsilon=1.0, delta=1e-6, bounds={cols[0]: (-10.0, 10.0), cols[1]: (0.0, 500.0), cols[2]: (5.0, 7.0)})
    p = dp.preview.second_moment(frames, cols, **kw)
    assert p.accuracy["predicted"] is True and "data's" in p.accuracy["units"]
    rel = dp.second_moment(frames, cols, **kw)
    u = rel.uncertainty["matrix"]
    assert np.allclose(p.accuracy["stderr_matrix"], u.stderr, rtol=1e-9)
    assert np.allclose(p.accuracy["half_width_matrix"], (u.high - u.low) / 2, rtol=1e-9)


def test_preview_of_a_bounded_adassp_regression_is_the_release_in_data_units(frames, tmp_path):
    """AdaSSP with bounds: X^T X and X^T y in the data's units (T·N·Tᵀ with σ₂, σ₃): the release's to 1e-9."""
    dp = _session(tmp_path)
    kw = dict(epsilon=1.0, delta=1e-6, mechanism="adassp", bounds={"a": (-10.0, 10.0), "b": (0.0, 500.0),
                                                                  "y": (-3.0, 3.0)})
    p = dp.preview.linear_regression(frames, ["a", "b"], "y", **kw)
    assert p.accuracy["predicted"] is True and p.accuracy["coefficients"]["exact"] is False
    rel = dp.linear_regression(frames, ["a", "b"], "y", **kw)
    for name in ("xtx", "xty"):
        u = rel.uncertainty[name]
        assert np.allclose(p.accuracy[f"half_width_{name}"], (u.high - u.low) / 2, rtol=1e-9, atol=0)
        assert np.allclose(p.accuracy[f"stderr_{name}"], u.stderr, rtol=1e-9, atol=0)
    # 40 rows: lambda_min of the scaled X^T X is below the refusal threshold the dry run states; the release
    # refuses its coefficient intervals (kind none), as predicted
    iv = p.accuracy["intervals"]
    # (lambda_min <= trace / 3 <= 40 rows x 3 scaled entries of at most 1, / 3)
    assert iv["refused_when"]["lambda_min_below"] > 40 and "kind none" in iv["rule"]
    assert rel.uncertainty["coefficients"].kind == rel.uncertainty["intercept"].kind == "none"
    back = load_release(rel.path)  # the manifest and the Parquet files carry the refusal, not numbers
    assert back.manifest["uncertainty"]["arrays"]["coefficients"]["kind"] == "none"
    assert np.isnan(back.uncertainty["coefficients"].low).all() and back.uncertainty["coefficients"].stderr is None
    with pytest.raises(NoUncertaintyError, match="has no interval: no interval: AdaSSP"):
        back.interval("coefficients")
