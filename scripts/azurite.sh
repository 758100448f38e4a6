#!/usr/bin/env bash
# Azurite, Microsoft's Azure Storage emulator (npm package), for the abfss:// release tests
# (tests/_stores.py). Installs it once into a cache directory outside the checkout, so a fresh
# clone (CI) reuses it, and prints the path of its Blob service executable.
#
#   scripts/azurite.sh        prints .../node_modules/.bin/azurite-blob
#
# The directory is ${SPARK_DP_AZURITE_DIR:-~/.cache/spark-dp/azurite}; it is remade only when
# the pinned version below changes; a lock (flock) serialises two checkouts.
# Needs Node.js >= 18 and npm (the first install takes about 2 minutes and 360 MB).
set -euo pipefail
VERSION=3.37.0
DIR=${SPARK_DP_AZURITE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/spark-dp/azurite}
BIN="$DIR/node_modules/.bin/azurite-blob"
for tool in node npm; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "azurite.sh: the abfss:// tests need Node.js and npm for Azurite (e.g. 'apt-get install nodejs npm')" >&2
    exit 1
  fi
done
mkdir -p "$(dirname "$DIR")"
exec 9>"$DIR.lock"
flock 9
if [ "$(cat "$DIR/.version" 2>/dev/null)" != "$VERSION" ] || [ ! -x "$BIN" ]; then
  echo "azurite.sh: installing azurite@$VERSION into $DIR" >&2
  rm -rf "$DIR"
  mkdir -p "$DIR"
  npm install --prefix "$DIR" --save-exact --no-audit --no-fund --loglevel=error "azurite@$VERSION" >&2
  echo "$VERSION" > "$DIR/.version"
fi
echo "$BIN"
