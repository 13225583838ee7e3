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
)


def timed_all_gather(input, output, args, comm):
    return utils.timed_collective(ALL_GATHER, input, output, args, comm)


def run_all_gather(local_rank, args, comm=None):
    return utils.run_collective(ALL_GATHER, args, comm or utils.init_processes(local_rank, args))


if __name__ == "__main__":
    utils.cli(run_all_gather)
