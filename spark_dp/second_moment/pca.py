"""PCA from a private second-moment matrix: top-k eigenpairs.

Post-processing of any release of :mod:`spark_dp.second_moment` (Sheffet,
arXiv 1507.00056; Dwork et al. 2014 for Analyze Gauss), so it costs no
further privacy. Eigenvalues are returned in decreasing order; each
eigenvector's sign is fixed so that its largest-magnitude entry is positive
(eigenvectors are defined up to sign).
"""

from __future__ import annotations

import numpy as np


def principal_components(matrix: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k eigenvalues (k,) and eigenvectors (k, d; row i = component i)."""
    sym = 0.5 * (matrix + matrix.T)
    vals, vecs = np.linalg.eigh(sym)
    order = np.argsort(vals)[::-1][:k]
    vals, vecs = vals[order], vecs[:, order].T
    pivot = np.argmax(np.abs(vecs), axis=1)
    signs = np.sign(vecs[np.arange(vecs.shape[0]), pivot])
    signs[signs == 0] = 1.0
    return vals, vecs * signs[:, None]
