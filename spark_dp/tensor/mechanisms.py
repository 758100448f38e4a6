"""The tensor family's mechanism registry: one line per mechanism (no pyspark).

Each mechanism module declares a :class:`~spark_dp.tensor._registry.TensorMechanismSpec`:
the inputs it takes, its plan of events from public parameters on each, its
manifest fields and its algorithm (see the table in :mod:`spark_dp.tensor.api`).
The API and the config task look mechanisms up here.
"""

from __future__ import annotations

from spark_dp import params as P
from spark_dp.tensor._registry import OnInput, TensorMechanismSpec, TensorRequest
from spark_dp.tensor.input_perturbation import INPUT_PERTURBATION
from spark_dp.tensor.online import ONLINE_POWER_METHOD
from spark_dp.tensor.power_method import POWER_METHOD
from spark_dp.tensor.private import CALIBRATIONS, MODES, PRIVATE_POWER_METHOD

# The registry: one line per mechanism; each module declares its inputs, plans and algorithm.
REGISTRY: dict[str, TensorMechanismSpec] = {spec.name: spec for spec in (
    POWER_METHOD, ONLINE_POWER_METHOD, PRIVATE_POWER_METHOD, INPUT_PERTURBATION,
)}
TENSOR_MECHANISMS = tuple(REGISTRY)
TENSOR_NEIGHBORS = ("add_remove", "replace", "tensor_entry")
EXPLICIT_ONLY = tuple(n for n, s in REGISTRY.items() if s.rows is None)  # an explicit tensor only
ROWS_ONLY = tuple(n for n, s in REGISTRY.items() if s.explicit is None)  # DataFrame rows only
PRIVATE = tuple(n for n, s in REGISTRY.items() if s.private)
#: The family's own parameters (API keyword → constraint), checked by the API and the config task alike.
PARAMS = P.Constraints({
    "calibration": P.Options(CALIBRATIONS),
    "mode": P.Options(MODES),
    # Speed only (not part of the request): cap of each Python worker's block cache when reuse-mode passes
    # read Parquet files in the tasks; 0 = off.
    "worker_cache_bytes": P.Int(0),
    "clear_worker_cache": P.Bool(),
    "private": P.Bool(nullable=True),  # the explicit opt-in private=False (configs: privacy.mode none)
})


def on_input(mechanism: str, *, explicit: bool) -> OnInput | None:
    """``mechanism``'s entry for an explicit tensor or for rows (None: it does not take that input)."""
    return REGISTRY[mechanism].on(explicit)


def plan_events(mechanism: str, request: TensorRequest, *, explicit: bool) -> list:
    """The privacy events of a release from public parameters ([] for a mechanism that is not private)."""
    on = on_input(mechanism, explicit=explicit)
    return [] if on is None or on.plan is None else list(on.plan(request).events)
