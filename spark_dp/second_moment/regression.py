"""OLS and ridge coefficients from a private second-moment matrix of [X y].

Sheffet (arXiv 1507.00056), Sections 3–6: every mechanism releases an
approximation M of AᵀA for A = [X y] (label last); the coefficients are the
solution of the normal equations (M_XX + λI)β = M_Xy. Post-processing of a
private matrix: no further privacy cost.

Indefinite or singular results (possible for Analyze Gauss without the
paper's shift, and for the ``shift``/``psd`` post-processing of the others):
the paper handles them by post-processing the matrix toward the PSD cone
(Analyze Gauss + c·I with c = E‖N‖, "psd" projection). Here the solver tries
a Cholesky factorisation of M_XX + λI; if that fails it projects M_XX + λI
onto the PSD cone (negative eigenvalues → 0, the paper's "psd" variant) and
returns the minimum-norm least-squares solution (pseudo-inverse). Which path
was taken is reported (``solver``), never an error: it depends on the noisy
release, not on a bad request.
"""

from __future__ import annotations

import numpy as np
from scipy import linalg


def solve_normal_equations(xtx: np.ndarray, xty: np.ndarray, *, ridge: float = 0.0) -> tuple[np.ndarray, dict]:
    """β solving (XᵀX + λI)β = Xᵀy with the fallback above.

    Args:
        xtx: private XᵀX, shape (p, p).
        xty: private Xᵀy, shape (p,).
        ridge: λ ≥ 0.

    Returns:
        (β of shape (p,), info) with ``info["solver"]`` ``cholesky`` or
        ``psd_pinv`` and the smallest eigenvalue of XᵀX + λI.
    """
    p = xtx.shape[0]
    mat = 0.5 * (xtx + xtx.T) + ridge * np.eye(p)
    vals, vecs = np.linalg.eigh(mat)
    info = {"min_eigenvalue": float(vals[0]) if p else 0.0}
    try:
        chol = linalg.cho_factor(mat, lower=True, check_finite=True)
        beta = linalg.cho_solve(chol, xty)
        if np.all(np.isfinite(beta)) and vals[0] > 0:
            info["solver"] = "cholesky"
            return beta, info
    except linalg.LinAlgError:
        pass
    # Fallback: PSD projection, then the minimum-norm solution.
    tol = max(p, 1) * np.finfo(np.float64).eps * max(float(np.max(np.abs(vals))) if p else 0.0, 1e-300)
    inv = np.where(vals > tol, 1.0 / np.where(vals > tol, vals, 1.0), 0.0)
    beta = vecs @ (inv * (vecs.T @ xty))
    info["solver"] = "psd_pinv"
    return beta, info


def regression_coefficients(matrix: np.ndarray, *, ridge: float = 0.0) -> tuple[np.ndarray, dict]:
    """β from a private [X y]ᵀ[X y] (label in the last row/column).

    Args:
        matrix: shape (p + 1, p + 1).
        ridge: extra λ added to the diagonal of the XᵀX block.
    """
    p = matrix.shape[0] - 1
    return solve_normal_equations(matrix[:p, :p], matrix[:p, p], ridge=ridge)
