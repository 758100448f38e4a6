"""A short report of one release: what was released, with plots, and the privacy it spent.

Everything here is post-processing of the released payload and its manifest
(no data is read, nothing is charged). Plots per task:

* ``second_moment`` / ``pca``: the spectrum of the released matrix, with the
  noise floor 2σ√d — the spectral norm of a symmetric Gaussian noise matrix
  with entry scale σ (Wigner's semicircle edge; Gaussian mechanisms only);
  eigenvalues below it are not distinguishable from noise. PCA adds its
  components.
* ``linear_regression``: the coefficients with their released intervals
  where the release has them; for an older Analyze Gauss release without
  them, the first-order standard deviation σ·√(1+‖β‖²)·√((M⁻²)ᵢᵢ) of
  β = M⁻¹·m when Gaussian noise of scale σ is added to every entry of
  M = XᵀX and m = Xᵀy. Which regressions have intervals, and which do not
  yet: docs/accuracy.md (the exclusion list).
* ``tensor_decomposition``: the eigenvalues and the k×d components.
* ``count_sketch``: the distribution of the released counters against the
  noise's ±3σ band, and the heavy hitters (if the release lists any) with
  the noise-only standard deviation of a median-of-k estimate,
  √(π/2)·σ/√k (the asymptotic sd of a median of k Gaussians; Count-Min and
  Count-Mean: σ of one counter, scale b for Laplace).

Every release with error bars (manifest ``uncertainty``) gets an
"Uncertainty" section: the level, and per array its method, kind (interval
or bound) and what it covers, with the first entries' value, low, high and
stderr; PCA adds its subspace-angle bound. Plots use the released intervals
where there are some (regression coefficients, tensor eigenvalues).
"""

from __future__ import annotations

import html
import math
import os
from dataclasses import dataclass, field

import numpy as np

from spark_dp.errors import SparkDPError
from spark_dp.release import Release, load_release, storage
from spark_dp.release.release import noise_of


@dataclass
class Report:
    """A written report: its path, the plot files, and the privacy summary printed with it."""

    path: str
    plots: list[str] = field(default_factory=list)
    privacy: dict = field(default_factory=dict)


def _plt():
    try:
        import matplotlib
    except ImportError:
        from spark_dp.errors import ConfigError

        raise ConfigError("spark-dp report needs matplotlib: pip install 'spark-dp[plots]'.") from None

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def privacy_summary(release: Release) -> dict:
    """The privacy facts of a release, from its manifest."""
    p = release.privacy
    keys = ("epsilon", "delta", "neighbors", "sensitivity", "noise", "sampler",
            "private", "ledger_entry", "dataset_limit", "norm_bound", "composition")
    out = {k: p[k] for k in keys if k in p}
    family, scale = noise_of(p)  # schema 2, or schema 1's noise_sigma / noise_scale
    if family is not None:
        out["noise_family"], out["noise_scale"] = family, scale
    if p.get("private") is False and p.get("note"):
        out["warning"] = p["note"]
    out["mechanism"] = release.manifest.get("mechanism")
    out["dataset_id"] = release.manifest.get("dataset_id")
    if "merged_from" in release.manifest:
        out["merged_from"] = release.manifest["merged_from"]
    return out


def _sigma(release: Release) -> float | None:
    """The Gaussian σ of the matrix entries as released; None where it is not that (other noise, or a release
    mapped back to the data's units from scaled vectors, whose noise is T·N·Tᵀ: manifest ``scaling``).
    """
    if release.manifest.get("scaling"):
        return None
    family, s = noise_of(release.privacy)
    return float(s) if isinstance(s, (int, float)) and family == "gaussian" else None


def _spectrum(release: Release, ax, sections: list[str]) -> None:
    M = np.asarray(release["matrix"])
    d = M.shape[0]
    vals = np.sort(np.linalg.eigvalsh((M + M.T) / 2))[::-1]
    ax.semilogy(np.arange(1, d + 1), np.maximum(np.abs(vals), 1e-300), "o-", label="|eigenvalue|")
    neg = vals < 0
    if neg.any():
        ax.semilogy(np.arange(1, d + 1)[neg], np.abs(vals[neg]), "x", color="C3", label="negative eigenvalue")
    sigma = _sigma(release)
    line = f"Released {d}×{d} matrix: top eigenvalues {', '.join(f'{v:.4g}' for v in vals[:5])}."
    if sigma is not None:
        floor = 2 * sigma * math.sqrt(d)
        ax.axhline(floor, color="C1", ls="--", label=f"noise floor 2σ√d = {floor:.3g}")
        above = int((vals > floor).sum())
        line += f" Noise floor 2σ√d = {floor:.4g} (σ = {sigma:.4g}): {above} eigenvalue(s) above it."
    ax.set_xlabel("index")
    ax.set_ylabel("eigenvalue")
    ax.set_title("Spectrum of the released matrix")
    ax.legend()
    sections.append(line)


