"""The public face of the harness, with the original suite's names and call forms.

Users of DeepSpeedExamples' `benchmarks/communication` know these names; they are kept here,
at the top, while the harness itself lives in the `commbench` package, one concern a module
(its `__init__` lists them). Each function below is the original's call form over that
package; the process group they use is the one `init_processes` set up.

    benchmark_parser()                                     the command line (commbench.cli)
    init_processes(local_rank, args)                       the process group; returns the Comm
    get_bw(comm_op, size, duration, args)                  (Throughput, BusBW) per SPEC §3
    max_numel(comm_op, dtype, mem_factor, local_rank, args) a single-size run's element count
    print_rank_0(message), print_header(args, comm_op)     what rank 0 prints
    get_metric_strings(args, tput, busbw, duration), convert_size(size_bytes)
    sync_all()                                             device sync, then a barrier

`collective(name)` finds the descriptor of a registered op (constants.OPS) in commbench/ops/.
"""

import sys

# The package first: it silences torch's import-time warning when numpy is absent.
from commbench.bench import collective as _collective
from commbench.bench import harness, sizes
from commbench import ops, table
from commbench.cli import benchmark_parser
from commbench.settings import Settings
from commbench.table import convert_size, get_metric_strings

import torch  # noqa: E402  (after the package, see above)
import torch.distributed  # noqa: E402

__all__ = ["benchmark_parser", "init_processes", "get_bw", "max_numel", "print_rank_0",
           "print_header", "get_metric_strings", "sync_all", "convert_size", "collective"]


def collective(name):
    """The descriptor (a commbench.bench.collective.Collective) of the registered op `name`, from
    its module commbench/ops/<name>.py."""
    return ops.descriptor(name)


# init_processes(local_rank, args, ops=None): the process group the way `args.dist` says (or
# the one already up), as the Comm; `ops` names the ops for the results file of --output.
init_processes = harness.init_processes


def get_bw(comm_op, size, duration, args):
    """(Throughput, BusBW) of `comm_op` for `size` bytes per rank and `duration` seconds a
    trial, in bytes/s, or bits/s with --bw-unit Gbps (the original's form and units)."""
    world_size = torch.distributed.get_world_size()
    return _collective.get_bw(collective(comm_op), size, duration, world_size, args.bw_unit)


def max_numel(comm_op, dtype, mem_factor, local_rank, args):
    """The elements per rank a single-size run of `comm_op` would use with this dtype (a torch
    dtype or its name) and memory factor: the suite's own plan (SPEC §4, capped to what fits)."""
    name = dtype if isinstance(dtype, str) else str(dtype).removeprefix("torch.")
    planned = Settings.of(args).but(dtype=name, mem_factor=mem_factor, output=None)
    comm = harness.init_processes(local_rank, planned)
    return sizes.plan_single_size(collective(comm_op), planned, comm)[0]


def _rank():
    return torch.distributed.get_rank() if torch.distributed.is_initialized() else 0


def print_rank_0(message):
    """`message` on stdout, from rank 0 alone."""
    if _rank() == 0:
        table.emit(sys.stdout, message)


def print_header(args, comm_op):
    """The table header of `comm_op` (SPEC §6), from rank 0 alone."""
    shown = collective(comm_op).shown_world_size or torch.distributed.get_world_size()
    if _rank() == 0:
        table.emit(sys.stdout, table.header_text(Settings.of(args), comm_op, shown))


def sync_all():
    """Every rank idle and at the same point: the accelerator synchronised, then a barrier."""
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and accelerator.is_available():
        accelerator.synchronize()
    torch.distributed.barrier()
