"""broadcast: every rank ends with rank 0's tensor."""

import functools

from commbench.bench import harness
from commbench.bench.collective import Collective, bound
from commbench.opfacts import FACTS

ROOT = FACTS["broadcast"].root

BROADCAST = Collective.of(
    FACTS["broadcast"],
    bind=lambda comm, input, output, async_op: bound(
        comm.dist.broadcast, input, ROOT, async_op=async_op),
    output_numel=None,
    expected=lambda values, rank, n, numel, index: values(ROOT, index),
)


# The original's entry points: time one size, and run the whole op (SPEC §1).
timed_broadcast = functools.partial(harness.timed_collective, BROADCAST)
run_broadcast = functools.partial(harness.run_op, BROADCAST)

