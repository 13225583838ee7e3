"""all_reduce: every rank ends with the element-wise reduction (--op, default SUM) of all ranks'
tensors, in place."""

import functools

from commbench import harness
from commbench.collective import WHOLE, Collective, bound

ALL_REDUCE = Collective(
    name="all_reduce",
    bind=lambda comm, input, output, async_op: bound(
        comm.dist.all_reduce, input, *comm.reduce_args, async_op=async_op),
    output_numel=None,
    algbw_factor=lambda n: 2,
    busbw_factor=lambda n: 2 * (n - 1) / n,
    size_rule=WHOLE,
    expected=lambda values, rank, n, numel, index: values.reduce(
        values(s, index) for s in range(n)),
    reduces=True,
)


# The original's entry points: time one size, and run the whole op (SPEC §1).
timed_all_reduce = functools.partial(harness.timed_collective, ALL_REDUCE)
run_all_reduce = functools.partial(harness.run_op, ALL_REDUCE)

