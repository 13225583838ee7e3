"""The communication layer: which device and backend a run uses, the process group's set-up
and teardown, and `Comm`, the layer chosen once (torch.distributed or deepspeed.comm) and
handed to every op.

Measured calls go through `Comm.dist`; bookkeeping between ranks (agreeing on memory, on an
allocation failure, on hostnames) always goes through torch.distributed, which both layers
sit on.
"""

import contextlib
import functools
import os
import socket
import sys
import time
import traceback
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Callable

import torch
import torch.distributed

from .dtypes import check_dtype_for_backend
from . import ccl as oneccl, groups as grouping, shm
from .errors import BenchmarkError, UsageError
from .guard import deadline, peer_failure
from .launch import check_master_address, discover_launch_env, master_address, master_port
from .table import note


def _torch_accelerator():
    """The device type of torch's current accelerator ('cuda', 'xpu', ...), or None."""
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and accelerator.is_available():
        return accelerator.current_accelerator().type
    return "cuda" if torch.cuda.is_available() else None


def resolve_device_and_backend(args, ds_accelerator=None):
    """The device type and backend this run uses, checked to exist; raises BenchmarkError."""
    if ds_accelerator is not None:
        available = ds_accelerator.device_name()
        device = args.device or available
        backend = args.backend or (ds_accelerator.communication_backend_name()
                                   if device == available else "gloo")
    else:
        available = _torch_accelerator()
        device = args.device or ("cuda" if available == "cuda" else "cpu")
    if device != "cpu" and device != available:
        raise BenchmarkError(f"--device {device}: no {device} device is available on this machine; "
                             "use --device cpu")
    if ds_accelerator is None:
        if args.backend:
            backend = args.backend
        elif device == "cuda":
            backend = "nccl"
        elif device == "cpu":
            backend = "ccl" if oneccl.import_bindings() else "gloo"
        else:
            backend = torch.distributed.get_default_backend_for_device(device)
    if backend == "nccl" and (device != "cuda" or not torch.cuda.is_available()):
        raise BenchmarkError("--backend nccl needs CUDA devices and there are none here "
                             "(or --device is not cuda); use --backend gloo --device cpu")
    if backend == "ccl" and not oneccl.import_bindings():
        raise BenchmarkError("--backend ccl needs oneccl_bindings_for_pytorch, which is not "
                             "installed; install it or use --backend gloo")
    if backend == "mpi" and not torch.distributed.is_mpi_available():
        raise BenchmarkError("--backend mpi: this torch was built without MPI support; "
                             "use --backend gloo (CPU) or nccl (GPU)")
    if not torch.distributed.is_backend_available(backend):
        raise BenchmarkError(f"--backend {backend} is not available in this torch build")
    return device, backend


@dataclass
class Comm:
    """The communication layer chosen once (torch.distributed or deepspeed.comm) and this
    rank's place in the world. Handed to every op; never a global."""

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
    compute: object = None  # --overlap's compute phase (overlap.Compute), made at first use
    results: object = None  # rank 0's results writer (results.py), with --output
    failures: list = field(default_factory=list)  # --check: "op at size" that had wrong elements
    # This rank's own reason to stop (its output failed): a BenchmarkError it ends with once the
    # ranks have agreed to stop (guard.agree_to_go_on).
    stop: object = None
    # --groups: `rank`, `world_size`, `dist`, `all_gather` and `reduce_scatter` are those of
    # this rank's group in the layout in use (use_layout); the world's rank stays here.
    global_rank: int = 0
    layouts: dict = field(default_factory=dict)  # kind -> groups.Layout, made at start-up
    layout: object = None  # the Layout in use; None: the whole world, as without --groups

    def use_layout(self, kind):
        """Measure in layout `kind` (one made at start-up) from here on."""
        chosen = self.layouts[kind]
        self.layout = None if kind == "world" else chosen
        self.dist, self.all_gather, self.reduce_scatter = \
            chosen.dist, chosen.all_gather, chosen.reduce_scatter
        self.rank, self.world_size = chosen.ranks.index(self.global_rank), len(chosen.ranks)

    @property
    def group_layout(self):
        """(kind, groups, index of this rank's group) of the layout in use."""
        if self.layout is None:
            return "world", [list(range(len(self.hostnames)))], 0
        return self.layout.kind, self.layout.groups, self.layout.index

    def stop_on(self, error):
        if self.stop is None:
            self.stop = error

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

    def sum_over_ranks(self, number):
        value = torch.tensor([number], dtype=torch.int64, device=self.device)
        torch.distributed.all_reduce(value)
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


