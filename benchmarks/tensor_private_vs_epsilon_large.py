"""Alg. 3 vs input perturbation at large d (512 … 1000), matrix-free: the same experiment, lean memory.

    OPENBLAS_NUM_THREADS=1 nice -n 19 .venv/bin/python -m benchmarks.tensor_private_vs_epsilon_large --dims 640
    ... --dims 1000                     # d = 1000, 8 trials: 4.1 GB peak (one float32 d³ array), ~8 CPU-min
    ...                                 # all of LARGE (d = 400 cross-check, 512 … 1000): ~15 CPU-min
    ... --dims 800,1000 --trials 12 --alg3-only   # more Alg. 3 runs only (no d³ array; seconds per run)
    ... --quick                         # d = 12 and 20, seconds (tests)
    python -m benchmarks.tensor_private_vs_epsilon out.png --replot benchmarks/results/tensor_private_vs_epsilon/*.log

The experiment of :mod:`benchmarks.tensor_private_vs_epsilon` (same λ = (50,
37.5, 25), k = 3 incoherent orthonormal components, one component
decomposed, L = 5, R = 10, δ = 1e-6, median ‖v₁ − v̂₁‖ over the trials,
threshold 0.5, ν and σ from the library's plans, printed lines in the same
format so ``--replot`` merges them), for d beyond the explicit float64 path
(d = 400 peaks at 2.1 GB; d = 800 would need ~17 GB). What changes is only
how the tensors are held:

* The signal T = Σλᵢvᵢ^⊗3 is never formed: T(I,U,U) = Vᵀ(λ∘(VU)²).
* Alg. 3 runs as the library's own loop,
  :func:`spark_dp.tensor.private.private_power_method_matrix_free` (which
  :func:`~spark_dp.tensor.private_tensor_power_method` calls with an
  explicit contraction): every candidate's power step and eigenvalue
  estimate is one Gaussian release through a charged chokepoint's
  ``gaussian``, σ = ν‖u‖∞² and ν‖u‖∞³, exactly as on an explicit tensor.
* Input perturbation's noise tensor is built by :func:`unit_symmetric_noise`
  in float32 with exactly the distribution of the library's
  :func:`~spark_dp.tensor.input_perturbation.noisy_symmetric_tensor` at σ = 1
  (entry i ≤ j ≤ k ~ N(0, w²), w = 1, 2, 6 for 3, 2, 1 distinct indices,
  mirrored to all orderings), in place, without index arrays: 4 bytes per
  entry, 4 GB at d = 1000. Alg. 1 on T + σE runs as
  :func:`benchmarks.tensor_noise_tolerance.alg1_matrix_free` with
  T̃(I,U,U) = signal + σ·E_(1)(U ⊙ U) (float32 GEMM, float64 result).

Noise. Alg. 3: ``NumpySampler`` through one charged chokepoint per run, as
the explicit script. Input perturbation: per trial one chokepoint is
charged with the events of every ε of the grid; the unit noise E (10⁹
normals at d = 1000) is drawn from the sampler that
``Chokepoint.randomness(event)`` hands out, in chunks of d², and reused for
every ε of the grid as σ_ε·E (common random numbers, as in the
noise-tolerance experiment). This is a benchmark, not a release: each
T + σ_ε E has exactly the distribution of the library's release at ε (up
to float32 rounding of E, relative 6e-8), which is all a per-ε median
measures, but the several tensors of one trial share E and would not be
private together. Data (V) and starting vectors come from a seeded
generator.

Cost per d (one trial = drawing E, then Alg. 1 per ε of the input
perturbation grid; Alg. 3 is cheap): ``LARGE`` gives the grids, around the
thresholds the explicit runs suggest (Alg. 3 ≈ 22.6-45, input
perturbation ≈ 32·(d/400)^1.2).
"""

from __future__ import annotations

import itertools
import math
import resource
import sys
import tempfile
import time

import numpy as np

from benchmarks.tensor_noise_tolerance import alg1_matrix_free, signal_apply
from benchmarks.tensor_private_vs_epsilon import DELTA, METHODS, _cp, _err
from spark_dp.tensor import input_perturbation_plan, tensor_entry_plan
from spark_dp.tensor.private import private_power_method_matrix_free