def _coefficient_sd(release: Release) -> np.ndarray | None:
    """First-order sd of β from Gaussian noise of scale σ on M = XᵀX and m = Xᵀy (Analyze Gauss)."""
    sigma = _sigma(release)
    if sigma is None or "matrix" not in release.arrays:
        return None
    full = np.asarray(release["matrix"])
    M = full[:-1, :-1]
    beta = np.asarray(release["coefficients"])
    try:
        Minv = np.linalg.inv(M + release.manifest.get("params", {}).get("ridge", 0.0) * np.eye(M.shape[0]))
    except np.linalg.LinAlgError:
        return None
    return sigma * math.sqrt(1 + float(beta @ beta)) * np.sqrt(np.diag(Minv @ Minv))


def _errorbars(release: Release, name: str) -> np.ndarray | None:
    """(2, n) distances below/above each value for matplotlib's yerr, from the released interval (or None)."""
    if name not in release.uncertainty or release.uncertainty[name].kind == "none":
        return None
    v = np.asarray(release[name], dtype=np.float64).reshape(-1)
    low, high = (np.asarray(a).reshape(-1) for a in release.interval(name))
    return np.vstack([np.maximum(v - low, 0.0), np.maximum(high - v, 0.0)])


def _coefficient_terms(release: Release) -> list[tuple[str, str, int]]:
    """(label, array, index) of every regression term: the coefficients by feature name, then the intercept."""
    beta = np.asarray(release["coefficients"]).reshape(-1)
    names = _feature_names(release, beta.size)
    terms = [(n, "coefficients", i) for i, n in enumerate(names)]
    if "intercept" in release.arrays:
        terms.append(("intercept", "intercept", 0))
    return terms


def _coefficients(release: Release, sections: list[str]):
    """One panel per term (coefficients and intercept), each on its own scale, with its interval or ±2 sd.

    Columns in different units give coefficients of very different sizes; on one shared axis most would be
    invisible, so every term gets its own y axis (and a line at 0).
    """
    plt = _plt()
    terms = _coefficient_terms(release)
    intervals = {a: release.interval(a) if a in release.uncertainty and release.uncertainty[a].kind != "none"
                 else None for a in ("coefficients", "intercept") if a in release.arrays}
    sd = None if intervals.get("coefficients") is not None else _coefficient_sd(release)
    cols = min(4, len(terms))
    rows = -(-len(terms) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(2.6 * cols, 2.4 * rows), squeeze=False)
    for ax, (label, array, i) in zip(axes.reshape(-1), terms):
        v = float(np.asarray(release[array]).reshape(-1)[i])
        if intervals.get(array) is not None:
            lo, hi = (float(np.asarray(x).reshape(-1)[i]) for x in intervals[array])
            ax.plot([0, 0], [lo, hi], color="C0", lw=6, alpha=0.35, solid_capstyle="butt")
        elif array == "coefficients" and sd is not None:
            lo, hi = v - 2 * sd[i], v + 2 * sd[i]
            ax.plot([0, 0], [lo, hi], color="C0", lw=6, alpha=0.35, solid_capstyle="butt")
        ax.plot([0], [v], "o", color="C0")
        ax.axhline(0, color="k", lw=0.5)
        ax.set_xticks([])
        ax.set_xlim(-1, 1)
        ax.set_title(label, fontsize=10)
    for ax in axes.reshape(-1)[len(terms):]:
        ax.axis("off")
    what = (f"bar: its released {_level(release)} interval" if intervals.get("coefficients") is not None
            else "bar: ± 2 sd of the noise (first order)" if sd is not None else "no error bar in this release")
    fig.suptitle(f"Coefficients, one panel (own scale) each; {what}", fontsize=10)
    rows_md = ["| term | estimate | low | high |", "|---|---|---|---|"]
    for label, array, i in terms:
        v = float(np.asarray(release[array]).reshape(-1)[i])
        if intervals.get(array) is not None:
            lo, hi = (_fmt(float(np.asarray(x).reshape(-1)[i])) for x in intervals[array])
        elif array == "coefficients" and sd is not None:
            lo, hi = _fmt(v - 2 * sd[i]), _fmt(v + 2 * sd[i])
        else:
            lo = hi = ""
        rows_md.append(f"| {label} | {_fmt(v)} | {lo} | {hi} |")
    if sd is not None:
        rows_md.append("\n(low, high: ± 2 sd of the noise, first order; this release has no intervals.)")
    elif intervals.get("coefficients") is None:
        rows_md.append("\n(No noise scale: the mechanism is not additive Gaussian noise on XᵀX and Xᵀy.)")
    sections.append("\n".join(rows_md))
    return fig


