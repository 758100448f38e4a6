"""Online robust tensor power method over rows (the tensor is never formed).

Implements Algorithm 2 of Wang & Anandkumar, "Online and Differentially-Private
Tensor Decomposition", NIPS 2016 (arXiv 1606.06237). The tensor is the
empirical third moment (1/n)Σ x^⊗3 of the rows; a power step for all L
candidates at once (U is d×L) needs only the pass Σ(xᵀu)²x (a d×L matrix,
Xᵀ((XU)²)) and Σ(xᵀu)³ (L values), computed on the executors by
:func:`spark_dp.aggregates.moments.third_moment_sums`. Deflation is applied to
these accumulators on the driver (Alg. 2 step 7). Driver memory is O(d(k+L)).

Modes: ``fresh`` — each pass reads its own disjoint chunk of rows (the paper's
stream: "read the next n data points"); ``reuse`` — each pass reads all rows.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from spark_dp.tensor._registry import OnInput, TensorMechanismSpec
from spark_dp.tensor.power_method import TensorDecomposition, deflate, normalize_columns, random_unit_columns

log = logging.getLogger("spark_dp")

MomentFn = Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray, float]]


def passes_per_component(R: int, eigen_pass: bool) -> int:
    """Data passes per component: R (Alg. 2), or R + 1 with a separate eigenvalue pass (Alg. 3)."""
    return R + (1 if eigen_pass else 0)


def online_tensor_power_method(
    moments: MomentFn,
    *,
    d: int,
    k: int,
    L: int,
    R: int,
    rng: np.random.Generator,
    release: Callable[[np.ndarray], np.ndarray] | None = None,
    eigen_pass: bool = False,
    rows_per_round: int | None = None,
) -> TensorDecomposition:
    """Implements Algorithm 2 of Wang & Anandkumar (NIPS 2016): online robust tensor power method.

    Not private by itself (``release=None``): the accumulators are divided by
    the exact row count of their pass (or by ``rows_per_round`` if given), as
    in Alg. 2 step 6. With ``release`` (the private method,
    :func:`spark_dp.tensor.private.private_online_power_method`), every
    accumulator that influences the output passes through ``release`` first,
    and counts are never used.

    Args:
        moments: ``moments(U, pass_index) -> (S, m3, count)`` with
            S = Σ(xᵀu_τ)²x (d×L), m3 = Σ(xᵀu_τ)³ (L,) over the rows of pass
            ``pass_index`` (0-based over all components; see ``passes_per_component``).
        d, k, L, R: dimension, components, restarts, steps.
        rng: random starts (not privacy noise).
        release: noise hook applied to each released accumulator, or None.
        eigen_pass: if True, λ̃ is computed by a separate pass at u_R
            (Alg. 3 step 10); if False, from the last power pass at u_{R−1}
            (Alg. 2 steps 6 and 10).
        rows_per_round: public n dividing the sums, or None (see above).

    Returns:
        The k eigenpairs in the order found.
    """
    per = passes_per_component(R, eigen_pass)
    lambdas = np.zeros(0)
    V_ = np.zeros((0, d))

    def scaled(values: np.ndarray, count: float) -> np.ndarray:
        if release is not None:
            values = release(values)
            return values / rows_per_round if rows_per_round else values
        n = rows_per_round or count
        return values / n if n > 0 else np.zeros_like(values)

    for i in range(k):  # Alg. 2 step 2
        U = random_unit_columns(rng, d, L)  # step 3
        lam = np.zeros(L)
        for t in range(R):  # step 4
            log.info("tensor power method: component %d/%d, round %d/%d", i + 1, k, t + 1, per)
            # steps 5-6: accumulators over this pass's rows
            S, m3, count = moments(U, i * per + t)
            S = scaled(S, count)
            if not eigen_pass and t == R - 1:
                lam = scaled(m3, count)
            # step 7: deflation of the accumulators by the components found so far
            S, _ = deflate(S, None, U, lambdas, V_)
            if not eigen_pass and t == R - 1:
                _, lam = deflate(np.zeros_like(U), lam, U, lambdas, V_)
            U = normalize_columns(S, U)  # step 8
        if eigen_pass:  # Alg. 3 step 10: λ̃ at u_R from its own pass
            log.info("tensor power method: component %d/%d, round %d/%d", i + 1, k, per, per)
            _, m3, count = moments(U, i * per + R)
            lam = scaled(m3, count)
            _, lam = deflate(np.zeros_like(U), lam, U, lambdas, V_)
        best = int(np.argmax(lam))  # step 10
        lambdas = np.append(lambdas, lam[best])
        V_ = np.vstack([V_, U[:, best]])
    return TensorDecomposition(eigenvalues=lambdas, eigenvectors=V_)


# -- the registry entry (spark_dp.tensor.mechanisms.REGISTRY): Alg. 2 on rows, not private ------------------
def _run_whitened(moments, m2_sum, n, req, plan, cp, rng):
    from spark_dp.tensor.whiten import whitened_online_power_method  # (whiten imports this module)

    return whitened_online_power_method(moments, m2_sum / max(n, 1.0), k=req.k, L=req.L, R=req.R, rng=rng)


ONLINE_POWER_METHOD = TensorMechanismSpec("online_power_method", rows=OnInput(
    plan=None,
    run=lambda moments, d, req, plan, cp, rng: online_tensor_power_method(
        moments, d=d, k=req.k, L=req.L, R=req.R, rng=rng, rows_per_round=req.rows_per_round),
    run_whitened=_run_whitened,
))
