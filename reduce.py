"""reduce: rank 0 ends with the element-wise reduction (--op, default SUM) of all ranks' tensors,
in place; the other ranks' tensors are left undefined."""

from commbench.entry import cli
from commbench.ops.reduce import *  # noqa: F401,F403  (the descriptor, timed_reduce, run_reduce)
from commbench.ops.reduce import run_reduce

if __name__ == "__main__":
    cli(run_reduce)
