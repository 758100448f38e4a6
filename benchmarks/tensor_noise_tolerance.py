"""Noise tolerance of the robust tensor power method (Alg. 1) as d grows: η*(d) per noise model.

    nice -n 19 .venv/bin/python -m benchmarks.tensor_noise_tolerance            # full run, ~11 CPU-min; writes the plot
    nice -n 19 .venv/bin/python -m benchmarks.tensor_noise_tolerance --quick    # small d, seconds (tests)
    ... "" --models round,weak_Gaussian --dims 192,256 --trials 6   # a subset (no k sweep), printed only
    ... "" --models adversary,round_step,weak_step --sweep          # some models with their k sweeps
    ... out.png --replot run1.log run2.log                          # table and plot from printed lines

Wang & Anandkumar (NIPS 2016) discuss three noise cases under Thm 2.2 and
report a simulation of them in their Appendix A, which is not in our copy of
the paper; the noise models below are our constructions. Signal
T = Σᵢ λ vᵢ^⊗3 (λ = 1, k orthonormal random vᵢ), T̃ = T + η·E with
‖E‖op = 1, so η = ‖ΔT‖op. Thm 2.2's predictions for the three cases:
arbitrary O(λ/d), "round" O(λ/√d), weakly correlated O(λ/√k).

Models (E(I,u,u) is all Alg. 1 needs; only the Gaussian ones hold a d³ array):

* ``pull`` (arbitrary): E = sym(w⊗I⊗I), w ⊥ span(V) unit; E(I,u,u) =
  (w‖u‖² + 2(wᵀu)u)/3 pulls every iterate towards w.
* ``tilted pull`` (arbitrary): the same with w = (w⊥ − s)/√2, s = Σvᵢ/√k:
  the pull also pushes against every signal direction.
* ``push`` (arbitrary): E = −sym(s⊗I⊗I): ΔT(vᵢ,u,u) ≈ −η/(3√k) at every u,
  a constant push against the signal, the construction our earlier run
  proposed as "signal-cancelling".
* ``round``: E = sym(G)/‖sym(G)‖op, G with iid N(0,1) entries (one G per d).
* ``weak Gaussian``: E = sym(G)(P,P,P), P the projector on span(V)⊥, so
  E(vᵢ,I,I) = 0 (scenario 3), rescaled to ‖E‖op = 1.
* ``weak pull``: E = sym(w⊗P⊗P)·(unit op norm): the pull restricted to
  span(V)⊥, E(vᵢ,I,I) = 0.

Per-step models (``STEP``; :func:`step_noise`): Thm 2.2's conditions (4)
are stated on ΔT(I,u_t,u_t) and ΔT(vᵢ,u_t,u_t) along the iterates, and the
noise of Alg. 2 (sampling) and Alg. 3 (privacy) is drawn afresh at every
power step. These models add a vector of norm η to every deflated power
step (``alg1_matrix_free(..., perturb=)``):

* ``adversary`` (case 1): sees the step and cancels as much of its
  signal part as η allows (O(λ/d): a start's signal λ(vᵢᵀu₀)² is ≈ λ/d);
* ``round step`` (case 2): a fresh uniformly random direction;
* ``weak step`` (case 3): a fresh random direction in span(V)⊥.

Their accuracy cap is η ≈ 0.19 (a step noise of norm η tilts the fixed
point near vᵢ by ≈ η/λ), their slopes are fitted over d ≥ 512.

Procedure. Alg. 1 (k components, L = 10 restarts, R = 30 steps) is run
matrix-free by :func:`alg1_matrix_free` — the library's Alg. 1 step for step,
built from the same helpers, with T̃(I,U,U) supplied as a function (equal to
``robust_tensor_power_method`` on explicit tensors; tested). Success: every
vᵢ matched by a distinct v̂ with ‖vᵢ − v̂‖ < 0.2. For each trial (fresh V,
w, starts; the Gaussian G is fixed per d), η_c is found by bisection on
log η in [1e-3, 2] (8 halvings, ±4 %), with the trial's random starts reused
at every η (common random numbers); η* = median of η_c over the trials,
i.e. the η at which half the trials succeed. Two caps bound η* whatever
the start does: the accuracy cap η ≈ 0.58 (models with ΔT(vᵢ,I,I) ≠ 0 tilt
the fixed points near vᵢ by ≈ η/3, beyond the 0.2 tolerance) and the
boosting cap η ≈ λ (the noise's own fixed points reach T̃(u,u,u) ≈ λ).
Slopes: least squares of log η* on log d over d ≥ 128, where the measured
thresholds have left the caps.

Prediction for the pull models (heuristic, stated in docs/tensor.md): the
signal coefficient aᵢ = vᵢᵀu follows aᵢ ← λaᵢ²/‖T̃(I,u,u)‖ with
‖T̃(I,u,u)‖ ≳ η/3 at a start, so it grows only if λaᵢ > η/3: the start with
the largest |vᵢᵀu₀| ≈ √(2 ln(kL)/d) decides, η* ∝ λ√(ln(kL)/d) — slope −1/2,
not −1. The prediction column below is c·√(2 ln(kL)/d) with c fitted.
"""