def import_deepspeed(device, needed_by="--dist deepspeed", instead="or use --dist torch"):
    """deepspeed, deepspeed.comm and its accelerator, or one line saying what needs DeepSpeed."""
    if device == "cpu":
        # Spares DeepSpeed's accelerator probe and its warning when the user said cpu.
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    try:
        # DeepSpeed logs to stdout; the table owns stdout, so its handler is bound to stderr.
        with contextlib.redirect_stdout(sys.stderr):
            import deepspeed
            import deepspeed.comm
            from deepspeed.accelerator import get_accelerator
    except ImportError as error:
        raise BenchmarkError(f"{needed_by} needs DeepSpeed, which cannot be imported ({error}); "
                             f"pip install deepspeed{', ' + instead if instead else ''}") from None
    return deepspeed, deepspeed.comm, get_accelerator()


def _init_error(error, port, rank):
    """The one line for a process group that did not start."""
    text = str(error)
    if "EADDRINUSE" in text or "address already in use" in text.lower():
        return BenchmarkError(f"MASTER_PORT {port} is already in use on this host: another job "
                              "holds it; set MASTER_PORT to a free port", rank_local=True)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    first = (lines[0] if lines else type(error).__name__)[:300]
    frames = traceback.extract_tb(error.__traceback__)
    if "CCL_ROOT" in text:  # DeepSpeed's ccl backend found no oneCCL to build its op against
        return BenchmarkError(f"rank {rank}: DeepSpeed's ccl backend needs CCL_ROOT, oneCCL's "
                              "directory (with include/ and lib/); set it, or use --dist torch",
                              rank_local=True)
    if any("cpp_extension" in frame.filename for frame in frames):
        # DeepSpeed JIT-builds its CPU communication op at the first init_distributed().
        cause = next((line for line in lines if "fatal error" in line or " error:" in line), first)
        if "ccl.hpp" in cause:
            return BenchmarkError(f"rank {rank}: DeepSpeed could not build its oneCCL op "
                                  f"({cause[:200]}); CCL_ROOT={os.environ.get('CCL_ROOT')} must "
                                  "hold oneCCL's include/ and lib/, or use --dist torch",
                                  rank_local=True)
        return BenchmarkError(f"rank {rank}: DeepSpeed could not build its CPU communication "
                              f"extension ({cause[:200]}); it needs a C++ compiler, ninja and "
                              "about 1 GB of free memory once (TORCH_EXTENSIONS_DIR keeps the "
                              "build), or use --dist torch", rank_local=True)
    return BenchmarkError(f"rank {rank}: the process group did not start: {first}",
                          rank_local=True)


_EXCHANGE_BYTES = 512  # a host name (at most 253 bytes) and a digest (64), with room


def _exchange(pair, world_size, device):
    """Every rank's (host name, digest), on every rank, through one all_gather of bytes.
    Not all_gather_object: it needs numpy, which torch's wheel does not install, and a
    `--dist torch` user may have torch alone."""
    data = "\0".join(pair).encode()[:_EXCHANGE_BYTES]
    mine = torch.zeros(_EXCHANGE_BYTES, dtype=torch.uint8, device=device)
    mine[:len(data)] = torch.tensor(list(data), dtype=torch.uint8, device=device)
    everyone = torch.empty(world_size * _EXCHANGE_BYTES, dtype=torch.uint8, device=device)
    _torch_one_tensor_api(world_size)[0](everyone, mine)
    rows = everyone.view(world_size, _EXCHANGE_BYTES).cpu().tolist()
    return [tuple(bytes(row).rstrip(b"\0").decode(errors="replace").split("\0", 1))
            for row in rows]


def argument_digest(args):
    """A digest of everything that shapes the measurement: ranks that disagree on a size or a
    loop count would wait for each other forever, so they are refused at start-up."""
    import hashlib
    shared = sorted((k, v) for k, v in vars(args).items() if k not in ("local_rank",))
    return hashlib.sha256(repr(shared).encode()).hexdigest()


