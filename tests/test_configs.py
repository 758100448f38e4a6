"""Every config shipped in conf/ is valid against the generated example data.

(Each family's tests run its configs through the job; this catches a config
that stops validating, e.g. after a schema change, without starting Spark.)
"""

import glob
import os
import warnings
from pathlib import Path

import pytest
import yaml

from spark_dp.cli.config import JobConfig, _Loader, load_config
from spark_dp.cli.example_data import write_example_data
from spark_dp.errors import SparkDPDeprecationWarning

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = sorted(glob.glob(os.path.join(ROOT, "conf", "*.yaml")))


def test_example_data_covers_the_configs(tmp_path):
    written = write_example_data(str(tmp_path / "data"))
    assert len(written) == 7
    assert write_example_data(str(tmp_path / "data")) == []  # idempotent


@pytest.mark.parametrize("path", [c for c in CONFIGS if not os.path.basename(c).startswith("plan_")],
                         ids=lambda p: os.path.basename(p))
def test_config_validates(tmp_path, monkeypatch, path):
    write_example_data(str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SparkDPDeprecationWarning)  # shipped configs use the current names
        cfg = load_config(path)
    assert cfg.task and cfg.mechanism and cfg.dataset.id
    assert cfg.spec.plan(cfg) is not None


# Keys conf/ used before the one-vocabulary rename (issue #13): still accepted, with a warning naming the new key.
OLD_KEYS = {"dataset.max_items_per_unit": "dataset.max_rows_per_unit"}


@pytest.mark.parametrize("path", [c for c in CONFIGS if not os.path.basename(c).startswith("plan_")
                                  and "max_rows_per_unit" in Path(c).read_text() and "count_sketch" in c],
                         ids=lambda p: os.path.basename(p))
def test_configs_with_their_old_keys_still_validate(tmp_path, monkeypatch, path):
    write_example_data(str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    new = load_config(path)
    with open(path) as fh:
        raw = yaml.load(fh, Loader=_Loader)
    for old, current in OLD_KEYS.items():
        (section, old_key), (_, key) = old.split("."), current.split(".")
        raw[section][old_key] = raw[section].pop(key)
    with pytest.warns(SparkDPDeprecationWarning, match="deprecated; use 'dataset.max_rows_per_unit'"):
        cfg = JobConfig.from_dict(raw)
    assert cfg.dataset == new.dataset and cfg.spec.plan(cfg) == new.spec.plan(new)


def test_configs_validate_and_plan_without_pyspark(tmp_path):
    """cli/config.py and the task registry never import pyspark: a job config is validated and its privacy
    events planned before Spark starts (a subprocess where importing pyspark raises)."""
    import subprocess
    import sys
    import textwrap

    write_example_data(str(tmp_path / "data"))
    script = textwrap.dedent(f"""
        import sys

        class NoSpark:
            def find_spec(self, name, path=None, target=None):
                if name == "pyspark" or name.startswith("pyspark."):
                    raise ImportError("pyspark imported while validating a config")

        sys.meta_path.insert(0, NoSpark())
        from spark_dp.cli.config import load_config

        for path in {[c for c in CONFIGS if not os.path.basename(c).startswith("plan_")]!r}:
            cfg = load_config(path)
            assert cfg.spec.plan(cfg) is not None, path
        assert not any(m == "pyspark" or m.startswith("pyspark.") for m in sys.modules)
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")})
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
