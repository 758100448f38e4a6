"""Driver cost of one release before its first Spark job, at d = 100 and d = 500 (issue #17, step 2).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/driver_cost.py              # d = 100, 500; prints a table
    PYTHONPATH=$PWD .venv/bin/python benchmarks/driver_cost.py --d 100 --reps 5
    PYTHONPATH=$PWD .venv/bin/python benchmarks/driver_cost.py --connect  # the same over Spark Connect

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

``--connect`` measures the same release over Spark Connect: it starts a
local Connect server (``tests/_servers.py``'s ``ConnectServer``, master
``local[2]``, stopped at the end whatever happens) and runs this script
again as its client (``SPARK_REMOTE``, no SparkContext). There the py4j
count does not apply; the client records instead, by wrapping its own
RPC methods:

* **call → first query**: from the call until the client sends its first
  ``ExecutePlan`` request carrying a query (the first job; the client has
  no status tracker);
* **RPCs**: ``AnalyzePlan`` requests (schema, explain, persist) and
  ``ExecutePlan`` requests of the release;
* **plan bytes**: the serialized size of every plan the release sends
  (``ByteSize()`` of the protobuf), in all and the largest one.
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


class ConnectRecorder:
    """Wraps a Spark Connect client's RPC methods: times of the requests and sizes of the plans sent."""

    def __init__(self, client) -> None:
        self.reset()
        orig_iter, orig_exec, orig_analyze = (client._execute_and_fetch_as_iterator, client._execute,
                                              client._analyze)

        def execute_and_fetch(req, *a, **kw):
            self._execute(req)
            return orig_iter(req, *a, **kw)

        def execute(req, *a, **kw):
            self._execute(req)
            return orig_exec(req, *a, **kw)

        def analyze(method, **kw):
            self.analyze += 1
            plan = kw.get("plan")
            self._size(plan)
            return orig_analyze(method, **kw)

        client._execute_and_fetch_as_iterator, client._execute, client._analyze = execute_and_fetch, execute, analyze

    def reset(self) -> None:
        self.first_query: float | None = None
        self.execute = self.analyze = self.plan_bytes = self.max_plan = 0

    def _size(self, plan) -> None:
        n = plan.ByteSize() if hasattr(plan, "ByteSize") else 0
        self.plan_bytes += n
        self.max_plan = max(self.max_plan, n)

    def _execute(self, req) -> None:
        self.execute += 1
        self._size(req.plan)
        if self.first_query is None and req.plan.HasField("root"):
            self.first_query = time.perf_counter()


def connect_client(args) -> None:
    """The Connect side (run by :func:`connect_main` with SPARK_REMOTE set): prints one table row per d."""
    from pyspark.sql import SparkSession

    import spark_dp

    spark = SparkSession.builder.remote(os.environ["SPARK_REMOTE"]).getOrCreate()
    spark.addArtifacts(args.package, pyfile=True)  # this checkout's spark_dp for the server's Python workers
    rec = ConnectRecorder(spark.client)
    tmp = tempfile.mkdtemp(prefix="spark-dp-driver-cost-connect-")
    dp = spark_dp.DPSession("driver_cost", ledger=f"sqlite:///{tmp}/ledger.db", epsilon_limit=1e6,
                            delta_limit=0.5, output=f"{tmp}/out", sampler="numpy")
    for d in args.d:
        cols = [f"c{i}" for i in range(d)]
        df = spark.range(args.rows).selectExpr(*[f"rand({i}) / {d} AS c{i}" for i in range(d)])

        def release(df=df, cols=cols):
            dp.second_moment(df, cols, epsilon=1.0, delta=1e-9, norm_bound=1.0)

        release()  # warm-up
        firsts, totals, counts = [], [], None
        for _ in range(args.reps):
            rec.reset()
            t0 = time.perf_counter()
            release()
            totals.append(time.perf_counter() - t0)
            firsts.append(rec.first_query - t0 if rec.first_query is not None else float("nan"))
            counts = (rec.analyze, rec.execute, rec.plan_bytes, rec.max_plan)
        print(f"| {d} | {statistics.median(firsts):.3f} | {statistics.median(totals):.3f} | "
              f"{counts[0]} / {counts[1]} | {counts[2]:,} / {counts[3]:,} |", flush=True)
    spark.stop()


def connect_main(args) -> None:
    """Starts a local Connect server, runs this script as its client, always stops the server."""
    import shutil
    import subprocess
    from pathlib import Path

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, root)
    from tests._servers import ConnectServer, spark_env

    work = Path(tempfile.mkdtemp(prefix="spark-dp-driver-cost-server-"))
    package = shutil.make_archive(str(work / "spark_dp_pkg"), "zip", root_dir=root, base_dir="spark_dp")
    server = ConnectServer(work)
    try:
        server.start()
        print(f"(Spark Connect server on {server.url}, started in {server.startup_seconds:.1f} s)")
        print("| d | call → first query (s) | total (s) | RPCs analyze / execute | plan bytes all / largest |\n"
              "|---|---|---|---|---|", flush=True)
        env = spark_env(work / "client-local", SPARK_REMOTE=server.url, PYTHONPATH=root)
        cmd = [sys.executable, os.path.abspath(__file__), "--connect-client", package, "--reps", str(args.reps),
               "--rows", str(args.rows), "--d", *map(str, args.d)]
        subprocess.run(cmd, env=env, check=True, timeout=1800)
    finally:
        server.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--d", type=int, nargs="*", default=[100, 500])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--connect", action="store_true", help="over Spark Connect (starts and stops a local server)")
    ap.add_argument("--connect-client", dest="package", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.package:
        return connect_client(args)
    if args.connect:
        return connect_main(args)

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
