"""Reproduces the error figures of Pagh & Thorup (NeurIPS 2022) with spark-dp's sketch code.

    .venv/bin/python -m benchmarks.sketch_figures          # ~1 minute; writes docs/sketch_*.png

1. Median of k Gaussians of variance k (k = 1…63): the noise of the median
   stays bounded (→ √(π/2) ≈ 1.25 standard units) while each release's grows as √k.
2. t-sparse vectors with entries 10, b = t, k = 1…63: the error CDF of
   Private CountSketch approaches the Gaussian mechanism on the raw vector
   (noise in ½-zCDP units: σ = 1 for the Gaussian mechanism, sensitivity 1;
   σ = √k per counter for the sketch, sensitivity √k — the same privacy).
3. World cities (../shared/data/world_cities_population.txt, 40,999
   populations): sketch error with noise σ = 10⁵ at b = 1000 and σ = 10⁴ at
   b = 10⁴, for k ∈ {1, 3, 5, 9, 19}, against the noise-free sketch.

The sketches use spark-dp's own hash family (``spark_dp.sketch.hashing``,
identical to the Spark build) and estimators (``spark_dp.sketch.combine``).
The Gaussian draws here are simulation noise for an error study, not a
release: they come from a seeded numpy generator, never from the chokepoint.
"""

from __future__ import annotations

import os
import sys

import numpy as np

from spark_dp.sketch.count_sketch import combine, simple_estimates
from spark_dp.sketch.hashing import MASK, SIGN_SALT, spark_seed_state, to_signed, xxh64_long_array

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")
CITIES = os.path.join(ROOT, "..", "shared", "data", "world_cities_population.txt")


def int_hashes(n_items: int, seeds: list[int], b: int) -> tuple[np.ndarray, np.ndarray]:
    """hᵢ, sᵢ of the items 0…n−1 (vectorised; the same values Spark's build uses for bigint items)."""
    ids = np.arange(n_items, dtype=np.int64)
    h = np.empty((len(seeds), n_items), dtype=np.int64)
    s = np.empty_like(h)
    for i, seed in enumerate(seeds):
        hv = xxh64_long_array(ids, spark_seed_state(seed)).view(np.int64)
        h[i] = np.mod(hv, np.int64(b))
        sv = xxh64_long_array(ids, spark_seed_state(to_signed((seed & MASK) ^ SIGN_SALT))).view(np.int64)
        s[i] = 1 - 2 * (sv & np.int64(1))
    return h, s


def count_sketch(x: np.ndarray, h: np.ndarray, s: np.ndarray, b: int) -> np.ndarray:
    k = h.shape[0]
    T = np.zeros((k, b))
    for i in range(k):
        T[i] = np.bincount(h[i], weights=s[i] * x, minlength=b)
    return T


def pcs_errors(x, k, b, sigma, gen) -> tuple[np.ndarray, np.ndarray]:
    """(errors with noise, errors without noise) of the median estimator on every entry of x."""
    seeds = [int(v) for v in gen.integers(-(2**63), 2**63 - 1, size=k, dtype=np.int64)]
    h, s = int_hashes(len(x), seeds, b)
    T = count_sketch(x, h, s, b)
    noisy = T + gen.normal(0.0, sigma, size=T.shape)
    est = combine(simple_estimates(noisy, h, s), "median")
    est0 = combine(simple_estimates(T, h, s), "median")
    return est - x, est0 - x


def fig_median_of_k(gen, plt):
    ks = [1, 3, 5, 7, 9, 15, 21, 31, 45, 63]
    rows = []
    for k in ks:
        med = np.median(gen.normal(0, np.sqrt(k), size=(20_000, k)), axis=1)
        rows.append((k, np.std(med), np.median(np.abs(med))))
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.6))
    for k in (1, 3, 9, 31, 63):
        med = np.sort(np.abs(np.median(gen.normal(0, np.sqrt(k), size=(20_000, k)), axis=1)))
        ax[0].plot(med, np.linspace(0, 1, med.size), label=f"k={k}")
    ax[0].set_xlim(0, 5)
    ax[0].set_xlabel("|median of k draws of N(0, k)|")
    ax[0].set_ylabel("CDF")
    ax[0].legend()
    ax[1].plot(ks, [r[1] for r in rows], "o-", label="std of the median")
    ax[1].plot(ks, np.sqrt(ks), "--", label="std of one release (√k)")
    ax[1].axhline(np.sqrt(np.pi / 2), color="gray", lw=0.8, label="√(π/2)")
    ax[1].set_xlabel("k")
    ax[1].legend()
    fig.tight_layout()
    fig.savefig(os.path.join(DOCS, "sketch_median_of_k.png"), dpi=110)
    return rows


