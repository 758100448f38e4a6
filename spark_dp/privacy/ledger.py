"""The durable privacy ledger: an append-only store of charges per dataset.

Two backends with the same guarantees:

* SQLite (default): one file, ``sqlite:///relative.db`` or
  ``sqlite:////absolute.db`` (or a bare path). For jobs on one host.
* PostgreSQL: ``postgresql://user@host:port/db``, for jobs on many hosts.

Guarantees, relied on by the chokepoint:

* **No overspend under concurrency.** A charge is checked against the
  dataset's limit and appended in one transaction that excludes every other
  charge on the ledger (SQLite: ``BEGIN IMMEDIATE``; PostgreSQL: a
  transaction-scoped advisory lock per dataset); the budget check re-reads
  every earlier charge inside that transaction.
* **Durable before noise.** The transaction commits (``synchronous=FULL``)
  before the caller may draw noise, so a crash after the charge never
  refunds it.
* **Append-only.** Rows are never updated or deleted: ``charges`` records
  spends, ``releases`` records that a charged release was written.
* **One charge per release id.** ``release_id`` is unique; a re-run finds the
  earlier charge and either returns the stored release or reports that the
  charge stands without a release.

* **One privacy unit per dataset.** The first charge on a dataset fixes its
  privacy unit (a column, or none: each row, or each entry of an explicit
  tensor, is a unit), per-unit bound m and neighbour relation
  (:class:`UnitDeclaration`); a later charge or dry run whose release
  protects a different unit or relation is refused before any Spark work
  (:meth:`UnitDeclaration.covers` says exactly which releases are accepted
  and why). Ledgers of schema 1 gain the three columns on first open; their
  datasets are declared by their next charge. ``datasets.privacy_unit``
  stores ``row`` (no unit column, row level), ``tensor_entry`` (no unit
  column, an explicit tensor) or ``column:<name>`` (the unit column
  ``<name>``): no column name stores as ``row``, so a column named ``row``
  is a unit column, never row level (:meth:`UnitDeclaration.stored`).
* **One privacy unit per lifetime group.** The periods ``<base>@<period>``
  of a dataset (and ``<base>`` itself) are composed under one lifetime cap,
  so the group carries one declaration too (``lifetime_units``: the unit and
  the neighbour relation, set by the group's first charge with a unit, in
  the charge's transaction): a period whose release protects another unit
  or relation than the group's is refused like a dataset's
  (:meth:`UnitDeclaration.covers`; m may differ between periods, as between
  releases of one dataset). A ledger whose group already mixes declarations
  (written before schema 5) is refused on open, naming the periods
  (:meth:`Ledger.unit_conflicts`, reported by ``spark-dp audit``), until an
  administrator chooses the group's unit (:meth:`Ledger.keep_group_unit`,
  ``spark-dp ledger --keep-unit-of PERIOD``).

* **Lifetime caps over renewing periods.** Ledger datasets ``<base>@<period>``
  (a plan's renewing budgets, or any ids named so) are the periods of the
  dataset ``<base>``, which is part of its own group too. A lifetime limit
  registered for ``<base>`` (``lifetime_limits``) is checked by every charge on
  any member, in the same transaction as the period's own limit: the exact
  composition of every member's events plus the new ones, at the lifetime
  δ, must stay within the lifetime ε, or the charge is refused and nothing
  is recorded. PostgreSQL's advisory lock is therefore taken per group
  (``<base>``), so charges on different periods of one dataset serialise;
  SQLite's ``BEGIN IMMEDIATE`` already serialises every charge. Each charge
  records the group's lifetime ε after it (``charges.lifetime_epsilon``).
* **Crashes are recorded, not refunded.** A charged release that failed
  before being written can be recorded as such (``crashes``:
  :meth:`Ledger.record_crash`); the charge stands. ``spark-dp audit`` checks
  that every charge has a written release or a recorded crash.

Schema 3 adds ``lifetime_limits``, ``crashes``, ``charges.lifetime_epsilon``
and ``limit_changes.scope``; schema 4 adds ``charges.input``, the release's
input lineage (:mod:`spark_dp.release.lineage`) as JSON; schema 5 stores
a unit column as ``column:<name>`` (earlier schemas stored its bare name, so
a column named ``row`` read as row level): the migration prefixes every
stored unit other than ``row`` and ``tensor_entry``, which keep reading as
row level and tensor entries; it also adds ``lifetime_units`` (filled from the
groups' periods where they agree, after the prefixing) and the ledger's
lineage key (``meta.lineage_key``: 32 bytes from the OS, the HMAC key of the
input lineage's file digests). Ledgers of an earlier schema are migrated in
place on first open (their rows keep working; their charges have no recorded
lifetime ε or lineage: null).

Composition of a dataset's charges is exact for Gaussian events and uses
PLD otherwise (:mod:`spark_dp.privacy.accountant`); ε is reported at the
dataset's ``delta_limit``.
"""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlparse

from spark_dp.errors import BudgetExceededError, ConfigError, LedgerError, ReleaseConflictError
from spark_dp.privacy.accountant import Budget, compose_epsilon
from spark_dp.privacy.events import Event, events_from_json, events_to_json

