"""The registry of job tasks: what each task accepts and how it runs.

A task is declared once, in its own module, as a :class:`TaskSpec`; the
config validator and the job runner read only this registry. Families add a
module to ``_TASK_MODULES``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spark_dp.cli.config import JobConfig
    from spark_dp.privacy.events import Event
    from spark_dp.release import Release

Validator = Callable[[str, Any], Any]


@dataclass(frozen=True)
class TaskSpec:
    """One job task.

    Attributes:
        name: the config's ``task``.
        mechanisms: accepted values of ``mechanism``.
        params: ``params`` keys → validator ``(qualified_key, value) -> value``
            raising ConfigError with the key in its message.
        plan: the privacy events of a release, from the config alone (used for
            the budget dry run before Spark starts).
        run: ``run(session, config, spark_or_None, **extra) -> Release``; reads
            the dataset itself (``spark`` is None for tasks that need no
            Spark). ``extra`` holds run-time options a task accepts beyond its
            config (count_sketch: ``seeds``); others reject any.
        dataset_keys: extra keys allowed in ``dataset`` (validators), on top of
            the common ones; their values land in ``config.dataset.extra``.
        privacy_keys: extra keys allowed in ``privacy`` (validators), in
            ``config.privacy.extra``.
        requires_norm_bound: whether ``privacy.norm_bound`` is required.
        norm_bound_auto: whether ``privacy.norm_bound`` may be ``auto``
            (chosen privately from the data; second-moment family).
        formats: accepted ``dataset.format`` values (None: the Spark formats).
        neighbors: accepted ``privacy.neighbors`` values.
        needs_spark: whether ``run`` needs a SparkSession.
        check: optional cross-key validation ``check(config)``, run before Spark.
        renamed_keys: deprecated config keys → their new names, per section
            (``{"dataset": {"max_items_per_unit": "max_rows_per_unit"}}``):
            still accepted for one minor version, with a
            :class:`~spark_dp.errors.SparkDPDeprecationWarning` naming the new key.
    """

    name: str
    mechanisms: tuple[str, ...]
    params: dict[str, Validator]
    plan: Callable[[JobConfig], list[Event]]
    run: Callable[..., Release]
    dataset_keys: dict[str, Validator] = field(default_factory=dict)
    privacy_keys: dict[str, Validator] = field(default_factory=dict)
    requires_norm_bound: bool = True
    norm_bound_auto: bool = False
    formats: tuple[str, ...] | None = None
    neighbors: tuple[str, ...] = ("add_remove", "replace")
    needs_spark: bool = True
    check: Callable[[JobConfig], None] | None = None
    renamed_keys: dict[str, dict[str, str]] = field(default_factory=dict)


_TASK_MODULES = ("spark_dp.cli.task_second_moment", "spark_dp.cli.task_tensor", "spark_dp.cli.task_count_sketch")
_REGISTRY: dict[str, TaskSpec] = {}


def register(spec: TaskSpec) -> TaskSpec:
    """Adds ``spec`` to the registry (each task module calls it once, at import)."""
    _REGISTRY[spec.name] = spec
    return spec


def tasks() -> dict[str, TaskSpec]:
    """All registered tasks by name (imports the task modules once)."""
    if not _REGISTRY:
        for mod in _TASK_MODULES:
            importlib.import_module(mod)
    return _REGISTRY
