"""all_reduce: every rank ends with the element-wise SUM of all ranks' tensors, in place."""

import functools

import utils

ALL_REDUCE = utils.Collective(
    name="all_reduce",
    bind=lambda comm, input, output, async_op: functools.partial(
        comm.dist.all_reduce, input, async_op=async_op),
    output_numel=None,
    algbw_factor=lambda n: 2,
    busbw_factor=lambda n: 2 * (n - 1) / n,
    size_rule=utils.WHOLE,
    expected=lambda values, rank, n, numel, index: sum(values(s, index) for s in range(n)),
    reduces=True,
)


def timed_all_reduce(input, args, comm):
    return utils.timed_collective(ALL_REDUCE, input, None, args, comm)


def run_all_reduce(local_rank, args, comm=None):
    return utils.run_op(ALL_REDUCE, local_rank, args, comm)


if __name__ == "__main__":
    utils.cli(run_all_reduce)
