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

from spark_dp.second_moment._scaling import Scaling
from spark_dp.second_moment.mechanisms import plan_mechanism
from spark_dp.second_moment.pca import principal_components
from spark_dp.second_moment.uncertainty import matrix_offset, matrix_uncertainty, pca_uncertainty
from tests._samplers import FakeChokepoint


def clipped_rows(n: int, d: int, *, seed: int = 0, norm_bound: float = 1.0) -> np.ndarray:
    """n rows in d dimensions with a few dominant directions, clipped to L2 norm ≤ B (the truth's data)."""
    rng = np.random.default_rng(seed)
    scales = np.linspace(1.0, 0.2, d)
    x = rng.normal(size=(n, d)) * scales
    norms = np.maximum(np.linalg.norm(x, axis=1) / norm_bound, 1.0)
    return x / norms[:, None]


def bounded_rows(n: int, d: int, *, seed: int = 0) -> tuple[np.ndarray, Scaling]:
    """Rows of d columns in data units within public bounds, as the scaled vectors [(x - c)/h, 1] and their map."""
    rng = np.random.default_rng(seed)
    lo = rng.uniform(-50.0, 50.0, d)
    width = rng.uniform(1.0, 200.0, d)
    bounds = {f"c{i}": (float(lo[i]), float(lo[i] + width[i])) for i in range(d)}
    x = lo + width * rng.beta(2.0, 3.0, size=(n, d))
    scaled = np.hstack([(x - lo - width / 2) / (width / 2), np.ones((n, 1))])
    return scaled, Scaling.of(list(bounds), bounds, constant_at=d)


def second_moment_coverage(mechanism: str, *, d: int, n: int, epsilon: float, delta: float = 1e-6, reps: int = 200,
                           postprocess: str = "none", level: float = 0.95, seed: int = 0, bounded: bool = False,
                           data: tuple[np.ndarray, Scaling] | None = None, **kw) -> dict[str, float]:
    """Empirical coverage of the matrix entries' intervals (upper triangle) and of PCA's bounds (k = 2).

    ``bounded``: columns with public bounds in the data's units — the
    mechanism runs on the scaled vector (size d + 1, the constant included,
    B = √(d + 1)) and the intervals and bounds are those of the release
    mapped back (matrix T·M·Tᵀ with the constant; PCA of the d data columns).
    """
    transform = t_data = None
    if bounded:
        # data: a real table's scaled rows [(x - c)/h, 1] and their map (tests/_calibration.py), else synthetic
        x, scaling = data if data is not None else bounded_rows(n, d, seed=seed)
        transform = scaling.transform()
        t_data = np.delete(transform, d, axis=0)
        size, norm_bound = d + 1, float(np.sqrt(d + 1))
    else:
        x, size, norm_bound = clipped_rows(n, d, seed=seed), d, 1.0
    gram = x.T @ x
    plan = plan_mechanism(mechanism, d=size, epsilon=epsilon, delta=delta, norm_bound=norm_bound,
                          postprocess=postprocess, **kw)
    truth = gram if transform is None else transform @ gram @ transform.T
    pca_truth = gram if t_data is None else t_data @ gram @ t_data.T
    iu = np.triu_indices(size)
    true_vals, true_vecs = principal_components(pca_truth, 2)
    hits = entries = eig_hits = vec_hits = sub_hits = 0
    entry_hits = np.zeros(len(iu[0]))
    widths, eig_widths = [], []
    kind = None
    for r in range(reps):
        cp = FakeChokepoint.seeded(seed * 100_003 + r)
        released = plan.noise(gram, cp)
        u = matrix_uncertainty(plan.mechanism, plan.privacy, plan.params, released, norm_bound, level,
                               transform=transform)
        kind = u.kind
        # the intervals cover A^T A + o I (the ridge the release keeps, matrix_offset), mapped like the release
        o = matrix_offset(plan.mechanism, plan.privacy, plan.params, size, norm_bound)
        target = truth + o * (np.eye(size) if transform is None else transform @ transform.T)
        inside = (u.low <= target) & (target <= u.high)
        hits += int(inside[iu].sum())
        entry_hits += inside[iu]
        widths.append((u.high - u.low)[iu])
        entries += len(iu[0])
        vals, vecs = principal_components(released if t_data is None else t_data @ released @ t_data.T, 2)
        bounds, acc = pca_uncertainty(plan.mechanism, plan.privacy, plan.params, released, vals, vecs, norm_bound,
                                      level, transform=t_data)
        ev = bounds["eigenvalues"]
        eig_widths.append(float(np.median(ev.high - ev.low)))
        eig_hits += bool(np.all((ev.low <= true_vals) & (true_vals <= ev.high)))
        vb = bounds["eigenvectors"]
        # up to sign: the true vector with the sign closest to the released one
        signs = np.sign(np.sum(vecs * true_vecs, axis=1))[:, None]
        tv = true_vecs * np.where(signs == 0, 1.0, signs)
        vec_hits += bool(np.all((vb.low <= tv) & (tv <= vb.high)))
        # largest principal angle between the released and true top-2 subspaces
        s = np.linalg.svd(vecs @ true_vecs.T, compute_uv=False)
        sin_true = np.sqrt(max(0.0, 1.0 - float(np.min(s)) ** 2))
        sub_hits += sin_true <= acc["subspace_sin_theta_bound"] + 1e-12
    return {"matrix": hits / entries, "matrix_kind": kind, "eigenvalues": eig_hits / reps,
            "eigenvectors": vec_hits / reps, "subspace": sub_hits / reps,
            "subspace_bound_informative": acc["subspace_sin_theta_bound"] < 1.0,
            "matrix_worst_entry": float(entry_hits.min() / reps), "matrix_median_width": float(np.median(widths)),
            "eigenvalue_width": float(np.median(eig_widths))}


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
        u = eigenvalue_uncertainty(dec.eigenvalues, tensor_entry_sigmas(dec.eigenvectors, nu=plan.nu, entry_scale=1.0),
                                   restarts=restarts, level=level, source="test")
        hits += _deflated_hits(T, dec, u, k)
        total += k
    return {"eigenvalues": hits / total, "kind": u.kind}


