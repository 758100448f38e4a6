"""Benchmark of the exact Gram kernel AᵀA (clipped rows) and of the DP release built on it.

    .venv/bin/python benchmarks/second_moment.py            # n=2e6,d=100 and n=2e5,d=500; writes docs/benchmarks.md
    .venv/bin/python benchmarks/second_moment.py --quick    # small sizes; prints the table only

Same data, same process, medians of ``--reps`` (3) runs, the rows of one
round interleaved so that load from other work on the machine hits them
alike. Ratios are throughputs against numpy ``X.T @ X`` in memory on the
same clipped data (the faster of numpy's 1- and 2-BLAS-thread medians).
Spark runs ``local[2]`` with ``spark.executorEnv.OPENBLAS_NUM_THREADS=1``.

Data: rows N(0, I/d) (so about half have norm > B = 1 and are clipped),
written once with pyarrow as 16 snappy Parquet files of one
``list<double>`` column ``x`` (128 MB row groups, as Spark writes them),
under ``--data`` (default /tmp/spark-dp-bench). The numpy copy is read back
from those files.

The full run rewrites the block between the ``second_moment`` markers in
docs/benchmarks.md and leaves the rest of that page alone.
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import os
import platform
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

FULL_SIZES = [(2_000_000, 100), (200_000, 500)]
QUICK_SIZES = [(100_000, 50), (20_000, 200)]
NORM_BOUND = 1.0
FILES = 16
BEGIN, END = "<!-- second_moment:begin -->", "<!-- second_moment:end -->"


# -- measuring ------------------------------------------------------------------------------

_TICK = os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds() -> float:
    """User+system CPU of this process and all its descendants (JVM, Python workers)."""
    children: dict[int, list[int]] = {}
    stats: dict[int, list[str]] = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/stat") as fh:
                s = fh.read()
        except OSError:
            continue
        rest = s[s.rindex(")") + 2 :].split()
        stats[int(p)] = rest
        children.setdefault(int(rest[1]), []).append(int(p))
    total, stack = 0.0, [os.getpid()]
    while stack:
        pid = stack.pop()
        if pid in stats:
            total += sum(int(x) for x in stats[pid][11:15]) / _TICK
        stack.extend(children.get(pid, []))
    return total


def _openblas():
    libs = glob.glob(os.path.join(os.path.dirname(np.__file__), "..", "numpy.libs", "libscipy_openblas*.so"))
    for lib in libs:
        handle = ctypes.CDLL(lib)
        for name in ("scipy_openblas_set_num_threads64_", "openblas_set_num_threads"):
            if hasattr(handle, name):
                return getattr(handle, name)
    return None


_SET_THREADS = _openblas()


def numpy_threads(k: int) -> None:
    if _SET_THREADS is None:
        raise RuntimeError("cannot set numpy's BLAS threads (OpenBLAS not found)")
    _SET_THREADS(ctypes.c_int(k))


# -- data -------------------------------------------------------------------------------------


def make_data(root: str, n: int, d: int, seed: int = 0) -> str:
    path = os.path.join(root, f"gram_n{n}_d{d}_s{seed}")
    if os.path.exists(os.path.join(path, "_DONE")):
        return path
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    gen = np.random.default_rng(seed)  # benchmark data, not noise
    rows_per_group = max(1, (128 << 20) // (8 * d))
    for i, m in enumerate(np.diff(np.linspace(0, n, FILES + 1).astype(int))):
        X = gen.standard_normal((m, d)) / np.sqrt(d)
        col = pa.ListArray.from_arrays(pa.array(np.arange(0, m * d + 1, d, dtype=np.int32)), pa.array(X.reshape(-1)))
        pq.write_table(pa.table({"x": col}), os.path.join(path, f"part-{i:05d}.parquet"), row_group_size=rows_per_group)
    open(os.path.join(path, "_DONE"), "w").close()
    return path


def load_numpy(path: str, d: int) -> np.ndarray:
    parts = [pq.read_table(f).column("x").combine_chunks().flatten().to_numpy().reshape(-1, d)
             for f in sorted(glob.glob(os.path.join(path, "*.parquet")))]
    return np.ascontiguousarray(np.concatenate(parts))


def clip(X: np.ndarray, B: float) -> np.ndarray:
    norms = np.linalg.norm(X, axis=1)
    return X * np.minimum(1.0, B / np.where(norms > 0, norms, 1.0))[:, None]


# -- one size ---------------------------------------------------------------------------------


def bench_size(spark, path: str, n: int, d: int, reps: int, tmp: str) -> list[dict]:
    from pyspark.ml.functions import array_to_vector
    from pyspark.ml.stat import Summarizer
    from pyspark.mllib.linalg.distributed import RowMatrix
    from pyspark.mllib.util import MLUtils
    from pyspark.sql import functions as F

    import spark_dp
    from benchmarks._gram_baseline import gram_matrix_baseline
    from spark_dp.aggregates import gram_matrix
    from spark_dp.aggregates.gram import gram_matrix_parquet

    X = load_numpy(path, d)
    assert X.shape == (n, d)
    G_raw = X.T @ X  # MLlib does not clip
    Xc = clip(X, NORM_BOUND)
    del X
    G = Xc.T @ Xc

    # The cached input: one array<double> column. The (always true) filter keeps
    # spark.read.parquet(path) from being answered out of this cache (checked below).
    cached = spark.read.parquet(path).where(F.size("x") >= 0).select(F.col("x").alias("v")).cache()
    vectors = cached.select(array_to_vector("v").alias("vec")).cache()
    assert cached.count() == n and vectors.count() == n
    plan = spark.read.parquet(path)._jdf.queryExecution().withCachedData().toString()
    assert "InMemoryRelation" not in plan, "the Parquet rows would read the cache"
    mllib_vectors = MLUtils.convertVectorColumnsFromML(vectors, "vec")

    def drain(batches):
        rows = 0
        for b in batches:
            rows += b.num_rows
        yield pa.RecordBatch.from_arrays([pa.array([rows])], names=["n"])

    def dp(sampler: str):
        session = spark_dp.DPSession(f"bench.n{n}.d{d}", ledger=f"sqlite:///{tmp}/ledger-{sampler}.db",
                                     epsilon_limit=1e9, delta_limit=0.5, output=f"{tmp}/releases", sampler=sampler)
        return lambda: session.second_moment(cached, ["v"], epsilon=1.0, delta=1e-6, norm_bound=NORM_BOUND,
                                             dimension=d)["matrix"]

    def jl(r: int):
        session = spark_dp.DPSession(f"bench.jl.n{n}.d{d}", ledger=f"sqlite:///{tmp}/ledger-jl.db",
                                     epsilon_limit=1e9, delta_limit=0.5, output=f"{tmp}/releases")
        return lambda: session.second_moment(cached, ["v"], epsilon=1.0, delta=1e-6, norm_bound=NORM_BOUND,
                                             dimension=d, mechanism="jl_ridge", projection_rows=r)["matrix"]

    def numpy_with(k):
        def run():
            numpy_threads(k)
            try:
                return Xc.T @ Xc
            finally:
                numpy_threads(os.cpu_count() or 1)
        return run

    kern = dict(norm_bound=NORM_BOUND, dimension=d)
    rows = [
        # key, what, function, expected result (None: not checked)
        ("numpy2", "numpy `X.T @ X` in memory, 2 BLAS threads", numpy_with(2), G),
        ("numpy1", "numpy `X.T @ X` in memory, 1 BLAS thread", numpy_with(1), G),
        ("cached", "**spark-dp `gram_matrix`, cached DataFrame** (one array<double> column)",
         lambda: gram_matrix(cached, ["v"], **kern), G),
        ("baseline", "previous kernel (plain mapInArrow, commit 783561c), cached DataFrame",
         lambda: gram_matrix_baseline(cached, ["v"], **kern), G),
        ("floor", "floor: a mapInArrow that only receives the cached batches (no maths)",
         lambda: cached.mapInArrow(drain, "n long").collect(), None),
        ("sparkread", "spark-dp `gram_matrix(spark.read.parquet(path))`",
         lambda: gram_matrix(spark.read.parquet(path), ["x"], **kern), G),
        ("direct", "**spark-dp `gram_matrix_parquet(path)`** (tasks read the files with pyarrow)",
         lambda: gram_matrix_parquet(path, ["x"], spark=spark, **kern), G),
        ("mllib", "MLlib `RowMatrix.computeGramianMatrix`, cached vectors (no clipping)",
         lambda: RowMatrix(mllib_vectors, numRows=n, numCols=d).computeGramianMatrix().toArray(), G_raw),
        ("summarizer", "`ml.stat.Summarizer` mean + variance, cached vectors (O(nd), not AᵀA)",
         lambda: vectors.select(Summarizer.metrics("mean", "variance").summary(F.col("vec"))).collect(), None),
        ("dp_numpy", "DP release `DPSession.second_moment`, sampler `numpy`, cached DataFrame", dp("numpy"), None),
        ("dp_secure", "DP release `DPSession.second_moment`, sampler `secure` (default)", dp("secure"), None),
        ("jl_d", f"DP release `jl_ridge`, r = d + 2 = {d + 2} (projection `gram`, default), cached DataFrame",
         jl(d + 2), None),
        ("jl_4d", f"DP release `jl_ridge`, r = 4d = {4 * d} (projection `gram`), cached DataFrame", jl(4 * d), None),
    ]
    walls: dict[str, list[float]] = {k: [] for k, *_ in rows}
    cpus: dict[str, list[float]] = {k: [] for k, *_ in rows}
    errors: dict[str, float] = {}
    for k, _, fn, want in rows:  # warm-up (workers, JIT, imports) and exactness check
        out = fn()
        if want is not None:
            errors[k] = float(np.max(np.abs(np.asarray(out) - want)) / np.max(np.abs(want)))
            assert errors[k] < 1e-9, (k, errors[k])
    for r in range(reps):
        for k, what, fn, _ in rows:
            c0, t0 = tree_cpu_seconds(), time.perf_counter()
            fn()
            walls[k].append(time.perf_counter() - t0)
            cpus[k].append(tree_cpu_seconds() - c0)
            print(f"  n={n} d={d} round {r + 1}/{reps} {k}: {walls[k][-1]:.2f} s", file=sys.stderr, flush=True)
    vectors.unpersist()
    cached.unpersist()
    return [dict(key=k, what=what, wall=float(np.median(walls[k])), cpu=float(np.median(cpus[k])),
                 walls=walls[k], err=errors.get(k)) for k, what, *_ in rows]


# -- report -----------------------------------------------------------------------------------


def table(results: dict[tuple[int, int], list[dict]], meta: dict) -> str:
    out = [BEGIN, "", f"Measured {meta['date']} on {meta['machine']}; {meta['versions']}.",
           f"Spark `local[2]`, driver memory {meta['driver_memory']}, `spark.executorEnv.OPENBLAS_NUM_THREADS=1`; "
           f"load average before / after: {meta['load_before']} / {meta['load_after']} (other work shares the 2 cores).",
           f"Median of {meta['reps']} interleaved runs after one warm-up. **×numpy** = throughput relative to numpy "
           "in memory on the same clipped rows, using the faster of its 1- and 2-thread medians (higher is better). "
           "CPU s = user+system seconds of the driver, JVM and Python workers together.", ""]
    for (n, d), rows in results.items():
        by = {r["key"]: r for r in rows}
        ref = min(by["numpy1"]["wall"], by["numpy2"]["wall"])
        out += [f"**n = {n:,}, d = {d}** ({n * d * 8 / 2**30:.2f} GiB of float64; reference numpy {ref:.2f} s)", "",
                "| what | median s | CPU s | ×numpy | rel. error vs numpy |", "|---|---:|---:|---:|---:|"]
        for r in rows:
            err = "" if r["err"] is None else f"{r['err']:.0e}"
            out.append(f"| {r['what']} | {r['wall']:.2f} | {r['cpu']:.1f} | {ref / r['wall']:.2f} | {err} |")
        k = by["cached"]["wall"]
        out += ["", f"DP release ÷ non-private kernel (same cached DataFrame): sampler `numpy` "
                f"{by['dp_numpy']['wall'] / k:.2f}×, sampler `secure` {by['dp_secure']['wall'] / k:.2f}×. "
                f"Speed-ups (time ratios): new kernel over the previous one (cached) "
                f"{by['baseline']['wall'] / k:.2f}×; `gram_matrix_parquet` over `gram_matrix(spark.read.parquet)` "
                f"{by['sparkread']['wall'] / by['direct']['wall']:.2f}×. "
                f"JL release ÷ kernel (target ≤ 1.5× for r ≤ 4d): r = d + 2 {by['jl_d']['wall'] / k:.2f}×, "
                f"r = 4d {by['jl_4d']['wall'] / k:.2f}×.",
                f"Same ratios in CPU-seconds (less load-sensitive): DP ÷ kernel `numpy` "
                f"{by['dp_numpy']['cpu'] / by['cached']['cpu']:.2f}×, `secure` {by['dp_secure']['cpu'] / by['cached']['cpu']:.2f}×; "
                f"numpy 1-thread CPU ÷ kernel CPU {by['numpy1']['cpu'] / by['cached']['cpu']:.2f} (cached), "
                f"{by['numpy1']['cpu'] / by['direct']['cpu']:.2f} (direct Parquet); "
                f"floor ÷ kernel CPU {by['floor']['cpu'] / by['cached']['cpu']:.2f}.", ""]
    out.append(END)
    return "\n".join(out)


def machine_meta(**extra) -> dict:
    """Date, machine, versions and load average after the run, for a benchmark table's header."""
    import pyspark
    import scipy

    cpu = "unknown CPU"
    with open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    java = os.popen("java -version 2>&1").read().split(chr(34))
    return dict(
        date=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        machine=f"{os.cpu_count()} cores ({cpu}), {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB, "
                f"{platform.system()} {platform.release()}",
        versions=(f"Python {platform.python_version()}, PySpark {pyspark.__version__}, numpy {np.__version__} "
                  f"(OpenBLAS), scipy {scipy.__version__}, pyarrow {pa.__version__}, "
                  f"Java {java[1] if len(java) > 1 else '?'}"),
        load_after="%.1f" % os.getloadavg()[0], **extra,
    )


