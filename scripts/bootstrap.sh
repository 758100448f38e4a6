#!/usr/bin/env bash
# Creates the virtualenv (if missing) and installs spark-dp into it, with the
# extras given as the third argument: "plots" for `make demo` (what the demo
# and the report it suggests need), "test,connect,plots" for `make test` (which also installs a local
# PostgreSQL server for the ledger tests when it may). Stops with one line if
# Java or Python is too old.
set -euo pipefail
PYTHON=${1:-python3}
VENV=${2:-.venv}
EXTRAS=${3-test,connect,plots}

if ! command -v java >/dev/null 2>&1; then
  echo "spark-dp needs Java 17 or newer: install it (e.g. 'apt-get install openjdk-17-jre-headless') and set JAVA_HOME." >&2
  exit 1
fi
java_major=$(java -version 2>&1 | sed -nE '1s/.*version "([0-9]+)(\.[0-9]+)*.*/\1/p')
if [ -z "$java_major" ] || [ "$java_major" -lt 17 ]; then
  echo "spark-dp needs Java 17 or newer (found '$(java -version 2>&1 | head -n1)'): install openjdk-17 and put it first on PATH." >&2
  exit 1
fi
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "spark-dp needs Python 3.11 or newer: run 'make PYTHON=python3.11 ...'." >&2
  exit 1
fi
# The PostgreSQL ledger tests need a local server binary. Install Debian's
# when missing and we may (root with apt-get); otherwise those tests skip,
# saying why. Only for the tests: the demo needs no server.
case ",$EXTRAS," in *,test,*) want_postgres=1 ;; *) want_postgres=0 ;; esac
if [ "$want_postgres" = 1 ] && ! command -v pg_ctl >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing PostgreSQL server binaries for the ledger tests (apt-get) ..."
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null) \
      || echo "could not install PostgreSQL; its ledger tests will be skipped" >&2
  fi
fi
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
"$VENV/bin/python" -m pip install --quiet -e ".${EXTRAS:+[$EXTRAS]}"
