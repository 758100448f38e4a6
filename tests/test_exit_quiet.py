"""A local session spark-dp starts is quiet: no start-up log lines, and no traces when a script leaves mid-job.

One subprocess (its own JVM, as a user's script has) starts the session with ``get_spark``, runs two long jobs
in daemon threads — one in Python workers (as a release's aggregation), one in the JVM — and a third thread
submitting small jobs one after the other, and leaves while they run.
Its stderr must hold nothing but what neither spark-dp nor Spark's logging controls: the JVM's own notice of
the incubator module Spark 4 loads, and pyspark's pandas FutureWarning (the README: the Python API leaves that
warning to the user).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = r"""
import threading, time
from spark_dp.runtime import get_spark

spark = get_spark("spark-dp-exit-test", master="local[2]")

def slow(batches):
    import time
    for b in batches:
        time.sleep(120)
        yield b

def python_job():
    spark.range(0, 4, numPartitions=2).mapInPandas(slow, "id long").collect()

def jvm_job():
    spark.range(0, 10**13, numPartitions=4).selectExpr("sum(id % 7) as s").collect()

def busy():  # always inside a Spark call, often between jobs: one being submitted when the session stops
    while True:
        spark.range(100).selectExpr("sum(id)").collect()

for target in (python_job, jvm_job, busy):
    threading.Thread(target=target, daemon=True).start()
tracker = spark.sparkContext.statusTracker()  # (the test's own look at the JVM: spark-dp never does this)
deadline = time.time() + 60
while len(tracker.getActiveStageIds()) < 2 and time.time() < deadline:
    time.sleep(0.2)
time.sleep(1)
print("LEAVING", time.time(), flush=True)
"""

#: stderr lines that are neither spark-dp's nor Spark's logging (module doc).
NOT_OURS = ("WARNING: Using incubator modules", "FutureWarning: PySpark does not yet fully support pandas",
            "require_minimum_pandas_version()")


def test_a_script_that_leaves_mid_job_prints_no_log_lines_and_no_trace(tmp_path):
    env = {**os.environ, "PYTHONPATH": ROOT}
    for var in ("SPARK_REMOTE", "SPARK_CONF_DIR", "JAVA_TOOL_OPTIONS", "SPARK_DP_MASTER"):
        env.pop(var, None)
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env=env)
    ended = time.time()
    assert done.returncode == 0, done.stderr[-3000:]
    left = float(next(line.split()[1] for line in done.stdout.splitlines() if line.startswith("LEAVING")))
    assert ended - left < 30  # the jobs were stopped, not waited for
    noise = [line for line in done.stderr.splitlines() if line.strip() and not any(k in line for k in NOT_OURS)]
    assert noise == [], "\n".join(noise[:40])


def test_logging_is_left_to_a_user_who_configured_it(tmp_path, monkeypatch):
    """Spark's logging is the user's when they chose it: a log4j option in the driver's Java options, or a
    log4j2.properties in the Spark conf directory. Otherwise the session gets spark-dp's file, the user's other
    Java options kept."""
    from spark_dp.runtime import LOG4J2_PROPERTIES, _quiet_logging_conf

    for var in ("SPARK_CONF_DIR", "SPARK_HOME", "JAVA_TOOL_OPTIONS", "SPARK_SUBMIT_OPTS"):
        monkeypatch.delenv(var, raising=False)
    got = _quiet_logging_conf({})["spark.driver.extraJavaOptions"]
    assert got.startswith("-Dlog4j2.configurationFile=file:")
    with open(got.split("file:", 1)[1], encoding="utf-8") as fh:
        assert fh.read() == LOG4J2_PROPERTIES
    mine = {"spark.driver.extraJavaOptions": "-Xss4m"}
    assert _quiet_logging_conf(mine)["spark.driver.extraJavaOptions"] == f"-Xss4m {got}"
    assert _quiet_logging_conf({"spark.driver.extraJavaOptions": "-Dlog4j2.configurationFile=/my.xml"}) == {}
    monkeypatch.setenv("JAVA_TOOL_OPTIONS", "-Dlog4j2.level=INFO")
    assert _quiet_logging_conf({}) == {}
    monkeypatch.delenv("JAVA_TOOL_OPTIONS")
    (tmp_path / "log4j2.properties").write_text("rootLogger.level = info\n")
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    assert _quiet_logging_conf({}) == {}
    monkeypatch.delenv("SPARK_CONF_DIR")
    monkeypatch.setenv("SPARK_HOME", str(tmp_path.parent))
    assert "spark.driver.extraJavaOptions" in _quiet_logging_conf({})  # $SPARK_HOME/conf has none
