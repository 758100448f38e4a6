"""Scaling across executors on a standalone cluster: one worker of one core against two (issue #17, item 4).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/scaling.py               # 2e5 and 1e7 rows; prints the table
    PYTHONPATH=$PWD .venv/bin/python benchmarks/scaling.py --write-doc   # ... and rewrites its block of docs/benchmarks.md
    PYTHONPATH=$PWD .venv/bin/python benchmarks/scaling.py --quick       # 2e5 rows, 1 rep: a check that it works
    PYTHONPATH=$PWD .venv/bin/python benchmarks/scaling.py --partials-only --partials 2 32 200  # summing partials

What runs, in order:

1. The data, written once with pyarrow (no Spark) under ``--data`` and kept
   for later runs: per size, 16 Parquet files (4 below 10⁶ rows) of d = 10
   double columns ``x0..x9`` and an ``item`` string column (1,000 Zipf-ish
   values), ~85 bytes a row on disk. The free space is checked first.
2. For ``workers`` = 1, then 2: a standalone cluster (master + that many
   workers of ``--cores 1`` each, ``tests/_servers.StandaloneCluster``, the
   cluster the deployment test starts) on 127.0.0.1 with free ports, and one
   driver process (``--driver``) submitting to it in client mode. The
   driver imports this checkout (``PYTHONPATH``); so do the executors'
   Python workers (``spark.executorEnv.PYTHONPATH``, ``PYSPARK_PYTHON`` =
   this interpreter). Master, workers, executors and the driver are stopped
   (their whole process trees) when the run ends, fails, times out or is
   interrupted (Ctrl-C, SIGTERM).

   Two clusters rather than one cluster of two workers with
   ``spark.cores.max`` = 1 or 2: the issue's setting literally, and no idle
   worker JVM in the one-core run. The configurations run one after the
   other, so a change of the machine's load between them shows as a change
   of speed-up: the page gives the load average before and after.
3. In each driver, per size: the releases below, a warm-up run of each at
   the first size (Python workers, imports), then ``--reps`` runs; medians.

Releases (``numpy`` sampler, SQLite ledger in a temp dir, ε = 1, δ = 10⁻⁶):

* ``second_moment DataFrame`` — Analyze Gauss, d = 10, through Spark's
  Parquet reader and ``mapInArrow`` (the direct-path detection switched
  off, as ``benchmarks/fast_path_auto.py`` does: what a frame that is not a
  plain Parquet scan gets);
* ``second_moment Parquet`` — the same release with the direct-Parquet
  path detected (``spark_dp/aggregates/_scan.py``): the tasks read the
  files with pyarrow;
* ``count_sketch`` — the ``item`` column, default k = 15, b = 65,536, its
  direct-Parquet path detected.

The path each release took is read from spark-dp's INFO log line and shown.

Per release and size: wall time with one core and with two, speed-up (one
core / two cores), the time with a Spark job of the release running (the
jobs' submission and completion times from Spark's REST API, read after
the call: nothing polls while it runs), and
the driver's share, two ways:

* **driver wall** — the call's wall time with no job of it running: before
  the first job (validation, planning, ledger), between jobs, after the
  last (summing partials, noise, ledger, write);
* **driver CPU** — CPU seconds of the driver's Python process plus its JVM
  during the call (``/proc``): this includes work done while jobs run
  (scheduling tasks, receiving results).

Then, on the two-worker cluster, the cost of summing partials
(docs/benchmarks.md, "What grows with the number of executors"): a frame
of ``n`` partitions each yielding one d × d partial (d = ``--partials-d``,
500 by default: 2 MB a partial), for each ``n`` of ``--partials``, summed
three ways (``partials_cost``): all n on the driver (as before the tree
step), through the tree step (``spark_dp/aggregates/_partials.py``), and
with the DataFrame path's cap (the input coalesced first).

A benchmark, not a test: nothing is asserted about speed.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
import urllib.request
import uuid
from datetime import datetime, timezone
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks.latency import write_doc_block  # noqa: E402

DOC = os.path.join(ROOT, "docs", "benchmarks.md")
BEGIN, END = "<!-- scaling:begin -->", "<!-- scaling:end -->"
D = 10
ITEMS = 1000
BYTES_PER_ROW = 100  # on disk, generous (d = 10 random doubles + a dictionary-encoded string)
RELEASES = ("second_moment DataFrame", "second_moment Parquet", "count_sketch")


# --------------------------------------------------------------------------- data (pyarrow, no Spark)


def make_data(root: str, rows: int) -> str:
    """``rows`` rows in 16 Parquet files (4 below 10⁶ rows) under ``root``; written once, then reused."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = os.path.join(root, f"rows_{rows}")
    if os.path.exists(os.path.join(path, "_SUCCESS")):
        return path
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    files = 16 if rows >= 1_000_000 else 4
    per_file = -(-rows // files)
    group = max(10_000, per_file // 4)  # 4 row groups a file: Spark's reader can split a file
    names = pa.array([f"item{i}" for i in range(ITEMS)])
    rng = np.random.default_rng(rows)
    left = rows
    for f in range(files):
        n_file = min(per_file, left)
        left -= n_file
        cols = [f"x{i}" for i in range(D)] + ["item"]
        schema = pa.schema([(c, pa.float64()) for c in cols[:D]] + [("item", pa.string())])
        with pq.ParquetWriter(os.path.join(path, f"part-{f:03d}.parquet"), schema) as writer:
            for start in range(0, n_file, group):
                n = min(group, n_file - start)
                x = (rng.random((n, D)) - 0.5) / D
                item = names.take(pa.array(np.floor(rng.random(n) ** 3 * ITEMS).astype(np.int64)))
                writer.write_table(pa.table([*(x[:, i] for i in range(D)), item], schema=schema),
                                   row_group_size=n)
    Path(path, "_SUCCESS").touch()
    return path


# --------------------------------------------------------------------------- the driver (one per cluster)


def _jvm_cpu(pid: int | None) -> float:
    """CPU seconds (user + system) of process ``pid`` so far; 0 if unknown."""
    if pid is None:
        return 0.0
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = raw[raw.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class PathLog(logging.Handler):
    """Keeps spark-dp's last INFO line naming the path a release took."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.last = ""

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if " path" in msg:
            self.last = msg.split(": ", 1)[-1]


def _jobs_of(spark, group: str) -> list[dict]:
    """The jobs of ``group`` from the driver's REST API (``/api/v1``, served by its UI on a free port)."""
    sc = spark.sparkContext
    url = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}/jobs"
    with urllib.request.urlopen(url, timeout=30) as resp:
        return [j for j in json.load(resp) if j.get("jobGroup") == group]


def _epoch(stamp: str) -> float:
    """Seconds since the epoch of a REST API time, e.g. ``2026-12-02T05:10:11.123GMT``."""
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%f%Z").replace(tzinfo=timezone.utc).timestamp()


def measure(spark, call) -> dict:
    """Runs ``call()`` once: wall, Spark-busy, driver wall and CPU seconds, tasks run.

    The jobs' submission and completion times come from Spark's REST API
    after the call (millisecond stamps, nothing polled while it runs, so
    the measurement costs the driver no CPU during the call).
    """
    sc = spark.sparkContext
    jvm_pid = getattr(getattr(sc._gateway, "proc", None), "pid", None)
    group = f"scaling-{uuid.uuid4().hex}"
    sc.setJobGroup(group, "release")
    cpu0, jvm0, t0 = time.process_time(), _jvm_cpu(jvm_pid), time.perf_counter()
    try:
        call()
    finally:
        total = time.perf_counter() - t0
        cpu, jvm = time.process_time() - cpu0, _jvm_cpu(jvm_pid) - jvm0
        sc.setLocalProperty("spark.jobGroup.id", None)
    spans, tasks = [], 0
    for _ in range(50):  # the listener bus records a job's end asynchronously
        jobs = _jobs_of(spark, group)
        if all("completionTime" in j for j in jobs):
            break
        time.sleep(0.1)
    for job in jobs:
        tasks += job.get("numTasks", 0)
        spans.append((_epoch(job["submissionTime"]), _epoch(job.get("completionTime", job["submissionTime"]))))
    busy, end = 0.0, float("-inf")
    for a, b in sorted(spans):  # the union of the jobs' intervals
        if b > end:
            busy += b - max(a, end)
            end = b
    return {"total": total, "spark": busy, "driver_wall": max(0.0, total - busy), "driver_cpu": cpu + jvm,
            "py_cpu": cpu, "tasks": tasks}


def releases(tmp: str):
    """{name: call(df)}; each call makes one release (fresh id) on its own dataset."""
    import spark_dp
    from spark_dp.second_moment import api as sm_api

    detect = sm_api.choose_source_paths
    cols = [f"x{i}" for i in range(D)]
    kw = {"epsilon": 1.0, "delta": 1e-6}
    sessions = {}

    def session(name: str):
        if name not in sessions:
            sessions[name] = spark_dp.DPSession(f"scaling-{name.replace(' ', '-')}", ledger=f"sqlite:///{tmp}/ledger.db",
                                                epsilon_limit=1e9, delta_limit=0.5, output=f"{tmp}/out",
                                                sampler="numpy")
        return sessions[name]

    def second_moment(df, name: str, direct: bool):
        sm_api.choose_source_paths = detect if direct else (lambda *a, **k: None)
        try:
            session(name).second_moment(df, cols, norm_bound=1.0, release_id=uuid.uuid4().hex, **kw)
        finally:
            sm_api.choose_source_paths = detect

    return {
        "second_moment DataFrame": lambda df: second_moment(df, "sm-df", False),
        "second_moment Parquet": lambda df: second_moment(df, "sm-parquet", True),
        "count_sketch": lambda df: session("sketch").count_sketch(df, "item", release_id=uuid.uuid4().hex, **kw),
    }


#: How the partials of ``partials_cost`` reach the driver: as they are (the code before the tree step), through
#: the tree step on the executors, or with the DataFrame path's cap (the input coalesced before the partial pass).
PARTIAL_MODES = ("flat", "tree", "capped")


def partials_cost(spark, d: int, counts: list[int], reps: int) -> dict:
    """Cost of summing ``n`` partials of d × d doubles, each way of ``PARTIAL_MODES``, for each n in ``counts``.

    A frame of n partitions whose tasks each yield one partial of ones (no data work: what is measured is
    the tasks, the transfer and the summing). ``flat``: all n partials to the driver (``collect_sum`` with
    no count, as before the tree step); ``tree``: the tree step for n partials at the default threshold
    (``_partials.TREE_THRESHOLD_BYTES``; no tree when n partials fit under it); ``capped``: the input
    coalesced by ``cap_partials`` first, as the DataFrame path now does, so fewer tasks yield partials.
    """
    import numpy as np
    import pyarrow as pa

    from spark_dp.aggregates import _partials

    fmt = _partials.VectorPartials(d * d)

    def one_partial(batches):
        for _ in batches:
            pass
        yield pa.RecordBatch.from_arrays([pa.array([np.ones(d * d).tobytes()], type=pa.binary())], names=["partial"])

    def run(n: int, mode: str):
        src, count = spark.range(0, n, 1, numPartitions=n), None
        if mode == "capped":
            src, count = _partials.cap_partials(src, fmt)
        elif mode == "tree":
            count = n
        return _partials.collect_sum(src.mapInArrow(one_partial, fmt.schema), fmt, count)

    out = {}
    for i, n in enumerate(counts):
        for mode in PARTIAL_MODES:
            key = f"{n}/{mode}"
            try:
                if i == 0 and mode == PARTIAL_MODES[0]:
                    measure(spark, lambda: run(n, mode))  # warm-up
                runs = [measure(spark, lambda: run(n, mode)) for _ in range(reps)]
            except Exception as exc:  # noqa: BLE001 -- e.g. spark.driver.maxResultSize: reported, not fatal
                out[key] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
                continue
            out[key] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            print(f"partials d={d} n={n:4d} {mode:6s}  total {out[key]['total']:.2f}  Spark {out[key]['spark']:.2f}  "
                  f"driver wall {out[key]['driver_wall']:.2f}  driver CPU {out[key]['driver_cpu']:.2f}  "
                  f"tasks {out[key]['tasks']:.0f}", flush=True)
    return out


def driver(args) -> None:
    from pyspark.sql import SparkSession

    tmp = tempfile.mkdtemp(prefix="spark-dp-scaling-driver-")
    spark = (SparkSession.builder.master(args.master).appName(f"spark-dp-scaling-{args.workers}")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             # the UI (on a free port) serves the REST API the job times are read from
             .config("spark.ui.port", "0").config("spark.ui.showConsoleProgress", "false")
             .config("spark.executorEnv.PYTHONPATH", ROOT)
             .config("spark.executorEnv.OPENBLAS_NUM_THREADS", "1")
             .config("spark.sql.warehouse.dir", os.path.join(tmp, "warehouse"))
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    tracker = spark.sparkContext.statusTracker()  # benchmark code; the library never uses SparkContext
    deadline = time.monotonic() + 120
    while len(tracker.getExecutorInfos()) < args.workers + 1:  # the driver is listed too
        if time.monotonic() > deadline:
            raise SystemExit(f"only {len(tracker.getExecutorInfos()) - 1} of {args.workers} executors registered")
        time.sleep(0.2)
    paths = PathLog()
    logging.getLogger("spark_dp").addHandler(paths)
    logging.getLogger("spark_dp").setLevel(logging.INFO)
    calls = releases(tmp)
    chosen = [r for r in RELEASES if r in args.only]
    results = []
    for i, rows in enumerate(args.rows):
        df = spark.read.parquet(os.path.join(args.data, f"rows_{rows}"))
        for name in chosen:
            if i == 0:
                measure(spark, lambda: calls[name](df))  # warm-up
            runs = [measure(spark, lambda: calls[name](df)) for _ in range(args.reps)]
            med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            path = paths.last if name != "second_moment DataFrame" else "Spark reader (detection switched off)"
            results.append({"release": name, "rows": rows, "path": path, **med})
            print(f"{args.workers} worker(s) {name:24s} {rows:>11,}  total {med['total']:6.2f}  Spark {med['spark']:6.2f}"
                  f"  driver wall {med['driver_wall']:.2f}  driver CPU {med['driver_cpu']:.2f}  tasks {med['tasks']:.0f}"
                  f"  [{path}]", flush=True)
    partials = partials_cost(spark, args.partials_d, args.partials, args.partials_reps) if args.partials else {}
    conf = {k: spark.conf.get(k, None) for k in ("spark.default.parallelism", "spark.driver.maxResultSize",
                                                 "spark.driver.memory")}
    conf["defaultParallelism"] = spark.sparkContext.defaultParallelism
    spark.stop()
    shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps({"results": results, "partials": partials, "conf": conf}))


# --------------------------------------------------------------------------- the orchestrator


def _terminate(signum, frame):  # SIGTERM → the same clean-up as Ctrl-C
    raise KeyboardInterrupt(f"signal {signum}")


def run_on_cluster(workers: int, args) -> dict:
    """Starts a cluster of ``workers`` one-core workers, runs the driver on it, always stops both."""
    from tests._servers import StandaloneCluster, run_client, spark_env

    work = Path(tempfile.mkdtemp(prefix=f"spark-dp-scaling-{workers}w-"))
    cluster = StandaloneCluster(work / "cluster", workers=workers, worker_memory="2g")
    try:
        cluster.start()
        print(f"cluster of {workers} worker(s) ready in {cluster.startup_seconds:.1f} s at {cluster.url}", flush=True)
        env = spark_env(work / "driver-local", PYTHONPATH=ROOT, PYSPARK_PYTHON=sys.executable,
                        PYSPARK_DRIVER_PYTHON=sys.executable)
        cmd = [sys.executable, os.path.abspath(__file__), "--driver", "--master", cluster.url,
               "--workers", str(workers), "--data", args.data, "--reps", str(args.reps),
               "--rows", *map(str, args.rows), "--only", *args.only,
               "--partials-d", str(args.partials_d), "--partials-reps", str(args.partials_reps)]
        if workers == 2 and args.partials:
            cmd += ["--partials", *map(str, args.partials)]
        run = run_client(cmd, env=env, cwd=work / "driver", name=f"driver-{workers}", timeout=args.timeout)
        lines = run.stdout.strip().splitlines()
        print("\n".join(lines[:-1]), flush=True)
        if run.returncode != 0:
            raise SystemExit(run.describe(cluster))
        return json.loads(lines[-1])
    finally:
        cluster.stop()
        left = cluster.leftovers()
        if left:
            print(f"WARNING: cluster processes left behind: {left}", file=sys.stderr)
        shutil.rmtree(work, ignore_errors=True)


def table(one: dict, two: dict) -> str:
    lines = ["| release | rows | path | 1 core s | 2 cores s | speed-up | Spark job s (1 / 2) "
             "| driver wall s (1 / 2) | driver CPU s (1 / 2) | tasks |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    by_key = {(r["release"], r["rows"]): r for r in two["results"]}
    for a in one["results"]:
        b = by_key.get((a["release"], a["rows"]))
        if b is None:
            continue
        path = "direct Parquet" if "direct Parquet" in b["path"] else "Spark reader"
        lines.append(f"| {a['release']} | {a['rows']:,} | {path} | {a['total']:.2f} | {b['total']:.2f} "
                     f"| **{a['total'] / b['total']:.2f}×** | {a['spark']:.2f} / {b['spark']:.2f} "
                     f"| {a['driver_wall']:.2f} / {b['driver_wall']:.2f} "
                     f"| {a['driver_cpu']:.2f} / {b['driver_cpu']:.2f} | {a['tasks']:.0f} / {b['tasks']:.0f} |")
    return "\n".join(lines)


def partials_table(partials: dict, d: int) -> str:
    if not partials:
        return ""
    lines = [f"| partials of {d} × {d} ({8 * d * d / 2**20:.1f} MiB each) | summed | total s | Spark job s "
             "| driver wall s | driver CPU s | tasks |", "|---:|---|---:|---:|---:|---:|---:|"]
    order = {m: i for i, m in enumerate(PARTIAL_MODES)}
    for key, r in sorted(partials.items(), key=lambda kv: (int(kv[0].split("/")[0]), order[kv[0].split("/")[1]])):
        n, mode = key.split("/")
        if "error" in r:
            lines.append(f"| {int(n)} | {mode} | failed: {r['error']} | | | | |")
        else:
            lines.append(f"| {int(n)} | {mode} | {r['total']:.2f} | {r['spark']:.2f} | {r['driver_wall']:.2f} "
                         f"| {r['driver_cpu']:.2f} | {r['tasks']:.0f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, nargs="*", default=[200_000, 10_000_000])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--only", nargs="*", default=list(RELEASES), choices=RELEASES, metavar="RELEASE",
                    help=f"releases to run (default: all of {', '.join(RELEASES)})")
    ap.add_argument("--partials-d", type=int, default=500)
    ap.add_argument("--partials", type=int, nargs="*", default=None,
                    help="partial counts for the driver-summing measurement, on the two-worker cluster "
                         "(default 2 200; none: skip it)")
    ap.add_argument("--partials-reps", type=int, default=1)
    ap.add_argument("--partials-only", action="store_true",
                    help="only the partials measurement, on the two-worker cluster (prints; no --write-doc)")
    ap.add_argument("--quick", action="store_true", help="2e5 rows, 1 rep, partials 2 and 20: a check that it works")
    ap.add_argument("--data", default=os.path.join(tempfile.gettempdir(), "spark-dp-scaling-data"))
    ap.add_argument("--timeout", type=float, default=1200.0, help="seconds per driver before it is killed")
    ap.add_argument("--write-doc", action="store_true", help="rewrite the scaling block of docs/benchmarks.md")
    ap.add_argument("--note", default="", help="a sentence printed under the tables (e.g. the machine's state)")
    ap.add_argument("--driver", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--master", help=argparse.SUPPRESS)
    ap.add_argument("--workers", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.driver:
        driver(args)
        return
    if args.partials is None:
        args.partials = [2, 200]
    if args.quick:
        args.rows, args.reps, args.partials = [200_000], 1, [2, 20]
    if args.partials_only:
        if args.write_doc:
            raise SystemExit("--partials-only prints its table; --write-doc rewrites the whole block (run without it)")
        args.rows = []

    signal.signal(signal.SIGTERM, _terminate)
    os.makedirs(args.data, exist_ok=True)
    missing = [n for n in args.rows if not os.path.exists(os.path.join(args.data, f"rows_{n}", "_SUCCESS"))]
    need = sum(missing) * BYTES_PER_ROW
    free = shutil.disk_usage(args.data).free
    if need > free - (2 << 30):
        raise SystemExit(f"{args.data}: {need / 2**30:.1f} GiB of data to write, {free / 2**30:.1f} GiB free")
    for n in args.rows:
        t0 = time.perf_counter()
        make_data(args.data, n)
        print(f"data: {n:,} rows at {os.path.join(args.data, f'rows_{n}')} ({time.perf_counter() - t0:.1f} s)", flush=True)

    load_before = os.getloadavg()
    started = time.gmtime()
    t0 = time.perf_counter()
    one = run_on_cluster(1, args) if not args.partials_only else {"results": []}
    two = run_on_cluster(2, args)
    load_after = os.getloadavg()
    body = table(one, two)
    ptab = partials_table(two.get("partials", {}), args.partials_d)
    print()
    print(body)
    if ptab:
        print()
        print(ptab)
    print(f"\nconf on the cluster: {two['conf']}; whole run {time.perf_counter() - t0:.0f} s")
    if args.write_doc:
        import platform

        import numpy
        import pyspark

        head = (f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', started)} on {os.cpu_count()} cores (shared by the "
                f"driver, the master, the workers and their executors), Python {platform.python_version()}, "
                f"PySpark {pyspark.__version__}, numpy {numpy.__version__}; standalone cluster of one-core workers, "
                f"medians of {args.reps} run(s). Load average before / after: "
                f"{load_before[0]:.1f} / {load_after[0]:.1f}.")
        write_doc_block([head, body, ptab, args.note], begin=BEGIN, end=END, doc=DOC)


if __name__ == "__main__":
    main()