from __future__ import annotations

import re
import sys
import time

import numpy as np

from spark_dp.tensor.power_method import TensorDecomposition, deflate, normalize_columns, random_unit_columns

LAM = 1.0
L_RESTARTS = 10
R_STEPS = 30
LO, HI, HALVINGS = 1e-3, 2.0, 8
CAP = 0.5  # only for the plot: below ~0.5λ thresholds are no longer set by the caps (see the module text)
DMIN_FIT = 128  # d-slopes are fitted over d ≥ DMIN_FIT
DMIN_FIT_STEP = 512  # per-step models: round step sits at its accuracy cap (≈ 0.19) up to d = 256
MATRIX_FREE = ("pull", "tilted pull", "push", "weak pull")
EXPLICIT = ("round", "weak Gaussian")
STEP = ("adversary", "round step", "weak step")  # noise drawn or chosen per power step (see step_noise)
MODELS = MATRIX_FREE + EXPLICIT + STEP
LO_STEP, HALVINGS_STEP = 1e-6, 9  # the per-step thresholds reach ~1e-4 at d = 65536


# -- Alg. 1, matrix-free ---------------------------------------------------------
def alg1_matrix_free(apply, d: int, k: int, *, L: int, R: int, rng: np.random.Generator,
                     perturb=None) -> TensorDecomposition:
    """Alg. 1 of Wang & Anandkumar with T̃(I,U,U) given as ``apply(U)`` (d×L → d×L).

    The same algorithm and helpers as
    :func:`spark_dp.tensor.robust_tensor_power_method` (which contracts an
    explicit array): the same draws from ``rng`` in the same order, so on an
    explicit tensor the two return the same decomposition.

    ``perturb(S, U)`` (optional) replaces every deflated power step
    S = (T̃ − D)(I,U,U) by a perturbed one, and the eigenvalue estimates by
    ⟨perturb(S, U), u⟩: a noise that acts step by step (fresh, or chosen
    after seeing the iterate) rather than as a fixed tensor, as the noise
    in Alg. 2 and Alg. 3 does and as Thm 2.2's conditions (4) are stated.
    """
    lambdas = np.zeros(0)
    V_ = np.zeros((0, d))
    for _i in range(k):  # step 2
        U = random_unit_columns(rng, d, L)  # step 3, all L restarts at once (step 5)
        for _t in range(R):  # step 4: u_t = T̃(I,u,u)/‖·‖, T̃ the deflated tensor
            S, _ = deflate(apply(U), None, U, lambdas, V_)
            U = normalize_columns(S if perturb is None else perturb(S, U), U)
        S = apply(U)  # step 5: T̃(u_R, u_R, u_R) per restart, then boosting
        if perturb is None:
            _, m3 = deflate(np.zeros_like(U), np.einsum("il,il->l", S, U), U, lambdas, V_)
        else:
            S, _ = deflate(S, None, U, lambdas, V_)
            m3 = np.einsum("il,il->l", perturb(S, U), U)
        best = int(np.argmax(m3))
        lambdas = np.append(lambdas, m3[best])  # step 6: deflation kept implicit
        V_ = np.vstack([V_, U[:, best]])
    return TensorDecomposition(eigenvalues=lambdas, eigenvectors=V_)


