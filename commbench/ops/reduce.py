"""reduce: rank 0 ends with the element-wise reduction (--op, default SUM) of all ranks' tensors,
in place; the other ranks' tensors are left undefined."""

import functools

from commbench.bench import harness
from commbench.bench.collective import Collective, bound
from commbench.opfacts import FACTS

ROOT = FACTS["reduce"].root


def _expected(values, rank, n, numel, index):
    """The root holds the reduction; what the others hold is not defined (not checked)."""
    if rank != ROOT:
        return None
    return values.reduce(values(s, index) for s in range(n))


REDUCE = Collective.of(
    FACTS["reduce"],
    bind=lambda comm, input, output, async_op: bound(
        comm.dist.reduce, input, ROOT, *comm.reduce_args, async_op=async_op),
    output_numel=None,
    expected=_expected,
)


# The original's form of entry points: time one size, and run the whole op (SPEC §1).
timed_reduce = functools.partial(harness.timed_collective, REDUCE)
run_reduce = functools.partial(harness.run_op, REDUCE)

