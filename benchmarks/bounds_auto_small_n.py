"""``bounds="auto"`` across data sizes: the bounds :func:`~spark_dp.privacy.quantile.private_bounds` chooses.

numpy only (no Spark): exact per-bucket counts of synthetic columns over
:data:`~spark_dp.privacy.quantile.VALUE_GRID`, then the selection through a
seeded sampler (reproducible; the law is the private sampler's), ``reps``
draws per case. Prints, per case, the 2nd / 50th / 98th percentile of the low
and high bound, the median share of the column's values outside [low, high]
and how often low < high. Cases: the issue's small ones (8 values in [1, 2] at
ε = 8: the default share 0.1, and all of ε on the bounds; d = 1) 200 rows
with all of ε = 1 on one column's bounds, and columns of 200 … 50,000 rows
at ε = 1 with the default share (d = 3 columns, so each selection gets
ε·share/(2d) = 1/60).

    PYTHONPATH=. python benchmarks/bounds_auto_small_n.py [--reps 300]
"""

from __future__ import annotations

import argparse

import numpy as np

from spark_dp.privacy import SeededSampler
from spark_dp.privacy.quantile import VALUE_GRID, BoundsPlan, bucket_of, private_bounds


class _Drawn:
    """The charged chokepoint's part private_bounds uses (the benchmark re-draws; it charges nothing)."""

    def __init__(self, sampler):
        self.sampler = sampler

    def randomness(self, event):
        return self.sampler


def cases(rng):
    small = rng.uniform(1, 2, 8)
    out = [("8 in [1, 2], eps 8, share 0.1 (d=1)", small, 0.8, 1),
           ("8 in [1, 2], eps 8, all on bounds (d=1)", small, 8.0, 1)]
    out.append(("200 U[1e3, 2e4], eps 1 all on bounds (d=1)", rng.uniform(1e3, 2e4, 200), 1.0, 1))
    for n in (200, 2_000, 5_000, 20_000, 50_000):
        out.append((f"{n} U[1e3, 2e4], eps 1, share 0.1 (d=3)", rng.uniform(1e3, 2e4, n), 0.1, 3))
    for n in (200, 2_000, 50_000):
        out.append((f"{n} N(-50, 10), eps 1, share 0.1 (d=3)", rng.normal(-50, 10, n), 0.1, 3))
    return out


def run(values, epsilon, d, reps, seed=0):
    counts = np.bincount(bucket_of(values, VALUE_GRID), minlength=VALUE_GRID.size + 1)
    plan = BoundsPlan(epsilon, tuple(f"c{i}" for i in range(d)))
    cp = _Drawn(SeededSampler(np.random.default_rng(seed)))
    return np.array([private_bounds(cp, plan, np.stack([counts] * d))["c0"] for _ in range(reps)])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=300)
    args = ap.parse_args()
    rng = np.random.default_rng(1)
    print("| case | low (2/50/98 %) | high (2/50/98 %) | outside, median | low < high |")
    print("|---|---|---|---:|---:|")
    for name, v, eps, d in cases(rng):
        out = run(v, eps, d, args.reps)
        lo, hi = out[:, 0], out[:, 1]
        outside = np.median([np.mean((v < a) | (v > b)) for a, b in out])
        fmt = lambda a: " / ".join(f"{x:.3g}" for x in np.percentile(a, [2, 50, 98]))  # noqa: E731
        print(f"| {name} | {fmt(lo)} | {fmt(hi)} | {outside:.2f} | {np.mean(lo < hi):.2f} |")


if __name__ == "__main__":
    main()
