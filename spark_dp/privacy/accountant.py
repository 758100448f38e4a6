"""Composition of privacy events into (ε, δ).

Gaussian events compose exactly in μ-GDP (μ_tot = √Σμᵢ², Dong, Roth & Su
2019, Cor. 3.3) and convert to (ε, δ) with the exact Gaussian profile
(``dp_accounting.get_epsilon_gaussian``). Any other event present sends the
whole list through dp-accounting's PLD accountant, which is tight for
Gaussian and Laplace events alike.
"""

from __future__ import annotations

import functools
import math
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import dp_accounting
from dp_accounting.pld import common as pld_common
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from spark_dp.privacy.events import Chi2ProfileEvent, EpsilonDeltaEvent, Event, GaussianEvent, LaplaceEvent

_PLD_INTERVAL = 1e-4


@dataclass(frozen=True, slots=True)
class Budget:
    """An (ε, δ) pair; ``epsilon`` may be ``inf`` for a non-private release."""

    epsilon: float
    delta: float

    def to_dict(self) -> dict[str, float]:
        return {"epsilon": self.epsilon, "delta": self.delta}


def total_mu(events: Sequence[GaussianEvent]) -> float:
    """μ of the exact composition of Gaussian events."""
    return math.sqrt(math.fsum(e.mu**2 for e in events))


def compose_epsilon(events: Sequence[Event], delta: float) -> float:
    """The ε at which the composition of ``events`` is (ε, δ)-DP.

    Exact for Gaussian-only lists; PLD (pessimistic estimate) otherwise.
    Returns 0.0 for no events.
    """
    if not events:
        return 0.0
    if all(isinstance(e, GaussianEvent) for e in events):
        mu = total_mu(events)  # type: ignore[arg-type]
        return float(dp_accounting.get_epsilon_gaussian(1.0 / mu, delta))
    return _pld_epsilon(tuple(Counter(events).items()), float(delta))


MAX_PERIODS = 100_000


def periods_within(past: Sequence[Event], per_period: Sequence[Event], limit: Budget, *,
                   max_periods: int = MAX_PERIODS) -> int:
    """How many more periods spending ``per_period`` each fit under ``limit`` after ``past``.

    The largest k ≥ 0 such that the composition of ``past`` and k copies of
    ``per_period`` is (limit.epsilon, limit.delta)-DP, found by composing the
    actual events (:func:`compose_epsilon`, the ledger's own check, so the
    ledger refuses exactly the (k+1)-th period) for each k tried: doubling,
    then bisection. Returns ``max_periods`` when at least that many fit
    (also when ``per_period`` is empty: nothing spent per period).
    """
    def fits(k: int) -> bool:
        return compose_epsilon([*past, *(list(per_period) * k)], limit.delta) <= limit.epsilon

    if not fits(0):
        return 0
    if not per_period:
        return max_periods
    lo, hi = 0, 1  # fits(lo); is hi over?
    while fits(hi):
        lo = hi
        if hi >= max_periods:
            return max_periods
        hi = min(2 * hi, max_periods)
    while hi - lo > 1:  # fits(lo), not fits(hi)
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo


_PLD_CACHE: dict[tuple[frozenset, float], float] = {}
_PLD_CACHE_SIZE = 128
_PLD_CACHE_LOCK = threading.Lock()


def _pld_epsilon(items: tuple, delta: float) -> float:
    """PLD ε of the multiset ``items`` ((event, count) pairs), memoised on the multiset.

    A release checks its budget before any Spark work and again inside the
    charge's transaction, over the same ledger history: the second
    composition (≈ 0.5 s for a χ² profile with some history) is then free.
    The events are public and immutable, so the cache holds nothing private.
    """
    key = (frozenset(items), delta)
    with _PLD_CACHE_LOCK:
        if key in _PLD_CACHE:
            return _PLD_CACHE[key]
    composed = None
    for event, count in items:  # identical events: one self-composition
        dist = _pld_of(event)
        if count > 1:
            dist = dist.self_compose(count)
        composed = dist if composed is None else composed.compose(dist)
    eps = float(composed.get_epsilon_for_delta(delta))
    with _PLD_CACHE_LOCK:
        if len(_PLD_CACHE) >= _PLD_CACHE_SIZE:
            _PLD_CACHE.pop(next(iter(_PLD_CACHE)))  # oldest first
        _PLD_CACHE[key] = eps
    return eps


@functools.lru_cache(maxsize=64)
def _pld_of(event: Event) -> pld_lib.PrivacyLossDistribution:
    """Pessimistic PLD of one event (dp-accounting; add/remove neighbours).

    Memoised: events are immutable and public, and dp-accounting's compose /
    self_compose return new distributions without changing their inputs.
    """
    if isinstance(event, GaussianEvent):
        return pld_lib.from_gaussian_mechanism(event.noise_multiplier, value_discretization_interval=_PLD_INTERVAL)
    if isinstance(event, LaplaceEvent):
        return pld_lib.from_laplace_mechanism(event.noise_multiplier, value_discretization_interval=_PLD_INTERVAL)
    if isinstance(event, EpsilonDeltaEvent):
        return pld_lib.from_privacy_parameters(
            pld_common.DifferentialPrivacyParameters(event.epsilon, event.delta),
            value_discretization_interval=_PLD_INTERVAL,
        )
    if isinstance(event, Chi2ProfileEvent):
        from spark_dp.privacy.chi2_profile import chi2_mechanism_pld

        return chi2_mechanism_pld(event.a_max, event.dof, discretization=_PLD_INTERVAL)
    raise TypeError(f"no PLD for event {event!r}")
