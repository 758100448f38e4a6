"""Privacy events: the vocabulary of the ledger and the manifests.

Each event is a small frozen value holding exactly what accounting needs, and
serialises to JSON for the ledger. Compatibility rules (as in dp_accounting's
``dp_event.py``), which the ledger and manifest schema rely on:

* never remove an event type or a field, and never change what a field means;
* add only new event types, or new fields with defaults.

Events describe mechanisms relative to their sensitivity (a *noise
multiplier* σ/Δ), so the same event serves every release shape.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

from dp_accounting import dp_event


@dataclass(frozen=True, slots=True)
class GaussianEvent:
    """Gaussian mechanism: returns f(D) + N(0, σ²I) where ‖f(D) − f(D')‖₂ ≤ Δ.

    ``noise_multiplier`` is z = σ/Δ. The event is μ-GDP with μ = 1/z
    (Dong, Roth & Su 2019, Thm 2.7); Gaussian events compose exactly as
    μ_tot = √(Σ μᵢ²) (ibid., Cor. 3.3), and (ε, δ) follows from the exact
    Gaussian profile (Balle & Wang 2018, Thm 8).
    """

    noise_multiplier: float
    kind: ClassVar[str] = "gaussian"

    def __post_init__(self) -> None:
        if not (self.noise_multiplier > 0 and math.isfinite(self.noise_multiplier)):
            raise ValueError(f"noise_multiplier must be positive and finite, got {self.noise_multiplier}")

    @property
    def mu(self) -> float:
        return 1.0 / self.noise_multiplier

    def to_dp_event(self) -> dp_event.DpEvent:
        return dp_event.GaussianDpEvent(noise_multiplier=self.noise_multiplier)


@dataclass(frozen=True, slots=True)
class LaplaceEvent:
    """Laplace mechanism: f(D) + Lap(b)ᵈ where ‖f(D) − f(D')‖₁ ≤ Δ; z = b/Δ.

    Pure (1/z)-DP (Dwork et al. 2006); composed with other events through the
    PLD accountant.
    """

    noise_multiplier: float
    kind: ClassVar[str] = "laplace"

    def __post_init__(self) -> None:
        if not (self.noise_multiplier > 0 and math.isfinite(self.noise_multiplier)):
            raise ValueError(f"noise_multiplier must be positive and finite, got {self.noise_multiplier}")

    def to_dp_event(self) -> dp_event.DpEvent:
        return dp_event.LaplaceDpEvent(noise_multiplier=self.noise_multiplier)


@dataclass(frozen=True, slots=True)
class EpsilonDeltaEvent:
    """A mechanism known only to be (ε, δ)-DP (e.g. additive Wishart, Sheffet Thm 4.1).

    Composed through its PLD (``from_privacy_parameters``), which is the
    tightest composition available for a bare (ε, δ) guarantee.
    ``mechanism`` names it in the ledger; it does not affect accounting.
    """

    epsilon: float
    delta: float
    mechanism: str = "unspecified"
    kind: ClassVar[str] = "epsilon_delta"

    def __post_init__(self) -> None:
        if not (self.epsilon >= 0 and math.isfinite(self.epsilon)) or not (0 <= self.delta < 1):
            raise ValueError(f"need finite epsilon >= 0 and 0 <= delta < 1, got {self.epsilon}, {self.delta}")

    def to_dp_event(self) -> dp_event.DpEvent:
        return dp_event.UnsupportedDpEvent()


@dataclass(frozen=True, slots=True)
class Chi2ProfileEvent:
    """One draw of a Wishart-type matrix with scale Σ = AᵀA + w²I (JL with ridge,
    inverse-Wishart), under add/remove-one-row neighbours.

    ``a_max`` = B²/w² bounds a = vᵀΣ₀⁻¹v for the added row v; ``dof`` is the
    number of projection rows r (JL) or the degrees of freedom m
    (inverse-Wishart). Its privacy loss has an exact χ² law
    (:mod:`spark_dp.privacy.chi2_profile`), so the ledger composes its exact
    PLD: tighter than an (ε, δ) point (ten releases calibrated to
    (1, 1e-6) compose to ε ≈ 2.9 at δ = 1e-5 instead of 10).
    """

    a_max: float
    dof: int
    mechanism: str = "unspecified"
    kind: ClassVar[str] = "chi2_profile"

    def __post_init__(self) -> None:
        if not (0 < self.a_max and math.isfinite(self.a_max)) or int(self.dof) != self.dof or self.dof < 1:
            raise ValueError(f"need a_max > 0 and an integer dof >= 1, got {self.a_max}, {self.dof}")

    def to_dp_event(self) -> dp_event.DpEvent:
        return dp_event.UnsupportedDpEvent()


Event = GaussianEvent | LaplaceEvent | EpsilonDeltaEvent | Chi2ProfileEvent
_KINDS: dict[str, type] = {
    cls.kind: cls for cls in (GaussianEvent, LaplaceEvent, EpsilonDeltaEvent, Chi2ProfileEvent)
}


def event_to_dict(event: Event) -> dict[str, Any]:
    """A JSON-ready dict ``{"type": kind, **fields}``."""
    return {"type": event.kind, **asdict(event)}


def event_from_dict(data: dict[str, Any]) -> Event:
    """Inverse of :func:`event_to_dict`."""
    fields = dict(data)
    kind = fields.pop("type")
    try:
        cls = _KINDS[kind]
    except KeyError:
        raise ValueError(f"unknown privacy event type {kind!r}") from None
    return cls(**fields)


def events_to_json(events: list[Event]) -> str:
    """A JSON list of :func:`event_to_dict` dicts (keys sorted, so equal events give equal text)."""
    return json.dumps([event_to_dict(e) for e in events], sort_keys=True)


def events_from_json(text: str) -> list[Event]:
    """Inverse of :func:`events_to_json`."""
    return [event_from_dict(d) for d in json.loads(text)]
