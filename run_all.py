"""Run the selected collectives (none selected: all six) in one process group, in SPEC order."""

import constants
import utils
from all_gather import ALL_GATHER, run_all_gather
from all_reduce import ALL_REDUCE, run_all_reduce
from all_to_all import ALL_TO_ALL, run_all_to_all
from broadcast import BROADCAST, run_broadcast
from pt2pt import PT2PT, run_pt2pt
from reduce_scatter import REDUCE_SCATTER, run_reduce_scatter

OPS = {
    "all_reduce": (ALL_REDUCE, run_all_reduce),
    "all_gather": (ALL_GATHER, run_all_gather),
    "all_to_all": (ALL_TO_ALL, run_all_to_all),
    "reduce_scatter": (REDUCE_SCATTER, run_reduce_scatter),
    "pt2pt": (PT2PT, run_pt2pt),
    "broadcast": (BROADCAST, run_broadcast),
}
assert tuple(OPS) == constants.OPS


def selected_ops(args):
    """The ops named on the command line, in SPEC order; none named: all six."""
    return [op for op in constants.OPS if getattr(args, op)]


def main(args, rank):
    chosen = selected_ops(args)
    comm = utils.init_processes(rank, args, ops=chosen or constants.OPS)
    for op in chosen or constants.OPS:
        collective, run = OPS[op]
        if not chosen and comm.world_size < collective.min_world_size:
            # Asked for "everything": skip what this world cannot run rather than fail.
            utils.note(comm, f"skipping {op}: it needs at least {collective.min_world_size} ranks")
            continue
        run(rank, args, comm)
    utils.finish(comm)


if __name__ == "__main__":
    utils.cli(lambda local_rank, args: main(args, local_rank))
