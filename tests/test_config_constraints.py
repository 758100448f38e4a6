"""Every config key of every task refuses an invalid value, naming the key (issue #13), without Spark.

The keys come from the task registry (each TaskSpec's params, dataset and
privacy keys) plus the declared tables of the sections every task shares
(``spark_dp.cli.config``: DATASET, PRIVACY, LEDGER, OUTPUT), so a key added
to a task or a section without an entry in COMMON or BAD fails
``test_every_key_has_an_invalid_value``.
"""

from __future__ import annotations

import os

import pytest
import yaml

from spark_dp.cli import config as C
from spark_dp.cli.config import JobConfig, _Loader
from spark_dp.cli.example_data import write_example_data
from spark_dp.cli.tasks import tasks
from spark_dp.errors import ConfigError, SchemaError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASE = {  # a shipped config per task: the valid request each bad value is put into
    "second_moment": "second_moment_analyze_gauss.yaml",
    "linear_regression": "linear_regression_analyze_gauss.yaml",
    "pca": "pca_analyze_gauss.yaml",
    "count_sketch": "count_sketch_private_count_sketch.yaml",
    "tensor_decomposition": "tensor_private_rows.yaml",
}
SECTIONS = {"dataset": C.DATASET, "privacy": C.PRIVACY, "ledger": C.LEDGER, "output": C.OUTPUT}
COMMON = {  # (section, key): invalid value — keys every task has
    ("privacy", "epsilon"): 0.0, ("privacy", "delta"): 1.0, ("privacy", "neighbors"): "swap",
    ("privacy", "sampler"): "fast", ("privacy", "norm_bound"): 0.0, ("privacy", "mode"): "off",
    ("dataset", "max_rows_per_unit"): 0, ("dataset", "nonfinite"): "keep",
    ("dataset", "privacy_unit"): 7, ("dataset", "dimension"): 0, ("dataset", "columns"): [],
    ("dataset", "id"): "", ("dataset", "path"): "", ("dataset", "table"): "db.t",  # (besides dataset.path)
    ("dataset", "where"): "x > 1",  # (with dataset.path)
    ("dataset", "format"): "xml", ("dataset", "options"): 3, ("dataset", "schema"): 5,
    ("dataset", "version"): 1, ("dataset", "snapshot_id"): 1,  # time travel on a format without it
    ("dataset", "timestamp"): "2026-11-30",
    ("ledger", "uri"): "ftp://ledger", ("ledger", "epsilon_limit"): 0.0, ("ledger", "delta_limit"): 1.0,
    ("ledger", "lifetime_epsilon_limit"): -1.0, ("ledger", "lifetime_delta_limit"): 0.0,
    ("output", "path"): "", ("output", "table"): "not a table!", ("output", "format"): "csv",
    ("release_id", None): "../evil", ("output", "confidence"): 1.0,
}
BAD = {  # task-specific key: invalid value
    "k": 0, "calibration": "classic", "dof": 0, "postprocess": "round", "standardize": "zscore", "prior_dof": 0, "projection": "fft",
    "projection_rows": 0, "public_n": 0, "row_ids": "random", "ridge": -1.0, "iterations": 0, "mode": "stream",
    "restarts": 0, "rows_per_round": 0, "whiten": "yes", "worker_cache_bytes": -1, "buckets": 0, "domain": [],
    "heavy_hitters": {"top": 0}, "repetitions": 0, "nulls": "keep", "unit_clipping": "l3", "unit_l2_bound": 0.0,
    "weight": 3, "label": 3, "entry_scale": 0.0, "bounds": {"x1": [1, 0]}, "fit_intercept": "yes",
    "norm_bound_share": 1.0, "norm_bound_quantile": 0.0, "clipping_report": "yes", "clipping_report_share": 1.0,
    "bounds_share": 1.0, "mean_share": 1.0, "covers": "sampling",
}
NAMED = {"heavy_hitters": "params.heavy_hitters.top"}  # keys whose error names a nested key


def _cases():
    for task, spec in tasks().items():
        keys = [(sec, key) for sec, decl in SECTIONS.items() for key in decl] + [("release_id", None)]
        keys += [("params", k) for k in spec.params] + [("dataset", k) for k in spec.dataset_keys]
        keys += [("privacy", k) for k in spec.privacy_keys]
        for sec, key in keys:
            yield pytest.param(task, sec, key, id=f"{task}-{sec}.{key}" if key else f"{task}-{sec}")


def test_every_key_has_an_invalid_value():
    missing = {key for _, sec, key in (c.values for c in _cases()) if (sec, key) not in COMMON and key not in BAD}
    assert not missing, f"add an invalid value for {sorted(missing)} to BAD"
    assert set(BASE) == set(tasks())


@pytest.fixture(scope="module")
def example_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("examples")
    write_example_data(str(path / "data"))
    return path


@pytest.mark.parametrize("task, section, key", list(_cases()))
def test_an_invalid_value_is_refused_naming_its_key(task, section, key, example_dir, monkeypatch):
    monkeypatch.chdir(example_dir)
    with open(os.path.join(ROOT, "conf", BASE[task])) as fh:
        raw = yaml.load(fh, Loader=_Loader)
    JobConfig.from_dict(raw)  # the base request is valid
    value = COMMON.get((section, key), BAD.get(key))
    if key is None:
        raw[section] = value
    else:
        raw.setdefault(section, {})
        raw[section] = {**(raw[section] or {}), key: value}
    named = key if key is None else NAMED.get(key, f"{section}.{key}")
    with pytest.raises((ConfigError, SchemaError)) as err:
        JobConfig.from_dict(raw)
    assert (named or section) in str(err.value), str(err.value)


@pytest.mark.parametrize("mechanism, params, needle", [
    ("adassp", {"covers": "noise+sampling"}, "must be 'noise' for mechanism 'adassp'"),
    ("analyze_gauss", {"covers": "noise+sampling", "fit_intercept": False}, "needs the constant column"),
])
def test_a_sampling_term_the_release_cannot_give_is_refused_at_validation(mechanism, params, needle, example_dir,
                                                                          monkeypatch):
    monkeypatch.chdir(example_dir)
    with open(os.path.join(ROOT, "conf", BASE["linear_regression"])) as fh:
        raw = yaml.load(fh, Loader=_Loader)
    raw["mechanism"] = mechanism
    raw["dataset"].pop("bounds", None)
    raw["params"] = {**{k: v for k, v in (raw.get("params") or {}).items() if k != "postprocess"}, **params}
    with pytest.raises(ConfigError, match=needle) as err:
        JobConfig.from_dict(raw)
    assert "params.covers" in str(err.value)
    raw["params"]["covers"] = "noise"
    JobConfig.from_dict(raw)  # the default is valid for both
