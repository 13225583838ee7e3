"""broadcast: every rank ends with rank 0's tensor."""

import functools

import utils

BROADCAST = utils.Collective(
    name="broadcast",
    bind=lambda comm, input, output, async_op: functools.partial(
        comm.dist.broadcast, input, 0, async_op=async_op),
    output_numel=None,
    algbw_factor=lambda n: 1,
    busbw_factor=lambda n: 1,
    size_rule=utils.WHOLE,
    expected=lambda values, rank, n, numel, index: values(0, index),
)


def timed_broadcast(input, args, comm):
    return utils.timed_collective(BROADCAST, input, None, args, comm)


def run_broadcast(local_rank, args, comm=None):
    return utils.run_op(BROADCAST, local_rank, args, comm)


if __name__ == "__main__":
    utils.cli(run_broadcast)
