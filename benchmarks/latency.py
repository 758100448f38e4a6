"""Latency of one release per family at everyday sizes, split by where the time goes (issue #17).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/latency.py                  # 2e4 and 2e5 rows; rewrites its block of docs/benchmarks.md
    PYTHONPATH=$PWD .venv/bin/python benchmarks/latency.py --rows 20000     # one size, prints only
    PYTHONPATH=$PWD .venv/bin/python benchmarks/latency.py --rows 20000 200000 2000000

A new user's setting: ``SparkSession.builder.master("local[2]")`` with
Spark's defaults (``spark.sql.shuffle.partitions`` = 200, AQE on), the data
read from Parquet (written once per size, not cached), a SQLite ledger and
the ``numpy`` sampler (the default ``secure`` sampler's cost is its own
row of docs/benchmarks.md). Releases:

* ``second_moment`` — d = 10, Analyze Gauss;
* ``linear_regression`` — 9 features + label;
* ``pca`` — d = 10, k = 2;
* ``count_sketch`` — item column of 1,000 Zipf-ish strings, default k, b;
* ``tensor fresh`` / ``tensor reuse`` — d = 3, k = 1, restarts = 4,
  iterations = 5 (issue #17's case);
* ``privacy unit`` — ``second_moment`` with ``privacy_unit`` (about 4 rows
  a unit, ``max_rows_per_unit = 2``): contribution bounding's shuffle.

Each release's wall time is split, from outside the library:

* **setup** — the call until its first Spark job is listed (validation,
  schema, planning), less the ledger's time in that span;
* **Spark** — time during which at least one of its jobs is running;
* **noise** — time inside the sampler's draws;
* **ledger** — time inside the ledger's methods (look-up, budget check,
  charge, marked written);
* **write** — time inside ``write_release``;
* **other** — the rest (driver work between jobs: collecting partials,
  the power method's driver steps, manifest building);
* **jobs** — how many Spark jobs the release ran (its job group, from the
  status tracker).

Jobs are watched through the status tracker from a thread polling every
2 ms (benchmark code may use the SparkContext; the library never does), so
setup and Spark are ±2 ms. Medians of ``--reps`` (3) runs after one
warm-up run per release and size. The machine is shared by other work;
the page says so and gives the load average.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "benchmarks.md")
BEGIN, END = "<!-- latency:begin -->", "<!-- latency:end -->"
PARTS = ("setup", "spark", "noise", "ledger", "write", "other")
D = 10


class Clock:
    """Seconds spent inside wrapped callables, by part."""

    def __init__(self) -> None:
        self.t = dict.fromkeys(PARTS, 0.0)
        self.depth = 0
        self.calls: list[tuple[float, float]] = []  # (start, end) of every timed call

    def wrap(self, part: str, fn):
        @functools.wraps(fn)
        def timed(*a, **kw):
            if self.depth:  # nested (a ledger method calling another): count the outer one only
                return fn(*a, **kw)
            self.depth += 1
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                t1 = time.perf_counter()
                self.t[part] += t1 - t0
                self.calls.append((t0, t1))
                self.depth -= 1
        return timed


class Timed:
    """A proxy whose public methods add their time to ``clock`` under ``part``."""

    def __init__(self, inner, clock: Clock, part: str) -> None:
        object.__setattr__(self, "_inner", inner)
        object.__setattr__(self, "_clock", clock)
        object.__setattr__(self, "_part", part)

    def __getattr__(self, name):
        value = getattr(self._inner, name)
        if callable(value) and not name.startswith("__"):
            return self._clock.wrap(self._part, value)
        return value


def patch_writes(clock_ref: list) -> None:
    """Times ``write_release`` wherever the release path imported it (robust to where that code lives)."""
    from spark_dp.release import release as rel

    orig = rel.write_release

    @functools.wraps(orig)
    def timed(*a, **kw):
        clock = clock_ref[0]
        return clock.wrap("write", orig)(*a, **kw) if clock is not None else orig(*a, **kw)

    for mod in list(sys.modules.values()):
        if getattr(mod, "__name__", "").startswith("spark_dp") and getattr(mod, "write_release", None) is orig:
            mod.write_release = timed


def watch_jobs(spark, group: str, stop: threading.Event, out: dict) -> threading.Thread:
    """A thread recording the first job's listing time and the time with a job of ``group`` running."""
    tracker = spark.sparkContext.statusTracker()

    def run() -> None:
        running_since = None
        busy = 0.0
        first = None
        while not stop.is_set():
            now = time.perf_counter()
            ids = tracker.getJobIdsForGroup(group)
            if ids and first is None:
                first = now
            active = set(tracker.getActiveJobsIds()) & set(ids)
            if active and running_since is None:
                running_since = now
            elif not active and running_since is not None:
                busy += now - running_since
                running_since = None
            time.sleep(0.002)
        if running_since is not None:
            busy += time.perf_counter() - running_since
        out["first"], out["busy"] = first, busy
        out["jobs"] = len(tracker.getJobIdsForGroup(group))

    th = threading.Thread(target=run, daemon=True)
    th.start()
    return th