LAM = 50.0 * np.array([1.0, 0.75, 0.5])
L_RESTARTS, R_STEPS = 5, 10
ALG3_GRID = [16, 22.63, 32, 45.25, 64, 90.51]
# d: (trials, input perturbation's ε grid); Alg. 3 uses ALG3_GRID everywhere (it is cheap).
LARGE = {
    400: (6, [16, 22.63, 32, 45.25]),  # overlaps the explicit run: a cross-check of the lean path
    512: (6, [22.63, 32, 45.25, 64, 90.51]),
    640: (8, [32, 45.25, 64, 90.51, 128]),
    800: (6, [32, 45.25, 64, 90.51, 128, 181.02]),
    1000: (8, [45.25, 64, 90.51, 128, 181.02]),
}
QUICK = {12: (2, [1, 2, 4, 8, 16]), 20: (2, [2, 4, 8, 16, 32])}
QUICK_ALG3 = [8, 16, 32, 64]
_PERMS = list(itertools.permutations(range(3)))


# -- input perturbation's noise, lean ------------------------------------------------
def unit_symmetric_noise(d: int, standard_normal, *, block: int = 50) -> np.ndarray:
    """E (float32, d×d×d) with the distribution of ``noisy_symmetric_tensor`` at T = 0, σ = 1.

    H iid N(0,1) (``standard_normal(n)`` → n float64 draws, called once per
    slab of d² entries), symmetrised in place, block orbit by block orbit:
    S = Σ_π Hᵀπ/√6 has variance 1 on distinct-index entries (six distinct
    H's), 2 where exactly two indices coincide (three H's, each twice) and 6
    on the diagonal (six times one H); rescaling those by √2 and √6 gives
    the variances w² = 4 and 36. Entries of different orbits share no H, so
    the unique entries are independent. Peak: the one d³ float32 array.
    """
    E = np.empty((d, d, d), dtype=np.float32)
    for i in range(d):
        E[i] = np.asarray(standard_normal(d * d), dtype=np.float64).reshape(d, d)
    views = [E.transpose(p) for p in _PERMS]
    edges = list(range(0, d, block)) + [d]
    blocks = [slice(a, b) for a, b in zip(edges[:-1], edges[1:])]
    for bi, bj, bk in itertools.combinations_with_replacement(range(len(blocks)), 3):
        idx = (blocks[bi], blocks[bj], blocks[bk])
        S = sum(np.array(v[idx], dtype=np.float64) for v in views)  # read the orbit's blocks before any write
        S *= 1.0 / math.sqrt(6.0)
        for v in views:  # sym is symmetric: the same S lands on every block of the orbit
            v[idx] = S
    a, b = np.nonzero(~np.eye(d, dtype=bool))  # a ≠ b
    for idx in ((a, a, b), (a, b, a), (b, a, a)):  # exactly two indices coincide: variance 2 → 4
        E[idx] *= np.float32(math.sqrt(2.0))
    r = np.arange(d)
    E[r, r, r] *= np.float32(math.sqrt(6.0))  # diagonal: 6 → 36
    return E


def noise_apply(E: np.ndarray):
    """U ↦ E(I,U,U) = E_(1)(U ⊙ U) as one float32 GEMM (Khatri-Rao product of U with itself)."""
    d = E.shape[0]
    flat = E.reshape(d, d * d)

    def apply(U):
        U32 = U.astype(np.float32)
        return (flat @ np.einsum("il,jl->ijl", U32, U32).reshape(d * d, U.shape[1])).astype(np.float64)

    return apply


# -- the experiment -------------------------------------------------------------------
def _plans(grid, cal):
    out = {}
    for eps in grid:
        try:
            out[eps] = tensor_entry_plan(epsilon=eps, delta=DELTA, k=1, L=L_RESTARTS, R=R_STEPS, calibration=cal)
        except Exception:  # paper calibration undefined (ε₀ ≥ 1)
            out[eps] = None
    return out


