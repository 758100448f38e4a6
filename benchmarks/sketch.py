"""Build throughput of the CountSketch: direct Parquet vs Arrow kernel vs Spark SQL vs DataSketches vs a UDF.

    .venv/bin/python -m benchmarks.sketch [--n 10000000] [--udf-n 1000000] [--files 2] [--quick]

``--quick``: 10⁶ items, 10⁵ for the UDF, one run (a smoke test of the script).
The full run (10⁷ items, 3 repeats) takes about 8–10 minutes on 2 quiet cores,
about 5 of them in the naive UDF on 10⁶ items (``--udf-n 100000``: 30 s).

Items: n draws from a Zipf law (a = 1.2) over 10⁶ distinct strings, k = 7,
b = 2¹⁶, local[2]. The items are written as ``--files`` Parquet files (as a
Spark job with that many tasks writes them) by ``pyarrow.parquet.write_table``
with its defaults: dictionary encoding on, 1 MB dictionary page limit (after
which a column chunk falls back to plain pages, as parquet-mr does in Spark),
row groups of 2²⁰ rows, snappy. Compared in the same run:

* ``sketch_table_parquet`` (what the release path uses for Parquet sources):
  tasks read their row groups with pyarrow (string column as dictionary
  indices + dictionary), pre-sum per dictionary entry and hash only the
  distinct items; also on the same items in one file (one task: the
  planner does not split files under ``maxPartitionBytes``), and the same
  task function run in this process on one core (reading included);
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
docs/benchmarks.md), keeping the hand-written part after the table. Seconds
are wall-clock medians of ``--repeat`` runs; CPU-s are the medians of the CPU
time of this process and all its descendants (the JVM and its Python
workers), which load from other work on a shared machine disturbs far less:
read the CPU columns there.
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


def make_items(path: str, n: int, vocab: int, seed: int = 7, files: int = 1) -> None:
    """n Zipf items; ``files`` = 1: one file at ``path``, else a directory ``path`` of that many files.

    ``pq.write_table`` defaults (dictionary encoding on, 1 MB dictionary
    pages, snappy) with row groups of 2²⁰ rows (pyarrow's default).
    """
    gen = np.random.default_rng(seed)
    idx = ((gen.zipf(1.2, size=n) - 1) % vocab).astype(np.int32)
    words = pa.array([f"item-{i:07d}" for i in range(vocab)])
    col = pa.DictionaryArray.from_arrays(pa.array(idx), words).cast(pa.string())
    table = pa.table({"item": col})
    if files == 1:
        pq.write_table(table, path, row_group_size=1 << 20)
        return
    os.makedirs(path, exist_ok=True)
    step = -(-n // files)
    for i in range(files):
        pq.write_table(table.slice(i * step, step), os.path.join(path, f"part-{i:05d}.parquet"),
                       row_group_size=1 << 20)


def _tree_cpu() -> float:
    """CPU seconds (user + system) of this process and all its live descendants (/proc; Linux)."""
    tick = os.sysconf("SC_CLK_TCK")
    parent, cpu = {}, {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent[int(pid)] = int(fields[1])
        cpu[int(pid)] = (int(fields[11]) + int(fields[12])) / tick
    me, total = os.getpid(), 0.0
    for pid, c in cpu.items():
        p = pid
        while p > 1 and p != me:
            p = parent.get(p, 0)
        if p == me:
            total += c
    return total


def timed(fn, repeat: int) -> tuple[float, float]:
    """(median wall seconds, median CPU seconds of the process tree) of ``repeat`` runs."""
    times, cpus = [], []
    for _ in range(repeat):
        c0, t0 = _tree_cpu(), time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        cpus.append(_tree_cpu() - c0)
    return statistics.median(times), statistics.median(cpus)


def _kernel_in_memory(path: str, seeds, b: int, repeat: int) -> tuple[float, float]:
    """The Arrow kernel alone on Arrow batches already in memory."""
    from spark_dp.aggregates.sketch import _kernels

    batches = pq.read_table(path).combine_chunks().to_batches(max_chunksize=10_000)
    kernel = _kernels._SketchKernel("string", seeds, b, signed=True, weighted=False, preaggregate=True, dense=True)
    return timed(lambda: list(kernel(iter(batches))), repeat)


def _datasketches(path: str, repeat: int) -> tuple[float, float]:
    """DataSketches frequent items: only the update loop is timed."""
    from datasketches import frequent_strings_sketch

    items = pq.read_table(path).column("item").to_pylist()

    def ds():
        sk = frequent_strings_sketch(16)
        for s in items:
            sk.update(s)
        return sk

    return timed(ds, repeat)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--vocab", type=int, default=1_000_000)
    ap.add_argument("--udf-n", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--files", type=int, default=2, help="Parquet files the items are written as")
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "benchmarks_sketch.md"))
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    if args.quick:
        args.n, args.udf_n, args.repeat = 1_000_000, 100_000, 1
    k, b = 7, 1 << 16

    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    from spark_dp.aggregates.sketch import _kernels, _parquet, sketch_table, sketch_table_parquet
    from spark_dp.runtime import get_spark

    tmp = tempfile.mkdtemp()
    path = os.path.join(tmp, "items")
    make_items(path, args.n, args.vocab, files=args.files)
    one_file = os.path.join(tmp, "items_one.parquet")
    make_items(one_file, args.n, args.vocab)
    udf_path = os.path.join(tmp, "items_udf.parquet")
    pq.write_table(pq.read_table(one_file).slice(0, args.udf_n), udf_path)
    seeds = [int(s) for s in np.random.default_rng(1).integers(-(2**63), 2**63 - 1, size=k, dtype=np.int64)]

    spark = get_spark("sketch-bench", master="local[2]", conf={"spark.sql.shuffle.partitions": "4"})
    df = spark.read.parquet(path)
    for method in ("arrow", "sql"):  # warm-up (JIT, Python workers)
        sketch_table(spark.read.parquet(udf_path), "item", seeds=seeds, buckets=b, method=method)
    sketch_table_parquet(udf_path, "item", seeds=seeds, buckets=b, spark=spark)
    rows = {}
    ref = sketch_table(df, "item", seeds=seeds, buckets=b, method="sql")
    same = np.array_equal(ref, sketch_table(df, "item", seeds=seeds, buckets=b, method="arrow"))
    same_direct = np.array_equal(ref, sketch_table_parquet(path, "item", seeds=seeds, buckets=b, spark=spark))
    print("Arrow kernel table == SQL table:", same, "; direct Parquet table == SQL table:", same_direct)

    # The direct-Parquet path and the Spark-reader kernel, interleaved run by run.
    direct, arrow = [], []
    for _ in range(args.repeat):
        direct.append(timed(lambda: sketch_table_parquet(path, "item", seeds=seeds, buckets=b, spark=spark), 1))
        arrow.append(timed(lambda: sketch_table(df, "item", seeds=seeds, buckets=b, method="arrow"), 1))
    rows[f"Direct Parquet (sketch_table_parquet; release path), {args.files} files"] = tuple(
        statistics.median(x) for x in zip(*direct))
    rows["Direct Parquet, the same items in one file (split by row groups over both cores)"] = timed(
        lambda: sketch_table_parquet(one_file, "item", seeds=seeds, buckets=b, spark=spark), args.repeat)

    # The direct-Parquet task function in this process, one core: reading the Parquet files included.
    from spark_dp.aggregates._parquet_tasks import plan_tasks

    kern1 = _kernels._SketchKernel("string", seeds, b, signed=True, weighted=False, preaggregate=True, dense=True)
    units = [u for t in plan_tasks(spark, sorted(df.inputFiles()), 8 * k * b) for u in t]
    task1 = _parquet._ParquetSketchTask([units], "item", None, kern1, nulls="item", nonfinite="drop")
    ids = pa.RecordBatch.from_arrays([pa.array([0], pa.int64())], names=["id"])
    rows["Direct-Parquet task alone, 1 core in this process (Parquet read included, no Spark)"] = timed(
        lambda: list(task1(iter([ids]))), args.repeat)
    rows["Arrow kernel via Spark's reader, pre-aggregated per chunk (sketch_table default)"] = tuple(
        statistics.median(x) for x in zip(*arrow))
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

    # One core in this process, the data already in memory (freed when each helper returns).
    rows["Arrow kernel alone, items in memory (no Spark)"] = _kernel_in_memory(one_file, seeds, b, args.repeat)
    rows["DataSketches frequent_strings_sketch (1 core)"] = _datasketches(one_file, args.repeat)

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

    udf_t, udf_c = timed(naive, 1)
    scale = args.n / args.udf_n
    rows[f"naive Python UDF (measured on {args.udf_n:.0e} items, scaled)"] = (udf_t * scale, udf_c * scale)

    ds_t, ds_c = rows["DataSketches frequent_strings_sketch (1 core)"]
    lines = [
        f"## CountSketch build: {args.n:.0e} Zipf strings (10⁶ vocabulary), k = {k}, b = 2¹⁶",
        "",
        "`benchmarks/sketch.py`, local[2] (2 cores); medians of "
        f"{args.repeat} runs. Throughput per core = items / (seconds × cores); CPU-s = CPU time of the "
        "driver, the JVM and the Python workers together. Data: pyarrow `write_table` defaults "
        f"(dictionary encoding on, 1 MB dictionary pages, 2²⁰-row groups), {args.files} files. "
        f"Arrow kernel table == SQL table in this run: {same}; direct-Parquet table == SQL table: {same_direct}.",
        "",
        "| build | cores | seconds | items/s per core | per-core throughput vs DataSketches "
        "| CPU-s | items per CPU-s vs DataSketches |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, (t, c) in rows.items():
        cores = 1 if ("DataSketches" in name or "no Spark" in name) else 2
        per_core = args.n / (t * cores)
        lines.append(f"| {name} | {cores} | {t:.2f} | {per_core:,.0f} | {per_core / (args.n / ds_t):.2f}× "
                     f"| {c:.2f} | {ds_c / c:.2f}× |")
    text = "\n".join(lines) + "\n"
    print(text)
    marker = "### Reading the numbers"
    if os.path.exists(args.out):  # keep the hand-written part after the table
        with open(args.out) as fh:
            old = fh.read()
        if marker in old:
            text += "\n" + old[old.index(marker):]
    with open(args.out, "w") as fh:
        fh.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
