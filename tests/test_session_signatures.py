"""DPSession's release methods show the family functions' real parameters (issue #13)."""

from __future__ import annotations

import inspect
import pydoc

import pytest

from spark_dp import DPSession
from spark_dp.second_moment.api import linear_regression, pca, second_moment
from spark_dp.sketch.api import count_sketch
from spark_dp.tensor.api import tensor_decomposition

FAMILY = {"second_moment": second_moment, "linear_regression": linear_regression, "pca": pca,
          "count_sketch": count_sketch, "tensor_decomposition": tensor_decomposition}


@pytest.mark.parametrize("name", sorted(FAMILY))
def test_methods_have_the_family_signatures(name):
    method, fn = getattr(DPSession, name), FAMILY[name]
    m_params = list(inspect.signature(method).parameters.values())
    f_params = list(inspect.signature(fn).parameters.values())
    assert m_params[0].name == "self" and f_params[0].name == "session"
    assert m_params[1:] == f_params[1:]
    assert not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in m_params)  # no **kwargs
    assert method.__doc__ == fn.__doc__ and method.__doc__
    text = pydoc.render_doc(method, renderer=pydoc.plaintext)
    assert "epsilon" in text and "release_id" in text and "**kwargs" not in text


def test_bound_methods_call_the_family_function(tmp_path):
    dp = DPSession("sig", ledger=f"sqlite:///{tmp_path}/l.db", output=str(tmp_path / "out"))
    assert list(inspect.signature(dp.count_sketch).parameters)[:2] == ["df", "columns"]
    with pytest.raises(TypeError):
        dp.pca(None, ["a"], 1, bogus=1)  # an unknown keyword fails like a plain function call
