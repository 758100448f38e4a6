# The two commands the README opens with. Each works on a fresh machine with
# only Python >= 3.11 and Java >= 17: the virtualenv is created and the
# project installed into it on first use.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.spark-dp-installed

.PHONY: demo test

demo: $(STAMP)
	@$(PY) -m spark_dp.cli.demo

# ruff first (a few seconds): lint findings stop the run before any Spark test starts.
test: $(STAMP)
	@$(PY) -m ruff check --quiet --output-format concise . || \
	  { echo "make test: ruff check failed (findings above; '$(PY) -m ruff check --fix .' fixes the [*] ones)" >&2; exit 1; }
	@$(PY) -m pytest

$(STAMP): pyproject.toml scripts/bootstrap.sh
	@bash scripts/bootstrap.sh "$(PYTHON)" "$(VENV)"
	@touch $(STAMP)
