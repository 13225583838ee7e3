"""all_to_allv: rank r sends splits[r][j] elements to rank j (all_to_all_single with split sizes),
the splits from --a2a-matrix, --a2a-skew or even; Size is the busiest sender's bytes."""

from commbench.entry import cli
from commbench.ops.all_to_allv import *  # noqa: F401,F403  (the descriptor, timed_all_to_allv, run_all_to_allv)
from commbench.ops.all_to_allv import run_all_to_allv

if __name__ == "__main__":
    cli(run_all_to_allv)
