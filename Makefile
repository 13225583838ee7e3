# Two commands for a fresh machine (see README.md):
#   make bench   create .venv, install (oneCCL too), scan all six ops on 2 local CPU ranks over
#                oneCCL (BACKEND=gloo: gloo), plot them
#   make test    create .venv, install (oneCCL too), run the tests
#   (make strategies: measure DDP, ZeRO-1/2/3, TP and PP and report them against the estimate)
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
NPROC ?= 2
BENCH_ARGS ?= --scan --device cpu

# DeepSpeed JIT-builds its CPU shared-memory op on first use; keep the build in the venv
# so that it happens once per venv, not once per run.
export TORCH_EXTENSIONS_DIR := $(abspath $(VENV))/torch_extensions
export PATH := $(abspath $(BIN)):$(PATH)

.PHONY: bench strategies ccl test venv clean

venv: $(VENV)/.installed

$(VENV)/.installed: requirements.txt constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet -c constraints.txt -r requirements.txt
	touch $@

# The table on stdout, the results in results/bench.jsonl and their curves in results/curves.png.
# BACKEND: ccl (oneCCL, installed by `make ccl` first: what DeepSpeed itself runs on CPU once its
# bindings import) or gloo (nothing more to build).
BACKEND ?= ccl
bench: venv $(filter ccl,$(BACKEND))
	mkdir -p results
	$(BIN)/deepspeed --num_gpus $(NPROC) run_all.py $(BENCH_ARGS) --backend $(BACKEND) --output results/bench.jsonl --overwrite
	$(BIN)/python report.py plot results/bench.jsonl -o results/curves.png

# The six parallel strategies measured on $(NPROC) local CPU ranks (parallel_bench.py), held
# against the estimate from the collective curves of the same ranks: results/strategies.md
# (printed) and results/strategies.png. STRATEGY_ARGS: parallel_bench.py's flags (model size,
# steps, --dtype bfloat16, ...).
STRATEGY_ARGS ?=
strategies: venv
	mkdir -p results
	$(BIN)/torchrun --nproc_per_node $(NPROC) run_all.py --dist torch --scan --maxsize 22 --all-reduce --all-gather --reduce-scatter --pt2pt --output results/strategy-curves.jsonl --overwrite
	rm -f results/strategies.jsonl
	$(BIN)/torchrun --nproc_per_node $(NPROC) parallel_bench.py --strategy all $(STRATEGY_ARGS) --output results/strategies.jsonl
	$(BIN)/python report.py strategy results/strategy-curves.jsonl --measured results/strategies.jsonl --plot results/strategies.png > results/strategies.md
	cat results/strategies.md

# oneCCL and its torch bindings (built from ../shared/vendor, or TORCH_CCL_SRC) in the venv,
# once (docs/ccl.md). Once they import, the suite's CPU backend is ccl, as DeepSpeed's is.
ccl: venv
	scripts/install-ccl.sh $(VENV)

# Open MPI and a one-node Slurm cluster for the launcher tests (root only; skipped otherwise).
# The 30 slowest tests are listed at the end, so that drift shows (docs/testing.md has the times).
test: venv ccl
	@scripts/test-services.sh up
	$(BIN)/python -m pytest --durations=30 $(PYTEST_ARGS); status=$$?; scripts/test-services.sh down; exit $$status

clean:
	rm -rf $(VENV) .pytest_cache __pycache__ tests/__pycache__
