"""Exceptions raised by spark-dp.

Every error a user can cause by a bad request (a parameter, a config key, a
column, a path, an exhausted budget) is a :class:`SparkDPError` with a
one-line message that names the problem. Such errors are always raised
*before* anything is charged to the ledger or written. Data *content* (NaN,
infinities, an empty input) is never a reason to raise: that would leak
information about the rows; see the ``nonfinite`` policy instead.
"""

from __future__ import annotations


class SparkDPError(Exception):
    """Base class of all errors raised for bad requests."""


class ConfigError(SparkDPError, ValueError):
    """A parameter or config key is missing, unknown or out of range."""


class SchemaError(SparkDPError, ValueError):
    """A column is missing or has the wrong type, or an input path does not exist."""


class BudgetExceededError(SparkDPError):
    """The release would take a dataset's privacy spend over its limit."""


class ReleaseConflictError(SparkDPError):
    """A release id is already used in a way that prevents this request.

    Raised when the id was charged but its release was never written (a crash
    between charge and write: the charge stands, use a new release id), or when
    the id belongs to another dataset or request.
    """


class LedgerError(SparkDPError):
    """The ledger cannot be opened or is inconsistent."""


class WorkerEnvironmentError(SparkDPError):
    """The Spark session's Python workers cannot run spark-dp (another Python, without spark-dp or numpy/pyarrow).

    Raised by the first release on a session, before anything is charged, with
    one line saying which Python the workers run and how to fix it.
    """


class SparkDPDeprecationWarning(FutureWarning):
    """A renamed parameter or config key was used (shown by default: a FutureWarning, meant for users).

    Old names keep working for one minor version; the message names the new one.
    """
