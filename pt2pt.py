"""pt2pt: rank 0 sends its tensor to rank 1; every other rank stays idle."""

import functools

from commbench import harness
from commbench.collective import WHOLE, Collective


def _bind(comm, input, output, async_op):
    send, recv = (comm.dist.isend, comm.dist.irecv) if async_op else (comm.dist.send, comm.dist.recv)
    if comm.rank == 0:
        return functools.partial(send, input, 1)
    if comm.rank == 1:
        return functools.partial(recv, input, 0)
    return lambda: None


PT2PT = Collective(
    name="pt2pt",
    bind=_bind,
    output_numel=None,
    algbw_factor=lambda n: 1,
    busbw_factor=lambda n: 1,
    size_rule=WHOLE,
    # Rank 1 ends with rank 0's data; every other rank keeps its own.
    expected=lambda values, rank, n, numel, index: values(0 if rank == 1 else rank, index),
    min_world_size=2,
    shown_world_size=2,
)


# The original's entry points: time one size, and run the whole op (SPEC §1).
timed_pt2pt = functools.partial(harness.timed_collective, PT2PT)
run_pt2pt = functools.partial(harness.run_op, PT2PT)


if __name__ == "__main__":
    harness.cli(run_pt2pt)
