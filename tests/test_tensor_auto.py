"""``bounds="auto"`` and ``norm_bound="auto"`` for the tensor family (issue #14, item 1).

The choice is the second-moment family's (spark_dp.privacy.quantile, planned
by second_moment._prepare.vector), charged as its own event first in the same
release, with the power method calibrated to the ε it leaves. Checked here:
the events and the budget split; that the decomposition is the one with the
chosen bounds (or B) given publicly, at the mechanism's ε (same starts, same
σ, to the noise); the manifest's ``bounds_auto`` / ``norm_bound_auto``; that
``spark-dp audit`` recomputes the plan; the privacy audit of a pass with
units of m = 2 rows and replace neighbours in the data's units (attained,
not exceeded; σ/2 is caught); bad requests charging nothing; the config path
and its dry run.
"""

from __future__ import annotations

import json
import math

import dp_accounting
import numpy as np
import pandas as pd
import pytest

import spark_dp
from spark_dp.errors import ConfigError
from spark_dp.privacy import SeededSampler
from tests._tensor_data import audit_bounded_pass

D = 3
COLS = [f"x{i}" for i in range(D)]
# columns whose spread is wide against their magnitude (the public grid's steps are 19 %: the selection's resolution)
CENTRE = np.array([0.0, 1000.0, -50.0])
HALF = np.array([200.0, 4800.0, 45.0])
DELTA = 1e-6
FAST = dict(k=1, restarts=3, iterations=2, mode="reuse")


def _session(tmp_path, name, seed=5, public=False):
    limits = dict(epsilon_limit=None, delta_limit=None) if public else dict(epsilon_limit=1e4, delta_limit=1e-3)
    return spark_dp.DPSession(name, ledger=f"sqlite:///{tmp_path}/{name}.db", **limits, output=str(tmp_path / name),
                              sampler=SeededSampler(np.random.default_rng(seed)))


def _spent(session) -> float:
    budget = session.budget()
    return 0.0 if budget is None else budget.spent_epsilon


@pytest.fixture(scope="module")
def raw(spark):
    """2,000 rows in their own units, one dominant skewed direction (a large third moment), a few far outliers."""
    rng = np.random.default_rng(11)
    v = np.array([0.8, 0.5, 0.33])
    A = np.clip(rng.beta(1.0, 4.0, size=(2000, 1)) * v / 0.8 + rng.normal(0, 0.02, size=(2000, D)), -1, 1)
    X = CENTRE + A * HALF
    X[:4] = CENTRE + 50 * HALF  # far outliers: the chosen bounds must not follow them
    return spark.createDataFrame(pd.DataFrame({c: X[:, i] for i, c in enumerate(COLS)})), X


def _audit_ok(session) -> None:
    from spark_dp.audit import audit_releases

    report = audit_releases(session.ledger, session.output)
    assert not [f for f in report.findings if f.kind not in ("derived",)], report.findings


