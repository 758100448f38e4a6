"""Fuzzing config parsing and the executor-side block kernels (hypothesis).

Config parsing must either accept a config or raise a SparkDPError naming a
key — never another exception type. The block kernels must return finite
results of the right shape for any float input, whatever it holds.
"""

import copy
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from spark_dp.aggregates._blocks import apply_nonfinite, clip_rows
from spark_dp.cli.config import JobConfig
from spark_dp.errors import SparkDPError

VALID = {
    "release_id": "fuzz-1",
    "dataset": {"id": "f.ds", "path": "unused.parquet", "format": "parquet", "columns": ["a", "b"]},
    "task": "second_moment",
    "mechanism": "analyze_gauss",
    "privacy": {"epsilon": 1.0, "delta": 1e-6, "norm_bound": 1.0},
    "params": {},
    "ledger": {"uri": "sqlite:///l.db", "epsilon_limit": 10.0, "delta_limit": 1e-5},
    "output": {"path": "out"},
}

values = st.one_of(
    st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12), st.lists(st.text(max_size=5), max_size=3), st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)
paths = st.sampled_from([
    ("release_id",), ("task",), ("mechanism",), ("params",), ("privacy",), ("dataset",),
    ("dataset", "id"), ("dataset", "columns"), ("dataset", "format"), ("dataset", "nonfinite"), ("dataset", "dimension"),
    ("dataset", "max_rows_per_unit"), ("dataset", "privacy_unit"), ("privacy", "epsilon"), ("privacy", "delta"),
    ("privacy", "norm_bound"), ("privacy", "neighbors"), ("privacy", "sampler"), ("ledger", "uri"),
    ("ledger", "epsilon_limit"), ("ledger", "delta_limit"), ("output", "path"), ("output", "format"), ("extra_key",),
    ("privacy", "unknown"), ("params", "postprocess"),
])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(paths, values), min_size=1, max_size=3))
@example(edits=[(("privacy", "norm_bound"), 1.3407807929942597e154)])  # B² overflowed in the sensitivity (found by CI)
@example(edits=[(("privacy", "epsilon"), 1.896150381621835e155)])  # the σ search returned NaN (found by CI)
def test_config_parsing_accepts_or_names_the_problem(edits):
    raw = copy.deepcopy(VALID)
    for path, value in edits:
        target = raw
        for key in path[:-1]:
            if not isinstance(target.get(key), dict):
                target[key] = {}
            target = target[key]
        target[path[-1]] = value
    try:
        cfg = JobConfig.from_dict(raw, check_paths=False)
    except SparkDPError as exc:
        msg = str(exc)
        assert "\n" not in msg and len(msg) < 400
        return
    assert cfg.privacy.epsilon > 0 and 0 < cfg.privacy.delta < 1 and cfg.privacy.norm_bound > 0
    assert cfg.task == "second_moment" and len(cfg.sha256) == 64


@settings(max_examples=300, deadline=None)
@given(
    hnp.arrays(np.float64, hnp.array_shapes(min_dims=2, max_dims=2, min_side=0, max_side=12),
               elements=st.floats(allow_nan=True, allow_infinity=True, width=64)),
    st.floats(min_value=1e-6, max_value=1e6),
    st.sampled_from(["drop", "zero"]),
)
def test_block_kernels_are_total_and_bounded(block, bound, policy):
    out = clip_rows(apply_nonfinite(block, policy), bound)
    assert out.shape[1] == block.shape[1]
    assert out.shape[0] == (block.shape[0] if policy == "zero" else int(np.isfinite(block).all(axis=1).sum()))
    assert np.isfinite(out).all()
    if out.size:
        norms = np.sqrt(np.sum((out / bound) ** 2, axis=1)) * bound
        assert np.all(norms <= bound * (1 + 1e-9))


@pytest.mark.parametrize("bad", [math.nan, -1.0, 0.0])
def test_norm_bound_must_be_positive(bad):
    raw = copy.deepcopy(VALID)
    raw["privacy"]["norm_bound"] = bad
    with pytest.raises(SparkDPError, match="privacy.norm_bound"):
        JobConfig.from_dict(raw, check_paths=False)
