"""One power-iteration pass Xᵀ((XU)²), Σ(XU)³ on cached Spark data vs numpy in memory.

    .venv/bin/python -m benchmarks.tensor_pass [n] [d] [L]     # defaults 2000000 100 32

Writes the data once as Parquet (one list<double> column), caches the
vectorised frame (prepare_rows), and times third_moment_sums against numpy's
``X.T @ ((X @ U)**2)`` + ``((X @ U)**3).sum(0)`` on the same data in the same
process (medians of 3). Prints a Markdown row for docs/benchmarks.md.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def main(n: int = 2_000_000, d: int = 100, L: int = 32) -> None:
    from spark_dp.aggregates.moments import prepare_rows, third_moment_sums
    from spark_dp.runtime import get_spark

    path = f"/tmp/spark_dp_tensor_pass_{n}_{d}.parquet"
    gen = np.random.default_rng(0)  # benchmark data, not noise
    X = gen.normal(size=(n, d)) / np.sqrt(d)
    if not os.path.exists(path):
        flat = pa.array(X.reshape(-1))
        pq.write_table(pa.table({"x": pa.FixedSizeListArray.from_arrays(flat, d).cast(pa.list_(pa.float64()))}),
                       path, row_group_size=65536)
    U = gen.standard_normal((d, L))
    spark = get_spark("tensor-pass-bench", conf={"spark.executorEnv.OPENBLAS_NUM_THREADS": "1"})
    frame, _ = prepare_rows(spark.read.parquet(path), ["x"], dimension=d)
    frame.count()

    def timed(fn):
        ts = []
        for _ in range(3):
            t = time.perf_counter()
            out = fn()
            ts.append(time.perf_counter() - t)
        return float(np.median(ts)), out

    t_np, (S_np, m_np) = timed(lambda: ((lambda P: (X.T @ (P * P), (P**3).sum(0)))(X @ U)))
    t_sp, (S_sp, m_sp, _) = timed(lambda: third_moment_sums(frame, U, norm_bound=1e9))
    assert np.allclose(S_np, S_sp, rtol=1e-8) and np.allclose(m_np, m_sp, rtol=1e-6)
    frame.unpersist()
    print(f"| tensor pass Xᵀ((XU)²), cached | n={n} d={d} L={L} | numpy {t_np:.3f} s | spark {t_sp:.3f} s | "
          f"{t_np / t_sp:.2f}× numpy |")


if __name__ == "__main__":
    main(*[int(a) for a in sys.argv[1:]])
