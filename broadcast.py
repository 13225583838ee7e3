"""broadcast: every rank ends with rank 0's tensor."""

from commbench.entry import cli
from commbench.ops.broadcast import *  # noqa: F401,F403  (the descriptor, timed_broadcast, run_broadcast)
from commbench.ops.broadcast import run_broadcast

if __name__ == "__main__":
    cli(run_broadcast)
