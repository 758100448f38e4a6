"""spark-dp: differentially private summaries of large datasets on Apache Spark.

``DPSession`` (which imports pyspark) is loaded on first use, so the privacy
layer and the ledger tools import without Spark.
"""

from typing import TYPE_CHECKING, Any

from spark_dp._version import __version__
from spark_dp._worker_python import default_worker_python
from spark_dp.errors import BudgetExceededError, ConfigError, ReleaseConflictError, SchemaError, SparkDPError
from spark_dp.release import Release, load_release

# Local Spark workers run this interpreter unless PYSPARK_PYTHON says otherwise (spark_dp/_worker_python.py).
default_worker_python()

if TYPE_CHECKING:
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


def __getattr__(name: str) -> Any:
    if name == "DPSession":
        from spark_dp.session import DPSession

        return DPSession
    raise AttributeError(f"module 'spark_dp' has no attribute {name!r}")
