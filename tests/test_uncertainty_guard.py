"""Guard: every array of every mechanism's release carries an uncertainty, except the documented exclusions.

Walks the registries (second_moment.mechanisms.MECHANISMS with each task and
post-processing, with and without public bounds and intercept;
sketch.mechanisms.REGISTRY; tensor.mechanisms.REGISTRY on each input it
takes), releases each on a tiny input and compares the arrays without an
uncertainty with :data:`EXCLUDED`. A new array without error bars fails
here, and so does an exclusion that is no longer needed (remove it and its
line in docs/accuracy.md, "Arrays without error bars").

The second-moment family's exact summary is computed in numpy from the same
rows (``gram_matrix`` patched: the guard is about the release's arrays, not
the Spark kernel, which other tests check); sketches and tensor rows run on
Spark.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from spark_dp import DPSession
from spark_dp.second_moment import api as sm_api
from spark_dp.second_moment.mechanisms import MECHANISMS
from spark_dp.sketch.mechanisms import REGISTRY as SKETCHES
from spark_dp.tensor.mechanisms import REGISTRY as TENSORS
from tests._samplers import Recorder

KW = {"epsilon": 1.0, "delta": 1e-6}
BOUNDS = {"x1": (-1.0, 2.0), "x2": (-1.0, 1.0), "x3": (-2.0, 1.0)}


def _excluded(task: str, mechanism: str, params: dict, array: str) -> str | None:
    """Why ``array`` of this release has no uncertainty (docs/accuracy.md, "Arrays without error bars"); None: it must."""
    if array in ("seeds", "dyadic_seeds", "hash_seed"):
        return "public hash seeds drawn for the release: not estimates of a data value"
    if array == "lambda":
        return "AdaSSP's adaptive ridge: a choice of the algorithm, not an estimate of a data value"
    if task == "tensor_decomposition" and not TENSORS[mechanism].private:
        return "not private: exact results of public data, no noise"
    if array == "components" or (array == "directions" and params.get("whiten")):
        return "whitened tensor components (and their directions in the data's units, with bounds): no finite " \
               "bound without the data's eigengap"
    return None


def _gram(rows):
    """A numpy stand-in for spark_dp.aggregates.gram_matrix on the frame's rows (clamp, scale, clip)."""
    def gram_matrix(df, columns, *, norm_bound, affine=None, **_):
        x = rows[list(columns)].to_numpy(dtype=float)
        if affine is not None:
            for i, b in enumerate(affine.bounds):
                if b is not None:
                    x[:, i] = (np.clip(x[:, i], *b) - (b[0] + b[1]) / 2) / ((b[1] - b[0]) / 2)
            if affine.constant_at is not None:
                x = np.insert(x, affine.constant_at, affine.constant_value, axis=1)
        x /= np.maximum(np.linalg.norm(x, axis=1) / norm_bound, 1.0)[:, None]
        return x.T @ x
    return gram_matrix


@pytest.fixture(scope="module")
def frame(spark):
    rng = np.random.default_rng(3)
    rows = [(f"q{int(rng.integers(0, 5))}", int(rng.integers(0, 8)), *map(float, rng.normal(size=3) / 3))
            for _ in range(80)]
    df = spark.createDataFrame(rows, ["q", "n", "x1", "x2", "x3"])
    return df, df.toPandas()


def _missing(rel, task, mechanism, params) -> list[tuple]:
    out = []
    for name in rel.arrays:
        if name not in rel.uncertainty:
            out.append((task, mechanism, tuple(sorted(params.items())), name,
                        _excluded(task, mechanism, params, name)))
        else:
            u = rel.uncertainty[name]
            if u.kind == "none":  # refused: no numbers, and the reason in the method
                assert np.isnan(u.low).all() and np.isnan(u.high).all() and u.stderr is None, (task, mechanism, name)
                assert u.method.startswith("no interval: "), (task, mechanism, params, name, u.method)
                continue
            assert u.low.shape == np.shape(rel[name]) and np.all(u.low <= u.high), (task, mechanism, params, name)
    return out


def _session(tmp_path, name):
    return DPSession(name, ledger=f"sqlite:///{tmp_path}/l.db", epsilon_limit=1e4, delta_limit=0.5,
                     output=str(tmp_path / "out"), sampler=Recorder())


