"""Run the selected collectives in one process group, in the order of defaults.OPS: those named
by their flags, every registered one with --all, else the original six (defaults.DEFAULT_OPS).
An op registered there is found in its module commbench/ops/<op>.py."""

from . import defaults, ops as registry
from .bench import harness
from .settings import Settings
from .table import note


def selected_ops(args):
    """The ops named on the command line, in defaults.OPS order (--all: every one)."""
    args = Settings.of(args)
    return [op for op in defaults.OPS if op in args.ops or args.all]


def main(args, rank):
    chosen = selected_ops(args)
    ops = chosen or list(defaults.DEFAULT_OPS)
    collectives = [registry.descriptor(op) for op in ops]
    comm = harness.init_processes(rank, args, ops=ops)  # the command line's digest: every flag
    args = Settings.of(args)
    named = chosen and not args.all
    harness.refuse_oversized_sweeps(collectives, args, comm)
    for collective in collectives:
        if not named and comm.world_size < collective.min_world_size:
            # Asked for "everything": skip what this world cannot run rather than fail.
            note(comm, f"skipping {collective.name}: it needs at least "
                       f"{collective.min_world_size} ranks")
            continue
        harness.run_op(collective, rank, args, comm)
    harness.finish(comm)


def run(local_rank, args):
    """The op scripts' form, for entry.cli."""
    main(args, local_rank)