def replace_block(doc: str, block: str, begin: str, end: str, section: str = "") -> None:
    """Writes ``block`` (which starts with ``begin`` and ends with ``end``) over the same block in ``doc``.

    A page without the markers gets ``section`` + ``block`` appended at its end.
    """
    text = open(doc).read() if os.path.exists(doc) else "# Benchmarks\n"
    if begin not in text:
        text += ("" if text.endswith("\n") else "\n") + section + begin + "\n" + end + "\n"
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    with open(doc, "w") as fh:
        fh.write(head + block + tail)


def write_doc(block: str, doc: str) -> None:
    replace_block(doc, block, BEGIN, END)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes; print the table, write nothing")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--data", default="/tmp/spark-dp-bench")
    ap.add_argument("--doc", default=os.path.join(ROOT, "docs", "benchmarks.md"))
    ap.add_argument("--driver-memory", default="9g")
    args = ap.parse_args(argv)
    sizes = QUICK_SIZES if args.quick else FULL_SIZES

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.pop("SPARK_REMOTE", None)
    from spark_dp.runtime import get_spark

    paths = {s: make_data(args.data, *s) for s in sizes}
    load_before = "%.1f" % os.getloadavg()[0]
    spark = get_spark("spark-dp-bench-second-moment", master="local[2]", conf={
        "spark.driver.memory": args.driver_memory, "spark.executorEnv.OPENBLAS_NUM_THREADS": "1",
        "spark.sql.shuffle.partitions": "2"})
    tmp = tempfile.mkdtemp(prefix="spark-dp-bench-")
    try:
        results = {s: bench_size(spark, paths[s], *s, args.reps, tmp) for s in sizes}
    finally:
        spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    meta = machine_meta(driver_memory=args.driver_memory, reps=args.reps, load_before=load_before)
    block = table(results, meta)
    print(block)
    if not args.quick:
        write_doc(block, args.doc)
        print(f"wrote {args.doc}", file=sys.stderr)


if __name__ == "__main__":
    main()
