"""all_reduce: every rank ends with the element-wise reduction (--op, default SUM) of all ranks'
tensors, in place."""

import functools

from commbench.bench import harness
from commbench.bench.collective import Collective, bound
from commbench.opfacts import FACTS

ALL_REDUCE = Collective.of(
    FACTS["all_reduce"],
    bind=lambda comm, input, output, async_op: bound(
        comm.dist.all_reduce, input, *comm.reduce_args, async_op=async_op),
    output_numel=None,
    expected=lambda values, rank, n, numel, index: values.reduce(
        values(s, index) for s in range(n)),
)


# The original's entry points: time one size, and run the whole op (SPEC §1).
timed_all_reduce = functools.partial(harness.timed_collective, ALL_REDUCE)
run_all_reduce = functools.partial(harness.run_op, ALL_REDUCE)

