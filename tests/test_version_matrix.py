"""Version-matrix smoke run: the BUILT WHEEL in its own virtualenv per supported-version corner.

Each entry is a virtualenv that scripts/matrix_env.sh makes (reused while
pyproject.toml is unchanged) with the wheel scripts/build_wheel.sh builds from
this checkout, so packaging is tested along with the code: a module left out
of the wheel, or a dependency pin pip cannot satisfy, fails here. Inside it,
scripts/smoke.py runs with ``python -I`` (source tree off ``sys.path``; it
checks that driver and executors import spark_dp from site-packages): the demo,
one release per family, idempotence, budget refusal and, where the version
has a Connect server in its pip package, a Spark Connect release.

* ``spark35``: pyspark 3.5.7, classic. Spark Connect on 3.5 runs in
  tests/test_connect35.py, in the same venv, against a 3.5.7 Connect server
  whose jar (``spark-connect_2.12``, not in pyspark's package) Spark's
  ``--packages`` fetches from Maven Central.
* ``spark43-pandas3``: pyspark 4.3 with pandas 3 and the ``[connect]`` extra.
* ``spark40``, ``spark41``, ``spark42`` (the full matrix, only with
  ``SPARK_DP_MATRIX=full``, i.e. ``make smoke-all``): pyspark 4.0, 4.1 and
  4.2 with the ``[connect]`` extra, a Connect release included. Not in
  ``make test`` (each costs a virtualenv and a smoke run: about 3 minutes
  more per version); the README gives the date of their last run.

``make test`` runs the first two with the rest of the suite (``pytest -m matrix`` runs only them).
"""

from __future__ import annotations

import json
import os
import sys

import pytest

from tests._servers import REPO, run_client, spark_env

pytestmark = pytest.mark.matrix

MATRIX = {
    # name: (pyspark version prefix, pandas major or None, Connect check)
    "spark35": ("3.5.", None, False),
    "spark43-pandas3": ("4.3.", "3", True),
}
FULL = {  # SPARK_DP_MATRIX=full (make smoke-all): the other supported 4.x minors
    "spark40": ("4.0.", None, True),
    "spark41": ("4.1.", None, True),
    "spark42": ("4.2.", None, True),
}
if os.environ.get("SPARK_DP_MATRIX") == "full":
    MATRIX.update(FULL)
CHECKS = ["wheel", "demo", "idempotence", "second_moment", "tensor", "count_sketch", "budget_refusal"]
ENV_TIMEOUT = 1500.0  # a cold pip cache downloads and builds pyspark (~5 min measured for both envs here)
SMOKE_TIMEOUT = 600.0


@pytest.mark.parametrize("name", list(MATRIX))
def test_smoke_set_on_built_wheel(name, built_wheel, tmp_path):
    pyspark_prefix, pandas_major, connect = MATRIX[name]
    base_python = getattr(sys, "_base_executable", sys.executable)
    env = spark_env(tmp_path / "local")
    del env["SPARK_HOME"]  # this process's pyspark; the venv's own is found (and set) by smoke.py
    made = run_client(["bash", str(REPO / "scripts" / "matrix_env.sh"), name, str(built_wheel), base_python],
                      env=env, cwd=tmp_path / "env", name="matrix-env", timeout=ENV_TIMEOUT)
    assert made.returncode == 0, made.describe()
    python = made.stdout.strip().splitlines()[-1]
    # The workers must run the matrix venv's Python: earlier tests in the same pytest process set
    # PYSPARK_PYTHON to the project venv, whose editable install would import spark_dp from the source tree.
    env.pop("PYTHONPATH", None)
    env.update(PYSPARK_PYTHON=python, PYSPARK_DRIVER_PYTHON=python)

    cmd = [python, "-I", str(REPO / "scripts" / "smoke.py"), "--repo", str(REPO), "--workdir", str(tmp_path / "w")]
    smoke = run_client(cmd + (["--connect"] if connect else []), env=env, cwd=tmp_path / "smoke", name="smoke",
                       timeout=SMOKE_TIMEOUT)
    lines = smoke.stdout.strip().splitlines()
    summary = next((json.loads(line) for line in reversed(lines) if line.startswith("{")), None)
    assert summary is not None, smoke.describe()
    failed = [f"{c['name']}: {c['error']}" for c in summary["checks"] if not c["ok"]]
    assert not failed and smoke.returncode == 0, "\n".join(failed) + "\n" + smoke.describe()
    assert [c["name"] for c in summary["checks"]] == CHECKS + (["connect"] if connect else [])
    versions = summary["versions"]
    assert versions["pyspark"].startswith(pyspark_prefix) and versions["spark"] == versions["pyspark"], versions
    assert pandas_major is None or versions["pandas"].split(".")[0] == pandas_major, versions
    assert versions["numpy"].split(".")[0] == "2", versions
    times = ", ".join(f"{c['name']} {c['seconds']}" for c in summary["checks"])
    print(f"\n[matrix] {name} {versions}: env ready in {made.seconds:.1f} s, smoke {smoke.seconds:.1f} s ({times})")
