"""How much wider a real regression release's intervals are than the dry run's best case (benchmarks/dry_run_range.py).

For one table (the design x with its constant column, the label y, the
public scaling, as :func:`tests._calibration.load` returns them) and one
mechanism, ε and seed:

* the **best case**: what ``dp.preview.linear_regression`` (the dry run
  itself, on an empty DataFrame of the table's columns, so nothing is read)
  predicts for each coefficient's half-width at the table's n, in the data's
  units (``accuracy.coefficients.per_coefficient``);
* the **observed** half-width: one release of the table through the
  library's own noise step, fit and intervals, exactly as
  ``linear_regression`` calls them (:mod:`tests._calibration`, seeded numpy
  noise), on the table's own labels;
* their ratio per term (the coefficients, then the intercept).

The ratio is what the dry run cannot know: the best case assumes a design
whose scaled second moment is c·I (rows at the norm bound spread evenly
over uncorrelated columns), and a real design's coefficients are noisier by
about c/λ_min of its scaled second moment (its smallest singular value s,
squared: c/s²) for the privacy noise, √(c)/s for the sampling error
(:func:`design_factor`).
"""

from __future__ import annotations

import math
import os
import tempfile

import numpy as np

from tests._calibration import DELTA, TABLE, load

#: (key, mechanism, postprocess) with a per-coefficient best case in the dry run (JL and inverse-Wishart have
#: none: their noise scales with the data, and the dry run says so instead).
MECHANISMS = (
    ("analyze_gauss", "analyze_gauss", "none"),
    ("analyze_gauss/shift", "analyze_gauss", "shift"),
    ("analyze_gauss/psd", "analyze_gauss", "psd"),
    ("wishart", "wishart", "none"),
    ("wishart/psd", "wishart", "psd"),
    ("adassp", "adassp", "none"),
)


def session(root: str | None = None, **kw):
    """A DPSession on a scratch ledger with room for every preview (a dry run charges nothing anyway)."""
    import spark_dp

    root = root or tempfile.mkdtemp(prefix="spark-dp-dry-range-")
    return spark_dp.DPSession("bench.dry_run_range", ledger=f"sqlite:///{root}/ledger.db",
                              epsilon_limit=1e6, delta_limit=0.5, output=os.path.join(root, "releases"), **kw)


def best_case(dp, spark, features, label, bounds, mechanism: str, postprocess: str, epsilon: float,
              n: int) -> dict[str, float]:
    """The dry run's best-case 95 % half-width per term in the data's units ({term: half-width})."""
    schema = ", ".join(f"`{c}` DOUBLE" for c in [*features, label])
    df = spark.createDataFrame([], schema)
    kw = {} if mechanism == "adassp" else {"postprocess": postprocess}
    p = dp.preview.linear_regression(df, list(features), label, epsilon=epsilon, delta=DELTA,
                                     bounds={c: tuple(b) for c, b in bounds.items()}, mechanism=mechanism, n=n, **kw)
    rows = p.accuracy["coefficients"]["per_coefficient"]
    row = next(r for r in rows if r["n"] == n)
    return dict(row["half_width"])


def observed(data, features, mechanism: str, postprocess: str, epsilon: float, seed: int,
             draws: int = 2000) -> dict:
    """One release's intervals: ``half`` (the 95 % half-width per term; None where the release refused them,
    kind none), ``kind`` and ``conservative`` (its method says so first)."""
    from spark_dp.second_moment.adassp import adassp, adassp_plan
    from spark_dp.second_moment.intervals import regression_intervals
    from spark_dp.second_moment.mechanisms import plan_mechanism
    from spark_dp.second_moment.regression import regression_coefficients
    from spark_dp.second_moment.uncertainty import adassp_uncertainty
    from tests._samplers import FakeChokepoint

    x, y, scaling = data
    size = x.shape[1] + 1
    norm_bound = math.sqrt(size)  # bounds on every column: B = sqrt(p + 2), no row clipped
    vec = np.column_stack([x, y]) @ np.linalg.inv(scaling.transform()).T
    gram = vec.T @ vec
    cp = FakeChokepoint.seeded(seed)
    brng = np.random.default_rng(seed + 1)
    if mechanism == "adassp":
        plan = adassp_plan(epsilon=epsilon, delta=DELTA, norm_bound=norm_bound)
        res = adassp(gram, chokepoint=cp, plan=plan)
        lam = float(res["lambda"][0])
        us = adassp_uncertainty(res["xtx"], res["xty"], res["coefficients"], list(plan.sigmas), 0.95,
                                ridge=lam, scaling=scaling, rng=brng, adaptive=lam, rho=plan.rho)
    else:
        plan = plan_mechanism(mechanism, d=size, epsilon=epsilon, delta=DELTA, norm_bound=norm_bound,
                              postprocess=postprocess)
        released = plan.noise(gram, cp)
        fit = regression_coefficients(released)[0]
        us = regression_intervals(plan.mechanism, plan.privacy, plan.params, released, fit, scaling=scaling,
                                  label_at=size - 1, norm_bound=norm_bound, fit_intercept=True, level=0.95,
                                  draws=draws, rng=brng)
    u = us["coefficients"]
    out = {"kind": u.kind, "conservative": u.method.startswith("conservative"), "half": None}
    if u.kind != "none":
        half = np.append(u.high - u.low, us["intercept"].high - us["intercept"].low) / 2.0
        out["half"] = dict(zip([*features, "intercept"], half.tolist(), strict=True))
    return out


def design_factor(data) -> dict[str, float]:
    """The design's distance from the best case: s, the smallest singular value of the scaled design / √n
    (features and the constant column, each scaled into [−1, 1] by its bounds), and c/s², c = B²/(p + 1) the best
    case's per-column second moment (``spark_dp.release.preview._typical``)."""
    x, y, scaling = data
    vec = np.column_stack([x, y]) @ np.linalg.inv(scaling.transform()).T
    design = vec[:, :-1] / math.sqrt(len(vec))
    s = float(np.linalg.svd(design, compute_uv=False)[-1])
    c = vec.shape[1] / (vec.shape[1] - 1)  # B² = p + 2 over d = p + 1 (features and label)
    return {"s": s, "c_over_s2": c / s**2}


def ratios(dp, spark, name: str, key: str, epsilon: float, seed: int, *, data=None, features=None, label=None,
           bounds=None, draws: int = 2000) -> dict:
    """One release of table ``name``: :func:`observed`'s ``kind`` and ``conservative``, and ``ratios``, the
    observed ÷ best-case half-width per term (None where the intervals were refused)."""
    mech, post = next((m, p) for k, m, p in MECHANISMS if k == key)
    if data is None:
        t = TABLE[name]
        data, features, label = load(name), t.features, t.label
        bounds = {c: (lo, hi) for c, (lo, hi, _) in t.bounds.items()}
    best = best_case(dp, spark, features, label, bounds, mech, post, epsilon, data[0].shape[0])
    got = observed(data, features, mech, post, epsilon, seed, draws)
    half = got.pop("half")
    return {**got, "ratios": None if half is None else {term: half[term] / best[term] for term in half}}
