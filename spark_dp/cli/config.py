"""Job configs (YAML): parsed and fully validated before Spark starts.

Unknown keys and bad values raise :class:`~spark_dp.errors.ConfigError`
naming the key, e.g. ``The 'privacy.epsilon' parameter of the config must be
a float in the range (0, inf). Got -1 instead.``
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from spark_dp import _validation as V
from spark_dp import params as P
from spark_dp.cli.tasks import tasks
from spark_dp.errors import ConfigError
from spark_dp.params import FORMATS, TABLE, check_path_exists, check_table_name
from spark_dp.privacy.noise import SAMPLERS
from spark_dp.release.ids import canonical_sha256, check_release_id

OWNER = "the config"
TOP_KEYS = ("release_id", "dataset", "task", "mechanism", "privacy", "params", "ledger", "output")
REQUIRED_TOP = ("dataset", "task", "mechanism", "privacy", "ledger", "output")
DATASET_KEYS = ("id", "path", "table", "where", "format", "columns", "dimension", "privacy_unit", "max_rows_per_unit", "nonfinite", "options")
PRIVACY_KEYS = ("epsilon", "delta", "norm_bound", "neighbors", "sampler", "mode")
# privacy.mode: "dp" (default) or "none" — the explicit opt-in for a non-private
# mechanism on the dataset's rows (tensor online_power_method); see tensor.api.
PRIVACY_MODES = ("dp", "none")
LEDGER_KEYS = ("uri", "epsilon_limit", "delta_limit", "lifetime_epsilon_limit", "lifetime_delta_limit")
OUTPUT_KEYS = ("path", "format", "table")
TABLE_FORMATS = ("parquet", "delta")
LARGE_EPSILON = 5.0


def _section(raw: dict, name: str, keys: tuple[str, ...], required: tuple[str, ...]) -> dict:  # noqa: D401
    sec = raw.get(name)
    if not isinstance(sec, dict):
        raise ConfigError(f"The {name!r} section of the config must be a mapping. Got {sec!r} instead.")
    unknown = sorted(set(sec) - set(keys))
    if unknown:
        raise ConfigError(f"Unknown key '{name}.{unknown[0]}' in the config; expected one of {sorted(keys)}.")
    for k in required:
        if sec.get(k) is None:
            raise ConfigError(f"Missing required key '{name}.{k}' in the config.")
    return sec


def _renamed(raw: dict, spec) -> dict:
    """``raw`` with the task's deprecated keys renamed (each with a warning naming the new key)."""
    out = dict(raw)
    for section, renames in spec.renamed_keys.items():
        if isinstance(out.get(section), dict):
            out[section] = V.rename_keys(out[section], renames, prefix=section, owner=OWNER)
    return out


@dataclass(frozen=True)
class DatasetConfig:
    """The ``dataset`` section.

    A catalog table (``dataset.table``, optional ``dataset.where``) is
    represented as ``path`` = the table name and ``format`` = ``"table"``
    with ``options`` = ``{"where": …}``, which
    :func:`spark_dp.aggregates.read_dataset` understands, so every task reads
    tables without knowing about them.
    """

    id: str
    path: str
    format: str
    columns: tuple[str, ...]
    dimension: int | None = None
    privacy_unit: str | None = None
    max_rows_per_unit: int = 1
    nonfinite: str = "drop"
    options: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)  # task-specific keys (TaskSpec.dataset_keys)

    @property
    def table(self) -> str | None:
        """The catalog table name, or None for files."""
        return self.path if self.format == TABLE else None

    @property
    def where(self) -> str | None:
        """The table's row filter (SQL), or None."""
        return self.options.get("where") if self.format == TABLE else None


