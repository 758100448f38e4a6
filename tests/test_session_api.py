"""DPSession's task methods are thin wrappers: each passes everything to its family function."""

import importlib

import pytest

import spark_dp

WRAPPERS = [
    ("second_moment", "spark_dp.second_moment.api", ("df", ["a"]), {"epsilon": 1.0}),
    ("linear_regression", "spark_dp.second_moment.api", ("df", ["a"], "y"), {"epsilon": 1.0, "mechanism": "adassp"}),
    ("pca", "spark_dp.second_moment.api", ("df", ["a", "b"], 1), {"delta": 1e-6}),
    ("count_sketch", "spark_dp.sketch.api", ("df", "item"), {"repetitions": 5}),
    ("tensor_decomposition", "spark_dp.tensor.api", ("T",), {"k": 2}),
]


@pytest.mark.parametrize("method, module, args, kwargs", WRAPPERS, ids=[w[0] for w in WRAPPERS])
def test_wrapper_passes_everything_through(tmp_path, monkeypatch, method, module, args, kwargs):
    session = spark_dp.DPSession("w.ds", ledger=f"sqlite:///{tmp_path}/l.db", output=str(tmp_path))
    seen = {}

    def fake(sess, *a, **kw):
        seen.update(session=sess, args=a, kwargs=kw)
        return "release"

    monkeypatch.setattr(importlib.import_module(module), method, fake)
    assert getattr(session, method)(*args, **kwargs) == "release"
    assert seen == {"session": session, "args": args, "kwargs": kwargs}


def test_every_family_function_has_a_session_method():
    for _, module, _, _ in WRAPPERS:
        importlib.import_module(module)
    for method, *_ in WRAPPERS:
        assert callable(getattr(spark_dp.DPSession, method))
