"""Delta Lake and Apache Iceberg for real: the warehouse suite (``tests/warehouse/``) in its own Spark process.

Why a separate process: the Delta and Iceberg jars must be on the classpath
when the JVM starts, and the shared test session must not carry them (two
SQL extensions and Delta's ``spark_catalog`` under 1,800 other tests). Which
pyspark: no Delta Lake or Iceberg release supports the project's main
pyspark line (4.3) yet (``spark_dp.runtime.TABLE_FORMAT_PACKAGES``), so the
suites run on the version matrix's virtualenvs (``scripts/matrix_env.sh``,
with the built wheel): ``spark35`` (the Databricks LTS line) in ``make
test``; ``spark40``, ``spark41``, ``spark42`` and ``delta`` (what ``pip install
'spark-dp[delta]'`` resolves: pyspark 4.2.0 with delta-spark 4.4) under
``SPARK_DP_MATRIX=full`` (``make smoke-all``), each with the formats that have
a build for its line. A suite runs with pytest, from a scratch directory so
that ``spark_dp`` is the installed wheel, in one Spark session that
``spark_dp.runtime.get_spark(formats=...)`` creates.

The jars come through Spark's own ``spark.jars.packages`` resolution from
Maven Central into ``~/.cache/spark-dp/ivy`` (``tests/warehouse/ivy.py``):
about 55 MB per Spark line the first time (Iceberg's runtime is 47 MB of it),
nothing on later runs. docs/storage.md ("Cost") has the measured times: the 3.5
row that make test runs, the full matrix's first and warm runs.
"""

from __future__ import annotations

import os
import sys
import xml.etree.ElementTree as ET

import pytest

from spark_dp.runtime import TABLE_FORMAT_PACKAGES
from tests._servers import REPO, run_client, spark_env

pytestmark = pytest.mark.warehouse

WAREHOUSE = REPO / "tests" / "warehouse"
SUITES = {"delta": "suite_delta.py", "iceberg": "suite_iceberg.py"}
# matrix entry (scripts/matrix_env.sh): its Spark line. spark35 runs in make test; the others only in the full
# matrix (SPARK_DP_MATRIX=full, make smoke-all). "delta" is what `pip install 'spark-dp[delta]'` gives a fresh
# machine (pyspark 4.2.0 with delta-spark 4.4): the Delta suite there is the extra's end-to-end test.
ENTRIES = {"spark35": "3.5"}
FULL = {"spark40": "4.0", "spark41": "4.1", "spark42": "4.2", "delta": "4.2"}
if os.environ.get("SPARK_DP_MATRIX") == "full":
    ENTRIES.update(FULL)
ONLY = {"delta": ("delta",)}  # the extra's venv runs the Delta suite only (the 4.2 line has no Iceberg build anyway)
ENV_TIMEOUT = 1500.0
SUITE_TIMEOUT = 1500.0


def suites_for(entry: str) -> list[str]:
    """The suites a matrix entry runs: the formats with a build for its Spark line (none for Iceberg on 4.2)."""
    return [f for f in ONLY.get(entry, SUITES) if ENTRIES[entry] in TABLE_FORMAT_PACKAGES[f]]


CASES = [(entry, suite) for entry in ENTRIES for suite in suites_for(entry)]
_RUNS: dict[str, tuple] = {}


def _warehouse_run(entry, built_wheel, tmp_path_factory):
    """Runs the entry's suites in one pytest process on its matrix venv; (run, {suite: {test: failure or None}})."""
    if entry in _RUNS:
        return _RUNS[entry]
    tmp = tmp_path_factory.mktemp(f"warehouse-{entry}")
    base_python = getattr(sys, "_base_executable", sys.executable)
    env = spark_env(tmp / "local")
    del env["SPARK_HOME"]  # the venv's own pyspark
    made = run_client(["bash", str(REPO / "scripts" / "matrix_env.sh"), entry, str(built_wheel), base_python],
                      env=env, cwd=tmp / "env", name="matrix-env", timeout=ENV_TIMEOUT)
    assert made.returncode == 0, made.describe()
    python = made.stdout.strip().splitlines()[-1]
    has_pytest = run_client([python, "-c", "import pytest"], env=env, cwd=tmp / "env", name="has-pytest")
    if has_pytest.returncode != 0:  # the test runner itself, once per venv (pip's cache makes it quick)
        got = run_client([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "pytest"],
                         env=env, cwd=tmp / "env", name="pip-pytest", timeout=300)
        assert got.returncode == 0, got.describe()
    sys.path.insert(0, str(WAREHOUSE))
    try:
        from ivy import submit_args
    finally:
        sys.path.remove(str(WAREHOUSE))
    env.pop("PYTHONPATH", None)
    suites = suites_for(entry)
    env.update(PYSPARK_PYTHON=python, PYSPARK_DRIVER_PYTHON=python, SPARK_DP_TEST_FORMATS=",".join(suites), SPARK_DP_TEST_ENTRY=entry,
               PYSPARK_SUBMIT_ARGS=submit_args(str(tmp / "ivy-settings")))
    junit = tmp / "junit.xml"
    cmd = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(WAREHOUSE), "-o", "addopts=",
           "--durations=0", f"--junitxml={junit}", *(str(WAREHOUSE / SUITES[f]) for f in suites)]
    run = run_client(cmd, env=env, cwd=tmp / "run", name=f"warehouse-suite-{entry}", timeout=SUITE_TIMEOUT)
    print(f"\n[warehouse] {entry}: env ready in {made.seconds:.1f} s, suites {run.seconds:.1f} s")
    print(run.stdout[-6000:])  # shown on failure (and with -s): the suite's own report and durations
    assert junit.exists(), run.describe()
    results: dict[str, dict[str, str | None]] = {k: {} for k in suites}
    for case in ET.parse(junit).getroot().iter("testcase"):
        suite = next(k for k in suites if case.get("classname", "").endswith(SUITES[k][:-3]))
        bad = case.find("failure") if case.find("failure") is not None else case.find("error")
        if case.find("skipped") is not None:
            bad = case.find("skipped")
        results[suite][case.get("name")] = None if bad is None else (bad.get("message") or "") + "\n" + (bad.text or "")
    _RUNS[entry] = run, results
    return _RUNS[entry]


@pytest.mark.parametrize(("entry", "suite"), CASES, ids=[f"{e}-{s}" for e, s in CASES])
def test_warehouse_suite_passes_against_the_real_format(entry, suite, built_wheel, tmp_path_factory):
    run, results = _warehouse_run(entry, built_wheel, tmp_path_factory)
    cases = results[suite]
    assert len(cases) >= 4, run.describe()  # the suite ran (a collection error leaves no cases)
    failed = {name: why for name, why in cases.items() if why is not None}
    assert not failed, "\n\n".join(f"{name}:\n{why[-3000:]}" for name, why in failed.items())
