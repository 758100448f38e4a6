"""The paper modes of the second-moment family: ``calibration="paper"`` and the
inverse-Wishart posterior m = n + m₀ with a public n.

* Analyze Gauss in paper mode uses σ = Δ·√(2 ln(2/δ))/ε (Sheffet Sec. 2),
  only for ε < 1, and is charged as the Gaussian mechanism at that noise
  multiplier; white-box (χ² variance of the real charged chokepoint's noise)
  and black-box audits, each catching an under-noised variant.
* Wishart in paper mode plans Sheffet's k, as the default does.
* Inverse-Wishart with ``public_n``: m = public_n + prior_dof, replace-one
  neighbours only, the exact profile at that m (group privacy of size 2).
* Bad combinations are ConfigErrors naming the parameter, with nothing charged.
"""

import math

import dp_accounting
import numpy as np
import pandas as pd
import pytest

from spark_dp.errors import ConfigError
from spark_dp.privacy import Budget, Chokepoint, GaussianEvent, NumpySampler, SeededSampler, open_ledger
from spark_dp.privacy.accountant import compose_epsilon
from spark_dp.privacy.calibration import gaussian_noise_multiplier
from spark_dp.second_moment import (
    analyze_gauss,
    analyze_gauss_plan,
    api,
    inverse_wishart_plan,
    wishart_min_dof,
    wishart_plan,
)
from spark_dp.session import DPSession
from tests._audit import chi2_variance_pvalue, empirical_epsilon
from tests._samplers import UnderNoised

DELTA, B = 1e-6, 1.0
COLS = ["x1", "x2", "x3"]


def paper_z(eps, delta):
    """Sheffet Sec. 2: N(0, 2Δ² ln(2/δ)/ε²), computed here independently of the code."""
    return math.sqrt(2.0 * math.log(2.0 / delta)) / eps


@pytest.fixture(scope="module")
def data(spark):
    rng = np.random.default_rng(5)
    n = 200
    X = rng.normal(size=(n, 3)) * 0.3
    y = X @ np.array([0.5, -0.2, 0.1]) + 0.02 * rng.normal(size=n)
    pdf = pd.DataFrame({"x1": X[:, 0], "x2": X[:, 1], "x3": X[:, 2], "y": y})
    return spark.createDataFrame(pdf).cache(), n


def _session(tmp_path, sampler=None):
    return DPSession("t.paper", ledger=f"sqlite:///{tmp_path}/ledger.db", epsilon_limit=50.0, delta_limit=1e-3,
                     output=str(tmp_path / "rel"), sampler=sampler or NumpySampler())


def _charged(session):
    st = session.budget()
    return 0 if st is None else st.releases


# ------------------------------------------------------------ Analyze Gauss
@pytest.mark.parametrize("eps", [0.05, 0.25, 0.5, 0.99])
@pytest.mark.parametrize("neighbors, sens", [("add_remove", B**2), ("replace", math.sqrt(2) * B**2)])
def test_paper_analyze_gauss_sigma_is_the_papers_formula(eps, neighbors, sens):
    event, sigma, delta_sens = analyze_gauss_plan(epsilon=eps, delta=DELTA, norm_bound=B, neighbors=neighbors,
                                                  calibration="paper")
    assert delta_sens == pytest.approx(sens)
    assert event == GaussianEvent(noise_multiplier=paper_z(eps, DELTA))
    assert sigma == pytest.approx(paper_z(eps, DELTA) * sens, rel=1e-12)
    # it over-noises the exact calibration, so it is a valid (eps, delta) Gaussian mechanism
    assert event.noise_multiplier > dp_accounting.get_sigma_gaussian(eps, DELTA)
    assert dp_accounting.get_epsilon_gaussian(event.noise_multiplier, DELTA) < eps


@pytest.mark.parametrize("eps", [1.0, 2.0])
def test_paper_analyze_gauss_refused_at_epsilon_one_or_more(eps):
    with pytest.raises(ConfigError, match="'epsilon'.*calibration='paper'"):
        analyze_gauss_plan(epsilon=eps, delta=DELTA, norm_bound=B, calibration="paper")


@pytest.mark.parametrize("sampler, ok", [(NumpySampler(), True), (UnderNoised(), False)], ids=["numpy", "halved"])
def test_white_box_paper_analyze_gauss_noise(tmp_path, sampler, ok):
    """The real charged chokepoint's noise has the paper's σ (χ² test on 105 × 20 draws)."""
    eps, d = 0.5, 14
    event, sigma, sens = analyze_gauss_plan(epsilon=eps, delta=DELTA, norm_bound=B, calibration="paper")
    ledger = open_ledger(f"sqlite:///{tmp_path}/l.db")
    draws = []
    for i in range(20):
        cp = Chokepoint(ledger, dataset_id="t", release_id=f"r{i}", request_sha256=f"x{i}", sampler=sampler,
                        limit=Budget(100.0, 1e-2))
        cp.charge([event], Budget(eps, DELTA))
        out = analyze_gauss(np.zeros((d, d)), chokepoint=cp, sigma=sigma, sensitivity=sens)
        draws.append(out[np.triu_indices(d)])
    p = chi2_variance_pvalue(np.concatenate(draws), paper_z(eps, DELTA) * B**2)
    assert (p > 1e-6) if ok else (p < 1e-6)


