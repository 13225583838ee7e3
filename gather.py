"""gather: rank 0 ends with all ranks' tensors concatenated in rank order; the others receive
nothing."""

from commbench.entry import cli
from commbench.ops.gather import *  # noqa: F401,F403  (the descriptor, timed_gather, run_gather)
from commbench.ops.gather import run_gather

if __name__ == "__main__":
    cli(run_gather)
