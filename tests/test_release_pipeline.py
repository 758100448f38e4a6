"""The one release pipeline (spark_dp/release/pipeline.py), without Spark.

A plan is a frozen value; run_release orders the steps (stored release →
budget dry run → compute → charge → noise through the chokepoint → write →
mark written); manifest additions come back from ``noise`` instead of being
written into closed-over dicts; a plan that is not private charges nothing.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest

from spark_dp import DPSession
from spark_dp.errors import BudgetExceededError, ReleaseConflictError
from spark_dp.privacy import Budget, gaussian_noise_multiplier
from spark_dp.privacy.events import GaussianEvent
from spark_dp.release import load_release
from spark_dp.release.pipeline import Noised, ReleasePlan, run_release
from tests._samplers import Recorder

EPS, DELTA = 1.0, 1e-6


def _session(tmp_path, **kw):
    return DPSession("ds", ledger=f"sqlite:///{tmp_path}/ledger.db", epsilon_limit=kw.pop("epsilon_limit", 3.0),
                     delta_limit=1e-5, output=str(tmp_path / "out"), sampler=kw.pop("sampler", Recorder()), **kw)


def _plan(steps: list[str], *, value=1.0, release_id="r1", epsilon=EPS, **over) -> ReleasePlan:
    sigma = gaussian_noise_multiplier(epsilon, DELTA)  # Δ = 1

    def compute():
        steps.append("compute")
        return np.full(3, value)

    def noise(exact, cp):
        steps.append("noise")
        return Noised({"values": cp.gaussian(exact, sigma=sigma, l2_sensitivity=1.0)}, {"solution": {"n": 3}})

    fields = dict(task="test_task", mechanism="gauss", request={"value": value, "epsilon": epsilon},
                  events=(GaussianEvent(sigma),), budget=Budget(epsilon, DELTA),
                  privacy={"neighbors": "add_remove", "noise_family": "gaussian", "noise_scale": sigma}, manifest={"params": {"value": value}},
                  compute=compute, noise=noise, release_id=release_id)
    return ReleasePlan(**{**fields, **over})


def test_plan_is_frozen_and_digests_its_request():
    plan = _plan([])
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.task = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        plan.request["value"] = 2  # type: ignore[index]
    assert plan.request_sha256 == _plan([], release_id="other").request_sha256
    assert plan.request_sha256 != _plan([], value=2.0).request_sha256


@pytest.mark.parametrize("over, message", [
    ({"events": ()}, "needs its events and budget"),
    ({"budget": None}, "needs its events and budget"),
    ({"privacy": {"noise_family": "gaussian", "noise_scale": 1.0}}, "neighbour relation"),
    ({"privacy": {"neighbors": "add_remove"}}, "noise_family and noise_scale"),
    ({"manifest": {"privacy": {}}}, "belong to the pipeline"),
    ({"mode": "public_input"}, "must not carry privacy events"),
    ({"mode": "sometimes"}, "mode"),
])
def test_inconsistent_plans_are_bugs(over, message):
    with pytest.raises(RuntimeError, match=message):
        _plan([], **over)


def test_steps_run_in_order_and_the_manifest_takes_the_noise_additions(tmp_path):
    session, steps = _session(tmp_path), []
    rel = run_release(session, _plan(steps))
    assert steps == ["compute", "noise"]
    assert len(session.sampler.draws) == 1
    assert rel.manifest["solution"] == {"n": 3} and rel.manifest["params"] == {"value": 1.0}
    assert rel.manifest["privacy"]["ledger_entry"] >= 1 and rel.manifest["privacy"]["neighbors"] == "add_remove"
    stored = load_release(os.path.join(tmp_path, "out", "r1"))
    np.testing.assert_array_equal(stored["values"], rel["values"])
    assert session.ledger.lookup("r1").location == os.path.join(str(tmp_path / "out"), "r1")

    # Same id, same request: the stored release, nothing computed, drawn or charged.
    spent = session.budget().spent_epsilon
    again = run_release(session, _plan(steps))
    assert again.reused and steps == ["compute", "noise"] and len(session.sampler.draws) == 1
    np.testing.assert_array_equal(again["values"], rel["values"])
    assert session.budget().spent_epsilon == spent
    # Same id, another request: refused.
    with pytest.raises(ReleaseConflictError):
        run_release(session, _plan(steps, value=2.0))


def test_over_budget_refuses_before_compute(tmp_path):
    session, steps = _session(tmp_path, epsilon_limit=0.5), []
    with pytest.raises(BudgetExceededError):
        run_release(session, _plan(steps))
    assert steps == [] and session.ledger.lookup("r1") is None and not os.path.exists(tmp_path / "out" / "r1")


def test_noise_that_leaves_a_charged_event_unused_is_a_bug_and_writes_nothing(tmp_path):
    session, steps = _session(tmp_path), []
    plan = _plan(steps, noise=lambda exact, cp: Noised({"values": exact}))
    with pytest.raises(RuntimeError, match="not used"):
        run_release(session, plan)
    charge = session.ledger.lookup("r1")
    assert charge is not None and charge.crash == "RuntimeError after the charge, before the release was written"
    assert not os.path.exists(tmp_path / "out" / "r1")


@pytest.mark.parametrize("mode, root, rid", [("public_input", "out", "p1"), ("nonprivate", "out/nonprivate",
                                                                              "nonprivate-p1")])
def test_plans_that_are_not_private_charge_nothing(tmp_path, mode, root, rid):
    session, steps = _session(tmp_path), []
    plan = _plan(steps, events=(), budget=None, privacy={"note": "public input"}, mode=mode, release_id="p1",
                 noise=lambda exact, cp: (steps.append(f"noise cp={cp}"), Noised({"values": exact}))[1])
    rel = run_release(session, plan)
    assert steps == ["compute", "noise cp=None"] and rel.release_id == rid
    assert rel.manifest["privacy"]["private"] is False and "nothing charged" in rel.manifest["privacy"]["note"]
    assert session.budget() is None or session.budget().spent_epsilon == 0
    assert os.path.isfile(tmp_path / root / rid / "manifest.json")
    assert run_release(session, plan).reused and steps == ["compute", "noise cp=None"]
