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
