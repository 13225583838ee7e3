"""reduce_scatter: the element-wise SUM over ranks, of which rank r keeps the r-th of n chunks."""

import functools

import utils

REDUCE_SCATTER = utils.Collective(
    name="reduce_scatter",
    bind=lambda comm, input, output, async_op: functools.partial(
        comm.reduce_scatter, output, input, async_op=async_op),
    output_numel=lambda numel, n: numel // n,
    algbw_factor=lambda n: 1,
    busbw_factor=lambda n: (n - 1) / n,
    size_rule=utils.SPLIT,
)


def timed_reduce_scatter(input, output, args, comm):
    return utils.timed_collective(REDUCE_SCATTER, input, output, args, comm)


def run_reduce_scatter(local_rank, args, comm=None):
    return utils.run_collective(REDUCE_SCATTER, args,
                                comm or utils.init_processes(local_rank, args))


if __name__ == "__main__":
    utils.cli(run_reduce_scatter)
