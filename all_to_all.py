"""all_to_all: rank r sends its j-th of n equal chunks to rank j and receives chunk r of every rank."""

import functools

import utils


def _first_of_each_chunk(comm, input, output):
    """Rank r's output chunk j came from rank j, so its first element should read j."""
    shown = min(comm.world_size, 8)
    chunk = output.numel() // comm.world_size
    received = [output[j * chunk].item() for j in range(shown)]
    more = " ..." if shown < comm.world_size else ""
    return (f"all_to_all {input.numel()} elements: input[:4]={input[:4].tolist()} "
            f"first element of each output chunk={received}{more}")


ALL_TO_ALL = utils.Collective(
    name="all_to_all",
    bind=lambda comm, input, output, async_op: functools.partial(
        comm.dist.all_to_all_single, output, input, async_op=async_op),
    output_numel=lambda numel, n: numel,
    algbw_factor=lambda n: 1,
    busbw_factor=lambda n: (n - 1) / n,
    size_rule=utils.SPLIT,
    debug=_first_of_each_chunk,
)


def timed_all_to_all(input, output, args, comm):
    return utils.timed_collective(ALL_TO_ALL, input, output, args, comm)


def run_all_to_all(local_rank, args, comm=None):
    return utils.run_collective(ALL_TO_ALL, args, comm or utils.init_processes(local_rank, args))


if __name__ == "__main__":
    utils.cli(run_all_to_all)
