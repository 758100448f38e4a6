#!/usr/bin/env bash
# Builds spark-dp's wheel from this checkout into OUT_DIR (default dist/) and prints its path.
#   scripts/build_wheel.sh [OUT_DIR] [PYTHON]
# The build runs in pip's isolated build environment (setuptools from the index),
# so it needs nothing from the project's virtualenv. setuptools' build/lib is
# removed first: a module deleted from spark_dp/ would otherwise stay in the wheel.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-dist}
PYTHON=${2:-python3}
version=$(sed -nE 's/^__version__ = "([^"]+)"/\1/p' spark_dp/_version.py)
mkdir -p "$OUT"
rm -rf build/lib build/bdist.* "$OUT/spark_dp-$version-py3-none-any.whl"
"$PYTHON" -m pip wheel --quiet --no-deps --wheel-dir "$OUT" . >&2
wheel="$OUT/spark_dp-$version-py3-none-any.whl"
test -f "$wheel" || { echo "build_wheel.sh: pip built no $wheel" >&2; exit 1; }
echo "$(cd "$(dirname "$wheel")" && pwd)/$(basename "$wheel")"
