"""gather: rank 0 ends with all ranks' tensors concatenated in rank order; the others receive
nothing."""

import functools

from commbench.bench import harness
from commbench.bench.collective import Collective, bound
from commbench.opfacts import FACTS

ROOT = FACTS["gather"].root


def _bind(comm, input, output, async_op):
    # The root receives into n views of one output tensor (gather has no one-tensor form).
    gather_list = list(output.chunk(comm.world_size)) if comm.rank == ROOT else None
    return bound(comm.dist.gather, input, gather_list, ROOT, async_op=async_op)


def _expected(values, rank, n, numel, index):
    """At the root, output position i holds element i mod E of rank i div E."""
    if rank != ROOT:
        return None
    return values(index // numel, index % numel)


GATHER = Collective.of(
    FACTS["gather"],
    bind=_bind,
    output_numel=lambda numel, n: n * numel,  # used at the root only; allocated everywhere
    staging=lambda n: n,  # gloo gathers into a temporary n-fold output at the root, then copies
    expected=_expected,
)


# The original's form of entry points: time one size, and run the whole op (SPEC §1).
timed_gather = functools.partial(harness.timed_collective, GATHER)
run_gather = functools.partial(harness.run_op, GATHER)

