"""The readable form of a dry run (``spark-dp release --dry-run``): cost first, then a short accuracy summary.

Post-processing of :meth:`spark_dp.release.preview.Preview.to_dict` only.
A regression leads with one line per coefficient: the best-case half-width
and that times the factors measured on real tables (``accuracy…realistic``:
median and middle 90 %; the factor itself cannot be known before the data
is seen), then a short summary of the intervals the release will carry
(``accuracy.intervals.summary``: their kinds, when they are refused or
marked conservative, how often that happened on real tables). Matrices, the
intervals' whole rule and long lists are shown only with ``verbose``;
``--json`` prints everything.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: n of the coefficient summary when the user gave no --n (the preview's grid has it).
DEFAULT_N = 100_000


def _f(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:.3g}"
    return str(v)


def _is_matrix(v: Any) -> bool:
    return isinstance(v, list) and v and isinstance(v[0], list)


def _cost_lines(p: Mapping[str, Any]) -> list[str]:
    head = (f"Dry run: {p['task']} ({p['mechanism']}) on dataset {p['dataset_id']!r} — only the input's schema was "
            "read; nothing was charged or written.")
    lines = [head]
    if p.get("stored"):
        lines.append(f"Release id {p['release_id']!r} is stored: running it returns that release (no noise, no "
                     "charge).")
    if p.get("would_refuse"):
        lines.append(f"WOULD BE REFUSED: {p['reason']}")
    if not p.get("private", True):
        lines.append("Not private: charges nothing.")
    else:
        cost = p.get("cost") or {}
        lines.append(f"Cost: ε {_f(cost.get('epsilon'))}, δ {_f(cost.get('delta'))}.")
    b = p.get("budget")
    if b:
        lim = b.get("limit") or {}
        lines.append(f"Budget of the dataset (ε at δ = {_f(lim.get('delta'))}): {_f(b.get('epsilon_remaining_before'))}"
                     f" of {_f(lim.get('epsilon'))} left now, {_f(b.get('epsilon_remaining_after'))} after.")
    priv = p.get("privacy") or {}
    if priv.get("noise_family"):
        scale = priv.get("noise_scale")
        lines.append(f"Noise: {priv['noise_family']}, scale {_f(scale) if not isinstance(scale, list) else scale}"
                     f" (sensitivity {_f(priv.get('sensitivity'))}, norm bound {_f(priv.get('norm_bound'))}).")
    return lines


def _x(f: float) -> str:
    return f"x{f:,.2g}" if f < 100 else f"x{f:,.0f}"


def _coefficient_table(acc: Mapping[str, Any], n: int | None) -> list[str] | None:
    """One line per coefficient (data units with bounds, else one line for every coefficient), at one n."""
    coef = acc.get("coefficients") if isinstance(acc.get("coefficients"), Mapping) else None
    rows = (coef or {}).get("per_coefficient") or (acc.get("per_coefficient") if acc.get("what") == "coefficients"
                                                   else None)
    realistic = (coef or {}).get("realistic") or acc.get("realistic")
    if not rows:
        return None
    want = n if n is not None else DEFAULT_N
    row = min(rows, key=lambda r: abs(r["n"] - want))
    level = acc.get("level")
    lines = ["", f"Predicted {_f(100 * level) if level else ''} % half-width of each coefficient (privacy noise only) at "
             f"n = {row['n']:,} rows{'' if n is not None else ' (give --n with your table size)'}:"]
    hw = row["half_width"]
    terms = list(hw.items()) if isinstance(hw, Mapping) else [("each", hw)]
    if realistic is None:
        lines.append(f"  {'term':<12} {'best case':>11}")
        lines += [f"  {name:<12} {_f(v):>11}" for name, v in terms]
        lines.append("The best case assumes rows that fill their bounds and uncorrelated columns: real tables come out "
                     "wider, by a factor that cannot be known before the data is seen.")
        return lines
    f = realistic["factor"]
    measured = row["half_width_measured"]

    def at(key: str, name: str) -> float:
        v = measured[key]
        return v[name] if isinstance(v, Mapping) else v

    mid, band = f"{_x(f['median'])} (median)", f"{_x(f['p05'])} to {_x(f['p95'])} (90 %)"
    lines.append(f"  {'term':<12} {'best case':>11}   {mid:>15}   {band:>26}")
    for name, v in terms:
        lines.append(f"  {name:<12} {_f(v):>11}   {_f(at('median', name)):>15}   "
                     f"{_f(at('p05', name)) + ' - ' + _f(at('p95', name)):>26}")
    lines.append(
        "The best case assumes rows that fill their bounds and uncorrelated columns. How much wider your intervals come "
        "out cannot be known before the data is seen: it grows like c/s^2, s^2 the smallest eigenvalue of the mean of "
        f"x x^T over your rows scaled as the mechanism sees them (c = {realistic['c']:.3g} in the best case; near 0 for "
        "nearly collinear columns, or columns that fill little of their bounds). Measured on ten real tables "
        f"({realistic['measured_as']}, epsilon 0.3-4): {_x(f['min'])} to {_x(f['max'])}, median {_x(f['median'])}. "
        "The release's own intervals measure it.")
    return lines


def _interval_lines(acc: Mapping[str, Any]) -> list[str]:
    """The short summary of which intervals the coefficients will carry (the whole rule: --verbose)."""
    iv = acc.get("intervals")
    if not isinstance(iv, Mapping) or not iv.get("summary"):
        return []
    first, *rest = iv["summary"]
    return ["", f"Intervals: {first}"] + [f"  {line}" for line in rest]


def _accuracy_lines(acc: Mapping[str, Any], *, verbose: bool, prefix: str = "") -> list[str]:
    out = []
    for key, v in acc.items():
        if key in ("per_coefficient", "realistic", "warning", "intervals", "in_scaled_units") and not verbose:
            continue
        name = f"{prefix}{key}"
        if isinstance(v, Mapping):
            out += _accuracy_lines(v, verbose=verbose, prefix=f"{name}.")
        elif _is_matrix(v) or (isinstance(v, list) and len(v) > 8):
            if verbose:
                out.append(f"  {name}:")
                rows = v if _is_matrix(v) else [v]
                out += ["    " + "  ".join(f"{_f(x):>10}" for x in r) for r in rows]
            else:
                out.append(f"  {name}: ({len(v)}{'×' + str(len(v[0])) if _is_matrix(v) else ''} values; --verbose)")
        elif isinstance(v, str) and len(v) > 160 and not verbose:
            out.append(f"  {name}: {v[:157]}…")
        else:
            out.append(f"  {name}: {_f(v) if not isinstance(v, list) else [_f(x) for x in v]}")
    return out


def render_preview(p: Mapping[str, Any], *, n: int | None = None, verbose: bool = False) -> str:
    """The dry run as text: cost and budget, a per-coefficient summary (regression), then the rest.

    Args:
        p: :meth:`~spark_dp.release.preview.Preview.to_dict`.
        n: the user's guess of the row count (the summary's n; default 100,000 from the preview's grid).
        verbose: also the predicted matrices, every method and the intervals' whole rule.

    Returns:
        The text to print.
    """
    lines = _cost_lines(p)
    acc = p.get("accuracy") or {}
    table = _coefficient_table(acc, n)
    if table:
        lines += table
    lines += _interval_lines(acc)
    if acc.get("predicted") is False and acc.get("why"):
        lines += ["", f"No accuracy prediction: {acc['why']}."]
    if verbose or not table:  # a regression's summary above is what most need; --verbose adds the rest
        lines += ["", "Accuracy details" + (" (everything)" if verbose else " (matrices folded: --verbose shows them)")
                  + ":"]
        lines += _accuracy_lines(acc, verbose=verbose)
    else:
        lines.append("(--verbose: the predicted matrices, the method behind each number and the intervals' whole rule.)")
    for note in p.get("notes") or []:
        lines.append(f"Note: {note}")
    lines.append("(--json prints the whole preview as JSON.)")
    return "\n".join(lines)
