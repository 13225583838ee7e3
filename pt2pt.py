"""pt2pt: rank 0 sends its tensor to rank 1; every other rank stays idle."""

import utils


def _bind(comm, input, output, async_op):
    send, recv = (comm.dist.isend, comm.dist.irecv) if async_op else (comm.dist.send, comm.dist.recv)
    if comm.rank == 0:
        return lambda: send(input, 1)
    if comm.rank == 1:
        return lambda: recv(input, 0)
    return lambda: None


PT2PT = utils.Collective(
    name="pt2pt",
    bind=_bind,
    output_numel=None,
    algbw_factor=lambda n: 1,
    busbw_factor=lambda n: 1,
    size_rule=utils.WHOLE,
    # Rank 1 ends with rank 0's data; every other rank keeps its own.
    expected=lambda values, rank, n, numel, index: values(0 if rank == 1 else rank, index),
    min_world_size=2,
    shown_world_size=2,
)


def timed_pt2pt(input, args, comm):
    return utils.timed_collective(PT2PT, input, None, args, comm)


def run_pt2pt(local_rank, args, comm=None):
    return utils.run_op(PT2PT, local_rank, args, comm)


if __name__ == "__main__":
    utils.cli(run_pt2pt)