def tell_deepspeed_backend(ds_accelerator, backend):
    """DeepSpeed 0.19's init_distributed (deepspeed.initialize's too) starts its accelerator's
    backend whatever it is asked (on CPU: ccl once oneCCL's bindings import, with its own oneCCL
    op): the accelerator is told the backend this run measures."""
    if backend != ds_accelerator.communication_backend_name() and \
            hasattr(ds_accelerator, "_communication_backend_name"):
        ds_accelerator._communication_backend_name = backend


def init_comm(local_rank, args):
    """Initialise the process group the way `args.dist` says and return the Comm.

    Reuses an already initialised process group (run_all and tests call the ops in turn).
    """
    launch = discover_launch_env(local_rank_arg=local_rank)
    ds = ds_dist = ds_accelerator = None
    if args.dist == "deepspeed":
        ds, ds_dist, ds_accelerator = import_deepspeed(args.device)
    device_type, backend = resolve_device_and_backend(args, ds_accelerator)
    check_dtype_for_backend(args, backend)
    if ds_accelerator is not None:
        tell_deepspeed_backend(ds_accelerator, backend)
    if backend == "ccl" and getattr(args, "op", "sum") == "avg":
        # The bindings map sum, product, min and max to oneCCL's reductions; AVG fails inside
        # the op with an exception of the map's, not a message.
        raise UsageError("--op avg: the ccl backend has no average (oneCCL's torch bindings "
                         "reduce with sum, prod, min and max); use one of those, or --backend "
                         "gloo")

    starting = not torch.distributed.is_initialized()
    ccl = oneccl.environment(args.dist) if backend == "ccl" else None
    if ccl is not None:
        shm.expect_ccl_endpoints()
    pinned = pin(launch.local_rank) if starting and getattr(args, "pin", False) else None
    if starting:
        os.environ["MASTER_ADDR"] = check_master_address(master_address(os.environ, launch),
                                                         launch.rank)
        port = master_port(os.environ)
        os.environ.update(MASTER_PORT=str(port), RANK=str(launch.rank),
                          LOCAL_RANK=str(launch.local_rank), WORLD_SIZE=str(launch.world_size))
        device = _select_device(device_type, launch.local_rank, ds_accelerator)
        timeout = timedelta(seconds=args.timeout)
        where = f"{os.environ['MASTER_ADDR']}:{port}"
        try:
            with deadline(args.timeout, f"rank {launch.rank}: no rendezvous of {launch.world_size} "
                                        f"ranks at {where} within {args.timeout:g} s; did every "
                                        "rank start, and do MASTER_ADDR and MASTER_PORT point to "
                                        "rank 0?"):
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
            raise _init_error(error, port, launch.rank) from None
    else:
        device = _select_device(device_type, launch.local_rank, ds_accelerator)

    rank, world_size = torch.distributed.get_rank(), torch.distributed.get_world_size()
    with deadline(args.timeout, f"rank {rank}: the ranks did not all answer within "
                                f"{args.timeout:g} s after start-up; a peer rank died or is stuck"):
        try:
            with oneccl.c_stdout_on_stderr(backend == "ccl" and starting):
                peers = _exchange((socket.gethostname(), argument_digest(args)), world_size,
                                  device)
        except RuntimeError as error:
            # oneCCL starts at the first collective: a setting it refuses (a CCL_* variable) or a
            # transport it cannot open fails there, with oneCCL's own words.
            if backend != "ccl" or peer_failure(error) or "oneCCL" not in str(error):
                raise
            first = str(error).strip().splitlines()[0][:300]
            raise BenchmarkError(f"rank {rank}: oneCCL did not start: {first}",
                                 rank_local=True) from None
    if starting and ds is not None:
        shm.unlink_deepspeed_buffer(rank)
    hostnames = [host for host, _ in peers]
    local_world_size = hostnames.count(socket.gethostname())
    differing = [r for r, (_, digest) in enumerate(peers) if digest != peers[0][1]]
    if differing:
        raise UsageError(f"ranks were started with different arguments (rank {differing[0]} differs "
                         "from rank 0); start every rank with the same command line")

    if ds_dist is not None:
        import warnings
        # DeepSpeed 0.19 calls torch's deprecated *_into_tensor / *_tensor collectives itself;
        # the warning is about DeepSpeed's code, not something a user of this suite can act on.
        warnings.filterwarnings("ignore", message=r"`torch\.distributed\.\w+` is deprecated",
                                category=FutureWarning)
        gather = functools.partial(ds_dist.allgather_fn)
        scatter = functools.partial(ds_dist.reduce_scatter_fn)
        one_tensor = ds_dist.has_all_gather_into_tensor()
        dist_module = ds_dist
    else:
        gather, scatter, one_tensor = _torch_one_tensor_api(world_size)
        dist_module = torch.distributed
    comm = Comm(dist=dist_module, name=args.dist, backend=backend, device=device, rank=rank,
                local_rank=launch.local_rank, world_size=world_size,
                local_world_size=local_world_size, all_gather=gather, reduce_scatter=scatter,
                one_tensor_all_gather=one_tensor, hostnames=hostnames, accelerator=ds_accelerator,
                reduce_args=reduce_args(dist_module, getattr(args, "op", "sum")),
                global_rank=rank, ccl=ccl)
    if starting:  # once per run, not again for each op or utils.max_numel call that reuses it
        layer = "deepspeed.comm" if ds_dist else "torch.distributed"
        note(comm, f"{args.dist} ({layer}), backend {torch.distributed.get_backend()}, device "
                   f"{device.type}, {world_size} rank{'s' if world_size > 1 else ''} on "
                   f"{len(set(hostnames))} host(s), launcher environment: {launch.launcher}" +
                   (f"; each rank pinned to one CPU (rank 0: CPU {pinned})" if pinned is not None
                    else "") + (f"; {oneccl.describe(ccl)}" if ccl is not None else ""))
        cpus = os.cpu_count() or 1
        if ccl is not None and local_world_size > cpus:
            note(comm, f"WARNING: {local_world_size} ranks on a host of {cpus} CPUs: oneCCL's "
                       "ranks poll for each other, so a small message takes as long as the "
                       "scheduler takes to give every rank a CPU (milliseconds)")
    if getattr(args, "groups", None):
        comm.layouts = _make_layouts(comm, args.groups, dist_module, gather, scatter, one_tensor)
    return comm


