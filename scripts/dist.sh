#!/usr/bin/env bash
# make dist: what a cluster needs to run spark-dp, in dist/:
#   spark_dp-<version>-py3-none-any.whl   the package (pip install it where the driver runs)
#   spark-dp-env.tar.gz                   a packed virtualenv (venv-pack) with the wheel and every
#                                         runtime dependency except pyspark, for
#                                         spark-submit --archives dist/spark-dp-env.tar.gz#environment
#                                         with PYSPARK_PYTHON=./environment/bin/python
#
#   scripts/dist.sh [PYTHON] [OUT_DIR]       PYTHON must have venv-pack (the project venv has it)
#
# pyspark (and py4j) are left out on purpose: the cluster's Spark puts its own
# pyspark on the Python workers' PYTHONPATH, and a second, possibly different,
# copy would be 300-400 MB of dead weight. Like every venv-pack archive, the
# environment links to the interpreter it was built with (bin/python ->
# <prefix>/bin/python3.X): the nodes need the same Python minor version at the
# same prefix, or set PYTHON_PREFIX=/prefix/on/the/nodes (venv-pack --python-prefix).
# The packing virtualenv (${SPARK_DP_PACK_VENV:-~/.cache/spark-dp/pack-env}, outside the
# checkout so a fresh clone reuses it) is remade only when the wheel's requirements, the base
# Python or this script change; the wheel is rebuilt and reinstalled every time, under a lock
# (flock) so two checkouts never pack each other's wheel.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${1:-python3}
OUT=${2:-dist}
PACK=${SPARK_DP_PACK_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/spark-dp/pack-env}
ARCHIVE="$OUT/spark-dp-env.tar.gz"
pip_q=(--quiet --disable-pip-version-check)

wheel=$(bash scripts/build_wheel.sh "$OUT" "$PYTHON")
mapfile -t deps < <("$PYTHON" scripts/wheel_requires.py "$wheel" --without pyspark)
mkdir -p "$(dirname "$PACK")"
exec 9>"$PACK.lock"
flock 9
key=$( (printf '%s\n' "${deps[@]}"; "$PYTHON" -c 'import sys; print(sys.base_prefix, sys.version)'; cat scripts/dist.sh) |
       sha256sum | cut -c1-16)
if [ "$(cat "$PACK/.key" 2>/dev/null)" != "$key" ]; then
  echo "dist: creating the packing environment $PACK" >&2
  rm -rf "$PACK"
  "$PYTHON" -m venv "$PACK"
  "$PACK/bin/python" -m pip install "${pip_q[@]}" --upgrade pip >&2
  # The wheel's own requirements, without pyspark.
  "$PACK/bin/python" -m pip install "${pip_q[@]}" "${deps[@]}" >&2
  echo "$key" > "$PACK/.key"
fi
"$PACK/bin/python" -m pip install "${pip_q[@]}" --no-deps --force-reinstall "$wheel" >&2
# Imports as on a cluster: pyspark from Spark's python/lib zips, everything else from the environment.
spark_python_lib=$("$PYTHON" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "python", "lib"))')
PYTHONPATH=$(printf '%s:' "$spark_python_lib"/*.zip) "$PACK/bin/python" -c 'import spark_dp.cli.main, spark_dp.session' || \
  { echo "dist: spark_dp does not import in the packed environment $PACK" >&2; exit 1; }
pack=("$PYTHON" -m venv_pack -p "$PACK" -o "$ARCHIVE" --force --quiet --exclude .key)
[ -n "${PYTHON_PREFIX:-}" ] && pack+=(--python-prefix "$PYTHON_PREFIX")
"${pack[@]}"
echo "dist: $wheel"
echo "dist: $(cd "$OUT" && pwd)/$(basename "$ARCHIVE") ($(du -h "$ARCHIVE" | cut -f1); python $(readlink -f "$PACK/bin/python"))"
