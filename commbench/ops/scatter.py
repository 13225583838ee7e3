"""scatter: rank 0 splits its tensor into n equal chunks and sends chunk r to rank r."""

import functools

from commbench.bench import harness
from commbench.bench.collective import Collective, bound
from commbench.opfacts import FACTS

ROOT = FACTS["scatter"].root


def _bind(comm, input, output, async_op):
    # The root sends n views of its one input tensor (scatter has no one-tensor form).
    scatter_list = list(input.chunk(comm.world_size)) if comm.rank == ROOT else None
    return bound(comm.dist.scatter, output, scatter_list, ROOT, async_op=async_op)


SCATTER = Collective.of(
    FACTS["scatter"],
    bind=_bind,
    output_numel=lambda numel, n: numel // n,
    staging=lambda n: 1,  # gloo flattens the root's chunks into one temporary copy
    # Rank r receives chunk r (E/n elements from r·E/n) of the root's input.
    expected=lambda values, rank, n, numel, index: values(ROOT, rank * (numel // n) + index),
)


# The original's form of entry points: time one size, and run the whole op (SPEC §1).
timed_scatter = functools.partial(harness.timed_collective, SCATTER)
run_scatter = functools.partial(harness.run_op, SCATTER)