@pytest.mark.parametrize("whiten", [False, True], ids=["plain", "whitened"])
def test_bounds_auto_is_the_release_with_the_chosen_bounds_at_the_rest_of_epsilon(raw, tmp_path, whiten):
    df, X = raw
    eps, share = 10.0, 0.1  # moderate: the ledger's PLD composition of a pure-DP event takes longer with its ε
    s = _session(tmp_path, "auto")
    rel = s.tensor_decomposition(df, COLS, epsilon=eps, delta=DELTA, bounds="auto", whiten=whiten,
                                 rng=np.random.default_rng(3), **FAST)
    p, m = rel.manifest["privacy"], rel.manifest
    events = p["events"]
    assert events[0] == {"type": "epsilon_delta", "epsilon": pytest.approx(eps * share), "delta": 0.0,
                         "mechanism": "exponential_quantile_bounds"}
    assert {e["type"] for e in events[1:]} == {"gaussian"}
    assert p["bounds_epsilon"] == pytest.approx(eps * share) and p["mechanism_epsilon"] == pytest.approx(eps * 0.9)
    assert p["epsilon"] == eps and p["epsilon_exact_accounting"] <= eps + 1e-9
    assert 0 < s.budget().spent_epsilon <= eps + 1e-9
    chosen = m["bounds_auto"]["bounds"]
    assert set(chosen) == set(COLS) and m["scaling"]["bounds"] == chosen and "warning" not in m["bounds_auto"]
    assert m["bounds_auto"]["score_sensitivity"] == pytest.approx(0.95)  # m = 1, add/remove
    for i, c in enumerate(COLS):  # about the data's 5-95 % quantiles (the outliers ignored): ~90 % of it inside
        lo, hi = chosen[c]
        inside = np.mean((X[:, i] >= lo) & (X[:, i] <= hi))
        assert 0.75 < inside < 0.995 and hi < X[:4, i].min(), (c, lo, hi, inside)
    # the release with those bounds given publicly at the mechanism's epsilon: same plan (its dry run: no job) and,
    # without whitening, the same result to the noise (same starts)
    ref_session = _session(tmp_path, "ref")
    kw = dict(epsilon=eps * 0.9, delta=DELTA, bounds=chosen, whiten=whiten, rng=np.random.default_rng(3), **FAST)
    planned = ref_session.preview.tensor_decomposition(df, COLS, **kw)
    for key in ("sensitivity", "noise_scale", "noise_multiplier", "second_moment_sigma", "norm_bound"):
        assert p.get(key) == pytest.approx(planned.privacy.get(key)), key
    assert events[1:] == planned.events
    if not whiten:
        ref = ref_session.tensor_decomposition(df, COLS, **kw)
        assert np.allclose(rel["eigenvalues"], ref["eigenvalues"], rtol=0.05)
        assert np.allclose(rel["directions"], ref["directions"], rtol=0.05, atol=0.05 * HALF.max())
    h = np.array([(chosen[c][1] - chosen[c][0]) / 2 for c in COLS])
    vectors = rel["components"] if whiten else rel["eigenvectors"]
    assert np.allclose(rel["directions"], vectors * h)  # mapped back with the chosen bounds
    _audit_ok(s)


def test_norm_bound_auto_is_the_release_at_the_chosen_bound(raw, tmp_path):
    df, X = raw
    eps = 10.0
    s = _session(tmp_path, "nauto")
    rel = s.tensor_decomposition(df, COLS, epsilon=eps, delta=DELTA, norm_bound="auto",
                                 rng=np.random.default_rng(4), **FAST)
    p, chosen = rel.manifest["privacy"], rel.manifest["norm_bound_auto"]
    assert p["events"][0] == {"type": "epsilon_delta", "epsilon": pytest.approx(eps * 0.1), "delta": 0.0,
                              "mechanism": "exponential_quantile"}
    assert p["norm_bound"] == "auto" and p["norm_bound_epsilon"] == pytest.approx(eps * 0.1)
    assert p["mechanism_epsilon"] == pytest.approx(eps * 0.9)
    assert "see norm_bound_auto" in p["noise_scale"]  # stated after the choice, at the chosen B
    B = chosen["norm_bound"]
    norms = np.linalg.norm(X, axis=1)
    assert np.quantile(norms, 0.85) < B < np.quantile(norms, 0.99) * 1.2, (B, np.quantile(norms, 0.95))
    ref = _session(tmp_path, "nref").tensor_decomposition(df, COLS, epsilon=eps * 0.9, delta=DELTA, norm_bound=B,
                                                          rng=np.random.default_rng(4), **FAST)
    q = ref.manifest["privacy"]
    for key in ("sensitivity", "noise_scale", "noise_sigma"):
        assert chosen[key] == pytest.approx(q[key]), key
    assert p["events"][1:] == q["events"]
    assert np.allclose(rel["eigenvalues"], ref["eigenvalues"], rtol=0.02)
    assert np.allclose(np.abs(rel["eigenvectors"]), np.abs(ref["eigenvectors"]), atol=0.02)
    _audit_ok(s)
    # spark-dp audit replans the release at the stated B and share: a σ or a split edited after the fact is caught
    from spark_dp.audit import audit_releases

    path = tmp_path / "nauto" / rel.release_id / "manifest.json"
    for edit, needle in ((lambda m: m["norm_bound_auto"].update(noise_scale=m["norm_bound_auto"]["noise_scale"] / 2),
                          "noise_scale="), (lambda m: m["privacy"].update(mechanism_epsilon=eps), "Gaussian events")):
        original = path.read_text()
        manifest = json.loads(original)
        edit(manifest)
        path.write_text(json.dumps(manifest))
        findings = audit_releases(s.ledger, s.output).findings
        assert any(needle in str(f) for f in findings), findings
        path.write_text(original)


