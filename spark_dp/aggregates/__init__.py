"""Aggregates layer: exact summaries computed on the executors.

Knows Spark, Arrow and numpy; never imports :mod:`spark_dp.privacy` and never
adds noise.
"""

from spark_dp.aggregates._vectors import NONFINITE_POLICIES, vectorize
from spark_dp.aggregates.gram import gram_matrix, vector_dimension
from spark_dp.aggregates.sources import FORMATS, read_dataset

__all__ = ["FORMATS", "NONFINITE_POLICIES", "gram_matrix", "read_dataset", "vector_dimension", "vectorize"]
