"""The clipping report under ``replace``: a replacing unit may keep no row at all after the ``nonfinite`` policy.

Through the public API (``second_moment`` with ``clipping_report=True``, ``neighbors="replace"``), on both
input paths (the Spark reader and, at m = 1, the direct Parquet path; a privacy unit always takes the Spark
reader, whose shuffle bounds the units' rows):

* exactness: D holds a unit of m clipped rows; its neighbour D' replaces that unit by m all-NaN rows, which
  ``nonfinite="drop"`` drops. The exact pre-noise (clipped, rows) handed to the chokepoint moves by 2m in L1,
  and the L1 sensitivity the manifest states (and the Laplace draw is calibrated to) must be at least that
  (it was 2m − 1 before: 1 at m = 1, 3 at m = 2);
* black-box audit: the recorded Laplace draw of both releases is redrawn 3·10⁵ times from the same sampler;
  the empirical ε lower bound (Clopper–Pearson on the log-likelihood-ratio statistic) must stay under the
  report's ε, and the same audit must catch the sampler at half the Laplace scale.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from spark_dp.privacy import NumpySampler
from spark_dp.second_moment import api
from spark_dp.session import DPSession
from tests._audit import empirical_epsilon
from tests._samplers import Recorder, UnderNoised

EPS, SHARE = 2.0, 0.5  # the report's ε_c = 1
EPS_C = EPS * SHARE
N_BASE_UNITS = 9
N_SAMPLES = 300_000


def _frames(m: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """D: N_BASE_UNITS units of m small rows and unit 0 of m clipped rows; D': unit 0's rows all NaN."""
    rng = np.random.default_rng(11)
    base = rng.uniform(-0.3, 0.3, size=(N_BASE_UNITS * m, 2))  # norms below the bound 1: never clipped
    units = np.repeat(np.arange(1, N_BASE_UNITS + 1), m)
    clipped = np.tile([3.0, 4.0], (m, 1))  # norm 5 > 1
    gone = np.full((m, 2), np.nan)  # dropped by nonfinite="drop"
    d0 = pd.DataFrame({"a": np.r_[clipped[:, 0], base[:, 0]], "b": np.r_[clipped[:, 1], base[:, 1]],
                       "u": np.r_[np.zeros(m, int), units]})
    d1 = pd.DataFrame({"a": np.r_[gone[:, 0], base[:, 0]], "b": np.r_[gone[:, 1], base[:, 1]],
                       "u": np.r_[np.zeros(m, int), units]})
    return d0, d1


def _release(spark, tmp_path, pdf: pd.DataFrame, m: int, path_kind: str, name: str):
    """One release through the public API with a recording sampler; returns (the Laplace draw, the manifest)."""
    rec = Recorder(NumpySampler())
    s = DPSession(f"clip.{name}", ledger=f"sqlite:///{tmp_path}/{name}.db", epsilon_limit=10.0, delta_limit=1e-3,
                  output=str(tmp_path / name), sampler=rec)
    df = spark.createDataFrame(pdf if m > 1 else pdf.drop(columns="u"))
    kw = {}
    if path_kind == "parquet":
        path = str(tmp_path / f"{name}.parquet")
        df.write.parquet(path)
        df, kw = spark.read.parquet(path), {"source_paths": [path]}
    unit = dict(privacy_unit="u", max_rows_per_unit=m) if m > 1 else {}
    rel = api.second_moment(s, df, ["a", "b"], epsilon=EPS, delta=1e-6, norm_bound=1.0, neighbors="replace",
                            nonfinite="drop", clipping_report=True, clipping_report_share=SHARE, **unit, **kw)
    laplace = [d for d in rec.draws if d.kind == "laplace"]
    assert len(laplace) == 1
    return laplace[0], rel.manifest["clipping_report"]


@pytest.fixture(scope="module")
def neighbours(spark, tmp_path_factory):
    """(m, path) -> the two releases' Laplace draws and manifests."""
    tmp = tmp_path_factory.mktemp("clip_replace")
    out = {}
    for m in (1, 2):
        frames = _frames(m)
        for path_kind in ("reader", "parquet") if m == 1 else ("reader",):  # a privacy unit needs Spark's shuffle
            out[m, path_kind] = [_release(spark, tmp, pdf, m, path_kind, f"m{m}{path_kind}{i}")
                                 for i, pdf in enumerate(frames)]
    return out


@pytest.mark.parametrize("m, path_kind", [(1, "reader"), (1, "parquet"), (2, "reader")])
def test_a_clipped_unit_replaced_by_dropped_rows_moves_the_counts_within_the_stated_sensitivity(
        neighbours, m, path_kind):
    (d0, man0), (d1, man1) = neighbours[m, path_kind]
    n_base = N_BASE_UNITS * m
    assert d0.values.tolist() == [m, n_base + m]  # unit 0's m rows clipped and counted
    assert d1.values.tolist() == [0, n_base]  # its all-NaN replacement dropped by the policy
    change = float(np.abs(d1.values - d0.values).sum())
    assert change == 2 * m
    stated = man0["l1_sensitivity"]
    assert man1["l1_sensitivity"] == stated == d0.sensitivity == d1.sensitivity
    assert change <= stated, f"the counts moved by {change} where the manifest states {stated}"
    assert d0.scale == pytest.approx(stated / EPS_C) and man0["laplace_scale"] == pytest.approx(d0.scale)


def _llr_samples(sampler, d0, d1, n=N_SAMPLES):
    """n draws of each neighbour's release at the recorded scale, as the log-likelihood-ratio statistic."""
    v0, v1 = d0.values, d1.values
    y0 = sampler.laplace(np.tile(v0, n), d0.scale, d0.sensitivity).reshape(n, v0.size)
    y1 = sampler.laplace(np.tile(v1, n), d1.scale, d1.sensitivity).reshape(n, v1.size)

    def llr(y):
        return np.sum(np.abs(y - v0) - np.abs(y - v1), axis=1)

    return llr(y0), llr(y1)


def _eps_lb(x0, x1):
    return max(empirical_epsilon(x0, x1, 0.0), empirical_epsilon(x1, x0, 0.0))


@pytest.mark.parametrize("m", [1, 2])
def test_black_box_audit_of_the_report_under_replace(neighbours, m):
    (d0, _), (d1, _) = neighbours[m, "reader"]
    eps_ok = _eps_lb(*_llr_samples(NumpySampler(), d0, d1))
    eps_bad = _eps_lb(*_llr_samples(UnderNoised(NumpySampler(), divisor=2), d0, d1))
    assert eps_ok < EPS_C, f"empirical ε {eps_ok:.3f} above the report's claim {EPS_C}"
    assert eps_bad > EPS_C, f"the report at half its Laplace scale was not caught (ε̂ = {eps_bad:.3f})"
