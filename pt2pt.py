"""pt2pt: rank 0 sends its tensor to rank 1; every other rank stays idle. --pairs all or across:
every pair at once (0-1, 2-3, ... or i with i + n/2); --bidirectional: both ranks of a pair
send and receive at once (osu_bibw; with pairs, osu_mbw_mr)."""

from commbench.entry import cli
from commbench.ops.pt2pt import *  # noqa: F401,F403  (the descriptor, timed_pt2pt, run_pt2pt)
from commbench.ops.pt2pt import run_pt2pt

if __name__ == "__main__":
    cli(run_pt2pt)
