"""all_gather: every rank ends with all ranks' tensors concatenated in rank order."""

from commbench.entry import cli
from commbench.ops.all_gather import *  # noqa: F401,F403  (the descriptor, timed_all_gather, run_all_gather)
from commbench.ops.all_gather import run_all_gather

if __name__ == "__main__":
    cli(run_all_gather)