def explicit_apply(T: np.ndarray):
    """U ↦ T(I,U,U) for an explicit symmetric (d,d,d) array, one GEMM."""
    d = T.shape[0]
    flat = T.reshape(d, d * d)

    def apply(U):
        return flat @ np.einsum("il,jl->ijl", U, U).reshape(d * d, U.shape[1])

    return apply


def signal_apply(V: np.ndarray, lam: float = LAM):
    """U ↦ Σᵢ λ (vᵢᵀu)² vᵢ (V: k×d)."""
    return lambda U: V.T @ (lam * (V @ U) ** 2)


def sym_vector_apply(w: np.ndarray, P=None):
    """U ↦ sym(w⊗Q⊗Q)(I,U,U) = (w‖Qu‖² + 2(wᵀu)Qu)/3, Q = I or the projector ``P(x)`` (w = Qw)."""
    Q = (lambda X: X) if P is None else P

    def apply(U):
        QU = Q(U)
        return (w[:, None] * np.sum(QU * QU, axis=0) + 2.0 * (w @ U) * QU) / 3.0

    return apply


def symmetric_gaussian(d: int, gen: np.random.Generator) -> np.ndarray:
    """sym(G), G with iid N(0,1) entries (float64; peak ~3 d³ doubles)."""
    G = gen.standard_normal((d, d, d))
    E = G.copy()
    for p in ((0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0)):
        E += G.transpose(p)
    del G
    E /= 6.0
    return E


def op_norm(apply, d: int, gen: np.random.Generator) -> float:
    """max_u |E(u,u,u)| by Alg. 1 itself (k = 1, 20 restarts, 30 steps; E odd, so max = op norm)."""
    return abs(float(alg1_matrix_free(apply, d, 1, L=20, R=30, rng=gen).eigenvalues[0]))


def recovered(dec: TensorDecomposition, V: np.ndarray, tol: float = 0.2) -> bool:
    sims = np.abs(V @ dec.eigenvectors.T)
    idx = np.argmax(sims, axis=1)
    if len(set(idx.tolist())) != V.shape[0]:
        return False
    W = dec.eigenvectors[idx]
    err = np.linalg.norm(V - np.sign(np.sum(V * W, axis=1))[:, None] * W, axis=1)
    return bool(err.max() < tol)


# -- one trial ---------------------------------------------------------------------
def noise_apply(model: str, d: int, V: np.ndarray, gen: np.random.Generator, E: np.ndarray | None):
    """A unit-operator-norm noise of ``model`` for signal directions V (k×d), as U ↦ E(I,U,U)."""
    k = V.shape[0]

    def perp(x):
        return x - V.T @ (V @ x)

    w = perp(gen.standard_normal(d))
    w /= np.linalg.norm(w)
    s = V.sum(axis=0) / np.sqrt(k)
    if model == "pull":
        return sym_vector_apply(w)  # ‖sym(w⊗I⊗I)‖op = max (wᵀu)‖u‖² = 1
    if model == "tilted pull":
        return sym_vector_apply((w - s) / np.sqrt(2.0))
    if model == "push":
        f = sym_vector_apply(s)
        return lambda U: -f(U)
    if model == "weak pull":
        f = sym_vector_apply(w, P=perp)  # ‖·‖op = 1 as well (attained at u = w ⊥ V)
        return f
    if model == "round":
        return explicit_apply(E)  # E already scaled to unit op norm
    if model == "weak Gaussian":
        base = explicit_apply(E)

        def f(U):
            return perp(base(perp(U)))

        n = op_norm(f, d, gen)
        return lambda U: f(U) / n
    raise ValueError(model)


