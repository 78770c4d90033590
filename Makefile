# The two commands a new machine needs: `make demo` and `make test`.
# Each creates .venv and installs what it needs on first use.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-dev
DEMO_STAMP := $(VENV)/.installed-demo

.PHONY: demo test test-slow lint typecheck bench clean install

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# The demo needs only the core (pydantic, orjson, zstandard) and the cli extra (rich):
# seconds, not the dev tools.
$(DEMO_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[cli]'
	touch $(DEMO_STAMP)

install: $(STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/handrail demo

# scripts/run_tests.py sets up PostgreSQL, PgBouncer, Chromium and the pinned npm packages
# where it can, says in one line what it could not (and which tests skip), then runs pytest
# in parallel. PYTEST_ARGS passes arguments on, e.g. make test PYTEST_ARGS="-k gate -n 0".
# make test leaves the slow tests (Chromium, several processes, fault runs) to make
# test-slow; CI (.ci/run) runs both.
test: $(STAMP)
	$(BIN)/ruff check src tests bench scripts
	$(BIN)/ruff format --check src tests bench scripts
	$(BIN)/mypy
	$(BIN)/python scripts/run_tests.py $(PYTEST_ARGS)

test-slow: $(STAMP)
	$(BIN)/python scripts/run_tests.py --slow $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check src tests bench scripts
	$(BIN)/ruff format --check src tests bench scripts

typecheck: $(STAMP)
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python bench/hitl_cycle.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