def _sessions(tmp_path, prefix):
    """A fresh dataset per release (same ledger, limits, output, sampler): the guard is about each release's
    arrays, and a budget check composes the dataset's whole history exactly (PLD), which on ONE dataset grew
    to ~0.5 s a release over this loop's ~100 releases (45 of the test's 50 s)."""
    count = itertools.count()
    return lambda: _session(tmp_path, f"{prefix}{next(count)}")


def test_every_second_moment_array_has_error_bars(frame, tmp_path, monkeypatch):
    df, pdf = frame
    monkeypatch.setattr(sm_api, "gram_matrix", _gram(pdf))
    monkeypatch.setattr(sm_api, "choose_source_paths", lambda *a, **k: None)
    dp = _sessions(tmp_path, "sm")
    cols = ["x1", "x2", "x3"]
    missing = []
    for mech, spec in MECHANISMS.items():
        for post in spec.postprocess:
            for bounds in (None, BOUNDS):
                base = {"mechanism": mech, "postprocess": post, **({"bounds": bounds} if bounds else
                                                                    {"norm_bound": 1.0})}
                if "second_moment" in spec.tasks:
                    rel = dp().second_moment(df, cols, **base, **KW)
                    missing += _missing(rel, "second_moment", mech, {"postprocess": post, "bounds": bool(bounds)})
                if "pca" in spec.tasks:
                    rel = dp().pca(df, cols, 2, **base, **KW)
                    missing += _missing(rel, "pca", mech, {"postprocess": post, "bounds": bool(bounds)})
                for intercept in (True, False):
                    if "linear_regression" not in spec.tasks or (mech == "adassp" and bounds and not intercept):
                        continue
                    rel = dp().linear_regression(df, ["x1", "x2"], "x3", fit_intercept=intercept, **base, **KW)
                    missing += _missing(rel, "linear_regression", mech,
                                        {"postprocess": post, "bounds": bool(bounds), "fit_intercept": intercept})
    unexplained = [m[:4] for m in missing if m[4] is None]
    assert not unexplained, unexplained
    # every exclusion is still needed by some release (else remove it)
    reasons = {m[4] for m in missing}
    assert reasons == {"AdaSSP's adaptive ridge: a choice of the algorithm, not an estimate of a data value"}


def test_every_sketch_and_tensor_array_has_error_bars(frame, tmp_path):
    df, _ = frame
    dp = _session(tmp_path, "sk")
    missing = []
    for mech, spec in SKETCHES.items():
        extra = {} if spec.hashed else {"domain": [f"q{i}" for i in range(5)]}
        rel = dp.count_sketch(df, "q", mechanism=mech, repetitions=3, buckets=16, **extra, **KW)
        missing += _missing(rel, "count_sketch", mech, {})
    rel = dp.count_sketch(df, "n", repetitions=3, buckets=16, levels=3, **KW)  # dyadic levels over integer items
    missing += _missing(rel, "count_sketch", "private_count_sketch", {"levels": 3})
    rng = np.random.default_rng(0)
    Q = np.linalg.qr(rng.normal(size=(3, 3)))[0]
    T = np.einsum("r,ir,jr,kr->ijk", [3.0, 2.0, 1.0], Q, Q, Q)
    tdp = DPSession("t", ledger=f"sqlite:///{tmp_path}/lt.db", output=str(tmp_path / "tout"), sampler=Recorder())
    edp = _session(tmp_path, "te")  # explicit tensors: the tensor_entry unit, a dataset of its own
    for mech, spec in TENSORS.items():
        if spec.explicit is not None:
            kw = {"neighbors": "tensor_entry", **KW} if spec.private else {}
            rel = (edp if spec.private else tdp).tensor_decomposition(T, k=2, mechanism=mech, restarts=2,
                                                                     iterations=3, **kw)
            missing += _missing(rel, "tensor_decomposition", mech, {"input": "explicit"})
        if spec.rows is not None and spec.private:
            for extra in ({"mode": "fresh"}, {"mode": "reuse"}, {"mode": "reuse", "whiten": True}):
                for bounds in (None, BOUNDS):  # with public bounds: the directions in the data's units too
                    scale = {"bounds": bounds} if bounds else {"norm_bound": 1.0}
                    rel = dp.tensor_decomposition(df, ["x1", "x2", "x3"], 2, mechanism=mech, restarts=2,
                                                  iterations=2, **scale, **extra, **KW)
                    if bounds:
                        assert "directions" in rel.arrays
                    missing += _missing(rel, "tensor_decomposition", mech, {**extra, "bounds": bool(bounds)})
    unexplained = [m[:4] for m in missing if m[4] is None]
    assert not unexplained, unexplained
