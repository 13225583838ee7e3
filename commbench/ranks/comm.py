"""The communication layer: which device and backend a run uses, the process group's set-up
and teardown, and `Comm`, the layer chosen once (torch.distributed or deepspeed.comm) and
handed to every op.

Measured calls go through `Comm.dist`; bookkeeping between ranks (agreeing on memory, on an
allocation failure, on hostnames) always goes through torch.distributed, which both layers
sit on.
"""

import atexit
import contextlib
import functools
import os
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import timedelta

import torch
import torch.distributed

from ..dtypes import check_dtype_for_backend
from . import builds, ccl as oneccl, groups as grouping, shm
from ..errors import PROG, BenchmarkError, UsageError
from .guard import deadline, peer_failure
from .launch import check_master_address, discover_launch_env, master_address, master_port
from .layer import (import_deepspeed, init_error, pin, resolve_device_and_backend, select_device,
                    tell_deepspeed_backend)
from ..opfacts import REDUCE_OPS
from ..progress import SlowStep
from .peers import argument_digest, differing_arguments, exchange
from ..settings import RankSettings
from .startup import say_startup
from ..table import note


@dataclass(eq=False)
class Run:
    """One run's state beside its communication (`comm.run`): what changes as it runs. Every
    layout's Comm of the run shares it."""

    results: object = None  # rank 0's results writer (results.py), with --output
    budget: object = None  # --precision's share of --time-budget (precision.Budget)
    whereabouts: object = None  # this rank's position in the rendezvous store (whereabouts.py)
    failures: list = field(default_factory=list)  # --check: "op at size" that had wrong elements
    # This rank's own reason to stop (its output failed): a BenchmarkError it ends with once the
    # ranks have agreed to stop (guard.agree_to_go_on).
    stop: object = None
    compute: object = None  # --overlap's compute phase (overlap.Compute), made at first use
    peak: object = None  # the run's bound and each row's (peak.Peak), found at start-up
    # (bytes, where from) of a rank's memory at the run's first sweep: a sweep's ceiling
    # (sizes.refuse_past_ceiling) is fixed for the run, so that the ops before one do not move it.
    sweep_memory: tuple = None

    def stop_on(self, error):
        if self.stop is None:
            self.stop = error


@dataclass(frozen=True, eq=False)
class Comm:
    """The communication layer chosen once (torch.distributed or deepspeed.comm) and this
    rank's place in the world. Handed to every op; never a global. It does not change: a layout
    of --groups is another Comm (in_layout); what a run changes as it goes is its Run (`run`)."""

    dist: object  # the module whose calls are measured
    name: str  # "torch" or "deepspeed"
    backend: str
    device: torch.device
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    all_gather: Callable  # (output, input, async_op=...) into one tensor
    reduce_scatter: Callable  # (output, input, *reduce_args, async_op=...) into one tensor
    one_tensor_all_gather: bool
    hostnames: list
    accelerator: object = None  # DeepSpeed's accelerator in deepspeed mode
    ccl: dict = None  # backend ccl: oneCCL's settings and versions (ccl.environment)
    # --op as the layer's ReduceOp, for the reducing ops' calls: () for SUM, the calls' default,
    # so that the default call is the original's.
    reduce_args: tuple = ()
    # --groups: `rank`, `world_size`, `dist`, `all_gather` and `reduce_scatter` are those of
    # this rank's group in this Comm's layout (in_layout); the world's rank stays here.
    global_rank: int = 0
    layouts: dict = field(default_factory=dict)  # kind -> groups.Layout, made at start-up
    layout: object = None  # the Layout in use; None: the whole world, as without --groups
    # The start-up's cost per rank (seconds from the start of init_comm): the process group up
    # ("process_group_s") and the first collective done ("first_collective_s").
    startup: dict = None
    run: Run = field(default_factory=Run)

    def in_layout(self, kind):
        """This Comm in layout `kind` (one made at start-up; "world": the whole world), sharing
        its Run."""
        chosen = self.layouts[kind]
        return replace(self, layout=None if kind == "world" else chosen, dist=chosen.dist,
                       all_gather=chosen.all_gather, reduce_scatter=chosen.reduce_scatter,
                       rank=chosen.ranks.index(self.global_rank), world_size=len(chosen.ranks))

    @property
    def group_layout(self):
        """(kind, groups, index of this rank's group) of the layout in use."""
        if self.layout is None:
            return "world", [list(range(len(self.hostnames)))], 0
        return self.layout.kind, self.layout.groups, self.layout.index

    def stop_on(self, error):
        """This rank's reason to stop (the run's: guard.agree_to_go_on)."""
        self.run.stop_on(error)

    @property
    def on_accelerator(self):
        return self.device.type != "cpu"

    def synchronize(self):
        if not self.on_accelerator:
            return
        if self.accelerator is not None:
            self.accelerator.synchronize()
        else:
            torch.accelerator.synchronize(self.device)

    def barrier(self):
        """Of the whole world whatever the layout: groups of a layout start each window together."""
        (self.layouts["world"].dist if self.layouts else self.dist).barrier()

    def sync_all(self):
        """Device sync then barrier: every rank is idle and at the same point."""
        self.synchronize()
        self.barrier()
        self.synchronize()

    def any_rank(self, flag):
        """True on every rank when `flag` is true on at least one (bookkeeping, not measured)."""
        value = torch.tensor([1 if flag else 0], dtype=torch.int32, device=self.device)
        torch.distributed.all_reduce(value, op=torch.distributed.ReduceOp.MAX)
        return bool(value.item())

    def min_over_ranks(self, number):
        value = torch.tensor([number], dtype=torch.int64, device=self.device)
        torch.distributed.all_reduce(value, op=torch.distributed.ReduceOp.MIN)
        return int(value.item())

    def gather_figures(self, figures):
        """Every rank's list of floats (all of one length), on every rank."""
        mine = torch.tensor(figures, dtype=torch.float64, device=self.device)
        world_size = len(self.hostnames)
        everyone = torch.empty(world_size * len(figures), dtype=torch.float64, device=self.device)
        all_gather = _torch_one_tensor_api(world_size)[0]
        all_gather(everyone, mine)
        return everyone.view(world_size, len(figures)).tolist()


