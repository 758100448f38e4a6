"""The one PSD/shift post-processing equals, bit for bit, the four copies it replaced (issue #13)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from spark_dp.second_moment._postprocess import postprocess_matrix
from spark_dp.second_moment.analyze_gauss import postprocess_matrix as ag_postprocess


def _old_ag(matrix, how, sigma):  # analyze_gauss.postprocess_matrix before the change
    if how == "none":
        return matrix
    if how == "psd":
        w, v = np.linalg.eigh(matrix)
        return (v * np.clip(w, 0.0, None)) @ v.T
    d = matrix.shape[0]
    return matrix + 2.0 * sigma * math.sqrt(d) * np.eye(d)


def _old_sheffet(out, c, how):  # jl_ridge._postprocess / wishart / inverse_wishart before: c = w² or k·B²
    d = out.shape[0]
    if how in ("shift", "psd"):
        out = out - c * np.eye(d)
    if how == "psd":
        vals, vecs = np.linalg.eigh(out)
        out = (vecs * np.clip(vals, 0.0, None)) @ vecs.T
    return out


@pytest.mark.parametrize("how", ["none", "shift", "psd"])
def test_identical_to_the_copies_it_replaced(how):
    rng = np.random.default_rng(4)
    for d in (1, 3, 12):
        a = rng.normal(size=(d, d))
        m = a + a.T
        assert np.array_equal(ag_postprocess(m, how, sigma=0.37), _old_ag(m, how, 0.37))
        for c in (0.25, 7.0 * 1.3**2):
            assert np.array_equal(postprocess_matrix(m, how, shift=-c, psd_after_shift=True), _old_sheffet(m, c, how))


def test_unknown_option():
    with pytest.raises(ValueError, match="postprocess"):
        postprocess_matrix(np.eye(2), "clip", shift=0.0, psd_after_shift=True)
