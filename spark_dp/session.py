"""The Python API for notebooks and jobs: a session bound to a dataset and a ledger.

Example::

    import spark_dp
    dp = spark_dp.DPSession("sales.customers", ledger="sqlite:///releases/ledger.db",
                            epsilon_limit=10.0, delta_limit=1e-5, output="releases")
    rel = dp.second_moment(df, ["x1", "x2", "x3"], epsilon=1.0, delta=1e-6, norm_bound=1.0)
    rel["matrix"], rel.privacy, dp.budget()

Every release follows the same path: validate → (release id seen before?
return it) → dry-run the budget → exact aggregate on Spark → charge the ledger
→ noise through the chokepoint → write atomically → record it as written.
"""

from __future__ import annotations

import functools
import inspect
import logging
import sys
import os
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import numpy as np

from spark_dp import _validation as V
from spark_dp._version import __version__
from spark_dp.errors import ConfigError, ReleaseConflictError
from spark_dp.privacy import Budget, Chokepoint, NoiseSampler, make_sampler, open_ledger
from spark_dp.privacy.events import Event, event_to_dict
from spark_dp.privacy.noise import SAMPLERS
from spark_dp.privacy.ledger import DatasetStatus, UnitDeclaration
from spark_dp.release import MANIFEST_SCHEMA_VERSION, Release, load_release, write_release
from spark_dp.release.ids import canonical_sha256, check_release_id, new_release_id
from spark_dp.second_moment.api import linear_regression as _linear_regression
from spark_dp.second_moment.api import pca as _pca
from spark_dp.second_moment.api import second_moment as _second_moment
from spark_dp.sketch.api import count_sketch as _count_sketch
from spark_dp.tensor.api import tensor_decomposition as _tensor_decomposition

log = logging.getLogger("spark_dp")


def _as_method(fn: Callable[..., Release]) -> Callable[..., Release]:
    """``fn(session, ...)`` as a DPSession method with ``fn``'s own signature and docstring (help(), IDEs)."""

    module, name = fn.__module__, fn.__name__

    @functools.wraps(fn)
    def method(self: DPSession, *args: Any, **kwargs: Any) -> Release:
        # Looked up at call time: the method is a thin wrapper over whatever the family module holds.
        return getattr(sys.modules[module], name)(self, *args, **kwargs)

    sig = inspect.signature(fn)
    first, *rest = sig.parameters.values()
    method.__signature__ = sig.replace(parameters=[first.replace(name="self"), *rest])  # type: ignore[attr-defined]
    return method


def unit_of(privacy: dict[str, Any]) -> UnitDeclaration:
    """The privacy unit a release protects, from its manifest ``privacy`` fields.

    Every family records ``neighbors``, ``privacy_unit`` (rows) and the
    per-unit bound (``max_rows_per_unit`` or the sketches' ``max_items_per_unit``).
    """
    if "neighbors" not in privacy:
        raise RuntimeError("bug: a release's privacy fields must state its neighbour relation")
    neighbors = str(privacy["neighbors"])
    unit = privacy.get("privacy_unit") or ("tensor_entry" if neighbors == "tensor_entry" else "row")
    m = privacy.get("max_rows_per_unit", privacy.get("max_items_per_unit")) or 1
    return UnitDeclaration(str(unit), int(m), neighbors)


