"""Robust tensor power method on an explicit symmetric tensor.

Implements Algorithm 1 of Wang & Anandkumar, "Online and Differentially-Private
Tensor Decomposition", NIPS 2016 (arXiv 1606.06237), which is the robust
tensor power method of Anandkumar, Ge, Hsu, Kakade & Telgarsky (JMLR 2014):
L random starts, R power steps u ← T(I,u,u)/‖T(I,u,u)‖₂ each, keep the start
maximising T(u,u,u), deflate, repeat for k components.

Not private: it is the exact algorithm the private variants build on
(:mod:`spark_dp.tensor.private`, :mod:`spark_dp.tensor.input_perturbation`).

Shared pieces used by every algorithm of the family live here too: the
contractions T(I,U,U) and T(U,U,U) for all L candidates at once (U is d×L),
and deflation applied to those contractions (Alg. 2 step 7), which equals
contracting the deflated tensor T − Σⱼ λ̂ⱼ v̂ⱼ^⊗3 of Alg. 1 step 6 without
forming it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from spark_dp import _validation as V
from spark_dp.errors import ConfigError, SchemaError
from spark_dp.tensor._registry import OnInput, TensorMechanismSpec


@dataclass(frozen=True)
class TensorDecomposition:
    """Eigenpairs found, in the order found.

    Attributes:
        eigenvalues: shape (k,), λ̂ᵢ.
        eigenvectors: shape (k, d), row i is the unit vector v̂ᵢ.
    """

    eigenvalues: np.ndarray
    eigenvectors: np.ndarray


# -- shared helpers -------------------------------------------------------------
def random_unit_columns(rng: np.random.Generator, d: int, L: int) -> np.ndarray:
    """L columns drawn uniformly from the unit sphere S^{d−1} (shape d×L).

    The starting vectors are NOT privacy noise: the privacy arguments of the
    private variants hold for every fixed start, so a plain numpy generator
    (seedable, reproducible) is correct here and nothing is charged for it.
    """
    U = rng.standard_normal((d, L))
    norms = np.linalg.norm(U, axis=0)
    norms[norms == 0] = 1.0
    return U / norms


def contract(T: np.ndarray, U: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """T(I,u,u) and T(u,u,u) for every column u of U, in one BLAS call.

    Args:
        T: symmetric tensor of shape (d, d, d).
        U: shape (d, L).

    Returns:
        ``(S, m3)``: S of shape (d, L) with S[:, τ] = T(I, u_τ, u_τ); m3 of
        shape (L,) with m3[τ] = T(u_τ, u_τ, u_τ) = u_τᵀ S[:, τ].
    """
    d, L = U.shape
    # T(I, I, u) for all τ: (d², d) @ (d, L), then contract the middle mode.
    TU = (T.reshape(d * d, d) @ U).reshape(d, d, L)
    S = np.einsum("ijl,jl->il", TU, U)
    return S, np.einsum("il,il->l", S, U)


def deflate(
    S: np.ndarray, m3: np.ndarray | None, U: np.ndarray, lambdas: np.ndarray, V_: np.ndarray
) -> tuple[np.ndarray, np.ndarray | None]:
    """Alg. 2 step 7: contractions of T − Σⱼ λ̂ⱼ v̂ⱼ^⊗3 from those of T.

    With ξⱼ,τ = v̂ⱼᵀu_τ (the paper's Alg. 2 writes v̂ⱼᵀũ_τ; the deflated
    tensor's contraction needs the vector that was contracted, u_τ):
    S[:, τ] −= Σⱼ λ̂ⱼ ξⱼ,τ² v̂ⱼ and m3[τ] −= Σⱼ λ̂ⱼ ξⱼ,τ³.

    Args:
        S: (d, L) accumulators T(I,u,u); m3: (L,) accumulators T(u,u,u) or None.
        U: (d, L) the contracted vectors.
        lambdas: (i,) eigenvalues found so far; V_: (i, d) their vectors.
    """
    if lambdas.size == 0:
        return S, m3
    xi = V_ @ U  # (i, L)
    S = S - V_.T @ (lambdas[:, None] * xi**2)
    if m3 is not None:
        m3 = m3 - lambdas @ xi**3
    return S, m3


def normalize_columns(S: np.ndarray, U_prev: np.ndarray) -> np.ndarray:
    """u = s/‖s‖₂ per column (Alg. 1 step 4, Alg. 2 step 8, Alg. 3 step 8).

    A zero column (a tensor deflated to zero) keeps its previous vector
    rather than dividing by zero.
    """
    norms = np.linalg.norm(S, axis=0)
    safe = np.where(norms > 0, norms, 1.0)
    return np.where(norms > 0, S / safe, U_prev)


# -- input checks (bad requests, raised before anything is charged) -------------
def check_counts(
    k: int, L: int, R: int, d: int, *, owner: str, names: tuple[str, str] = ("L", "R")
) -> tuple[int, int, int]:
    """Validates k ∈ [1, d], L ≥ 1, R ≥ 1 (ConfigError naming the parameter as ``names``)."""
    k = V.check_int("k", k, owner=owner, low=1)
    if k > d:
        raise ConfigError(
            f"The 'k' parameter of {owner} must be an int in the range [1, {d}] (at most the dimension d = {d}). "
            f"Got {k} instead."
        )
    return k, V.check_int(names[0], L, owner=owner, low=1), V.check_int(names[1], R, owner=owner, low=1)


def check_tensor(T, *, owner: str, rtol: float = 1e-9) -> np.ndarray:
    """Returns T as a symmetric float64 (d, d, d) array, or raises SchemaError.

    Symmetry is checked against all permutations of the three modes (up to
    ``rtol`` relative to max|T|), then T is replaced by its exact
    symmetrisation (1/6)Σ_σ T^σ so rounding cannot break the algorithms'
    symmetric contractions. Symmetry and finiteness are structural: the
    neighbour relation (Def. 4.2) only relates finite symmetric tensors.
    """
    T = np.asarray(T)
    if T.dtype.kind not in "iuf":
        raise SchemaError(f"The tensor of {owner} must hold real numbers. Got dtype {T.dtype} instead.")
    T = T.astype(np.float64, copy=False)
    if T.ndim != 3:
        raise SchemaError(f"The tensor of {owner} must be 3-way (shape (d, d, d)). Got shape {T.shape} instead.")
    if not (T.shape[0] == T.shape[1] == T.shape[2]) or T.shape[0] < 1:
        raise SchemaError(f"The tensor of {owner} must have shape (d, d, d). Got shape {T.shape} instead.")
    if not np.isfinite(T).all():
        raise SchemaError(f"The tensor of {owner} must be finite (it holds NaN or infinity).")
    scale = float(np.max(np.abs(T))) if T.size else 0.0
    perms = list(itertools.permutations(range(3)))
    d = T.shape[0]
    slab = max(1, (1 << 22) // max(d * d, 1))  # compare ~32 MB slabs, not whole d³ differences
    for p in perms[1:]:
        Tp = T.transpose(p)
        for i in range(0, d, slab):
            if np.max(np.abs(T[i : i + slab] - Tp[i : i + slab])) > rtol * max(scale, 1e-300):
                raise SchemaError(
                    f"The tensor of {owner} must be symmetric (T[i,j,k] = T[j,i,k] = ... for all i, j, k).")
    out = T.copy()  # (1/6)Σ_σ T^σ, summed in place in the order of ``perms`` (perms[0] is the identity)
    for p in perms[1:]:
        out += T.transpose(p)
    out /= 6.0
    return out


# -- Algorithm 1 ----------------------------------------------------------------
def robust_tensor_power_method(
    T: np.ndarray, k: int, *, L: int, R: int, rng: np.random.Generator
) -> TensorDecomposition:
    """Implements Algorithm 1 of Wang & Anandkumar (NIPS 2016): robust tensor power method.

    Exact on an orthogonally decomposable T = Σᵢ λᵢ vᵢ^⊗3 (λᵢ > 0, orthonormal
    vᵢ): with enough restarts every component is recovered up to floating
    point. Under noise, Thm 2.2 of the paper gives the tolerance.

    Args:
        T: symmetric tensor of shape (d, d, d) (checked, then symmetrised).
        k: number of components, 1 ≤ k ≤ d.
        L: restarts per component (Alg. 1 step 5), ≥ 1.
        R: power steps per restart (Alg. 1 step 4), ≥ 1.
        rng: generator for the random starts (not privacy noise).

    Returns:
        The k eigenpairs in the order found.
    """
    owner = "power_method"
    T = check_tensor(T, owner=owner)
    k, L, R = check_counts(k, L, R, T.shape[0], owner=owner)
    return power_method_checked(T, k, L=L, R=R, rng=rng)


def power_method_checked(T: np.ndarray, k: int, *, L: int, R: int, rng: np.random.Generator) -> TensorDecomposition:
    """Alg. 1's loop on an already checked, exactly symmetric float64 T (see :func:`robust_tensor_power_method`).

    For callers that built T symmetric themselves (input perturbation's noisy
    tensor), so a d³ array is not checked and copied a second time.
    """
    d = T.shape[0]
    lambdas = np.zeros(0)
    V_ = np.zeros((0, d))
    for _i in range(k):  # Alg. 1 step 2
        U = random_unit_columns(rng, d, L)  # step 3, all L restarts at once (step 5)
        for _t in range(R):  # step 4: u_t = T̃(I,u,u)/‖·‖, T̃ the deflated tensor
            S, _ = contract(T, U)
            S, _ = deflate(S, None, U, lambdas, V_)
            U = normalize_columns(S, U)
        _, m3 = contract(T, U)  # step 5: T̃(u_R, u_R, u_R) per restart
        _, m3 = deflate(np.zeros_like(U), m3, U, lambdas, V_)
        best = int(np.argmax(m3))
        # step 6: deflation, kept implicit as (λ̂ᵢ, v̂ᵢ) and applied by deflate()
        lambdas = np.append(lambdas, m3[best])
        V_ = np.vstack([V_, U[:, best]])
    return TensorDecomposition(eigenvalues=lambdas, eigenvectors=V_)


# -- the registry entry (spark_dp.tensor.mechanisms.REGISTRY): Alg. 1, explicit (public) tensors, not private --
POWER_METHOD = TensorMechanismSpec("power_method", explicit=OnInput(
    plan=None, run=lambda T, req, plan, cp, rng: robust_tensor_power_method(T, req.k, L=req.L, R=req.R, rng=rng),
))
