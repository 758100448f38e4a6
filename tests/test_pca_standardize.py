"""PCA on columns of mixed scales: ``standardize="bounds"`` (each column to [-1, 1] by its public bounds, centred
at their midpoint) and the report/manifest flags for bounds that carry no information."""

from __future__ import annotations

import numpy as np
import pytest

import spark_dp
from spark_dp.errors import ConfigError
from spark_dp.report import write_report

BOUNDS = {"age": (18.0, 90.0), "income": (0.0, 300_000.0), "tenure": (0.0, 40.0)}


@pytest.fixture(scope="module")
def mixed(spark):
    rng = np.random.default_rng(3)  # data for the test, not noise
    n = 4000
    age = rng.uniform(18, 90, n)
    tenure = np.clip((age - 18) * 0.4 + rng.normal(0, 3, n), 0, 40)  # correlated with age
    income = rng.uniform(20_000, 200_000, n)
    return spark.createDataFrame([(float(a), float(i), float(t)) for a, i, t in zip(age, income, tenure, strict=True)],
                                 "age double, income double, tenure double")


def _dp(tmp_path):
    return spark_dp.DPSession("t.customers", ledger=f"sqlite:///{tmp_path}/ledger.db", epsilon_limit=20.0,
                              delta_limit=1e-5, output=str(tmp_path / "out"), sampler="numpy")


def test_standardize_bounds_stops_the_largest_unit_dominating(mixed, tmp_path):
    dp = _dp(tmp_path)
    cols = ["age", "income", "tenure"]
    raw = dp.pca(mixed, cols, 2, epsilon=2.0, delta=1e-6, bounds=BOUNDS)
    std = dp.pca(mixed, cols, 2, epsilon=2.0, delta=1e-6, bounds=BOUNDS, standardize="bounds")
    assert abs(raw["eigenvectors"][0][1]) > 0.999  # in raw units the first component is just income
    assert abs(std["eigenvectors"][0][1]) < 0.9  # scaled: age and tenure (correlated) share the first one
    assert std.manifest["standardize"]["how"] == "bounds" and std.manifest["params"]["standardize"] == "bounds"
    assert "standardize" not in raw.manifest
    # the scaled coordinates' exact second moment: its top eigenvector agrees with the release's within its bound
    x = np.array(mixed.collect())
    lo, hi = np.array([BOUNDS[c] for c in cols]).T
    z = (x - (lo + hi) / 2) / ((hi - lo) / 2)
    top = np.linalg.eigh(z.T @ z)[1][:, -1]
    v = std["eigenvectors"][0] * np.sign(std["eigenvectors"][0] @ top)
    low, high = std.interval("eigenvectors")
    s = np.sign(std["eigenvectors"][0] @ top)
    assert np.all((low[0] <= s * top) & (s * top <= high[0]))
    assert np.abs(v - top).max() < 0.05
    text = open(write_report(std, out=str(tmp_path / "std.md")).path).read()
    assert "standardised (`standardize: bounds`)" in text


def test_standardize_needs_bounds_for_every_column(mixed, tmp_path):
    dp = _dp(tmp_path)
    with pytest.raises(ConfigError, match="'standardize' parameter of pca"):
        dp.pca(mixed, ["age", "income"], 1, epsilon=1.0, delta=1e-6, norm_bound=1.0, standardize="bounds")
    with pytest.raises(ConfigError, match="'standardize' parameter of pca"):
        dp.pca(mixed, ["age", "income"], 1, epsilon=1.0, delta=1e-6, bounds={"age": (18.0, 90.0)},
               norm_bound=2.0, standardize="bounds")
    with pytest.raises(ConfigError, match="standardize"):
        dp.pca(mixed, ["age", "income"], 1, epsilon=1.0, delta=1e-6, bounds={c: BOUNDS[c] for c in ("age", "income")},
               standardize="zscore")
    assert dp.budget() is None and not (tmp_path / "out").exists()  # nothing charged or written


def test_bounds_that_carry_no_information_are_flagged(mixed, tmp_path):
    """Raw units, tiny ε: the noise swamps the eigengaps; the manifest and the report say which bounds say nothing."""
    dp = _dp(tmp_path)
    rel = dp.pca(mixed, ["age", "income", "tenure"], 2, epsilon=0.01, delta=1e-6, bounds=BOUNDS)
    flags = rel.manifest["accuracy"]["uninformative"]
    low, high = rel.interval("eigenvectors")
    sines_one = [i for i in range(2) if np.allclose((high[i] - low[i]) / 2, np.sqrt(2))]  # sqrt(2) sin(theta), = 1
    assert [f for f in flags if f.startswith("eigenvector")] == [
        f"eigenvector {i + 1}: no information on its direction (Davis-Kahan sin(theta) = 1: the noise is larger "
        "than its eigengap, so its bounds cover every unit vector)" for i in sines_one]
    assert sines_one  # this release is such a case
    text = open(write_report(rel, out=str(tmp_path / "r.md")).path).read()
    assert "Bounds that carry no information" in text and "eigenvector 2: no information" in text
    good = dp.pca(mixed, ["age", "income", "tenure"], 1, epsilon=5.0, delta=1e-6, bounds=BOUNDS)
    assert not [f for f in good.manifest["accuracy"]["uninformative"] if f.startswith("eigenvector")]
