"""Measured coverage of the released error bars (issue #14 §2), shared by tests/test_uncertainty_coverage.py
and benchmarks/coverage.py.

Each function releases one statistic ``reps`` times from the same exact
summary with known truth, through the mechanism's own noise step (numpy
noise via :class:`tests._samplers.FakeChokepoint`, no Spark), computes the
uncertainty the release would carry, and returns the fraction of (release,
entry) pairs whose interval holds the truth.
"""

from __future__ import annotations

import numpy as np

from spark_dp.second_moment.mechanisms import plan_mechanism
from spark_dp.second_moment.pca import principal_components
from spark_dp.second_moment.uncertainty import matrix_uncertainty, pca_uncertainty
from tests._samplers import FakeChokepoint


def clipped_rows(n: int, d: int, *, seed: int = 0, norm_bound: float = 1.0) -> np.ndarray:
    """n rows in d dimensions with a few dominant directions, clipped to L2 norm ≤ B (the truth's data)."""
    rng = np.random.default_rng(seed)
    scales = np.linspace(1.0, 0.2, d)
    x = rng.normal(size=(n, d)) * scales
    norms = np.maximum(np.linalg.norm(x, axis=1) / norm_bound, 1.0)
    return x / norms[:, None]


def second_moment_coverage(mechanism: str, *, d: int, n: int, epsilon: float, delta: float = 1e-6, reps: int = 200,
                           postprocess: str = "none", level: float = 0.95, seed: int = 0, **kw) -> dict[str, float]:
    """Empirical coverage of the matrix entries' intervals (upper triangle) and of PCA's bounds (k = 2)."""
    x = clipped_rows(n, d, seed=seed)
    gram = x.T @ x
    plan = plan_mechanism(mechanism, d=d, epsilon=epsilon, delta=delta, norm_bound=1.0, postprocess=postprocess, **kw)
    iu = np.triu_indices(d)
    true_vals, true_vecs = principal_components(gram, 2)
    hits = entries = eig_hits = vec_hits = sub_hits = 0
    kind = None
    for r in range(reps):
        cp = FakeChokepoint.seeded(seed * 100_003 + r)
        released = plan.noise(gram, cp)
        u = matrix_uncertainty(plan.mechanism, plan.privacy, plan.params, released, 1.0, level)
        kind = u.kind
        inside = (u.low <= gram) & (gram <= u.high)
        hits += int(inside[iu].sum())
        entries += len(iu[0])
        vals, vecs = principal_components(released, 2)
        bounds, acc = pca_uncertainty(plan.mechanism, plan.privacy, plan.params, released, vals, vecs, 1.0, level)
        ev = bounds["eigenvalues"]
        eig_hits += bool(np.all((ev.low <= true_vals) & (true_vals <= ev.high)))
        if "eigenvectors" in bounds:
            vb = bounds["eigenvectors"]
            # up to sign: the true vector with the sign closest to the released one
            signs = np.sign(np.sum(vecs * true_vecs, axis=1))[:, None]
            tv = true_vecs * np.where(signs == 0, 1.0, signs)
            vec_hits += bool(np.all((vb.low <= tv) & (tv <= vb.high)))
            # largest principal angle between the released and true top-2 subspaces
            s = np.linalg.svd(vecs @ true_vecs.T, compute_uv=False)
            sin_true = np.sqrt(max(0.0, 1.0 - float(np.min(s)) ** 2))
            sub_hits += sin_true <= acc["subspace_sin_theta_bound"] + 1e-12
    out = {"matrix": hits / entries, "matrix_kind": kind, "eigenvalues": eig_hits / reps}
    if vec_hits or sub_hits or mechanism in ("analyze_gauss", "wishart"):
        out.update(eigenvectors=vec_hits / reps, subspace=sub_hits / reps)
    return out


