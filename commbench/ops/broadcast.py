"""broadcast: every rank ends with rank 0's tensor."""

import functools

from commbench import harness
from commbench.collective import WHOLE, Collective, bound

BROADCAST = Collective(
    name="broadcast",
    bind=lambda comm, input, output, async_op: bound(
        comm.dist.broadcast, input, 0, async_op=async_op),
    output_numel=None,
    algbw_factor=lambda n: 1,
    busbw_factor=lambda n: 1,
    size_rule=WHOLE,
    expected=lambda values, rank, n, numel, index: values(0, index),
)


# The original's entry points: time one size, and run the whole op (SPEC §1).
timed_broadcast = functools.partial(harness.timed_collective, BROADCAST)
run_broadcast = functools.partial(harness.run_op, BROADCAST)

