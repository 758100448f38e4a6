"""spark-submit entry point: ``spark-submit jobs/release.py CONFIG``.

Ship the package to the executors with ``--py-files`` (a zip of spark_dp/)
unless it is installed on every node.
"""

import sys

from spark_dp.cli.main import main

if __name__ == "__main__":
    sys.exit(main(["release", *sys.argv[1:]]))
