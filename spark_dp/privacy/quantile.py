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

``bounds="auto"`` (:class:`BoundsPlan`, :func:`private_bounds`) makes two
such selections per column, at ε/(2p) each over the signed grid
:data:`VALUE_GRID` (−2^(j/4), 0, 2^(j/4)), the second adapted to the first:

1. the magnitude M, the 0.95 quantile of |x| over the candidates 2^(j/4)
   (scores |#{x : −c < x ≤ c} − 0.95·n|), like the symmetric bound [−M, M]
   of Tumult Analytics' ``get_bounds`` (tumult-core's
   ``create_bounds_measurement``: the first power of two whose noisy prefix
   count of |x| passes a noisy threshold, by the sparse vector technique);
   we select over the finer grid by the exponential mechanism;
2. inside [−M, M], one of the intervals [l, M] (l the 0.05 quantile of x,
   scores |#{x ≤ l} − 0.05·n|) or [−M, h] (h the 0.95 quantile, scores
   |#{x > h} − 0.05·n|): one selection over both families, so a column on
   one side of 0 gets its inner bound and a column around 0 either.

Every count is of rows each in or out of it, so the scores have the
sensitivity derived above (m·0.95 add/remove, m replace). Each selection's
candidates beyond the data all score alike (0.05·n), so a public penalty
breaks the ties, a base measure fixed before any data is seen: per grid
step of M, scale/8 up to M = 1 and scale/4 above, towards the smallest M
(2^(−20), i.e. towards the grid's centre 0: the candidates above the data
lose to the smallest one covering it; with the gentler slope below 1, eight
values in [1, 2] with all of ε = 8 on their bounds pay 11 noise scales of
penalty, not 21, and are found), and scale/8 per grid step of the interval's width (towards the
narrow ones: the inner bound's ties below / above the data lose to the one
next to it). Step 2's candidate set and penalty depend only on M, a
private output, so the pair is 2·ε/(2p)-DP by adaptive sequential
composition of pure DP. Low < high by construction, and both are candidates
of :data:`VALUE_GRID`. With too few rows for the selection to see the data
(noise scale 2Δ/ε_each against 0.95·n and 0.05·n), the penalties win and
the bounds shrink towards 0, never to the grid's ends. The 2p selections are
charged as one event ``exponential_quantile_bounds`` (ε, 0).
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
_ZERO = NORM_GRID.size  # index of 0.0 in VALUE_GRID: NORM_GRID[i] is at _ZERO + 1 + i, −NORM_GRID[i] at _ZERO − 1 − i
#: The quantiles ``bounds="auto"`` targets per column: [low, high] = [q_0.05, q_0.95] (one of them as the 0.95
#: quantile of |x|, :func:`private_bounds`). Not further out: the candidates beyond the data all score 0.05·n, and
#: the selection needs 0.05·n well above the noise scale 2Δ/ε_each (3 columns at ε = 1, share 0.1: ~114).
BOUNDS_QUANTILES = (0.05, 0.95)
BOUNDS_MECHANISM = "exponential_quantile_bounds"
#: The public penalties (base measure) of ``bounds="auto"``, in noise scales per grid step: of the magnitude M
#: towards 0 (1/8 per step below 1, 1/4 per step above: :func:`magnitude_penalty`) and of the interval's width
#: towards narrow.
MAGNITUDE_PENALTY = (1 / 8, 1 / 4)
WIDTH_PENALTY = 1 / 8
_UNIT = int(np.flatnonzero(NORM_GRID == 1.0)[0])  # 80


#: A chosen bound this close to 0 (within 16 grid steps of the smallest magnitude 2^(−20)) is where the penalty
#: towards 0 wins when the selection could not see the data: :func:`collapsed_columns`.
COLLAPSED = 2.0 ** -16


def collapsed_columns(bounds: dict[str, tuple[float, float]]) -> list[str]:
    """The columns whose chosen [low, high] lies within ±:data:`COLLAPSED` (post-processing of the selection).

    That is the public base measure's favourite: with too few rows for the ε
    share (0.05·n not well above the noise scale 2Δ/ε_each) the selection
    lands there whatever the data, and every value is then clamped to about 0.
    Only a column whose values really are that small gives it otherwise.
    """
    return [c for c, (lo, hi) in bounds.items() if max(abs(lo), abs(hi)) <= COLLAPSED]


def collapse_warning(plan: "BoundsPlan", columns: list[str]) -> str:
    """The release's warning for :func:`collapsed_columns` (names the columns, the scale and what to do)."""
    return (f"bounds='auto' chose bounds within ±{COLLAPSED:.2g} for {', '.join(columns)}: the selection's public "
            f"pull towards 0 won, as it does when too few rows meet the epsilon share (0.05·n must be well above the "
            f"noise scale {plan.scale:.3g} of each selection). Unless these columns' values really are that small, "
            "every value was clamped to about 0 and the release says little about them: give public bounds, or "
            "raise bounds_share or epsilon.")


def magnitude_penalty() -> np.ndarray:
    """The public penalty of each candidate M (one per :data:`NORM_GRID` entry), in noise scales: 1/8 per grid
    step from the smallest candidate up to 1, then 1/4 per step (0 at 2^(−20), 10 at 1, 10 + 40 = 50 at 2^40).
    """
    i = np.arange(NORM_GRID.size, dtype=np.float64)
    below, above = MAGNITUDE_PENALTY
    return below * np.minimum(i, _UNIT) + above * np.maximum(i - _UNIT, 0.0)


