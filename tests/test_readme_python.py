"""The README's "Python API" section runs as pasted: its ```python blocks, in order, as one script in an empty
directory, with the interpreter a user has (``.venv/bin/python``: this one) and nothing set up beforehand.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")


def python_blocks(text: str) -> list[str]:
    """The ```python blocks of the README's "Python API" section, in order."""
    start = text.index("\n## Python API\n")
    end = text.index("\n## ", start + 1)
    return re.findall(r"^```python\n(.*?)^```\s*$", text[start:end], flags=re.M | re.S)


def test_the_readme_python_api_runs_as_pasted(tmp_path):
    blocks = python_blocks(open(README, encoding="utf-8").read())
    assert len(blocks) >= 2 and "DPSession" in blocks[0] and "dp.preview" in blocks[1]
    script = "\n".join(blocks)
    env = {**os.environ, "PYTHONPATH": ROOT}
    for var in ("SPARK_REMOTE", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"):
        env.pop(var, None)
    env["SPARK_DP_MASTER"] = "local[2]"  # the machine's cores are shared with the other tests
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "DatasetStatus(dataset_id='sales.customers'" in out and "releases=1" in out  # dp.budget()
    assert all(w in out for w in ("value", "stderr", "low", "high", "x1", "x2"))  # the labelled tables
    assert "Marked conservative" in out or "Refused" in out  # the preview's intervals summary
    assert "Traceback" not in done.stderr
    released = sorted(os.listdir(tmp_path / "releases"))
    assert sum(name.startswith(t) for name in released for t in ("second_moment", "linear_regression", "pca",
                                                                  "count_sketch", "tensor_decomposition")) == 5
