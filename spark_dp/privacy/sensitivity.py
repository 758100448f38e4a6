"""Sensitivity bounds, one function per bound, each with its argument.

Neighbour relations (``neighbors``):

``add_remove`` (default)
    D' = D with one privacy unit's rows added or removed.
``replace``
    D' = D with one privacy unit's rows replaced by another unit's (the
    number of units is public, not the number of rows that survive the
    preprocessing).

A privacy unit is one row, or, with a ``privacy_unit`` column, all rows of
one value of it after contribution bounding to at most ``max_rows_per_unit``
rows. After the ``nonfinite`` policy a unit keeps anywhere from 0 to m rows
(``drop`` may remove all of them), so every bound here holds for units of
0 … m rows on either side: P or Q below may be 0.
"""

from __future__ import annotations

import math

from spark_dp.params import NEIGHBORS  # declared once


def second_moment_l2_sensitivity(norm_bound: float, *, max_rows_per_unit: int = 1, neighbors: str = "add_remove") -> float:
    """L2 sensitivity of the upper triangle (with diagonal) of AᵀA.

    Rows are clipped to ‖a‖₂ ≤ B and a unit holds at most m rows.

    * add/remove: AᵀA changes by P = Σ_{rows of the unit} aaᵀ, a PSD matrix with
      ‖P‖_F ≤ Σ ‖aaᵀ‖_F = Σ ‖a‖² ≤ m·B² (triangle inequality).
    * replace: the change is P − Q with P, Q PSD, so ⟨P, Q⟩ ≥ 0 and
      ‖P − Q‖_F² ≤ ‖P‖_F² + ‖Q‖_F² ≤ 2(m·B²)², i.e. Δ = √2·m·B².

    For a symmetric M the upper triangle with diagonal u(M) has
    ‖u(M)‖₂² = ½(‖M‖_F² + Σ M_ii²) ≤ ‖M‖_F², so the bounds carry over to the
    vector that is actually noised.
    """
    base = max_rows_per_unit * norm_bound**2
    if neighbors == "add_remove":
        return base
    if neighbors == "replace":
        return math.sqrt(2.0) * base
    raise ValueError(f"unknown neighbour relation {neighbors!r}; expected one of {list(NEIGHBORS)}")
