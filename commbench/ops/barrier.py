"""barrier: no rank leaves before every rank has arrived. No payload: one row, its latency."""

import functools
import time

from commbench.bench import harness
from commbench.bench.collective import Collective, bound
from commbench.opfacts import FACTS

# --check: the last rank arrives this late; a rank that leaves the barrier sooner than half of
# it after the common start did not wait for it.
LATE_ARRIVAL_S = 0.05


def _check(comm, call, args):
    """1 on a rank that left the barrier before the last rank arrived, else 0."""
    last = comm.world_size - 1
    comm.sync_all()
    start = time.perf_counter()
    if comm.rank == last:
        time.sleep(LATE_ARRIVAL_S)
    work = call()
    if args.async_op and work is not None:
        work.wait()
    waited = time.perf_counter() - start
    return int(comm.rank != last and waited < LATE_ARRIVAL_S / 2)


BARRIER = Collective.of(
    FACTS["barrier"],
    bind=lambda comm, input, output, async_op: bound(comm.dist.barrier, async_op=async_op),
    output_numel=None,
    expected=None,
    check=_check,
)


# The original's form of entry points: time one size, and run the whole op (SPEC §1).
timed_barrier = functools.partial(harness.timed_collective, BARRIER)
run_barrier = functools.partial(harness.run_op, BARRIER)

