"""JL with ridge drawn from the exact Gram matrix (``projection="gram"``, the default).

The release (RÃ)ᵀ(RÃ)/r has rows of RÃ i.i.d. N(0, AᵀA + w²I), so drawing
RÃ = Z·Lᵀ on the driver from the exact AᵀA gives the same distribution as
drawing R per row. Checked here against the per-row construction (``rows``)
and against the privacy claim, with under-noised variants that the same
tests catch; then the API and the job route.
"""

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from spark_dp.aggregates.jl import jl_block_partial
from spark_dp.errors import ConfigError
from spark_dp.privacy import NumpySampler
from spark_dp.second_moment import api, jl_ridge, jl_ridge_plan
from spark_dp.second_moment.jl_ridge import jl_ridge_from_gram
from spark_dp.session import DPSession
from tests._audit import empirical_epsilon
from tests._samplers import FakeChokepoint

EPS, DELTA, B, R = 1.0, 1e-6, 1.0, 8
A = np.array([[0.5, 0.1], [0.2, 0.4], [0.1, -0.3]])


def _rows_release(a, w, cp):
    h1, h2, c = np.arange(len(a), dtype=np.int64), np.full(len(a), 7, dtype=np.int64), np.ones(len(a))
    return jl_ridge(lambda key: jl_block_partial(a, h1, h2, c, r=R, key=key), chokepoint=cp, event=None, r=R, d=2, w=w)


def _gram_release(a, w, cp):
    return jl_ridge_from_gram(a.T @ a, chokepoint=cp, event=None, r=R, w=w)


def test_gram_draw_has_the_per_row_construction_distribution():
    _, w = jl_ridge_plan(epsilon=EPS, delta=DELTA, norm_bound=B, r=R)
    n = 4000
    g = np.array([_gram_release(A, w, FakeChokepoint.seeded(None)) for _ in range(n)])
    cp_rows = FakeChokepoint.seeded(2)
    rows = np.array([_rows_release(A, w, cp_rows) for _ in range(n)])
    # Same law: every entry (and a quadratic form) two-sample KS against the per-row draws.
    u = np.array([0.6, -0.8])
    for got, ref in [(g[:, 0, 0], rows[:, 0, 0]), (g[:, 0, 1], rows[:, 0, 1]), (g[:, 1, 1], rows[:, 1, 1]),
                     (np.einsum("i,nij,j->n", u, g, u), np.einsum("i,nij,j->n", u, rows, u))]:
        assert stats.ks_2samp(got, ref).pvalue > 1e-4
    # The Wishart mean ÃᵀÃ = AᵀA + w²I.
    sigma = A.T @ A + w**2 * np.eye(2)
    se = np.sqrt((sigma**2 + np.outer(np.diag(sigma), np.diag(sigma))) / R / n)
    assert np.all(np.abs(g.mean(axis=0) - sigma) < 5 * se)
    # The same KS test catches a release with half the ridge.
    half = np.array([_gram_release(A, w / 2, FakeChokepoint.seeded(None))[0, 0] for _ in range(n)])
    assert stats.ks_2samp(half, rows[:, 0, 0]).pvalue < 1e-6


def _neighbour_samples(w, n):
    """log uᵀMu on D = A and D' = A + a row v along AᵀA's smallest eigenvector (the worst case)."""
    vals, vecs = np.linalg.eigh(A.T @ A)
    v = B * vecs[:, 0]
    a1 = np.vstack([A, v])
    u = np.linalg.solve(A.T @ A + w**2 * np.eye(2), v)
    cp = FakeChokepoint.seeded(5)
    x0 = np.array([u @ _gram_release(A, w, cp) @ u for _ in range(n)])
    x1 = np.array([u @ _gram_release(a1, w, cp) @ u for _ in range(n)])
    return np.log(x0), np.log(x1)


def test_black_box_gram_draw():
    _, w = jl_ridge_plan(epsilon=EPS, delta=DELTA, norm_bound=B, r=R)
    x0, x1 = _neighbour_samples(w, 12_000)
    assert max(empirical_epsilon(x0, x1, DELTA), empirical_epsilon(x1, x0, DELTA)) < EPS
    y0, y1 = _neighbour_samples(w / 5, 12_000)
    assert max(empirical_epsilon(y0, y1, DELTA), empirical_epsilon(y1, y0, DELTA)) > EPS


