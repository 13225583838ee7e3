"""reduce_scatter: the element-wise reduction (--op, default SUM) over ranks, of which rank r keeps
the r-th of n chunks."""

from commbench.entry import cli
from commbench.ops.reduce_scatter import *  # noqa: F401,F403  (the descriptor, timed_reduce_scatter, run_reduce_scatter)
from commbench.ops.reduce_scatter import run_reduce_scatter

if __name__ == "__main__":
    cli(run_reduce_scatter)
