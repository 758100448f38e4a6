"""Public bounds in the data's own units, and the map back (exact post-processing; numpy only).

With ``bounds={col: (lo, hi)}`` each value is clamped to [lo, hi] and mapped
to (v − c)/h ∈ [−1, 1] (c = (lo + hi)/2, h = (hi − lo)/2) in the Spark
expression that builds the vector; a constant column (the intercept column
of a regression, or the shift column of a second moment) is inserted. The
vector a of a row and the row x in data units (with a 1 for the constant)
are then related by the public, invertible map x = T·a:

* bounded column i: xᵢ = h·aᵢ + c·x_k (x_k = 1, the constant);
* unbounded column i: xᵢ = aᵢ;
* the constant column k: x_k = a_k / v, v the constant's value in the
  vector (1 with bounds; B/√d for a regression intercept without bounds).

So every release of AᵀA maps to the data's units exactly, XᵀX = T·(AᵀA)·Tᵀ
(noise included: T·N·Tᵀ), and the regression fitted on the scaled vector maps
to the one in data units (:func:`Scaling.coefficients`). Both are functions
of the release and of public bounds only: no privacy cost.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Scaling:
    """The public affine map of one release (module docstring).

    Attributes:
        columns: the data columns in vector order (the constant not included).
        bounds: per column (lo, hi) or None.
        constant_at: index of the constant column in the vector, or None.
        constant_value: the constant's value in the vector.
    """

    columns: tuple[str, ...]
    bounds: tuple[tuple[float, float] | None, ...]
    constant_at: int | None = None
    constant_value: float = 1.0

    @classmethod
    def of(cls, columns: Sequence[str], bounds: Mapping[str, tuple[float, float]] | None, *,
           constant_at: int | None = None, constant_value: float = 1.0) -> Scaling:
        bounds = bounds or {}
        return cls(tuple(columns), tuple(bounds.get(c) for c in columns), constant_at, float(constant_value))

    @property
    def size(self) -> int:
        """Length of the vector (columns plus the constant)."""
        return len(self.columns) + (self.constant_at is not None)

    @property
    def fully_bounded(self) -> bool:
        return all(b is not None for b in self.bounds)

    @property
    def any_bounded(self) -> bool:
        return any(b is not None for b in self.bounds)

    def vector_index(self, i: int) -> int:
        """Index in the vector of data column i."""
        return i + (1 if self.constant_at is not None and i >= self.constant_at else 0)

    def transform(self) -> np.ndarray:
        """T with x = T·a (module docstring), shape (size, size)."""
        t = np.eye(self.size)
        k = self.constant_at
        if k is not None:
            t[k, k] = 1.0 / self.constant_value
        for i, b in enumerate(self.bounds):
            if b is None:
                continue
            j = self.vector_index(i)
            lo, hi = b
            t[j, j] = (hi - lo) / 2.0
            if k is None:
                raise ValueError("bug: bounded columns need the constant column to map back")
            t[j, k] = (lo + hi) / 2.0 / self.constant_value  # c times x_k = c·a_k/v
        return t

    def scales(self) -> np.ndarray:
        """h of each data column ((hi − lo)/2; 1 unbounded): the diagonal part of T, x − c = h·a per column.

        A third moment has no constant column to carry the shift c (the
        tensor family): only this diagonal scaling maps back exactly, Σ(x − c)^⊗3 = D^⊗3·Σa^⊗3 with D = diag(h).
        """
        return np.array([1.0 if b is None else (b[1] - b[0]) / 2.0 for b in self.bounds])

    def to_data_units(self, matrix: np.ndarray) -> np.ndarray:
        """T·M·Tᵀ: a second-moment matrix of the vectors, in the data's units (constant included)."""
        t = self.transform()
        return t @ matrix @ t.T

    def coefficients(self, beta: np.ndarray, label_at: int) -> np.ndarray:
        """Regression coefficients in data units from those fitted on the vector.

        ``beta`` (…, size − 1): coefficients of the vector's non-label entries
        (the constant included) for the label at vector index ``label_at``;
        rows of a 2-D ``beta`` are separate fits (bootstrap draws). Returns
        the same shape: coefficient of each data column, and for the
        constant column the intercept. The residual a_y − βᵀa is the linear
        form wᵀa = wᵀT⁻¹x; normalising its label entry to 1 gives the
        coefficients in data units.
        """
        beta = np.asarray(beta, dtype=np.float64)
        flat = beta.reshape(-1, self.size - 1)
        w = np.insert(-flat, label_at, 1.0, axis=1)  # (draws, size)
        u = np.linalg.solve(self.transform().T, w.T).T  # rows: T^{-T} w
        out = -np.delete(u, label_at, axis=1) / u[:, [label_at]]
        return out.reshape(beta.shape)

    def manifest(self, results: str = "mapped back to the data's units by exact post-processing (x = T a)") -> dict:
        """The scaling as the manifest states it (``results``: what of the release is in which units)."""
        return {
            "bounds": {c: list(b) for c, b in zip(self.columns, self.bounds, strict=True) if b is not None},
            "map": "clamp to [lo, hi], then (v - (lo+hi)/2) / ((hi-lo)/2) in [-1, 1]",
            "constant_column": None if self.constant_at is None else {"index": self.constant_at,
                                                                      "value": self.constant_value},
            "results": results,
        }
