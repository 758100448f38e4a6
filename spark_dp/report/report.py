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


def _coefficients(release: Release, ax, sections: list[str]) -> None:
    beta = np.asarray(release["coefficients"])
    names = release.manifest.get("columns") or [f"x{i}" for i in range(beta.size)]
    released = _errorbars(release, "coefficients")
    if released is not None:
        ax.bar(range(beta.size), beta, yerr=released, capsize=4, color="C0")
        ax.set_xticks(range(beta.size), names, rotation=45, ha="right")
        ax.axhline(0, color="k", lw=0.5)
        ax.set_title(f"Coefficients with their released {_level(release)} intervals")
        sections.append("Coefficients: see the Uncertainty section for their intervals.")
        return
    sd = _coefficient_sd(release)
    ax.bar(range(beta.size), beta, yerr=None if sd is None else 2 * sd, capsize=4, color="C0")
    ax.set_xticks(range(beta.size), names, rotation=45, ha="right")
    ax.axhline(0, color="k", lw=0.5)
    ax.set_title("Coefficients" + (" ± 2 sd of the noise (first order)" if sd is not None else ""))
    rows = ["| coefficient | estimate | noise sd |", "|---|---|---|"]
    for i, n in enumerate(names):
        rows.append(f"| {n} | {beta[i]:.5g} | {'' if sd is None else f'{sd[i]:.3g}'} |")
    if sd is None:
        rows.append("\n(No noise scale: the mechanism is not additive Gaussian noise on XᵀX and Xᵀy.)")
    sections.append("\n".join(rows))


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
        sections.append("| item | estimate |\n|---|---|\n"
                        + "\n".join(f"| {r['item']} | {r['estimate']:.4g} |" for r in hh))
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
        fig, ax = plt.subplots(figsize=(6, 4))
        _coefficients(release, ax, sections)
        save(fig, "coefficients")
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


def uncertainty_section(release: Release, *, entries: int = 8) -> list[str]:
    """Markdown lines: the release's error bars (level, method per array, the first ``entries`` entries)."""
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
        lines += [f"### {name} ({u.kind}, covers {u.covers})", "", u.method, "",
                  "| entry | value | low | high | stderr |", "|---|---|---|---|---|"]
        idx = list(np.ndindex(v.shape))
        names = _entry_names(release, name, v.shape)
        for ix in idx[:entries]:
            se = "" if u.stderr is None else _fmt(float(u.stderr[ix]))
            label = names[ix[0]] if names else (ix if len(ix) != 1 else ix[0])
            lines.append(f"| {label} | {_fmt(float(v[ix]))} | {_fmt(float(u.low[ix]))} | "
                         f"{_fmt(float(u.high[ix]))} | {se} |")
        if len(idx) > entries:
            half = np.median((u.high - u.low).reshape(-1)) / 2.0
            lines.append(f"| … ({len(idx) - entries} more) | | | | median half-width {_fmt(float(half))} |")
        lines.append("")
    accuracy = release.manifest.get("accuracy")
    if accuracy:
        lines += ["### Further bounds", "", "| | |", "|---|---|"]
        lines += [f"| {k} | {_fmt(x)} |" for k, x in accuracy.items()]
        lines.append("")
    hh = release.manifest.get("heavy_hitters") or {}
    if "false_positive_rate" in hh:
        lines += [f"Heavy-hitter threshold {_fmt(float(hh['threshold']))}: false-positive rate "
                  f"{_fmt(float(hh['false_positive_rate']))} ({hh.get('false_positive_rate_meaning', '')}).", ""]
    return lines


def _entry_names(release: Release, name: str, shape: tuple) -> list[str] | None:
    """Row labels of a regression's ``coefficients`` (one per feature, in ``columns`` order), else None."""
    columns = release.manifest.get("columns")
    if name == "coefficients" and isinstance(columns, list) and len(shape) == 1 and shape[0] == len(columns):
        return [str(c) for c in columns]
    return None


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
    head += [f"| {k} | {_fmt(v)} |" for k, v in priv.items()]
    if not_private:
        head += ["", warning]
    if (bounds_warning := (m.get("bounds_auto") or {}).get("warning")):  # the chosen bounds collapsed to ~0
        head += ["", f"> **Accuracy warning:** {bounds_warning}"]
    body = ["", "## Payload", "", "| array | shape |", "|---|---|"]
    body += [f"| {n} | {tuple(np.shape(a))} |" for n, a in sorted(rel.arrays.items())]
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
