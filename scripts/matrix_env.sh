#!/usr/bin/env bash
# One virtualenv of the version matrix, with the BUILT WHEEL installed (not the source tree).
#   scripts/matrix_env.sh NAME WHEEL [PYTHON]      prints the venv's python
# NAME: spark35          pyspark 3.5.7, whatever pandas/numpy pip resolves, plus the Spark Connect
#                        client's own dependencies installed directly (pyspark 3.5's [connect] extra
#                        pins numpy < 2, which spark-dp cannot use). 3.5.7 is the newest 3.5 patch
#                        whose Connect server jar (spark-connect_2.12) Maven Central serves to this
#                        project's machines: tests/test_connect35.py starts that server from this venv.
#       spark43-pandas3  pyspark 4.3 + pandas 3, with the [connect] extra
#       spark40, spark41, spark42   pyspark 4.0 / 4.1 / 4.2 with the [connect] extra
#                        (the full matrix: SPARK_DP_MATRIX=full, `make smoke-all`; not in make test)
#       delta            the [delta] extra and nothing pinned: what `pip install 'spark-dp[delta]'` gives
#                        a fresh machine (the newest pyspark that a delta-spark release supports)
# The venv lives in ${SPARK_DP_MATRIX_DIR:-~/.cache/spark-dp/matrix}/NAME, outside the checkout,
# so a fresh clone (CI) reuses it: it is remade only when the wheel's requirements, the base
# Python, the entry or the install recipe change (their hash is in NAME/.key); the wheel itself is reinstalled
# every time, so the code tested is always this checkout's. A lock (flock) serialises two
# checkouts making or reinstalling the same venv.
set -euo pipefail
cd "$(dirname "$0")/.."
NAME=$1
WHEEL=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
PYTHON=${3:-python3}
case "$NAME" in
  spark35)         extra="";          pins=("pyspark==3.5.7" "grpcio>=1.56" "grpcio-status>=1.56" "googleapis-common-protos>=1.56.4") ;;
  spark43-pandas3) extra="[connect]"; pins=("pyspark==4.3.*" "pandas>=3") ;;
  spark40|spark41|spark42) extra="[connect]"; pins=("pyspark==4.${NAME#spark4}.*") ;;
  delta)           extra="[delta]";   pins=() ;;
  *) echo "matrix_env.sh: unknown matrix entry '$NAME' (spark35, spark43-pandas3, spark40, spark41, spark42, delta)" >&2; exit 2 ;;
esac
ROOT=${SPARK_DP_MATRIX_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/spark-dp/matrix}
VENV="$ROOT/$NAME"
mkdir -p "$ROOT"
exec 9>"$ROOT/$NAME.lock"
flock 9
# The key: the wheel's requirements, the base Python, this entry's extra and pins, and the recipe below
# (not the whole script, so adding an entry does not remake the others).
key=$( ("$PYTHON" scripts/wheel_requires.py "$WHEEL"; "$PYTHON" -c 'import sys; print(sys.base_prefix, sys.version)';
        echo "$NAME $extra ${pins[*]:-}"; sed -n '/^pip_q=/,$p' scripts/matrix_env.sh) | sha256sum | cut -c1-16)
pip_q=(--quiet --disable-pip-version-check)
if [ "$(cat "$VENV/.key" 2>/dev/null)" != "$key" ]; then
  echo "matrix_env.sh: creating $VENV (${extra:-no extra} ${pins[*]:-})" >&2
  rm -rf "$VENV"
  mkdir -p "$ROOT"
  "$PYTHON" -m venv "$VENV"
  # A current pip builds pyspark's sdist into a cached wheel (the venv's bundled pip would run setup.py install).
  "$VENV/bin/python" -m pip install "${pip_q[@]}" --upgrade pip >&2
  "$VENV/bin/python" -m pip install "${pip_q[@]}" "$WHEEL$extra" ${pins[@]+"${pins[@]}"} >&2
  echo "$key" > "$VENV/.key"
fi
"$VENV/bin/python" -m pip install "${pip_q[@]}" --no-deps --force-reinstall "$WHEEL" >&2
echo "$(cd "$VENV" && pwd)/bin/python"