def _make_layouts(comm, kinds, dist_module, gather, scatter, one_tensor):
    """Every layout of --groups (and the world's), with its process groups: every rank creates
    every group, in the same order (torch's rule for new_group)."""
    layouts = {"world": grouping.Layout("world", [list(range(comm.world_size))], 0, dist_module,
                                        gather, scatter)}
    for kind in kinds:
        if kind == "world":
            continue
        groups = grouping.layout(kind, comm.hostnames)
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
        note(comm, f"--groups {kind}: " + "; ".join(
            grouping.header_qualifier(kind, i, ranks, comm.hostnames).split(" ", 1)[1]
            for i, ranks in enumerate(groups)))
    return layouts


_REDUCE_OP_NAMES = {"sum": "SUM", "prod": "PRODUCT", "min": "MIN", "max": "MAX", "avg": "AVG"}


def reduce_args(dist_module, op):
    """The extra positional argument of a reducing call for --op: none for sum (the default
    of every call), else the layer's own ReduceOp member (deepspeed.comm has its own enum)."""
    if op == "sum":
        return ()
    return (getattr(dist_module.ReduceOp, _REDUCE_OP_NAMES[op]),)


def pin(local_rank):
    """This rank, and the threads it starts from here on (the backend's progress threads), on
    one CPU of its own: the local rank's, among the CPUs this process may use. Returns it."""
    cpus = sorted(os.sched_getaffinity(0))
    cpu = cpus[local_rank % len(cpus)]
    os.sched_setaffinity(0, {cpu})
    return cpu


def _select_device(device_type, local_rank, ds_accelerator):
    if device_type == "cpu":
        return torch.device("cpu")
    if ds_accelerator is not None:
        index = local_rank % ds_accelerator.device_count()
        ds_accelerator.set_device(index)
    else:
        index = local_rank % torch.accelerator.device_count()
        torch.accelerator.set_device_index(index)
    return torch.device(device_type, index)


def teardown():
    """End the process group, in the way that is safe for its backend and layer."""
    if not torch.distributed.is_initialized():
        return
    if torch.distributed.get_backend() == "ccl":
        # The bindings complete each op on a worker thread that drops the op's tensors just
        # after, and needs the GIL for that; a thread still waiting for the GIL when the
        # interpreter exits is ended where it stands and the process aborts. A moment without
        # the GIL lets it finish first.
        time.sleep(0.05)
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
