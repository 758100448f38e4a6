"""Shared generators for the tensor-family tests (exact orthogonal tensors, rows)."""

from __future__ import annotations

import numpy as np


def orthogonal_tensor(d: int, k: int, *, seed: int = 0, lambdas=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """T = Σᵢ λᵢ vᵢ^⊗3 with orthonormal random vᵢ; returns (T, λ (k,), V (k, d))."""
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((d, k)))
    lam = np.linspace(2.0, 1.0, k) if lambdas is None else np.asarray(lambdas, dtype=float)
    T = np.einsum("r,ir,jr,kr->ijk", lam, Q, Q, Q)
    return T, lam, Q.T


def match(V_hat: np.ndarray, V: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each true component, the index of the closest estimate and ‖vᵢ − v̂‖₂."""
    idx = np.argmax(np.abs(V @ V_hat.T), axis=1)
    err = np.linalg.norm(V - V_hat[idx], axis=1)
    return idx, err


def audit_bounded_pass(frames: dict, cols: list[str], bounds: dict, privacy: dict, sens: float, L: int,
                       delta: float) -> None:
    """The audit of one bounded pass under replace (m = 2): the exact sums of a pass over the neighbours ``D`` and
    ``D'`` (rows Spark builds with ``bounds``, unit column ``u``) differ by exactly ``sens`` (attained, not
    exceeded), and the released σ keeps a black-box ε of the pass below its claim; halving σ is caught."""
    import math
    import types

    import pytest

    from spark_dp.aggregates._vectors import Affine
    from spark_dp.aggregates.moments import prepare_rows, third_moment_sums
    from spark_dp.privacy import GaussianEvent, compose_epsilon
    from spark_dp.tensor.private import noisy_batch
    from tests._audit import empirical_epsilon
    from tests._samplers import FakeChokepoint

    d = len(cols)
    U = np.tile((np.ones(d) / math.sqrt(d))[:, None], (1, L))
    sums = {}
    for name, df in frames.items():
        frame, _ = prepare_rows(df, cols, privacy_unit="u", max_rows_per_unit=2,
                                affine=Affine(tuple(tuple(bounds[c]) for c in cols)))
        sums[name] = third_moment_sums(frame, U, norm_bound=privacy["norm_bound"])[0]
        frame.unpersist()
    diff = sums["D"] - sums["D'"]
    assert np.linalg.norm(diff) == pytest.approx(sens)  # attained, not exceeded
    plan = types.SimpleNamespace(sigma=privacy["noise_sigma"], sensitivity=privacy["sensitivity"])
    claim = compose_epsilon([GaussianEvent(noise_multiplier=privacy["noise_multiplier"])], delta)  # one pass's ε
    unit = diff / np.linalg.norm(diff)

    def projections(plan, n=300_000):
        x0 = np.einsum("nij,ij->n", noisy_batch(np.zeros((n, d, L)), plan, FakeChokepoint.seeded(3).gaussian), unit)
        x1 = np.einsum("nij,ij->n", noisy_batch(np.broadcast_to(diff, (n, d, L)), plan,
                                                 FakeChokepoint.seeded(4).gaussian), unit)
        return x0, x1

    assert empirical_epsilon(*projections(plan), delta) < claim
    halved = types.SimpleNamespace(sigma=plan.sigma / 2, sensitivity=plan.sensitivity)
    assert empirical_epsilon(*projections(halved), delta) > claim  # the audit catches under-noise