def test_norm_bound_auto_units_of_two_rows_and_replace(raw, spark, tmp_path):
    """m = 2, replace: the quantile's scores have sensitivity m, and at the chosen B the power method's Δ is
    f·m·√L·B³ with σ calibrated to the remaining ε (formulas independent of the code)."""
    X = raw[1]
    df = spark.createDataFrame(pd.DataFrame({**{c: X[:, i] for i, c in enumerate(COLS)},
                                             "u": np.repeat(np.arange(1000), 2).astype(str)}))
    eps, L = 10.0, 3
    rel = _session(tmp_path, "nm2").tensor_decomposition(df, COLS, 1, epsilon=eps, delta=DELTA, norm_bound="auto",
                                                         privacy_unit="u", max_rows_per_unit=2, neighbors="replace",
                                                         mode="reuse", restarts=L, iterations=1)
    chosen = rel.manifest["norm_bound_auto"]
    assert chosen["score_sensitivity"] == 2.0 and chosen["epsilon"] == pytest.approx(1.0)
    B = chosen["norm_bound"]
    sens = 2 * 2 * math.sqrt(L) * B**3
    assert chosen["sensitivity"] == pytest.approx(sens)
    assert chosen["noise_sigma"] == pytest.approx(math.sqrt(2) * dp_accounting.get_sigma_gaussian(9.0, DELTA) * sens)


def test_audit_bounds_auto_units_of_two_rows_and_replace(spark, tmp_path):
    """m = 2, replace, bounds chosen privately: every selection's scores have sensitivity m (the BoundsPlan is the
    release's m and relation) and the pass's worst case in the data's units, clamped to the CHOSEN bounds, attains
    and does not exceed f·m·√L·B³ (B = √d); the σ released at the remaining ε keeps one pass's empirical ε below
    its claim, and σ/2 is caught."""
    eps, share, L = 2.0, 0.5, 4  # the mechanism gets epsilon = 1 (one pass: ~0.7, where sigma/2 is detectable)
    rng = np.random.default_rng(1)
    common = CENTRE + rng.uniform(-1, 1, size=(3000, D)) * HALF
    unit_of = np.repeat(np.arange(1500), 2).astype(str)
    hi, lo = CENTRE + 1e4 * HALF, CENTRE - 1e4 * HALF  # beyond any bounds the selection chooses from the rest
    frames = {name: spark.createDataFrame(pd.DataFrame({
        **{c: np.vstack([common, corner, corner])[:, i] for i, c in enumerate(COLS)},
        "u": [*unit_of, "target", "target"]})) for name, corner in (("D", hi), ("D'", lo))}
    session = _session(tmp_path, "audit", seed=None)
    rel = session.tensor_decomposition(frames["D"], COLS, 1, epsilon=eps, delta=DELTA, bounds="auto",
                                       bounds_share=share, privacy_unit="u", max_rows_per_unit=2, neighbors="replace",
                                       mode="reuse", restarts=L, iterations=1)
    p, auto = rel.manifest["privacy"], rel.manifest["bounds_auto"]
    assert auto["score_sensitivity"] == 2.0 and auto["epsilon"] == pytest.approx(eps * share)  # m, replace
    chosen = auto["bounds"]
    # the corners lie outside whatever bounds were chosen (at this share the choice is noisy: scale 24 against
    # 0.05·n = 150), and the bounds are the chosen ones, not the placeholders [-1, 1]
    assert all(lo[i] < chosen[c][0] < chosen[c][1] < hi[i] for i, c in enumerate(COLS)), chosen
    assert any(tuple(b) != (-1.0, 1.0) for b in chosen.values())
    batches = 2  # k(R+1) passes, sequential (reuse)
    sens = 2 * 2 * math.sqrt(L) * D**1.5  # f = 2 (replace), m = 2, B = sqrt(d): independent of the code
    assert p["sensitivity"] == pytest.approx(sens) and p["max_rows_per_unit"] == 2
    mech = eps * (1 - share)
    assert p["noise_sigma"] == pytest.approx(math.sqrt(batches) * dp_accounting.get_sigma_gaussian(mech, DELTA) * sens)
    assert p["epsilon_exact_accounting"] <= eps + 1e-9
    # the pass's exact sums (attained sensitivity) on the neighbours, from the rows Spark builds with the chosen bounds
    audit_bounded_pass(frames, COLS, chosen, p, sens, L, DELTA)


