"""Public per-column bounds for the tensor family (issue #14, section 1).

A release with ``bounds`` on data in its own units (columns in the hundreds)
is the release of the clamped, scaled rows: the same numbers as a release
with ``norm_bound=√d`` on rows the test scales itself, the same σ and
sensitivity, ``directions`` = eigenvectors·diag(h) in the data's units. The
privacy audit runs on the rows Spark builds from the bounds (m = 2 rows per
unit, replace neighbours): the pass's worst case in the data's units attains
and does not exceed the stated sensitivity, and the released σ keeps the
empirical ε of one pass below its claim.
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
from tests._tensor_data import audit_bounded_pass, match

D, K = 4, 2
COLS = [f"x{i}" for i in range(D)]
CENTRE = np.array([300.0, -50.0, 1000.0, 2.5])
HALF = np.array([200.0, 50.0, 800.0, 0.5])
BOUNDS = {c: [float(m - h), float(m + h)] for c, m, h in zip(COLS, CENTRE, HALF, strict=True)}
EPS, DELTA = 1.0, 1e-6


def _scaled_rows(n, seed=0):
    """Rows a = s_h v_h (orthonormal v_h, |a_j| <= 1): Σ a^⊗3 is exactly orthogonal of rank K."""
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((D, K)))
    h = rng.integers(0, K, size=n)
    return Q[:, h].T * np.array([1.0, 0.7])[h][:, None], Q.T


def _session(tmp_path, name, seed=5, **kw):
    return spark_dp.DPSession(name, ledger=f"sqlite:///{tmp_path}/{name}.db", epsilon_limit=1e3, delta_limit=1e-3,
                              output=str(tmp_path / name), sampler=SeededSampler(np.random.default_rng(seed)), **kw)


def _spent(session) -> float:
    """ε charged to the session's dataset (0.0 when it has never been charged)."""
    budget = session.budget()
    return 0.0 if budget is None else budget.spent_epsilon


def _frame(spark, X, **extra):
    return spark.createDataFrame(pd.DataFrame({**{c: X[:, i] for i, c in enumerate(COLS[:X.shape[1]])}, **extra}))


@pytest.fixture(scope="module")
def data(spark):
    A, V = _scaled_rows(1500, seed=4)
    X = CENTRE + A * HALF  # the data in its own units
    X[:5] = CENTRE + 7.0 * HALF * np.sign(A[:5] + 1e-9)  # outliers: clamped to the bounds
    X[5, 1] = np.nan  # data content never fails: the nonfinite policy drops the row
    prescaled = np.clip((X - CENTRE) / HALF, -1.0, 1.0)  # what the test expects the release to see
    return _frame(spark, X), _frame(spark, prescaled), V


@pytest.mark.parametrize("whiten, nonfinite", [(False, "drop"), (False, "zero"), (True, "drop")],
                         ids=["plain", "plain-zero", "whitened"])
def test_bounds_release_equals_the_prescaled_release(data, tmp_path, whiten, nonfinite):
    """NaN is data, never a failure: the declared policy applies (``zero``: the bounds' centre, a = 0)."""
    bounded_df, prescaled_df, V = data
    kw = dict(k=K, epsilon=50.0, delta=DELTA, restarts=3, iterations=6, mode="reuse", rows_per_round=1500,
              whiten=whiten, nonfinite=nonfinite)
    rel = _session(tmp_path, "b").tensor_decomposition(bounded_df, COLS, bounds=BOUNDS,
                                                       rng=np.random.default_rng(7), **kw)
    ref = _session(tmp_path, "p").tensor_decomposition(prescaled_df, COLS, norm_bound=math.sqrt(D),
                                                       rng=np.random.default_rng(7), **kw)
    # the same rows, the same noise draws: the same release, to rounding
    for name in ("eigenvalues", "eigenvectors", *(("components", "weights") if whiten else ())):
        assert np.allclose(rel[name], ref[name], rtol=1e-6, atol=1e-6), name
    vectors = rel["components"] if whiten else rel["eigenvectors"]
    assert np.allclose(rel["directions"], vectors * HALF)  # the diagonal map back, column by column
    assert "directions" not in ref.arrays
    if not whiten:
        _, err = match(rel["eigenvectors"], V)  # the components are recovered as well as the pre-scaled ones
        assert err.min() < 0.1 and np.allclose(err, match(ref["eigenvectors"], V)[1], atol=1e-6)
        assert np.allclose(rel.interval("eigenvalues")[0], ref.interval("eigenvalues")[0])
        lo, hi = rel.interval("directions")
        assert np.allclose(hi, np.broadcast_to(HALF, hi.shape)) and np.allclose(lo, -hi)
    # the privacy is that of norm_bound = sqrt(d): same sensitivity, sigma and events
    p, q = rel.manifest["privacy"], ref.manifest["privacy"]
    for key in ("sensitivity", "noise_scale", "noise_multiplier", "epsilon_exact_accounting", "events"):
        assert p.get(key) == q.get(key), key
    assert p["norm_bound"] == pytest.approx(math.sqrt(D))
    m = rel.manifest
    assert m["scaling"]["bounds"] == BOUNDS and m["scaling"]["constant_column"] is None
    assert m["policies"]["nonfinite"].startswith(nonfinite) and "centre" in m["policies"]["nonfinite"]
    assert "directions" in m["scaling"]["results"] and "scaling" not in ref.manifest
    assert m["request_sha256"] != ref.manifest["request_sha256"]  # the bounds are part of the request


