# m100: set-up, tests and the demo. Everything installs into .venv from scratch.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
JOBS   ?= 2

.PHONY: all demo docs test test-lit test-unit test-slow bench clean bytecode

all: test

# The package's own folders (setup.py's ROOTS and m100/), byte-compiled at install as a regular
# (non-editable) pip install does: with PYTHONDONTWRITEBYTECODE set, every process compiled them
# from source again (~0.1 CPU-s of a first interpreter run, ~0.4 of an `m100 compile`).
# checked-hash: an import checks the source's hash, so an edited file is never run from stale
# bytecode (it is compiled in memory as before); `make bytecode` refreshes them.
SOURCES := m100 dialects passes targets sim tools frontend

$(STAMP): pyproject.toml setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -e ".[test]"
	$(PY) -m compileall -q --invalidation-mode checked-hash $(SOURCES)
	touch $(STAMP)

bytecode: $(STAMP)
	$(PY) -m compileall -q --invalidation-mode checked-hash $(SOURCES)

demo: $(STAMP)
	$(PY) -m m100.tools.demo

docs: $(STAMP)
	$(PY) -m m100.tools.gen_pass_docs -o docs/passes.md

test: test-lit test-unit

test-lit: $(STAMP)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/lit -q -j $(JOBS) test/lit

test-unit: $(STAMP)
	$(PY) -m pytest -q -n $(JOBS) -m "not slow" test

test-slow: $(STAMP)
	$(PY) -m pytest -q -n $(JOBS) -m slow test

# Every benchmark prints a table; `m100 bench NAME [--json OUT]` runs bench/NAME.py (`m100 bench --list`).
BENCHES := sim_bench sync_modes frontend_bench graph_pipeline schedule_bench e2e_bench fidelity
bench: $(STAMP)
	mkdir -p out/bench
	for b in $(BENCHES); do echo "== m100 bench $$b"; $(VENV)/bin/m100 bench $$b --json out/bench/$$b.json || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info
	find $(SOURCES) -name __pycache__ -type d -prune -exec rm -rf {} +
