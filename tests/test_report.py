"""``spark-dp report`` on small releases of each family (second moment, regression, PCA, tensor, sketch, merge)."""

import json
import os

import numpy as np
import pytest

import spark_dp
from spark_dp.cli.main import main as cli_main
from spark_dp.errors import SchemaError
from spark_dp.report import write_report
from spark_dp.report.report import _coefficient_sd
from spark_dp.sketch import merge_sketches


@pytest.fixture(scope="module")
def releases(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    rng = np.random.default_rng(11)
    X = rng.normal(size=(300, 4)) / 3
    y = X @ np.array([0.5, -0.3, 0.2, 0.0]) + 0.01 * rng.normal(size=300)
    df = spark.createDataFrame([(*map(float, r), float(t)) for r, t in zip(X, y, strict=True)],
                               "x1 double, x2 double, x3 double, x4 double, y double")
    cols = ["x1", "x2", "x3", "x4"]
    dp = spark_dp.DPSession("r.points", ledger=f"sqlite:///{root}/ledger.db", epsilon_limit=50.0, delta_limit=1e-5,
                            output=str(root / "out"), sampler="numpy")
    out = {
        "second_moment": dp.second_moment(df, cols, epsilon=1.0, delta=1e-6, norm_bound=1.0),
        "linear_regression": dp.linear_regression(df, cols, "y", epsilon=5.0, delta=1e-6, norm_bound=1.0,
                                                  fit_intercept=False),  # the first-order sd is for this form
        "pca": dp.pca(df, cols, 2, epsilon=1.0, delta=1e-6, norm_bound=1.0),
        # columns in their own units (bounds), an intercept, Sheffet's shift: what the worked example does
        "regression_bounded": dp.linear_regression(
            df, cols[:2], "y", epsilon=1.0, delta=1e-6, postprocess="shift",
            bounds={"x1": (-2.0, 2.0), "x2": (-200.0, 200.0), "y": (-1.0, 1.0)}),
        "second_moment_3": dp.second_moment(df, cols[:3], epsilon=1.0, delta=1e-6, norm_bound=1.0),
    }
    v = np.linalg.qr(rng.normal(size=(5, 2)))[0].T
    T = sum(w * np.einsum("i,j,k->ijk", a, a, a) for w, a in zip([3.0, 2.0], v, strict=True))
    dt = spark_dp.DPSession("r.tensor", ledger=f"sqlite:///{root}/ledger.db", epsilon_limit=50.0, delta_limit=1e-5,
                            output=str(root / "out"), sampler="numpy")
    out["tensor_decomposition"] = dt.tensor_decomposition(T, k=2, epsilon=5.0, delta=1e-6, restarts=3, iterations=5,
                                                          neighbors="tensor_entry")
    items = rng.choice(["a", "b", "c", "d"], size=400, p=[0.6, 0.2, 0.1, 0.1])
    sdf = spark.createDataFrame([(str(i),) for i in items], "item string")
    ds = spark_dp.DPSession("r.items", ledger=f"sqlite:///{root}/ledger.db", epsilon_limit=50.0, delta_limit=1e-5,
                            output=str(root / "out"), sampler="numpy")
    s1 = ds.count_sketch(sdf, "item", epsilon=1.0, delta=1e-6, repetitions=5, buckets=32, candidates=["a", "b", "c"])
    s2 = ds.count_sketch(sdf, "item", epsilon=1.0, delta=1e-6, repetitions=5, buckets=32, seeds=s1)
    out["count_sketch"] = s1
    out["merged"] = merge_sketches([s1, s2], release_id="merged-week", output=str(root / "out"))
    return out


@pytest.mark.parametrize("task, plots", [
    ("second_moment", ["spectrum"]), ("linear_regression", ["coefficients"]), ("pca", ["spectrum", "components"]),
    ("tensor_decomposition", ["tensor"]), ("count_sketch", ["sketch"]), ("merged", ["sketch"]),
])
def test_report_of_each_family(releases, tmp_path, capsys, task, plots):
    rel = releases[task]
    out = tmp_path / f"{task}.md"
    assert cli_main(["report", rel.path, "--out", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["privacy"]["epsilon"] == pytest.approx(rel.privacy["epsilon"])
    assert [os.path.basename(p) for p in printed["plots"]] == [f"{task}_{p}.png" for p in plots]
    for p in printed["plots"]:
        with open(p, "rb") as fh:
            assert fh.read(8) == b"\x89PNG\r\n\x1a\n"
    text = out.read_text()
    assert f"# Release {rel.release_id}" in text and "## Privacy spent" in text
    assert f"| epsilon | {rel.privacy['epsilon']:.6g} |" in text
    for p in plots:
        assert f"]({task}_{p}.png)" in text
    if task in ("second_moment", "pca"):
        sigma = rel.privacy["noise_sigma"]
        assert f"{2 * sigma * 2:.4g}" in text  # noise floor 2σ√d with d = 4
    if task == "count_sketch":
        assert "| a |" in text  # the candidate heavy hitters are listed
    if task == "merged":
        assert "merged_from" in text
    if task == "linear_regression":  # one row per feature, named, in columns order
        coef = text[text.index("### coefficients"):]
        coef = coef[:coef.index("###", 4)]
        assert [ln.split("|")[1].strip() for ln in coef.splitlines() if ln.startswith("| x")] == rel.manifest["columns"]


def test_regression_noise_scale_matches_simulation(releases):
    """The first-order coefficient sd agrees with the sd of β over re-noised matrices (within 25%)."""
    rel = releases["linear_regression"]
    sd = _coefficient_sd(rel)
    sigma = rel.privacy["noise_sigma"]
    full = rel["matrix"]
    rng = np.random.default_rng(0)
    betas = []
    for _ in range(400):
        E = np.triu(rng.normal(scale=sigma, size=full.shape))
        E = E + np.triu(E, 1).T
        M = full + E
        betas.append(np.linalg.solve(M[:-1, :-1], M[:-1, -1]))
    emp = np.std(betas, axis=0)
    np.testing.assert_allclose(sd, emp, rtol=0.25)


def test_html_report_and_default_location(releases, tmp_path):
    rel = releases["pca"]
    rep = write_report(rel.path, out=str(tmp_path / "r.html"))
    text = open(rep.path).read()
    assert text.startswith("<!doctype html>") and "<img src='r_spectrum.png'" in text and "<table>" in text
    rep = write_report(releases["second_moment"].path)
    assert rep.path == releases["second_moment"].path + ".report.md" and os.path.isfile(rep.path)
    assert set(os.listdir(releases["second_moment"].path)) == {"manifest.json", "matrix.parquet"}  # untouched


def test_report_of_a_non_release_is_a_clean_error(tmp_path, capsys):
    assert cli_main(["report", str(tmp_path)]) == 2
    assert "not a spark-dp release directory" in capsys.readouterr().err
    with pytest.raises(SchemaError):
        write_report(str(tmp_path))


def test_entries_are_named_and_matrices_shown_whole(releases, tmp_path):
    """Matrix entries by column names (the intercept's constant and the label included), a symmetric matrix as
    its whole upper triangle (no "… (1 more)" for a 3×3), each privacy fact once, the ridge the shift keeps."""
    rel = releases["regression_bounded"]
    text = open(write_report(rel, out=str(tmp_path / "reg.md")).path).read()
    matrix = text[text.index("### matrix"):]
    rows = [ln.split("|")[1].strip() for ln in matrix.splitlines() if ln.startswith("| ") and "×" in ln]
    names = ["x1", "x2", "1 (intercept)", "y"]
    assert rows == [f"{a} × {b}" for i, a in enumerate(names) for b in names[i:]]
    assert "more)" not in matrix and "(0, 3)" not in text
    assert "Interval of: A^T A +" in matrix  # what the interval is of, the shift's ridge included
    low, high = rel.interval("matrix")
    assert np.all((low <= rel["matrix"]) & (rel["matrix"] <= high))  # the released value inside its interval
    privacy = text[text.index("## Privacy spent"):text.index("## Payload")]
    keys = [ln.split("|")[1].strip() for ln in privacy.splitlines() if ln.startswith("| ") and "---" not in ln]
    assert len(keys) == len(set(keys)) and "noise" not in keys and "noise_family" in keys and "mechanism" not in keys
    ridge = rel.manifest["solution"]["ridge_in_release"]
    assert ridge["ridge"] == pytest.approx(2 * rel.privacy["noise_scale"] * np.sqrt(4))  # c = 2σ√d, d = 4
    assert "## Ridge in the release" in text and "| intercept |" in text
    np.testing.assert_allclose(np.asarray(ridge["coefficients_shrinkage"]) * ridge["coefficients_without_ridge"],
                               rel["coefficients"])
    sm = releases["second_moment_3"]
    text = open(write_report(sm, out=str(tmp_path / "sm.md")).path).read()
    assert "more)" not in text and "| x1 × x3 |" in text and "| x3 × x3 |" in text


def test_coefficient_plot_has_one_panel_per_term(releases):
    """Mixed scales (x2 in units 100× x1's): every coefficient and the intercept on its own axis."""
    from spark_dp.report.report import _coefficients

    rel = releases["regression_bounded"]
    fig = _coefficients(rel, [])
    titles = [ax.get_title() for ax in fig.axes if ax.axison]
    assert titles == ["x1", "x2", "intercept"]
    low = [*rel.interval("coefficients")[0], rel.interval("intercept")[0][0]]
    high = [*rel.interval("coefficients")[1], rel.interval("intercept")[1][0]]
    for ax, v, a, b in zip(fig.axes, [*rel["coefficients"], rel["intercept"][0]], low, high, strict=False):
        y0, y1 = ax.get_ylim()
        span = max(b, v, 0.0) - min(a, v, 0.0)
        assert y0 <= min(a, v) and max(b, v) <= y1  # the value and its interval are on its panel
        assert y1 - y0 <= 1.2 * span  # scaled to them (and 0), not to another term's
