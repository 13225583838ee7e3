# Two commands for a fresh machine (see README.md):
#   make bench   create .venv, install (oneCCL too), scan all six ops on 2 local CPU ranks over
#                oneCCL (BACKEND=gloo: gloo), plot them
#   make test    create .venv, install (oneCCL too), run the tests
#   (make strategies: measure DDP, ZeRO-1/2/3, TP and PP and report them against the estimate)
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
NPROC ?= 2
BENCH_ARGS ?= --scan --device cpu --peak auto

# DeepSpeed JIT-builds its CPU shared-memory op on first use; keep the build in the venv
# so that it happens once per venv, not once per run.
export TORCH_EXTENSIONS_DIR := $(abspath $(VENV))/torch_extensions
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: bench strategies ccl ops test test-fast lint venv clean

venv: $(VENV)/.installed

# The project goes in editable (pip install -e .[test], requirements.txt): what users install
# is what the tests run.
$(VENV)/.installed: requirements.txt constraints.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet -c constraints.txt -r requirements.txt
	touch $@

# The table on stdout, each row's BusBW held against its bound in a column % of peak (--peak auto:
# on one host of CPUs a memory copy, timed once per host and cached; docs/peak.md), the results in
# results/bench.jsonl (and, run after run, in the results
# database results/commbench.db: report.py history --db results/commbench.db) and their curves in
# results/curves.png.
# BACKEND: ccl (oneCCL, installed by `make ccl` first: what DeepSpeed itself runs on CPU once its
# bindings import) or gloo (nothing more to build).
BACKEND ?= ccl
bench: venv ops $(filter ccl,$(BACKEND))
	mkdir -p results
	$(BIN)/deepspeed --num_gpus $(NPROC) run_all.py $(BENCH_ARGS) --backend $(BACKEND) --output results/bench.jsonl --overwrite --db results/commbench.db
	$(BIN)/python report.py plot results/bench.jsonl -o results/curves.png
	$(BIN)/python report.py html results/bench.jsonl -o results/report.html
	@echo "the run on one page: $(CURDIR)/results/report.html"

# The six parallel strategies measured on $(NPROC) local CPU ranks (parallel_bench.py), held
# against the estimate from the collective curves of the same ranks: results/strategies.md
# (printed) and results/strategies.png. STRATEGY_ARGS: parallel_bench.py's flags (model size,
# steps, --dtype bfloat16, ...). DS_CONFIG=FILE: your DeepSpeed config instead of the six: the
# ZeRO stage it names, with its buckets, limits, batch and dtype (docs/strategies.md);
# DS_CONFIG_SWEEP=KEY=V1,V2,... sweeps one of its keys.
STRATEGY_ARGS ?=
DS_CONFIG ?=
DS_CONFIG_SWEEP ?=
STRATEGY_SET = $(if $(DS_CONFIG),--ds-config $(DS_CONFIG)$(if $(DS_CONFIG_SWEEP), --ds-config-sweep $(DS_CONFIG_SWEEP)),--strategy all)
strategies: venv
	mkdir -p results
	$(BIN)/torchrun --nproc_per_node $(NPROC) run_all.py --dist torch --scan --maxsize 22 --all-reduce --all-gather --reduce-scatter --pt2pt --output results/strategy-curves.jsonl --overwrite
	rm -f results/strategies.jsonl
	$(BIN)/torchrun --nproc_per_node $(NPROC) parallel_bench.py $(STRATEGY_SET) $(STRATEGY_ARGS) --output results/strategies.jsonl
	$(BIN)/python report.py strategy results/strategy-curves.jsonl --measured results/strategies.jsonl --plot results/strategies.png > results/strategies.md
	cat results/strategies.md

# oneCCL and its torch bindings (built from ../shared/vendor, or TORCH_CCL_SRC) in the venv,
# once (docs/ccl.md). Once they import, the suite's CPU backend is ccl, as DeepSpeed's is.
ccl: venv
	scripts/install-ccl.sh $(VENV)

# DeepSpeed JIT-builds its CPU shared-memory op at the first --dist deepspeed run (about half a
# minute on 2 cores); built here once, where every later run finds it.
ops: $(VENV)/.ops
$(VENV)/.ops: $(VENV)/.installed
	DS_ACCELERATOR=cpu $(BIN)/python -c 'from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder; ShareMemCommBuilder().load(verbose=False)' > /dev/null
	touch $@

# Open MPI and a one-node Slurm cluster for the launcher tests (root only; skipped otherwise).
# Two parts: the tests that may share the 2 cores, TEST_WORKERS files at a time (pytest-xdist,
# a file per worker; three: many wait on a timeout or a launcher, and three take 7% less time
# than two), then those marked serial, alone (they measure, or hold something machine-wide). At the end the 30 slowest tests and the time per
# file, so that drift shows (docs/testing.md).
TEST_WORKERS ?= 3
test: venv ccl ops
	@scripts/test-services.sh up
	@rm -rf .test-results; status=0; \
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile -m "not serial" --junitxml=.test-results/parallel.xml $(PYTEST_ARGS) || { s=$$?; [ $$s = 5 ] || status=$$s; }; \
	$(BIN)/python -m pytest -m serial --junitxml=.test-results/serial.xml $(PYTEST_ARGS) || { s=$$?; [ $$s = 5 ] || status=$$s; }; \
	scripts/test-services.sh down; $(BIN)/python scripts/test-times.py .test-results/*.xml; exit $$status

# ruff (its rule set), mypy on the typed modules and import-linter's contracts (no cycles; the
# wings' layers, one way; report/ and db/ import no torch), all three as pyproject.toml states them: seconds, so CI runs
# it before the tests. PYTHONPATH: the contracts are held against this checkout's code.
lint: venv
	$(BIN)/ruff check .
	$(BIN)/mypy
	PYTHONPATH=$(CURDIR) $(BIN)/lint-imports

# The in-process tests alone (marked fast: no ranks, no subprocess, no root), for a refactor's
# quick check; make test runs them too (docs/testing.md).
test-fast: venv
	$(BIN)/python -m pytest -m fast -q -p no:randomly $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache __pycache__ tests/__pycache__ .test-results .mypy_cache .ruff_cache .import_linter_cache
