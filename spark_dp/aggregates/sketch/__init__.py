"""Exact CountSketch / Count-Min tables and histograms, built in Spark SQL.

No noise and no privacy imports here: this package computes the exact k×b
table that :mod:`spark_dp.sketch` then noises through the chokepoint.

The build is pure Spark SQL (no Python UDFs, no RDDs, Spark Connect-safe):

1. normalise the rows: item column → ``bigint`` (integral types) or
   ``string``; optional weight → double clipped to [−1, 1], after clamping to public
   ``weight_bounds`` [lo, hi] and dividing by M = max(|lo|, |hi|) when given (non-finite weights
   follow the ``nonfinite`` policy); null items follow the ``nulls`` policy;
2. contribution bounding: at most ``max_items_per_unit`` rows per privacy
   unit, ranked by a keyed hash of (secret, unit, item, weight) with a fresh
   secret per table (:mod:`spark_dp.aggregates._bounding`: the choice is
   pseudo-random yet stable when Spark recomputes the rows);
3. optionally pre-sum weights per item (per (unit, item) with a unit), which
   shrinks skewed inputs before the k-fold expansion;
4. per repetition i: bucket = pmod(xxhash64(sᵢ, item), b) and
   sign = 1 − 2·(xxhash64(sᵢ ⊕ SALT, item) & 1) (see
   :mod:`spark_dp.aggregates.xxh64`, which reproduces the values in numpy);
   one ``explode`` of the k (rep, bucket, sign·w) structs, then the sum per
   counter rep·b + bucket;
5. optional per-unit clipping in sketch space: sum per (unit, rep, bucket),
   scale each unit's per-repetition vector to L2 norm ≤ C, then sum.

Shuffles (issue #17): contribution bounding hash-partitions the rows by
unit into the one rule's count (:mod:`spark_dp.aggregates._partitioning`),
so the per-unit steps 3 and 5 plan no other exchange; without a unit,
step 3 pre-sums per item within each partition; the final sums per counter
(and per histogram bin) are summed per partition in Arrow
(``np.bincount``) and on the driver, with no shuffle, so no step depends on
``spark.sql.shuffle.partitions``. Only the ≤ k·b non-zero counters of each
partition come back to the driver.

**The Arrow kernel** (``method="arrow"``, the default wherever it applies)
computes the very same table faster: steps 1–2 stay in Spark SQL
(:func:`prepare_items`, so nulls, weights and contribution bounding are
literally the same code), then one ``mapInArrow`` pass per partition

3'. groups the rows into chunks of ~2²⁰, pre-sums weights per distinct item
    with Arrow's C++ hash table (``dictionary_encode``, nulls as their own
    entry) + ``np.bincount``;
4'. hashes all distinct items of a chunk at once with a vectorised XXH64 over
    Arrow's offsets/data buffers (:func:`~spark_dp.aggregates.xxh64.xxh64_string_columns`: strings are
    grouped by length class so every step is a whole-array uint64 operation,
    no Python loop per row), bucket and sign hashes for all k repetitions in
    one call; the values equal Spark's ``xxhash64`` bit for bit;
5'. ``np.bincount`` of rep·b + bucket with weights sign·w into one k×b
    partial per task (shipped sparse when that is smaller), summed on
    the driver (the partials capped in number, and tree-summed on the
    executors first when many: :mod:`spark_dp.aggregates._partials`); for k·b > :data:`DENSE_MAX_COUNTERS` each chunk yields sparse
    (index, sum) rows instead, merged by one ``groupBy`` after an explicit
    hash exchange on the index (the one partitioning rule).

The kernel cannot do per-unit clipping in sketch space (step 5 needs all of
a unit's rows together): ``unit_l2_bound`` always uses the SQL build. Float
sums may differ from the SQL build in the last bits when weights are not
exactly representable partial sums (summation order); counts are exact.

Layout (one concern a module; this package re-exports the public names):

* :mod:`._prepare` — steps 1–2: item kind, null/weight policies,
  contribution bounding (:func:`prepare_items`);
* :mod:`._sql` — the builds on a DataFrame: Spark SQL (steps 3–5) and the
  choice of the Arrow kernel (:func:`sketch_table`, :func:`histogram_table`,
  :func:`dyadic_tables`, :func:`sketch_lookup`);
* :mod:`._kernels` — the Arrow kernels (steps 3'–5') and the collection of
  their partials;
* :mod:`._parquet` — the one direct-Parquet reader behind the ``*_parquet``
  builds;
* the hash (scalar reference and vectorised, ``SIGN_SALT``) is
  :mod:`spark_dp.aggregates.xxh64`.

Tunables have one owner each and are read there at call time
(``_kernels.DENSE_MAX_COUNTERS``, ``_kernels.CHUNK_ROWS``,
``_parquet.PARQUET_BATCH_ROWS``); they are deliberately not re-exported,
so that setting them on this package fails instead of doing nothing.
"""

from spark_dp.aggregates.sketch._parquet import dyadic_tables_parquet, histogram_table_parquet, sketch_table_parquet
from spark_dp.aggregates.sketch._prepare import (
    BUILD_METHODS,
    ITEM,
    NONFINITE_WEIGHT_POLICIES,
    NULL_ITEM_POLICIES,
    UNIT,
    WEIGHT,
    item_kind,
    prepare_items,
)
from spark_dp.aggregates.sketch._sql import (
    bucket_column,
    dyadic_tables,
    hashed_id_column,
    histogram_table,
    sign_column,
    sketch_lookup,
    sketch_table,
)
from spark_dp.aggregates.xxh64 import spark_xxhash64_array, xxh64_string_columns

__all__ = [
    "BUILD_METHODS",
    "ITEM",
    "NONFINITE_WEIGHT_POLICIES",
    "NULL_ITEM_POLICIES",
    "UNIT",
    "WEIGHT",
    "bucket_column",
    "dyadic_tables",
    "dyadic_tables_parquet",
    "hashed_id_column",
    "histogram_table",
    "histogram_table_parquet",
    "item_kind",
    "prepare_items",
    "sign_column",
    "sketch_lookup",
    "sketch_table",
    "sketch_table_parquet",
    "spark_xxhash64_array",
    "xxh64_string_columns",
]