def _list_form(collective, world_size):
    """all_gather / reduce_scatter through the list API, for a torch without one-tensor forms."""
    if collective == "all_gather":
        def call(output, input, async_op=False, **group):
            return torch.distributed.all_gather(list(output.chunk(world_size)), input,
                                                async_op=async_op, **group)
    else:
        def call(output, input, *reduce_args, async_op=False, **group):
            return torch.distributed.reduce_scatter(output, list(input.chunk(world_size)),
                                                    *reduce_args, async_op=async_op, **group)
    return call


def _torch_one_tensor_api(world_size):
    d = torch.distributed
    # Newest first: torch 2.13 deprecates *_into_tensor / *_tensor in favour of *_single.
    gather = getattr(d, "all_gather_single", None) or getattr(d, "all_gather_into_tensor", None)
    scatter = getattr(d, "reduce_scatter_single", None) or getattr(d, "reduce_scatter_tensor", None)
    return (gather or _list_form("all_gather", world_size),
            scatter or _list_form("reduce_scatter", world_size),
            gather is not None)


def init_comm(local_rank, args: RankSettings):
    """Initialise the process group the way `args.dist` says and return the Comm.

    Reuses an already initialised process group (run_all and tests call the ops in turn).
    Its steps: the layer and backend chosen and checked, the group started (rendezvous, under
    a deadline, after DeepSpeed's builds), the ranks' handshake, the layer's collectives, the
    start-up's note. `args`: what starts the ranks, as the front end built it (settings.py's
    RankSettings: its command line, whole, in the ranks' digest).
    """
    if not isinstance(args, RankSettings):
        raise TypeError(f"init_comm takes RankSettings, not {type(args).__name__}")
    launch = discover_launch_env(local_rank_arg=local_rank)
    ds, ds_dist, ds_accelerator, device_type, backend = _choose_layer(args)
    starting = not torch.distributed.is_initialized()
    begun = time.monotonic()  # the start-up's cost, for the record: group up, first collective
    ccl = oneccl.environment(args.dist) if backend == "ccl" else None
    if ccl is not None:
        shm.expect_ccl_endpoints()
    pinned = pin(launch.local_rank) if starting and args.pin else None
    if starting and launch.local_rank == 0 and device_type == "cpu":
        shm.remove_leftovers()
    device = select_device(device_type, launch.local_rank, ds_accelerator)
    up, building, since = None, [], None
    if starting:
        building, since = _start_group(args, launch, backend, device, ds)
        up = time.monotonic() - begun
        atexit.register(teardown)  # a no-op where the front end tore the group down first
    rank, world_size = torch.distributed.get_rank(), torch.distributed.get_world_size()
    with SlowStep(_say if starting and backend == "ccl" and not building and rank == 0 else None,
                  "starting oneCCL (it starts at the first collective; a first start on a host "
                  "reads its libraries and opens its transport, up to a minute)",
                  "oneCCL started in {:.1f} s"):
        peers = _handshake(args.command_line, args.timeout, backend, starting, rank, world_size,
                           device)
    first_collective = time.monotonic() - begun
    if starting and ds is not None:
        shm.unlink_deepspeed_buffer(rank)
        if building:
            builds.finish(building, since, rank)
    hostnames = [host for host, _ in peers]
    differing = [r for r, (_, digest) in enumerate(peers) if digest != peers[0][1]]
    if differing:
        raise differing_arguments(args.command_line, differing[0],
                                  _torch_one_tensor_api(world_size)[0], world_size, device)
    dist_module, gather, scatter, one_tensor = _collectives(ds_dist, world_size)
    comm = Comm(dist=dist_module, name=args.dist, backend=backend, device=device, rank=rank,
                local_rank=launch.local_rank, world_size=world_size,
                local_world_size=hostnames.count(socket.gethostname()), all_gather=gather,
                reduce_scatter=scatter, one_tensor_all_gather=one_tensor, hostnames=hostnames,
                accelerator=ds_accelerator, global_rank=rank, ccl=ccl,
                reduce_args=reduce_args(dist_module, args.op))
    if starting:  # once per run, not again for each op or utils.max_numel call that reuses it
        comm = replace(comm, startup=say_startup(comm, args, launch, [up, first_collective],
                                                 pinned))
    if args.groups:
        comm = replace(comm, layouts=_make_layouts(comm, args.groups, dist_module, gather,
                                                   scatter, one_tensor, args.split))
    return comm