def sketch_coverage(mechanism: str, *, k: int, epsilon: float, delta: float = 1e-6, reps: int = 200,
                    estimator: str | None = None, level: float = 0.95, items: int = 20, buckets: int = 64,
                    threshold_sigmas: float = 0.5, seed: int = 0) -> dict[str, float]:
    """Coverage of the estimates' noise intervals and the threshold's false-positive rate, no collisions.

    Item i sits in bucket i of every repetition (sign +1), so the estimate's
    error is its noise part exactly; items 0…items/2 have frequency 0 (the
    false-positive measurement, at a threshold of ``threshold_sigmas`` noise
    scales: low enough for false positives to be seen).
    """
    from spark_dp.sketch.count_sketch import combine, table_total
    from spark_dp.sketch.mechanisms import DEFAULT_ESTIMATOR, plan_sketch, release_table
    from spark_dp.sketch.uncertainty import estimate_noise, false_positive_rate

    plan = plan_sketch(mechanism, epsilon=epsilon, delta=delta, repetitions=k)
    est_name = estimator or DEFAULT_ESTIMATOR[mechanism]
    rng = np.random.default_rng(seed)
    x = np.concatenate([np.zeros(items // 2), rng.integers(50, 5000, items - items // 2)]).astype(float)
    if est_name == "debiased_mean":  # its debiasing assumes hashed spreading of the other items: zeros only here
        x[:] = 0.0
    table = np.zeros((k, buckets))
    table[:, :items] = x
    lo, hi, _ = estimate_noise(est_name, plan.noise, plan.scale, k, level, buckets)
    threshold = threshold_sigmas * plan.scale
    fpr = false_positive_rate(est_name, plan.noise, plan.scale, k, threshold, buckets)
    hits = passes = 0
    for r in range(reps):
        noisy = release_table(plan, table, _LaplaceChokepoint.seeded(seed * 100_003 + r))
        est = combine(noisy[:, :items], est_name, buckets=buckets, total=table_total(noisy))
        hits += int(np.sum((est - hi <= x) & (x <= est - lo)))
        passes += int(np.sum(est[: items // 2] >= threshold))
    return {"estimates": hits / (reps * items), "false_positive_rate": passes / (reps * (items // 2)),
            "false_positive_rate_stated": fpr}


class _LaplaceChokepoint(FakeChokepoint):
    """FakeChokepoint with Count-Min's Laplace draws."""

    def laplace(self, values, *, scale, l1_sensitivity):
        return self.sampler.laplace(np.asarray(values, dtype=float).reshape(-1), scale, l1_sensitivity).reshape(
            np.shape(values))


def tensor_coverage(*, d: int = 4, k: int = 2, restarts: int = 1, iterations: int = 5, epsilon: float = 1.0,
                    delta: float = 1e-6, reps: int = 200, level: float = 0.95, seed: int = 0) -> dict[str, float]:
    """Coverage of Alg. 3's eigenvalue intervals on an explicit orthogonal tensor (tensor_entry neighbours).

    The truth of component i is the deflated tensor's value at the released
    vector, (T − Σⱼ<ᵢ λ̂ⱼv̂ⱼ^⊗3)(v̂ᵢ, v̂ᵢ, v̂ᵢ), computed from T and the release.
    """
    from spark_dp.tensor.private import (
        eigenvalue_uncertainty,
        private_tensor_power_method,
        tensor_entry_plan,
        tensor_entry_sigmas,
    )

    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    weights = np.linspace(400.0, 200.0, d)
    T = np.einsum("r,ir,jr,kr->ijk", weights, Q, Q, Q)
    plan = tensor_entry_plan(epsilon=epsilon, delta=delta, k=k, L=restarts, R=iterations, calibration="exact")
    hits = total = 0
    for r in range(reps):
        dec = private_tensor_power_method(T, k, L=restarts, R=iterations, nu=plan.nu,
                                          chokepoint=FakeChokepoint.seeded(seed * 100_003 + r),
                                          rng=np.random.default_rng(r))
        lam, V = dec.eigenvalues, dec.eigenvectors
        u = eigenvalue_uncertainty(lam, tensor_entry_sigmas(V, nu=plan.nu, entry_scale=1.0), restarts=restarts,
                                   level=level, source="test")
        for i in range(k):
            truth = np.einsum("ijk,i,j,k->", T, V[i], V[i], V[i]) - sum(
                lam[j] * float(V[j] @ V[i]) ** 3 for j in range(i))
            hits += bool(u.low[i] <= truth <= u.high[i])
            total += 1
    return {"eigenvalues": hits / total, "kind": u.kind}