def _deflated_hits(T: np.ndarray, dec, u, k: int) -> int:
    """How many of the k eigenvalue intervals hold (T − Σⱼ<ᵢ λ̂ⱼv̂ⱼ^⊗3)(v̂ᵢ, v̂ᵢ, v̂ᵢ), the deflated truth."""
    lam, V = dec.eigenvalues, dec.eigenvectors
    hits = 0
    for i in range(k):
        truth = np.einsum("ijk,i,j,k->", T, V[i], V[i], V[i]) - sum(lam[j] * float(V[j] @ V[i]) ** 3 for j in range(i))
        hits += bool(u.low[i] <= truth <= u.high[i])
    return hits


def adassp_coverage(*, p: int = 3, n: int = 2000, epsilon: float = 1.0, delta: float = 1e-6, reps: int = 200,
                    level: float = 0.95, seed: int = 0, bounded: bool = True) -> dict[str, float]:
    """Coverage of AdaSSP's intervals: coefficients and intercept (noise only: the truth is the non-private fit
    on the same rows), X^T X and X^T y in the data's units (the truth: the exact sums of the rows).

    ``bounded``: p bounded features and a bounded label with the intercept column (the release mapped
    back); otherwise raw rows clipped to norm 1, no intercept (the noise's units).
    """
    from spark_dp.second_moment.adassp import adassp, adassp_plan
    from spark_dp.second_moment.uncertainty import adassp_uncertainty

    rng = np.random.default_rng(seed)
    if bounded:
        x, scaling = bounded_rows(n, p + 1, seed=seed)  # p features then the label, constant last
        beta = rng.normal(size=p)
        x[:, p] = np.clip(x[:, :p] @ beta * 0.3 + rng.normal(0, 0.2, n), -1, 1)  # label in [-1, 1]
        order = list(range(p)) + [p + 1, p]  # the constant before the label, as linear_regression builds it
        vec = x[:, order]
        cols = list(scaling.columns)
        scaling = Scaling.of(cols[:p] + [cols[p]], dict(zip(cols, scaling.bounds, strict=True)), constant_at=p)
        norm_bound = float(np.sqrt(p + 2))
    else:
        vec = clipped_rows(n, p + 1, seed=seed)
        scaling, norm_bound = None, 1.0
    gram = vec.T @ vec
    q = gram.shape[0] - 1
    t = np.eye(q + 1) if scaling is None else scaling.transform()
    exact_beta = np.linalg.solve(gram[:q, :q], gram[:q, q])
    truth_coef = exact_beta if scaling is None else scaling.coefficients(exact_beta, q)
    joint = gram.copy()
    joint[q, q] = 0.0
    truth_data = t @ joint @ t.T
    plan = adassp_plan(epsilon=epsilon, delta=delta, norm_bound=norm_bound)
    hits = {"coefficients": 0, "intercept": 0, "xtx": 0, "xty": 0}
    counts = dict.fromkeys(hits, 0)
    refused: dict[str, int] = {}
    iu = np.triu_indices(q)
    for r in range(reps):
        res = adassp(gram, chokepoint=FakeChokepoint.seeded(seed * 100_003 + r), plan=plan)
        u = adassp_uncertainty(res["xtx"], res["xty"], res["coefficients"], plan.sigmas, level,
                               ridge=float(res["lambda"][0]), scaling=scaling, rng=np.random.default_rng(r))
        k = None if scaling is None else scaling.constant_at
        coef = truth_coef if k is None else np.delete(truth_coef, k)
        truths = {"coefficients": coef, "xtx": truth_data[:q, :q][iu], "xty": truth_data[:q, q]}
        if k is not None:
            truths["intercept"] = truth_coef[k:k + 1]
        for name, truth in truths.items():
            if u[name].kind == "none":  # refused (the adaptive ridge's bias cannot be bounded): no claim to count
                refused[name] = refused.get(name, 0) + 1
                continue
            low, high = u[name].low, u[name].high
            if name == "xtx":
                low, high = low[iu], high[iu]
            hits[name] += int(np.sum((low <= truth) & (truth <= high)))
            counts[name] += truth.size
    out = {name: hits[name] / counts[name] for name in hits if counts[name]}
    out.update({f"{name}_refused": k / reps for name, k in refused.items()})
    return out


