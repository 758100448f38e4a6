"""spark-submit entry point: ``spark-submit jobs/release.py CONFIG``.

Ship spark_dp and its dependencies to the executors with the packed
environment ``make dist`` builds: ``--archives dist/spark-dp-env.tar.gz#environment``
with ``PYSPARK_PYTHON=./environment/bin/python`` (README, "Running on a cluster"),
unless they are installed on every node.
"""

import sys

from spark_dp.cli.main import main

if __name__ == "__main__":
    sys.exit(main(["release", *sys.argv[1:]]))
