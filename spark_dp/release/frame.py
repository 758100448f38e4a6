"""``Release.to_pandas(name)``: one payload array as a labelled pandas table.

One row per entry: label columns naming the entry's position, then
``value``, ``stderr``, ``low``, ``high`` (NaN where the array has no error
bar, and ``stderr`` NaN for a bound, which has no standard error). The labels
come from the manifest only (``columns``, ``label``, the task, the array
shapes), so releases of every version get them:

* the feature columns: ``feature`` (coefficients, ``xty``), ``row`` and
  ``column`` (second-moment matrices, ``xtx``), with ``intercept`` for the
  constant column of a regression (before the label, which is last) and
  ``const`` for that of a second moment with bounds;
* ``component`` (eigenvalues), ``component`` × ``feature`` (eigenvectors,
  components, directions: row i is component i);
* ``repetition`` × ``bucket`` (sketch counters; ``level`` first for a dyadic
  stack), ``item`` for a histogram over a listed domain;
* anything else: ``i``, ``j``, … as in the release's Parquet files.

For count_sketch releases two tables that are not arrays:
``to_pandas("heavy_hitters")`` (the items stored at release, with the
noise interval of each estimate) and ``to_pandas("estimates", items=[...])``
(the estimate of any items, with a ``reason`` for those without an
interval; ``Release.interval("estimates", items=[...])`` gives the same
ends). Both are post-processing of the released
values and public parameters: no budget.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from spark_dp.errors import ConfigError

if TYPE_CHECKING:
    import pandas as pd

    from spark_dp.release.release import Release

ERROR_COLUMNS = ("value", "stderr", "low", "high")
_VECTOR_ARRAYS = ("eigenvectors", "components", "directions")


def _features(release: Release) -> list[str] | None:
    cols = release.manifest.get("columns")
    return [str(c) for c in cols] if isinstance(cols, list) and all(isinstance(c, str) for c in cols) else None


def _matrix_names(release: Release, n: int) -> list[str] | None:
    """Names of the rows/columns of a released second-moment matrix of size ``n`` (None: unknown)."""
    m, features = release.manifest, _features(release)
    if features is None:
        return None
    if m.get("task") == "linear_regression":
        label = str(m.get("label", "label"))
        base = [*features, label]
        return base if n == len(base) else [*features, "intercept", label] if n == len(base) + 1 else None
    return features if n == len(features) else [*features, "const"] if n == len(features) + 1 else None


def _regression_inputs(release: Release, n: int) -> list[str] | None:
    """Names of AdaSSP's ``xtx``/``xty`` axes (features, and the intercept column when there is one)."""
    features = _features(release)
    if features is None:
        return None
    return features if n == len(features) else [*features, "intercept"] if n == len(features) + 1 else None


def axis_labels(release: Release, name: str) -> list[tuple[str, list[Any] | None]]:
    """Per axis of array ``name``: (column name, labels or None for 0, 1, …)."""
    shape = np.shape(release.arrays[name])
    task, features = release.manifest.get("task"), _features(release)
    generic = [(f"{'ijklmn'[a]}", None) for a in range(len(shape))]
    if len(shape) == 1:
        n = shape[0]
        if name == "coefficients" and features is not None and n == len(features):
            return [("feature", features)]
        if name == "intercept":
            return [("feature", ["intercept"] * n)]
        if name == "mean" and features is not None and n == len(features):  # PCA's standardize="mean"
            return [("feature", features)]
        if name == "count":
            return [("quantity", ["count"] * n)]
        if name == "eigenvalues":
            return [("component", None)]
        if name == "xty" and (names := _regression_inputs(release, n)) is not None:
            return [("feature", names)]
        if name == "histogram":
            domain = (release.manifest.get("sketch") or {}).get("domain", release.manifest.get("domain"))
            if isinstance(domain, list) and len(domain) == n:
                return [("item", domain)]
            return [("item", None)]
        if name == "lambda":
            return [("parameter", ["lambda"] * n)]
        return generic
    if len(shape) == 2:
        r, c = shape
        if name == "matrix" and r == c and (names := _matrix_names(release, r)) is not None:
            return [("row", names), ("column", names)]
        if name == "xtx" and r == c and (names := _regression_inputs(release, r)) is not None:
            return [("row", names), ("column", names)]
        if name in _VECTOR_ARRAYS:
            feats = features if features is not None and c == len(features) else None
            return [("component", None), ("feature", feats)]
        if task == "count_sketch" and name in ("sketch", "seeds"):
            return [("repetition", None), ("bucket" if name == "sketch" else "seed", None)]
        return generic
    if len(shape) == 3 and task == "count_sketch" and name == "dyadic_sketch":
        return [("level", None), ("repetition", None), ("bucket", None)]
    return generic