@dataclass(frozen=True)
class BoundsPlan:
    """The public plan of ``bounds="auto"``: 2p selections (two per column), one event of ε in total.

    Per column (:func:`private_bounds`): the magnitude M (0.95 quantile of
    |x|), then [l, M] or [−M, h] inside [−M, M] (l, h the 0.05 / 0.95
    quantiles of x), each by the exponential mechanism (permute-and-flip) at
    ε/(2p) over :data:`VALUE_GRID` with the sensitivity of
    :func:`quantile_sensitivity` and a public penalty that does not depend
    on the data (per grid step of M towards 0: scale/8 below 1, scale/4
    above; scale/8 per grid step of the interval's width). The second selection's candidates depend only
    on the first's output, so the 2p selections are ε-DP together by
    (adaptive) basic composition of pure DP, charged as ONE
    :class:`EpsilonDeltaEvent` (ε, 0).
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
        """ε of one selection: ε/(2p)."""
        return self.epsilon / (2 * len(self.columns))

    @property
    def sensitivity(self) -> float:
        """L∞ sensitivity of every selection's scores: m·0.95 (add/remove) or m (replace)."""
        return quantile_sensitivity(BOUNDS_QUANTILES[1], max_rows_per_unit=self.max_rows_per_unit,
                                    neighbors=self.neighbors)

    @property
    def scale(self) -> float:
        """Scale of the exponential noise of every selection: 2Δ/(ε/(2p))."""
        return 2.0 * self.sensitivity / self.each

    def manifest(self) -> dict:
        return {"method": "per column, two selections by the exponential mechanism over a public grid (Smith 2011; "
                          "OpenDP make_quantile_score_candidates + noisy max; permute-and-flip) at epsilon/(2p) each: "
                          "the magnitude M as the 0.95 quantile of |x| (cf. Tumult Analytics get_bounds), then inside "
                          "[-M, M] one of [l, M] (l the 0.05 quantile) or [-M, h] (h the 0.95 quantile); public "
                          "penalties per grid step of M towards 0 (scale/8 below 1, scale/4 above) and of scale/8 per "
                          "grid step of the interval's width; 2p selections composed (pure DP, adaptive)",
                "grid": "-2^(j/4), 0, 2^(j/4) for j = -80..160 (data-independent)",
                "quantiles": list(BOUNDS_QUANTILES), "epsilon": self.epsilon, "epsilon_each": self.each,
                "score_sensitivity": self.sensitivity}


def magnitude_scores(counts: np.ndarray) -> np.ndarray:
    """Scores of M (one per :data:`NORM_GRID` candidate): |#{x : −M < x ≤ M} − 0.95·n|.

    ``counts``: one column's per-bucket counts over :data:`VALUE_GRID`.
    """
    counts = np.asarray(counts, dtype=np.float64)
    at_most = np.cumsum(counts)[:-1]
    inside = at_most[_ZERO + 1 :] - at_most[_ZERO - 1 :: -1]  # #{x ≤ M} − #{x ≤ −M}
    return np.abs(inside - BOUNDS_QUANTILES[1] * counts.sum())


def inner_candidates(i: int) -> tuple[np.ndarray, np.ndarray]:
    """Step 2's intervals inside [−M, M], M = NORM_GRID[i], as (low, high) indices into :data:`VALUE_GRID`: first
    [l, M] for l = −M … below M (their low is selected), then [−M, h] for h above −M … M (their high is).
    """
    top, bottom = _ZERO + 1 + i, _ZERO - 1 - i
    size = top - bottom
    return (np.concatenate([np.arange(bottom, top), np.full(size, bottom)]),
            np.concatenate([np.full(size, top), np.arange(bottom + 1, top + 1)]))


def inner_scores(counts: np.ndarray, i: int) -> np.ndarray:
    """Scores of step 2's intervals (:func:`inner_candidates`, same order): |#{x ≤ l} − 0.05·n| for [l, M],
    |#{x > h} − 0.05·n| for [−M, h].
    """
    counts = np.asarray(counts, dtype=np.float64)
    at_most = np.cumsum(counts)[:-1]
    n, alpha = counts.sum(), BOUNDS_QUANTILES[0]
    top, bottom = _ZERO + 1 + i, _ZERO - 1 - i
    return np.abs(np.concatenate([at_most[bottom:top] - alpha * n, (1 - alpha) * n - at_most[bottom + 1 : top + 1]]))


def private_bounds(chokepoint, plan: BoundsPlan, counts: np.ndarray) -> dict[str, tuple[float, float]]:
    """Each column's [low, high] from its per-bucket ``counts`` (rows: columns; over :data:`VALUE_GRID`).

    Draws through ``chokepoint`` (its charged ``plan.event`` is used up), two
    selections per column (module docstring): M, then [l, M] or [−M, h].
    """
    sampler = chokepoint.randomness(plan.event)
    scale, sens = plan.scale, plan.sensitivity
    m_penalty = scale * magnitude_penalty()
    out = {}
    for col, row in zip(plan.columns, np.asarray(counts), strict=True):
        # 1. M: the candidates above the data all score 0.05·n; the smallest of them (next to the data) wins the tie.
        i = int(sampler.noisy_min_index(magnitude_scores(row) + m_penalty, scale, sens))
        # 2. [l, M] or [−M, h]: the narrowest of the tied candidates beyond the data (next to it) wins.
        low, high = inner_candidates(i)
        k = int(sampler.noisy_min_index(inner_scores(row, i) + WIDTH_PENALTY * scale * (high - low - 1), scale, sens))
        out[col] = (float(VALUE_GRID[low[k]]), float(VALUE_GRID[high[k]]))
    return out
