"""all_to_all: rank r sends its j-th of n equal chunks to rank j and receives chunk r of every
rank."""

from commbench.entry import cli
from commbench.ops.all_to_all import *  # noqa: F401,F403  (the descriptor, timed_all_to_all, run_all_to_all)
from commbench.ops.all_to_all import run_all_to_all

if __name__ == "__main__":
    cli(run_all_to_all)