def test_fresh_mode_with_bounds_recovers_the_components(data, tmp_path):
    bounded_df, prescaled_df, V = data
    kw = dict(k=1, epsilon=50.0, delta=DELTA, restarts=3, iterations=4, mode="fresh", rows_per_round=300)
    errs = []
    for df, extra in ((bounded_df, {"bounds": BOUNDS}), (prescaled_df, {"norm_bound": math.sqrt(D)})):
        rel = _session(tmp_path, f"f{len(errs)}").tensor_decomposition(df, COLS, rng=np.random.default_rng(2),
                                                                       **extra, **kw)
        errs.append(match(rel["eigenvectors"], V)[1].min())
        assert rel.manifest["privacy"]["sensitivity"] == pytest.approx(math.sqrt(3) * D**1.5)
    assert max(errs) < 0.15, errs


def test_audit_with_bounds_units_of_two_rows_and_replace(spark, tmp_path):
    """m = 2, replace: the sensitivity is f·m·√L·B³ at B = √d; the worst case in the data's units attains it."""

    d, L = 3, 4
    cols, bounds = COLS[:d], {c: BOUNDS[c] for c in COLS[:d]}
    rng = np.random.default_rng(1)
    common = CENTRE[:d] + rng.uniform(-1, 1, size=(40, d)) * HALF[:d]
    unit_of = np.repeat(np.arange(20), 2).astype(str)
    hi, lo = CENTRE[:d] + 3 * HALF[:d], CENTRE[:d] - 3 * HALF[:d]  # beyond the bounds: clamped to the corners
    frames = {name: _frame(spark, np.vstack([common, corner, corner]), u=[*unit_of, "target", "target"])
              for name, corner in (("D", hi), ("D'", lo))}
    session = _session(tmp_path, "audit", seed=None)
    rel = session.tensor_decomposition(frames["D"], cols, 1, epsilon=EPS, delta=DELTA, bounds=bounds,
                                       privacy_unit="u", max_rows_per_unit=2, neighbors="replace", mode="reuse",
                                       restarts=L, iterations=1)
    p = rel.manifest["privacy"]
    batches = 2  # k(R+1) passes, sequential (reuse)
    sens = 2 * 2 * math.sqrt(L) * d**1.5  # f = 2 (replace), m = 2, B = sqrt(d): independent of the code
    assert p["sensitivity"] == pytest.approx(sens) and p["max_rows_per_unit"] == 2
    assert p["noise_sigma"] == pytest.approx(math.sqrt(batches) * dp_accounting.get_sigma_gaussian(EPS, DELTA) * sens)
    # the pass's exact sums (attained sensitivity) on the neighbours, from the rows Spark builds with the bounds
    audit_bounded_pass(frames, cols, bounds, p, sens, L, DELTA)