def step_noise(model: str, d: int, V: np.ndarray, gen: np.random.Generator):
    """A per-step noise of ``model`` as ``f(S, U, eta, rng)`` → S + G, every column of G of norm η.

    S = (T̃ − D)(I,U,U) is the deflated power step of the L candidates U.
    This is ΔT(I,u_t,u_t) of Thm 2.2's conditions (4), stated along the
    iterates, with ‖ΔT(I,u_t,u_t)‖ = η at every step:

    * ``adversary`` (case 1, no structure): sees the step and spends its
      budget against the signal. With c = P_V s the step's part in span(V)
      (P_V the projector on the true components) it adds −β ĉ + γ w,
      β² + γ² = η², w ⊥ span(V) fixed per trial: β = ‖c‖ (all of the signal
      cancelled) when η ≥ ‖c‖, else β = η²/‖c‖, the β that minimises the
      signal-to-orthogonal ratio (‖c‖ − β)/γ of the next iterate. If η ≥
      λ‖(Vu₀)²‖ at every start, the first step leaves every candidate at w,
      where T(I,w,w) = 0: Alg. 1 fails for certain (tested). |ΔT(vᵢ,u,u)|
      ≤ λ(vᵢᵀu)², about λ/d at a random start: case 1's O(λ/d).
    * ``round step`` (case 2): η·z/‖z‖, z ~ N(0, I_d) fresh per step and
      candidate; |ΔT(vᵢ,u,u)| ≈ η/√d.
    * ``weak step`` (case 3): the same projected on span(V)⊥, so
      ΔT(vᵢ,u,u) = 0.
    """
    def perp(x):
        return x - V.T @ (V @ x)

    w = perp(gen.standard_normal(d))
    w /= np.linalg.norm(w)
    if model == "adversary":
        def f(S, U, eta, rng):
            C = V.T @ (V @ S)
            c = np.linalg.norm(C, axis=0)
            beta = np.where(c <= eta, c, eta**2 / np.maximum(c, 1e-300))
            gamma = np.sqrt(np.maximum(eta**2 - beta**2, 0.0))
            return S - beta * C / np.where(c > 0, c, 1.0) + gamma * w[:, None]

        return f
    if model in ("round step", "weak step"):
        proj = perp if model == "weak step" else (lambda X: X)

        def f(S, U, eta, rng):
            Z = proj(rng.standard_normal(S.shape))
            return S + eta * Z / np.linalg.norm(Z, axis=0)

        return f
    raise ValueError(model)


def trial_threshold(model: str, d: int, k: int, gen: np.random.Generator, E=None) -> float:
    """η_c of one trial: bisection on log η of 'all k components recovered' (starts reused at every η)."""
    Q, _ = np.linalg.qr(gen.standard_normal((d, k)))
    V = Q.T
    sig = signal_apply(V)
    if model in STEP:  # per-step noise: the same starts and the same noise draws at every η
        step = step_noise(model, d, V, gen)
        seed, nseed = int(gen.integers(2**63)), int(gen.integers(2**63))

        def ok(eta):
            nrng = np.random.default_rng(nseed)
            return recovered(alg1_matrix_free(sig, d, k, L=L_RESTARTS, R=R_STEPS, rng=np.random.default_rng(seed),
                                              perturb=lambda S, U: step(S, U, eta, nrng)), V)

        lo_eta, halvings = LO_STEP, HALVINGS_STEP
    else:
        noise = noise_apply(model, d, V, gen, E)
        seed = int(gen.integers(2**63))

        def ok(eta):
            return recovered(alg1_matrix_free(lambda U: sig(U) + eta * noise(U), d, k, L=L_RESTARTS, R=R_STEPS,
                                              rng=np.random.default_rng(seed)), V)

        lo_eta, halvings = LO, HALVINGS

    lo, hi = np.log(lo_eta), np.log(HI)
    if ok(HI):
        return HI
    if not ok(lo_eta):
        return lo_eta
    for _ in range(halvings):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if ok(np.exp(mid)) else (lo, mid)
    return float(np.exp(0.5 * (lo + hi)))