def run(d: int, *, trials: int, ip_grid, alg3_grid=ALG3_GRID, seed: int = 0):
    """Median error per ε and method (NaN where a method is not on its grid or undefined); prints the lines."""
    gen = np.random.default_rng(seed)  # data and starting vectors, not privacy noise
    Q, _ = np.linalg.qr(gen.standard_normal((d, 3)))
    V, v1 = Q.T, Q[:, 0]
    signal = signal_apply(V, LAM[:, None])  # T(I,U,U) = Vᵀ(λ∘(VU)²)
    a3 = {cal: _plans(alg3_grid, cal) for cal in ("exact", "paper")}
    ip = {eps: input_perturbation_plan(epsilon=eps, delta=DELTA) for eps in ip_grid}
    grid = sorted(set(alg3_grid) | set(ip_grid))
    errs = {eps: {m: [] for m in METHODS} for eps in grid}
    tmp = tempfile.mkdtemp()
    n = 0
    t0 = time.process_time()
    for t in range(trials):
        for cal in ("exact", "paper"):  # Alg. 3: one charged chokepoint per run
            for eps, plan in a3[cal].items():
                if plan is None:
                    continue
                n += 1
                cp = _cp(tmp, plan.events, n)
                dec = private_power_method_matrix_free(signal, d, 1, L=L_RESTARTS, R=R_STEPS, nu=plan.nu,
                                                       gaussian=cp.gaussian, rng=gen)
                errs[eps][f"alg3_{cal}"].append(_err(dec, v1))
        if not ip_grid:  # --alg3-only: more Alg. 3 runs near its threshold (input perturbation prints nan)
            continue
        # input perturbation: one unit E per trial from a chokepoint charged with every grid ε's event
        n += 1
        events = [ip[eps].events[0] for eps in ip_grid]
        cp = _cp(tmp, events, n)
        samplers = [cp.randomness(ev) for ev in events]  # each ε's event used up; one sampler
        E = unit_symmetric_noise(d, samplers[0].standard_normal)
        noise = noise_apply(E)
        for eps in ip_grid:
            s = ip[eps].sigma
            dec = alg1_matrix_free(lambda U, s=s, noise=noise: signal(U) + s * noise(U), d, 1, L=L_RESTARTS, R=R_STEPS, rng=gen)
            errs[eps]["input_perturbation"].append(_err(dec, v1))
        del E, noise
        print(f"  # d={d} trial {t + 1}/{trials}: {time.process_time() - t0:.0f} CPU-s, "
              f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GB", flush=True)
    rows = []
    for eps in grid:
        med = {m: float(np.median(v)) if v else np.nan for m, v in errs[eps].items()}
        rows.append((eps, med))
        print(f"  d={d} ε={eps:g} n={trials}: " + " ".join(f"{m}={med[m]:.3f}" for m in METHODS), flush=True)
    return rows


def main(out: str | None = None, *, quick: bool = False, only=(), trials=None, alg3_only: bool = False) -> dict:
    from benchmarks.tensor_private_vs_epsilon import report

    dims = QUICK if quick else LARGE
    alg3_grid = QUICK_ALG3 if quick else ALG3_GRID
    rows_by_d, trials_by_d = {}, {}
    for d, (dtrials, ip_grid) in dims.items():
        if only and d not in only:
            continue
        t0 = time.process_time()
        tr = trials or dtrials
        rows_by_d[d] = run(d, trials=tr, ip_grid=[] if alg3_only else ip_grid, alg3_grid=alg3_grid)
        trials_by_d[d] = tr
        print(f"d={d} done: {time.process_time() - t0:.0f} CPU-s, peak RSS "
              f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GB", flush=True)
    return report(rows_by_d, trials_by_d, out)


if __name__ == "__main__":
    # [out.png] [--quick] [--dims 640,1000] [--trials 6] [--alg3-only]
    argv = sys.argv[1:]
    only, trials = (), None
    if "--dims" in argv:
        i = argv.index("--dims")
        only = tuple(int(x) for x in argv[i + 1].split(","))
        del argv[i : i + 2]
    if "--trials" in argv:
        i = argv.index("--trials")
        trials = int(argv[i + 1])
        del argv[i : i + 2]
    args = [a for a in argv if a not in ("--quick", "--alg3-only")]
    main(args[0] if args else None, quick="--quick" in argv, only=only, trials=trials, alg3_only="--alg3-only" in argv)
