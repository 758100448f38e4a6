"""Benchmark of one tensor power-method pass Xᵀ((XU)²), Σ(XU)³ (issue #4's performance target).

    .venv/bin/python benchmarks/tensor_pass.py            # n=2e6, d=100, L=32; rewrites its block of docs/benchmarks.md
    .venv/bin/python benchmarks/tensor_pass.py --quick    # n=2e5; prints the table only

Same data, same process, medians of ``--reps`` (3) runs after one warm-up,
the rows of one repetition interleaved so that load from other work on the
machine hits them alike. Rows:

* numpy ``X.T @ ((X @ U)**2)`` on the clipped rows in memory, with 1 and 2
  OpenBLAS threads; the faster median is the reference (**×numpy**).
* ``third_moment_sums`` on the cached vectorised DataFrame (``prepare_rows``,
  materialised before timing): Spark hands the cached array column to the
  Python workers every pass.
* ``third_moment_sums`` on :func:`~spark_dp.aggregates.moments.parquet_rows`
  (tasks read the Parquet files with pyarrow): with the worker block cache
  off (every pass reads the files); a first round after clearing the caches
  (reads the files and fills the caches); the rounds right after it, as the
  power method sees them (Spark picks which idle worker runs each task; the
  rows are files shared by the host's workers, so any worker finds them); and
  warm rounds (every unit served from the cache: only BLAS).

Every row's sums are checked against numpy. Spark runs ``local[2]`` with
``spark.executorEnv.OPENBLAS_NUM_THREADS=1``. The data are those of
``benchmarks/second_moment.py`` (rows N(0, I/d), 16 Parquet files of one
``list<double>`` column, under ``--data``); B = 1 clips about half the rows.

The full run rewrites the block between the ``tensor_pass`` markers in
docs/benchmarks.md (appending the section at the end if it is missing) and
leaves the rest of that page alone.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.second_moment import (  # noqa: E402
    clip,
    load_numpy,
    machine_meta,
    make_data,
    numpy_threads,
    replace_block,
    tree_cpu_seconds,
)

FULL, QUICK = (2_000_000, 100), (200_000, 100)
L_DEFAULT = 32
NORM_BOUND = 1.0
AFTER_COLD = 7  # rounds timed right after a cold round
BEGIN, END = "<!-- tensor_pass:begin -->", "<!-- tensor_pass:end -->"
SECTION = """
## Tensor power-method pass

One round of the online/private tensor power method (`spark_dp.tensor`) is
one pass Xᵀ((XU)²) and Σ(XU)³ for all L candidates (U is d × L).
`benchmarks/tensor_pass.py` times it against numpy in memory; issue #4's
target is ≥ 0.7× numpy at n = 2·10⁶, d = 100, L = 32. Over a cached
DataFrame the pass cannot get there (Spark alone costs the *floor* above to
hand the cached rows to Python), so `reuse`-mode decompositions over plain
Parquet files (`source_paths`, set by the job for `format: parquet`) read
the files in the tasks and keep each unit's clipped rows in a bounded cache
inside the reused Python worker (`spark_dp/aggregates/_worker_cache.py`):
later rounds that land on the same worker do only BLAS.

```
.venv/bin/python benchmarks/tensor_pass.py           # full size, rewrites the table below
.venv/bin/python benchmarks/tensor_pass.py --quick   # n = 2·10⁵, prints only
```

