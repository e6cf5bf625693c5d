# graphsafe: `make verify` (the main job) and `make test` each set themselves up.
#
# The interpreter: one that already imports torch (GPU images ship one; never pull a second torch there),
# else .venv with the CPU build of torch from PyTorch's CPU index (about 190 MB, where PyPI's default Linux
# wheel brings CUDA: 5.6 GB). Either way graphsafe is installed editable, so `graphsafe` and
# `python -m graphsafe` serve this checkout. Override with `make PYTHON=/path/to/python ...`.

SHELL := /bin/bash
VENV := .venv
SYSTEM_PYTHON := $(shell command -v python3 || command -v python)
# find_spec, not `import torch`: make evaluates this on every call, and importing torch takes seconds.
SYSTEM_HAS_TORCH := $(shell $(SYSTEM_PYTHON) -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("torch") is None)' >/dev/null 2>&1 && echo yes)
CPU_TORCH := torch==2.13.0
CPU_TORCH_INDEX := https://download.pytorch.org/whl/cpu

ifeq ($(SYSTEM_HAS_TORCH),yes)
PYTHON ?= $(SYSTEM_PYTHON)
SETUP_STAMP := .setup-system.stamp
else
PYTHON ?= $(VENV)/bin/python
SETUP_STAMP := $(VENV)/.installed.stamp
endif

PYTEST_WORKERS ?= auto
ARGS ?=

.PHONY: setup verify test lint typecheck bench nightly repro clean compile-hip mutants

setup: $(SETUP_STAMP)

# System interpreter with torch (GPU images, which reach no package index): check the rest is there, then
# install graphsafe alone, editable, with the interpreter's own setuptools.
.setup-system.stamp: pyproject.toml
	@$(PYTHON) -c 'import torch, hypothesis, pytest, xdist, pandas, pybind11' || { \
	  echo "graphsafe: $(PYTHON) imports torch but lacks hypothesis/pytest/pytest-xdist/pandas/pybind11;"; \
	  echo "           install them, or run with PYTHON=<an interpreter that has them>"; exit 1; }
	$(PYTHON) -m pip install -q --no-deps --no-build-isolation -e .
	@touch $@

$(VENV)/.installed.stamp: pyproject.toml
	$(SYSTEM_PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q --index-url $(CPU_TORCH_INDEX) $(CPU_TORCH)
	$(VENV)/bin/python -m pip install -q -e '.[dev,real-world]'
	@touch $@

# The built-in suite's cases are small: as many workers as the cap allows (8 per GPU, at most the CPU count).
# H200, 8 workers: cold 59 s, warm 40 s (reports/performance.md). ARGS may override.
verify: setup
	$(PYTHON) -m graphsafe verify --jobs auto $(ARGS)

test: setup
	$(PYTHON) -m pytest -n $(PYTEST_WORKERS) $(ARGS)

lint: setup
	$(PYTHON) -m ruff check .
	$(PYTHON) -m ruff format --check .

typecheck: setup
	$(PYTHON) -m mypy

bench: setup
	$(PYTHON) -m bench $(ARGS)

# The nightly profile: more Hypothesis examples, more replays, rebuilds and live graphs; then compare with the
# platform's committed baseline (reports/baselines/<platform>.csv, [tool.graphsafe] baseline) and exit 1 on a
# regression (graphsafe.reports.baseline says what counts); then the mutants. verify exits 1 when a case fails,
# which may be a failure the baseline already has, so the comparison decides; exit codes >= 2 (usage, crash)
# stop the night. Under the nightly profile a shape search may take up to 600 s (graphsafe.search PROFILES),
# past verify's default 300 s deadline: moe_gemm.mxfp8.search.topk_bm16 timed out at 300 s on 2 CPU cores, so
# the night gives each case 1200 s. A fresh clone on 2 cores without a GPU: about NIGHTLY_MINUTES.
NIGHTLY_PROFILE := graphsafe-nightly
NIGHTLY_VERIFY := --replays 8 --rebuilds 20 --live-graphs 32 --deadline 1200
NIGHTLY_DIR := graphsafe-runs/nightly-$(shell date +%Y%m%d-%H%M%S)
nightly: setup
	HYPOTHESIS_PROFILE=$(NIGHTLY_PROFILE) $(PYTHON) -m pytest -n $(PYTEST_WORKERS)
	HYPOTHESIS_PROFILE=$(NIGHTLY_PROFILE) $(PYTHON) -m graphsafe verify $(NIGHTLY_VERIFY) \
	  --report-dir $(NIGHTLY_DIR) $(ARGS); rc=$$?; [ $$rc -le 1 ] || exit $$rc
	$(PYTHON) -m graphsafe report nightly $(NIGHTLY_DIR)
	$(PYTHON) tests/mutants.py --report $(NIGHTLY_DIR)/mutants.md

# One named mutant per detector and verdict rule, each to be killed by its tests and by the built-in controls
# (tests/mutants.py says why a script and not a mutation-testing library, and how long it takes).
mutants: setup
	$(PYTHON) tests/mutants.py $(ARGS)

# `graphsafe repro` takes a counterexample module (cases/counterexamples/<CASE>.py, e.g. issue350: the public
# report's tables) or a registered case name (rerun with its recorded seeds). CASE and SEED reach the shell only
# as environment variables, never spliced into the recipe's text, and are checked before use: a value with a
# quote, `;` or `$(...)` names nothing and runs nothing (`make repro CASE='x;echo hi'` is a usage error).
# Not exported as they are: make would expand a command-line value such as `$(shell ...)` to put it in the
# recipes' environment.
unexport CASE SEED
repro: export GRAPHSAFE_REPRO_CASE := $(value CASE)
repro: export GRAPHSAFE_REPRO_SEED := $(value SEED)
repro: setup
	@[ -n "$$GRAPHSAFE_REPRO_CASE" ] || { echo "usage: make repro CASE=<counterexample module or case name> [SEED=<seed>]" >&2; exit 2; }
	@[[ "$$GRAPHSAFE_REPRO_CASE" =~ ^[A-Za-z0-9_./+-]+$$ ]] || { \
	  echo "graphsafe: CASE must be a module, file or case name (letters, digits and _ . / + -), got: $$GRAPHSAFE_REPRO_CASE" >&2; exit 2; }
	@[[ "$$GRAPHSAFE_REPRO_SEED" =~ ^[0-9]*$$ ]] || { echo "graphsafe: SEED must be a whole number, got: $$GRAPHSAFE_REPRO_SEED" >&2; exit 2; }
	$(PYTHON) -m graphsafe repro "$$GRAPHSAFE_REPRO_CASE" $${GRAPHSAFE_REPRO_SEED:+--seed "$$GRAPHSAFE_REPRO_SEED"} $(ARGS)

compile-hip:
	bash .ci/compile_hip.sh

clean:
	rm -rf graphsafe-runs .pytest_cache .hypothesis .mypy_cache .ruff_cache .setup-system.stamp
	find . -name __pycache__ -type d -prune -not -path './$(VENV)/*' -exec rm -rf {} +