def make_data(spark, n: int, root: str) -> str:
    path = os.path.join(root, f"rows_{n}.parquet")
    if not os.path.exists(path):
        exprs = [f"(rand({i}) - 0.5) / {D} AS x{i}" for i in range(D)]
        exprs += ["CAST(id / 4 AS BIGINT) AS u",  # ~4 rows per unit
                  "concat('item', CAST(floor(pow(rand(99), 3) * 1000) AS STRING)) AS item"]
        spark.range(n).selectExpr(*exprs).write.parquet(path)
    return path


def releases():
    cols = [f"x{i}" for i in range(D)]
    kw = {"epsilon": 1.0, "delta": 1e-6}
    tensor = {"columns": ["x0", "x1", "x2"], "k": 1, "restarts": 4, "iterations": 5, "norm_bound": 1.0, **kw}
    return {
        "second_moment": lambda dp, df: dp.second_moment(df, cols, norm_bound=1.0, **kw),
        "linear_regression": lambda dp, df: dp.linear_regression(df, cols[:9], "x9", norm_bound=1.0, **kw),
        "pca": lambda dp, df: dp.pca(df, cols, 2, norm_bound=1.0, **kw),
        "count_sketch": lambda dp, df: dp.count_sketch(df, "item", **kw),
        "tensor fresh": lambda dp, df: dp.tensor_decomposition(df, mode="fresh", **tensor),
        "tensor reuse": lambda dp, df: dp.tensor_decomposition(df, mode="reuse", **tensor),
        "privacy unit": lambda dp, df: dp.second_moment(df, cols, norm_bound=1.0, privacy_unit="u",
                                                        max_rows_per_unit=2, **kw),
    }


def run_once(spark, dp, fn, df, clock_ref) -> dict:
    clock = Clock()
    clock_ref[0] = clock
    inner_ledger, inner_sampler = dp.ledger, dp.sampler
    dp.ledger = Timed(inner_ledger, clock, "ledger")
    dp.sampler = Timed(inner_sampler, clock, "noise")
    group = f"latency-{uuid.uuid4().hex}"
    stop, jobs = threading.Event(), {}
    sc = spark.sparkContext
    sc.setJobGroup(group, "release")
    th = watch_jobs(spark, group, stop, jobs)
    t0 = time.perf_counter()
    try:
        fn(dp, df)
    finally:
        total = time.perf_counter() - t0
        stop.set()
        th.join()
        sc.setLocalProperty("spark.jobGroup.id", None)
        dp.ledger, dp.sampler = inner_ledger, inner_sampler
        clock_ref[0] = None
    out = dict(clock.t)
    first = jobs.get("first") or (t0 + total)
    # setup is the driver's own work before the first job: ledger (and any other timed) calls before it are theirs
    before = sum(min(b, first) - a for a, b in clock.calls if a < first)
    out["setup"] = max(0.0, first - t0 - before)
    out["spark"] = jobs.get("busy", 0.0)
    out["total"] = total
    out["other"] = max(0.0, total - sum(out[p] for p in PARTS if p != "other"))
    out["jobs"] = jobs.get("jobs", 0)
    return out


