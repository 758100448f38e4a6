"""Job configs (YAML): parsed and fully validated before Spark starts.

Unknown keys and bad values raise :class:`~spark_dp.errors.ConfigError`
naming the key, e.g. ``The 'privacy.epsilon' parameter of the config must be
a float in the range (0, inf). Got -1 instead.``

Each section is declared once, as a table of its keys (:class:`Key`: the
:mod:`spark_dp.params` constraint and the default of an absent key), and read
by a small reader of its own; a task adds keys through its
:class:`~spark_dp.cli.tasks.TaskSpec`. Adding a key to a section is one line
in its table (and a reader line where it needs a dataclass field).
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
from spark_dp.params import FORMATS, TABLE, check_path_exists
from spark_dp.privacy.noise import SAMPLERS
from spark_dp.release.ids import canonical_sha256, check_release_id

OWNER = "the config"
# privacy.mode: "dp" (default) or "none" — the explicit opt-in for a non-private
# mechanism on the dataset's rows (tensor online_power_method); see tensor.api.
PRIVACY_MODES = ("dp", "none")
TABLE_FORMATS = ("parquet", "delta", "iceberg")
# Versioned table formats a dataset may declare: Delta Lake (a path or a catalog table) and Apache Iceberg
# (a catalog table). Declaring one lets a job arrange its jars (spark_dp.runtime.table_format_conf) and
# read an older version (time travel: dataset.version / dataset.timestamp / dataset.snapshot_id).
VERSIONED_FORMATS = ("delta", "iceberg")
PATH_VERSIONED_FORMATS = ("delta",)
LARGE_EPSILON = 5.0


@dataclass(frozen=True)
class Key:
    """One config key: its constraint (None: read by its section's reader) and the value of an absent key."""

    constraint: P.Constraint | None = None
    default: Any = None
    required: bool = False


# -- the sections, declared once ------------------------------------------------------------
TOP = {"release_id": Key(), "dataset": Key(required=True), "task": Key(required=True),
       "mechanism": Key(required=True), "privacy": Key(required=True), "params": Key(),
       "ledger": Key(required=True), "output": Key(required=True)}
DATASET = {
    "id": Key(P.Str(), required=True),
    # where the data is: files (path, format, options) or a catalog table (table, where) — _dataset_source
    "path": Key(), "table": Key(), "where": Key(), "format": Key(), "options": Key(), "schema": Key(),
    # time travel on a Delta / Iceberg dataset — _time_travel
    "version": Key(), "timestamp": Key(), "snapshot_id": Key(),
    "columns": Key(),  # required but for an explicit tensor (format: tensor) — _columns
    "dimension": Key(P.PARAMS["dimension"]),
    "privacy_unit": Key(P.PARAMS["privacy_unit"]),
    "max_rows_per_unit": Key(P.PARAMS["max_rows_per_unit"], 1),
    "nonfinite": Key(P.PARAMS["nonfinite"], "drop"),
}
PRIVACY = {
    # required with mode "dp" (norm_bound where the task says so), refused with mode "none" — _read_privacy
    "epsilon": Key(P.Optional(P.PARAMS["epsilon"])),
    "delta": Key(P.Optional(P.PARAMS["delta"])),
    "norm_bound": Key(P.Optional(P.PARAMS["norm_bound"])),
    "neighbors": Key(P.Options(P.NEIGHBORS), "add_remove"),  # narrowed to the task's (TaskSpec.neighbors)
    "sampler": Key(P.Options(SAMPLERS), "secure"),
    "mode": Key(P.Options(PRIVACY_MODES), "dp"),
}
LEDGER = {
    "uri": Key(P.Str(), required=True),
    "epsilon_limit": Key(P.Optional(P.POSITIVE)),
    "delta_limit": Key(P.Optional(P.PARAMS["delta"])),
    "lifetime_epsilon_limit": Key(P.Optional(P.POSITIVE)),
    "lifetime_delta_limit": Key(P.Optional(P.PARAMS["delta"])),
}
LEDGER_PAIRS = (("epsilon_limit", "delta_limit"), ("lifetime_epsilon_limit", "lifetime_delta_limit"))
LEDGER_SCHEMES = ("sqlite", "postgresql", "postgres")
OUTPUT = {
    "path": Key(P.Str(), required=True),
    "table": Key(P.Optional(P.TableName())),
    "format": Key(None, "parquet"),  # parquet or delta with a table, parquet without — _read_output
    "confidence": Key(P.PARAMS["confidence"], 0.95),  # level of the released intervals
}
# The key lists (error messages, tests).
TOP_KEYS = tuple(TOP)
REQUIRED_TOP = tuple(k for k, key in TOP.items() if key.required)
DATASET_KEYS, PRIVACY_KEYS, LEDGER_KEYS, OUTPUT_KEYS = (tuple(s) for s in (DATASET, PRIVACY, LEDGER, OUTPUT))


def _section(raw: dict, name: str, keys, required) -> dict:
    """The mapping ``raw[name]``; refuses a non-mapping, an unknown key and a missing required key."""
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


def _checked(sec: dict, name: str, decl: dict[str, Key]) -> dict[str, Any]:
    """The declared keys of section ``name`` that have a constraint, checked (absent keys: their defaults)."""
    return {k: key.constraint.check(f"{name}.{k}", sec.get(k, key.default), owner=OWNER)
            for k, key in decl.items() if key.constraint is not None}


def _task_keys(sec: dict, name: str, validators: dict) -> dict[str, Any]:
    """A task's own keys in section ``name`` (TaskSpec.dataset_keys / privacy_keys / params), those given."""
    return {k: check(f"{name}.{k}", sec[k]) for k, check in validators.items() if sec.get(k) is not None}


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
    #: The files' schema as a Spark DDL string (``"ab INT, h INT, r DOUBLE"``): read with it, no inference scan.
    schema: str | None = None
    #: The declared table format of a path or table dataset (``delta``, ``iceberg``), or None.
    provider: str | None = None
    #: Time travel: ``{"version": N}``, ``{"timestamp": "…"}`` or ``{"snapshot_id": N}`` (at most one), or {}.
    as_of: dict = field(default_factory=dict)

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
        allowed = spec.formats or FORMATS
        if "parquet" in allowed:  # a task that reads Spark tables reads Delta tables too
            allowed = (*allowed, *PATH_VERSIONED_FORMATS)
        fmt = V.check_option("dataset.format", ds.get("format", "parquet"), allowed, owner=OWNER)
        options = ds.get("options") or {}
        if not isinstance(options, dict):
            raise ConfigError(f"The 'dataset.options' parameter must be a mapping. Got {options!r} instead.")
        return path, fmt, dict(options)
    if spec.formats is not None and "parquet" not in spec.formats:
        raise ConfigError(f"The 'dataset.table' parameter is not supported for task {spec.name!r}.")
    for key in ("options", "schema"):
        if ds.get(key) is not None:
            raise ConfigError(f"The 'dataset.{key}' parameter does not apply to 'dataset.table'; remove it.")
    if ds.get("format") is not None:  # declares the table's format (its jars, its time-travel options)
        V.check_option("dataset.format", ds["format"], VERSIONED_FORMATS, owner=OWNER)
    table = P.TableName().check("dataset.table", ds["table"], owner=OWNER)
    where = ds.get("where")
    if where is not None:
        where = V.check_str("dataset.where", where, owner=OWNER)
    return table, TABLE, ({"where": where} if where else {})


def _columns(ds: dict, explicit_tensor: bool) -> tuple[str, ...]:
    """``dataset.columns``: a non-empty list of names (one name may be a string); optional for a .npy tensor."""
    columns = ds.get("columns") or []
    if isinstance(columns, str):
        columns = [columns]
    if (not explicit_tensor or ds.get("columns") is not None) and (
        not isinstance(columns, list) or not columns or not all(isinstance(c, str) and c for c in columns)
    ):
        raise ConfigError(f"The 'dataset.columns' parameter must be a non-empty list of column names. "
                          f"Got {ds['columns']!r} instead.")
    return tuple(columns)


def _schema(ds: dict, fmt: str) -> str | None:
    """``dataset.schema``: the files' columns and types as a Spark DDL string, for Spark's file readers only.

    With it, Spark reads CSV/JSON without scanning them to infer types (a
    dry run then touches no data); Spark checks the DDL when it reads.
    """
    schema = ds.get("schema")
    if schema is None:
        return None
    schema = V.check_str("dataset.schema", schema, owner=OWNER)
    if fmt not in FORMATS:  # a .npy tensor has no Spark schema (tables are refused in _dataset_source)
        raise ConfigError(f"The 'dataset.schema' parameter applies to dataset.format {', '.join(FORMATS)}; "
                          f"got format {fmt!r}.")
    if "inferSchema" in ds.get("options", {}):
        raise ConfigError("Give either 'dataset.schema' or dataset.options.inferSchema, not both.")
    return schema


def _time_travel(ds: dict, fmt: str) -> tuple[str | None, dict, dict]:
    """(provider, as_of, reader options) of ``dataset.version`` / ``timestamp`` / ``snapshot_id`` (at most one).

    ``version`` is a Delta table version (``versionAsOf``), ``snapshot_id`` an
    Iceberg snapshot (``snapshot-id``), ``timestamp`` either
    (``timestampAsOf`` / ``as-of-timestamp``, in milliseconds for Iceberg).
    """
    provider = fmt if fmt in VERSIONED_FORMATS else (ds.get("format") if fmt == TABLE else None)
    given = [k for k in ("version", "timestamp", "snapshot_id") if ds.get(k) is not None]
    if not given:
        return provider, {}, {}
    if len(given) > 1:
        raise ConfigError(f"Give at most one of 'dataset.{given[0]}' and 'dataset.{given[1]}' in the config.")
    key = given[0]
    needs = {"version": ("delta",), "snapshot_id": ("iceberg",), "timestamp": VERSIONED_FORMATS}[key]
    if provider not in needs:
        raise ConfigError(f"The 'dataset.{key}' parameter (time travel) needs 'dataset.format' "
                          f"{' or '.join(repr(f) for f in needs)}. Got {provider or fmt!r} instead.")
    value = ds[key]
    if key == "timestamp":
        text = V.check_str("dataset.timestamp", value, owner=OWNER) if not hasattr(value, "isoformat") \
            else value.isoformat(sep=" ")
        try:
            from datetime import UTC, datetime

            parsed = datetime.fromisoformat(text)
        except ValueError:
            raise ConfigError(f"The 'dataset.timestamp' parameter must be an ISO date or time such as "
                              f"'2026-11-30 12:00:00' (UTC unless it has an offset). Got {value!r} instead.") from None
        parsed = parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed
        if provider == "iceberg":
            return provider, {key: text}, {"as-of-timestamp": str(int(parsed.timestamp() * 1000))}
        return provider, {key: text}, {"timestampAsOf": parsed.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")}
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"The 'dataset.{key}' parameter must be an integer >= 0. Got {value!r} instead.")
    return provider, {key: value}, {"versionAsOf" if key == "version" else "snapshot-id": str(value)}


def _read_dataset(raw: dict, spec) -> DatasetConfig:
    """The ``dataset`` section: :data:`DATASET` plus the task's ``dataset_keys``."""
    explicit_tensor = isinstance(ds := raw.get("dataset"), dict) and ds.get("format") == "tensor"
    required = ("id",) if explicit_tensor else ("id", "columns")  # a .npy tensor has no columns
    ds = _section(raw, "dataset", DATASET_KEYS + tuple(spec.dataset_keys), required)
    path, fmt, options = _dataset_source(ds, spec)
    columns = _columns(ds, explicit_tensor)
    schema = _schema(ds, fmt)
    provider, as_of, travel = _time_travel(ds, fmt)
    return DatasetConfig(path=path, format=fmt, columns=columns, options={**options, **travel}, schema=schema,
                         provider=provider, as_of=as_of,
                         **_checked(ds, "dataset", DATASET),
                         extra=_task_keys(ds, "dataset", spec.dataset_keys))


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


def _read_privacy(raw: dict, spec) -> PrivacyConfig:
    """The ``privacy`` section: :data:`PRIVACY` plus the task's ``privacy_keys``; ``mode: none`` needs no budget."""
    pv = raw.get("privacy")
    mode = PRIVACY["mode"].constraint.check(
        "privacy.mode", pv.get("mode", "dp") if isinstance(pv, dict) else "dp", owner=OWNER)
    required = () if mode == "none" else ("epsilon", "delta", "norm_bound") if spec.requires_norm_bound else (
        "epsilon", "delta")
    pv = _section(raw, "privacy", PRIVACY_KEYS + tuple(spec.privacy_keys), required)
    if mode == "none":
        if spec.name != "tensor_decomposition":
            raise ConfigError(f"The 'privacy.mode' parameter may be 'none' only for task 'tensor_decomposition' "
                              f"(its non-private mechanisms). Got 'none' for task {spec.name!r}.")
        for key in ("epsilon", "delta"):
            if pv.get(key) is not None:
                raise ConfigError(f"The 'privacy.{key}' parameter has no meaning with 'privacy.mode: none' "
                                  "(nothing is private or charged); remove it.")
    decl = {**PRIVACY, "neighbors": Key(P.Options(spec.neighbors), PRIVACY["neighbors"].default)}
    if spec.norm_bound_auto:  # a number or "auto" (chosen privately from the data; TaskSpec.norm_bound_auto)
        decl["norm_bound"] = Key(P.PARAMS["norm_bound_or_auto"])
    return PrivacyConfig(**_checked(pv, "privacy", decl), extra=_task_keys(pv, "privacy", spec.privacy_keys))


def _read_params(raw: dict, spec) -> dict:
    """The ``params`` section: the task's keys (TaskSpec.params), each checked."""
    params = raw.get("params") or {}
    if not isinstance(params, dict):
        raise ConfigError(f"The 'params' section of the config must be a mapping. Got {params!r} instead.")
    for k in params:
        if k not in spec.params:
            raise ConfigError(f"Unknown key 'params.{k}' for task {spec.name!r}; expected one of {sorted(spec.params)}.")
    return {k: spec.params[k](f"params.{k}", v) for k, v in params.items()}


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


def _read_ledger(raw: dict, privacy: PrivacyConfig) -> LedgerConfig:
    """The ``ledger`` section (:data:`LEDGER`): limits come in (ε, δ) pairs; no limit with ``privacy.mode: none``."""
    lg = _section(raw, "ledger", LEDGER_KEYS, tuple(k for k, key in LEDGER.items() if key.required))
    for eps, delta in LEDGER_PAIRS:
        if (lg.get(eps) is None) != (lg.get(delta) is None):
            raise ConfigError(f"Give both 'ledger.{eps}' and 'ledger.{delta}', or neither.")
    ledger = LedgerConfig(**_checked(lg, "ledger", LEDGER))
    for key in ("epsilon_limit", "lifetime_epsilon_limit"):
        if privacy.mode == "none" and getattr(ledger, key) is not None:
            raise ConfigError(f"The 'ledger.{key}' parameter must not be given with 'privacy.mode: none': a "
                              "dataset with a privacy budget never gets non-private releases.")
    if "://" in ledger.uri and ledger.uri.split("://")[0] not in LEDGER_SCHEMES:
        raise ConfigError(f"The 'ledger.uri' parameter must be a sqlite:/// or postgresql:// URI, or a file path. "
                          f"Got {ledger.uri!r} instead.")
    return ledger


@dataclass(frozen=True)
class OutputConfig:
    """The ``output`` section: the release directory root (always), and optionally a warehouse table.

    ``format`` is the table's format (``parquet``, ``delta`` or ``iceberg``); the release
    directory is always Parquet + manifest.json.
    """

    path: str
    format: str = "parquet"
    table: str | None = None
    confidence: float = 0.95


def _read_output(raw: dict) -> OutputConfig:
    """The ``output`` section (:data:`OUTPUT`): ``format`` may be ``delta`` only with a ``table``."""
    out = _section(raw, "output", OUTPUT_KEYS, tuple(k for k, key in OUTPUT.items() if key.required))
    values = _checked(out, "output", OUTPUT)
    formats = TABLE_FORMATS if values["table"] else ("parquet",)
    return OutputConfig(**values, format=V.check_option("output.format", out.get("format", OUTPUT["format"].default),
                                                        formats, owner=OWNER))


def _read_top(raw: Any):
    """The top level: a mapping of the known sections; returns the task's spec."""
    if not isinstance(raw, dict):
        raise ConfigError(f"The config must be a mapping of keys to values. Got {type(raw).__name__} instead.")
    unknown = sorted(set(raw) - set(TOP_KEYS))
    if unknown:
        raise ConfigError(f"Unknown key {unknown[0]!r} in the config; expected one of {sorted(TOP_KEYS)}.")
    for k in REQUIRED_TOP:
        if raw.get(k) is None:
            raise ConfigError(f"Missing required key {k!r} in the config.")
    registry = tasks()
    return registry[V.check_option("task", raw["task"], registry, owner=OWNER)]


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

    @property
    def table_formats(self) -> tuple[str, ...]:
        """The Delta / Iceberg formats the job reads or writes (their jars go into a session spark-dp creates)."""
        formats = {self.dataset.provider, self.output.format if self.output.table else None}
        return tuple(sorted(f for f in formats if f in VERSIONED_FORMATS))

    @classmethod
    def from_dict(cls, raw: Any, *, check_paths: bool = True) -> JobConfig:
        """Validates a parsed config; raises ConfigError naming the first bad key."""
        spec = _read_top(raw)
        sha256 = canonical_sha256(raw)  # of the config as written: renaming keys keeps re-runs idempotent
        raw = _renamed(raw, spec)
        mechanism = V.check_option("mechanism", raw["mechanism"], spec.mechanisms, owner=OWNER)
        dataset = _read_dataset(raw, spec)
        privacy = _read_privacy(raw, spec)
        params = _read_params(raw, spec)
        ledger = _read_ledger(raw, privacy)
        output = _read_output(raw)
        release_id = None if raw.get("release_id") is None else check_release_id(raw["release_id"], owner=OWNER)
        if check_paths and dataset.format != TABLE:
            check_path_exists(dataset.path)
        config = cls(release_id, dataset, spec.name, mechanism, privacy, params, ledger, output, sha256)
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
