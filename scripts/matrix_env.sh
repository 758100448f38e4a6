#!/usr/bin/env bash
# One virtualenv of the version matrix, with the BUILT WHEEL installed (not the source tree).
#   scripts/matrix_env.sh NAME WHEEL [PYTHON]      prints the venv's python
# NAME: spark35          pyspark 3.5 (latest patch), whatever pandas/numpy pip resolves
#       spark43-pandas3  pyspark 4.3 + pandas 3, with the [connect] extra
# The venv lives in ${SPARK_DP_MATRIX_DIR:-.venv-matrix}/NAME and is reused while the
# wheel's requirements and this script are unchanged (their hash is in NAME/.key); the
# wheel itself is reinstalled every time, so the code tested is always this checkout's.
set -euo pipefail
cd "$(dirname "$0")/.."
NAME=$1
WHEEL=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
PYTHON=${3:-python3}
case "$NAME" in
  spark35)         extra="";          pins=("pyspark==3.5.*") ;;
  spark43-pandas3) extra="[connect]"; pins=("pyspark==4.3.*" "pandas>=3") ;;
  *) echo "matrix_env.sh: unknown matrix entry '$NAME' (spark35, spark43-pandas3)" >&2; exit 2 ;;
esac
ROOT=${SPARK_DP_MATRIX_DIR:-.venv-matrix}
VENV="$ROOT/$NAME"
key=$( ("$PYTHON" scripts/wheel_requires.py "$WHEEL"; cat scripts/matrix_env.sh) | sha256sum | cut -c1-16)
pip_q=(--quiet --disable-pip-version-check)
if [ "$(cat "$VENV/.key" 2>/dev/null)" != "$key" ]; then
  echo "matrix_env.sh: creating $VENV (${pins[*]})" >&2
  rm -rf "$VENV"
  mkdir -p "$ROOT"
  "$PYTHON" -m venv "$VENV"
  # A current pip builds pyspark's sdist into a cached wheel (the venv's bundled pip would run setup.py install).
  "$VENV/bin/python" -m pip install "${pip_q[@]}" --upgrade pip >&2
  "$VENV/bin/python" -m pip install "${pip_q[@]}" "$WHEEL$extra" "${pins[@]}" >&2
  echo "$key" > "$VENV/.key"
fi
"$VENV/bin/python" -m pip install "${pip_q[@]}" --no-deps --force-reinstall "$WHEEL" >&2
echo "$(cd "$VENV" && pwd)/bin/python"
