"""The worked example's configs (conf/examples/baseball_runs*.yaml) validate and run with the job on a sample.

The full figures are benchmarks/bounds_baseball.py's (docs/accuracy.md); here a 3,000-row sample of the
table (or, where the shared data set is absent, synthetic rows in the same columns and ranges) runs the
row-level config end to end: intercept and six coefficients in the data's units, their intervals, B = √8
from the bounds, one charge. The player-level config validates and plans m = 20 rows per unit.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pytest
import yaml

import spark_dp
from spark_dp.cli.config import JobConfig, _Loader
from spark_dp.cli.main import main as cli_main
from tests._jobs import charges, localise, write_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONF = os.path.join(ROOT, "conf", "examples")
DATA = os.path.join(ROOT, "..", "shared", "data", "baseball_batting.csv")
FEATURES = ["ab", "h", "X2b", "X3b", "hr", "bb"]


def _config(name):
    with open(os.path.join(CONF, name)) as fh:
        return yaml.load(fh, Loader=_Loader)


def _sample(path, n=3000):
    if os.path.exists(DATA):
        df = pd.read_csv(DATA).sample(n=n, random_state=1)
    else:  # synthetic rows in the same ranges (data for the test, not noise)
        rng = np.random.default_rng(1)
        ab = rng.integers(50, 650, n)
        h = (ab * rng.uniform(0.2, 0.33, n)).astype(int)
        df = pd.DataFrame({"id": rng.integers(0, 200, n).astype(str), "ab": ab, "h": h, "X2b": h // 5,
                           "X3b": h // 30, "hr": h // 10, "bb": ab // 10})
        df["r"] = (0.45 * df.h + 0.3 * df.bb + 0.4 * df.hr + rng.normal(0, 8, n)).clip(0)
    df.to_csv(path, index=False)


@pytest.mark.parametrize("name", ["baseball_runs.yaml", "baseball_runs_players.yaml"])
def test_configs_validate_and_plan(name, tmp_path):
    raw = localise(_config(name), tmp_path, data=str(tmp_path / "sample.csv"), sampler=None)
    _sample(tmp_path / "sample.csv", n=50)
    cfg = JobConfig.from_dict(raw)
    assert cfg.privacy.norm_bound is None and cfg.privacy.sampler == "secure"
    events = cfg.spec.plan(cfg)
    assert [type(e).__name__ for e in events] == ["GaussianEvent"]
    assert cfg.dataset.max_rows_per_unit == (20 if "players" in name else 1)


def test_row_level_config_runs_on_a_sample(spark, tmp_path, capsys):
    _sample(tmp_path / "sample.csv")
    raw = localise(_config("baseball_runs.yaml"), tmp_path, data=str(tmp_path / "sample.csv"))
    assert cli_main(["release", write_config(tmp_path, raw)]) == 0
    rel = spark_dp.load_release(json.loads(capsys.readouterr().out)["path"])
    assert rel["coefficients"].shape == (6,) and rel["intercept"].shape == (1,)
    assert rel.privacy["norm_bound"] == pytest.approx(np.sqrt(8.0))
    assert rel.uncertainty["coefficients"].covers == "noise"  # the default: the privacy noise
    method = rel.uncertainty["coefficients"].method  # the shift's ridge bias: bounded, or the unregularised fit's
    assert "iterated Tikhonov" in method or "unregularised fit" in method, method
    assert rel.manifest["uncertainty"]["arrays"]["intercept"]["covers"] == "noise"
    low, high = rel.interval("coefficients")
    assert np.all(low <= high) and low.shape == (6,)
    assert rel.manifest["scaling"]["bounds"]["ab"] == [0.0, 750.0]
    assert charges(tmp_path) == 1
