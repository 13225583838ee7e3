"""Run the selected collectives in one process group: those named by their flags (--all-reduce
--broadcast ...), every registered one with --all, else the original six. The run lives in
commbench/run_all.py (also `python -m commbench run_all`)."""

from commbench.entry import cli  # first: the package silences torch's warning without numpy
from commbench.run_all import main, selected_ops  # noqa: F401  (the original's main(args, rank))
from commbench.run_all import run

if __name__ == "__main__":
    cli(run)