BAD = [
    (dict(bounds="auto", bounds_share=1.0), "'bounds_share'"),
    (dict(bounds="auto", bounds_share=0.0), "'bounds_share'"),
    (dict(bounds="auto", norm_bound="auto"), "'norm_bound'"),
    (dict(norm_bound="auto", norm_bound_share=1.5), "'norm_bound_share'"),
    (dict(norm_bound="auto", norm_bound_quantile=0.0), "'norm_bound_quantile'"),
    (dict(bounds="auto", mechanism="online_power_method", private=False, epsilon=None, delta=None), "'bounds'"),
    (dict(norm_bound="auto", mechanism="online_power_method", private=False, epsilon=None, delta=None),
     "'norm_bound'"),
    (dict(bounds="automatic"), "'bounds'"),
]


@pytest.mark.parametrize("kw, needle", BAD, ids=[f"bad{i}" for i in range(len(BAD))])
def test_bad_auto_requests_fail_before_anything(raw, tmp_path, kw, needle):
    session = _session(tmp_path, "bad", public="private" in kw)  # a non-private mechanism needs a budget-free id
    kw = {"epsilon": 1.0, "delta": DELTA, **kw}
    with pytest.raises(ConfigError, match=needle):
        session.tensor_decomposition(raw[0], COLS, 1, **kw)
    assert _spent(session) == 0.0 and not (tmp_path / "bad").exists()


def test_norm_bound_auto_on_an_explicit_tensor_is_refused(tmp_path):
    from tests._tensor_data import orthogonal_tensor

    session = _session(tmp_path, "explicit")
    with pytest.raises(ConfigError, match="'norm_bound'.*rows"):
        session.tensor_decomposition(orthogonal_tensor(3, 1)[0], k=1, epsilon=1.0, delta=DELTA, norm_bound="auto")
    assert _spent(session) == 0.0


def test_preview_lists_the_choice_and_says_why_it_cannot_predict(raw, tmp_path):
    """As the second-moment family's preview of bounds: auto: the choice's event first, the cost, predicted: false
    with the same reason; nothing charged or written."""
    df = raw[0]
    s = _session(tmp_path, "pv")
    tp = s.preview.tensor_decomposition(df, COLS, epsilon=2.0, delta=DELTA, bounds="auto", bounds_share=0.25, **FAST)
    sm = s.preview.second_moment(df, COLS, epsilon=2.0, delta=DELTA, bounds="auto", bounds_share=0.25)
    for p in (tp, sm):
        assert p.events[0] == {"type": "epsilon_delta", "epsilon": pytest.approx(0.5), "delta": 0.0,
                               "mechanism": "exponential_quantile_bounds"}
        assert p.cost == {"epsilon": 2.0, "delta": DELTA} and not p.would_refuse
        assert p.privacy["bounds_epsilon"] == pytest.approx(0.5) and p.privacy["mechanism_epsilon"] == 1.5
    assert tp.accuracy["predicted"] is False and tp.accuracy["why"] == sm.accuracy["why"]
    nb = s.preview.tensor_decomposition(df, COLS, epsilon=2.0, delta=DELTA, norm_bound="auto", **FAST)
    assert nb.events[0]["mechanism"] == "exponential_quantile" and nb.events[0]["epsilon"] == pytest.approx(0.2)
    assert nb.accuracy["predicted"] is False and "auto" in nb.accuracy["why"]
    assert _spent(s) == 0.0 and not (tmp_path / "pv").exists()


