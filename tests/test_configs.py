"""Every config shipped in conf/ is valid against the generated example data.

(Each family's tests run its configs through the job; this catches a config
that stops validating, e.g. after a schema change, without starting Spark.)
"""

import glob
import os

import pytest

from spark_dp.cli.config import load_config
from spark_dp.cli.example_data import write_example_data

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = sorted(glob.glob(os.path.join(ROOT, "conf", "*.yaml")))


def test_example_data_covers_the_configs(tmp_path):
    written = write_example_data(str(tmp_path / "data"))
    assert len(written) == 6
    assert write_example_data(str(tmp_path / "data")) == []  # idempotent


@pytest.mark.parametrize("path", [c for c in CONFIGS if not os.path.basename(c).startswith("plan_")],
                         ids=lambda p: os.path.basename(p))
def test_config_validates(tmp_path, monkeypatch, path):
    write_example_data(str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    cfg = load_config(path)
    assert cfg.task and cfg.mechanism and cfg.dataset.id
    assert cfg.spec.plan(cfg) is not None
