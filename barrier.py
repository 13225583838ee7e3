"""barrier: no rank leaves before every rank has arrived. No payload: one row, its latency."""

from commbench.entry import cli
from commbench.ops.barrier import *  # noqa: F401,F403  (the descriptor, timed_barrier, run_barrier)
from commbench.ops.barrier import run_barrier

if __name__ == "__main__":
    cli(run_barrier)