def _dataset_source(ds: dict, spec) -> tuple[str, str, dict]:
    """(path, format, options) of the dataset: files, or a catalog table (exactly one of path/table)."""
    has_path, has_table = ds.get("path") is not None, ds.get("table") is not None
    if has_path == has_table:
        raise ConfigError("Give exactly one of 'dataset.path' and 'dataset.table' in the config."
                          if has_path else "Missing required key 'dataset.path' (or 'dataset.table') in the config.")
    if not has_table:
        if ds.get("where") is not None:
            raise ConfigError("The 'dataset.where' parameter applies to 'dataset.table' only; filter files upstream.")
        path = V.check_str("dataset.path", ds["path"], owner=OWNER)
        fmt = V.check_option("dataset.format", ds.get("format", "parquet"), spec.formats or FORMATS, owner=OWNER)
        return path, fmt, {}
    if spec.formats is not None and "parquet" not in spec.formats:
        raise ConfigError(f"The 'dataset.table' parameter is not supported for task {spec.name!r}.")
    for key in ("format", "options"):
        if ds.get(key) is not None:
            raise ConfigError(f"The 'dataset.{key}' parameter does not apply to 'dataset.table'; remove it.")
    table = check_table_name(V.check_str("dataset.table", ds["table"], owner=OWNER))
    where = ds.get("where")
    if where is not None:
        where = V.check_str("dataset.where", where, owner=OWNER)
    return table, TABLE, ({"where": where} if where else {})


@dataclass(frozen=True)
class PrivacyConfig:
    """The ``privacy`` section: ε, δ, the norm bound, neighbours, sampler, mode (``dp`` or ``none``)."""

    epsilon: float | None  # None only with mode "none"
    delta: float | None
    norm_bound: float | str | None  # "auto" where the task allows it (TaskSpec.norm_bound_auto)
    neighbors: str = "add_remove"
    sampler: str = "secure"
    extra: dict = field(default_factory=dict)  # task-specific keys (TaskSpec.privacy_keys)
    mode: str = "dp"


@dataclass(frozen=True)
class LedgerConfig:
    """The ``ledger`` section: its URI, the dataset's total budget (set on first use), and ``lifetime_*``: a cap
    over every period of the dataset (``<id>@<period>``).
    """

    uri: str
    epsilon_limit: float | None = None
    delta_limit: float | None = None
    lifetime_epsilon_limit: float | None = None
    lifetime_delta_limit: float | None = None


@dataclass(frozen=True)
class OutputConfig:
    """The ``output`` section: the release directory root (always), and optionally a warehouse table.

    ``format`` is the table's format (``parquet`` or ``delta``); the release
    directory is always Parquet + manifest.json.
    """

    path: str
    format: str = "parquet"
    table: str | None = None