def input_perturbation_coverage(*, d: int = 4, k: int = 2, epsilon: float = 1.0, delta: float = 1e-6,
                                reps: int = 100, level: float = 0.95, seed: int = 0,
                                sigma_factor: float = 1.0) -> dict[str, float]:
    """Coverage of input perturbation's eigenvalue bound (truth: the deflated tensor at the released vector).

    ``sigma_factor`` scales the σ the bound is computed with (a deliberately wrong σ for the tests).
    """
    import dataclasses

    from spark_dp.tensor.input_perturbation import (
        input_perturbation,
        input_perturbation_plan,
        input_perturbation_uncertainty,
    )

    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    T = np.einsum("r,ir,jr,kr->ijk", np.linspace(400.0, 200.0, d), Q, Q, Q)
    plan = input_perturbation_plan(epsilon=epsilon, delta=delta)
    stated = dataclasses.replace(plan, sigma=plan.sigma * sigma_factor)
    hits = total = 0
    for r in range(reps):
        dec = input_perturbation(T, k, L=3, R=10, plan=plan, chokepoint=FakeChokepoint.seeded(seed * 100_003 + r),
                                 rng=np.random.default_rng(r))
        u = input_perturbation_uncertainty(dec, None, stated, level)["eigenvalues"]
        hits += _deflated_hits(T, dec, u, k)
        total += k
    return {"eigenvalues": hits / total, "kind": u.kind}


