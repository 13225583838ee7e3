"""Run the selected collectives in one process group, in the order of constants.OPS: those named
by their flags, every registered one with --all, else the original six (constants.DEFAULT_OPS).
An op registered there is found in its own op script."""

from commbench import harness  # first: the package silences torch's warning without numpy
from commbench.table import note

import constants
import utils


def selected_ops(args):
    """The ops named on the command line, in constants.OPS order (--all: every one)."""
    return [op for op in constants.OPS if getattr(args, op) or getattr(args, "all", False)]


def main(args, rank):
    chosen = selected_ops(args)
    named = chosen and not args.all
    ops = chosen or list(constants.DEFAULT_OPS)
    collectives = [utils.collective(op) for op in ops]
    comm = harness.init_processes(rank, args, ops=ops)
    for collective in collectives:
        if not named and comm.world_size < collective.min_world_size:
            # Asked for "everything": skip what this world cannot run rather than fail.
            note(comm, f"skipping {collective.name}: it needs at least "
                       f"{collective.min_world_size} ranks")
            continue
        harness.run_op(collective, rank, args, comm)
    harness.finish(comm)


if __name__ == "__main__":
    harness.cli(lambda local_rank, args: main(args, local_rank))