def threshold(model: str, d: int, k: int, trials: int, gen: np.random.Generator) -> float:
    E = None
    if model in EXPLICIT:
        E = symmetric_gaussian(d, gen)
        if model == "round":
            E /= op_norm(explicit_apply(E), d, gen)
    etas = [trial_threshold(model, d, k, gen, E) for _ in range(trials)]
    return float(np.median(etas))


def slope(xs, etas, *, xmin: float = 0.0) -> float:
    """Least-squares slope of log η* on log x over the points with x ≥ xmin (NaN if fewer than 2)."""
    pts = [(np.log(x), np.log(e)) for x, e in zip(xs, etas) if x >= xmin]
    if len(pts) < 2:
        return float("nan")
    x, y = np.array(pts).T
    return float(np.polyfit(x, y, 1)[0])


FULL = {
    "dims_free": [16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192],
    "dims_explicit": [16, 32, 64, 128, 192, 256],
    "trials_free": 16,
    "trials_explicit": 8,
    "trials_explicit_large": 6,  # d ≥ 192
    "dims_step": [16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536],
    "trials_step": 16,
    "k": 3,
    "ks": [1, 2, 4, 8, 16],
    "k_dims": {"weak pull": 512, "pull": 512, "tilted pull": 512, "weak Gaussian": 64, "round": 64,
               "adversary": 512, "round step": 512, "weak step": 512},
    "k_trials": 8,
}
QUICK = {
    "dims_free": [16, 64],
    "dims_explicit": [8, 16],
    "trials_free": 3,
    "trials_explicit": 2,
    "trials_explicit_large": 2,
    "dims_step": [16, 64],
    "trials_step": 3,
    "k": 2,
    "ks": [1, 2],
    "k_dims": {"weak pull": 32, "adversary": 32},
    "k_trials": 2,
}


_LINE = re.compile(r"^(.+?)\s+d=\s*(\d+) k=(\d+): η\* = (\S+)")


def _dims_trials(cfg: dict, model: str) -> tuple[list, int]:
    if model in EXPLICIT:
        return cfg["dims_explicit"], cfg["trials_explicit"]
    if model in STEP:
        return cfg["dims_step"], cfg["trials_step"]
    return cfg["dims_free"], cfg["trials_free"]