def _say(line):
    """A start-up line on stderr (rank 0's: before the Comm that note() needs exists)."""
    print(f"{PROG}: {line}", file=sys.stderr, flush=True)


def _choose_layer(args):
    """(deepspeed, deepspeed.comm, its accelerator, device type, backend), checked against the
    dtype and the reduction before anything starts."""
    ds = ds_dist = ds_accelerator = None
    if args.dist == "deepspeed":
        ds, ds_dist, ds_accelerator = import_deepspeed(args.device)
    device_type, backend = resolve_device_and_backend(args, ds_accelerator)
    check_dtype_for_backend(args, backend)
    if ds_accelerator is not None:
        tell_deepspeed_backend(ds_accelerator, backend)
    if backend == "ccl" and args.op == "avg":
        # The bindings map sum, product, min and max to oneCCL's reductions; AVG fails inside
        # the op with an exception of the map's, not a message.
        raise UsageError("--op avg: the ccl backend has no average (oneCCL's torch bindings "
                         "reduce with sum, prod, min and max); use one of those, or --backend "
                         "gloo")
    return ds, ds_dist, ds_accelerator, device_type, backend


def _start_group(args, launch, backend, device, ds):
    """The rendezvous (torch's or DeepSpeed's), within --timeout less the time DeepSpeed's
    builds took; (the ops being built, when their build began)."""
    os.environ["MASTER_ADDR"] = check_master_address(master_address(os.environ, launch),
                                                     launch.rank)
    port = master_port(os.environ)
    os.environ.update(MASTER_PORT=str(port), RANK=str(launch.rank),
                      LOCAL_RANK=str(launch.local_rank), WORLD_SIZE=str(launch.world_size))
    waited, building, since = 0.0, [], None
    if ds is not None and device.type == "cpu":
        # DeepSpeed JIT-builds its CPU ops as its layer starts: stale locks go, live builds
        # are waited for (against --timeout), a first build says so.
        waited, building, since = builds.prepare(backend, args.timeout, launch.local_rank,
                                                 launch.rank)
    message = (f"rank {launch.rank}: no rendezvous of {launch.world_size} ranks at "
               f"{os.environ['MASTER_ADDR']}:{port} within {args.timeout:g} s; did every rank "
               "start, and do MASTER_ADDR and MASTER_PORT point to rank 0?")
    if building:
        message = (f"rank {launch.rank}: DeepSpeed's first build of its "
                   f"{' and '.join(building)} op and the rendezvous of {launch.world_size} "
                   f"ranks did not finish within {args.timeout:g} s; give a first run a "
                   "longer --timeout (the build takes about half a minute per op on 2 cores)")
    timeout = timedelta(seconds=args.timeout)
    try:
        with deadline(max(1.0, args.timeout - waited), message):
            with oneccl.c_stdout_on_stderr(backend == "ccl"):
                if ds is not None:
                    with contextlib.redirect_stdout(sys.stderr):
                        ds.init_distributed(dist_backend=backend, auto_mpi_discovery=False,
                                            distributed_port=port, verbose=False,
                                            timeout=timeout)
                else:
                    torch.distributed.init_process_group(
                        backend=backend, init_method="env://", rank=launch.rank,
                        world_size=launch.world_size, timeout=timeout,
                        device_id=device if device.type != "cpu" else None)
    except Exception as error:  # noqa: BLE001  (third-party start-up: any failure is one line)
        raise init_error(error, port, launch.rank) from None
    return building, since