def test_gram_draw_is_keyed_by_the_sampler_and_post_processes():
    _, w = jl_ridge_plan(epsilon=EPS, delta=DELTA, norm_bound=B, r=R)
    one = jl_ridge_from_gram(A.T @ A, chokepoint=FakeChokepoint.seeded(3), event=None, r=R, w=w)
    same = jl_ridge_from_gram(A.T @ A, chokepoint=FakeChokepoint.seeded(3), event=None, r=R, w=w)
    other = jl_ridge_from_gram(A.T @ A, chokepoint=FakeChokepoint.seeded(4), event=None, r=R, w=w)
    assert np.array_equal(one, same) and not np.allclose(one, other)
    assert np.allclose(one, one.T) and np.all(np.linalg.eigvalsh(one) > 0)
    shifted = jl_ridge_from_gram(A.T @ A, chokepoint=FakeChokepoint.seeded(3), event=None, r=R, w=w, postprocess="shift")
    assert np.allclose(shifted, one - w**2 * np.eye(2))
    psd = jl_ridge_from_gram(A.T @ A, chokepoint=FakeChokepoint.seeded(3), event=None, r=R, w=w, postprocess="psd")
    assert np.all(np.linalg.eigvalsh(psd) > -1e-9)
    # A Gram matrix indefinite beyond w² by rounding still releases (symmetric square root).
    bad = np.array([[1.0, 0.0], [0.0, -2 * w**2]])
    assert np.all(np.isfinite(jl_ridge_from_gram(bad, chokepoint=FakeChokepoint.seeded(3), event=None, r=R, w=w)))


@pytest.fixture(scope="module")
def frame(spark):
    rng = np.random.default_rng(8)
    X = rng.normal(size=(200, 3)) * 0.3
    return spark.createDataFrame(pd.DataFrame(X, columns=["x1", "x2", "x3"])).cache()


def _session(tmp_path):
    return DPSession("t.jl", ledger=f"sqlite:///{tmp_path}/ledger.db", epsilon_limit=10.0, delta_limit=1e-3,
                     output=str(tmp_path / "rel"), sampler=NumpySampler())


def test_api_default_is_one_gram_pass(frame, tmp_path, monkeypatch):
    import spark_dp.aggregates.jl as jl

    def no_rows(*a, **k):
        raise AssertionError("the per-row projection ran")

    monkeypatch.setattr(jl, "jl_projection", no_rows)
    s = _session(tmp_path)
    rel = api.second_moment(s, frame, ["x1", "x2", "x3"], epsilon=1.0, delta=1e-6, norm_bound=1.0,
                            mechanism="jl_ridge", projection_rows=20)
    assert rel["matrix"].shape == (3, 3) and np.all(np.linalg.eigvalsh(rel["matrix"]) > 0)
    assert rel.manifest["params"]["projection"] == "gram"
    assert rel.privacy["projection"].startswith("gram") and "row_ids" not in rel.privacy
    monkeypatch.undo()
    rows = api.second_moment(s, frame, ["x1", "x2", "x3"], epsilon=1.0, delta=1e-6, norm_bound=1.0,
                             mechanism="jl_ridge", projection_rows=20, projection="rows")
    assert rows.manifest["params"]["projection"] == "rows" and rows.privacy["row_ids"].startswith("content")


@pytest.mark.parametrize("over, needle", [
    (dict(mechanism="jl_ridge", projection="columns"), "projection"),
    (dict(mechanism="wishart", projection="rows"), "projection"),
    (dict(mechanism="jl_ridge", row_ids="partition"), "row_ids"),  # row ids need projection: rows
])
def test_bad_projection_requests_charge_nothing(frame, tmp_path, over, needle):
    s = _session(tmp_path)
    with pytest.raises(ConfigError, match=needle):
        api.second_moment(s, frame, ["x1", "x2", "x3"], epsilon=1.0, delta=1e-6, norm_bound=1.0, **over)
    assert s.budget() is None or s.budget().releases == 0
