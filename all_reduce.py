"""all_reduce: every rank ends with the element-wise reduction (--op, default SUM) of all ranks'
tensors, in place."""

from commbench.entry import cli
from commbench.ops.all_reduce import *  # noqa: F401,F403  (the descriptor, timed_all_reduce, run_all_reduce)
from commbench.ops.all_reduce import run_all_reduce

if __name__ == "__main__":
    cli(run_all_reduce)
