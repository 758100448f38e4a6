"""The private clipping report (issue #14 §1): counts, sensitivity, budget split, dry run, report.

* numpy: the Gram accumulator counts the rows it adds and those clipped (clamp flag or norm above B) under
  both non-finite policies; the stated L1 sensitivity of (clipped, rows) is the brute-force maximum over
  units of up to m rows under add/remove and replace; the intervals are the Laplace ones;
* Spark: the counts come from the Gram job (the exact numbers, with bounds, without, on the direct Parquet
  path and with m = 2 rows per unit) while the matrix stays what it is without the report; the release
  charges one Laplace event at ε·share beside the mechanism's, at ε·(1 − share); the dry run shows that
  cost; ``spark-dp report`` shows the fraction; bad values fail before any charge.

The noise audits (white-box and black-box, m = 4, add/remove and replace) are rows of
tests/test_reliability_audits.py.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest

from spark_dp.aggregates._blocks import GramAccumulator
from spark_dp.errors import ConfigError
from spark_dp.privacy import Budget, Chokepoint, NumpySampler, SeededSampler, open_ledger
from spark_dp.second_moment import api
from spark_dp.second_moment.clipping import (
    clipping_sensitivity,
    laplace_half_width,
    plan_clipping_report,
    release_clipping,
)
from spark_dp.session import DPSession
from tests.test_bounds import bounded_rows

BOUNDS = {"a": (0.0, 5.0), "b": (10.0, 30.0), "y": (-30.0, 30.0)}


class Zero(SeededSampler):
    """No noise (exactness tests only; not private)."""

    def gaussian(self, values, sigma, l2_sensitivity):
        return np.asarray(values, dtype=np.float64).copy()

    def laplace(self, values, scale, l1_sensitivity):
        return np.asarray(values, dtype=np.float64).copy()


# -- numpy ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("policy", ["drop", "zero"])
def test_accumulator_counts_clamped_and_norm_clipped_rows(policy):
    rng = np.random.default_rng(1)
    x = rng.normal(0, 1, size=(500, 3))
    x[::7, 1] = np.nan
    flags = (rng.uniform(size=500) < 0.2).astype(float)
    acc = GramAccumulator(3, 2.0, policy, count_clipped=True, flag_column=True)
    acc.chunk_rows = 64  # several chunks
    acc.add(np.column_stack([x, flags]))
    keep = np.isfinite(x).all(axis=1) if policy == "drop" else np.ones(500, bool)
    xz = np.where(np.isfinite(x), x, 0.0)[keep]
    clipped = (np.linalg.norm(xz, axis=1) > 2.0) | (flags[keep] > 0)
    assert acc.rows == keep.sum() and acc.clipped == clipped.sum() and 0 < acc.clipped < acc.rows
    plain = GramAccumulator(3, 2.0, policy)
    plain.chunk_rows = 64  # the same chunks: the same sums
    plain.add(x)
    assert np.array_equal(acc.upper(), plain.upper())  # the flag is not part of the matrix
    norm_only = GramAccumulator(3, 2.0, policy, count_clipped=True)
    norm_only.add(x)
    assert norm_only.clipped == (np.linalg.norm(xz, axis=1) > 2.0).sum()


@pytest.mark.parametrize("neighbors", ["add_remove", "replace"])
@pytest.mark.parametrize("m", [1, 2, 4])
def test_sensitivity_is_the_brute_force_maximum(m, neighbors):
    # a unit: k rows (0 ≤ k ≤ m after the nonfinite policy: all its rows may be dropped), j of them clipped;
    # the others' rows are the same in D and D'
    units = [(k, j) for k in range(0, m + 1) for j in range(k + 1)]
    if neighbors == "add_remove":
        worst = max(k + j for k, j in units)  # |Δn| + |Δc|
    else:
        worst = max(abs(k2 - k1) + abs(j2 - j1) for (k1, j1), (k2, j2) in itertools.product(units, units))
    assert clipping_sensitivity(max_rows_per_unit=m, neighbors=neighbors) == worst
    plan = plan_clipping_report(0.05, max_rows_per_unit=m, neighbors=neighbors)
    assert plan.scale == pytest.approx(worst / 0.05) and plan.event.noise_multiplier == pytest.approx(20.0)


def test_release_is_the_laplace_draw_with_its_intervals(tmp_path):
    plan = plan_clipping_report(0.1)
    cp = Chokepoint(open_ledger(f"sqlite:///{tmp_path}/l.db"), dataset_id="d", release_id="r", request_sha256="x",
                    sampler=SeededSampler(np.random.default_rng(3)), limit=Budget(1.0, 1e-6))
    cp.charge([plan.event], Budget(0.1, 0.0))
    arrays, unc = release_clipping(cp, plan, np.array([30.0, 1000.0]), 0.95)
    assert not cp.unused_events
    c, n = arrays["clipping_counts"]
    assert arrays["clipped_fraction"][0] == pytest.approx(min(max(c, 0.0) / n, 1.0))  # clamped to [0, 1]
    t = laplace_half_width(plan.scale, 0.95)
    assert t == pytest.approx(plan.scale * math.log(20))
    assert np.allclose(unc["clipping_counts"].high - arrays["clipping_counts"], t)
    f = unc["clipped_fraction"]
    assert f.kind == "bound" and f.low[0] <= arrays["clipped_fraction"][0] <= f.high[0] and 0 <= f.low[0]
    # coverage of the counts' interval over the noise (its law: exact)
    rng = np.random.default_rng(0)
    noise = rng.laplace(0, plan.scale, size=(20000, 2))
    assert abs(np.mean(np.abs(noise) <= t) - 0.95) < 0.01


# -- Spark ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def data(spark):
    X, y = bounded_rows()  # row 0's a and row 2's y clamped, row 1 NaN (dropped)
    X[5, 0] = -1.0  # clamped too
    unit = np.arange(len(y)) // 3  # 3 rows per unit
    pdf = pd.DataFrame({"a": X[:, 0], "b": X[:, 1], "y": y, "u": unit})
    return spark.createDataFrame(pdf).cache(), X, y


def _session(tmp_path, sampler, name="t.clip"):
    return DPSession(name, ledger=f"sqlite:///{tmp_path}/ledger.db", epsilon_limit=50.0, delta_limit=1e-3,
                     output=str(tmp_path / "rel"), sampler=sampler)


def test_counts_come_from_the_gram_job_and_the_matrix_is_unchanged(data, tmp_path):
    df, X, y = data
    s = _session(tmp_path, Zero())
    kw = dict(epsilon=1.0, delta=1e-6, bounds=BOUNDS)
    rel = api.linear_regression(s, df, ["a", "b"], "y", clipping_report=True, **kw)
    plain = api.linear_regression(s, df, ["a", "b"], "y", **kw)
    assert rel["clipping_counts"].tolist() == [3.0, 399.0]  # rows 0, 2, 5 clamped; row 1 dropped (NaN)
    assert rel["clipped_fraction"][0] == pytest.approx(3 / 399)
    assert np.array_equal(rel["matrix"], plain["matrix"]) and set(plain.arrays) == {"coefficients", "intercept",
                                                                                   "matrix"}
    # without bounds: the norm bound alone clips (rows of [a, b] with norm above 20)
    m = api.second_moment(s, df, ["a", "b"], epsilon=1.0, delta=1e-6, norm_bound=20.0, clipping_report=True)
    keep = ~np.isnan(X).any(axis=1)
    assert m["clipping_counts"].tolist() == [float((np.linalg.norm(X[keep], axis=1) > 20.0).sum()), 399.0]
    # with a privacy unit of m = 2: at most 2 rows of each unit enter (and are counted)
    u = api.second_moment(_session(tmp_path, Zero(), "t.clip.units"), df, ["a", "b"], epsilon=1.0, delta=1e-6, norm_bound=1e6, clipping_report=True,
                          privacy_unit="u", max_rows_per_unit=2, nonfinite="zero")
    assert u["clipping_counts"].tolist() == [0.0, float(2 * 133 + 1)]  # 134 units: 133 of 3 rows, one of 1


def test_direct_parquet_path_counts_the_same(spark, data, tmp_path):
    df, X, _ = data
    path = str(tmp_path / "p.parquet")
    df.select("a", "b").write.parquet(path)
    s = _session(tmp_path, Zero())
    pq = spark.read.parquet(path)
    kw = dict(epsilon=1.0, delta=1e-6, norm_bound=20.0, clipping_report=True)
    direct = api.second_moment(s, pq, ["a", "b"], source_paths=[path], **kw)
    reader = api.second_moment(s, df, ["a", "b"], **kw)
    assert direct["clipping_counts"].tolist() == reader["clipping_counts"].tolist()
    assert np.allclose(direct["matrix"], reader["matrix"], rtol=1e-12)


def test_release_charges_its_own_laplace_event_beside_the_mechanism(data, tmp_path):
    df, _, _ = data
    s = _session(tmp_path, NumpySampler())
    rel = api.linear_regression(s, df, ["a", "b"], "y", epsilon=1.0, delta=1e-6, bounds=BOUNDS,
                                clipping_report=True, clipping_report_share=0.1)
    events = rel.privacy["events"]
    assert [e["type"] for e in events] == ["gaussian", "laplace"]
    assert events[1]["noise_multiplier"] == pytest.approx(1 / 0.1)
    p = rel.privacy
    assert p["epsilon"] == 1.0 and p["mechanism_epsilon"] == pytest.approx(0.9)
    assert p["clipping_report_epsilon"] == pytest.approx(0.1)
    # the mechanism is calibrated to the remaining 0.9: the same σ as a release at ε = 0.9 without the report
    ref = api.linear_regression(s, df, ["a", "b"], "y", epsilon=0.9, delta=1e-6, bounds=BOUNDS)
    assert p["noise_sigma"] == pytest.approx(ref.privacy["noise_sigma"])
    report = rel.manifest["clipping_report"]
    assert report["l1_sensitivity"] == 2.0 and report["laplace_scale"] == pytest.approx(20.0)
    assert rel.uncertainty["clipped_fraction"].kind == "bound"
    low, high = rel.interval("clipping_counts")
    assert np.all(low < rel["clipping_counts"]) and np.all(rel["clipping_counts"] < high)
    st = s.budget()
    assert st.releases == 2 and st.spent_epsilon <= 1.9 + 1e-6
    # with norm_bound="auto" too: three events, the mechanism gets what both shares leave
    auto = api.second_moment(s, df, ["a", "b"], epsilon=1.0, delta=1e-6, bounds={"a": BOUNDS["a"]},
                             norm_bound="auto", clipping_report=True)
    assert [e["type"] for e in auto.privacy["events"]] == ["epsilon_delta", "gaussian", "laplace"]
    assert auto.privacy["mechanism_epsilon"] == pytest.approx(0.85)
    assert {"matrix", "clipped_fraction", "clipping_counts"} <= set(auto.uncertainty)  # kept on the auto path


def test_dry_run_shows_the_cost_and_charges_nothing(data, tmp_path):
    df, _, _ = data
    s = _session(tmp_path, NumpySampler())
    pv = s.preview.linear_regression(df, ["a", "b"], "y", epsilon=1.0, delta=1e-6, bounds=BOUNDS,
                                     clipping_report=True)
    assert [e["type"] for e in pv.events] == ["gaussian", "laplace"] and pv.cost["epsilon"] == 1.0
    assert pv.privacy["clipping_report_epsilon"] == pytest.approx(0.05)
    clip = pv.accuracy["clipping_report"]
    assert clip["count_half_width"] == pytest.approx(laplace_half_width(2.0 / 0.05, 0.95))
    assert s.budget() is None or s.budget().releases == 0


def test_report_shows_the_fraction(data, tmp_path):
    from spark_dp.report import write_report

    df, _, _ = data
    s = _session(tmp_path, NumpySampler())
    rel = api.second_moment(s, df, ["a", "b"], epsilon=1.0, delta=1e-6, bounds={"a": BOUNDS["a"], "b": BOUNDS["b"]},
                            clipping_report=True, release_id="clip-rep")
    out = write_report(rel.path, out=str(tmp_path / "r.md"))
    text = open(out.path).read()
    assert "clipped_fraction" in text and "clipping_counts" in text


@pytest.mark.parametrize("over, needle", [
    (dict(clipping_report="yes"), "clipping_report"),
    (dict(clipping_report=True, clipping_report_share=0.0), "clipping_report_share"),
    (dict(clipping_report=True, clipping_report_share=1.5), "clipping_report_share"),
    (dict(clipping_report=True, norm_bound="auto", norm_bound_share=0.5, clipping_report_share=0.5),
     "clipping_report_share"),
    (dict(clipping_report=True, mechanism="jl_ridge", projection="rows"), "clipping_report"),
])
def test_bad_requests_fail_before_any_charge(data, tmp_path, over, needle):
    df, _, _ = data
    s = _session(tmp_path, NumpySampler())
    kw = dict(epsilon=1.0, delta=1e-6, norm_bound=30.0)
    kw.update(over)
    with pytest.raises(ConfigError, match=needle):
        api.second_moment(s, df, ["a", "b"], **kw)
    assert s.budget() is None or s.budget().releases == 0


def shipped_regression_config(tmp_path, monkeypatch) -> dict:
    """conf/linear_regression_analyze_gauss.yaml as a dict, run from a directory holding the example data."""
    import os

    import yaml

    from spark_dp.cli.config import _Loader
    from spark_dp.cli.example_data import write_example_data

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    write_example_data(str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    with open(os.path.join(root, "conf", "linear_regression_analyze_gauss.yaml")) as fh:
        return yaml.load(fh, Loader=_Loader)


def planned_events(raw: dict):
    """The events the linear_regression task plans for the config ``raw`` (and the config)."""
    from spark_dp.cli.config import JobConfig
    from spark_dp.cli.tasks import tasks

    config = JobConfig.from_dict(raw)
    return tasks()["linear_regression"].plan(config), config


def test_config_plans_the_same_events_as_the_api(tmp_path, monkeypatch):
    raw = shipped_regression_config(tmp_path, monkeypatch)
    raw["params"] = {**(raw.get("params") or {}), "clipping_report": True, "clipping_report_share": 0.2}
    events, config = planned_events(raw)
    assert [e.kind for e in events] == ["gaussian", "laplace"]
    assert events[1].noise_multiplier == pytest.approx(1 / (0.2 * config.privacy.epsilon))
    raw["params"].update(norm_bound_share=0.5, clipping_report_share=0.5)
    raw["privacy"] = {**raw["privacy"], "norm_bound": "auto"}
    with pytest.raises(ConfigError, match="clipping_report_share"):
        planned_events(raw)
