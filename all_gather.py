"""all_gather: every rank ends with all ranks' tensors concatenated in rank order."""

import functools

import utils

ALL_GATHER = utils.Collective(
    name="all_gather",
    bind=lambda comm, input, output, async_op: functools.partial(
        comm.all_gather, output, input, async_op=async_op),
    output_numel=lambda numel, n: n * numel,
    algbw_factor=lambda n: n,
    busbw_factor=lambda n: n - 1,  # (nS/t) * (n-1)/n
    size_rule=utils.GATHERED,
    # Output position i holds element i mod E of rank i div E.
    expected=lambda values, rank, n, numel, index: values(index // numel, index % numel),
)


def timed_all_gather(input, output, args, comm):
    return utils.timed_collective(ALL_GATHER, input, output, args, comm)


def run_all_gather(local_rank, args, comm=None):
    return utils.run_op(ALL_GATHER, local_rank, args, comm)


if __name__ == "__main__":
    utils.cli(run_all_gather)