def test_config_bounds_auto_dry_run_and_release(spark, tmp_path, capsys):
    """dataset.bounds: auto in a tensor config: the dry run lists the planned events (the config's own plan too),
    charges nothing; the release charges them and records the chosen bounds."""
    from spark_dp.cli.config import JobConfig
    from spark_dp.cli.main import main as cli_main
    from spark_dp.cli.tasks import tasks
    from spark_dp.privacy.events import event_to_dict
    from tests._jobs import DELETE, charges, load_conf, localise, override, write_config, written

    rng = np.random.default_rng(9)
    path = str(tmp_path / "rows.parquet")
    pd.DataFrame({c: CENTRE[i] + rng.uniform(-1, 1, 3000) * HALF[i] for i, c in enumerate(COLS)}).to_parquet(path)
    cfg = load_conf("tensor_private_rows.yaml")
    localise(cfg, tmp_path, data=path)
    override(cfg, {"dataset.columns": COLS, "dataset.bounds": "auto", "privacy.norm_bound": DELETE,
                   "privacy.epsilon": 5.0, "params": {"k": 1, "restarts": 3, "iterations": 2, "mode": "reuse",
                                                      "bounds_share": 0.2}})
    planned = [event_to_dict(e) for e in tasks()["tensor_decomposition"].plan(JobConfig.from_dict(cfg))]
    conf = write_config(tmp_path, cfg)
    assert cli_main(["release", "--dry-run", "--json", conf]) == 0
    preview = json.loads(capsys.readouterr().out)
    assert charges(tmp_path) == 0 and written(tmp_path) == []
    assert preview["events"] == planned and planned[0]["mechanism"] == "exponential_quantile_bounds"
    assert planned[0]["epsilon"] == pytest.approx(1.0) and preview["accuracy"]["predicted"] is False
    assert cli_main(["release", conf]) == 0
    rel = spark_dp.load_release(json.loads(capsys.readouterr().out)["path"])
    p = rel.manifest["privacy"]
    assert p["events"] == planned and p["mechanism_epsilon"] == pytest.approx(4.0)
    assert set(rel.manifest["bounds_auto"]["bounds"]) == set(COLS) and rel["directions"].shape == (1, D)
    assert charges(tmp_path) == 1
    for over, needle in (({"privacy.norm_bound": "auto"}, "privacy.norm_bound"),
                         ({"params": {"k": 1, "bounds_share": 1.0}}, "bounds_share")):
        bad = write_config(tmp_path, override(json.loads(json.dumps(cfg)), {**over, "release_id": "bad"}), "bad.yaml")
        assert cli_main(["release", bad]) == 2
        err = capsys.readouterr().err
        assert needle in err and err.count("\n") == 1, err
        assert charges(tmp_path) == 1


def test_collapsed_bounds_are_flagged_in_the_manifest_the_log_and_the_report(spark, tmp_path, caplog):
    """60 rows at ε = 1 (share 0.1, 3 columns): the selection cannot see the data and the public pull towards 0
    wins; the tensor release carries the family's warning (post-processing of the chosen bounds)."""
    from spark_dp.report import write_report

    rng = np.random.default_rng(8)
    df = spark.createDataFrame(pd.DataFrame({c: rng.uniform(1e3, 2e4, 60) for c in COLS}))
    with caplog.at_level("WARNING", logger="spark_dp"):
        rel = _session(tmp_path, "few").tensor_decomposition(df, COLS, epsilon=1.0, delta=DELTA, bounds="auto",
                                                             rng=np.random.default_rng(1), **FAST)
    chosen = rel.manifest["bounds_auto"]["bounds"]
    assert all(max(abs(lo), abs(hi)) < 1e-4 for lo, hi in chosen.values()), chosen
    warning = rel.manifest["bounds_auto"]["warning"]
    assert "x0" in warning and "give public bounds" in warning and warning in caplog.text
    report = write_report(rel, out=str(tmp_path / "report.md"))
    assert "Accuracy warning" in open(report.path).read()
