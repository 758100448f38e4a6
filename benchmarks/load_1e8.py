"""Load test (issue 6): one private second-moment release over 10⁸ rows, d = 50.

Rows are generated on the fly by Spark SQL (``spark.range`` + ``randn``
columns), so nothing is materialised; the release goes through the normal
path (ledger, chokepoint, secure sampler, atomic write). The driver's memory
is sampled every 0.5 s — the Python driver (this process) and the JVM
driver (its child java process) — and the peaks are reported.

    .venv/bin/python benchmarks/load_1e8.py [--rows 100000000] [--dim 50] [--partitions 64]

Appends its result to docs/reliability.md. Takes tens of minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time


def _rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    if int(fh.read().split(")")[1].split()[1]) == pid:
                        out.append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=100_000_000)
    ap.add_argument("--dim", type=int, default=50)
    ap.add_argument("--partitions", type=int, default=64)
    ap.add_argument("--no-record", action="store_true", help="do not append the result to docs/reliability_load.txt")
    args = ap.parse_args()

    from pyspark.sql import functions as F

    import spark_dp
    from spark_dp.runtime import get_spark

    spark = get_spark("spark-dp load test", master="local[2]", conf={"spark.driver.memory": "2g"})
    java = [p for p in _children(os.getpid()) if "java" in open(f"/proc/{p}/cmdline").read()]
    peaks = {"python_driver_mb": 0.0, "jvm_driver_mb": 0.0}
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            peaks["python_driver_mb"] = max(peaks["python_driver_mb"], _rss_mb(os.getpid()))
            for p in java:
                peaks["jvm_driver_mb"] = max(peaks["jvm_driver_mb"], _rss_mb(p))
            time.sleep(0.5)

    threading.Thread(target=sample, daemon=True).start()
    d = args.dim
    df = spark.range(0, args.rows, numPartitions=args.partitions).select(
        *[(F.randn(1000 + i) * 0.1).alias(f"x{i}") for i in range(d)]
    )
    tmp = tempfile.mkdtemp(prefix="spark-dp-load-")
    dp = spark_dp.DPSession("load.generated", ledger=f"sqlite:///{tmp}/ledger.db", epsilon_limit=10.0,
                            delta_limit=1e-5, output=f"{tmp}/releases")
    t0 = time.perf_counter()
    rel = dp.second_moment(df, [f"x{i}" for i in range(d)], epsilon=1.0, delta=1e-6, norm_bound=1.0)
    elapsed = time.perf_counter() - t0
    stop.set()
    time.sleep(0.6)
    row = (f"| {args.rows:.0e} rows, d = {d}, {args.partitions} partitions, local[2] | {elapsed:.0f} s | "
           f"{peaks['python_driver_mb']:.0f} MB | {peaks['jvm_driver_mb']:.0f} MB | {rel['matrix'].shape} released |")
    print(row)
    print(f"PEAKS python_driver_mb={peaks['python_driver_mb']:.0f} jvm_driver_mb={peaks['jvm_driver_mb']:.0f} "
          f"seconds={elapsed:.0f}")
    if not args.no_record:
        with open(os.path.join(os.path.dirname(__file__), "..", "docs", "reliability_load.txt"), "a") as fh:
            fh.write(row + "\n")
    spark.stop()
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