def whitened_coverage(*, d: int = 4, k: int = 2, n: int = 4000, epsilon: float = 1.0, delta: float = 1e-6,
                      reps: int = 100, level: float = 0.95, seed: int = 0, sigma_factor: float = 1.0,
                      restarts: int = 1) -> dict[str, float]:
    """Coverage of the whitened release's eigenvalue intervals (reuse mode: every pass reads all n rows).

    The truth of component i: Σ over the rows of (yᵀμ̂ᵢ)³ − Σⱼ<ᵢ λ̂ⱼ(μ̂ⱼᵀμ̂ᵢ)³, y = Wᵀx with the W whitened
    from the released M2 and μ̂ the released whitened vectors (captured from the run).
    """
    import spark_dp.tensor.whiten as wh
    from spark_dp.tensor.private import private_online_power_method

    rng = np.random.default_rng(seed)
    A = np.linalg.qr(rng.normal(size=(d, d)))[0][:, :k] * 0.6
    X = A[:, rng.integers(0, k, n)].T + rng.normal(0, 0.05, (n, d))
    X /= np.maximum(np.linalg.norm(X, axis=1) / 1.0, 1.0)[:, None]

    def moments(U, _pass):
        P = X @ U
        return X.T @ (P**2), (P**3).sum(axis=0), n

    plan = wh.whitened_rows_plan(epsilon=epsilon, delta=delta, k=k, L=restarts, R=5, norm_bound=1.0, mode="reuse")
    captured = {}
    real_whitening = wh.whitening

    def whitening(M2, kk):
        captured["W"] = real_whitening(M2, kk)[0]
        return real_whitening(M2, kk)

    def run_passes(moments_y, **kw):
        captured["dec"] = private_online_power_method(moments_y, **kw)
        return captured["dec"]

    hits = total = 0
    wh.whitening, wh.private_online_power_method = whitening, run_passes
    try:
        for r in range(reps):
            w = wh.private_whitened_power_method(moments, X.T @ X, k=k, L=restarts, R=5, plan=plan,
                                                 chokepoint=FakeChokepoint.seeded(seed * 100_003 + r),
                                                 rng=np.random.default_rng(r), norm_bound=1.0, mode="reuse")
            w = wh.WhitenedDecomposition(w.eigenvalues, w.eigenvectors, w.components, w.weights,
                                         w.pass_sigma * sigma_factor)
            u = wh.whitened_uncertainty(w, type("Req", (), {"L": restarts})(), level)["eigenvalues"]
            Y = X @ captured["W"]
            lam, M = captured["dec"].eigenvalues, captured["dec"].eigenvectors
            for i in range(k):
                truth = float(((Y @ M[i]) ** 3).sum()) - sum(lam[j] * float(M[j] @ M[i]) ** 3 for j in range(i))
                hits += bool(u.low[i] <= truth <= u.high[i])
                total += 1
    finally:
        wh.whitening, wh.private_online_power_method = real_whitening, private_online_power_method
    return {"eigenvalues": hits / total, "kind": u.kind}


