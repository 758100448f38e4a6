"""Every mechanism that takes a privacy unit scales its noise with the per-unit bound m.

The class of bug this file exists for (issue #12): AdaSSP kept up to m rows
per unit but planned its noise for one row, so at m = 10 a release claimed
ε = 1 while giving ε ≈ 13.5 — and every audit passed, because every audit ran
at m = 1. Here each mechanism that accepts ``privacy_unit`` runs through its
PUBLIC API (the path a user takes: API → planning → chokepoint → sampler) at
m = 1 and m = 4, for each neighbour relation it accepts, and:

1. **manifest** — the noise scale(s) recorded in the manifest at m = 4 are the
   hand-derived factor (below, per mechanism and per noise component) times
   those at m = 1, and the replace/add-remove ratio at m = 4 is the
   hand-derived one;
2. **draws** — the sampler actually received the same sequence of draws, each
   with σ (or b) and Δ scaled by that factor (recorded at the sampler, below
   the chokepoint, so no layer in between can drop m);
3. **white-box audit at m = 4** — the noise actually added at m = 4 has the
   scale factor × (scale at m = 1): chi-square on Σ noise²/σ² (Gaussian) or
   Gamma on Σ|noise|/b (Laplace), two-sided at α = 1e-6, over ≥ 100 draws,
   which catches a scale off by 2× essentially always (tests/_audit.py).

The m = 1 scales themselves are audited against independent calibrations
(dp_accounting, hand-derived Δ) in tests/test_reliability_audits.py; this file
chains m = 4 and replace to them. The black-box audits at m = 4 (neighbours
differing in one unit of 4 rows) are in test_reliability_audits.py too.

Mechanisms that cannot support m > 1 must refuse it with a ConfigError naming
``max_rows_per_unit``. Every mechanism here, the sketches included, takes
both relations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest

from spark_dp import DPSession
from spark_dp.errors import ConfigError
from tests._audit import chi2_variance_pvalue, laplace_scale_pvalue
from tests._samplers import Recorder

EPS, DELTA, B, M = 1.0, 1e-6, 1.0, 4
ALPHA = 1e-6
ROOT2 = math.sqrt(2.0)
N_UNITS, ROWS_PER_UNIT = 40, 6  # every unit holds more than M rows, so the bound binds


@dataclass
class Case:
    """One mechanism reached through its public API.

    ``m_factor``: the noise scale at m = 4 over the scale at m = 1, one per
    manifest scale (a scalar applies to all). ``replace``: scale under replace
    over add/remove, per manifest scale (None: add/remove only).
    """

    name: str
    call: callable
    manifest_scales: callable
    m_factor: float | tuple
    replace: float | tuple | None
    # Draws after the first whose Δ depends on earlier noisy output (whitening's passes: Δ ∝ B_y³ with
    # B_y from the released M2) are checked by ``later_draws(sampler, neighbors, m)`` instead of by ratio.
    later_draws: callable | None = None


FEATURES = [f"x{i}" for i in range(16)]


def _sigma(p):
    assert p["noise_family"] == "gaussian"
    return [p["noise_scale"]] if not isinstance(p["noise_scale"], list) else p["noise_scale"]


def _scale(p):
    assert p["noise_family"] in ("gaussian", "laplace")
    return [p["noise_scale"]]


def _sm(mechanism="analyze_gauss"):
    return lambda dp, df, **kw: dp.second_moment(df, FEATURES[:14], epsilon=EPS, delta=DELTA, norm_bound=B,
                                                 mechanism=mechanism, **kw)


def _reg(mechanism):
    cols = FEATURES[:16] if mechanism == "adassp" else FEATURES[:13]
    return lambda dp, df, **kw: dp.linear_regression(df, cols, "y", epsilon=EPS, delta=DELTA, norm_bound=B,
                                                     mechanism=mechanism, fit_intercept=False, **kw)


def _pca(mechanism="analyze_gauss"):
    return lambda dp, df, **kw: dp.pca(df, FEATURES[:14], 3, epsilon=EPS, delta=DELTA, norm_bound=B,
                                       mechanism=mechanism, **kw)


def _sketch(**params):
    column = "id" if "levels" in params else "item"

    def call(dp, df, **kw):
        return dp.count_sketch(df, column, epsilon=EPS, delta=DELTA,
                               **{"repetitions": 3, "buckets": 64, **params}, **kw)
    return call


def _tensor(wide=False, **params):
    def call(dp, df, **kw):  # wide: 14 columns, so the whitening M2 alone has 105 draws for the audit
        # k = 1, L = 8, R = 3: 4 passes, 3·(6×8) + 8 = 152 draws (whiten: the 105-entry M2 is audited)
        return dp.tensor_decomposition(df, columns=FEATURES[:14 if wide else 6], k=1, mechanism="private_power_method",
                                       epsilon=EPS,
                                       delta=DELTA, norm_bound=B, restarts=8, iterations=3, mode="reuse",
                                       rng=np.random.default_rng(5), **params, **kw)
    return call


def _whitened_passes(sampler, neighbors, m):
    """Each power pass after the released M2: Δ = f·m·√L·B_y³, B_y = ‖W‖₂·B with W whitening the released M2."""
    from spark_dp.tensor.whiten import whitening

    m2 = sampler.values[0].copy()  # the upper triangle of the exact Σxxᵀ, then its noise
    d = int((math.isqrt(8 * m2.size + 1) - 1) // 2)
    noisy = np.zeros((d, d))
    noisy[np.triu_indices(d)] = m2 + sampler.draws[0].noise
    noisy = noisy + np.triu(noisy, 1).T
    W, _ = whitening(noisy, 1)  # k = 1
    b_y = np.linalg.norm(W, 2) * B
    f = 2.0 if neighbors == "replace" else 1.0
    first = sampler.draws[0]
    for draw in sampler.draws[1:]:
        assert draw.sensitivity == pytest.approx(f * m * math.sqrt(8) * b_y**3, rel=1e-9)  # L = 8
        assert draw.scale / draw.sensitivity == pytest.approx(first.scale / first.sensitivity, rel=1e-9)  # one z


def _whitened_scales(p):
    return [p["second_moment_sigma"]]


# Hand-derived factors (docs/privacy.md, "Privacy units"):
# * Analyze Gauss (matrix, regression, PCA; whitening's M2): Δ = m·B² (add/remove), √2·m·B² (replace).
# * AdaSSP [λ_min, XᵀX, Xᵀy]: m·[B², B², B²/2] (add/remove), m·[B², √2·B², B²] (replace).
# * CountSketch / Count-Mean: Δ₂ = √k·m; with sketch-space unit clipping C = √m: √k·√m.
# * Count-Min: Δ₁ = k·m. Histogram: Δ₂ = m. Dyadic: Δ₂ = √(L·k)·m.
# * Sketches under replace: ×2 (signed tables, weighted rows, L1), ×√2 (unweighted Count-Mean and histogram:
#   contributions ≥ 0, so ‖c' − c‖₂² ≤ ‖c‖₂² + ‖c'‖₂²).
# * Tensor rows (Alg. 3 over rows): Δ = f·m·√L·B³, f = 1 (add/remove), 2 (replace).
CASES = [
    Case("second_moment/analyze_gauss", _sm(), _sigma, M, ROOT2),
    Case("linear_regression/analyze_gauss", _reg("analyze_gauss"), _sigma, M, ROOT2),
    Case("linear_regression/adassp", _reg("adassp"), _sigma, M, (1.0, ROOT2, 2.0)),
    Case("pca/analyze_gauss", _pca(), _sigma, M, ROOT2),
    Case("count_sketch/private_count_sketch", _sketch(), _scale, M, 2.0),
    Case("count_sketch/private_count_sketch+sketch_l2", _sketch(unit_clipping="sketch_l2"), _scale, math.sqrt(M), 2.0),
    Case("count_sketch/count_mean", _sketch(mechanism="count_mean"), _scale, M, ROOT2),
    Case("count_sketch/count_mean+weight", _sketch(mechanism="count_mean", weight="x0"), _scale, M, 2.0),
    Case("count_sketch/count_min", _sketch(mechanism="count_min"), _scale, M, 2.0),
    Case("count_sketch/histogram", _sketch(mechanism="histogram", domain=[f"i{j}" for j in range(120)]),
         _scale, M, ROOT2),
    Case("count_sketch/dyadic", _sketch(levels=5, repetitions=3, buckets=32), _scale, M, 2.0),
    Case("tensor/private_power_method rows", _tensor(), _sigma, M, 2.0),
    Case("tensor/private_power_method rows+whiten", _tensor(whiten=True, wide=True), _whitened_scales, M, ROOT2,
         later_draws=_whitened_passes),
]


@pytest.fixture(scope="module")
def units_df(spark):
    rng = np.random.default_rng(12)
    n = N_UNITS * ROWS_PER_UNIT
    x = rng.normal(size=(n, 16)) / 4.0
    y = x[:, :3].sum(axis=1) / 3.0
    rows = [(f"u{i // ROWS_PER_UNIT}", *map(float, x[i]), float(y[i]), f"i{int(rng.integers(0, 120))}",
             int(rng.integers(0, 32))) for i in range(n)]
    return spark.createDataFrame(rows, ["u", *FEATURES, "y", "item", "id"]).cache()


def _release(case, df, tmp_path, *, m, neighbors, sampler=None):
    sampler = sampler or Recorder()
    tag = f"{case.name.replace('/', '_').replace(' ', '_').replace('+', '_')}-m{m}-{neighbors}"
    dp = DPSession(f"ds-{tag}", ledger=f"sqlite:///{tmp_path}/{tag}.db", epsilon_limit=1e6, delta_limit=0.5,
                   output=str(tmp_path / tag), sampler=sampler)
    rel = case.call(dp, df, privacy_unit="u", max_rows_per_unit=m, neighbors=neighbors)
    assert rel.privacy["privacy_unit"] == "u"
    assert (rel.privacy.get("max_rows_per_unit") or rel.privacy.get("max_items_per_unit")) == m
    if case.later_draws is not None:
        case.later_draws(sampler, neighbors, m)
        sampler.draws[1:] = []  # the rest of the checks compare the first draw (M2) across m
    return rel, sampler.draws


def _as_tuple(x, n):
    return tuple(x) if isinstance(x, tuple) else (x,) * n


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_noise_scale_grows_with_the_per_unit_bound(case, units_df, tmp_path):
    relations = ("add_remove", "replace") if case.replace is not None else ("add_remove",)
    at_m4 = {}
    for neighbors in relations:
        rel1, draws1 = _release(case, units_df, tmp_path, m=1, neighbors=neighbors)
        rel4, draws4 = _release(case, units_df, tmp_path, m=M, neighbors=neighbors)
        at_m4[neighbors] = rel4
        # 1. the manifest's noise scales
        s1, s4 = np.array(case.manifest_scales(rel1.privacy)), np.array(case.manifest_scales(rel4.privacy))
        factors = np.array(_as_tuple(case.m_factor, len(s1)))
        np.testing.assert_allclose(s4 / s1, factors, rtol=1e-9, err_msg=f"{case.name} {neighbors}: manifest scale")
        # The same charge: the events (noise multipliers) do not depend on m.
        assert rel1.privacy["events"] == rel4.privacy["events"]
        # 2. the sampler's draws, one by one
        assert len(draws1) == len(draws4) > 0
        for i, ((k1, sc1, d1, *_), (k4, sc4, d4, *_)) in enumerate(zip(draws1, draws4, strict=True)):
            f = factors[i % len(factors)] if len(factors) > 1 else factors[0]
            assert k1 == k4
            assert sc4 / sc1 == pytest.approx(f, rel=1e-9), f"{case.name} {neighbors}: draw {i} scale"
            assert d4 / d1 == pytest.approx(f, rel=1e-9), f"{case.name} {neighbors}: draw {i} sensitivity"
        # 3. white-box audit at m = 4: the noise actually added has factor × the m = 1 scale
        gauss = [n4 / (sc1 * (sc4 / sc1)) for (k, sc1, *_), (_, sc4, _, n4, _) in zip(draws1, draws4, strict=True)
                 if k == "gaussian"]
        lap = [n4 / sc4 for (k, _, _, n4, _) in draws4 if k == "laplace"]
        expected = [sc1 * (factors[i % len(factors)] if len(factors) > 1 else factors[0])
                    for i, (_, sc1, *_) in enumerate(draws1)]
        np.testing.assert_allclose([sc for _, sc, *_ in draws4], expected, rtol=1e-9)
        if gauss:
            z = np.concatenate([g.reshape(-1) for g in gauss])
            assert z.size >= 100, f"{case.name}: {z.size} draws are too few for the audit"
            assert chi2_variance_pvalue(z, 1.0) > ALPHA, f"{case.name} {neighbors}: Gaussian noise scale at m = {M}"
        if lap:
            z = np.concatenate([g.reshape(-1) for g in lap])
            assert z.size >= 100
            assert laplace_scale_pvalue(z, 1.0) > ALPHA, f"{case.name} {neighbors}: Laplace noise scale at m = {M}"
    if case.replace is not None:
        s_ar = np.array(case.manifest_scales(at_m4["add_remove"].privacy))
        s_rp = np.array(case.manifest_scales(at_m4["replace"].privacy))
        np.testing.assert_allclose(s_rp / s_ar, _as_tuple(case.replace, len(s_ar)), rtol=1e-9,
                                   err_msg=f"{case.name}: replace / add_remove at m = {M}")


def test_the_audit_would_catch_a_scale_that_ignores_m():
    """The white-box check above rejects noise drawn at the m = 1 scale when m = 4 is claimed."""
    rng = np.random.default_rng(3)
    # 105 draws (the smallest audit above) of noise at scale 1 judged against the claimed scale 4 (and 2 = √4).
    for claimed in (4.0, 2.0):
        z = rng.normal(size=105) / claimed
        assert chi2_variance_pvalue(z, 1.0) < ALPHA
        assert laplace_scale_pvalue(rng.laplace(size=105) / claimed, 1.0) < ALPHA


REFUSING = [
    ("second_moment", mech) for mech in ("jl_ridge", "wishart", "inverse_wishart")
] + [("linear_regression", mech) for mech in ("jl_ridge", "wishart", "inverse_wishart")] + [
    ("pca", mech) for mech in ("jl_ridge", "wishart", "inverse_wishart")]


@pytest.mark.parametrize("task,mechanism", REFUSING)
def test_mechanisms_without_a_per_unit_proof_refuse_m_above_one(task, mechanism, units_df, tmp_path):
    dp = DPSession("ds", ledger=f"sqlite:///{tmp_path}/l.db", epsilon_limit=10, delta_limit=1e-5,
                   output=str(tmp_path / "out"), sampler=Recorder())
    call = {"second_moment": _sm, "linear_regression": _reg, "pca": _pca}[task](mechanism)
    with pytest.raises(ConfigError, match="max_rows_per_unit"):
        call(dp, units_df, privacy_unit="u", max_rows_per_unit=M, neighbors="add_remove")
    assert dp.budget() is None  # nothing charged
    assert not (tmp_path / "out").exists()  # nothing written


def test_tensor_fresh_mode_refuses_m_above_one(units_df, tmp_path):
    dp = DPSession("ds", ledger=f"sqlite:///{tmp_path}/l.db", epsilon_limit=10, delta_limit=1e-5,
                   output=str(tmp_path / "out"), sampler=Recorder())
    with pytest.raises(ConfigError, match="max_rows_per_unit"):
        dp.tensor_decomposition(units_df, columns=FEATURES[:6], k=1, epsilon=EPS, delta=DELTA, norm_bound=B,
                                mode="fresh", privacy_unit="u", max_rows_per_unit=M)
    assert dp.budget() is None


def test_explicit_tensors_refuse_a_privacy_unit(tmp_path):
    """An explicit tensor has no rows: a privacy unit there would be silently ignored."""
    from tests._tensor_data import orthogonal_tensor

    dp = DPSession("ds", ledger=f"sqlite:///{tmp_path}/l.db", epsilon_limit=10, delta_limit=1e-5,
                   output=str(tmp_path / "out"), sampler=Recorder())
    T = orthogonal_tensor(4, 2)[0]
    for kw in ({"privacy_unit": "u"}, {"max_rows_per_unit": 4}):
        with pytest.raises(ConfigError, match=next(iter(kw))):
            dp.tensor_decomposition(T, k=1, epsilon=EPS, delta=DELTA, **kw)
    assert dp.budget() is None
