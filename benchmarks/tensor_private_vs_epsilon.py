"""Recovery error of the top component against ε: Alg. 3 (paper / exact) vs input perturbation.

    nice -n 19 .venv/bin/python -m benchmarks.tensor_private_vs_epsilon            # full run, ~15 CPU-min, 2.1 GB peak
    nice -n 19 .venv/bin/python -m benchmarks.tensor_private_vs_epsilon --quick    # d = 10 and 24, seconds (tests)
    ... --dims 320,400 --eps 22.63,32 --trials 6     # a subset of DIMS and of its grids
    ... out.png --replot run1.log run2.log           # table and plot from the printed lines of earlier runs
    ... docs/tensor_private_vs_epsilon.png --replot benchmarks/results/tensor_private_vs_epsilon/*.log   # the docs' plot

d = 512 … 1000: :mod:`benchmarks.tensor_private_vs_epsilon_large` (matrix-free, same
experiment and printed format).

Explicit tensors T = Σᵢ λᵢ vᵢ^⊗3 (k = 3 incoherent orthonormal components,
λ = (1, 0.75, 0.5)·λ₁, λ₁ = 50), tensor-entry neighbours (Def. 4.2),
δ = 1e-6, L = 5, R = 10. Error: ‖v₁ − v̂₁‖₂ of the first component found (min
over sign), median of the trials; the result per d and method is the
smallest ε of the grid with median error < 0.5. The paper's point: input
perturbation's noise grows like ‖E‖op ~ σ√d, Alg. 3's per-step noise
ν‖u‖∞² shrinks with d for incoherent u, so input perturbation needs
ε = Ω̃(d) while Alg. 3's ε has no polynomial dependence on d (Thm 4.2).

From d = 160 on the grid also has the √2 steps (``FINE``); at d ≥ 256 it
starts at ε = 4 and a method stops after two consecutive ε with median
error < 0.5 (the error falls with ε; the threshold is then known) to keep
the d³ runs short (``DIMS``). Memory: an explicit d = 400 tensor is 512 MB;
input perturbation's symmetric noise (index arrays, six mirrored writes)
and the symmetry check bring the peak to about 2.1 GB there.

Noise: ``NumpySampler`` through real, charged chokepoints (a benchmark, not a
release); starting vectors from a seeded generator.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
import time

import numpy as np

from spark_dp.privacy import Budget, Chokepoint, NumpySampler, open_ledger
from spark_dp.tensor import (
    input_perturbation,
    input_perturbation_plan,
    private_tensor_power_method,
    tensor_entry_plan,
)

DELTA = 1e-6
EPSILONS = [0.25, 0.5, 1, 2, 4, 8, 16, 32, 64, 128]
METHODS = ("alg3_exact", "alg3_paper", "input_perturbation")
THRESHOLD = 0.5
FINE = [4, 5.66, 8, 11.31, 16, 22.63, 32, 45.25, 64, 90.51, 128]  # ×√2 steps for the large d
# (d, trials, early stop, ε grid): the full run. At d ≥ 256 the grid starts at ε = 4 (at d = 160 every
# method is at chance, error ≈ √2, below ε = 16) and steps by √2 to separate the two methods.
DIMS = [(10, 5, False, EPSILONS), (40, 5, False, EPSILONS), (160, 5, False, sorted(set(EPSILONS) | set(FINE))),
        (256, 6, True, FINE), (320, 6, True, FINE), (400, 6, True, FINE[2:])]
QUICK_DIMS = [(10, 2, False, EPSILONS), (24, 2, False, EPSILONS)]


def _cp(tmp, events, n):
    cp = Chokepoint(open_ledger(f"sqlite:///{tmp}/b{n}.db"), dataset_id="bench", release_id=f"r{n}",
                    request_sha256="x", sampler=NumpySampler(), limit=Budget(1e9, 0.5))
    cp.charge(events, Budget(1.0, DELTA))
    return cp


def _err(dec, v1):
    v = dec.eigenvectors[0]
    return float(min(np.linalg.norm(v - v1), np.linalg.norm(v + v1)))


def run(d: int, lam1: float = 50.0, *, trials: int = 5, L: int = 5, R: int = 10, seed: int = 0,
        early_stop: bool = False, epsilons=EPSILONS):
    """Median error per ε and method; NaN where a method is undefined (paper ε₀ ≥ 1) or was not run (early stop)."""
    gen = np.random.default_rng(seed)  # data and starting vectors, not privacy noise
    Q, _ = np.linalg.qr(gen.standard_normal((d, 3)))
    lam = lam1 * np.array([1.0, 0.75, 0.5])
    T = np.einsum("r,ir,jr,kr->ijk", lam, Q, Q, Q)
    v1 = Q[:, 0]
    rows = []
    tmp = tempfile.mkdtemp()
    n = 0
    streak = dict.fromkeys(METHODS, 0)
    for eps in epsilons:
        errs = {m: [] for m in METHODS}
        active = [m for m in METHODS if not (early_stop and streak[m] >= 2)]
        for _ in range(trials):
            for cal in ("exact", "paper"):
                if f"alg3_{cal}" not in active:
                    continue
                try:
                    plan = tensor_entry_plan(epsilon=eps, delta=DELTA, k=1, L=L, R=R, calibration=cal)
                except Exception:  # paper calibration undefined (ε₀ ≥ 1)
                    continue
                n += 1
                dec = private_tensor_power_method(T, 1, L=L, R=R, nu=plan.nu, chokepoint=_cp(tmp, plan.events, n), rng=gen)
                errs[f"alg3_{cal}"].append(_err(dec, v1))
            if "input_perturbation" in active:
                plan = input_perturbation_plan(epsilon=eps, delta=DELTA)
                n += 1
                dec = input_perturbation(T, 1, L=L, R=R, plan=plan, chokepoint=_cp(tmp, plan.events, n), rng=gen)
                errs["input_perturbation"].append(_err(dec, v1))
        med = {m: float(np.median(v)) if v else np.nan for m, v in errs.items()}
        for m in active:  # a method skipped by the early stop keeps its streak
            streak[m] = streak[m] + 1 if med[m] < THRESHOLD else 0
        rows.append((eps, med))
        print(f"  d={d} ε={eps:g} n={trials}: " + " ".join(f"{m}={med[m]:.3f}" for m in METHODS), flush=True)
    return rows


def smallest_epsilon(rows, method: str) -> float:
    """The smallest ε of the grid with median error < THRESHOLD (NaN: never)."""
    ok = [eps for eps, e in rows if e[method] < THRESHOLD]
    return min(ok) if ok else float("nan")


def report(rows_by_d: dict, trials_by_d: dict, out: str | None) -> dict:
    """Thresholds per d and method, the Markdown table, and the plot (one panel per d + thresholds against d)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ds = sorted(rows_by_d)
    results = {d: {m: smallest_epsilon(rows_by_d[d], m) for m in METHODS} for d in ds}
    print("| d | trials | Alg. 3 exact | Alg. 3 paper | input perturbation |")
    print("|---|---|---|---|---|")
    for d in ds:
        r = results[d]
        print(f"| {d} | {trials_by_d[d]} | " + " | ".join("never" if np.isnan(r[m]) else f"{r[m]:g}" for m in METHODS) + " |")
    if not out:
        return results
    cols = min(4, len(ds) + 1)
    nrows = -(-(len(ds) + 1) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(3.6 * cols, 3.3 * nrows), squeeze=False)
    axes = axes.ravel()
    for ax in axes[len(ds) + 1 :]:
        ax.set_visible(False)
    for ax, d in zip(axes, ds):
        rows = rows_by_d[d]
        for key, style in (("alg3_exact", "o-"), ("alg3_paper", "s--"), ("input_perturbation", "^:")):
            ax.semilogx([r[0] for r in rows], [r[1][key] for r in rows], style, label=key.replace("_", " "))
        ax.axhline(THRESHOLD, color="grey", lw=0.8)
        ax.set_title(f"d = {d} (median of {trials_by_d[d]})")
        ax.set_xlabel("ε")
        ax.set_ylim(0, 1.5)
        ax.set_xlim(0.2, 256)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("‖v₁ − v̂₁‖₂")
    axes[0].legend(fontsize=7)
    ax = axes[len(ds)]
    for key, style in (("alg3_exact", "o-"), ("input_perturbation", "^:")):
        ax.loglog(ds, [results[d][key] for d in ds], style, label=key.replace("_", " "))
    ax.set_xlabel("d")
    ax.set_ylabel(f"smallest ε, median error < {THRESHOLD}")
    ax.set_title("threshold ε against d")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    fig.suptitle("k = 3, λ = (50, 37.5, 25), L = 5, R = 10, δ = 1e-6")
    fig.tight_layout()
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    print(f"wrote {out}")
    return results