def _components(release: Release, ax, sections: list[str], title: str) -> None:
    vecs = np.atleast_2d(np.asarray(release["eigenvectors"]))
    vals = np.asarray(release["eigenvalues"]).reshape(-1)
    lim = float(np.abs(vecs).max()) or 1.0
    im = ax.imshow(vecs, cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto")
    ax.set_yticks(range(vecs.shape[0]), [f"{i + 1}: λ={v:.3g}" for i, v in enumerate(vals)])
    cols = release.manifest.get("columns")
    if cols and len(cols) == vecs.shape[1]:
        ax.set_xticks(range(len(cols)), cols, rotation=45, ha="right")
    ax.set_title(title)
    ax.figure.colorbar(im, ax=ax)
    sections.append(f"{vecs.shape[0]} component(s) of dimension {vecs.shape[1]}; eigenvalues "
                    + ", ".join(f"{v:.4g}" for v in vals) + ".")


def _heavy_hitter_table(release: Release, hh: list[dict]) -> str:
    """The stored heavy hitters with their estimates' intervals (noise and collisions), or why there are none."""
    plain = "| item | estimate |\n|---|---|\n" + "\n".join(f"| {r['item']} | {r['estimate']:.4g} |" for r in hh)
    if "items_are" in (release.manifest.get("heavy_hitters") or {}):
        return plain  # hashed ids: no item to estimate
    try:
        frame = release.to_pandas("estimates", items=[r["item"] for r in hh])
    except (SparkDPError, KeyError, ValueError) as exc:  # a report never fails on its error bars: say why
        return plain + f"\n\nNo intervals for the heavy hitters' estimates: {exc}"
    rows = ["| item | estimate | low | high | no interval because |", "|---|---|---|---|---|"]
    for r, (_, e) in zip(hh, frame.iterrows(), strict=True):
        ok = e["reason"] is None
        rows.append(f"| {r['item']} | {r['estimate']:.4g} | {_fmt(float(e['low'])) if ok else ''} | "
                    f"{_fmt(float(e['high'])) if ok else ''} | {'' if ok else e['reason']} |")
    return (f"Intervals ({frame.attrs['kind']}, covers {frame.attrs['covers']}) of each item's estimate from the "
            "released table, at the release's level:\n\n" + "\n".join(rows))


def _sketch(release: Release, axes, sections: list[str]) -> None:
    from spark_dp.sketch.uncertainty import counter_noise

    table = "histogram" if "histogram" in release.arrays else "sketch"
    S = np.asarray(release[table])
    family, scale = counter_noise(release.manifest)  # the stored counters' units (the weight's, with bounds)
    gaussian = family == "gaussian"
    axes[0].hist(S.reshape(-1), bins=min(60, max(10, S.size // 20)), color="C0")
    if isinstance(scale, (int, float)):
        band = 3 * scale * (1 if gaussian else math.sqrt(2))  # Laplace(b) has sd b√2
        for s in (-band, band):
            axes[0].axvline(s, color="C1", ls="--")
        axes[0].set_title(f"Released counters; dashed: ±3 sd of the noise ({'σ' if gaussian else 'b'} = {scale:.3g})")
    else:
        axes[0].set_title("Released counters")
    k = S.shape[0] if S.ndim == 2 else 1
    mech = release.manifest.get("mechanism")
    sd_est = None
    if isinstance(scale, (int, float)):
        one = scale * (1 if gaussian else math.sqrt(2))
        sd_est = math.sqrt(math.pi / 2) * one / math.sqrt(k) if mech == "private_count_sketch" else one
    line = f"{table} of shape {tuple(S.shape)} ({mech})."
    if sd_est is not None:
        line += (f" Noise-only sd of one item's estimate ≈ {sd_est:.4g}"
                 + (" (median of k Gaussians, √(π/2)·σ/√k)" if mech == "private_count_sketch" else "")
                 + "; hash collisions add to it for items that share buckets with heavy ones.")
    if (ws := (release.manifest.get("sketch") or {}).get("weight_scaling")):
        lo, hi = ws["bounds"]
        line += (f" Weights of {ws['column']!r} clamped to [{lo:g}, {hi:g}] and scaled by 1/M (M = {ws['scale']:g}) "
                 "for the mechanism; the counters, estimates and the noise scale above are in the weight's units "
                 "(M × the mechanism's).")
    sections.append(line)
    hh = (release.manifest.get("heavy_hitters") or {}).get("items") or []
    ax = axes[1]
    if hh:
        hh = hh[:20]
        ax.barh(range(len(hh))[::-1], [r["estimate"] for r in hh], xerr=None if sd_est is None else 2 * sd_est,
                capsize=3, color="C2")
        ax.set_yticks(range(len(hh))[::-1], [str(r["item"]) for r in hh])
        ax.set_title("Heavy hitters" + (" ± 2 sd of the noise" if sd_est is not None else ""))
        sections.append(_heavy_hitter_table(release, hh))
    else:
        ax.axis("off")
        ax.text(0.5, 0.5, "no heavy hitters in the manifest\n(spark-dp heavy-hitters --candidates …)",
                ha="center", va="center")


def _plots(release: Release, stem: str) -> tuple[list[str], list[str]]:
    """Draws the task's figure(s); returns (png paths, text sections)."""
    plt = _plt()
    task = release.manifest.get("task")
    sections: list[str] = []
    pngs: list[str] = []

    def save(fig, name):
        path = f"{stem}_{name}.png"
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)
        pngs.append(path)

    if task in ("second_moment", "pca") and "matrix" in release.arrays:
        fig, ax = plt.subplots(figsize=(6, 4))
        _spectrum(release, ax, sections)
        save(fig, "spectrum")
    if task == "pca":
        fig, ax = plt.subplots(figsize=(7, 1.2 + 0.5 * np.atleast_2d(release["eigenvectors"]).shape[0]))
        _components(release, ax, sections, "Principal components (rows)")
        save(fig, "components")
    if task == "linear_regression":
        save(_coefficients(release, sections), "coefficients")
    if task == "tensor_decomposition":
        fig, axes = plt.subplots(1, 2, figsize=(11, 3.5), gridspec_kw={"width_ratios": [1, 2]})
        vals = np.asarray(release["eigenvalues"]).reshape(-1)
        yerr = _errorbars(release, "eigenvalues")
        axes[0].bar(range(1, vals.size + 1), vals, yerr=yerr, capsize=4, color="C0")
        axes[0].set_title("Tensor eigenvalues" + ("" if yerr is None else f" ({_level(release)} error bars)"))
        _components(release, axes[1], sections, "Tensor components (rows)")
        save(fig, "tensor")
    if task == "count_sketch":
        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
        _sketch(release, axes, sections)
        save(fig, "sketch")
    if not pngs:
        sections.append(f"(No plot for task {task!r}.)")
    return pngs, sections


def _level(release: Release) -> str:
    level = release.confidence
    return "" if level is None else f"{100 * level:g} %"


#: Entries shown per array in the Uncertainty section (a symmetric matrix: its upper triangle, d ≤ 9 in full).
ENTRIES = 45


def uncertainty_section(release: Release, *, entries: int = ENTRIES) -> list[str]:
    """Markdown lines: the release's error bars (level, method per array, its entries by name).

    Entries are labelled by what they are (a coefficient's feature, ``x1 × y`` for a matrix entry, with the
    intercept's constant column and the label named); a symmetric matrix shows its upper triangle (the mirror
    entries are equal). Up to ``entries`` per array, then how many more and their median half-width.
    """
    if not release.uncertainty:
        return ["", "## Uncertainty", "", "This release carries no error bars (made before them, or by a "
                "mechanism without a stated method)."]
    lines = ["", "## Uncertainty", "", f"Level **{_level(release)}**. An *interval* claims that coverage of "
             "the true (noise-free) value; a *bound* holds with at least that probability (conservative). "
             "Every one is post-processing of the released values and public parameters (no privacy cost).", ""]
    for name, u in sorted(release.uncertainty.items()):
        v = np.asarray(release[name], dtype=np.float64)
        if u.kind == "none":
            lines += [f"### {name} (no interval)", "", f"Refused: {u.method}", ""]
            continue
        lines += [f"### {name} ({u.kind}, covers {u.covers})", "", u.method, ""]
        if u.target:
            lines += [f"Interval of: {u.target}.", ""]
        idx = list(np.ndindex(v.shape))
        symmetric = v.ndim == 2 and v.shape[0] == v.shape[1] and v.shape[0] > 1 and np.allclose(v, v.T)
        if symmetric:
            idx = [ix for ix in idx if ix[0] <= ix[1]]
        label = _entry_labels(release, name, v.shape)
        outside = int(np.sum((v < u.low) | (v > u.high)))
        if outside:
            lines += [f"{outside} of {v.size} value(s) lie outside their own {u.kind}: it is centred on another "
                      "estimate than the released value (the method above says which).", ""]
        lines += [f"| entry{' (upper triangle)' if symmetric else ''} | value | low | high | stderr |",
                  "|---|---|---|---|---|"]
        for ix in idx[:entries]:
            se = "" if u.stderr is None else _fmt(float(u.stderr[ix]))
            lines.append(f"| {label(ix)} | {_fmt(float(v[ix]))} | {_fmt(float(u.low[ix]))} | "
                         f"{_fmt(float(u.high[ix]))} | {se} |")
        if len(idx) > entries:
            half = np.median((u.high - u.low).reshape(-1)) / 2.0
            lines.append(f"| … ({len(idx) - entries} more) | | | | median half-width {_fmt(float(half))} |")
        lines.append("")
    accuracy = release.manifest.get("accuracy")
    if accuracy:
        if accuracy.get("uninformative"):
            lines += ["**Bounds that carry no information** (noise larger than the signal they bound: more rows, a "
                      "larger ε, or bounds closer to the data narrow them):", ""]
            lines += [f"* {u}" for u in accuracy["uninformative"]] + [""]
        lines += ["### Further bounds", "", "| | |", "|---|---|"]
        lines += [f"| {k} | {_fmt(x)} |" for k, x in accuracy.items() if k != "uninformative"]
        lines.append("")
    if (std := release.manifest.get("standardize")):
        lines += [f"Eigenvalues and eigenvectors are standardised (`standardize: {std['how']}`): {std['coordinates']}.",
                  ""]
    if (centre := release.manifest.get("centre")) and (mean := (release.manifest.get("privacy") or {}).get("mean")):
        lines += [f"Centred at the released mean (its Gaussian: share {_fmt(mean['share'])} of the budget, "
                  f"sigma {_fmt(float(mean['noise_sigma']))}, L2 sensitivity {_fmt(float(mean['sensitivity']))}; "
                  f"the PCA mechanism at epsilon {_fmt(float(mean['mechanism_epsilon']))}): the centred rows' norm "
                  f"bound is {_fmt(float(centre['norm_bound']))}"
                  + "".join(f", {k.replace('_', ' ')} {_fmt(float(centre[k]))}" for k in ("sensitivity", "noise_sigma")
                            if isinstance(centre.get(k), int | float)) + ".", ""]
    est = (release.manifest.get("sketch") or {}).get("estimate_intervals")
    if est:
        lines += ["### Frequency estimates", ""]
        if est.get("kind") == "none":
            lines += [f"**No interval for the estimates** (they are NaN in `spark-dp estimate` and "
                      f"`to_pandas('estimates')`): {est['method']}.", ""]
        else:
            lines += [f"Each {est['estimator']} estimate's {est['kind']}: {est['method']}.", ""]
        noise = est.get("noise_only") or {}
        if noise:
            lines += [f"The noise part alone would be [estimate - {_fmt(float(noise['high']))}, estimate + "
                      f"{_fmt(-float(noise['low']))}]: a lower limit, exact only without hash collisions.", ""]
    hh = release.manifest.get("heavy_hitters") or {}
    if "false_positive_rate" in hh:
        lines += [f"Heavy-hitter threshold {_fmt(float(hh['threshold']))}: false-positive rate "
                  f"{_fmt(float(hh['false_positive_rate']))} ({hh.get('false_positive_rate_meaning', '')}).", ""]
    if "false_positive_rate_bound" in hh:
        b = hh["false_positive_rate_bound"]
        lines += [f"With hash collisions the false-positive rate is at most {'(none)' if b is None else _fmt(float(b))} "
                  f"({hh.get('false_positive_rate_bound_meaning', '')}).", ""]
    return lines


def ridge_section(release: Release) -> list[str]:
    """Markdown lines: the ridge a regression release keeps (``solution.ridge_in_release``) and what it shrank."""
    r = (release.manifest.get("solution") or {}).get("ridge_in_release")
    if not r:
        return []
    lines = ["", "## Ridge in the release", "",
             f"The released matrix keeps a ridge of {_fmt(float(r['ridge']))} on its diagonal (units: {r['units']}; "
             f"postprocess `{r['postprocess']}`): {r['note']}. The coefficients are a ridge fit, shrunk "
             "towards 0; without the ridge they would be:", "",
             "| term | released | without the ridge | shrinkage (released ÷ without) |", "|---|---|---|---|"]
    for label, array, i in _coefficient_terms(release):
        without, shrink = r.get(f"{array}_without_ridge"), r.get(f"{array}_shrinkage")
        if without is None:
            continue
        v = float(np.asarray(release[array]).reshape(-1)[i])
        k = shrink[i] if shrink else None
        lines.append(f"| {label} | {_fmt(v)} | {_fmt(float(without[i]))} | {'' if k is None else _fmt(float(k))} |")
    lines += ["", "(The fit without the ridge is post-processing of the same release — no budget — but much noisier "
              "where the released matrix is near singular, which is why the ridge is there: docs/accuracy.md.)"]
    return lines


def _feature_names(release: Release, n: int) -> list[str]:
    """The ``n`` feature names of a release (``columns``), or x1…xn when the manifest does not list them."""
    columns = release.manifest.get("columns")
    if isinstance(columns, list) and len(columns) == n:
        return [str(c) for c in columns]
    return [f"x{i + 1}" for i in range(n)]


def _axis_names(release: Release, d: int) -> list[str] | None:
    """Names of a released d×d matrix's rows: the columns, the intercept's constant column, the label."""
    columns = release.manifest.get("columns")
    if not isinstance(columns, list):
        return None
    names = [str(c) for c in columns]
    if release.manifest.get("label"):
        names.append(str(release.manifest["label"]))
    constant = ((release.manifest.get("scaling") or {}).get("constant_column") or {}).get("index")
    if len(names) + 1 == d and isinstance(constant, int) and 0 <= constant <= len(names):
        names.insert(constant, "1 (intercept)")
    return names if len(names) == d else None


def _entry_labels(release: Release, name: str, shape: tuple):
    """A function from an entry's index to its label (a feature, ``x1 × y``, ``component 2, x3``, …)."""
    if name in ("coefficients", "mean") and len(shape) == 1:  # mean: PCA's standardize="mean", one per column
        names = _feature_names(release, shape[0])
        return lambda ix: names[ix[0]]
    if name == "intercept":
        return lambda ix: "intercept"
    if name in ("eigenvalues",) and len(shape) == 1:
        return lambda ix: f"component {ix[0] + 1}"
    if name in ("eigenvectors", "components") and len(shape) == 2:
        cols = _axis_names(release, shape[1]) or _feature_names(release, shape[1])
        return lambda ix: f"component {ix[0] + 1}, {cols[ix[1]]}"
    if len(shape) == 2 and shape[0] == shape[1]:
        axis = _axis_names(release, shape[0])
        if axis is not None:
            return lambda ix: f"{axis[ix[0]]} × {axis[ix[1]]}"
    return lambda ix: str(ix[0]) if len(ix) == 1 else str(ix)


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, dict):
        return ", ".join(f"{k}={_fmt(x)}" for k, x in v.items())
    if isinstance(v, list):
        return "[" + ", ".join(_fmt(x) for x in v[:8]) + (", …" if len(v) > 8 else "") + "]"
    return str(v)


def write_report(release: Release | str, *, out: str | None = None) -> Report:
    """Writes a Markdown (``.md``) or HTML (``.html``) report of a release, with PNG plots next to it.

    Args:
        release: a Release or a release directory.
        out: the report file (default ``<release_dir>.report.md``, next to the
            release directory, which is never modified); a URI (``s3://…``)
            puts the report and its plots on that store.

    Returns:
        The :class:`Report` (path, plot files, privacy summary).
    """
    rel = load_release(release) if isinstance(release, str) else release
    if out is None:
        base = rel.path.rstrip("/" + os.sep) if rel.path else rel.release_id
        out = f"{base}.report.md"
    if not storage.is_local(out):
        return _write_remote_report(rel, out)
    as_html = out.lower().endswith((".html", ".htm"))
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    stem = os.path.splitext(out)[0]
    pngs, sections = _plots(rel, stem)
    priv = privacy_summary(rel)
    m = rel.manifest
    not_private = not priv.get("private", True)
    exact = not_private and rel.privacy.get("epsilon") is None  # a non-private mechanism, not a test sampler
    warning = ("**NOT DIFFERENTIALLY PRIVATE.** This release holds exact results computed from the data by a "
               f"non-private mechanism ({m.get('mechanism')}); nothing was charged and it protects no one. "
               "Do not publish it as a private release." if exact else
               "**Not private**: made with a seeded sampler (tests only).")
    head = ([f"> {warning}", ""] if not_private else []) + [f"# Release {rel.release_id}", "",
            f"Task **{m.get('task')}**, mechanism **{m.get('mechanism')}**, dataset `{m.get('dataset_id')}`, "
            f"created {m.get('created_at')}, spark-dp {m.get('library_version')}.", "",
            "## Privacy spent", "", "| | |", "|---|---|"]
    shown = {k: v for k, v in priv.items() if k not in ("mechanism", "dataset_id")}  # in the line above
    if shown.get("noise") == shown.get("noise_family"):
        shown.pop("noise", None)  # the same fact as noise_family
    head += [f"| {k} | {_fmt(v)} |" for k, v in shown.items()]
    if not_private:
        head += ["", warning]
    if (bounds_warning := (m.get("bounds_auto") or {}).get("warning")):  # the chosen bounds collapsed to ~0
        head += ["", f"> **Accuracy warning:** {bounds_warning}"]
    body = ["", "## Payload", "", "| array | shape |", "|---|---|"]
    body += [f"| {n} | {tuple(np.shape(a))} |" for n, a in sorted(rel.arrays.items())]
    body += ridge_section(rel)
    body += uncertainty_section(rel)
    body += ["", "## Plots", ""]
    for s in sections:
        body += [s, ""]
    for p in pngs:
        body += [f"![{os.path.basename(p)}]({os.path.basename(p)})", ""]
    text = "\n".join(head + body)
    with open(out, "w", encoding="utf-8") as fh:
        fh.write(_to_html(text, rel.release_id) if as_html else text)
    return Report(out, pngs, priv)


def _write_remote_report(rel: Release, out: str) -> Report:
    """The report and its plots made in a local scratch directory, then put next to ``out`` on its store."""
    import tempfile

    name = storage.basename(out)
    parent = out.rstrip("/")[: -len(name)]
    with tempfile.TemporaryDirectory(prefix="spark-dp-report-") as tmp:
        made = write_report(rel, out=os.path.join(tmp, name))
        plots = []
        for local in [*made.plots, made.path]:  # the report last: its images are there when it is
            target = parent + os.path.basename(local)
            with open(local, "rb") as fh:
                storage.write_bytes(target, fh.read())
            plots.append(target)
    return Report(plots.pop(), plots, made.privacy)


def _to_html(markdown: str, title: str) -> str:
    """A minimal Markdown → HTML for the report's own constructs (headings, tables, images, paragraphs)."""
    out, table = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
                  "<style>body{font-family:sans-serif;max-width:60em}td,th{border:1px solid #ccc;padding:2px 6px}"
                  "table{border-collapse:collapse}</style></head><body>"], False
    for line in markdown.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            if set("".join(cells)) <= set("-"):
                continue
            if not table:
                out.append("<table>")
                table = True
            out.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
            continue
        if table:
            out.append("</table>")
            table = False
        if line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            out.append(f"<h{level}>{html.escape(line[level:].strip())}</h{level}>")
        elif line.startswith("!["):
            src = line[line.index("(") + 1: -1]
            out.append(f"<p><img src='{html.escape(src)}' alt='{html.escape(src)}'></p>")
        elif line.strip():
            text = html.escape(line).replace("**", "")
            out.append(f"<p>{text}</p>")
    if table:
        out.append("</table>")
    out.append("</body></html>")
    return "\n".join(out)
