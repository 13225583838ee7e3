"""reduce_scatter: the element-wise reduction (--op, default SUM) over ranks, of which rank r keeps
the r-th of n chunks."""

import functools

from commbench.bench import harness
from commbench.bench.collective import Collective, bound
from commbench.opfacts import FACTS

REDUCE_SCATTER = Collective.of(
    FACTS["reduce_scatter"],
    bind=lambda comm, input, output, async_op: bound(
        comm.reduce_scatter, output, input, *comm.reduce_args, async_op=async_op),
    output_numel=lambda numel, n: numel // n,
    staging=lambda n: 1,  # gloo reduces a temporary copy of the whole input
    # Rank r keeps the reduction of chunk r (E/n elements from r·E/n) of every rank.
    expected=lambda values, rank, n, numel, index: values.reduce(
        values(s, rank * (numel // n) + index) for s in range(n)),
)


# The original's entry points: time one size, and run the whole op (SPEC §1).
timed_reduce_scatter = functools.partial(harness.timed_collective, REDUCE_SCATTER)
run_reduce_scatter = functools.partial(harness.run_op, REDUCE_SCATTER)

