"""The privacy chokepoint: the one call through which noisy values leave.

Order of operations, which the rest of spark-dp relies on:

1. **check** — a dry run of the whole release's events against the dataset's
   limit, before any Spark work (:meth:`Chokepoint.check`);
2. **charge** — the events are appended to the ledger in one transaction that
   re-checks the limit; durable before step 3 (:meth:`Chokepoint.charge`);
3. **noise** — each draw must be covered by a charged, not yet used event
   (:meth:`Chokepoint.gaussian`). A draw that is not covered is a bug and
   raises instead of releasing unaccounted noise.

Accounting therefore happens once per release (all its aggregates at once),
never per row or partition. A crash after step 2 costs budget but never
releases unaccounted noise.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from spark_dp.privacy.accountant import Budget
from spark_dp.privacy.events import Event, GaussianEvent, LaplaceEvent
from spark_dp.privacy.ledger import Charge, Ledger, UnitDeclaration
from spark_dp.privacy.noise import NoiseSampler


class UnchargedNoiseError(RuntimeError):
    """A noise draw was requested that no charged event covers (a bug)."""


class Chokepoint:
    """Binds one release (id, dataset, request digest) to the ledger and a sampler."""

    def __init__(
        self,
        ledger: Ledger,
        *,
        dataset_id: str,
        release_id: str,
        request_sha256: str,
        sampler: NoiseSampler,
        limit: Budget | None = None,
        unit: UnitDeclaration | None = None,
    ) -> None:
        """``unit``: what the release protects; checked against (or declaring) the dataset's unit."""
        self.ledger = ledger
        self.unit = unit
        self.dataset_id = dataset_id
        self.release_id = release_id
        self.request_sha256 = request_sha256
        self.sampler = sampler
        self.limit = limit
        self._pending: list[Event] | None = None
        self.charge_record: Charge | None = None

    def check(self, events: Sequence[Event]) -> float:
        """Dry run: raises BudgetExceededError if the events do not fit."""
        return self.ledger.check(self.dataset_id, events, self.limit, unit=self.unit)

    def charge(self, events: Sequence[Event], budget: Budget, *, lineage: dict | None = None) -> Charge:
        """Records the release's events (and its input ``lineage``) durably; afterwards noise may be drawn."""
        if self.charge_record is not None:
            raise RuntimeError("a release is charged once")
        self.charge_record = self.ledger.charge(
            release_id=self.release_id,
            dataset_id=self.dataset_id,
            request_sha256=self.request_sha256,
            events=events,
            budget=budget,
            limit=self.limit,
            unit=self.unit,
            lineage=lineage,
        )
        self._pending = list(events)
        return self.charge_record

    def _consume(self, kind: type, scale: float, sensitivity: float) -> None:
        """Uses up the first pending event of ``kind`` whose noise multiplier ≤ scale/Δ."""
        if self._pending is None:
            raise UnchargedNoiseError("noise requested before the release was charged")
        if not (sensitivity > 0):
            raise ValueError(f"sensitivity must be positive, got {sensitivity}")
        z = scale / sensitivity
        for idx, ev in enumerate(self._pending):
            if isinstance(ev, kind) and z >= ev.noise_multiplier * (1 - 1e-12):
                del self._pending[idx]
                return
        raise UnchargedNoiseError(
            f"no charged {kind.__name__} covers scale/sensitivity = {z:.6g} (pending: {self._pending})"
        )

    def randomness(self, event: Event) -> NoiseSampler:
        """Uses up the charged ``event`` and returns the sampler for its randomness.

        For mechanisms whose randomness is not additive noise on a vector
        (Wishart matrices, JL projections keyed per partition): they draw from
        the returned sampler (``standard_normal``, ``key``) only after this call.
        """
        if self._pending is None:
            raise UnchargedNoiseError("randomness requested before the release was charged")
        for idx, ev in enumerate(self._pending):
            if ev == event:
                del self._pending[idx]
                return self.sampler
        raise UnchargedNoiseError(f"event {event!r} was not charged (pending: {self._pending})")

    def laplace(self, values: np.ndarray, *, scale: float, l1_sensitivity: float) -> np.ndarray:
        """``values`` + Laplace noise of scale b, covered by a charged LaplaceEvent."""
        self._consume(LaplaceEvent, scale, l1_sensitivity)
        return self.sampler.laplace(np.asarray(values, dtype=np.float64).reshape(-1), scale, l1_sensitivity).reshape(
            np.shape(values)
        )

    def gaussian(self, values: np.ndarray, *, sigma: float, l2_sensitivity: float) -> np.ndarray:
        """``values`` + Gaussian noise of scale σ, covered by a charged event."""
        self._consume(GaussianEvent, sigma, l2_sensitivity)
        return self.sampler.gaussian(np.asarray(values, dtype=np.float64).reshape(-1), sigma, l2_sensitivity).reshape(
            np.shape(values)
        )

    def gaussian_symmetric(self, matrix: np.ndarray, *, sigma: float, l2_sensitivity: float) -> np.ndarray:
        """Noises the upper triangle (with diagonal) of a symmetric matrix and mirrors it.

        ``l2_sensitivity`` bounds the change of the upper-triangle vector.
        """
        matrix = np.asarray(matrix, dtype=np.float64)
        if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
            raise ValueError(f"expected a square matrix, got shape {matrix.shape}")
        iu = np.triu_indices(matrix.shape[0])
        noisy_upper = self.gaussian(matrix[iu], sigma=sigma, l2_sensitivity=l2_sensitivity)
        out = np.zeros_like(matrix)
        out[iu] = noisy_upper
        out = out + np.triu(out, 1).T
        return out

    @property
    def unused_events(self) -> list[Event]:
        return list(self._pending or [])