def _handshake(args, timeout, backend, starting, rank, world_size, device):
    """Every rank's (host name, digest of its arguments), in rank order: the first collective,
    under --timeout."""
    with deadline(timeout, f"rank {rank}: the ranks did not all answer within "
                           f"{timeout:g} s after start-up; a peer rank died or is stuck"):
        try:
            with oneccl.c_stdout_on_stderr(backend == "ccl" and starting):
                return exchange((socket.gethostname(), argument_digest(args)),
                                _torch_one_tensor_api(world_size)[0], world_size, device)
        except RuntimeError as error:
            # oneCCL starts at the first collective: a setting it refuses (a CCL_* variable) or a
            # transport it cannot open fails there, with oneCCL's own words.
            if backend != "ccl" or peer_failure(error) or "oneCCL" not in str(error):
                raise
            first = str(error).strip().splitlines()[0][:300]
            raise BenchmarkError(f"rank {rank}: oneCCL did not start: {first}",
                                 rank_local=True) from None


def _collectives(ds_dist, world_size):
    """(the layer's module, its all_gather and reduce_scatter, whether they take one tensor)."""
    if ds_dist is None:
        gather, scatter, one_tensor = _torch_one_tensor_api(world_size)
        return torch.distributed, gather, scatter, one_tensor
    import warnings
    # DeepSpeed 0.19 calls torch's deprecated *_into_tensor / *_tensor collectives itself;
    # the warning is about DeepSpeed's code, not something a user of this suite can act on.
    warnings.filterwarnings("ignore", message=r"`torch\.distributed\.\w+` is deprecated",
                            category=FutureWarning)
    return (ds_dist, functools.partial(ds_dist.allgather_fn),
            functools.partial(ds_dist.reduce_scatter_fn), ds_dist.has_all_gather_into_tensor())


def _make_layouts(comm, kinds, dist_module, gather, scatter, one_tensor, split=None):
    """Every layout of --groups (and the world's), with its process groups: every rank creates
    every group, in the same order (torch's rule for new_group)."""
    layouts = {"world": grouping.Layout("world", [list(range(comm.world_size))], 0, dist_module,
                                        gather, scatter)}
    for kind in kinds:
        if kind == "world":
            continue
        groups = grouping.layout(kind, comm.hostnames, split)
        made = [torch.distributed.new_group(ranks) for ranks in groups]
        index = next(i for i, ranks in enumerate(groups) if comm.rank in ranks)
        group, size = made[index], len(groups[index])
        if one_tensor:
            group_gather = functools.partial(gather, group=group)
            group_scatter = functools.partial(scatter, group=group)
        else:
            group_gather = functools.partial(_list_form("all_gather", size), group=group)
            group_scatter = functools.partial(_list_form("reduce_scatter", size), group=group)
        layouts[kind] = grouping.Layout(kind, groups, index,
                                        grouping.InGroup(dist_module, group, groups[index]),
                                        group_gather, group_scatter)
        flag = f"--split {split[0]} ({split[1]})" if kind == "split" else f"--groups {kind}"
        note(comm, f"{flag}: " + "; ".join(
            grouping.header_qualifier(kind, i, ranks, comm.hostnames).split(" ", 1)[1]
            for i, ranks in enumerate(groups)))
    return layouts


def reduce_args(dist_module, op):
    """The extra positional argument of a reducing call for --op: none for sum (the default
    of every call), else the layer's own ReduceOp member (deepspeed.comm has its own enum)."""
    if op == "sum":
        return ()
    return (getattr(dist_module.ReduceOp, REDUCE_OPS[op]),)


def teardown():
    """End the process group, in the way that is safe for its backend and layer. Called by
    every front end as it ends, and at exit (init_comm registers it) for a script of the
    user's own over utils.py, which ends as scripts do."""
    if not torch.distributed.is_initialized():
        return
    # gloo's and oneCCL's worker threads drop an op's tensors (with the GIL) just after wait()
    # returned; one still waiting for the GIL as the interpreter finalises aborts the process
    # (exit -6: 4 of 154 runs of tests/test_utils_face.py's script). A moment without it first.
    time.sleep(0.05)
    if torch.distributed.get_backend() == "ccl":
        shm.release_ccl_endpoints()
        if _deepspeed_ccl_op():
            # DeepSpeed's own oneCCL communicator (its op's, a static of the op's library) and
            # the bindings' torn down by destroy_process_group() leave the process to crash at
            # exit (SIGSEGV on every rank); left to the exit, both end cleanly (but nothing
            # closes oneCCL's transport: shm.release_ccl_endpoints above).
            return
    torch.distributed.destroy_process_group()


def _deepspeed_ccl_op():
    """Whether DeepSpeed's ccl backend loaded its oneCCL op in this process."""
    backend = getattr(sys.modules.get("deepspeed.comm.comm"), "cdb", None)
    return getattr(backend, "ccl_comm_op", None) is not None
