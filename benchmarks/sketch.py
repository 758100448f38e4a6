"""Build throughput of the CountSketch: Arrow kernel vs Spark SQL vs DataSketches vs a Python UDF.

    .venv/bin/python -m benchmarks.sketch [--n 10000000] [--udf-n 1000000] [--quick]

``--quick``: 10⁶ items, 10⁵ for the UDF, one run (a smoke test of the script).

Items: n draws from a Zipf law (a = 1.2) over 10⁶ distinct strings, k = 7,
b = 2¹⁶, local[2]. Compared in the same run:

* ``sketch_table(method="arrow")`` (the default): ``mapInArrow`` kernel with a
  vectorised XXH64 over the Arrow string buffers and ``np.bincount`` partials,
  with and without per-chunk pre-aggregation by item;
* the same kernel on the items already in memory (numpy/Arrow, one core, no
  Spark): the kernel's own speed, without Parquet reading and JVM → Arrow;
* ``sketch_table(method="sql")`` (Spark SQL: explode of k (rep, pmod(xxhash64),
  sign) structs, groupBy(rep, bucket).sum), with and without pre-aggregation;
* Apache DataSketches' frequent-items sketch (``frequent_strings_sketch``,
  Python package, single core, one ``update`` per item);
* a naive Python-UDF build (blake2b per item and repetition, explode,
  groupBy), run on ``--udf-n`` items and scaled linearly.

Writes the table to docs/benchmarks_sketch.md (the lead merges it into
docs/benchmarks.md). Seconds are wall-clock medians of ``--repeat`` runs on a
shared machine: read the ratios.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def make_items(path: str, n: int, vocab: int, seed: int = 7) -> None:
    gen = np.random.default_rng(seed)
    idx = ((gen.zipf(1.2, size=n) - 1) % vocab).astype(np.int32)
    words = pa.array([f"item-{i:07d}" for i in range(vocab)])
    col = pa.DictionaryArray.from_arrays(pa.array(idx), words).cast(pa.string())
    pq.write_table(pa.table({"item": col}), path, row_group_size=1 << 20)


def timed(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--vocab", type=int, default=1_000_000)
    ap.add_argument("--udf-n", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "benchmarks_sketch.md"))
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    if args.quick:
        args.n, args.udf_n, args.repeat = 1_000_000, 100_000, 1
    k, b = 7, 1 << 16

    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from spark_dp.aggregates import sketch as sk
    from spark_dp.aggregates.sketch import sketch_table
    from spark_dp.runtime import get_spark

    tmp = tempfile.mkdtemp()
    path = os.path.join(tmp, "items.parquet")
    make_items(path, args.n, args.vocab)
    udf_path = os.path.join(tmp, "items_udf.parquet")
    pq.write_table(pq.read_table(path).slice(0, args.udf_n), udf_path)
    seeds = [int(s) for s in np.random.default_rng(1).integers(-(2**63), 2**63 - 1, size=k, dtype=np.int64)]

    spark = get_spark("sketch-bench", master="local[2]", conf={"spark.sql.shuffle.partitions": "4"})
    df = spark.read.parquet(path)
    for method in ("arrow", "sql"):  # warm-up (JIT, Python workers)
        sketch_table(spark.read.parquet(udf_path), "item", seeds=seeds, buckets=b, method=method)
    rows = {}
    ref = sketch_table(df, "item", seeds=seeds, buckets=b, method="sql")
    same = np.array_equal(ref, sketch_table(df, "item", seeds=seeds, buckets=b, method="arrow"))
    print("Arrow kernel table == SQL table:", same)
    rows["Arrow kernel, pre-aggregated per chunk (default)"] = timed(
        lambda: sketch_table(df, "item", seeds=seeds, buckets=b, method="arrow"), args.repeat)
    rows["Arrow kernel, every row hashed"] = timed(
        lambda: sketch_table(df, "item", seeds=seeds, buckets=b, method="arrow", preaggregate=False), args.repeat)
    old = spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(1 << 17))
    rows["Arrow kernel, default, Arrow batches of 2¹⁷ rows (session conf)"] = timed(
        lambda: sketch_table(df, "item", seeds=seeds, buckets=b, method="arrow"), args.repeat)
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", old)

    def transfer_only(batches):  # what Spark's Parquet → Arrow → Python path costs by itself
        n = 0
        for batch in batches:
            n += batch.num_rows
        yield pa.RecordBatch.from_arrays([pa.array([n], pa.int64())], names=["n"])

    rows["(floor) mapInArrow that only counts rows: Parquet → JVM → Arrow → Python"] = timed(
        lambda: df.select("item").mapInArrow(transfer_only, "n long").toArrow(), args.repeat)
    rows["Spark SQL, pre-aggregated by item"] = timed(
        lambda: sketch_table(df, "item", seeds=seeds, buckets=b, method="sql", preaggregate=True), args.repeat)
    rows["Spark SQL, explode every row"] = timed(
        lambda: sketch_table(df, "item", seeds=seeds, buckets=b, method="sql", preaggregate=False), args.repeat)

    # The kernel alone, in this process on one core: Arrow batches already in memory.
    batches = pq.read_table(path).combine_chunks().to_batches(max_chunksize=10_000)
    kernel = sk._SketchKernel("string", seeds, b, signed=True, weighted=False, preaggregate=True, dense=True)

    def in_memory():
        out = list(kernel(iter(batches)))
        return out

    rows["Arrow kernel alone, items in memory (no Spark)"] = timed(in_memory, args.repeat)
    del batches

    # DataSketches frequent items, one core: only the update loop is timed.
    from datasketches import frequent_strings_sketch

    items = pq.read_table(path).column("item").to_pylist()

    def ds():
        sk = frequent_strings_sketch(16)
        for s in items:
            sk.update(s)
        return sk

    rows["DataSketches frequent_strings_sketch (1 core)"] = timed(ds, args.repeat)
    del items

    # Naive Python UDF: blake2b per (item, repetition).
    def naive(seeds=seeds, b=b):
        import hashlib

        keys = [int(s & ((1 << 64) - 1)).to_bytes(8, "little") for s in seeds]

        def hashes(x):
            out = []
            for i, key in enumerate(keys):
                h = int.from_bytes(hashlib.blake2b((x or "").encode(), digest_size=8, key=key).digest(), "little")
                out.append((i, h % b, 1.0 if h >> 63 else -1.0))
            return out

        udf = F.udf(hashes, T.ArrayType(T.StructType([T.StructField("rep", T.IntegerType()),
                                                        T.StructField("bucket", T.LongType()),
                                                        T.StructField("v", T.DoubleType())])))
        return (spark.read.parquet(udf_path).select(F.explode(udf("item")).alias("e")).select("e.*")
                .groupBy("rep", "bucket").agg(F.sum("v")).toArrow())

    udf_time = timed(naive, 1)
    rows[f"naive Python UDF (measured on {args.udf_n:.0e} items, scaled)"] = udf_time * args.n / args.udf_n

    ds_t = rows["DataSketches frequent_strings_sketch (1 core)"]
    lines = [
        f"## CountSketch build: {args.n:.0e} Zipf strings (10⁶ vocabulary), k = {k}, b = 2¹⁶",
        "",
        "`benchmarks/sketch.py`, local[2] (2 cores) on a shared machine; medians of "
        f"{args.repeat} runs. Throughput per core = items / (seconds × cores). "
        f"Arrow kernel table == SQL table in this run: {same}.",
        "",
        "| build | cores | seconds | items/s per core | per-core throughput vs DataSketches |",
        "|---|---|---|---|---|",
    ]
    for name, t in rows.items():
        cores = 1 if ("DataSketches" in name or "no Spark" in name) else 2
        per_core = args.n / (t * cores)
        lines.append(f"| {name} | {cores} | {t:.2f} | {per_core:,.0f} | {per_core / (args.n / ds_t):.2f}× |")
    text = "\n".join(lines) + "\n"
    print(text)
    with open(args.out, "w") as fh:
        fh.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
