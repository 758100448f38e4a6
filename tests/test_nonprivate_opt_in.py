"""Non-private mechanisms on the dataset's rows need an explicit opt-in (issue #12, item 3).

``online_power_method`` releases exact eigenpairs computed from the rows. A
one-word change of ``mechanism`` must not publish that next to private
releases: the API needs ``private=False``, refuses datasets with a budget,
and writes under ``<output>/nonprivate/`` with a ``nonprivate-`` id; the
report says so loudly. Alg. 1 on an explicit (public) tensor is unchanged.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import spark_dp
from spark_dp.errors import ConfigError
from spark_dp.privacy import SeededSampler
from spark_dp.tensor.api import tensor_decomposition
from tests._tensor_data import orthogonal_tensor

COLS = ["a", "b", "c"]


@pytest.fixture(scope="module")
def rows(spark):
    rng = np.random.default_rng(0)
    return spark.createDataFrame([tuple(map(float, r)) for r in rng.normal(size=(200, 3)) / 2], COLS)


def _online(session, df, **kw):
    return tensor_decomposition(session, df, k=1, mechanism="online_power_method", columns=COLS, norm_bound=2.0,
                                restarts=2, iterations=3, mode="reuse", rng=np.random.default_rng(1), **kw)


def _session(tmp_path, dataset="public.rows", **kw):
    return spark_dp.DPSession(dataset, ledger=f"sqlite:///{tmp_path}/l.db", output=str(tmp_path / "out"),
                              sampler=SeededSampler(np.random.default_rng(2)), **kw)


def test_without_the_opt_in_nothing_runs(rows, tmp_path):
    for private in (None, True):
        with pytest.raises(ConfigError, match="NOT differentially private"):
            _online(_session(tmp_path), rows, private=private)
    with pytest.raises(ConfigError, match="'private' parameter"):
        _online(_session(tmp_path), rows, private="no")
    assert not (tmp_path / "out").exists()


def test_a_dataset_with_a_budget_is_refused(rows, tmp_path):
    with pytest.raises(ConfigError, match="has a privacy budget"):
        _online(_session(tmp_path, epsilon_limit=10.0, delta_limit=1e-5), rows, private=False)
    # a dataset the ledger knows (its limit set by an earlier private release) is refused even without limits given
    private = _session(tmp_path, dataset="sales", epsilon_limit=10.0, delta_limit=1e-5)
    private.second_moment(rows, COLS, epsilon=1.0, delta=1e-6, norm_bound=1.0)
    with pytest.raises(ConfigError, match="has a privacy budget"):
        _online(_session(tmp_path, dataset="sales"), rows, private=False)
    assert "nonprivate" not in os.listdir(tmp_path / "out")  # nothing non-private was written


def test_private_false_is_only_for_non_private_mechanisms_on_rows(rows, tmp_path):
    with pytest.raises(ConfigError, match="'private' parameter"):
        tensor_decomposition(_session(tmp_path), rows, k=1, columns=COLS, norm_bound=1.0, epsilon=1.0, delta=1e-6,
                             private=False)
    with pytest.raises(ConfigError, match="'private' parameter"):
        tensor_decomposition(_session(tmp_path), orthogonal_tensor(4, 1)[0], k=1, mechanism="power_method",
                             private=False)


def test_the_opt_in_writes_where_no_reader_takes_it_for_private(rows, tmp_path):
    pytest.importorskip("matplotlib")
    from spark_dp.report import write_report

    session = _session(tmp_path)
    rel = _online(session, rows, private=False, release_id="weekly")
    assert rel.release_id == "nonprivate-weekly"
    assert rel.path == str(tmp_path / "out" / "nonprivate" / "nonprivate-weekly")
    assert rel.privacy["private"] is False and rel.privacy["note"].startswith("NOT DIFFERENTIALLY PRIVATE")
    assert session.budget() is None  # nothing charged, the dataset not even registered
    again = _online(session, rows, private=False, release_id="weekly")
    assert again.reused and np.array_equal(again["eigenvectors"], rel["eigenvectors"])
    text = open(write_report(rel.path).path, encoding="utf-8").read()
    assert text.startswith("> **NOT DIFFERENTIALLY PRIVATE.**")
    # Alg. 1 on an explicit public tensor stays as it was: no opt-in, the ordinary output root
    alg1 = tensor_decomposition(session, orthogonal_tensor(4, 1)[0], k=1, mechanism="power_method", restarts=2,
                                iterations=5, rng=np.random.default_rng(3))
    assert not alg1.release_id.startswith("nonprivate-") and alg1.path.startswith(str(tmp_path / "out"))
    assert "nonprivate" not in os.path.relpath(alg1.path, tmp_path / "out")
