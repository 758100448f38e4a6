"""Driver cost of one release before its first Spark job, at d = 100 and d = 500 (issue #17, step 2).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/driver_cost.py              # d = 100, 500; prints a table
    PYTHONPATH=$PWD .venv/bin/python benchmarks/driver_cost.py --d 100 --reps 5

For each d, a ``second_moment`` release (numpy sampler, SQLite ledger) over
``spark.range(2000)`` with d double columns (``rand(i)/d``, not cached), on
``local[2]`` with default Spark settings, measured as:

* **call → first job**: from the call until Spark lists the first job of
  the release's job group (the driver work before any task: validation,
  schema, the vector column, planning). Polled from a thread every 2 ms
  through the status tracker (benchmark code may use the SparkContext; the
  library never does).
* **total**: the whole release (job, noise, ledger, write).
* **py4j calls**: JVM round trips made by the release on the driver, counted
  in a separate run (counting slows each call a little).

Medians of ``--reps`` runs after one warm-up release at each d. The machine
is shared: read the ratios between d = 100 and d = 500, not the seconds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def session():
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("spark-dp-driver-cost")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def first_job_time(spark, fn) -> tuple[float, float]:
    """(seconds from the call to the first job of its group, seconds of the whole call)."""
    sc = spark.sparkContext
    tracker = sc.statusTracker()
    group = f"driver-cost-{uuid.uuid4().hex}"
    seen: list[float] = []
    done = threading.Event()

    def poll() -> None:
        while not done.is_set() and not seen:
            if tracker.getJobIdsForGroup(group):
                seen.append(time.perf_counter())
                return
            time.sleep(0.002)

    sc.setJobGroup(group, "release")
    t0 = time.perf_counter()
    watcher = threading.Thread(target=poll, daemon=True)
    watcher.start()
    try:
        fn()
    finally:
        t1 = time.perf_counter()
        done.set()
        watcher.join()
        sc.setLocalProperty("spark.jobGroup.id", None)
    return (seen[0] - t0 if seen else float("nan")), t1 - t0


def py4j_calls(fn) -> int:
    import py4j.clientserver as cs

    orig = cs.ClientServerConnection.send_command
    n = [0]

    def counting(self, command):
        n[0] += 1
        return orig(self, command)

    cs.ClientServerConnection.send_command = counting
    try:
        fn()
    finally:
        cs.ClientServerConnection.send_command = orig
    return n[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--d", type=int, nargs="*", default=[100, 500])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rows", type=int, default=2000)
    args = ap.parse_args()

    import spark_dp

    spark = session()
    tmp = tempfile.mkdtemp(prefix="spark-dp-driver-cost-")
    dp = spark_dp.DPSession("driver_cost", ledger=f"sqlite:///{tmp}/ledger.db", epsilon_limit=1e6,
                            delta_limit=0.5, output=f"{tmp}/out", sampler="numpy")
    print("| d | call → first job (s) | total (s) | py4j calls |\n|---|---|---|---|")
    for d in args.d:
        cols = [f"c{i}" for i in range(d)]
        df = spark.range(args.rows).selectExpr(*[f"rand({i}) / {d} AS c{i}" for i in range(d)])

        def release(df=df, cols=cols):
            dp.second_moment(df, cols, epsilon=1.0, delta=1e-9, norm_bound=1.0)

        release()  # warm-up: JIT, Python workers, imports
        firsts, totals = [], []
        for _ in range(args.reps):
            a, b = first_job_time(spark, release)
            firsts.append(a)
            totals.append(b)
        calls = py4j_calls(release)
        print(f"| {d} | {statistics.median(firsts):.3f} | {statistics.median(totals):.3f} | {calls} |", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
