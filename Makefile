# m100: set-up, tests and the demo. Everything installs into .venv from scratch.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
JOBS   ?= 2

.PHONY: all demo docs test test-lit test-unit test-slow bench clean

all: test

$(STAMP): pyproject.toml setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -e ".[test]"
	touch $(STAMP)

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
