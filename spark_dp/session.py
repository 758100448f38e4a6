"""The Python API for notebooks and jobs: a session bound to a dataset and a ledger.

Example::

    import spark_dp
    dp = spark_dp.DPSession("sales.customers", ledger="sqlite:///releases/ledger.db",
                            epsilon_limit=10.0, delta_limit=1e-5, output="releases")
    rel = dp.second_moment(df, ["x1", "x2", "x3"], epsilon=1.0, delta=1e-6, norm_bound=1.0)
    rel["matrix"], rel.privacy, dp.budget()

Every family function validates its request, builds one
:class:`~spark_dp.release.pipeline.ReleasePlan` and hands it to
:func:`~spark_dp.release.pipeline.run_release`: (release id seen before?
return it) → dry-run the budget → exact aggregate on Spark → charge the ledger
→ noise through the chokepoint → write atomically → record it as written.
This module is a thin façade over the family APIs; nothing imports it back.
"""

from __future__ import annotations

import functools
import inspect
import logging
import sys
from collections.abc import Callable
from typing import Any

from spark_dp import _validation as V
from spark_dp.errors import ConfigError
from spark_dp.privacy import Budget, NoiseSampler, make_sampler, open_ledger
from spark_dp.privacy.ledger import DatasetStatus
from spark_dp.privacy.noise import SAMPLERS
from spark_dp.release import Release
from spark_dp.release.pipeline import stored_release
from spark_dp.release.preview import Preview, dry_run
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


def _as_preview(fn: Callable[..., Release]) -> Callable[..., Preview]:
    """``fn(session, ...)`` as a :class:`SessionPreview` method: same signature plus ``n``, returning a Preview."""
    module, name = fn.__module__, fn.__name__

    @functools.wraps(fn)
    def method(self: SessionPreview, *args: Any, n: int | None = None, **kwargs: Any) -> Preview:
        return self._run(getattr(sys.modules[module], name), args, kwargs, n)

    sig = inspect.signature(fn)
    first, *rest = sig.parameters.values()
    n_param = inspect.Parameter("n", inspect.Parameter.KEYWORD_ONLY, default=None, annotation="int | None")
    method.__signature__ = sig.replace(  # type: ignore[attr-defined]
        parameters=[first.replace(name="self"), *rest, n_param], return_annotation="Preview")
    method.__doc__ = (f"Dry run of :meth:`DPSession.{name}`: the same arguments, plus ``n`` (a guess of the "
                      "number of rows for the accuracy prediction). Reads no data, charges and writes "
                      f"nothing; returns a :class:`~spark_dp.release.preview.Preview`.\n\n{fn.__doc__ or ''}")
    return method


class SessionPreview:
    """``dp.preview``: every release call as a dry run that reads no data and spends nothing.

    Either the family function by name, with the release's own arguments::

        p = dp.preview.linear_regression(df, ["x1", "x2"], "y", epsilon=1.0, delta=1e-6, norm_bound=3.0, n=50_000)

    or any release call of the session, wrapped::

        p = dp.preview(dp.linear_regression, df, ["x1", "x2"], "y", epsilon=1.0, delta=1e-6, norm_bound=3.0)

    The request is validated exactly as the release validates it (a bad one
    raises the same error); the plan — events, σ, sensitivity — is the one the
    release would use. A refusal (over budget…) is reported in the preview
    (``would_refuse``, ``reason``), not raised. No Spark job runs (the
    DataFrame's schema is read, never its rows); the ledger is only read.
    ``n``: your guess of the number of rows (or units), for the accuracy
    prediction; without it, regressions get a table over n.
    """

    def __init__(self, session: DPSession) -> None:
        self._session = session

    def __call__(self, release: Callable[..., Release], /, *args: Any, n: int | None = None, **kwargs: Any) -> Preview:
        """Dry run of ``release(*args, **kwargs)``: a release method of this session (or a family function)."""
        owner = getattr(release, "__self__", None)
        if owner is not None:
            if owner is not self._session:
                raise ConfigError("The 'release' parameter of preview must be a release method of this session "
                                  f"(e.g. dp.linear_regression). Got {release!r} instead.")
            release = getattr(type(owner), release.__name__)
        if not callable(release) or getattr(release, "__name__", None) not in _FAMILIES:
            raise ConfigError(f"The 'release' parameter of preview must be one of the session's release methods "
                              f"{sorted(_FAMILIES)}. Got {release!r} instead.")
        return getattr(self, release.__name__)(*args, n=n, **kwargs)

    def _run(self, fn: Callable[..., Any], args: tuple, kwargs: dict, n: int | None) -> Preview:
        with dry_run(n=n):
            out = fn(self._session, *args, **kwargs)
        if not isinstance(out, Preview):
            raise RuntimeError(f"bug: {fn.__name__} did not reach the release pipeline in a dry run")
        return out

    second_moment = _as_preview(_second_moment)
    linear_regression = _as_preview(_linear_regression)
    pca = _as_preview(_pca)
    count_sketch = _as_preview(_count_sketch)
    tensor_decomposition = _as_preview(_tensor_decomposition)


_FAMILIES = frozenset({"second_moment", "linear_regression", "pca", "count_sketch", "tensor_decomposition"})


class DPSession:
    """Releases about one dataset, charged to one ledger.

    Args:
        dataset_id: the name the ledger charges (e.g. ``sales.customers``).
        ledger: ledger URI, ``sqlite:///path.db`` (relative) or
            ``sqlite:////abs/path.db``.
        epsilon_limit, delta_limit: the dataset's total budget; required the
            first time a dataset is seen (the first release registers it),
            optional afterwards. A limit other than the one the ledger holds
            is refused here (ConfigError), never ignored: the ledger's limit
            changes only explicitly (``session.ledger.set_limit`` or
            ``spark-dp ledger --set-limit``, both recorded).
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
        if self.limit is not None:  # another limit than the ledger's is refused now, not at some later release
            self.ledger.check_limit(self.dataset_id, self.limit)
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

    @property
    def preview(self) -> SessionPreview:
        """Dry runs of this session's releases: cost and predicted accuracy, nothing read or spent (:class:`SessionPreview`)."""
        return SessionPreview(self)

    def stored_release(self, release_id: str, *, config_sha256: str | None = None) -> Release | None:
        """The stored release for ``release_id`` (None if the id was never charged).

        Lets a job answer a re-run from the ledger without starting Spark.
        Raises ReleaseConflictError if the id belongs to another dataset or
        config, or was charged but never written.
        """
        charge = self.ledger.lookup(release_id)
        if charge is None:
            return None
        return stored_release(self, charge, config_sha256=config_sha256)
