"""The start-up's line every run prints first (layer, backend, ranks, hosts, launcher,
pinning, oneCCL's settings, how long the process group and the first collective took, the bound
of what it measures: peak.py), and its
figures kept on the Comm (`comm.startup`, in the results file's meta record)."""

import os

import torch
import torch.distributed

from . import ccl as oneccl, gathered, peak
from ..table import note


def say_startup(comm, args, launch, figures, pinned):
    """The start-up's line (layer, backend, ranks, hosts, launcher, pinning, oneCCL, times); its
    figures, for comm.startup."""
    up, first_collective = figures
    everyone = gathered.gather(comm, {"process_group_s": up,
                                      "first_collective_s": first_collective})
    startup = {name: [row[name] for row in everyone]
               for name in ("process_group_s", "first_collective_s")}
    layer = "torch.distributed" if comm.dist is torch.distributed else "deepspeed.comm"
    ccl, hosts, world_size = comm.ccl, comm.hostnames, comm.world_size
    comm.run.peak = peak.detect(comm, args)  # the bound, named below (docs/peak.md)
    note(comm, f"{args.dist} ({layer}), backend {torch.distributed.get_backend()}, device "
               f"{comm.device.type}, {world_size} rank{'s' if world_size > 1 else ''} on "
               f"{len(set(hosts))} host(s), launcher environment: {launch.launcher}" +
               (f"; each rank pinned to one CPU (rank 0: CPU {pinned})" if pinned is not None
                else "") + (f"; {oneccl.describe(ccl)}" if ccl is not None else "") +
               f"; {describe_startup(startup)}; {comm.run.peak.line()}")
    cpus = os.cpu_count() or 1
    if ccl is not None and comm.local_world_size > cpus:
        note(comm, f"WARNING: {comm.local_world_size} ranks on a host of {cpus} CPUs: oneCCL's "
                   "ranks poll for each other, so a small message takes as long as the "
                   "scheduler takes to give every rank a CPU (milliseconds)")
    return startup


def describe_startup(startup):
    """`process group up in 0.41 s, first collective done at 0.43 s (slowest rank: ...)`."""
    group, first = startup["process_group_s"], startup["first_collective_s"]
    text = f"process group up in {group[0]:.2f} s, first collective done at {first[0]:.2f} s"
    slowest = max(range(len(first)), key=first.__getitem__)
    if len(first) > 1 and slowest != 0:
        text += f" (slowest: rank {slowest}, {group[slowest]:.2f} s and {first[slowest]:.2f} s)"
    return text
