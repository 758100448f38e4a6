"""The private power method over rows: error against ε, fresh vs reuse, exact vs paper.

    .venv/bin/python -m benchmarks.tensor_private_rows     # ~1 min; writes docs/tensor_private_rows.png

N = 200,000 rows x = s_h v_h + g (d = 10, k = 3 mixture as in
tensor_online_rate, noise 0.1), clipped to B = 1; k = 1, L = 8, R = 5,
δ = 1e-6. The passes read numpy chunks (the same algorithm code as over
Spark: `private_online_power_method` with a charged chokepoint and the numpy
sampler). fresh: 6 passes of N/6 rows, one Gaussian event (parallel);
reuse: 6 passes of N rows, 6 events (sequential). Target: Alg. 1 on the
exact moment of the clipped rows. Median ‖v̂₁ − v*‖ of 5 runs.
"""

from __future__ import annotations

import sys
import tempfile

import numpy as np

from spark_dp.privacy import Budget, Chokepoint, NumpySampler, open_ledger
from spark_dp.tensor import private_online_power_method, robust_tensor_power_method, rows_plan

D, N, K_, L, R, B, DELTA = 10, 200_000, 1, 8, 5, 1.0, 1e-6
EPSILONS = [0.03, 0.1, 0.3, 1.0, 3.0, 10.0]


def main(out: str = "docs/tensor_private_rows.png", trials: int = 5) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    gen = np.random.default_rng(0)  # data and starts, not privacy noise
    Q, _ = np.linalg.qr(gen.standard_normal((D, 3)))
    V = Q.T
    h = gen.choice(3, size=N, p=[0.5, 0.3, 0.2])
    X = np.array([1.0, 0.9, 0.8])[h][:, None] * V[h] + gen.normal(0.0, 0.1, size=(N, D))
    X *= np.minimum(1.0, B / np.linalg.norm(X, axis=1, keepdims=True))
    T = np.einsum("ni,nj,nk->ijk", X, X, X) / N
    v_star = robust_tensor_power_method(T, 1, L=20, R=50, rng=gen).eigenvectors[0]
    passes = K_ * (R + 1)
    chunk = gen.integers(0, passes, size=N)  # fresh: each row in one pass
    tmp = tempfile.mkdtemp()
    results = {}
    count = 0
    print("| ε | fresh exact | reuse exact | fresh paper | reuse paper |")
    print("|---|---|---|---|---|")
    for eps in EPSILONS:
        row = []
        for cal in ("exact", "paper"):
            for mode in ("fresh", "reuse"):
                errs = []
                for _ in range(trials):
                    try:
                        plan = rows_plan(epsilon=eps, delta=DELTA, k=K_, L=L, R=R, norm_bound=B, mode=mode,
                                         calibration=cal)
                    except Exception:
                        errs.append(np.nan)
                        continue
                    count += 1
                    cp = Chokepoint(open_ledger(f"sqlite:///{tmp}/l{count}.db"), dataset_id="b", release_id="r",
                                    request_sha256="x", sampler=NumpySampler(), limit=Budget(1e9, 0.5))
                    cp.charge(plan.events, Budget(eps, DELTA))

                    def moments(U, p, mode=mode):
                        Xp = X[chunk == p] if mode == "fresh" else X
                        P = Xp @ U
                        return Xp.T @ P**2, (P**3).sum(0), float(len(Xp))

                    dec = private_online_power_method(moments, d=D, k=K_, L=L, R=R, plan=plan, chokepoint=cp, rng=gen)
                    v = dec.eigenvectors[0]
                    errs.append(min(np.linalg.norm(v - v_star), np.linalg.norm(v + v_star)))
                results.setdefault((mode, cal), []).append(float(np.nanmedian(errs)) if not np.all(np.isnan(errs)) else np.nan)
                row.append(results[(mode, cal)][-1])
        print(f"| {eps:g} | " + " | ".join(f"{e:.3f}" for e in row) + " |", flush=True)
    fig, ax = plt.subplots(figsize=(6, 4))
    for (mode, cal), errs in results.items():
        ax.semilogx(EPSILONS, errs, "o-" if cal == "exact" else "s--", label=f"{mode}, {cal}")
    ax.set_xlabel("ε")
    ax.set_ylabel("‖v̂₁ − v*‖ (median of 5)")
    ax.set_title(f"private rows: N = {N:,}, d = {D}, L = {L}, R = {R}, B = {B:g}")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    main(*sys.argv[1:2])