"""


def bench(spark, path: str, n: int, d: int, L: int, reps: int) -> tuple[list[dict], dict]:
    from spark_dp.aggregates.moments import clear_worker_cache, parquet_rows, prepare_rows, third_moment_sums

    Xc = clip(load_numpy(path, d), NORM_BOUND)
    assert Xc.shape == (n, d)
    U = np.random.default_rng(1).standard_normal((d, L))  # benchmark candidates, not noise
    P = Xc @ U
    S_ref, m3_ref = Xc.T @ (P * P), (P**3).sum(0)
    del P

    frame, _ = prepare_rows(spark.read.parquet(path), ["x"], dimension=d)
    assert frame.count() == n
    rows = parquet_rows(path, ["x"], dimension=d, spark=spark)
    off = parquet_rows(path, ["x"], dimension=d, spark=spark, cache_bytes=0)
    units = sum(len(t) for t in rows.tasks)
    kern = dict(norm_bound=NORM_BOUND)
    after: dict[str, list] = {"wall": [], "cpu": [], "read": []}
    first_read: list[int] = []
    warm_read: list[int] = []

    def numpy_with(k):
        def run():
            numpy_threads(k)
            try:
                return Xc.T @ ((Xc @ U) ** 2), None
            finally:
                numpy_threads(os.cpu_count() or 1)
        return run

    def cold():  # untimed setup of the first round
        clear_worker_cache(spark, rows.uris)

    def first():
        out = third_moment_sums(rows, U, **kern)
        first_read.append(rows.last_pass.units_read)
        return out

    def rounds_after():
        """Rounds 2.. right after the first: timed one by one (the caller times their sum too)."""
        out = None
        for _ in range(AFTER_COLD):
            c0, t0 = tree_cpu_seconds(), time.perf_counter()
            out = third_moment_sums(rows, U, **kern)
            after["wall"].append(time.perf_counter() - t0)
            after["cpu"].append(tree_cpu_seconds() - c0)
            after["read"].append(rows.last_pass.units_read)
        return out

    def warm():
        for _ in range(10):  # until every unit is in the worker that runs it
            out = third_moment_sums(rows, U, **kern)
            if rows.last_pass.units_read == 0:
                break
        t0 = time.perf_counter()
        c0 = tree_cpu_seconds()
        out = third_moment_sums(rows, U, **kern)
        warm.timing = (time.perf_counter() - t0, tree_cpu_seconds() - c0)
        warm_read.append(rows.last_pass.units_read)
        return out

    setup = {"first": cold}
    table = [
        ("numpy2", "numpy `X.T @ ((X @ U)**2)` in memory, 2 BLAS threads", numpy_with(2)),
        ("numpy1", "numpy `X.T @ ((X @ U)**2)` in memory, 1 BLAS thread", numpy_with(1)),
        ("cached", "`third_moment_sums`, cached DataFrame (`prepare_rows`, one array<double> column)",
         lambda: third_moment_sums(frame, U, **kern)),
        ("nocache", "`third_moment_sums`, direct Parquet, worker cache off (every round reads the files)",
         lambda: third_moment_sums(off, U, **kern)),
        ("first", "**direct Parquet, first round** (caches cleared before; reads the files, fills the caches)",
         first),
        ("after", f"direct Parquet, rounds 2–{AFTER_COLD + 1} right after the first (mean per round)", rounds_after),
        ("warm", "**direct Parquet, warm round** (every unit from the cache: BLAS only)", warm),
    ]
    walls: dict[str, list[float]] = {k: [] for k, *_ in table}
    cpus: dict[str, list[float]] = {k: [] for k, *_ in table}
    errors: dict[str, float] = {}
    for r in range(reps + 1):  # repetition 0 is the warm-up (workers, imports) and the exactness check
        for key, _, fn in table:
            if key in setup:
                setup[key]()
            c0, t0 = tree_cpu_seconds(), time.perf_counter()
            out = fn()
            wall, cpu = time.perf_counter() - t0, tree_cpu_seconds() - c0
            if key == "after":  # mean of its rounds, each timed on its own
                wall, cpu = float(np.mean(after["wall"][-AFTER_COLD:])), float(np.mean(after["cpu"][-AFTER_COLD:]))
            if key == "warm":
                wall, cpu = warm.timing
            if r == 0:
                S = out[0]
                errors[key] = float(np.max(np.abs(S - S_ref)) / np.max(np.abs(S_ref)))
                assert errors[key] < 1e-9, (key, errors[key])
                if out[1] is not None:
                    assert np.allclose(out[1], m3_ref, rtol=1e-8, atol=1e-8 * np.max(np.abs(m3_ref)))
                continue
            walls[key].append(wall)
            cpus[key].append(cpu)
            print(f"  round {r}/{reps} {key}: {wall:.2f} s, {cpu:.2f} CPU s", file=sys.stderr, flush=True)
    frame.unpersist()
    clear_worker_cache(spark, rows.uris)
    k = AFTER_COLD
    per_round = np.array(after["wall"][k:]).reshape(reps, k)  # without the warm-up repetition
    reads = np.array(after["read"][k:]).reshape(reps, k)
    info = dict(units=units, tasks=len(rows.tasks), first_read=first_read[1:], warm_read=warm_read[1:],
                after_wall=np.median(per_round, axis=0).tolist(), after_read=reads.tolist(),
                cache_bytes=rows.last_pass.cache_bytes if rows.last_pass else {})
    return [dict(key=key, what=what, wall=float(np.median(walls[key])), cpu=float(np.median(cpus[key])),
                 err=errors.get(key)) for key, what, _ in table], info


def render(n: int, d: int, L: int, results: list[dict], info: dict, meta: dict) -> str:
    by = {r["key"]: r for r in results}
    ref = min(by["numpy1"]["wall"], by["numpy2"]["wall"])
    out = [BEGIN, "", f"Measured {meta['date']} on {meta['machine']}; {meta['versions']}.",
           f"Spark `local[2]`, driver memory {meta['driver_memory']}, `spark.executorEnv.OPENBLAS_NUM_THREADS=1`; "
           f"load average before / after: {meta['load_before']} / {meta['load_after']}; whole run "
           f"{meta['duration']:.0f} s.",
           f"Median of {meta['reps']} interleaved repetitions after one warm-up. **×numpy** = throughput relative "
           "to numpy in memory on the same clipped rows, using the faster of its 1- and 2-thread medians (higher is "
           "better). CPU s = user+system seconds of the driver, JVM and Python workers together.", "",
           f"**n = {n:,}, d = {d}, L = {L}** ({n * d * 8 / 2**30:.2f} GiB of float64; {info['units']} Parquet "
           f"units in {info['tasks']} tasks; reference numpy {ref:.2f} s)", "",
           "| what | median s | CPU s | ×numpy | rel. error vs numpy |", "|---|---:|---:|---:|---:|"]
    for r in results:
        err = "" if r["err"] is None else f"{r['err']:.0e}"
        out.append(f"| {r['what']} | {r['wall']:.2f} | {r['cpu']:.1f} | {ref / r['wall']:.2f} | {err} |")
    seen = ", ".join(f"{b / 2**30:.2f}" for b in sorted(info["cache_bytes"].values()))
    out += ["",
            f"Units read from files (of {info['units']}): first rounds {info['first_read']}; rounds 2–"
            f"{AFTER_COLD + 1} after each first round {info['after_read']}; timed warm rounds {info['warm_read']}. "
            f"Median seconds of rounds 2–{AFTER_COLD + 1}: "
            + ", ".join(f"{w:.2f}" for w in info["after_wall"]) + ". "
            f"Cache at the end, GiB as each of the {len(info['cache_bytes'])} Python workers saw it (its own rows "
            f"plus the host's shared row files, which all workers of the host map): {seen}.",
            f"Speed-ups: warm round over the cached-DataFrame pass {by['cached']['wall'] / by['warm']['wall']:.1f}×; "
            f"first round over it {by['cached']['wall'] / by['first']['wall']:.1f}×. "
            f"numpy 1-thread CPU ÷ warm-round CPU {by['numpy1']['cpu'] / by['warm']['cpu']:.2f}.", "", END]
    return "\n".join(out)


def write_doc(block: str, doc: str) -> None:
    replace_block(doc, block, BEGIN, END, SECTION)  # first run: the section is appended at the page's end


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="n = 2e5; print the table, write nothing")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--restarts", type=int, default=L_DEFAULT, help="L, the candidates per pass")
    ap.add_argument("--data", default="/tmp/spark-dp-bench")
    ap.add_argument("--doc", default=os.path.join(ROOT, "docs", "benchmarks.md"))
    ap.add_argument("--driver-memory", default="6g")
    ap.add_argument("--host-cache", choices=("on", "off"), default="on",
                    help="off: each Python worker keeps its own rows (spark.executorEnv.SPARK_DP_HOST_CACHE=off)")
    args = ap.parse_args(argv)
    n, d = QUICK if args.quick else FULL
    L = args.restarts
    start = time.perf_counter()

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.pop("SPARK_REMOTE", None)
    from spark_dp.runtime import get_spark

    path = make_data(args.data, n, d)
    load_before = "%.1f" % os.getloadavg()[0]
    spark = get_spark("spark-dp-bench-tensor-pass", master="local[2]", conf={
        "spark.driver.memory": args.driver_memory, "spark.executorEnv.OPENBLAS_NUM_THREADS": "1",
        "spark.executorEnv.SPARK_DP_HOST_CACHE": args.host_cache,
        "spark.sql.shuffle.partitions": "2"})
    try:
        results, info = bench(spark, path, n, d, L, args.reps)
    finally:
        spark.stop()
    meta = machine_meta(driver_memory=args.driver_memory, reps=args.reps, load_before=load_before,
                        duration=time.perf_counter() - start)
    block = render(n, d, L, results, info, meta)
    print(block)
    if not args.quick:
        write_doc(block, args.doc)
        print(f"wrote {args.doc}", file=sys.stderr)


if __name__ == "__main__":
    main()
