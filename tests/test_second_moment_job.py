"""The conf/ second-moment, regression and PCA configs run with the job; bad configs fail before Spark."""

import glob
import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

import spark_dp
from spark_dp.cli.main import main as cli_main
from tests._jobs import DELETE, charges, localise, override, write_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = sorted(
    glob.glob(os.path.join(ROOT, "conf", "second_moment_*.yaml"))
    + glob.glob(os.path.join(ROOT, "conf", "linear_regression_*.yaml"))
    + glob.glob(os.path.join(ROOT, "conf", "pca_*.yaml"))
)


def _write_data(path, n=500, seed=8):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3)) * 0.3
    y = X @ np.array([0.8, -0.4, 0.3]) + 0.05 * rng.normal(size=n)
    pq.write_table(pa.table({"x1": X[:, 0], "x2": X[:, 1], "x3": X[:, 2], "y": y,
                             "name": [f"n{i}" for i in range(n)]}), path)


def _localise(tmp_path, cfg):
    return localise(cfg, tmp_path, data=tmp_path / "data.parquet")


def _run(tmp_path, cfg):
    return cli_main(["release", write_config(tmp_path, cfg)])


def test_there_is_a_config_per_mechanism_and_task():
    names = {os.path.basename(c) for c in CONFIGS}
    for m in ("analyze_gauss", "jl_ridge", "wishart", "inverse_wishart"):
        assert f"second_moment_{m}.yaml" in names and f"linear_regression_{m}.yaml" in names
    assert "linear_regression_adassp.yaml" in names and any(n.startswith("pca_") for n in names)


@pytest.mark.parametrize("config", CONFIGS, ids=[os.path.basename(c) for c in CONFIGS])
def test_config_runs_with_the_job(spark, tmp_path, capsys, config):
    _write_data(tmp_path / "data.parquet")
    with open(config) as fh:
        raw = yaml.safe_load(fh)
    assert raw["privacy"]["sampler"] == "secure"
    assert _run(tmp_path, _localise(tmp_path, raw)) == 0
    out = json.loads(capsys.readouterr().out)
    rel = spark_dp.load_release(out["path"])
    task = raw["task"]
    expected = {"second_moment": {"matrix"}, "pca": {"eigenvalues", "eigenvectors", "matrix"},
                "linear_regression": {"coefficients", "xtx", "xty", "lambda"} if raw["mechanism"] == "adassp"
                else {"coefficients", "matrix"}}[task]
    if raw.get("params", {}).get("standardize") == "mean":  # PCA centred at its released mean
        expected = expected | {"mean", "count"}
    assert set(rel.arrays) == expected
    if task == "linear_regression":
        assert rel["coefficients"].shape == (3,) and np.all(np.isfinite(rel["coefficients"]))
    assert rel.manifest["privacy"]["theorem_neighbors"]
    params = raw.get("params", {})
    if params.get("calibration") == "paper":
        assert rel.manifest["params"]["calibration"] == "paper"
    if "public_n" in params:  # the public n and the posterior dof m = n + m0 are recorded
        assert rel.manifest["privacy"]["public_n"] == params["public_n"]
        assert rel.manifest["privacy"]["dof"] == params["public_n"] + params["prior_dof"]
    assert charges(tmp_path) == 1


BAD = [
    ("no label", "linear_regression_wishart.yaml", {"dataset.label": DELETE}, "dataset.label"),
    ("label missing in data", "linear_regression_wishart.yaml", {"dataset.label": "zzz"}, "zzz"),
    ("label non-numeric", "linear_regression_wishart.yaml", {"dataset.label": "name"}, "name"),
    ("pca without k", "pca_wishart.yaml", {"params.k": DELETE}, "params.k"),
    ("pca k > d", "pca_wishart.yaml", {"params.k": 4}, "params.k"),
    ("k for second_moment", "second_moment_wishart.yaml", {"params.k": 2}, "params.k"),
    ("wishart dof too small", "second_moment_wishart.yaml", {"params.dof": 50}, "dof"),
    ("jl r too small", "second_moment_jl_ridge.yaml", {"params.projection_rows": 3}, "projection_rows"),
    ("adassp for pca", "pca_wishart.yaml", {"mechanism": "adassp"}, "mechanism"),
    ("paper AG at eps 1", "linear_regression_analyze_gauss_paper.yaml", {"privacy.epsilon": 1.0}, "epsilon"),
    ("paper IW", "linear_regression_inverse_wishart.yaml", {"params.calibration": "paper"}, "calibration"),
    ("public_n under add/remove", "linear_regression_inverse_wishart_posterior.yaml",
     {"privacy.neighbors": "add_remove"}, "public_n"),
    ("public_n with dof", "linear_regression_inverse_wishart_posterior.yaml", {"params.dof": 300}, "dof"),
]


@pytest.mark.parametrize("name, conf, over, needle", BAD, ids=[b[0] for b in BAD])
def test_bad_configs_fail_cleanly(spark, tmp_path, capsys, name, conf, over, needle):
    _write_data(tmp_path / "data.parquet")
    with open(os.path.join(ROOT, "conf", conf)) as fh:
        cfg = _localise(tmp_path, yaml.safe_load(fh))
    assert _run(tmp_path, override(cfg, over)) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err
    assert charges(tmp_path) == 0 and not (tmp_path / "releases").exists()
