"""Private CountSketch family (Pagh & Thorup, NeurIPS 2022) and its baselines.

Mechanisms: :func:`private_count_sketch`, :func:`private_count_min`,
:func:`count_mean_sketch`, :func:`gaussian_histogram`; estimates and heavy
hitters from released tables, each estimate's noise interval
(:func:`estimate_intervals`); merging sketches with equal seeds.
The notebook entry point is :func:`spark_dp.sketch.api.count_sketch`
(``DPSession.count_sketch``).
"""

from spark_dp.sketch._registry import SketchPlan
from spark_dp.sketch.count_sketch import (
    combine,
    count_mean_sketch,
    gaussian_histogram,
    private_count_min,
    private_count_sketch,
    simple_estimates,
)
from spark_dp.sketch.estimate import (
    SketchView,
    estimate,
    estimate_df,
    heavy_hitters,
    precision_recall,
    seeds_from_payload,
    seeds_to_payload,
)
from spark_dp.sketch.hashing import buckets_and_signs, spark_xxhash64
from spark_dp.sketch.mechanisms import DEFAULT_ESTIMATOR, MECHANISMS, plan_sketch, release_table, sketch_sensitivity
from spark_dp.sketch.merge import merge_sketches
from spark_dp.sketch.uncertainty import estimate_intervals

__all__ = [
    "DEFAULT_ESTIMATOR",
    "MECHANISMS",
    "SketchPlan",
    "SketchView",
    "buckets_and_signs",
    "combine",
    "count_mean_sketch",
    "estimate",
    "estimate_df",
    "estimate_intervals",
    "gaussian_histogram",
    "heavy_hitters",
    "merge_sketches",
    "plan_sketch",
    "precision_recall",
    "private_count_min",
    "private_count_sketch",
    "release_table",
    "seeds_from_payload",
    "seeds_to_payload",
    "simple_estimates",
    "sketch_sensitivity",
    "spark_xxhash64",
]