@pytest.mark.parametrize("factor, ok", [(1.0, True), (0.25, False)])
def test_black_box_paper_analyze_gauss(factor, ok):
    """Neighbouring Gram matrices (one row v added) projected on vvᵀ's entry: the empirical
    ε stays below the claim at the paper's σ and exceeds it at a quarter of it."""
    eps = 0.5
    _, sigma, _ = analyze_gauss_plan(epsilon=eps, delta=DELTA, norm_bound=B, calibration="paper")
    rng = np.random.default_rng(3)
    n = 300_000
    # the upper triangle moves by at most Δ = B² (one diagonal entry for v = B·e₁): worst case
    x0 = rng.normal(0.0, factor * sigma, size=n)
    x1 = B**2 + rng.normal(0.0, factor * sigma, size=n)
    lb = max(empirical_epsilon(x0, x1, DELTA), empirical_epsilon(-x1, -x0, DELTA))
    assert (lb < eps) if ok else (lb > eps)


def test_paper_analyze_gauss_release_charges_what_it_guarantees(data, tmp_path):
    df, _ = data
    s = _session(tmp_path)
    eps = 0.5
    rel = api.linear_regression(s, df, COLS, "y", epsilon=eps, delta=DELTA, norm_bound=B, calibration="paper",
                                postprocess="shift", release_id="ag-paper", fit_intercept=False)
    pv = rel.privacy
    assert pv["events"] == [{"type": "gaussian", "noise_multiplier": pytest.approx(paper_z(eps, DELTA))}]
    assert pv["noise_sigma"] == pytest.approx(paper_z(eps, DELTA) * B**2)
    assert "ln(2/delta)" in pv["calibration"] and rel.manifest["params"]["calibration"] == "paper"
    spent = s.budget().spent_epsilon
    assert spent == pytest.approx(compose_epsilon([GaussianEvent(noise_multiplier=paper_z(eps, DELTA))], 1e-3), rel=1e-6)
    # over-noised: it costs less than an exactly calibrated (eps, delta) release would
    assert spent < compose_epsilon([GaussianEvent(noise_multiplier=gaussian_noise_multiplier(eps, DELTA))], 1e-3)
    assert _charged(s) == 1
    again = api.linear_regression(s, df, COLS, "y", epsilon=eps, delta=DELTA, norm_bound=B, calibration="paper",
                                  postprocess="shift", release_id="ag-paper", fit_intercept=False)
    assert again.reused and _charged(s) == 1


# ------------------------------------------------------------ Wishart
def test_paper_wishart_is_sheffets_bound(data, tmp_path):
    for eps in (0.1, 0.5, 1.0):
        assert wishart_plan(d=4, epsilon=eps, delta=DELTA)[1] == 4 + math.ceil(28 * math.log(4 / DELTA) / eps**2)
    df, _ = data
    s = _session(tmp_path)
    rel = api.second_moment(s, df, COLS, epsilon=0.5, delta=DELTA, norm_bound=B, mechanism="wishart",
                            calibration="paper")
    assert rel.manifest["params"] == {"postprocess": "none", "dof": wishart_min_dof(3, 0.5, DELTA), "calibration": "paper"}
    assert rel.privacy["calibration"].startswith("paper: Sheffet Thm 4.1")
    assert rel.privacy["events"][0] == {"type": "epsilon_delta", "epsilon": 0.5, "delta": DELTA, "mechanism": "wishart"}


# ------------------------------------------------------------ inverse-Wishart m = n + m0
def test_inverse_wishart_posterior_dof_with_public_n(data, tmp_path):
    df, n = data
    s = _session(tmp_path)
    eps = 1.0
    rel = api.second_moment(s, df, COLS, epsilon=eps, delta=DELTA, norm_bound=B, mechanism="inverse_wishart",
                            neighbors="replace", public_n=n, prior_dof=7)
    pv = rel.privacy
    m = n + 7
    assert pv["dof"] == m and pv["public_n"] == n and pv["prior_dof"] == 7
    assert "n + m0" in pv["dof_rule"] and "replace" in pv["theorem_neighbors"]
    assert rel.manifest["params"] == {"postprocess": "none", "dof": m, "public_n": n, "prior_dof": 7}
    # the exact profile at m, replace-one by group privacy: the same w as planning dof = m directly
    ev, w, _ = inverse_wishart_plan(epsilon=eps, delta=DELTA, norm_bound=B, dof=m, neighbors="replace")
    assert pv["ridge_w"] == pytest.approx(w) and pv["events"][0]["type"] == "epsilon_delta"
    assert np.all(np.linalg.eigvalsh(rel["matrix"]) > 0) and _charged(s) == 1
    # default m0 = d + 2
    rel2 = api.second_moment(s, df, COLS, epsilon=eps, delta=DELTA, norm_bound=B, mechanism="inverse_wishart",
                             neighbors="replace", public_n=n)
    assert rel2.privacy["dof"] == n + 5 and rel2.privacy["prior_dof"] == 5


