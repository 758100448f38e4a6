"""spark-dp: differentially private summaries of large datasets on Apache Spark."""

from spark_dp._version import __version__
from spark_dp.errors import BudgetExceededError, ConfigError, ReleaseConflictError, SchemaError, SparkDPError
from spark_dp.release import Release, load_release
from spark_dp.session import DPSession

__all__ = [
    "BudgetExceededError",
    "ConfigError",
    "DPSession",
    "Release",
    "ReleaseConflictError",
    "SchemaError",
    "SparkDPError",
    "__version__",
    "load_release",
]
