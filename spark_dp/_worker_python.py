"""Which Python local Spark workers run: this interpreter, unless the user said otherwise.

pyspark starts its Python workers with ``PYSPARK_PYTHON`` as it was when the
session's JVM started, and ``python3`` on the PATH when it is unset. A script
run with a virtualenv's Python (``.venv/bin/python``) that builds a plain
``SparkSession.builder.master("local[2]").getOrCreate()`` therefore gets
workers that run another Python, without spark-dp (and often without numpy
or pyarrow). :func:`default_worker_python` runs at ``import spark_dp`` and
sets ``PYSPARK_PYTHON`` to this interpreter when all of these hold:

* ``PYSPARK_PYTHON`` is unset (an explicit choice is never overridden);
* the process was not started by ``spark-submit`` / the ``pyspark`` shell
  (``PYSPARK_GATEWAY_PORT`` unset): there Spark's own conf
  (``spark.pyspark.python``) decides, and a cluster's executors may not have
  this interpreter's path;
* ``SPARK_REMOTE`` is unset: over Spark Connect the server's workers run
  whatever the server was started with.

It only affects sessions started after the import; a session started before
keeps its workers, and the library's first Spark job checks them
(:func:`spark_dp.runtime.check_workers`). No pyspark import here: the
privacy layer imports without Spark.
"""

from __future__ import annotations

import logging
import os
import sys

log = logging.getLogger("spark_dp")


def default_worker_python() -> str | None:
    """Sets ``PYSPARK_PYTHON`` to ``sys.executable`` under the conditions of the module doc; returns what it set."""
    if "PYSPARK_PYTHON" in os.environ or "PYSPARK_GATEWAY_PORT" in os.environ or os.environ.get("SPARK_REMOTE"):
        return None
    exe = sys.executable
    if not exe or not os.path.isfile(exe):
        return None
    os.environ["PYSPARK_PYTHON"] = exe
    log.debug("PYSPARK_PYTHON was unset: local Spark workers will run %s", exe)
    return exe
