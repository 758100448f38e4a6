"""Black-box privacy audit of ``bounds="auto"`` (:func:`~spark_dp.privacy.quantile.private_bounds`), numpy only.

As the other black-box audits (DESIGN.md; tests/_audit.py): run the
selection many times on neighbouring inputs D, D' with a seeded sampler, and
bound ε from below by the events {high ≥ t} and {low ≤ t} (a pilot picks t,
held-out draws give Clopper–Pearson bounds, both directions D→D' and D'→D,
α = 1e-3 split over the four). The lower bound must stay under the claimed ε
of one column's two selections.

The neighbours are chosen so that they move the selection: a bulk of 80
rows over four grid cells near the smallest magnitudes (where the public
penalties are small), and one unit of m = 4 rows at 2^(−20 + 10/4), beyond
the bulk's 0.95 quantile. Adding the unit moves every score of the magnitude
step by the full m·0.95, up for the candidates inside the bulk and down for
those above it. Power: the same audit rejects the plan that understates the
sensitivity (m = 1 while the unit has 4 rows). Each call of private_bounds
draws for 100 identical columns at ε·100, i.e. 100 independent draws of one
column's pair at ε.
"""

from __future__ import annotations

import numpy as np
import pytest

from spark_dp.privacy import SeededSampler
from spark_dp.privacy.quantile import NORM_GRID, VALUE_GRID, BoundsPlan, private_bounds
from tests._audit import empirical_epsilon_scan
from tests.test_bounds_numpy import _charged

EPS = 4.0  # one column's claim: two selections at ε/2 each
UNIT_ROWS = 4
COLUMNS = 100  # draws per call
DRAWS = 8_000  # per side, after a pilot of DRAWS // 4 for the thresholds inside empirical_epsilon_scan


def _counts(magnitude_steps: list[int]) -> np.ndarray:
    """Per-bucket counts of values 2^(−20 + s/4) over VALUE_GRID (s: steps above the grid's smallest magnitude)."""
    counts = np.zeros(VALUE_GRID.size + 1)
    np.add.at(counts, np.searchsorted(VALUE_GRID, NORM_GRID[magnitude_steps]), 1)
    return counts


BULK = [0] * 20 + [1] * 20 + [2] * 20 + [3] * 20
UNIT_FAR = [10] * UNIT_ROWS
NEIGHBOURS = {
    "add_remove": (_counts(BULK), _counts(BULK + UNIT_FAR)),  # D' = D + one unit of 4 rows
    "replace": (_counts(BULK + [0] * UNIT_ROWS), _counts(BULK + UNIT_FAR)),  # the unit's 4 rows moved
}


def _draws(tmp_path, plan_rows: int, neighbors: str, counts: np.ndarray, seed: int) -> np.ndarray:
    """(low, high) grid indices of DRAWS + DRAWS // 4 draws of one column's bounds."""
    plan = BoundsPlan(EPS * COLUMNS, tuple(f"c{i}" for i in range(COLUMNS)), plan_rows, neighbors)
    cp = _charged(tmp_path, SeededSampler(np.random.default_rng(seed)), plan, f"a{seed}")
    rows = np.stack([counts] * COLUMNS)
    out = []
    for _ in range((DRAWS + DRAWS // 4) // COLUMNS):
        cp._pending = [plan.event]  # re-armed: the audit measures the selection's law, not the ledger
        out.extend(private_bounds(cp, plan, rows).values())
    return np.searchsorted(VALUE_GRID, np.array(out))


def _audit(tmp_path, plan_rows: int, neighbors: str) -> float:
    d0, d1 = NEIGHBOURS[neighbors]
    x0, x1 = _draws(tmp_path, plan_rows, neighbors, d0, 1), _draws(tmp_path, plan_rows, neighbors, d1, 2)
    best = -np.inf
    for col, sign in ((1, 1.0), (0, -1.0)):  # {high ≥ t} and {low ≤ t} (and their complements, by the scan's tails)
        a, b = sign * x0[:, col], sign * x1[:, col]
        best = max(best, empirical_epsilon_scan(a, b, 0.0, alpha=1e-3 / 4),
                   empirical_epsilon_scan(b, a, 0.0, alpha=1e-3 / 4))
    return best


@pytest.mark.parametrize("neighbors", ["add_remove", "replace"])
def test_black_box_empirical_epsilon_stays_under_the_claim(tmp_path, neighbors):
    eps_lb = _audit(tmp_path, UNIT_ROWS, neighbors)
    assert eps_lb <= EPS, eps_lb
    assert eps_lb > 0.15 * EPS, eps_lb  # the neighbours move the selection: the audit sees privacy loss (~1.0)


@pytest.mark.parametrize("neighbors", ["add_remove", "replace"])
def test_black_box_audit_rejects_an_understated_sensitivity(tmp_path, neighbors):
    """The plan says one row per unit (Δ = 0.95, or 1 for replace) while the unit has 4 rows: the scores move 4×
    further than the noise was scaled for, and the same audit finds more privacy loss than the claimed ε (5.0 and
    4.6 against 4)."""
    assert _audit(tmp_path, 1, neighbors) > EPS
