"""A private quantile over a public grid, by the exponential mechanism (``norm_bound="auto"``).

Smith (STOC 2011) and the OpenDP library (``make_quantile_score_candidates``
followed by a noisy max) choose a quantile privately as follows, which is
what this module does for the row norms of a release's vectors:

* candidates: a public geometric grid c₁ < … < c_G (:data:`NORM_GRID`,
  2^(j/4) for j = −80 … 160, i.e. 1e-6 … 1.1e12 in steps of 19 %), fixed
  before any data is seen;
* score of c: s(c) = |#{rows with ‖a‖ ≤ c} − α·n| (0 at the exact α-quantile;
  n is never released);
* selection: the candidate minimising s(c) − Eᶜ with Eᶜ i.i.d. Exp(2Δ/ε)
  (report-noisy-max with exponential noise, i.e. permute-and-flip,
  McKenna & Sheldon 2020): ε-DP for scores of L∞ sensitivity Δ, never less
  accurate than the classic exponential mechanism. The draw goes through the
  session's sampler (OpenDP's ``make_noisy_max`` by default) after the charge.

Sensitivity Δ of the scores (m = rows per privacy unit):

* add/remove one unit: each of its ≤ m rows changes the count by 0 or 1 and
  α·n by α, so it moves L − α·n (L the count) by −α or 1 − α, all in the same
  direction: Δ = m·max(α, 1 − α);
* replace one unit's k₁ ≤ m rows by k₂ ≤ m others: removing a row moves
  L − α·n by −(1 − α) or +α, adding one by +(1 − α) or −α, so the total lies
  in [−(1 − α)k₁ − αk₂, αk₁ + (1 − α)k₂] and |change| ≤ m: Δ = m.

The event is an :class:`~spark_dp.privacy.events.EpsilonDeltaEvent` (ε, 0)
named ``exponential_quantile``, composed with the release's other events by
the ledger's PLD accountant.

``bounds="auto"`` uses the same selection per column over the signed grid
:data:`VALUE_GRID` for the 0.05 and 0.95 quantiles (:class:`BoundsPlan`,
:func:`private_bounds`), 2p selections charged as one event
``exponential_quantile_bounds``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from spark_dp.privacy.events import EpsilonDeltaEvent

#: The public candidate grid for a row-norm bound: 2^(j/4), j = -80 … 160.
NORM_GRID = np.exp2(np.arange(-80, 161) / 4.0)
MECHANISM = "exponential_quantile"


def quantile_sensitivity(alpha: float, *, max_rows_per_unit: int = 1, neighbors: str = "add_remove") -> float:
    """L∞ sensitivity of the scores (module docstring) for m rows per unit and the neighbour relation."""
    m = int(max_rows_per_unit)
    if neighbors == "add_remove":
        return m * max(alpha, 1.0 - alpha)
    if neighbors == "replace":
        return float(m)
    raise ValueError(f"unknown neighbour relation {neighbors!r}")


def quantile_scores(counts: np.ndarray, alpha: float) -> np.ndarray:
    """Scores |#{‖a‖ ≤ c_i} − α·n| from the per-bucket counts (bucket i: c_{i−1} < ‖a‖ ≤ c_i, last: > c_G)."""
    counts = np.asarray(counts, dtype=np.float64)
    n = counts.sum()
    at_most = np.cumsum(counts)[:-1]  # one per candidate
    return np.abs(at_most - alpha * n)


def bucket_of(norms: np.ndarray, grid: np.ndarray = NORM_GRID) -> np.ndarray:
    """Bucket index of each norm: i with c_{i−1} < ‖a‖ ≤ c_i (len(grid) for norms above the grid)."""
    return np.searchsorted(grid, norms, side="left")


@dataclass(frozen=True)
class QuantilePlan:
    """The public plan of one private quantile: its event, ε, level α and sensitivity."""

    epsilon: float
    alpha: float
    sensitivity: float
    event: EpsilonDeltaEvent

    @property
    def scale(self) -> float:
        """Scale of the exponential noise: 2Δ/ε."""
        return 2.0 * self.sensitivity / self.epsilon

    def manifest(self) -> dict:
        return {"method": "exponential mechanism over a public geometric grid (Smith 2011; OpenDP "
                          "make_quantile_score_candidates + noisy max; permute-and-flip, McKenna & Sheldon 2020)",
                "quantile": self.alpha, "epsilon": self.epsilon, "score_sensitivity": self.sensitivity,
                "grid": "2^(j/4), j = -80..160"}


def plan_quantile(epsilon: float, alpha: float, *, max_rows_per_unit: int = 1,
                  neighbors: str = "add_remove") -> QuantilePlan:
    """The plan of an ε-DP α-quantile of row norms (public parameters only)."""
    sens = quantile_sensitivity(alpha, max_rows_per_unit=max_rows_per_unit, neighbors=neighbors)
    return QuantilePlan(epsilon, alpha, sens, EpsilonDeltaEvent(epsilon=epsilon, delta=0.0, mechanism=MECHANISM))