def test_inverse_wishart_ridge_grows_with_the_posterior_dof():
    """More degrees of freedom leak more (m samples), so the calibrated prior spread grows with m."""
    ws = [inverse_wishart_plan(epsilon=0.5, delta=DELTA, norm_bound=B, dof=m, neighbors="replace")[1]
          for m in (100, 10_000, 1_000_000)]
    assert ws[0] < ws[1] < ws[2]


# ------------------------------------------------------------ bad combinations
BAD = [
    ("paper AG at eps 1", dict(mechanism="analyze_gauss", calibration="paper", epsilon=1.0), "epsilon"),
    ("paper IW", dict(mechanism="inverse_wishart", calibration="paper"), "calibration"),
    ("paper adassp", dict(mechanism="adassp", calibration="paper"), "calibration"),
    ("public_n under add/remove", dict(mechanism="inverse_wishart", public_n=200), "public_n"),
    ("public_n with dof", dict(mechanism="inverse_wishart", public_n=200, neighbors="replace", dof=50), "dof"),
    ("prior_dof without public_n", dict(mechanism="inverse_wishart", prior_dof=6), "prior_dof"),
    ("prior_dof below d", dict(mechanism="inverse_wishart", public_n=200, neighbors="replace", prior_dof=2), "prior_dof"),
    ("public_n for wishart", dict(mechanism="wishart", public_n=200, neighbors="replace"), "public_n"),
    ("public_n zero", dict(mechanism="inverse_wishart", public_n=0, neighbors="replace"), "public_n"),
]


@pytest.mark.parametrize("name, over, needle", BAD, ids=[b[0] for b in BAD])
def test_bad_paper_combinations_fail_before_any_charge(data, tmp_path, name, over, needle):
    df, _ = data
    s = _session(tmp_path)
    kw = dict(epsilon=0.5, delta=DELTA, norm_bound=B)
    kw.update(over)
    with pytest.raises(ConfigError, match=needle):
        api.linear_regression(s, df, COLS, "y", **kw)
    assert _charged(s) == 0 and not (tmp_path / "rel").exists()


def test_seeded_paper_release_is_the_shifted_noisy_gram(tmp_path):
    """The paper variant's post-processing uses the paper σ: shift = 2σ√d."""
    d, eps = 4, 0.5
    _, sigma, sens = analyze_gauss_plan(epsilon=eps, delta=DELTA, norm_bound=B, calibration="paper")

    class Zero(SeededSampler):
        def gaussian(self, values, sigma, l2_sensitivity):
            return np.asarray(values, float).copy()

    cp = Chokepoint(open_ledger(f"sqlite:///{tmp_path}/l.db"), dataset_id="t", release_id="r", request_sha256="x",
                    sampler=Zero(np.random.default_rng(0)), limit=Budget(10.0, 1e-3))
    ev, _, _ = analyze_gauss_plan(epsilon=eps, delta=DELTA, norm_bound=B, calibration="paper")
    cp.charge([ev], Budget(eps, DELTA))
    out = analyze_gauss(np.eye(d), chokepoint=cp, sigma=sigma, sensitivity=sens, postprocess="shift")
    assert np.allclose(out, (1 + 2 * paper_z(eps, DELTA) * math.sqrt(d)) * np.eye(d))


# ------------------------------------------------------------ the Section 6 benchmark (quick)
def test_section6_benchmark_runs_every_variant():
    import importlib.util
    import os

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks",
                        "second_moment_experiments.py")
    spec = importlib.util.spec_from_file_location("sm_experiments", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    # the "several regressions" data: true beta = [beta_3, 0, 0], recovered by OLS
    A, beta = mod.make_data("several", 20_000, np.random.default_rng(0))
    assert A.shape[1] == mod.Q + mod.K_REG and np.all(beta[mod.Q:] == 0) and np.linalg.norm(beta) == pytest.approx(3.0)
    b_ols = np.linalg.lstsq(A[:, :-1], A[:, -1], rcond=None)[0]
    assert np.linalg.norm(b_ols - beta) < 0.1
    grid = dict(ns=(2_000,), epsilons=(0.5,))
    res = mod.run(2, **grid)
    assert set(res) == {f"{k}|2000|0.5|{m}" for k in mod.KINDS for m in mod.MECHANISMS}
    assert all(np.isfinite(v["beta_error_median"]) and v["reps"] in (1, 2) for v in res.values())
    assert "analyze_gauss_paper" in mod.tables(res, **grid)