BAD = [
    ({"bounds": {"x9": [0, 1]}}, "'x9'"),
    ({"bounds": {"x0": [5, 5]}}, "lo < hi"),
    ({"bounds": {"x0": [0, float("inf")]}}, "finite"),
    ({"bounds": {"x0": [0, float("nan")]}}, "finite"),
    ({"bounds": "auto", "bounds_share": 1.0}, "'bounds_share'"),
    ({"bounds": {"x0": [0, 1]}}, "'norm_bound'"),  # partial bounds: B does not follow
    ({"bounds": [0, 1]}, "'bounds'"),
]


@pytest.mark.parametrize("kw, needle", BAD, ids=[f"bad{i}" for i in range(len(BAD))])
def test_bad_bounds_fail_before_anything(data, tmp_path, kw, needle):
    bounded_df = data[0]
    session = _session(tmp_path, "bad")
    with pytest.raises(ConfigError, match=needle) as info:
        session.tensor_decomposition(bounded_df, COLS, 1, epsilon=EPS, delta=DELTA, **kw)
    assert "bounds" in str(info.value) or "norm_bound" in str(info.value)
    assert _spent(session) == 0.0 and not (tmp_path / "bad").exists()


def test_bounds_on_an_explicit_tensor_are_refused(tmp_path):
    from tests._tensor_data import orthogonal_tensor

    session = _session(tmp_path, "explicit")
    with pytest.raises(ConfigError, match="'bounds'.*entry_scale"):
        session.tensor_decomposition(orthogonal_tensor(3, 1)[0], k=1, epsilon=EPS, delta=DELTA,
                                     neighbors="tensor_entry", bounds={"x0": [0, 1]})
    assert _spent(session) == 0.0


def test_config_dataset_bounds_runs_through_the_job(spark, tmp_path, capsys):
    """dataset.bounds in a tensor config: no privacy.norm_bound, B = sqrt(d), the dry run predicts the same sigma."""
    from spark_dp.cli.main import main as cli_main
    from tests._jobs import DELETE, charges, load_conf, localise, override, write_config, written

    # 6,000 rows: the config's noise and initial vectors are unseeded, and on 600 rows the recovery check below
    # failed in about one release of ten (0.32-0.42) at ε = 5 and still at ε = 20; ten times the rows is ten
    # times the signal against the same noise
    A, V = _scaled_rows(6000, seed=9)
    path = str(tmp_path / "rows.parquet")
    pd.DataFrame({c: CENTRE[i] + A[:, i] * HALF[i] for i, c in enumerate(COLS)}).to_parquet(path)
    cfg = load_conf("tensor_private_rows.yaml")
    localise(cfg, tmp_path, data=path)
    override(cfg, {"dataset.columns": COLS, "dataset.bounds": BOUNDS, "privacy.norm_bound": DELETE,
                   "privacy.epsilon": 5.0, "params": {"k": 1, "restarts": 3, "iterations": 3, "mode": "reuse"}})
    conf = write_config(tmp_path, cfg)
    assert cli_main(["release", "--dry-run", "--json", conf]) == 0
    preview = json.loads(capsys.readouterr().out)
    assert charges(tmp_path) == 0 and written(tmp_path) == []
    assert cli_main(["release", conf]) == 0
    rel = spark_dp.load_release(json.loads(capsys.readouterr().out)["path"])
    p = rel.manifest["privacy"]
    assert p["norm_bound"] == pytest.approx(math.sqrt(D)) and p["sensitivity"] == pytest.approx(math.sqrt(3) * D**1.5)
    assert preview["privacy"]["noise_scale"] == pytest.approx(p["noise_scale"])
    assert rel["directions"].shape == (1, D) and rel.manifest["scaling"]["bounds"] == BOUNDS
    err = match(rel["eigenvectors"], V)[1].min()
    assert err < 0.3, err

    for over, needle in (({"dataset.bounds": {"x9": [0, 1]}}, "'x9'"),
                         ({"dataset.bounds": {"x0": [1, 0]}}, "'dataset.bounds'"),
                         ({"dataset.bounds": {"x0": [0, 1]}}, "privacy.norm_bound")):
        bad = write_config(tmp_path, override(json.loads(json.dumps(cfg)), {**over, "release_id": "bad"}), "bad.yaml")
        assert cli_main(["release", bad]) == 2
        err = capsys.readouterr().err
        assert needle in err and err.count("\n") == 1, err
        assert charges(tmp_path) == 1