def main(out: str = "docs/tensor_noise_tolerance.png", *, quick: bool = False, models=None, dims=None,
         trials=None, sweep: bool = True, logs=()) -> dict:
    """Runs the thresholds (or re-reads them from the printed ``logs`` of earlier runs), prints the table, plots."""
    cfg = QUICK if quick else FULL
    gen = np.random.default_rng(0 if dims is None else int(sum(dims)))  # simulation data and starts, not privacy noise
    k = cfg["k"]
    eta = {m: {} for m in MODELS}
    eta_k: dict = {}
    t0 = time.process_time()
    if logs:  # --replot: lines "model d=… k=…: η* = …" (later lines win)
        for path in logs:
            with open(path, encoding="utf-8") as f:
                for line in f:
                    m = _LINE.match(line)
                    if not m:
                        continue
                    model, d, kk, e = m[1].strip(), int(m[2]), int(m[3]), float(m[4])
                    if kk == k:
                        eta[model][d] = e
                    if model in cfg["k_dims"] and d == cfg["k_dims"][model] and (kk != k or kk in cfg["ks"]):
                        eta_k.setdefault(model, {})[kk] = e
        eta_k = {m: dict(sorted(v.items())) for m, v in eta_k.items() if len(v) > 1}
        eta = {m: dict(sorted(v.items())) for m, v in eta.items()}
    else:
        for model in models or MODELS:
            cdims, ctrials = _dims_trials(cfg, model)
            mdims, mtrials = dims or cdims, trials or ctrials
            for d in mdims:
                n = mtrials if trials or model not in EXPLICIT or d < 192 else cfg["trials_explicit_large"]
                eta[model][d] = threshold(model, d, k, n, gen)
                print(f"{model:14s} d={d:5d} k={k}: η* = {eta[model][d]:.4g}   [{time.process_time() - t0:.0f} CPU-s]",
                      flush=True)
        for model, d in (cfg["k_dims"].items() if sweep else ()):
            if models and model not in models:
                continue
            eta_k[model] = {}
            for kk in cfg["ks"]:
                eta_k[model][kk] = threshold(model, d, kk, cfg["k_trials"], gen)
                print(f"{model:14s} d={d:5d} k={kk}: η* = {eta_k[model][kk]:.4g}   [{time.process_time() - t0:.0f} CPU-s]",
                      flush=True)
    eta = {m: v for m, v in eta.items() if v}
    slopes = {m: slope(list(v), list(v.values()), xmin=DMIN_FIT_STEP if m in STEP else DMIN_FIT) for m, v in eta.items()}
    k_slopes = {m: slope(list(v), list(v.values())) for m, v in eta_k.items()}
    # prediction for the pull models: c·√(2 ln(kL)/d), c fitted on "pull" below the cap
    pull = eta.get("pull", {})
    pd = [d for d in pull if d >= DMIN_FIT]
    c = float(np.exp(np.mean([np.log(pull[d] / np.sqrt(2 * np.log(k * L_RESTARTS) / d)) for d in pd]))) if pd else float("nan")
    # the per-step adversary: η* ≈ c₁·λ/d (a start's signal λ(vᵢᵀu₀)² is ~λ/d), c₁ fitted
    adv = eta.get("adversary", {})
    ad = [d for d in adv if d >= DMIN_FIT_STEP]
    c1 = float(np.exp(np.mean([np.log(adv[d] * d) for d in ad]))) if ad else float("nan")

    print(f"\nslopes of log η* on log d (d ≥ {DMIN_FIT}; per-step models d ≥ {DMIN_FIT_STEP}): " + ", ".join(f"{m} {s:+.2f}" for m, s in slopes.items()))
    print("slopes of log η* on log k at fixed d (all points): " + ", ".join(f"{m} {s:+.2f}" for m, s in k_slopes.items()))
    print(f"pull prediction η* ≈ {c:.2f}·√(2 ln(kL)/d); adversary η* ≈ {c1:.2f}·λ/d")
    alld = sorted({d for v in eta.values() for d in v})
    ms = list(eta)
    print("\n| d | " + " | ".join(ms) + " | c·√(2 ln(kL)/d) | c₁/d |")
    print("|---|" + "---|" * (len(ms) + 2))
    for d in alld:
        cells = [f"{eta[m][d]:.3g}" if d in eta[m] else "" for m in ms]
        print(f"| {d} | " + " | ".join(cells) + f" | {c * np.sqrt(2 * np.log(k * L_RESTARTS) / d):.3g}"
              f" | {c1 / d:.3g} |")
    print(f"| slope (d ≥ {DMIN_FIT}; per step ≥ {DMIN_FIT_STEP}) | " + " | ".join(f"{slopes[m]:+.2f}" for m in ms) + " | −0.50 | −1.00 |")
    for m, v in eta_k.items():
        print(f"k sweep {m} (d = {cfg['k_dims'][m]}): " + ", ".join(f"k={kk}: {e:.3g}" for kk, e in v.items())
              + f"; slope {k_slopes[m]:+.2f}")
    print(f"total {time.process_time() - t0:.0f} CPU-s")

    if out:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, (ax, sx, bx) = plt.subplots(1, 3, figsize=(18, 4.8))
        styles = dict(zip(MODELS, ("o-", "s-", "v-", "D-", "^--", "x--", "o-", "^-", "D-")))
        colors = dict(zip(MODELS, ("C0", "C1", "C2", "C3", "C4", "C5", "C6", "C9", "C8")))
        dd = np.array(alld, dtype=float)
        for panel, group, title in ((ax, MATRIX_FREE + EXPLICIT, "a fixed noise tensor ΔT = ηE, ‖E‖op = 1"),
                                    (sx, STEP, "noise per power step, ‖ΔT(I,u,u)‖ = η")):
            for m in (m for m in ms if m in group):
                ds = list(eta[m])
                panel.loglog(ds, [eta[m][d] for d in ds], styles[m], color=colors[m],
                             label=f"{m} (slope {slopes[m]:+.2f})")
            panel.loglog(dd, c * np.sqrt(2 * np.log(k * L_RESTARTS) / dd), "k:",
                         label="c·√(2 ln(kL)/d), c fitted on pull")
            panel.axhline(CAP, color="grey", lw=0.8)
            panel.set_xlabel("d")
            panel.set_title(f"{title}\nAlg. 1, k = {k}, L = {L_RESTARTS}, R = {R_STEPS}", fontsize=9)
            panel.grid(alpha=0.3, which="both")
        anchor = pull.get(DMIN_FIT, 0.3)
        ax.loglog(dd, anchor * DMIN_FIT / dd, "k-.", lw=0.8, label=f"∝ 1/d through pull at d = {DMIN_FIT} (case 1)")
        if ad:
            sx.loglog(dd, c1 / dd, "k-.", lw=0.8, label="c₁/d, c₁ fitted on adversary (case 1)")
        ax.set_ylabel("η* at 50 % success (λ = 1)")
        ax.set_ylim(0.01, 2)
        sx.set_ylim(1e-5, 2)
        ax.legend(fontsize=7)
        sx.legend(fontsize=7)
        for m, v in eta_k.items():
            bx.loglog(list(v), list(v.values()), styles.get(m, "o-"), color=colors.get(m),
                      label=f"{m}, d = {cfg['k_dims'][m]} (slope {k_slopes[m]:+.2f})")
        kk = np.array(cfg["ks"], dtype=float)
        bx.loglog(kk, 0.5 / np.sqrt(kk), "k:", label="∝ 1/√k (case 3)")
        bx.set_xlabel("k")
        bx.set_title("η* against k at fixed d")
        bx.legend(fontsize=7)
        bx.grid(alpha=0.3, which="both")
        fig.tight_layout()
        fig.savefig(out, dpi=100)
        plt.close(fig)
        print(f"wrote {out}")
    return {"eta": eta, "eta_k": eta_k, "slopes": slopes, "k_slopes": k_slopes, "c": c}


if __name__ == "__main__":
    # [out.png] [--quick] [--models round,weak_Gaussian --dims 192,256 --trials 6] [--replot run1.log ...]
    # --models/--dims/--trials run a subset (no k sweep unless --sweep: then the models' own k sweeps);
    # --replot redraws from printed output only.
    argv = sys.argv[1:]
    opts = {}
    for flag in ("--models", "--dims", "--trials"):
        if flag in argv:
            i = argv.index(flag)
            opts[flag] = argv[i + 1]
            del argv[i : i + 2]
    logs = ()
    if "--replot" in argv:
        i = argv.index("--replot")
        logs = tuple(argv[i + 1 :])
        del argv[i:]
    args = [a for a in argv if a not in ("--quick", "--sweep")]
    main(*args[:1], quick="--quick" in argv, logs=logs,
         models=[m.replace("_", " ") for m in opts["--models"].split(",")] if "--models" in opts else None,
         dims=[int(x) for x in opts["--dims"].split(",")] if "--dims" in opts else None,
         trials=int(opts["--trials"]) if "--trials" in opts else None,
         sweep=not opts or "--sweep" in argv)
