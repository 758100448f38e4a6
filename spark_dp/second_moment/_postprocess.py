"""The post-processing of a released second-moment matrix, written once (no privacy cost).

``postprocess`` values (every second-moment mechanism):

* ``none`` — the release as drawn;
* ``shift`` — add ``shift``·I: Analyze Gauss adds c = 2σ√d ≈ E‖N‖₂ (Sheffet's
  choice, PSD with high probability); Wishart subtracts its mean k·B²;
  JL and inverse-Wishart subtract the ridge w²;
* ``psd`` — the projection onto the PSD cone in Frobenius norm (negative
  eigenvalues set to 0); for the Sheffet mechanisms after their shift
  (``psd_after_shift``), for Analyze Gauss on the release as drawn.
"""

from __future__ import annotations

import numpy as np

POSTPROCESS = ("none", "psd", "shift")


def project_psd(matrix: np.ndarray) -> np.ndarray:
    """The nearest PSD matrix in Frobenius norm: eigenvalues clipped at 0 (of each matrix of a stack (…, d, d))."""
    vals, vecs = np.linalg.eigh(matrix)
    return (vecs * np.clip(vals, 0.0, None)[..., None, :]) @ np.swapaxes(vecs, -1, -2)


def postprocess_matrix(matrix: np.ndarray, how: str, *, shift: float, psd_after_shift: bool) -> np.ndarray:
    """``matrix`` post-processed as ``how`` says (module docstring)."""
    if how not in POSTPROCESS:
        raise ValueError(f"unknown postprocess {how!r}; expected one of {list(POSTPROCESS)}")
    if how == "none":
        return matrix
    if how == "shift" or psd_after_shift:
        matrix = matrix + shift * np.eye(matrix.shape[-1])
    if how == "psd":
        matrix = project_psd(matrix)
    return matrix
