"""Small generated datasets for the tensor configs (conf/tensor_*.yaml) and benchmarks.

``python -m benchmarks.tensor_data [outdir]`` writes ``tensor_T.npy`` and
``tensor_rows.parquet`` (generators in spark_dp/cli/example_data.py).
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from spark_dp.cli.example_data import explicit_tensor, mixture_rows

__all__ = ["explicit_tensor", "mixture_rows", "write_all"]


def write_all(outdir: str = "data") -> tuple[str, str]:
    os.makedirs(outdir, exist_ok=True)
    tpath = os.path.join(outdir, "tensor_T.npy")
    rpath = os.path.join(outdir, "tensor_rows.parquet")
    np.save(tpath, explicit_tensor()[0])
    X = mixture_rows()[0]
    pq.write_table(pa.table({f"x{i + 1}": X[:, i] for i in range(X.shape[1])}), rpath)
    return tpath, rpath


if __name__ == "__main__":
    print(write_all(sys.argv[1] if len(sys.argv) > 1 else "data"))