SCHEMA_VERSION = 5
# Schema 2 adds the dataset's privacy unit (issue #12); schema 3 the lifetime
# caps over renewing periods and the crash records, schema 4 the input lineage
# of each charge (issue #16), schema 5 the stored form ``column:<name>`` of a
# unit column. Older ledgers are migrated in place on first open, one step at
# a time (existing rows keep working).
_UNIT_COLUMNS = (("privacy_unit", "TEXT"), ("max_per_unit", "INTEGER"), ("neighbors", "TEXT"))
_SCHEMA_3_COLUMNS = (("charges", "lifetime_epsilon", "DOUBLE PRECISION"), ("limit_changes", "scope", "TEXT"))
_SCHEMA_4_COLUMNS = (("charges", "input", "TEXT"),)
# Schema 5: one declaration per lifetime group (``lifetime_units``) and the lineage key (``meta``).
LINEAGE_KEY = "lineage_key"
PERIOD_SEPARATOR = "@"
_COLUMN_PREFIX = "column:"  # the stored form of a unit column (schema 5): column:<name>

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS datasets (
    dataset_id    TEXT PRIMARY KEY,
    epsilon_limit DOUBLE PRECISION NOT NULL,
    delta_limit   DOUBLE PRECISION NOT NULL,
    created_at    TEXT NOT NULL,
    privacy_unit  TEXT,
    max_per_unit  INTEGER,
    neighbors     TEXT
);
CREATE TABLE IF NOT EXISTS charges (
    seq            {serial},
    release_id     TEXT NOT NULL UNIQUE,
    dataset_id     TEXT NOT NULL REFERENCES datasets(dataset_id),
    request_sha256 TEXT NOT NULL,
    events         TEXT NOT NULL,
    epsilon        DOUBLE PRECISION NOT NULL,
    delta          DOUBLE PRECISION NOT NULL,
    created_at     TEXT NOT NULL,
    lifetime_epsilon DOUBLE PRECISION,
    input          TEXT
);
CREATE TABLE IF NOT EXISTS releases (
    release_id TEXT PRIMARY KEY REFERENCES charges(release_id),
    location   TEXT NOT NULL,
    written_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS limit_changes (
    seq           {serial},
    dataset_id    TEXT NOT NULL,
    epsilon_limit DOUBLE PRECISION NOT NULL,
    delta_limit   DOUBLE PRECISION NOT NULL,
    changed_at    TEXT NOT NULL,
    scope         TEXT
);
CREATE TABLE IF NOT EXISTS lifetime_limits (
    dataset_id    TEXT PRIMARY KEY,
    epsilon_limit DOUBLE PRECISION NOT NULL,
    delta_limit   DOUBLE PRECISION NOT NULL,
    created_at    TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS lifetime_units (
    dataset_id   TEXT PRIMARY KEY,
    privacy_unit TEXT NOT NULL,
    neighbors    TEXT NOT NULL,
    declared_by  TEXT NOT NULL,
    declared_at  TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS crashes (
    release_id  TEXT PRIMARY KEY REFERENCES charges(release_id),
    reason      TEXT NOT NULL,
    recorded_at TEXT NOT NULL
);
"""


def lifetime_dataset(dataset_id: str) -> str:
    """The dataset whose lifetime ``dataset_id`` counts against: ``sales@2026-11-30`` → ``sales``."""
    return dataset_id.split(PERIOD_SEPARATOR, 1)[0]


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def _lifetime_mismatch(base: str, stored: Budget, limit: Budget) -> ConfigError:
    return ConfigError(
        f"Dataset {base!r} has ledger lifetime limit epsilon={stored.epsilon:g}, delta={stored.delta:g}; "
        f"the request says lifetime epsilon={limit.epsilon:g}, delta={limit.delta:g}. "
        "Change it explicitly with 'spark-dp ledger --set-lifetime-limit'."
    )


def _limit_mismatch(dataset_id: str, stored: Budget, limit: Budget) -> ConfigError:
    return ConfigError(
        f"Dataset {dataset_id!r} has ledger limit epsilon={stored.epsilon:g}, delta={stored.delta:g}; "
        f"the request says epsilon={limit.epsilon:g}, delta={limit.delta:g}. "
        "Change it explicitly with 'spark-dp ledger --set-limit'."
    )


@dataclass(frozen=True, slots=True)
class UnitDeclaration:
    """What one release protects: its privacy unit, per-unit bound m and neighbour relation.

    ``unit`` is the ``privacy_unit`` column's name, or None when there is no
    unit column: each row is a unit, or, with ``neighbors="tensor_entry"``,
    each entry of an explicit tensor (Wang & Anandkumar's Def. 4.2). None is
    no column name, so a column named ``row`` or ``tensor_entry`` is a unit
    column like any other. ``neighbors`` is ``add_remove``, ``replace`` or
    ``tensor_entry``.
    """

    unit: str | None
    max_per_unit: int
    neighbors: str

    @property
    def label(self) -> str:
        """For people: the column's name, or ``row`` / ``tensor_entry`` when there is no unit column."""
        if self.unit is not None:
            return self.unit
        return "tensor_entry" if self.neighbors == "tensor_entry" else "row"

    @property
    def stored(self) -> str:
        """The ledger's form: ``row``, ``tensor_entry`` or ``column:<name>`` (no column name stores as the others)."""
        return self.label if self.unit is None else _COLUMN_PREFIX + self.unit

    @classmethod
    def from_stored(cls, stored: str, max_per_unit: int, neighbors: str) -> UnitDeclaration:
        """The declaration of a ledger row (:attr:`stored`; ``row`` and ``tensor_entry``: no unit column)."""
        stored = str(stored)
        if stored.startswith(_COLUMN_PREFIX):
            return cls(stored[len(_COLUMN_PREFIX):], int(max_per_unit), str(neighbors))
        if stored in ("row", "tensor_entry"):
            return cls(None, int(max_per_unit), str(neighbors))
        raise LedgerError(f"ledger row has privacy unit {stored!r}, which is not a stored unit form "
                          "('row', 'tensor_entry' or 'column:<name>'); was the ledger written by another program?")

    def covers(self, release: UnitDeclaration) -> bool:
        """Whether a release with ``release``'s unit composes with this dataset's declared one.

        Accepted exactly when the unit and the neighbour relation are the
        same; m may differ. Why: the ledger composes each release's events as
        a guarantee about ONE neighbouring pair (D, D') of the dataset's
        relation. Every mechanism bounds its sensitivity for the m it was run
        with by contribution bounding (at most m rows of a unit are kept,
        whatever the unit holds), so a release at unit ``u`` with any m is
        (ε_i, δ_i)-DP for adding/removing (or replacing) one whole unit
        ``u`` — the same pair for every release — and the events compose.
        Refused:

        * another unit column, or ``row`` vs a column: a row-level release
          protects a unit of many rows only by group privacy over its
          (unbounded) number of rows; a unit-level release does not bound
          what one row changes under the row relation either (removing one
          row may swap which rows of its unit are kept).
        * another relation: add/remove and replace events are calibrated to
          different pairs (D, D'), and an add/remove guarantee gives replace
          only by group privacy of size 2 (and replace-one gives no
          add/remove guarantee: it assumes n public).
        """
        return self.unit == release.unit and self.neighbors == release.neighbors

    def describe(self) -> str:
        what = f"unit column {self.unit!r}" if self.unit is not None else f"unit {self.label!r} (no unit column)"
        return f"{what}, at most {self.max_per_unit} rows per unit, neighbours {self.neighbors!r}"

    def to_dict(self) -> dict[str, Any]:
        """``privacy_unit`` (:attr:`label`), ``privacy_unit_column`` (the column or None), m and neighbours."""
        return {"privacy_unit": self.label, "privacy_unit_column": self.unit, "max_per_unit": self.max_per_unit,
                "neighbors": self.neighbors}


def _unit_mismatch(dataset_id: str, declared: UnitDeclaration, release: UnitDeclaration) -> ConfigError:
    return ConfigError(
        f"Dataset {dataset_id!r} was declared in the ledger by its first release with {declared.describe()}; "
        f"this release has {release.describe()}. Its guarantee would not compose with the dataset's "
        "(different privacy unit or neighbour relation): use the dataset's privacy unit and neighbours, "
        "or a separate dataset id (with its own budget) for the other unit."
    )


def _group_unit_mismatch(dataset_id: str, base: str, declared_by: str, group: UnitDeclaration,
                         release: UnitDeclaration) -> ConfigError:
    return ConfigError(
        f"Dataset {dataset_id!r} is a period of {base!r}, whose lifetime group was declared by {declared_by!r} "
        f"with unit {group.label!r}, neighbours {group.neighbors!r}; this release has unit {release.label!r}, "
        f"neighbours {release.neighbors!r}. The lifetime cap composes every period as one relation: use the "
        f"group's privacy unit and neighbours, or a dataset id outside {base!r}'s group (with its own budget) "
        "for the other unit."
    )


@dataclass(frozen=True, slots=True)
class UnitConflict:
    """A lifetime group whose periods declared different privacy units or relations (ledgers before schema 5)."""

    group: str
    periods: tuple[tuple[str, UnitDeclaration], ...]  # every declared period of the group, by first charge
    kept: str | None  # the period whose declaration was chosen for the group (None: not chosen)

    def describe(self) -> str:
        return f"lifetime group {self.group!r} mixes " + "; ".join(
            f"{ds!r} (unit {d.label!r}, neighbours {d.neighbors!r})" for ds, d in self.periods)


def _conflicts_message(path: str, conflicts: Sequence[UnitConflict]) -> str:
    return (
        f"Ledger {path}: " + " | ".join(c.describe() for c in conflicts) + ". A lifetime cap composes all "
        "periods of a dataset as one neighbour relation, so these releases have no common lifetime guarantee. "
        "Choose each group's unit with 'spark-dp ledger --uri URI --keep-unit-of PERIOD' (the other units' "
        "periods can then not be charged again: give their data a dataset id of its own); "
        "'spark-dp audit' reports the mix."
    )


@dataclass(frozen=True, slots=True)
class Charge:
    """One ledger row: what a release cost and whether it was written."""

    seq: int
    release_id: str
    dataset_id: str
    request_sha256: str
    events: tuple[Event, ...]
    budget: Budget
    created_at: str
    location: str | None
    lifetime_epsilon: float | None = None  # the group's lifetime ε after this charge (None: no cap in force)
    crash: str | None = None  # the recorded reason it was never written (None: none recorded)
    lineage: dict[str, Any] | None = None  # the release's input lineage (None: not recorded, before schema 4)

    @property
    def written(self) -> bool:
        return self.location is not None


@dataclass(frozen=True, slots=True)
class DatasetStatus:
    """A dataset's row in the ledger: its budget limit, the ε spent (its charged events composed at the limit's δ),
    the number of charged releases and the declared privacy unit.
    """

    dataset_id: str
    limit: Budget
    spent_epsilon: float
    releases: int
    unit: UnitDeclaration | None = None  # None: not declared yet (no charge since schema 2)

    @property
    def remaining_epsilon(self) -> float:
        return max(0.0, self.limit.epsilon - self.spent_epsilon)


@dataclass(frozen=True, slots=True)
class LifetimeStatus:
    """A dataset's lifetime cap and what all its periods have spent of it (ε composed at the cap's δ)."""

    dataset_id: str
    limit: Budget
    spent_epsilon: float
    periods: int  # ledger datasets of the group with at least one charge
    releases: int

    @property
    def remaining_epsilon(self) -> float:
        return max(0.0, self.limit.epsilon - self.spent_epsilon)


def sqlite_path_from_uri(uri: str) -> str:
    """``sqlite:///rel.db`` → ``rel.db``; ``sqlite:////abs.db`` → ``/abs.db``; a bare path as is."""
    if "://" not in uri:
        return uri
    parsed = urlparse(uri)
    if parsed.scheme != "sqlite":
        raise ConfigError(
            f"The 'ledger.uri' parameter must be a sqlite:/// or postgresql:// URI, or a file path. Got {uri!r} instead."
        )
    path = uri[len("sqlite:///") :] if uri.startswith("sqlite:///") else ""
    if not path:
        raise ConfigError(f"The 'ledger.uri' parameter has no file path: {uri!r}.")
    return path


class _Connection:
    """A DB-API connection that speaks ``?`` placeholders on either backend."""

    def __init__(self, raw: Any, placeholder: str) -> None:
        self.raw = raw
        self._ph = placeholder

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        if self._ph != "?":
            sql = sql.replace("?", self._ph)
        cur = self.raw.cursor()
        cur.execute(sql, tuple(params))
        return cur


class Ledger:
    """Common logic of the ledger; backends supply connections and locking."""

    uri: str
    path: str  # what to show in messages
    _serial = ""
    _strict = True  # refuse to open a ledger whose lifetime groups mix privacy units
    _lineage_key = b""

    def _init_schema(self) -> None:
        with self._transaction(None) as con:
            for stmt in filter(None, (s.strip() for s in _SCHEMA.split(";"))):
                con.execute(stmt.format(serial=self._serial))
            row = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            if row is None:
                con.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            elif int(row[0]) > SCHEMA_VERSION:
                raise LedgerError(f"ledger {self.path} has schema {row[0]}, newer than this spark-dp ({SCHEMA_VERSION})")
            elif int(row[0]) < SCHEMA_VERSION:
                # Under the schema transaction's lock, so concurrent openers migrate once.
                # The new tables exist already (CREATE TABLE IF NOT EXISTS above).
                if int(row[0]) < 2:  # schema 1 → 2: the dataset's privacy unit
                    have = self._columns(con, "datasets")
                    for name, sqltype in _UNIT_COLUMNS:
                        if name not in have:
                            con.execute(f"ALTER TABLE datasets ADD COLUMN {name} {sqltype}")
                # schema 2 → 3: lifetime ε per charge, the scope of a limit change; 3 → 4: input lineage
                for table, name, sqltype in _SCHEMA_3_COLUMNS + _SCHEMA_4_COLUMNS:
                    if name not in self._columns(con, table):
                        con.execute(f"ALTER TABLE {table} ADD COLUMN {name} {sqltype}")
                if int(row[0]) < 5:  # schema 4 → 5: a unit column is stored as column:<name>, then
                    self._prefix_unit_columns(con)  # the lifetime groups' declarations (the key: below)
                    self._declare_agreeing_groups(con)
                con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))
            key = con.execute("SELECT value FROM meta WHERE key = ?", (LINEAGE_KEY,)).fetchone()
            if key is None:  # a new ledger, or one from before schema 5: its lineage key, from OS entropy
                key = (secrets.token_hex(32),)
                con.execute("INSERT INTO meta VALUES (?, ?)", (LINEAGE_KEY, key[0]))
            self._lineage_key = bytes.fromhex(str(key[0]))
            conflicts = [c for c in self._unit_conflicts(con) if c.kept is None]
        if conflicts and self._strict:
            raise LedgerError(_conflicts_message(self.path, conflicts))

    @property
    def lineage_key(self) -> bytes:
        """The ledger's secret key of the input lineage's file digests (HMAC-SHA256; :mod:`spark_dp.release.lineage`).

        32 bytes from the OS (:func:`secrets.token_hex`), created with the
        ledger (or by the migration to schema 5) and never changed, so one
        input gives one digest across runs on one ledger. It never leaves the
        ledger: not in manifests, exports or reports.
        """
        return self._lineage_key

    # -- one declaration per lifetime group ------------------------------------
    @staticmethod
    def _group_declarations(con: _Connection, base: str | None = None) -> dict[str, list[tuple[str, UnitDeclaration]]]:
        """The declared datasets of every lifetime group (or of ``base``'s), in order of their first charge."""
        where, params = "", ()
        if base is not None:
            prefix = base + PERIOD_SEPARATOR
            where, params = " AND (d.dataset_id = ? OR substr(d.dataset_id, 1, ?) = ?)", (base, len(prefix), prefix)
        rows = con.execute(
            "SELECT d.dataset_id, d.privacy_unit, d.max_per_unit, d.neighbors, MIN(c.seq) FROM datasets d "
            "LEFT JOIN charges c ON c.dataset_id = d.dataset_id WHERE d.privacy_unit IS NOT NULL" + where +
            " GROUP BY d.dataset_id, d.privacy_unit, d.max_per_unit, d.neighbors", params).fetchall()
        out: dict[str, list[tuple[Any, str, UnitDeclaration]]] = {}
        for ds, unit, m, neighbors, first in rows:
            out.setdefault(lifetime_dataset(str(ds)), []).append(
                (first is None, first or 0, str(ds), UnitDeclaration.from_stored(unit, int(m or 1), str(neighbors))))
        return {g: [(ds, d) for *_, ds, d in sorted(members)] for g, members in out.items()}

    @staticmethod
    def _mixed(members: Sequence[tuple[str, UnitDeclaration]]) -> bool:
        """Whether declarations of one group disagree (:meth:`UnitDeclaration.covers`, the one rule)."""
        return any(not members[0][1].covers(d) for _, d in members[1:])

    @staticmethod
    def _mixed_groups(con: _Connection) -> set[str]:
        """The lifetime groups whose declared datasets disagree (one cheap scan of ``datasets``, for every open)."""
        seen: dict[str, UnitDeclaration] = {}
        mixed = set()
        for ds, unit, m, neighbors in con.execute(
                "SELECT dataset_id, privacy_unit, max_per_unit, neighbors FROM datasets "
                "WHERE privacy_unit IS NOT NULL").fetchall():
            group, d = lifetime_dataset(str(ds)), UnitDeclaration.from_stored(unit, int(m or 1), str(neighbors))
            if not seen.setdefault(group, d).covers(d):
                mixed.add(group)
        return mixed

    @staticmethod
    def _group_unit(con: _Connection, base: str) -> tuple[UnitDeclaration, str] | None:
        """The group's declaration (its m is not part of it: 1 here) and the dataset that declared it; None: none."""
        row = con.execute("SELECT privacy_unit, neighbors, declared_by FROM lifetime_units WHERE dataset_id = ?",
                          (base,)).fetchone()
        return None if row is None else (UnitDeclaration.from_stored(row[0], 1, str(row[1])), str(row[2]))

    def _declare_agreeing_groups(self, con: _Connection) -> None:
        """Migration to schema 5: every group whose declared periods agree is declared by its first one.

        A group whose periods disagree is left undeclared: the ledger then
        refuses to open (:meth:`unit_conflicts`) until an administrator
        chooses its unit (:meth:`keep_group_unit`).
        """
        for base, members in self._group_declarations(con).items():
            if not self._mixed(members) and self._group_unit(con, base) is None:
                ds, d = members[0]
                con.execute("INSERT INTO lifetime_units VALUES (?, ?, ?, ?, ?)",
                            (base, d.stored, d.neighbors, ds, _now()))

    def _unit_conflicts(self, con: _Connection) -> list[UnitConflict]:
        out = []
        for base in sorted(self._mixed_groups(con)):
            members = self._group_declarations(con, base)[base]
            kept = self._group_unit(con, base)
            out.append(UnitConflict(base, tuple(members), None if kept is None else kept[1]))
        return out

    def unit_conflicts(self) -> list[UnitConflict]:
        """Lifetime groups whose periods declared different privacy units or relations (before schema 5).

        ``kept`` is the period whose declaration an administrator chose for
        the group (:meth:`keep_group_unit`); None: not chosen (the ledger is
        then refused on open unless opened with ``strict=False``, as audits do).
        """
        with self._reading() as con:
            return self._unit_conflicts(con)

    def keep_group_unit(self, dataset_id: str) -> None:
        """Makes ``dataset_id``'s declared unit and relation the one of its lifetime group (an explicit act).

        For a group whose periods disagree (written before the group's
        declaration was checked): later charges on any period must then be
        covered by this declaration, so the periods of other units can no
        longer be charged. Raises LedgerError if ``dataset_id`` declared no
        unit, or the group has a declaration already.
        """
        base = lifetime_dataset(dataset_id)
        with self._transaction(base) as con:
            declared = self._declared_unit(con, dataset_id)
            if declared is None:
                raise LedgerError(f"Dataset {dataset_id!r} has no declared privacy unit in ledger {self.path}.")
            group = self._group_unit(con, base)
            if group is not None:
                raise LedgerError(f"The lifetime group {base!r} has a declared unit already (by {group[1]!r}, "
                                  f"unit {group[0].label!r}, neighbours {group[0].neighbors!r}).")
            con.execute("INSERT INTO lifetime_units VALUES (?, ?, ?, ?, ?)",
                        (base, declared.stored, declared.neighbors, dataset_id, _now()))

    def _check_group_unit(self, con: _Connection, dataset_id: str, unit: UnitDeclaration | None) -> bool:
        """Raises if ``unit`` is not the declaration of ``dataset_id``'s lifetime group; True if the group has none.

        Without a recorded declaration, the group's periods declared before
        must agree with each other and with ``unit``.
        """
        base = lifetime_dataset(dataset_id)
        group = self._group_unit(con, base)
        if group is not None:
            if unit is not None and not group[0].covers(unit):
                raise _group_unit_mismatch(dataset_id, base, group[1], group[0], unit)
            return False
        members = self._group_declarations(con, base).get(base, [])
        if self._mixed(members):
            raise LedgerError(_conflicts_message(self.path, [UnitConflict(base, tuple(members), None)]))
        for ds, d in members:
            if unit is not None and not d.covers(unit):
                raise _group_unit_mismatch(dataset_id, base, ds, d, unit)
        return True

    def _columns(self, con: _Connection, table: str) -> set[str]:
        """The column names of ``table``."""
        raise NotImplementedError

    def _prefix_unit_columns(self, con: _Connection) -> None:
        """Migration to schema 5: every stored unit but ``row`` and ``tensor_entry`` was a bare column name.

        Those two keep their meaning (no unit column): a dataset whose unit
        column was named ``row`` before schema 5 cannot be told from a
        row-level one and stays row level. Every table holding a
        ``privacy_unit`` declaration is migrated.
        """
        for table in ("datasets", "lifetime_units"):
            if "privacy_unit" in self._columns(con, table):
                con.execute(f"UPDATE {table} SET privacy_unit = '{_COLUMN_PREFIX}' || privacy_unit "
                            "WHERE privacy_unit IS NOT NULL AND privacy_unit NOT IN ('row', 'tensor_entry')")

    # -- connections (backend) -------------------------------------------
    def _connect(self) -> _Connection:
        raise NotImplementedError

    _begin = "BEGIN"

    def _lock(self, con: _Connection, dataset_id: str | None) -> None:
        """Makes the open transaction exclusive with other charges on ``dataset_id``."""

    @contextmanager
    def _transaction(self, dataset_id: str | None) -> Iterator[_Connection]:
        """A write transaction exclusive with every other charge on ``dataset_id``."""
        con = self._connect()
        try:
            con.execute(self._begin)
            try:
                self._lock(con, dataset_id)
                yield con
            except BaseException:
                con.execute("ROLLBACK")
                raise
            con.execute("COMMIT")
        finally:
            self._close(con)

    @contextmanager
    def _reading(self) -> Iterator[_Connection]:
        con = self._connect()
        try:
            yield con
        finally:
            self._close(con)

    def _close(self, con: _Connection) -> None:
        con.raw.close()

    # -- datasets ------------------------------------------------------
    def ensure_dataset(self, dataset_id: str, limit: Budget | None) -> Budget:
        """Registers ``dataset_id`` with ``limit`` on first use; returns its limit.

        A later request naming a different limit is refused: limits change only
        through :meth:`set_limit`, an explicit, recorded act.
        """
        with self._transaction(dataset_id) as con:
            return self._ensure_dataset(con, dataset_id, limit)

    def _ensure_dataset(self, con: _Connection, dataset_id: str, limit: Budget | None) -> Budget:
        row = con.execute(
            "SELECT epsilon_limit, delta_limit FROM datasets WHERE dataset_id = ?", (dataset_id,)
        ).fetchone()
        if row is None:
            if limit is None:
                raise ConfigError(
                    f"Dataset {dataset_id!r} is not in the ledger {self.path}: give 'ledger.epsilon_limit' "
                    "and 'ledger.delta_limit' to register it."
                )
            con.execute(
                "INSERT INTO datasets (dataset_id, epsilon_limit, delta_limit, created_at) VALUES (?, ?, ?, ?)",
                (dataset_id, limit.epsilon, limit.delta, _now()),
            )
            con.execute(
                "INSERT INTO limit_changes (dataset_id, epsilon_limit, delta_limit, changed_at) VALUES (?, ?, ?, ?)",
                (dataset_id, limit.epsilon, limit.delta, _now()),
            )
            return limit
        stored = Budget(float(row[0]), float(row[1]))
        if limit is not None and limit != stored:
            raise _limit_mismatch(dataset_id, stored, limit)
        return stored

    def set_limit(self, dataset_id: str, limit: Budget) -> None:
        """Sets a dataset's limit explicitly (recorded in ``limit_changes``)."""
        with self._transaction(dataset_id) as con:
            con.execute(
                "INSERT INTO datasets (dataset_id, epsilon_limit, delta_limit, created_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT(dataset_id) DO UPDATE SET "
                "epsilon_limit = excluded.epsilon_limit, delta_limit = excluded.delta_limit",
                (dataset_id, limit.epsilon, limit.delta, _now()),
            )
            con.execute(
                "INSERT INTO limit_changes (dataset_id, epsilon_limit, delta_limit, changed_at) VALUES (?, ?, ?, ?)",
                (dataset_id, limit.epsilon, limit.delta, _now()),
            )

    # -- lifetime caps over renewing periods --------------------------------
    @staticmethod
    def _lifetime_limit(con: _Connection, base: str) -> Budget | None:
        row = con.execute("SELECT epsilon_limit, delta_limit FROM lifetime_limits WHERE dataset_id = ?",
                          (base,)).fetchone()
        return None if row is None else Budget(float(row[0]), float(row[1]))

    def lifetime_limit(self, dataset_id: str) -> Budget | None:
        """The lifetime cap of ``dataset_id``'s group (``sales@2026-11-30`` → ``sales``), or None."""
        with self._reading() as con:
            return self._lifetime_limit(con, lifetime_dataset(dataset_id))

    def ensure_lifetime_limit(self, dataset_id: str, limit: Budget) -> Budget:
        """Registers ``limit`` as the lifetime cap of ``dataset_id``'s group on first use; returns it.

        A later request naming a different cap is refused (ConfigError):
        caps change only through :meth:`set_lifetime_limit`. Registering a
        cap below what the group has spent already is allowed (it only
        refuses further charges).
        """
        base = lifetime_dataset(dataset_id)
        with self._transaction(base) as con:
            stored = self._lifetime_limit(con, base)
            if stored is None:
                self._write_lifetime_limit(con, base, limit)
                return limit
        if stored != limit:
            raise _lifetime_mismatch(base, stored, limit)
        return stored

    def set_lifetime_limit(self, dataset_id: str, limit: Budget) -> None:
        """Sets the lifetime cap of ``dataset_id``'s group explicitly (recorded in ``limit_changes``)."""
        base = lifetime_dataset(dataset_id)
        with self._transaction(base) as con:
            self._write_lifetime_limit(con, base, limit)

    @staticmethod
    def _write_lifetime_limit(con: _Connection, base: str, limit: Budget) -> None:
        con.execute(
            "INSERT INTO lifetime_limits (dataset_id, epsilon_limit, delta_limit, created_at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT(dataset_id) DO UPDATE SET "
            "epsilon_limit = excluded.epsilon_limit, delta_limit = excluded.delta_limit",
            (base, limit.epsilon, limit.delta, _now()),
        )
        con.execute(
            "INSERT INTO limit_changes (dataset_id, epsilon_limit, delta_limit, changed_at, scope) "
            "VALUES (?, ?, ?, ?, 'lifetime')",
            (base, limit.epsilon, limit.delta, _now()),
        )

    @staticmethod
    def _group_where(base: str) -> tuple[str, tuple[Any, ...]]:
        """SQL condition (and its parameters) selecting the ledger datasets of ``base``'s group."""
        prefix = base + PERIOD_SEPARATOR
        return "(dataset_id = ? OR substr(dataset_id, 1, ?) = ?)", (base, len(prefix), prefix)

    def _group_events(self, con: _Connection, base: str) -> list[Event]:
        where, params = self._group_where(base)
        out: list[Event] = []
        for (text,) in con.execute(f"SELECT events FROM charges WHERE {where} ORDER BY seq", params).fetchall():
            out.extend(events_from_json(text))
        return out

    def _check_lifetime(self, con: _Connection, dataset_id: str, new: Sequence[Event]) -> float | None:
        """The group's lifetime ε with ``new`` added (None: no cap); raises if over the cap."""
        base = lifetime_dataset(dataset_id)
        cap = self._lifetime_limit(con, base)
        if cap is None:
            return None
        past = self._group_events(con, base)
        eps = compose_epsilon([*past, *new], cap.delta)
        if eps > cap.epsilon:
            spent = compose_epsilon(past, cap.delta)
            raise BudgetExceededError(
                f"Lifetime privacy budget of dataset {base!r} exhausted: its periods have spent epsilon={spent:.4g} "
                f"of the lifetime {cap.epsilon:g} (at delta={cap.delta:g}, exact composition of all periods); "
                f"this release on {dataset_id!r} would bring it to {eps:.4g}."
            )
        return eps

    def group_events(self, dataset_id: str) -> list[Event]:
        """Every event charged to ``dataset_id``'s group (all its periods), in charge order."""
        with self._reading() as con:
            return self._group_events(con, lifetime_dataset(dataset_id))

    def lifetime_status(self, dataset_id: str) -> LifetimeStatus | None:
        """The lifetime cap of ``dataset_id``'s group and what it has spent (None: no cap)."""
        base = lifetime_dataset(dataset_id)
        with self._reading() as con:
            cap = self._lifetime_limit(con, base)
            if cap is None:
                return None
            where, params = self._group_where(base)
            periods, releases = con.execute(
                f"SELECT COUNT(DISTINCT dataset_id), COUNT(*) FROM charges WHERE {where}", params).fetchone()
            events = self._group_events(con, base)
        return LifetimeStatus(base, cap, compose_epsilon(events, cap.delta), int(periods), int(releases))

    def lifetime_statuses(self) -> list[LifetimeStatus]:
        """:meth:`lifetime_status` of every dataset with a lifetime cap."""
        with self._reading() as con:
            bases = [r[0] for r in con.execute("SELECT dataset_id FROM lifetime_limits ORDER BY dataset_id").fetchall()]
        return [s for s in (self.lifetime_status(b) for b in bases) if s is not None]

    # -- privacy units ---------------------------------------------------
    @staticmethod
    def _declared_unit(con: _Connection, dataset_id: str) -> UnitDeclaration | None:
        row = con.execute(
            "SELECT privacy_unit, max_per_unit, neighbors FROM datasets WHERE dataset_id = ?", (dataset_id,)
        ).fetchone()
        if row is None or row[0] is None:
            return None
        return UnitDeclaration.from_stored(str(row[0]), int(row[1]), str(row[2]))

    def _check_unit(self, con: _Connection, dataset_id: str, unit: UnitDeclaration | None) -> UnitDeclaration | None:
        """The dataset's declared unit (None before its first release); raises if it does not cover ``unit``."""
        declared = self._declared_unit(con, dataset_id)
        if unit is not None and declared is not None and not declared.covers(unit):
            raise _unit_mismatch(dataset_id, declared, unit)
        return declared

    def declared_unit(self, dataset_id: str) -> UnitDeclaration | None:
        """The privacy unit the dataset's first release declared (None before it)."""
        with self._reading() as con:
            return self._declared_unit(con, dataset_id)

    # -- charges -------------------------------------------------------
    def _events_of(self, con: _Connection, dataset_id: str) -> list[Event]:
        out: list[Event] = []
        for (text,) in con.execute(
                "SELECT events FROM charges WHERE dataset_id = ? ORDER BY seq", (dataset_id,)).fetchall():
            out.extend(events_from_json(text))
        return out

    def lookup(self, release_id: str) -> Charge | None:
        """The charge recorded for ``release_id``, or None."""
        with self._reading() as con:
            row = con.execute(self._CHARGE_SELECT + " WHERE c.release_id = ?", (release_id,)).fetchone()
        return None if row is None else self._charge_of(row)

    _CHARGE_SELECT = (
        "SELECT c.seq, c.release_id, c.dataset_id, c.request_sha256, c.events, c.epsilon, c.delta, "
        "c.created_at, r.location, c.lifetime_epsilon, x.reason, c.input FROM charges c "
        "LEFT JOIN releases r ON r.release_id = c.release_id LEFT JOIN crashes x ON x.release_id = c.release_id"
    )

    @staticmethod
    def _charge_of(row: Sequence[Any]) -> Charge:
        return Charge(
            seq=row[0],
            release_id=row[1],
            dataset_id=row[2],
            request_sha256=row[3],
            events=tuple(events_from_json(row[4])),
            budget=Budget(row[5], row[6]),
            created_at=row[7],
            location=row[8],
            lifetime_epsilon=None if row[9] is None else float(row[9]),
            crash=row[10],
            lineage=None if row[11] is None else json.loads(row[11]),
        )

    def all_charges(self) -> list[Charge]:
        """Every charge of the ledger, in charge order (for audits and exports)."""
        with self._reading() as con:
            rows = con.execute(self._CHARGE_SELECT + " ORDER BY c.seq").fetchall()
        return [self._charge_of(r) for r in rows]

    def check(self, dataset_id: str, events: Sequence[Event], limit: Budget | None = None,
              unit: UnitDeclaration | None = None) -> float:
        """Dry run: the dataset's ε after these events; raises if over the limit (or the lifetime cap).

        With ``unit``, also raises ConfigError if the dataset's declared
        privacy unit does not cover it (:meth:`UnitDeclaration.covers`).
        Registers nothing and charges nothing (a read-only transaction).
        """
        with self._reading() as con:
            row = con.execute(
                "SELECT epsilon_limit, delta_limit FROM datasets WHERE dataset_id = ?", (dataset_id,)
            ).fetchone()
            stored = Budget(float(row[0]), float(row[1])) if row else None
            if stored is None and limit is None:
                raise ConfigError(
                    f"Dataset {dataset_id!r} is not in the ledger {self.path}: give 'ledger.epsilon_limit' "
                    "and 'ledger.delta_limit' to register it."
                )
            if stored is not None and limit is not None and stored != limit:
                raise _limit_mismatch(dataset_id, stored, limit)
            effective = stored or limit
            assert effective is not None
            self._check_unit(con, dataset_id, unit)
            self._check_group_unit(con, dataset_id, unit)
            eps = self._check(self._events_of(con, dataset_id), events, dataset_id, effective)
            self._check_lifetime(con, dataset_id, events)
            return eps

    @staticmethod
    def _check(past: list[Event], new: Sequence[Event], dataset_id: str, limit: Budget) -> float:
        eps = compose_epsilon([*past, *new], limit.delta)
        if eps > limit.epsilon:
            spent = compose_epsilon(past, limit.delta)
            raise BudgetExceededError(
                f"Privacy budget of dataset {dataset_id!r} exhausted: spent epsilon={spent:.4g} of "
                f"{limit.epsilon:g} (at delta={limit.delta:g}); this release would bring it to {eps:.4g}."
            )
        return eps

    def charge(
        self,
        *,
        release_id: str,
        dataset_id: str,
        request_sha256: str,
        events: Sequence[Event],
        budget: Budget,
        limit: Budget | None = None,
        unit: UnitDeclaration | None = None,
        lineage: dict[str, Any] | None = None,
    ) -> Charge:
        """Atomically checks the limit, the group's lifetime cap (and ``unit``) and appends the charge.

        Durable on return. ``lineage``: what the release is computed from
        (:mod:`spark_dp.release.lineage`; recorded as JSON, never checked).
        The first charge with a ``unit`` on a dataset declares it (in the
        same transaction); later ones must be covered by it. Likewise the
        first charge with a ``unit`` on any period of a lifetime group
        declares the group's unit and relation; later charges on every
        period must be covered by it (m may differ).
        """
        if not events:
            raise ValueError("a charge needs at least one event")
        with self._transaction(dataset_id) as con:
            lim = self._ensure_dataset(con, dataset_id, limit)
            declared = self._check_unit(con, dataset_id, unit)
            group_undeclared = self._check_group_unit(con, dataset_id, unit)  # the lifetime group's one unit
            if con.execute("SELECT 1 FROM charges WHERE release_id = ?", (release_id,)).fetchone():
                raise ReleaseConflictError(
                    f"Release id {release_id!r} was charged already; it cannot be charged twice."
                )
            self._check(self._events_of(con, dataset_id), events, dataset_id, lim)
            lifetime_eps = self._check_lifetime(con, dataset_id, events)  # same transaction: no overspend
            if unit is not None and declared is None:  # the dataset's first release declares its unit
                con.execute(
                    "UPDATE datasets SET privacy_unit = ?, max_per_unit = ?, neighbors = ? WHERE dataset_id = ?",
                    (unit.stored, unit.max_per_unit, unit.neighbors, dataset_id),
                )
            if unit is not None and group_undeclared:  # ... and the first of its lifetime group the group's
                con.execute("INSERT INTO lifetime_units VALUES (?, ?, ?, ?, ?)",
                            (lifetime_dataset(dataset_id), unit.stored, unit.neighbors, dataset_id, _now()))
            created = _now()
            seq = con.execute(
                "INSERT INTO charges (release_id, dataset_id, request_sha256, events, epsilon, delta, created_at, "
                "lifetime_epsilon, input) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING seq",
                (release_id, dataset_id, request_sha256, events_to_json(list(events)), budget.epsilon, budget.delta,
                 created, lifetime_eps, None if lineage is None else json.dumps(lineage, sort_keys=True)),
            ).fetchone()[0]
        return Charge(seq, release_id, dataset_id, request_sha256, tuple(events), budget, created, None, lifetime_eps,
                      lineage=None if lineage is None else dict(lineage))

    def mark_written(self, release_id: str, location: str) -> None:
        """Records that the charged release ``release_id`` was written at ``location``."""
        with self._transaction(None) as con:
            con.execute("INSERT INTO releases VALUES (?, ?, ?)", (release_id, location, _now()))

    def record_crash(self, release_id: str, reason: str) -> None:
        """Records that the charged release ``release_id`` failed before being written (the charge stands).

        Raises LedgerError if the id was never charged, or was written.
        """
        with self._transaction(None) as con:
            if con.execute("SELECT 1 FROM charges WHERE release_id = ?", (release_id,)).fetchone() is None:
                raise LedgerError(f"Release id {release_id!r} was never charged in ledger {self.path}.")
            if con.execute("SELECT 1 FROM releases WHERE release_id = ?", (release_id,)).fetchone():
                raise LedgerError(f"Release id {release_id!r} was written; it did not crash.")
            if con.execute("SELECT 1 FROM crashes WHERE release_id = ?", (release_id,)).fetchone() is None:
                con.execute("INSERT INTO crashes VALUES (?, ?, ?)", (release_id, str(reason), _now()))

    # -- reports -------------------------------------------------------
    def status(self, dataset_id: str | None = None) -> list[DatasetStatus]:
        """Spent and remaining budget per dataset (all datasets if None)."""
        with self._reading() as con:
            q = "SELECT dataset_id, epsilon_limit, delta_limit FROM datasets"
            rows = con.execute(q + (" WHERE dataset_id = ?" if dataset_id else "") + " ORDER BY dataset_id",
                               (dataset_id,) if dataset_id else ()).fetchall()
            out = []
            for ds, e, d in rows:
                events = self._events_of(con, ds)
                n = con.execute("SELECT COUNT(*) FROM charges WHERE dataset_id = ?", (ds,)).fetchone()[0]
                out.append(DatasetStatus(ds, Budget(e, d), compose_epsilon(events, d), int(n),
                                         self._declared_unit(con, ds)))
            return out

    def charges(self, dataset_id: str) -> list[Charge]:
        with self._reading() as con:
            rows = con.execute(self._CHARGE_SELECT + " WHERE c.dataset_id = ? ORDER BY c.seq", (dataset_id,)).fetchall()
        return [self._charge_of(r) for r in rows]

    def to_json(self, dataset_id: str | None = None) -> str:
        lifetimes: dict[str, LifetimeStatus | None] = {}

        def lifetime(ds: str) -> dict[str, Any]:
            base = lifetime_dataset(ds)
            if base not in lifetimes:
                lifetimes[base] = self.lifetime_status(base)
            lt = lifetimes[base]
            return {"lifetime_dataset": base if lt else None,
                    "lifetime_epsilon_limit": lt.limit.epsilon if lt else None,
                    "lifetime_delta_limit": lt.limit.delta if lt else None,
                    "lifetime_epsilon_spent": lt.spent_epsilon if lt else None}

        return json.dumps([
            {"dataset_id": s.dataset_id, "epsilon_limit": s.limit.epsilon, "delta_limit": s.limit.delta,
             "epsilon_spent": s.spent_epsilon, "epsilon_remaining": s.remaining_epsilon, "releases": s.releases,
             "privacy_unit": s.unit.label if s.unit else None,
             "privacy_unit_column": s.unit.unit if s.unit else None,
             "max_per_unit": s.unit.max_per_unit if s.unit else None,
             "neighbors": s.unit.neighbors if s.unit else None, **lifetime(s.dataset_id)}
            for s in self.status(dataset_id)
        ], indent=2)


class SQLiteLedger(Ledger):
    """Ledger in one SQLite file. Safe for many processes on one host.

    Charges serialise through ``BEGIN IMMEDIATE`` (the file's RESERVED lock);
    commits are durable (``synchronous=FULL``).
    """

    _serial = "INTEGER PRIMARY KEY AUTOINCREMENT"
    _begin = "BEGIN IMMEDIATE"  # takes the file's RESERVED lock: one writer at a time

    def __init__(self, uri: str, *, timeout: float = 120.0, strict: bool = True) -> None:
        self.uri = uri
        self._strict = strict
        self.path = sqlite_path_from_uri(uri)
        parent = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(parent, exist_ok=True)
        self._timeout = timeout
        self._init_schema()

    def _columns(self, con: _Connection, table: str) -> set[str]:
        return {r[1] for r in con.execute(f"PRAGMA table_info({table})").fetchall()}

    def _connect(self) -> _Connection:
        try:
            raw = sqlite3.connect(self.path, timeout=self._timeout, isolation_level=None)
        except sqlite3.Error as exc:
            raise LedgerError(f"cannot open ledger {self.path}: {exc}") from exc
        raw.execute("PRAGMA synchronous=FULL")
        raw.execute("PRAGMA foreign_keys=ON")
        return _Connection(raw, "?")


class PostgresLedger(Ledger):
    """Ledger in a PostgreSQL database, for jobs on many hosts.

    Every write transaction takes ``pg_advisory_xact_lock`` on a hash of the
    dataset's lifetime group (the id before any ``@<period>``; a global one
    for schema changes), so charges on one dataset and all its periods are
    serialised across hosts while other datasets proceed. Commits
    are durable (``synchronous_commit`` is forced on for the session).
    Requires the ``psycopg`` package (extra ``postgres``).
    """

    _serial = "BIGSERIAL PRIMARY KEY"
    _GLOBAL_LOCK = 0x5D_0000_0001

    def __init__(self, uri: str, *, connect_timeout: int = 30, strict: bool = True) -> None:
        try:
            import psycopg
        except ImportError:  # pragma: no cover - depends on the install
            raise ConfigError(
                "The 'ledger.uri' is a PostgreSQL URI but psycopg is not installed: pip install 'spark-dp[postgres]'."
            ) from None
        self._psycopg = psycopg
        self.uri = uri
        parsed = urlparse(uri)
        self.path = f"{parsed.scheme}://{parsed.hostname or ''}:{parsed.port or 5432}{parsed.path}"
        self._connect_timeout = connect_timeout
        self._strict = strict
        self._init_schema()

    def _connect(self) -> _Connection:
        try:
            raw = self._psycopg.connect(self.uri, connect_timeout=self._connect_timeout, autocommit=True)
        except self._psycopg.Error as exc:
            raise LedgerError(f"cannot open ledger {self.path}: {str(exc).strip().splitlines()[0]}") from None
        raw.execute("SET synchronous_commit = on")
        return _Connection(raw, "%s")

    def _columns(self, con: _Connection, table: str) -> set[str]:
        return {r[0] for r in con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = ? "
            "AND table_schema = current_schema()", (table,)).fetchall()}

    def _lock(self, con: _Connection, dataset_id: str | None) -> None:
        if dataset_id is None:
            con.execute("SELECT pg_advisory_xact_lock(?)", (self._GLOBAL_LOCK,))
        else:
            # Per lifetime group: charges on every period of one dataset are checked against one lifetime cap.
            con.execute("SELECT pg_advisory_xact_lock(hashtextextended(?, 0))", (lifetime_dataset(dataset_id),))


def open_ledger(uri: str, *, strict: bool = True) -> Ledger:
    """Opens the ledger named by ``uri``: ``sqlite:///path``, a file path, or ``postgresql://…``.

    ``strict=False`` opens a ledger whose lifetime groups mix privacy units
    (:meth:`Ledger.unit_conflicts`) instead of refusing it: for audits and
    for choosing the groups' units; its charges are still checked.
    """
    scheme = urlparse(uri).scheme if "://" in uri else ""
    if scheme in ("postgresql", "postgres"):
        return PostgresLedger(uri, strict=strict)
    return SQLiteLedger(uri, strict=strict)
