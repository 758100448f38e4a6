"""One suite every mechanism runs, through the public API (``spark_dp.DPSession``), issue #13.

For each (family, mechanism) reachable from a DPSession — second_moment, linear_regression and pca
with every mechanism of :data:`spark_dp.second_moment.api.MECHANISMS` that offers the task,
count_sketch with every sketch mechanism, tensor_decomposition with every private mechanism on
every input it takes:

* **idempotence** — the same ``release_id`` with the same request returns the stored release
  (``reused``, identical arrays, no new ledger charge, no sampler draw — not even a sketch's fresh
  hash seeds); a different request under the same id raises ReleaseConflictError, charging and
  drawing nothing;
* **bad parameters** — an invalid value of each of the mechanism's parameters raises ConfigError
  naming the parameter, with nothing charged (ledger status unchanged), nothing drawn and nothing
  written under the output directory.

The other two legs of the shared suite live in their own files: sensitivity scaling with the privacy
unit and neighbours in tests/test_privacy_unit_scaling.py, the noise audits in
tests/test_reliability_audits.py.

The parameter lists are the tables at the top (keyword names exactly as the family functions take
them): a renamed parameter is one edit there.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

import spark_dp
from spark_dp.errors import ConfigError, ReleaseConflictError
from spark_dp.second_moment._registry import OPTIONAL_PARAMS
from spark_dp.second_moment.api import MECHANISMS as SECOND_MOMENT_MECHANISMS
from spark_dp.sketch import MECHANISMS as SKETCH_MECHANISMS
from spark_dp.tensor.api import PRIVATE as TENSOR_PRIVATE
from tests._samplers import Recorder
from tests._tensor_data import orthogonal_tensor

EPS, DELTA = 1.0, 1e-6
COLUMNS = ["x1", "x2", "x3"]  # d = 3 (4 with the label)
D_TENSOR = 4

# -- the parameter tables ------------------------------------------------------------------------
# A valid request per family (the data argument is passed positionally) ...
SECOND_MOMENT_CALL = {
    "second_moment": dict(columns=COLUMNS),
    "linear_regression": dict(columns=COLUMNS, label="y"),
    "pca": dict(columns=COLUMNS, k=2),
}
SECOND_MOMENT_PRIVACY = dict(epsilon=EPS, delta=DELTA, norm_bound=1.0)
SKETCH_CALL = dict(columns="item", epsilon=EPS, delta=DELTA, repetitions=3, buckets=32)
SKETCH_MECHANISM_CALL = {"histogram": dict(domain=[f"i{j}" for j in range(20)])}
TENSOR_CALL = dict(k=1, epsilon=EPS, delta=DELTA, restarts=2, iterations=3)
TENSOR_ROWS_CALL = dict(columns=COLUMNS, norm_bound=1.0, mode="reuse")

# ... and an invalid value for each parameter the family checks.
SECOND_MOMENT_BAD = {
    "epsilon": 0.0, "delta": 1.0, "norm_bound": 0.0, "neighbors": "swap", "postprocess": "round",
    "nonfinite": "keep", "max_rows_per_unit": 0, "privacy_unit": 7, "calibration": "classic",
    "row_ids": "random", "projection": "fft", "mechanism": "laplace_magic", "release_id": "../evil",
    "clipping_report": "yes", "clipping_report_share": 0.0, "bounds_share": 0.0,
}
SECOND_MOMENT_FAMILY_BAD = {
    "second_moment": {"dimension": 0},
    "linear_regression": {"ridge": -1.0, "label": "x1"},  # the label must not be a feature column
    "pca": {"k": 0, "dimension": 0},
}
# Optional parameters: an invalid value where the mechanism takes them ...
SECOND_MOMENT_OPTIONAL_BAD = {"projection_rows": 3, "dof": 2, "public_n": 0, "prior_dof": 1}
# ... and a value valid for the mechanisms that take it, refused by those that do not.
SECOND_MOMENT_OPTIONAL_GIVEN = {"projection_rows": 500, "dof": 500, "public_n": 1000, "prior_dof": 10,
                                "row_ids": "partition", "projection": "rows"}

SKETCH_BAD = {
    "epsilon": 0.0, "delta": 1.0, "repetitions": 0, "buckets": 0, "max_rows_per_unit": 0, "neighbors": "swap",
    "unit_clipping": "l3", "unit_l2_bound": 2.0, "nulls": "keep", "nonfinite": "keep", "top": 0,
    "threshold": "high", "hash_items": "yes", "mechanism": "count_max", "weight": 3, "privacy_unit": 3,
    "columns": 3, "source": {"file": "x"}, "source_paths": 7, "release_id": "../evil",
}
SKETCH_MECHANISM_BAD = {
    "private_count_sketch": {"levels": 0, "seeds": [1, 2], "domain": 20},
    "count_min": {"levels": 8, "seeds": [1, 2], "domain": 20},
    "count_mean": {"levels": 8, "buckets": 1, "seeds": [1, 2], "domain": 20},
    "histogram": {"levels": 8, "seeds": [1, 2, 3], "domain": 0},
}

TENSOR_BAD = {
    "epsilon": 0.0, "delta": 1.0, "k": 0, "restarts": 0, "iterations": 0, "calibration": "classic",
    "entry_scale": 0.0, "mode": "stream", "whiten": "yes", "mechanism": "power_iteration", "private": False,
    "release_id": "../evil",
}
TENSOR_INPUT_BAD = {
    # an explicit tensor has no rows: row parameters are refused, its neighbours are tensor_entry only
    "tensor": {"k": D_TENSOR + 1, "neighbors": "add_remove", "rows_per_round": 10, "privacy_unit": "uid",
               "max_rows_per_unit": 2, "whiten": True},
    "rows": {"k": len(COLUMNS) + 1, "neighbors": "tensor_entry", "norm_bound": 0.0, "nonfinite": "keep",
             "max_rows_per_unit": 0, "privacy_unit": 7, "rows_per_round": 0, "worker_cache_bytes": -1,
             "clear_worker_cache": "yes", "columns": None, "source_paths": "x.parquet"},
}


# -- the cases -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    """One (family, mechanism, input) through DPSession: a valid call and its bad parameters."""

    family: str  # the DPSession method
    mechanism: str
    call: dict[str, Any]
    bad: dict[str, Any]
    data: str = "rows"  # "rows" (the DataFrame) or "tensor" (an explicit tensor)
    changed: dict[str, Any] = field(default_factory=lambda: {"epsilon": EPS / 2})  # another request

    @property
    def id(self) -> str:
        return f"{self.family}-{self.mechanism}" + ("-rows" if self.family == "tensor_decomposition" and
                                                    self.data == "rows" else "")


def _second_moment_cases() -> list[Case]:
    cases = []
    for family, call in SECOND_MOMENT_CALL.items():
        for name, spec in SECOND_MOMENT_MECHANISMS.items():
            if family not in spec.tasks:
                continue
            bad = {**SECOND_MOMENT_BAD, **SECOND_MOMENT_FAMILY_BAD[family]}
            for param in OPTIONAL_PARAMS:
                if param in spec.params:
                    if param in SECOND_MOMENT_OPTIONAL_BAD:
                        bad[param] = SECOND_MOMENT_OPTIONAL_BAD[param]
                else:
                    bad[param] = SECOND_MOMENT_OPTIONAL_GIVEN[param]
            if "paper" not in spec.calibrations:
                bad["calibration"] = "paper"  # a real calibration this mechanism has no published constant for
            if spec.postprocess == ("none",):
                bad["postprocess"] = "psd"
            if not spec.units:
                bad["max_rows_per_unit"] = 2  # its proof is for one row per unit
            cases.append(Case(family, name, {**call, **SECOND_MOMENT_PRIVACY, "mechanism": name}, bad))
    return cases


def _sketch_cases() -> list[Case]:
    return [Case("count_sketch", name, {**SKETCH_CALL, **SKETCH_MECHANISM_CALL.get(name, {}), "mechanism": name},
                 {**SKETCH_BAD, **SKETCH_MECHANISM_BAD[name]})
            for name in SKETCH_MECHANISMS]


def _tensor_cases() -> list[Case]:
    cases = []
    for name in TENSOR_PRIVATE:
        for data in ("tensor", "rows"):
            if data == "rows" and name == "input_perturbation":  # an explicit-tensor mechanism
                continue
            call = {**TENSOR_CALL, **(TENSOR_ROWS_CALL if data == "rows" else {}), "mechanism": name}
            bad = {**TENSOR_BAD, **TENSOR_INPUT_BAD[data]}
            if data == "rows":
                bad["mechanism"] = "input_perturbation"  # needs an explicit tensor
            cases.append(Case("tensor_decomposition", name, call, bad, data=data))
    return cases


CASES = _second_moment_cases() + _sketch_cases() + _tensor_cases()
BAD_CASES = [(c, p, v) for c in CASES for p, v in c.bad.items()]


def test_every_mechanism_is_in_the_suite():
    """The tables cover every registry entry, so a new mechanism joins the suite (or fails here)."""
    covered = {(c.family, c.mechanism) for c in CASES}
    for name, spec in SECOND_MOMENT_MECHANISMS.items():
        assert {(t, name) for t in spec.tasks} <= covered
    assert {("count_sketch", m) for m in SKETCH_MECHANISMS} <= covered
    assert {("tensor_decomposition", m) for m in TENSOR_PRIVATE} <= covered
    assert len(CASES) == sum(len(s.tasks) for s in SECOND_MOMENT_MECHANISMS.values()) + len(SKETCH_MECHANISMS) + 3


# -- fixtures ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def frame(spark):
    rng = np.random.default_rng(11)
    n = 300
    X = rng.normal(size=(n, 3)) * 0.4
    y = X @ np.array([0.5, -0.3, 0.2]) + 0.05 * rng.normal(size=n)
    rows = [(float(a), float(b), float(c), float(t), f"i{int(j)}", int(u))
            for (a, b, c), t, j, u in zip(X, y, rng.zipf(1.5, size=n) % 20, rng.integers(0, 60, size=n))]
    return spark.createDataFrame(rows, "x1 double, x2 double, x3 double, y double, item string, uid long").cache()


TENSOR = orthogonal_tensor(D_TENSOR, 2, seed=3)[0]


def _session(tmp_path) -> tuple[spark_dp.DPSession, Recorder]:
    sampler = Recorder()
    dp = spark_dp.DPSession("suite.data", ledger=f"sqlite:///{tmp_path}/ledger.db", epsilon_limit=100.0,
                            delta_limit=1e-3, output=str(tmp_path / "releases"), sampler=sampler)
    return dp, sampler


def _release(dp, case: Case, frame, **over):
    kwargs = {**case.call, **over}
    if case.family == "tensor_decomposition":
        kwargs["rng"] = np.random.default_rng(7)  # the random starts (public), the same on every call
    data = TENSOR if case.data == "tensor" else frame
    return getattr(dp, case.family)(data, **kwargs)


def _ledger_state(dp) -> tuple:
    status = dp.budget()
    return (None if status is None else (status.spent_epsilon, status.releases),
            [c.seq for c in dp.ledger.charges(dp.dataset_id)])


def _noise_calls(sampler: Recorder) -> int:
    """Every use of the session's sampler: noise, and ``key`` (secret keys, the sketches' fresh hash seeds)."""
    return sum(sampler.calls[m] for m in ("gaussian", "laplace", "standard_normal", "key"))


def _written(tmp_path) -> list[str]:
    out = tmp_path / "releases"
    return sorted(str(p.relative_to(out)) for p in out.rglob("*")) if out.exists() else []


# -- idempotence ---------------------------------------------------------------------------------
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_same_release_id_returns_the_stored_release(spark, frame, tmp_path, case):
    dp, sampler = _session(tmp_path)
    first = _release(dp, case, frame, release_id="suite-001")
    assert not first.reused and _noise_calls(sampler) > 0
    state, calls, files = _ledger_state(dp), _noise_calls(sampler), _written(tmp_path)
    assert len(state[1]) == 1  # one charge

    again = _release(dp, case, frame, release_id="suite-001")
    assert again.reused and again.release_id == first.release_id
    assert set(again.arrays) == set(first.arrays)
    for name, arr in first.arrays.items():
        assert np.array_equal(again[name], arr), name
    assert again.manifest["request_sha256"] == first.manifest["request_sha256"]
    assert _ledger_state(dp) == state and _noise_calls(sampler) == calls and _written(tmp_path) == files

    with pytest.raises(ReleaseConflictError):
        _release(dp, case, frame, release_id="suite-001", **case.changed)
    assert _ledger_state(dp) == state and _noise_calls(sampler) == calls and _written(tmp_path) == files


# -- bad parameters ------------------------------------------------------------------------------
@pytest.mark.parametrize("case, param, value", BAD_CASES, ids=[f"{c.id}-{p}" for c, p, _ in BAD_CASES])
def test_bad_parameter_is_refused_before_anything_is_charged(spark, frame, tmp_path, case, param, value):
    dp, sampler = _session(tmp_path)
    before = _ledger_state(dp)
    with pytest.raises(ConfigError) as err:
        _release(dp, case, frame, **{param: value})
    assert f"'{param}'" in str(err.value), str(err.value)
    assert _ledger_state(dp) == before and _noise_calls(sampler) == 0
    assert not os.path.exists(tmp_path / "releases")