@dataclass(frozen=True)
class JobConfig:
    """A validated job config; ``sha256`` is the digest of the config as written (release idempotency)."""

    release_id: str | None
    dataset: DatasetConfig
    task: str
    mechanism: str
    privacy: PrivacyConfig
    params: dict
    ledger: LedgerConfig
    output: OutputConfig
    sha256: str

    @classmethod
    def from_dict(cls, raw: Any, *, check_paths: bool = True) -> JobConfig:
        """Validates a parsed config; raises ConfigError naming the first bad key."""
        if not isinstance(raw, dict):
            raise ConfigError(f"The config must be a mapping of keys to values. Got {type(raw).__name__} instead.")
        unknown = sorted(set(raw) - set(TOP_KEYS))
        if unknown:
            raise ConfigError(f"Unknown key {unknown[0]!r} in the config; expected one of {sorted(TOP_KEYS)}.")
        for k in REQUIRED_TOP:
            if raw.get(k) is None:
                raise ConfigError(f"Missing required key {k!r} in the config.")

        registry = tasks()
        task = V.check_option("task", raw["task"], registry, owner=OWNER)
        spec = registry[task]
        sha256 = canonical_sha256(raw)  # of the config as written: renaming keys keeps re-runs idempotent
        raw = _renamed(raw, spec)
        mechanism = V.check_option("mechanism", raw["mechanism"], spec.mechanisms, owner=OWNER)
        param_checks = spec.params

        explicit_tensor = isinstance(ds := raw.get("dataset"), dict) and ds.get("format") == "tensor"
        ds = _section(raw, "dataset", DATASET_KEYS + tuple(spec.dataset_keys),
                      ("id",) if explicit_tensor else ("id", "columns"))  # a .npy tensor has no columns
        source = _dataset_source(ds, spec)
        columns = ds.get("columns") or []
        if isinstance(columns, str):
            columns = [columns]
        if (not explicit_tensor or ds.get("columns") is not None) and (
            not isinstance(columns, list) or not columns or not all(isinstance(c, str) and c for c in columns)
        ):
            raise ConfigError(f"The 'dataset.columns' parameter must be a non-empty list of column names. Got {ds['columns']!r} instead.")
        options = ds.get("options") or {}
        if not isinstance(options, dict):
            raise ConfigError(f"The 'dataset.options' parameter must be a mapping. Got {options!r} instead.")
        dataset = DatasetConfig(
            id=V.check_str("dataset.id", ds["id"], owner=OWNER),
            path=source[0],
            format=source[1],
            columns=tuple(columns),
            dimension=P.check("dimension", ds.get("dimension"), owner=OWNER, key="dataset.dimension"),
            privacy_unit=P.check("privacy_unit", ds.get("privacy_unit"), owner=OWNER, key="dataset.privacy_unit"),
            max_rows_per_unit=P.check("max_rows_per_unit", ds.get("max_rows_per_unit", 1), owner=OWNER,
                                      key="dataset.max_rows_per_unit"),
            nonfinite=P.check("nonfinite", ds.get("nonfinite", "drop"), owner=OWNER, key="dataset.nonfinite"),
            options=source[2] if source[1] == TABLE else dict(options),
            extra={k: check(f"dataset.{k}", ds[k]) for k, check in spec.dataset_keys.items() if ds.get(k) is not None},
        )

        pmode = V.check_option("privacy.mode", (raw.get("privacy") or {}).get("mode", "dp")
                               if isinstance(raw.get("privacy"), dict) else "dp", PRIVACY_MODES, owner=OWNER)
        required = ("epsilon", "delta", "norm_bound") if spec.requires_norm_bound else ("epsilon", "delta")
        if pmode == "none":
            required = ()
        pv = _section(raw, "privacy", PRIVACY_KEYS + tuple(spec.privacy_keys), required)
        if pmode == "none":
            if task != "tensor_decomposition":
                raise ConfigError(f"The 'privacy.mode' parameter may be 'none' only for task 'tensor_decomposition' "
                                  f"(its non-private mechanisms). Got 'none' for task {task!r}.")
            for key in ("epsilon", "delta"):
                if pv.get(key) is not None:
                    raise ConfigError(f"The 'privacy.{key}' parameter has no meaning with 'privacy.mode: none' "
                                      "(nothing is private or charged); remove it.")
        privacy = PrivacyConfig(
            epsilon=None if pmode == "none" else P.check("epsilon", pv["epsilon"], owner=OWNER, key="privacy.epsilon"),
            delta=None if pmode == "none" else P.check("delta", pv["delta"], owner=OWNER, key="privacy.delta"),
            mode=pmode,
            norm_bound=None if pv.get("norm_bound") is None else P.check(
                "norm_bound_or_auto" if spec.norm_bound_auto else "norm_bound", pv["norm_bound"], owner=OWNER,
                key="privacy.norm_bound"),
            neighbors=V.check_option("privacy.neighbors", pv.get("neighbors", "add_remove"), spec.neighbors, owner=OWNER),
            sampler=V.check_option("privacy.sampler", pv.get("sampler", "secure"), SAMPLERS, owner=OWNER),
            extra={k: check(f"privacy.{k}", pv[k]) for k, check in spec.privacy_keys.items() if pv.get(k) is not None},
        )

        params = raw.get("params") or {}
        if not isinstance(params, dict):
            raise ConfigError(f"The 'params' section of the config must be a mapping. Got {params!r} instead.")
        for k in params:
            if k not in param_checks:
                raise ConfigError(
                    f"Unknown key 'params.{k}' for task {task!r}; expected one of {sorted(param_checks)}."
                )
        params = {k: param_checks[k](f"params.{k}", v) for k, v in params.items()}

        lg = _section(raw, "ledger", LEDGER_KEYS, ("uri",))
        if (lg.get("epsilon_limit") is None) != (lg.get("delta_limit") is None):
            raise ConfigError("Give both 'ledger.epsilon_limit' and 'ledger.delta_limit', or neither.")
        if (lg.get("lifetime_epsilon_limit") is None) != (lg.get("lifetime_delta_limit") is None):
            raise ConfigError("Give both 'ledger.lifetime_epsilon_limit' and 'ledger.lifetime_delta_limit', or neither.")
        ledger = LedgerConfig(
            uri=V.check_str("ledger.uri", lg["uri"], owner=OWNER),
            epsilon_limit=None if lg.get("epsilon_limit") is None else V.check_real(
                "ledger.epsilon_limit", lg["epsilon_limit"], owner=OWNER, low=0, low_open=True),
            delta_limit=None if lg.get("delta_limit") is None else V.check_real(
                "ledger.delta_limit", lg["delta_limit"], owner=OWNER, low=0, high=1, low_open=True, high_open=True),
            lifetime_epsilon_limit=None if lg.get("lifetime_epsilon_limit") is None else V.check_real(
                "ledger.lifetime_epsilon_limit", lg["lifetime_epsilon_limit"], owner=OWNER, low=0, low_open=True),
            lifetime_delta_limit=None if lg.get("lifetime_delta_limit") is None else V.check_real(
                "ledger.lifetime_delta_limit", lg["lifetime_delta_limit"], owner=OWNER, low=0, high=1, low_open=True,
                high_open=True),
        )
        for key in ("epsilon_limit", "lifetime_epsilon_limit"):
            if privacy.mode == "none" and getattr(ledger, key) is not None:
                raise ConfigError(f"The 'ledger.{key}' parameter must not be given with 'privacy.mode: none': a "
                                  "dataset with a privacy budget never gets non-private releases.")
        if "://" in ledger.uri and ledger.uri.split("://")[0] not in ("sqlite", "postgresql", "postgres"):
            raise ConfigError(
                f"The 'ledger.uri' parameter must be a sqlite:/// or postgresql:// URI, or a file path. Got {ledger.uri!r} instead."
            )

        out = _section(raw, "output", OUTPUT_KEYS, ("path",))
        out_table = None if out.get("table") is None else check_table_name(
            V.check_str("output.table", out["table"], owner=OWNER), key="output.table")
        output = OutputConfig(
            path=V.check_str("output.path", out["path"], owner=OWNER),
            format=V.check_option("output.format", out.get("format", "parquet"),
                                  TABLE_FORMATS if out_table else ("parquet",), owner=OWNER),
            table=out_table,
        )
        release_id = raw.get("release_id")
        if release_id is not None:
            release_id = check_release_id(release_id, owner=OWNER)
        if check_paths and dataset.format != TABLE:
            check_path_exists(dataset.path)
        config = cls(release_id, dataset, task, mechanism, privacy, dict(params), ledger, output, sha256)
        if spec.check is not None:
            spec.check(config)
        return config

    @property
    def spec(self):
        """The task's :class:`~spark_dp.cli.tasks.TaskSpec`."""
        return tasks()[self.task]


class _Loader(yaml.SafeLoader):
    """SafeLoader that reads ``1e-6`` as a float, as YAML 1.2 does.

    PyYAML follows YAML 1.1, where a float needs a dot (``1.0e-6``) and
    ``delta: 1e-6`` would silently be the string '1e-6'.
    """


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
        |\.[0-9_]+(?:[eE][-+][0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


def load_config(path: str, *, check_paths: bool = True) -> JobConfig:
    """Reads and validates a YAML job config."""
    if not os.path.isfile(path):
        raise ConfigError(f"Config file {path!r} does not exist.")
    try:
        with open(path) as fh:
            raw = yaml.load(fh, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"Config file {path!r} is not valid YAML{where}: {getattr(exc, 'problem', exc)}.") from None
    return JobConfig.from_dict(raw, check_paths=check_paths)