def fig_sparse(gen, plt, t=1000, d=10_000, trials=3):
    """Two noise levels: σ_GM = 1 (½-zCDP units) and σ_GM = z(ε=1, δ=1e-6) = 4.22 (exact calibration)."""
    import dp_accounting

    ks = [1, 3, 5, 9, 15, 31, 63]
    x = np.zeros(d)
    support = np.sort(gen.choice(d, size=t, replace=False))
    x[support] = 10.0
    out = {}
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, s_gm in zip(axes, [1.0, dp_accounting.get_sigma_gaussian(1.0, 1e-6)], strict=True):
        gm = np.abs(gen.normal(0.0, s_gm, size=t * trials))  # Gaussian mechanism on x (sensitivity 1)
        res = {"gaussian": float(np.median(gm)), "noise_only": {}}
        for k in ks:
            errs = np.concatenate([np.abs(pcs_errors(x, k, t, s_gm * np.sqrt(k), gen)[0][support])
                                   for _ in range(trials)])
            res[k] = float(np.median(errs))
            # the same median of k noisy counters without any collision (b → ∞)
            res["noise_only"][k] = float(np.median(np.abs(np.median(
                gen.normal(0, s_gm * np.sqrt(k), size=(t * trials, k)), axis=1))))
            e = np.sort(errs)
            ax.plot(e, np.linspace(0, 1, e.size), label=f"PCS k={k}")
        g = np.sort(gm)
        ax.plot(g, np.linspace(0, 1, g.size), "k--", lw=2, label="Gaussian mechanism")
        ax.set_xlim(0, 6 * s_gm)
        ax.set_title(f"σ of the Gaussian mechanism = {s_gm:.2f}")
        ax.set_xlabel(f"|error| on the {t} non-zero entries (value 10), b = t")
        ax.set_ylabel("CDF")
        ax.legend(fontsize=8)
        out[round(s_gm, 2)] = res
    fig.tight_layout()
    fig.savefig(os.path.join(DOCS, "sketch_sparse_cdf.png"), dpi=110)
    return out


def fig_world_cities(gen, plt):
    x = np.loadtxt(CITIES, dtype=np.float64)
    ks = [1, 3, 5, 9, 19]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    out = {}
    for ax, (b, sigma) in zip(axes, [(1000, 1e5), (10_000, 1e4)], strict=True):
        for k in ks:
            e, e0 = pcs_errors(x, k, b, sigma, gen)
            e, e0 = np.sort(np.abs(e)), np.sort(np.abs(e0))
            out[(b, k)] = (float(np.median(e)), float(np.median(e0)), float(np.quantile(e, 0.99)))
            line = ax.plot(e, np.linspace(0, 1, e.size), label=f"k={k}")[0]
            ax.plot(e0, np.linspace(0, 1, e0.size), ":", color=line.get_color())
        ax.set_xscale("log")
        ax.set_xlim(1e2, 1e7)
        ax.set_title(f"b = {b}, noise σ = {sigma:.0e} (dotted: no noise)")
        ax.set_xlabel("|error| (population)")
        ax.set_ylabel("CDF over the 40,999 cities")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(DOCS, "sketch_world_cities.png"), dpi=110)
    return out


def main() -> int:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(DOCS, exist_ok=True)
    gen = np.random.default_rng(2022)
    print("median of k draws of N(0, k):  k, std, median |.|")
    for k, sd, mad in fig_median_of_k(gen, plt):
        print(f"  {k:3d}  {sd:.3f}  {mad:.3f}")
    for s_gm, sp in fig_sparse(gen, plt).items():
        print(f"t-sparse (t = b = 1000, entries 10), sigma_GM = {s_gm}: median |error|; "
              f"Gaussian mechanism {sp['gaussian']:.3f}")
        for k in (1, 3, 5, 9, 15, 31, 63):
            print(f"  k={k:2d}: {sp[k]:.3f}  ({sp[k] / sp['gaussian']:.2f}x; noise alone, no collisions: "
                  f"{sp['noise_only'][k] / sp['gaussian']:.2f}x)")
    wc = fig_world_cities(gen, plt)
    print("world cities: b, k, median |error| with noise, without noise, 99% quantile with noise")
    for (b, k), (m1, m0, q99) in wc.items():
        print(f"  b={b:5d} k={k:2d}: {m1:10.0f} {m0:10.0f} {q99:12.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