def private_quantile(chokepoint, plan: QuantilePlan, counts: np.ndarray, grid: np.ndarray = NORM_GRID) -> float:
    """The selected candidate, drawn through ``chokepoint`` (its charged event ``plan.event`` is used up)."""
    sampler = chokepoint.randomness(plan.event)
    scores = quantile_scores(counts, plan.alpha)
    return float(grid[sampler.noisy_min_index(scores, plan.scale, plan.sensitivity)])


#: The public candidates of a column's bound (``bounds="auto"``): −2^(j/4), 0 and 2^(j/4), j = −80 … 160.
VALUE_GRID = np.concatenate([-NORM_GRID[::-1], [0.0], NORM_GRID])
#: The quantiles ``bounds="auto"`` targets per column: [low, high] = [q_0.05, q_0.95]. Not further out: the
#: candidates beyond the data all score α·n, and with ~480 of them the selection needs α·n well above
#: 2Δ/ε·ln(480) (3 columns at ε = 1, share 0.1: ~700; α·n = 2,500 at n = 50,000 rows, 500 with 0.01).
BOUNDS_QUANTILES = (0.05, 0.95)
BOUNDS_MECHANISM = "exponential_quantile_bounds"


@dataclass(frozen=True)
class BoundsPlan:
    """The public plan of ``bounds="auto"``: 2p quantiles (low, high per column), one event of ε in total.

    Each quantile is the exponential mechanism above at ε/(2p) over
    :data:`VALUE_GRID` with the sensitivity of :func:`quantile_sensitivity`
    and a public penalty of scale/4 per grid step outwards (a base measure
    that does not depend on the data; :func:`private_bounds`);
    the 2p selections are ε-DP together by basic composition of pure DP, so
    they are charged as ONE :class:`EpsilonDeltaEvent` (ε, 0).
    """

    epsilon: float
    columns: tuple[str, ...]
    max_rows_per_unit: int = 1
    neighbors: str = "add_remove"

    @property
    def event(self) -> EpsilonDeltaEvent:
        return EpsilonDeltaEvent(epsilon=self.epsilon, delta=0.0, mechanism=BOUNDS_MECHANISM)

    @property
    def each(self) -> float:
        """ε of one quantile: ε/(2p)."""
        return self.epsilon / (2 * len(self.columns))

    def manifest(self) -> dict:
        return {"method": "per column, the 0.05 and 0.95 quantiles by the exponential mechanism over a public grid "
                          "(Smith 2011; OpenDP make_quantile_score_candidates + noisy max; permute-and-flip) with a public "
                          "penalty of scale/4 per grid step outwards, 2 per column at epsilon/(2p) each, composed "
                          "(pure DP)",
                "grid": "-2^(j/4), 0, 2^(j/4) for j = -80..160 (data-independent)",
                "quantiles": list(BOUNDS_QUANTILES), "epsilon": self.epsilon, "epsilon_each": self.each,
                "score_sensitivity": quantile_sensitivity(BOUNDS_QUANTILES[1], max_rows_per_unit=self.max_rows_per_unit,
                                                          neighbors=self.neighbors)}


def private_bounds(chokepoint, plan: BoundsPlan, counts: np.ndarray) -> dict[str, tuple[float, float]]:
    """Each column's [low, high] from its per-bucket ``counts`` (rows: columns; over :data:`VALUE_GRID`).

    Draws through ``chokepoint`` (its charged ``plan.event`` is used up). A
    high not above the low (a constant column, or the noise) becomes the next
    candidate above the low (post-processing).
    """
    sampler = chokepoint.randomness(plan.event)
    steps = np.arange(VALUE_GRID.size, dtype=np.float64)
    out = {}
    for col, row in zip(plan.columns, np.asarray(counts), strict=True):
        picked = []
        for alpha in BOUNDS_QUANTILES:
            sens = quantile_sensitivity(alpha, max_rows_per_unit=plan.max_rows_per_unit, neighbors=plan.neighbors)
            scale = 2.0 * sens / plan.each
            # A public penalty of scale/4 per grid step outwards (down for the low bound, up for the high one):
            # the candidates beyond the data all score α·n, and without it one of those ~100 ties would often
            # win. It does not depend on the data, so the scores keep their sensitivity (same ε).
            outward = steps if alpha > 0.5 else steps[::-1]
            scores = quantile_scores(row, alpha) + scale / 4.0 * outward
            picked.append(int(sampler.noisy_min_index(scores, scale, sens)))
        lo, hi = picked
        if hi <= lo:
            lo, hi = (lo, lo + 1) if lo + 1 < VALUE_GRID.size else (lo - 1, lo)
        out[col] = (float(VALUE_GRID[lo]), float(VALUE_GRID[hi]))
    return out
