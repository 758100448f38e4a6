"""The uncertainty of a released array: an interval (or bound) per entry, from public information only.

Every family's noise step may attach an :class:`Uncertainty` to each payload
array it returns (:class:`~spark_dp.release.pipeline.Noised`). It is
post-processing: computed from the released values and public parameters
(σ, bounds, the confidence level), never from the exact data, so it costs
no privacy budget.

Two kinds (``kind``):

``interval``
    claims nominal coverage: the true (noise-free) value lies in
    ``[low, high]`` with probability ``level`` over the mechanism's noise
    (``covers="noise"``) or over noise and sampling (``"noise+sampling"``);
    a hashed sketch's frequency estimates cover noise and hash collisions
    (``"noise+collisions"``).
``bound``
    a worst-case bound that holds with probability at least ``level`` (e.g.
    Weyl's inequality with a high-probability bound on the noise's spectral
    norm): conservative, its coverage is higher than the level.
``none``
    refused: the method cannot show an interval that holds for this release
    (e.g. a ridge whose bias cannot be bounded from the released values);
    ``method`` says why, ``low``/``high`` are NaN and there is no standard
    error. ``Release.interval`` and ``Release.stderr`` raise with the reason.

Written next to the array in the same long-format Parquet file (columns
``stderr``, ``low``, ``high`` after ``value``) with the level and each
array's ``method``/``kind``/``covers`` in the manifest's ``uncertainty`` block
(:mod:`spark_dp.release.release`).
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

DEFAULT_CONFIDENCE = 0.95
KINDS = ("interval", "bound", "none")
COVERS = ("noise", "noise+sampling", "noise+collisions")  # the last: a sketch's frequency estimates


@dataclass(frozen=True)
class Uncertainty:
    """Per-entry uncertainty of one payload array (module doc).

    Attributes:
        low, high: arrays of the payload array's shape.
        stderr: same shape, or None where a standard error does not apply (bounds).
        method: one sentence, how it was derived (recorded in the manifest).
        kind: ``interval``, ``bound`` or ``none`` (refused: NaN, the reason in ``method``).
        covers: ``noise`` or ``noise+sampling``.
        target: what the interval is of when that is not the noise-free
            summary itself (e.g. a matrix that keeps a ridge ``A^T A + c I``);
            None otherwise. Recorded in the manifest when set.
    """

    low: np.ndarray
    high: np.ndarray
    stderr: np.ndarray | None
    method: str
    kind: str = "interval"
    covers: str = "noise"
    target: str | None = None

    def __post_init__(self) -> None:
        low = np.asarray(self.low, dtype=np.float64)
        high = np.asarray(self.high, dtype=np.float64)
        if low.shape != high.shape:
            raise ValueError(f"bug: uncertainty low {low.shape} and high {high.shape} differ in shape")
        stderr = None if self.stderr is None else np.broadcast_to(
            np.asarray(self.stderr, dtype=np.float64), low.shape).copy()
        if self.kind not in KINDS:
            raise ValueError(f"bug: uncertainty kind {self.kind!r} is not one of {KINDS}")
        if self.covers not in COVERS:
            raise ValueError(f"bug: uncertainty covers {self.covers!r} is not one of {COVERS}")
        if not isinstance(self.method, str) or not self.method:
            raise ValueError("bug: an uncertainty must state its method")
        object.__setattr__(self, "low", low)
        object.__setattr__(self, "high", high)
        object.__setattr__(self, "stderr", stderr)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.low.shape

    def describe(self) -> dict[str, str]:
        """The manifest entry of this array: ``method``, ``kind``, ``covers`` (and ``target`` when set)."""
        out = {"method": self.method, "kind": self.kind, "covers": self.covers}
        return out if self.target is None else {**out, "target": self.target}


def check_level(level: float) -> float:
    """``level`` as a float in (0, 1), or RuntimeError (the API checked it; this is a bug guard)."""
    level = float(level)
    if not 0.0 < level < 1.0:
        raise RuntimeError(f"bug: confidence level {level!r} is not in (0, 1)")
    return level


def normal_quantile(level: float) -> float:
    """z with P(|N(0, 1)| ≤ z) = ``level`` (two-sided)."""
    return NormalDist().inv_cdf(0.5 + check_level(level) / 2.0)


def gaussian_interval(values, sigma, level: float, *, method: str | None = None,
                      covers: str = "noise") -> Uncertainty:
    """value ± z·σ entrywise: exact for a value that is the true one plus N(0, σ²) noise.

    ``sigma`` is a scalar or an array broadcastable to ``values``.
    """
    values = np.asarray(values, dtype=np.float64)
    sd = np.broadcast_to(np.asarray(sigma, dtype=np.float64), values.shape)
    z = normal_quantile(level)
    return Uncertainty(values - z * sd, values + z * sd, sd, method or (
        "value ± z·σ with σ the Gaussian noise scale of the mechanism (exact for additive Gaussian noise)"),
        covers=covers)


def symmetric_interval(values, radius, stderr=None, *, method: str, kind: str = "interval",
                       covers: str = "noise") -> Uncertainty:
    """value ± radius entrywise (radius a scalar or broadcastable array)."""
    values = np.asarray(values, dtype=np.float64)
    r = np.broadcast_to(np.asarray(radius, dtype=np.float64), values.shape)
    return Uncertainty(values - r, values + r, stderr, method, kind=kind, covers=covers)


def bound(values, radius, *, method: str, covers: str = "noise") -> Uncertainty:
    """value ± radius as a ``bound`` (no standard error): holds with probability ≥ the level."""
    return symmetric_interval(values, radius, None, method=method, kind="bound", covers=covers)


def empirical_interval(values, draws: np.ndarray, level: float, *, method: str,
                       covers: str = "noise") -> Uncertainty:
    """An interval from simulated draws of the error (released − true), shape (n_draws, *values.shape).

    The released value minus the error's upper/lower quantiles (a pivot):
    [v − q_hi, v − q_lo]; stderr is the draws' standard deviation.
    """
    values = np.asarray(values, dtype=np.float64)
    draws = np.asarray(draws, dtype=np.float64)
    a = (1.0 - check_level(level)) / 2.0
    q_lo, q_hi = np.quantile(draws, [a, 1.0 - a], axis=0)
    return Uncertainty(values - q_hi, values - q_lo, draws.std(axis=0, ddof=1), method, covers=covers)


def manifest_block(uncertainty, level: float) -> dict | None:
    """The manifest's ``uncertainty`` field for arrays → Uncertainty (None when there is none)."""
    if not uncertainty:
        return None
    return {"level": check_level(level), "arrays": {name: u.describe() for name, u in sorted(uncertainty.items())}}