def machine_line(load_before: tuple, load_after: tuple) -> str:
    import platform

    import numpy
    import pyspark

    return (f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {os.cpu_count()} cores, "
            f"Python {platform.python_version()}, PySpark {pyspark.__version__}, numpy {numpy.__version__}; "
            f"Spark `local[2]`, default settings. Load average before / after: "
            f"{load_before[0]:.1f} / {load_after[0]:.1f}.")


def table(results: dict) -> str:
    lines = ["| release | rows | total s | setup | Spark | noise | ledger | write | other | jobs |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for (name, n), r in results.items():
        lines.append(f"| {name} | {n:,} | **{r['total']:.2f}** | " + " | ".join(f"{r[p]:.2f}" for p in PARTS)
                     + f" | {r['jobs']:.0f} |")
    ratios = [f"{n:,} rows: {results[('tensor fresh', n)]['total'] / results[('tensor reuse', n)]['total']:.2f}×"
              for (name, n) in results if name == "tensor fresh" and ("tensor reuse", n) in results]
    if ratios:
        lines += ["", "Tensor `fresh` / `reuse` (medians): " + ", ".join(ratios) + "."]
    return "\n".join(lines)


def replace_block(text: str, block: str, begin: str = BEGIN, end: str = END) -> str:
    if begin in text and end in text:
        a, b = text.index(begin), text.index(end) + len(end)
        return text[:a] + block + text[b:]
    return text.rstrip("\n") + "\n\n" + block + "\n"


def write_doc_block(paragraphs, *, begin: str = BEGIN, end: str = END, doc: str = DOC) -> None:
    """Rewrites the block between ``begin`` and ``end`` of ``doc`` with ``paragraphs`` (empty ones left out)."""
    block = "\n".join([begin, "", *(line for p in paragraphs if p for line in (p, "")), end])
    with open(doc) as fh:
        text = fh.read()
    with open(doc, "w") as fh:
        fh.write(replace_block(text, block, begin, end))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, nargs="*", default=[20_000, 200_000])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--only", nargs="*", default=None, help="release names to run (default: all)")
    ap.add_argument("--data", default=os.path.join(tempfile.gettempdir(), "spark-dp-latency-data"))
    ap.add_argument("--write-doc", action="store_true", help="rewrite the latency block of docs/benchmarks.md")
    ap.add_argument("--note", default="", help="a sentence printed under the table (e.g. the machine's state)")
    args = ap.parse_args()

    from pyspark.sql import SparkSession

    import spark_dp

    load_before = os.getloadavg()
    spark = (SparkSession.builder.master("local[2]").appName("spark-dp-latency")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    os.makedirs(args.data, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="spark-dp-latency-")
    sessions = {}  # one dataset per release: a ledger declares one privacy unit per dataset

    def session_for(name: str):
        if name not in sessions:
            sessions[name] = spark_dp.DPSession(f"latency-{name.replace(' ', '-')}", ledger=f"sqlite:///{tmp}/ledger.db",
                                                epsilon_limit=1e6, delta_limit=0.5, output=f"{tmp}/out",
                                                sampler="numpy")
        return sessions[name]

    clock_ref: list = [None]
    patch_writes(clock_ref)
    chosen = {k: v for k, v in releases().items() if not args.only or k in args.only}
    results = {}
    for n in args.rows:
        df = spark.read.parquet(make_data(spark, n, args.data))
        for name, fn in chosen.items():
            dp = session_for(name)
            run_once(spark, dp, fn, df, clock_ref)  # warm-up
            runs = [run_once(spark, dp, fn, df, clock_ref) for _ in range(args.reps)]
            med = {p: statistics.median(r[p] for r in runs) for p in (*PARTS, "total", "jobs")}
            results[(name, n)] = med
            print(f"{name:18s} {n:>9,}  total {med['total']:6.2f}  " +
                  "  ".join(f"{p} {med[p]:.2f}" for p in PARTS) + f"  jobs {med['jobs']:.0f}", flush=True)
    load_after = os.getloadavg()
    spark.stop()
    body = table(results)
    print()
    print(body)
    if args.write_doc:
        write_doc_block([machine_line(load_before, load_after), body, args.note])


if __name__ == "__main__":
    main()