_LINE = re.compile(r"^\s*d=(\d+) ε=([\d.]+)(?: n=(\d+))?: alg3_exact=(\S+) alg3_paper=(\S+) input_perturbation=(\S+)\s*$")


def replot(out: str, logs: list[str]) -> dict:
    """The table and plot from the printed lines of earlier (possibly per-d) runs; later lines win (except NaN)."""
    rows_by_d: dict = {}
    trials = {c[0]: c[1] for c in DIMS}
    ns: dict = {}
    for path in logs:
        with open(path, encoding="utf-8") as f:
            for line in f:
                m = _LINE.match(line)
                if m:
                    d, eps = int(m[1]), float(m[2])
                    row = rows_by_d.setdefault(d, {}).setdefault(eps, dict.fromkeys(METHODS, np.nan))
                    for meth, x in zip(METHODS, m.groups()[3:]):
                        if not np.isnan(float(x)):  # a NaN (not run) never hides an earlier value
                            row[meth] = float(x)
                    ns.setdefault(d, {})[eps] = int(m[3]) if m[3] else trials.get(d, 0)
    rows_by_d = {d: sorted(r.items()) for d, r in rows_by_d.items()}
    label = {d: (f"{min(n.values())}–{max(n.values())}" if min(n.values()) != max(n.values()) else str(min(n.values())))
             for d, n in ns.items()}
    return report(rows_by_d, label, out)


