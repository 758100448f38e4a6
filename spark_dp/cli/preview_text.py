"""The readable form of a dry run (``spark-dp release --dry-run``): cost first, then a short accuracy summary.

Post-processing of :meth:`spark_dp.release.preview.Preview.to_dict` only.
A regression leads with one line per coefficient: the best-case half-width
and the realistic range the preview states (``accuracy…realistic``: the
best case times 5–25 on tables like most, up to 340× for nearly collinear
columns; a dry run reads no data, so it cannot say which). Matrices and
long lists are shown only with ``verbose``; ``--json`` prints everything.
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


def _coefficient_table(acc: Mapping[str, Any], n: int | None) -> list[str] | None:
    """One line per coefficient (data units with bounds, else one line for every coefficient), at one n."""
    coef = acc.get("coefficients") if isinstance(acc.get("coefficients"), Mapping) else None
    rows = (coef or {}).get("per_coefficient") or (acc.get("per_coefficient") if acc.get("what") == "coefficients"
                                                   else None)
    realistic = (coef or {}).get("realistic") or acc.get("realistic")
    if not rows or not realistic:
        return None
    want = n if n is not None else DEFAULT_N
    row = min(rows, key=lambda r: abs(r["n"] - want))
    level = acc.get("level")
    lo_f, hi_f = realistic["likely_factor"]
    worst_f = realistic["collinear_factor_up_to"]
    lines = ["", f"Predicted {_f(100 * level) if level else ''} % half-width of each coefficient (privacy noise only) at "
             f"n = {row['n']:,} rows{'' if n is not None else ' (give --n with your table size)'}:",
             f"  {'term':<12} {'best case':>11}   {f'likely ({lo_f:g}-{hi_f:g}x)':>23}   "
             f"{f'collinear (to {worst_f:g}x)':>22}"]
    hw = row["half_width"]
    terms = hw.items() if isinstance(hw, Mapping) else [("each", hw)]
    for name, v in terms:
        lo = row["half_width_likely_low"][name] if isinstance(hw, Mapping) else row["half_width_likely_low"]
        hi = row["half_width_likely_high"][name] if isinstance(hw, Mapping) else row["half_width_likely_high"]
        worst = row["half_width_collinear"][name] if isinstance(hw, Mapping) else row["half_width_collinear"]
        lines.append(f"  {name:<12} {_f(v):>11}   {_f(lo) + ' - ' + _f(hi):>23}   {_f(worst):>22}")
    lines += ["The best case assumes rows that fill their bounds and uncorrelated columns; real tables are worse by "
              "a factor a dry run cannot know without reading data: " + realistic["meaning"] + "."]
    return lines


def _accuracy_lines(acc: Mapping[str, Any], *, verbose: bool, prefix: str = "") -> list[str]:
    out = []
    for key, v in acc.items():
        if key in ("per_coefficient", "realistic", "warning") and not verbose:
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
        verbose: also the predicted matrices and every method.

    Returns:
        The text to print.
    """
    lines = _cost_lines(p)
    acc = p.get("accuracy") or {}
    table = _coefficient_table(acc, n)
    if table:
        lines += table
    if acc.get("predicted") is False and acc.get("why"):
        lines += ["", f"No accuracy prediction: {acc['why']}."]
    if verbose or not table:  # a regression's summary above is what most need; --verbose adds the rest
        lines += ["", "Accuracy details" + (" (everything)" if verbose else " (matrices folded: --verbose shows them)")
                  + ":"]
        lines += _accuracy_lines(acc, verbose=verbose)
    else:
        lines.append("(--verbose: the predicted matrices and the method behind each number.)")
    for note in p.get("notes") or []:
        lines.append(f"Note: {note}")
    lines.append("(--json prints the whole preview as JSON.)")
    return "\n".join(lines)
