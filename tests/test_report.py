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
