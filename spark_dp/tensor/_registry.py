"""The tensor mechanisms as a registry: each mechanism module declares one :class:`TensorMechanismSpec`.

A spec says which inputs the mechanism takes (an explicit tensor, DataFrame
rows, or both) and, on each, how it plans its privacy events from public
parameters (:class:`TensorRequest` → :class:`~spark_dp.tensor.private.PrivatePlan`;
none for a mechanism that is not private), what it adds to the manifest's
privacy fields, and the algorithm it runs. The family API and the config
task look mechanisms up in :data:`spark_dp.tensor.mechanisms.REGISTRY` and
never compare names; adding a mechanism is one module with one spec plus
one line there. No pyspark.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TensorRequest:
    """The public parameters a tensor release is planned from (validated by the family API or the config)."""

    epsilon: float | None
    delta: float | None
    k: int
    L: int
    R: int
    calibration: str = "exact"
    entry_scale: float = 1.0  # explicit tensors: c of the tensor_entry relation
    norm_bound: float | None = None  # rows: B
    mode: str = "fresh"  # rows: fresh or reuse passes
    neighbors: str = "add_remove"
    max_rows_per_unit: int = 1
    whiten: bool = False  # rows: whiten by the second moment first
    rows_per_round: int | None = None  # rows: public n dividing the per-pass sums


@dataclass(frozen=True)
class OnInput:
    """A mechanism on one kind of input.

    Attributes:
        plan: ``plan(request) -> PrivatePlan`` (the events, σ, calibration;
            raises ConfigError naming a parameter); None: not private.
        run: the algorithm. Explicit tensor: ``run(T, request, plan,
            chokepoint, rng) -> TensorDecomposition``. Rows: ``run(moments, d,
            request, plan, chokepoint, rng)`` with ``moments(U, pass_index)``
            the exact per-pass sums. ``plan`` and ``chokepoint`` are None for
            a mechanism that is not private; ``rng`` draws the random starts
            only (never privacy noise).
        run_whitened: rows only: ``run_whitened(moments, m2_sum, n, request,
            plan, chokepoint, rng) -> WhitenedDecomposition`` with the exact
            Σxxᵀ and row count (``whiten=True``); None: no whitened variant.
        privacy: ``privacy(plan, request) -> dict``: the manifest's
            mechanism-specific privacy fields (sensitivity, noise family and
            scale, …); private only.
        uncertainty: ``uncertainty(decomposition, request, plan, level) ->
            {array: Uncertainty}``: the released arrays' error bars
            (post-processing of the release and public parameters); None:
            the mechanism states none.
    """

    plan: Callable[[TensorRequest], Any] | None
    run: Callable[..., Any]
    run_whitened: Callable[..., Any] | None = None
    privacy: Callable[[Any, TensorRequest], dict] | None = None
    uncertainty: Callable[..., dict] | None = None


@dataclass(frozen=True)
class TensorMechanismSpec:
    """One tensor mechanism: its name and what it does on each input it takes (None: not on that input)."""

    name: str
    explicit: OnInput | None = None
    rows: OnInput | None = None

    @property
    def private(self) -> bool:
        """Whether it plans privacy events (on every input it takes)."""
        return any(on is not None and on.plan is not None for on in (self.explicit, self.rows))

    def on(self, explicit: bool) -> OnInput | None:
        """Its entry for an explicit tensor (``explicit``) or for rows; None if it does not take that input."""
        return self.explicit if explicit else self.rows