def regression_coverage(mechanism: str, *, p: int = 2, n: int = 20_000, epsilon: float = 1.0, delta: float = 1e-6,
                        reps: int = 200, level: float = 0.95, seed: int = 0, postprocess: str = "none",
                        fit_intercept: bool = True, bounded: bool = True, draws: int = 1000,
                        covers: str = "noise+sampling", **kw) -> dict[str, float]:
    """Coverage of the regression intervals of any mechanism (:func:`regression_intervals`, the release's code).

    With a constant column (an intercept, or ``bounded``) and ``covers="noise+sampling"`` the intervals claim
    noise and sampling: the design X is fixed, every release draws new errors y = b + Xβ + e (b = 0 through the
    origin) and the truth is (β, b). With ``covers="noise"`` (the release's default), or without a constant
    column (raw rows, no intercept: noise only), X and y are fixed and the truth is the non-private fit on
    them. The release's fit and intervals are computed as ``linear_regression`` computes them; the mechanism's
    own noise step (numpy, FakeChokepoint) makes each release.
    """
    from spark_dp.second_moment.intervals import regression_intervals
    from spark_dp.second_moment.regression import regression_coefficients

    rng = np.random.default_rng(seed)
    X = rng.uniform(0.0, 10.0, size=(n, p)) * np.linspace(1.0, 3.0, p)
    beta = rng.normal(0.0, 1.0, p)
    intercept = 5.0 if fit_intercept else 0.0
    sd = 2.0
    names = [f"x{i}" for i in range(p)] + ["y"]
    if bounded:
        mean_y = intercept + X @ beta
        bounds = {c: (0.0, 10.0 * s) for c, s in zip(names, np.linspace(1.0, 3.0, p), strict=False)}
        bounds["y"] = (float(mean_y.min() - 8 * sd), float(mean_y.max() + 8 * sd))  # public: no label is clamped
        scaling = Scaling.of(names, bounds, constant_at=p)
        size = p + 2
        norm_bound = float(np.sqrt(size))
    else:
        if fit_intercept:
            raise ValueError("raw rows are measured without an intercept (the noise-only case)")
        scaling, size = Scaling.of(names, None), p + 1
    t = scaling.transform()
    y_fixed = intercept + X @ beta + rng.normal(0.0, sd, n)
    if not bounded:
        norm_bound = float(np.linalg.norm(np.column_stack([X, y_fixed]), axis=1).max())  # no row is clipped
    plan = plan_mechanism(mechanism, d=size, epsilon=epsilon, delta=delta, norm_bound=norm_bound,
                          postprocess=postprocess, **kw)
    truth = np.append(beta, intercept) if fit_intercept else beta
    fixed = not bounded or covers == "noise"  # the labels are the table's: the truth is their non-private fit
    if fixed:
        truth = np.linalg.lstsq(np.column_stack([X, np.ones(n)]) if fit_intercept else X, y_fixed, rcond=None)[0]
    hits = {"coefficients": 0, "intercept": 0}
    widths = []
    k = scaling.constant_at
    for r in range(reps):
        y = y_fixed if fixed else intercept + X @ beta + rng.normal(0.0, sd, n)
        rows = np.column_stack([X, y]) if k is None else np.column_stack([X, np.ones(n), y])
        vec = np.linalg.solve(t, rows.T).T  # the scaled vectors a = T^-1 x
        released = plan.noise(vec.T @ vec, FakeChokepoint.seeded(seed * 100_003 + r))
        if fit_intercept or k is None:
            fit = regression_coefficients(released, ridge=0.0)[0]
        else:
            data = np.delete(np.delete(t @ released @ t.T, k, axis=0), k, axis=1)
            fit = regression_coefficients(data, ridge=0.0)[0]
        u = regression_intervals(plan.mechanism, plan.privacy, plan.params, released, fit, scaling=scaling,
                                 label_at=size - 1, norm_bound=norm_bound, fit_intercept=fit_intercept,
                                 level=level, draws=draws, rng=np.random.default_rng(r), covers=covers)
        hits["coefficients"] += int(np.sum((u["coefficients"].low <= truth[:p]) & (truth[:p] <= u["coefficients"].high)))
        if "intercept" in u:
            hits["intercept"] += int(u["intercept"].low[0] <= truth[p] <= u["intercept"].high[0])
        widths.append(np.median(u["coefficients"].high - u["coefficients"].low))
    out = {"coefficients": hits["coefficients"] / (reps * p), "covers": u["coefficients"].covers,
           "median_width": float(np.median(widths))}
    if fit_intercept:
        out["intercept"] = hits["intercept"] / reps
    return out
