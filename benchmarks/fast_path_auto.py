"""The detected direct-Parquet path against the Spark reader, on a catalog table with a partition filter (issue 15, item 5).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/fast_path_auto.py                       # 2e6 rows, d = 10
    PYTHONPATH=$PWD .venv/bin/python benchmarks/fast_path_auto.py --rows 20000000 --reps 5

A notebook user's call: ``session.second_moment(spark.table("bench.events")
.where("day IN (...)"), columns, ...)`` on a Parquet table written with
``saveAsTable(... partitionBy("day"))`` into a temporary warehouse, the
filter keeping ``--keep`` of ``--days`` partitions. Two timings per rep,
same call, same release parameters:

* **auto** — the library as shipped: the frame is detected as a plain
  Parquet scan (spark_dp/aggregates/_scan.py) and the tasks read the pruned
  partitions' files with pyarrow (the INFO log line is printed once);
* **reader** — the same call with detection switched off (the Spark
  reader: ``gram_matrix`` over the frame, JVM → Arrow).

Both runs use the ``numpy`` sampler and a SQLite ledger; each rep is a new
release. The script checks the two exact matrices agree (relative error
< 1e-12) before timing, and prints medians of ``--reps`` runs after one
warm-up of each and their ratio (auto / reader wall time; < 1 is faster).
``local[N]`` with N = ``--cores``. It prints only; the numbers for
docs/benchmarks.md are to be taken on a quiet machine.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--d", type=int, default=10)
    ap.add_argument("--days", type=int, default=10, help="partitions of the table")
    ap.add_argument("--keep", type=int, default=3, help="partitions the filter keeps")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--cores", type=int, default=2)
    args = ap.parse_args(argv)

    import numpy as np
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import spark_dp.second_moment.api as api
    from spark_dp import DPSession
    from spark_dp.aggregates import gram_matrix
    from spark_dp.aggregates._scan import parquet_scan
    from spark_dp.aggregates.gram import gram_matrix_parquet

    logging.basicConfig(level=logging.WARNING)
    work = tempfile.mkdtemp(prefix="spark-dp-fastpath-")
    spark = (SparkSession.builder.master(f"local[{args.cores}]").appName("fast-path-auto")
             .config("spark.sql.warehouse.dir", os.path.join(work, "warehouse"))
             .config("spark.ui.enabled", "false").getOrCreate())
    cols = [f"x{i}" for i in range(args.d)]
    data = spark.range(args.rows).select(
        (F.col("id") % args.days).cast("int").alias("day"),
        *[(F.rand(i) * 2 - 1).alias(c) for i, c in enumerate(cols)])
    spark.sql("CREATE DATABASE IF NOT EXISTS bench")
    data.write.mode("overwrite").format("parquet").partitionBy("day").saveAsTable("bench.events")
    days = ", ".join(str(d) for d in range(args.keep))
    frame = spark.table("bench.events").where(f"day IN ({days})")
    scan = parquet_scan(frame, cols)
    print(f"detection: {scan.reason}")
    if scan.files is None:
        sys.exit("the benchmark's frame was not detected as a plain Parquet scan")

    kern = {"norm_bound": float(np.sqrt(args.d)), "nonfinite": "drop"}
    want = gram_matrix(frame, cols, **kern)
    got = gram_matrix_parquet(scan.files, cols, spark=spark, **kern)
    err = np.abs(got - want).max() / max(np.abs(want).max(), 1e-300)
    print(f"exact matrices: relative difference {err:.2e}")
    assert err < 1e-12

    session = DPSession("bench.events", ledger=f"sqlite:///{work}/ledger.db", epsilon_limit=1e9, delta_limit=0.5,
                        output=os.path.join(work, "releases"), sampler="numpy")
    detect = api.choose_source_paths

    def release(path: str) -> float:
        api.choose_source_paths = detect if path == "auto" else (lambda *a, **k: None)
        t0 = time.perf_counter()
        session.second_moment(frame, cols, epsilon=1.0, delta=1e-6, release_id=f"{path}-{uuid.uuid4().hex}", **kern)
        return time.perf_counter() - t0

    logging.getLogger("spark_dp").setLevel(logging.INFO)
    release("auto")  # warm-up, prints the path line once
    logging.getLogger("spark_dp").setLevel(logging.WARNING)
    release("reader")
    times: dict[str, list[float]] = {"auto": [], "reader": []}
    for _ in range(args.reps):
        for path in times:
            times[path].append(release(path))
    api.choose_source_paths = detect
    med = {p: statistics.median(t) for p, t in times.items()}
    print(f"rows={args.rows} d={args.d} partitions kept={args.keep}/{args.days} cores={args.cores} "
          f"load={os.getloadavg()[0]:.1f}")
    for path, t in med.items():
        print(f"  {path:6s} median {t:7.2f} s  ({', '.join(f'{x:.2f}' for x in times[path])})")
    print(f"  ratio auto / reader: {med['auto'] / med['reader']:.2f}")
    spark.stop()
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
