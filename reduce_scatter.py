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
    # Rank r keeps the sum of chunk r (E/n elements from r·E/n) of every rank.
    expected=lambda values, rank, n, numel, index: sum(
        values(s, rank * (numel // n) + index) for s in range(n)),
    reduces=True,
)


def timed_reduce_scatter(input, output, args, comm):
    return utils.timed_collective(REDUCE_SCATTER, input, output, args, comm)


def run_reduce_scatter(local_rank, args, comm=None):
    return utils.run_op(REDUCE_SCATTER, local_rank, args, comm)


if __name__ == "__main__":
    utils.cli(run_reduce_scatter)