def array_frame(release: Release, name: str) -> pd.DataFrame:
    """Array ``name`` of ``release`` in long format with labelled axes (module doc)."""
    import pandas as pd

    if name not in release.arrays:
        raise ConfigError(f"The 'name' parameter of to_pandas must be an array of release {release.release_id!r} "
                          f"({sorted(release.arrays)}{_extra_names(release)}). Got {name!r} instead.")
    array = np.asarray(release.arrays[name])
    axes = axis_labels(release, name)
    idx = np.indices(array.shape).reshape(array.ndim, -1) if array.ndim else np.zeros((0, 1), dtype=int)
    out: dict[str, Any] = {}
    for a, (col, labels) in enumerate(axes):
        out[col if col not in out else f"{col}_{a}"] = (
            idx[a] if labels is None else np.asarray(labels, dtype=object)[idx[a]])
    out["value"] = array.reshape(-1).astype(np.float64)
    u = release.uncertainty.get(name)
    nan = np.full(array.size, np.nan)
    out["stderr"] = nan if u is None or u.stderr is None else np.asarray(u.stderr, dtype=np.float64).reshape(-1)
    out["low"] = nan if u is None else np.asarray(u.low, dtype=np.float64).reshape(-1)
    out["high"] = nan if u is None else np.asarray(u.high, dtype=np.float64).reshape(-1)
    return pd.DataFrame(out)


def _extra_names(release: Release) -> str:
    return ", or 'heavy_hitters', 'estimates'" if release.manifest.get("task") == "count_sketch" else ""


def estimates_frame(release: Release, items: Sequence[Any]) -> pd.DataFrame:
    """``item``, ``value`` (the estimate), ``stderr``, ``low``, ``high``, ``reason`` of a count_sketch release.

    ``low``/``high``: noise and hash collisions together (a bound, no stderr) for hashed sketches, the exact noise
    interval for a histogram; NaN where refused, ``reason`` saying why (None where there is an interval).
    ``frame.attrs``: ``kind``, ``covers`` and ``note`` (the method, or
    why the interval was refused). Post-processing of the release (spark_dp.sketch.uncertainty.estimate_bounds).
    """
    import pandas as pd

    # lazy: sketch estimates are post-processing the sketch layer owns (its estimators and their noise laws)
    from spark_dp.sketch.estimate import SketchView, coerce_items
    from spark_dp.sketch.uncertainty import estimate_bounds

    view = SketchView.of(release)
    items = coerce_items(list(items), view.kind)
    got = estimate_bounds(release, items)
    est = np.asarray(got.estimates, dtype=np.float64)
    frame = pd.DataFrame({"item": list(items), "value": est, "stderr": np.asarray(got.stderr, dtype=np.float64),
                          "low": np.asarray(got.low, dtype=np.float64), "high": np.asarray(got.high, dtype=np.float64),
                          "reason": list(got.reasons) if got.reasons else [None] * len(items)})
    frame.attrs.update(kind=got.kind, covers=got.covers, note=got.method)
    return frame


def heavy_hitters_frame(release: Release) -> pd.DataFrame:
    """The heavy hitters stored at release: ``item``, ``value`` (its stored estimate), and its noise interval."""
    import pandas as pd

    hh = release.manifest.get("heavy_hitters") or {}
    stored = hh.get("items")
    if stored is None:
        raise ConfigError(f"Release {release.release_id!r} stored no heavy hitters; use "
                          "to_pandas('estimates', items=...) or spark_dp.sketch.estimate.heavy_hitters.")
    values = np.array([float(r["estimate"]) for r in stored], dtype=np.float64)
    frame = pd.DataFrame({"item": [r["item"] for r in stored], "value": values})
    if stored and "items_are" not in hh:  # named items: their estimate's noise interval around the stored value
        e = estimates_frame(release, frame["item"].tolist())
        frame["stderr"] = e["stderr"].to_numpy()
        frame["low"] = values - (e["value"].to_numpy() - e["low"].to_numpy())
        frame["high"] = values + (e["high"].to_numpy() - e["value"].to_numpy())
    else:  # none, or hashed ids (no item to estimate): no error bars here
        for c in ("stderr", "low", "high"):
            frame[c] = np.full(len(frame), np.nan)
    frame.attrs["note"] = hh.get("note")  # fewer than top: what cut them
    return frame


def to_pandas(release: Release, name: str, items: Sequence[Any] | None = None) -> pd.DataFrame:
    """See :meth:`spark_dp.release.Release.to_pandas`."""
    if not isinstance(name, str):
        raise ConfigError(f"The 'name' parameter of to_pandas must be an array name. Got {name!r} instead.")
    sketch = release.manifest.get("task") == "count_sketch"
    if sketch and name == "estimates":
        if items is None:
            raise ConfigError("The 'items' parameter of to_pandas('estimates') is required: the items to estimate.")
        return estimates_frame(release, items)
    if items is not None:
        raise ConfigError("The 'items' parameter of to_pandas applies to 'estimates' of a count_sketch release only.")
    if sketch and name == "heavy_hitters" and name not in release.arrays:
        return heavy_hitters_frame(release)
    return array_frame(release, name)
