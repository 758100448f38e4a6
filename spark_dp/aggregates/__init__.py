"""Aggregates layer: exact summaries computed on the executors.

Knows Spark, Arrow and numpy; never imports :mod:`spark_dp.privacy` and never
adds noise. The names below load on first use, so the layer's pyspark-free
modules (:mod:`spark_dp.aggregates.xxh64`) import without Spark.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "NONFINITE_POLICIES": "spark_dp.params",
    "FORMATS": "spark_dp.params",
    "vectorize": "spark_dp.aggregates._vectors",
    "gram_matrix": "spark_dp.aggregates.gram",
    "vector_dimension": "spark_dp.aggregates.gram",
    "read_dataset": "spark_dp.aggregates.sources",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'spark_dp.aggregates' has no attribute {name!r}")
