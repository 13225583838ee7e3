"""all_to_all: rank r sends its j-th of n equal chunks to rank j and receives chunk r of every
rank."""

import functools

from commbench.bench import harness
from commbench.bench.collective import Collective, bound
from commbench.opfacts import FACTS


def _first_of_each_chunk(comm, input, output):
    """Rank r's output chunk j came from rank j, so its first element should read j."""
    shown = min(comm.world_size, 8)
    chunk = output.numel() // comm.world_size
    received = [output[j * chunk].item() for j in range(shown)]
    more = " ..." if shown < comm.world_size else ""
    return (f"all_to_all {input.numel()} elements: input[:4]={input[:4].tolist()} "
            f"first element of each output chunk={received}{more}")


def _received(values, rank, n, numel, index):
    """Output chunk s (E/n elements) of rank r is chunk r of rank s's input."""
    chunk = numel // n
    return values(index // chunk, rank * chunk + index % chunk)


ALL_TO_ALL = Collective.of(
    FACTS["all_to_all"],
    bind=lambda comm, input, output, async_op: bound(
        comm.dist.all_to_all_single, output, input, async_op=async_op),
    output_numel=lambda numel, n: numel,
    expected=_received,
    debug=_first_of_each_chunk,
)


# The original's entry points: time one size, and run the whole op (SPEC §1).
timed_all_to_all = functools.partial(harness.timed_collective, ALL_TO_ALL)
run_all_to_all = functools.partial(harness.run_op, ALL_TO_ALL)