def main(out: str = "docs/tensor_private_vs_epsilon.png", *, quick: bool = False, only=(), eps=(), trials=None) -> dict:
    trials_override = trials
    dims = QUICK_DIMS if quick else DIMS
    if only:
        dims = [c for c in dims if c[0] in only]
    rows_by_d, trials_by_d = {}, {}
    t0 = time.process_time()
    for d, dtrials, early, grid in dims:
        grid = [e for e in grid if not eps or e in eps]
        trials = trials_override or dtrials
        rows_by_d[d] = run(d, trials=trials, early_stop=early, epsilons=grid)
        trials_by_d[d] = trials
        print(f"d={d} done [{time.process_time() - t0:.0f} CPU-s so far]", flush=True)
    return report(rows_by_d, trials_by_d, out)


if __name__ == "__main__":
    # [out.png] [--quick] [--dims 256,320] [--eps 22.63,45.25] [--trials 6] [--replot run1.log run2.log ...]
    # --dims / --eps run a subset of DIMS and of its grids (e.g. to add points); --replot redraws the
    # table and plot from the printed output of such runs only (later lines win per d and ε).
    argv = sys.argv[1:]
    if "--replot" in argv:
        i = argv.index("--replot")
        replot(argv[0] if i > 0 else "docs/tensor_private_vs_epsilon.png", argv[i + 1 :])
        sys.exit(0)
    only = ()
    if "--dims" in argv:
        i = argv.index("--dims")
        only = tuple(int(x) for x in argv[i + 1].split(","))
        del argv[i : i + 2]
    trials = None
    if "--trials" in argv:
        i = argv.index("--trials")
        trials = int(argv[i + 1])
        del argv[i : i + 2]
    eps = ()
    if "--eps" in argv:
        i = argv.index("--eps")
        eps = tuple(float(x) for x in argv[i + 1].split(","))
        del argv[i : i + 2]
    args = [a for a in argv if a != "--quick"]
    main(*args[:1], quick="--quick" in argv, only=only, eps=eps, trials=trials)
