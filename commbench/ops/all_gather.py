"""all_gather: every rank ends with all ranks' tensors concatenated in rank order."""

import functools

from commbench.bench import harness
from commbench.bench.collective import Collective, bound
from commbench.opfacts import FACTS

ALL_GATHER = Collective.of(
    FACTS["all_gather"],
    bind=lambda comm, input, output, async_op: bound(
        comm.all_gather, output, input, async_op=async_op),
    output_numel=lambda numel, n: n * numel,
    staging=lambda n: n,  # gloo gathers into a temporary n-fold output, then copies it
    # Output position i holds element i mod E of rank i div E.
    expected=lambda values, rank, n, numel, index: values(index // numel, index % numel),
)


# The original's entry points: time one size, and run the whole op (SPEC §1).
timed_all_gather = functools.partial(harness.timed_collective, ALL_GATHER)
run_all_gather = functools.partial(harness.run_op, ALL_GATHER)