class DPSession:
    """Releases about one dataset, charged to one ledger.

    Args:
        dataset_id: the name the ledger charges (e.g. ``sales.customers``).
        ledger: ledger URI, ``sqlite:///path.db`` (relative) or
            ``sqlite:////abs/path.db``.
        epsilon_limit, delta_limit: the dataset's total budget; required the
            first time a dataset is seen, and must match afterwards.
        output: directory under which releases are written.
        lifetime_limit: ``(epsilon, delta)`` (or a Budget): a lifetime cap over
            every period of the dataset. A dataset id ``sales@2026-11-30`` is a
            period of ``sales``; the cap is registered for ``sales`` when the
            session opens (a different cap already registered is refused) and
            every charge on any period checks the exact composition of all
            periods' events against it.
        sampler: ``secure`` (default), ``numpy`` (faster, floating-point
            attackable), or a :class:`~spark_dp.privacy.NoiseSampler` (a
            seeded one marks releases not private; tests only).
    """

    def __init__(
        self,
        dataset_id: str,
        *,
        ledger: str = "sqlite:///releases/ledger.db",
        epsilon_limit: float | None = None,
        delta_limit: float | None = None,
        output: str = "releases",
        sampler: str | NoiseSampler = "secure",
        lifetime_limit: Budget | tuple[float, float] | None = None,
    ) -> None:
        owner = "DPSession"
        self.dataset_id = V.check_str("dataset_id", dataset_id, owner=owner)
        self.ledger_uri = V.check_str("ledger", ledger, owner=owner)
        if (epsilon_limit is None) != (delta_limit is None):
            raise ConfigError("Give both 'epsilon_limit' and 'delta_limit', or neither.")
        self.limit = None
        if epsilon_limit is not None:
            self.limit = Budget(
                V.check_real("epsilon_limit", epsilon_limit, owner=owner, low=0, low_open=True),
                V.check_real("delta_limit", delta_limit, owner=owner, low=0, high=1, low_open=True, high_open=True),
            )
        self.output = V.check_str("output", output, owner=owner)
        if isinstance(sampler, str):
            V.check_option("sampler", sampler, SAMPLERS, owner=owner)
        self.sampler = make_sampler(sampler)
        self.ledger = open_ledger(self.ledger_uri)
        self.lifetime_limit = None
        if lifetime_limit is not None:
            lt = (lifetime_limit.epsilon, lifetime_limit.delta) if isinstance(lifetime_limit, Budget) else lifetime_limit
            if not isinstance(lt, (tuple, list)) or len(lt) != 2:
                raise ConfigError(f"The 'lifetime_limit' parameter of DPSession must be (epsilon, delta). "
                                  f"Got {lifetime_limit!r} instead.")
            self.lifetime_limit = self.ledger.ensure_lifetime_limit(self.dataset_id, Budget(
                V.check_real("lifetime_limit epsilon", lt[0], owner=owner, low=0, low_open=True),
                V.check_real("lifetime_limit delta", lt[1], owner=owner, low=0, high=1, low_open=True, high_open=True),
            ))

    # -- budget ------------------------------------------------------------
    def budget(self) -> DatasetStatus | None:
        """Spent and remaining ε of this dataset (None before its first release)."""
        rows = self.ledger.status(self.dataset_id)
        return rows[0] if rows else None

    # -- tasks: the family functions, bound with their real signatures -------
    second_moment = _as_method(_second_moment)
    linear_regression = _as_method(_linear_regression)
    pca = _as_method(_pca)
    count_sketch = _as_method(_count_sketch)
    tensor_decomposition = _as_method(_tensor_decomposition)

    # -- the one release path -------------------------------------------------
    def run_release(
        self,
        *,
        task: str,
        mechanism: str,
        release_id: str | None,
        request: dict[str, Any],
        events: list[Event],
        budget: Budget,
        compute: Callable[[], Any],
        noise: Callable[[Any, Chokepoint], dict[str, np.ndarray]],
        privacy: dict[str, Any],
        extra: dict[str, Any],
        config_sha256: str | None,
    ) -> Release:
        """The one release path every task uses (the families' extension point).

        Order: release id seen before → stored release; dry-run ``events``
        against the budget (raises before any Spark work); ``compute()`` the
        exact summary; charge ``events``; ``noise(exact, chokepoint)`` returns
        the payload arrays, drawing only through the chokepoint; write
        atomically; record as written.

        Args:
            task, mechanism: names recorded in the manifest.
            release_id: idempotency key (None: a new one).
            request: everything that defines the release (hashed; a re-run
                with the same id must hash the same).
            events: the privacy events of the whole release, all charged at once.
            budget: the (ε, δ) the release claims.
            compute: computes the exact summary (Spark work happens here).
            noise: turns the summary into payload arrays via the chokepoint;
                every charged event must be used.
            privacy: manifest ``privacy`` fields (neighbours, sensitivity, σ…).
            extra: further manifest fields (``params``, ``columns``, ``policies``…).
            config_sha256: digest of the job config, if run from one.
        """
        rid = new_release_id(task) if release_id is None else check_release_id(release_id, owner=task)
        request_sha = canonical_sha256(request)

        existing = self.ledger.lookup(rid)
        if existing is not None:
            return self._existing(existing, request_sha=request_sha)

        cp = Chokepoint(
            self.ledger, dataset_id=self.dataset_id, release_id=rid, request_sha256=request_sha,
            sampler=self.sampler, limit=self.limit, unit=unit_of(privacy),
        )
        cp.check(events)  # over budget → raises here, before any Spark work
        exact = compute()
        charge = cp.charge(events, budget)
        log.info("release %s: charged epsilon=%g delta=%g to dataset %s (ledger entry %d)",
                 rid, budget.epsilon, budget.delta, self.dataset_id, charge.seq)
        arrays = noise(exact, cp)
        del exact
        if cp.unused_events:
            raise RuntimeError(f"bug: charged events were not used: {cp.unused_events}")
        manifest = {
            "schema_version": MANIFEST_SCHEMA_VERSION,
            "release_id": rid,
            "dataset_id": self.dataset_id,
            "task": task,
            "mechanism": mechanism,
            **extra,
            "privacy": {
                **privacy,
                "sampler": self.sampler.name,
                "private": self.sampler.private,
                "events": [event_to_dict(e) for e in events],
                "ledger_entry": charge.seq,
                "dataset_limit": (self.limit or self.ledger.ensure_dataset(self.dataset_id, None)).to_dict(),
            },
            "request_sha256": request_sha,
            "config_sha256": config_sha256,
            "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "library_version": __version__,
        }
        release = Release(release_id=rid, arrays=arrays, manifest=manifest)
        path = write_release(release, self.output)
        self.ledger.mark_written(rid, path)
        log.info("release %s written to %s", rid, path)
        return release

    def stored_release(self, release_id: str, *, config_sha256: str | None = None) -> Release | None:
        """The stored release for ``release_id`` (None if the id was never charged).

        Lets a job answer a re-run from the ledger without starting Spark.
        Raises ReleaseConflictError if the id belongs to another dataset or
        config, or was charged but never written.
        """
        charge = self.ledger.lookup(release_id)
        if charge is None:
            return None
        return self._existing(charge, config_sha256=config_sha256)

    def _existing(self, charge, *, request_sha: str | None = None, config_sha256: str | None = None) -> Release:
        def conflict() -> ReleaseConflictError:
            return ReleaseConflictError(
                f"Release id {charge.release_id!r} was used for a different request "
                f"(dataset {charge.dataset_id!r}); choose a new release id."
            )

        if charge.dataset_id != self.dataset_id or (request_sha is not None and charge.request_sha256 != request_sha):
            raise conflict()
        location = charge.location
        if location is None:
            # Crash between the atomic rename and the ledger's 'written' row:
            # the complete release is there; record it now.
            candidate = os.path.join(self.output, charge.release_id)
            if os.path.isfile(os.path.join(candidate, "manifest.json")) and (
                load_release(candidate).manifest.get("request_sha256") == charge.request_sha256
            ):
                self.ledger.mark_written(charge.release_id, candidate)
                location = candidate
        if location is None or not os.path.isfile(os.path.join(location, "manifest.json")):
            raise ReleaseConflictError(
                f"Release id {charge.release_id!r} was charged (epsilon={charge.budget.epsilon:g}, "
                f"delta={charge.budget.delta:g}) but its release was never written; the charge stands. "
                "Use a new release id."
            )
        release = load_release(location)
        if config_sha256 is not None and release.manifest.get("config_sha256") != config_sha256:
            raise conflict()
        release.reused = True
        log.info("release %s exists at %s: returning it (no new noise, no new charge)", charge.release_id, location)
        return release
