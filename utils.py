"""The shared harness of the communication benchmarks.

Each op script (all_reduce.py, ...) describes its collective as a `Collective`:
its buffers, the one call that runs it, its bandwidth factors and its size rule.
Everything else lives here, once: the command line, launcher discovery,
process-group set-up, the size plan, the timing loop, bandwidth and printing.

Measured calls go through the communication layer the user chose
(`torch.distributed` or `deepspeed.comm`, held by `Comm.dist`); bookkeeping
between ranks (agreeing on memory, on an allocation failure, on hostnames)
always goes through `torch.distributed`, which both layers sit on.
"""

import argparse
import contextlib
import functools
import math
import os
import re
import signal
import socket
import statistics
import sys
import threading
import time
import traceback
from datetime import timedelta
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch
import torch.distributed

import constants

PROG = "commbench"


# --------------------------------------------------------------------------- errors

class BenchmarkError(Exception):
    """An expected failure: bad input or a missing part. One line, no traceback.

    Most such failures happen alike on every rank, and rank 0 alone reports them;
    `rank_local` ones happen on one rank, which reports its own.
    """

    exit_code = 1

    def __init__(self, message, rank_local=False):
        super().__init__(message)
        self.rank_local = rank_local


class UsageError(BenchmarkError):
    """The command line or the launcher environment is wrong."""

    exit_code = 2


# --------------------------------------------------------------------------- command line

class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(f"{message} (see --help)")


def _int_at_least(minimum):
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value
    return parse


def _maxsize(text):
    value = _int_at_least(constants.MIN_MAXSIZE)(text)
    if value > constants.MAX_MAXSIZE:
        raise argparse.ArgumentTypeError(f"must be <= {constants.MAX_MAXSIZE} (2^{value} elements "
                                         f"fit no memory), got {value}")
    return value


def _float_in(low, high, what):
    """A parser of floats in (low, high]; `what` says the range in the error message."""
    def parse(text):
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not a number") from None
        if not low < value <= high:
            raise argparse.ArgumentTypeError(f"must be {what}, got {text}")
        return value
    return parse


_mem_factor = _float_in(0, 1, "in (0, 1]")
_positive_seconds = _float_in(0, 1e6, "a positive number of seconds")


def _dtype_name(text):
    get_dtype(text)  # raises with the reason
    return text


# The dtypes a run may use: real floating point and integer types. Quantized, complex, bool
# and sub-byte types are not message payloads.
_DTYPE_NAMES = ("float32", "float64", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2",
                "float8_e4m3fnuz", "float8_e5m2fnuz", "int8", "int16", "int32", "int64", "uint8",
                "uint16", "uint32", "uint64")
PAYLOAD_DTYPES = frozenset(d for d in (getattr(torch, n, None) for n in _DTYPE_NAMES)
                           if isinstance(d, torch.dtype))
# What gloo moves (torch 2.13's ProcessGroupGloo): the others fail inside the op.
GLOO_DTYPES = frozenset((torch.float32, torch.float64, torch.float16, torch.bfloat16,
                         torch.int8, torch.uint8, torch.int32, torch.int64))


def get_dtype(name):
    """The torch dtype called `name` (`float`, `half`, `bfloat16`, `int32`, ...)."""
    dtype = getattr(torch, name, None) if name.isidentifier() else None
    if not isinstance(dtype, torch.dtype):
        raise argparse.ArgumentTypeError(
            f"unknown dtype '{name}': use a torch dtype name such as float, half, bfloat16, "
            "double, int8, uint8, int32 or long")
    if dtype not in PAYLOAD_DTYPES:
        raise argparse.ArgumentTypeError(f"dtype '{name}' is not supported: use a real floating "
                                         "point or integer type")
    return dtype


def _device_type(text):
    if ":" in text:
        raise argparse.ArgumentTypeError(f"give a device type (cpu, cuda, ...) without an index, "
                                         f"got {text}; each rank takes its local rank's index")
    try:
        torch.device(text)
    except RuntimeError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a device type torch knows; use cpu, "
                                         "cuda, xpu, hpu, npu, ...") from None
    return text


def check_dtype_for_backend(args, backend):
    """Refuse, before any rank connects, a dtype the backend cannot move."""
    if backend == "gloo" and get_dtype(args.dtype) not in GLOO_DTYPES:
        names = ", ".join(sorted(str(d).replace("torch.", "") for d in GLOO_DTYPES))
        raise UsageError(f"--dtype {args.dtype}: the gloo backend cannot move it; use one of "
                         f"{names}")


def benchmark_parser():
    parser = _Parser(prog=os.path.basename(sys.argv[0]) or PROG,
                     description="Measure collective communication through deepspeed.comm "
                                 "or torch.distributed.")
    parser.add_argument("--local_rank", "--local-rank", dest="local_rank", type=int, default=None,
                        help="set by launchers; default: from the launcher's environment")
    parser.add_argument("--trials", type=_int_at_least(1), default=constants.DEFAULT_TRIALS,
                        help="number of timed iterations (default %(default)s)")
    parser.add_argument("--warmups", type=_int_at_least(0), default=constants.DEFAULT_WARMUPS,
                        help="number of untimed iterations before timing (default %(default)s)")
    parser.add_argument("--maxsize", type=_maxsize, default=constants.DEFAULT_MAXSIZE,
                        help="scan up to n x 2^(maxsize-1) elements per rank (default %(default)s)")
    parser.add_argument("--async-op", action="store_true",
                        help="issue ops with async_op=True (pt2pt: isend/irecv) and wait on "
                             "every handle inside the timed window")
    parser.add_argument("--bw-unit", choices=constants.BW_UNITS, default=constants.DEFAULT_UNIT)
    parser.add_argument("--backend", choices=constants.BACKENDS, default=constants.DEFAULT_BACKEND,
                        help="communication backend (default: detected from the device)")
    parser.add_argument("--dist", choices=constants.DISTS, default=constants.DEFAULT_DIST,
                        help="communication layer to measure (default %(default)s)")
    parser.add_argument("--scan", action="store_true",
                        help="sweep message sizes instead of one large message")
    parser.add_argument("--raw", action="store_true",
                        help="print sizes in bytes and durations in microseconds, without units")
    for op in constants.OPS:
        parser.add_argument(f"--{op.replace('_', '-')}", dest=op, action="store_true",
                            help=f"run {op} (run_all.py; none given = all)")
    parser.add_argument("--dtype", type=_dtype_name, default=constants.DEFAULT_TYPE,
                        help="torch dtype of the buffers (default %(default)s)")
    parser.add_argument("--mem-factor", type=_mem_factor, default=constants.DEFAULT_MEM_FACTOR,
                        help="fraction of per-rank memory a single-size run may use, in (0, 1] "
                             "(default %(default)s)")
    parser.add_argument("--debug", action="store_true",
                        help="all_to_all: print a few elements of each rank's buffers")
    parser.add_argument("--device", type=_device_type, default=constants.DEFAULT_DEVICE,
                        help="cuda, cpu, xpu, hpu, npu, ... (default: detected)")
    parser.add_argument("--check", action="store_true",
                        help="after timing each size, run the op once more on known input and "
                             "count wrong elements (column Wrong; any wrong: exit status 1)")
    parser.add_argument("--stats", action="store_true",
                        help="time every trial too: median, p99 and the slowest rank per size")
    parser.add_argument("--output", metavar="PATH",
                        help="write results to PATH as it runs: .jsonl, .csv or .json")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an existing --output file (default: write PATH.1, PATH.2, ...)")
    parser.add_argument("--time-budget", type=_positive_seconds, default=None, metavar="SECONDS",
                        help="per message size, time about this long: the trial count comes "
                             "from the median warmup's pace, at least 5 and at most --trials")
    parser.add_argument("--timeout", type=_positive_seconds, default=constants.DEFAULT_TIMEOUT,
                        help="seconds a rank waits for its peers (rendezvous, process group) "
                             "before it gives up with an error (default %(default)s)")
    return parser


# --------------------------------------------------------------------------- launcher environment

# (launcher, rank, local rank, world size variables in order of preference), searched in this order.
LAUNCHER_ENVIRONMENTS = (
    ("torchrun/deepspeed", "RANK", "LOCAL_RANK", ("WORLD_SIZE",)),
    ("Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", ("OMPI_COMM_WORLD_SIZE",)),
    ("MPICH/Intel MPI", "PMI_RANK", "MPI_LOCALRANKID", ("PMI_SIZE",)),
    ("MVAPICH", "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_LOCAL_RANK", ("MV2_COMM_WORLD_SIZE",)),
    ("Slurm", "SLURM_PROCID", "SLURM_LOCALID", ("SLURM_NTASKS", "SLURM_NPROCS")),
)

# Variables that say how many ranks share this host, when a launcher sets one.
LOCAL_WORLD_SIZE_VARIABLES = ("LOCAL_WORLD_SIZE", "LOCAL_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE",
                              "MPI_LOCALNRANKS", "MV2_COMM_WORLD_LOCAL_SIZE")


@dataclass(frozen=True)
class LaunchEnv:
    launcher: str
    rank: int
    local_rank: int
    world_size: int


def _env_int(environ, name, minimum=0):
    text = environ[name].strip()
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"launcher environment: {name}={environ[name]!r} is not an integer") from None
    if value < minimum:
        raise UsageError(f"launcher environment: {name}={value} must be >= {minimum}")
    return value


def discover_launch_env(environ=None, local_rank_arg=None):
    """Rank, local rank and world size from the first launcher environment found.

    None found: a world of one. A partial or contradictory set is a UsageError.
    """
    environ = os.environ if environ is None else environ
    for launcher, rank_var, local_var, size_vars in LAUNCHER_ENVIRONMENTS:
        present = [v for v in (rank_var, local_var) + size_vars if v in environ]
        if not present:
            continue
        size_var = next((v for v in size_vars if v in environ), None)
        if rank_var not in environ or size_var is None:
            missing = rank_var if rank_var not in environ else " or ".join(size_vars)
            raise UsageError(f"incomplete {launcher} environment: {', '.join(present)} set but "
                             f"{missing} missing; launch with the launcher or set all of them")
        rank = _env_int(environ, rank_var)
        world_size = _env_int(environ, size_var, minimum=1)
        if local_var in environ:
            local_rank = _env_int(environ, local_var)
        elif local_rank_arg is not None:
            local_rank = local_rank_arg
        else:
            raise UsageError(f"incomplete {launcher} environment: {local_var} missing "
                             "(or pass --local_rank)")
        if local_rank_arg is not None and local_rank_arg != local_rank:
            raise UsageError(f"--local_rank={local_rank_arg} contradicts {local_var}={local_rank}")
        if rank >= world_size:
            raise UsageError(f"launcher environment: {rank_var}={rank} is not below "
                             f"{size_var}={world_size}")
        if local_rank >= world_size:
            raise UsageError(f"launcher environment: {local_var}={local_rank} is not below "
                             f"{size_var}={world_size}")
        local_size_var = next((v for v in LOCAL_WORLD_SIZE_VARIABLES if v in environ), None)
        if local_size_var and local_rank >= _env_int(environ, local_size_var, minimum=1):
            raise UsageError(f"launcher environment: {local_var}={local_rank} is not below "
                             f"{local_size_var}={environ[local_size_var]}")
        return LaunchEnv(launcher, rank, local_rank, world_size)
    if local_rank_arg not in (None, 0):
        raise UsageError(f"--local_rank={local_rank_arg} given but no launcher environment "
                         "(RANK, WORLD_SIZE) found")
    return LaunchEnv("none", 0, 0, 1)


def expand_nodelist(nodelist):
    """Slurm's compressed host list (`node[03-05,07],gpu1`) as a list of host names."""
    hosts, item, depth = [], "", 0
    for ch in nodelist + ",":
        if ch == "," and depth == 0:
            if item:
                hosts.extend(_expand_host(item))
            item = ""
            continue
        depth += ch == "["
        depth -= ch == "]"
        item += ch
    return hosts


def _expand_host(item):
    if "[" not in item:
        return [item]
    prefix, rest = item.split("[", 1)
    ranges, suffix = rest.split("]", 1)
    names = []
    for part in ranges.split(","):
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise UsageError(f"cannot read Slurm node list entry '{item}'; set MASTER_ADDR")
        for number in range(int(lo), int(hi or lo) + 1):
            names.extend(_expand_host(f"{prefix}{number:0{len(lo)}d}{suffix}"))
    return names


def _all_ranks_on_this_host(environ, launch):
    if launch.world_size == 1:
        return True
    for name in LOCAL_WORLD_SIZE_VARIABLES:
        if name in environ:
            return _env_int(environ, name, minimum=1) == launch.world_size
    if launch.launcher == "Slurm":
        nodes = environ.get("SLURM_STEP_NUM_NODES") or environ.get("SLURM_JOB_NUM_NODES") \
            or environ.get("SLURM_NNODES")
        return nodes is not None and nodes.strip() == "1"
    return False


def _own_address():
    """This host's address as other hosts reach it, from the standard library alone."""
    host = socket.getfqdn()
    try:
        infos = socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)
    except socket.gaierror:
        infos = []
    addresses = [info[4][0] for info in infos]
    routable = [a for a in addresses if not a.startswith("127.")]
    return (routable or addresses or ["127.0.0.1"])[0]


def check_master_address(address, rank):
    """`address` as torch wants it, checked to be a host name or an address that resolves: a bad
    one would otherwise keep every rank retrying it until --timeout."""
    if address.startswith("[") and address.endswith("]"):
        address = address[1:-1]  # an IPv6 literal as URLs write it; torch wants it bare
    if not re.fullmatch(r"[A-Za-z0-9._:%\-]+", address):
        raise UsageError(f"MASTER_ADDR={address!r} is not a host name or an IP address")
    try:
        socket.getaddrinfo(address, None)
    except (OSError, UnicodeError) as error:
        raise BenchmarkError(f"rank {rank}: MASTER_ADDR {address} does not resolve "
                             f"({getattr(error, 'strerror', None) or error}); set it to rank 0's "
                             "host name or IP address", rank_local=True) from None
    return address


def master_address(environ, launch):
    """MASTER_ADDR per SPEC §7: kept, loopback, Slurm's first host, or rank 0's via mpi4py."""
    if environ.get("MASTER_ADDR"):
        return environ["MASTER_ADDR"]
    if _all_ranks_on_this_host(environ, launch):
        return "127.0.0.1"
    nodelist = environ.get("SLURM_STEP_NODELIST") or environ.get("SLURM_JOB_NODELIST") \
        or environ.get("SLURM_NODELIST")
    if launch.launcher == "Slurm" and nodelist:
        return expand_nodelist(nodelist)[0]
    try:
        from mpi4py import MPI
    except ImportError:
        raise BenchmarkError("ranks span several hosts and MASTER_ADDR is not set: install mpi4py "
                             "(pip install mpi4py) or export MASTER_ADDR=<address of rank 0>") from None
    return MPI.COMM_WORLD.bcast(_own_address() if launch.rank == 0 else None, root=0)


def master_port(environ):
    text = environ.get("MASTER_PORT") or str(constants.TORCH_DISTRIBUTED_DEFAULT_PORT)
    try:
        port = int(text)
    except ValueError:
        raise UsageError(f"MASTER_PORT={text!r} is not a port number") from None
    if not 1 <= port <= 65535:
        raise UsageError(f"MASTER_PORT={port} is not a port number (1-65535)")
    return port


# --------------------------------------------------------------------------- device and backend

def _import_ccl():
    try:
        import oneccl_bindings_for_pytorch  # noqa: F401  (registers the ccl backend)
    except ImportError:
        return False
    return True


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
            backend = "ccl" if _import_ccl() else "gloo"
        else:
            backend = torch.distributed.get_default_backend_for_device(device)
    if backend == "nccl" and (device != "cuda" or not torch.cuda.is_available()):
        raise BenchmarkError("--backend nccl needs CUDA devices and there are none here "
                             "(or --device is not cuda); use --backend gloo --device cpu")
    if backend == "ccl" and not _import_ccl():
        raise BenchmarkError("--backend ccl needs oneccl_bindings_for_pytorch, which is not "
                             "installed; install it or use --backend gloo")
    if backend == "mpi" and not torch.distributed.is_mpi_available():
        raise BenchmarkError("--backend mpi: this torch was built without MPI support; "
                             "use --backend gloo (CPU) or nccl (GPU)")
    if not torch.distributed.is_backend_available(backend):
        raise BenchmarkError(f"--backend {backend} is not available in this torch build")
    return device, backend


# --------------------------------------------------------------------------- the communication layer

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
    reduce_scatter: Callable  # (output, input, async_op=...) SUM into one tensor
    one_tensor_all_gather: bool
    hostnames: list
    accelerator: object = None  # DeepSpeed's accelerator in deepspeed mode
    results: object = None  # rank 0's results writer (results.py), with --output
    failures: list = field(default_factory=list)  # --check: "op at size" that had wrong elements

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
        self.dist.barrier()

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
        everyone = torch.empty(self.world_size * len(figures), dtype=torch.float64,
                               device=self.device)
        all_gather = _torch_one_tensor_api(self.world_size)[0]
        all_gather(everyone, mine)
        return everyone.view(self.world_size, len(figures)).tolist()


def _list_form(collective, world_size):
    """all_gather / reduce_scatter through the list API, for a torch without one-tensor forms."""
    if collective == "all_gather":
        def call(output, input, async_op=False):
            return torch.distributed.all_gather(list(output.chunk(world_size)), input,
                                                async_op=async_op)
    else:
        def call(output, input, async_op=False):
            return torch.distributed.reduce_scatter(output, list(input.chunk(world_size)),
                                                    async_op=async_op)
    return call


def _torch_one_tensor_api(world_size):
    d = torch.distributed
    # Newest first: torch 2.13 deprecates *_into_tensor / *_tensor in favour of *_single.
    gather = getattr(d, "all_gather_single", None) or getattr(d, "all_gather_into_tensor", None)
    scatter = getattr(d, "reduce_scatter_single", None) or getattr(d, "reduce_scatter_tensor", None)
    return (gather or _list_form("all_gather", world_size),
            scatter or _list_form("reduce_scatter", world_size),
            gather is not None)


def _import_deepspeed(device):
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
        raise BenchmarkError(f"--dist deepspeed needs DeepSpeed, which cannot be imported ({error}); "
                             "pip install deepspeed, or use --dist torch") from None
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
    if any("cpp_extension" in frame.filename for frame in frames):
        # DeepSpeed JIT-builds its CPU communication op at the first init_distributed().
        cause = next((line for line in lines if "fatal error" in line or " error:" in line), first)
        return BenchmarkError(f"rank {rank}: DeepSpeed could not build its CPU communication "
                              f"extension ({cause[:200]}); it needs a C++ compiler, ninja and "
                              "about 1 GB of free memory once (TORCH_EXTENSIONS_DIR keeps the "
                              "build), or use --dist torch", rank_local=True)
    return BenchmarkError(f"rank {rank}: the process group did not start: {first}",
                          rank_local=True)


@contextlib.contextmanager
def deadline(seconds, message):
    """Ends the process with one error line, exit 1, if the block still runs after `seconds`.

    A rank blocked in a rendezvous or a collective cannot be interrupted from Python; it can
    only be abandoned, and a benchmark that waits forever costs a cluster reservation.
    """
    def expire():
        emit(sys.stderr, f"{PROG}: error: {message}")
        os._exit(1)
    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def argument_digest(args):
    """A digest of everything that shapes the measurement: ranks that disagree on a size or a
    loop count would wait for each other forever, so they are refused at start-up."""
    import hashlib
    shared = sorted((k, v) for k, v in vars(args).items() if k not in ("local_rank",))
    return hashlib.sha256(repr(shared).encode()).hexdigest()


def init_processes(local_rank, args, ops=None):
    """Initialise the process group the way `args.dist` says and return the Comm.

    Reuses an already initialised process group (run_all and tests call the ops in turn).
    `ops` names the ops this run will measure, for the results file.
    """
    launch = discover_launch_env(local_rank_arg=local_rank)
    ds = ds_dist = ds_accelerator = None
    if args.dist == "deepspeed":
        ds, ds_dist, ds_accelerator = _import_deepspeed(args.device)
    device_type, backend = resolve_device_and_backend(args, ds_accelerator)
    check_dtype_for_backend(args, backend)

    if not torch.distributed.is_initialized():
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
                if ds is not None:
                    with contextlib.redirect_stdout(sys.stderr):
                        ds.init_distributed(dist_backend=backend, auto_mpi_discovery=False,
                                            distributed_port=port, verbose=False, timeout=timeout)
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
    peers = [None] * world_size
    with deadline(args.timeout, f"rank {rank}: the ranks did not all answer within "
                                f"{args.timeout:g} s after start-up; a peer rank died or is stuck"):
        torch.distributed.all_gather_object(peers, (socket.gethostname(), argument_digest(args)))
    hostnames = [host for host, _ in peers]
    local_world_size = hostnames.count(socket.gethostname())
    differing = [r for r, (_, digest) in enumerate(peers) if digest != peers[0][1]]
    if differing:
        raise UsageError(f"ranks were started with different arguments (rank {differing[0]} differs "
                         "from rank 0); start every rank with the same command line")

    note_rank_0 = f"{PROG}: {args.dist} ({'deepspeed.comm' if ds_dist else 'torch.distributed'}), " \
        f"backend {torch.distributed.get_backend()}, device {device.type}, {world_size} " \
        f"rank{'s' if world_size > 1 else ''} " \
        f"on {len(set(hostnames))} host(s), launcher environment: {launch.launcher}"
    if rank == 0:
        emit(sys.stderr, note_rank_0)
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
                one_tensor_all_gather=one_tensor, hostnames=hostnames, accelerator=ds_accelerator)
    if args.output:
        comm.results = _open_results(args, comm, ops or [])
    return comm


def _open_results(args, comm, ops):
    """Rank 0 opens the results file before anything is measured; every rank learns whether
    that worked, so that none goes on to measure alone."""
    import results
    writer, failure = None, None
    if comm.rank == 0:
        try:
            path = results.free_path(args.output, args.overwrite)
            writer = results.open_writer(path, run_meta(args, comm, ops))
            if path != args.output:
                note(comm, f"{args.output} exists; writing {path} (--overwrite replaces it)")
        except results.ResultsError as error:
            failure = str(error)
    if comm.any_rank(failure is not None):
        raise BenchmarkError(failure or "rank 0 cannot write the results file")
    return writer


def run_meta(args, comm, ops):
    """The meta record of a results file: what was run, where, with what."""
    import platform
    versions = {"python": platform.python_version(), "torch": torch.__version__}
    if "deepspeed" in sys.modules:
        versions["deepspeed"] = sys.modules["deepspeed"].__version__
    return {
        "ops": list(ops), "dist": comm.name, "backend": comm.backend, "device": comm.device.type,
        "dtype": args.dtype, "world_size": comm.world_size, "hostnames": comm.hostnames,
        "versions": versions, "trials": args.trials, "warmups": args.warmups,
        "async_op": args.async_op, "scan": args.scan, "maxsize": args.maxsize,
        "mem_factor": args.mem_factor, "bw_unit": args.bw_unit, "check": args.check,
        "time_budget": args.time_budget,
        "stats": args.stats, "command": [sys.executable] + sys.argv,
        "start_time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def finish(comm):
    """End of a run: close the results file; wrong elements found by --check fail the run."""
    if comm.results is not None:
        comm.results.close()
        comm.results = None
    if comm.failures:
        more = f" (and {len(comm.failures) - 1} more)" if len(comm.failures) > 1 else ""
        raise BenchmarkError(f"--check found wrong elements: {comm.failures[0]}{more}")


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
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


# --------------------------------------------------------------------------- collectives

# How a single-size run sizes its message from the memory it may use (SPEC §4).
WHOLE = "whole"  # E = M / es, with twice the memory factor (no output buffer)
GATHERED = "gathered"  # E = 2^floor(log2(M / es / n)); output is n times the input
SPLIT = "split"  # E = n * 2^floor(log2(M / es / n)); divisible by n


@dataclass(frozen=True)
class Collective:
    """What nccl-tests calls a collective's descriptor: all the harness needs to know."""

    name: str
    # bind(comm, input, output, async_op) -> a zero-argument callable that issues the op once
    # and returns its work handle (or None). Bound once per size: the timed loop only calls it.
    bind: Callable
    output_numel: Optional[Callable[[int, int], int]]  # (E, n) -> elements; None: in place
    algbw_factor: Callable[[int], float]  # Throughput = factor(n) * S / t
    busbw_factor: Callable[[int], float]  # BusBW = factor(n) * S / t
    size_rule: str  # WHOLE, GATHERED or SPLIT
    # --check: expected(values, rank, n, E, index) -> the exact result at output positions
    # `index` (an int64 tensor) of this rank, where values(s, j) is rank s's input element j.
    expected: Callable
    reduces: bool = False  # sums over ranks: check values must stay exact when summed
    min_world_size: int = 1
    shown_world_size: Optional[int] = None  # pt2pt's header always says 2 devices
    debug: Optional[Callable] = None  # (comm, input, output) -> str, for --debug
    # n -> the multiple of the input a CPU backend copies it through while the op runs
    # (gloo, measured by benchmarks/memory.py); counted by the single-size memory plan.
    staging: Optional[Callable[[int], float]] = None


def bound(function, *args, async_op=False):
    """`function(*args)` ready to call once per trial. async_op is passed only when true: torch's
    collective wrappers spend about 0.5 us on a keyword argument, which a world of one measures."""
    if async_op:
        return functools.partial(function, *args, async_op=True)
    return functools.partial(function, *args)


def get_bw(collective, size, duration, world_size, bw_unit):
    """(Throughput, BusBW) in bytes/s, or bits/s with Gbps, for `size` bytes per rank."""
    scale = 8 if bw_unit == "Gbps" else 1
    rate = size / duration
    return (collective.algbw_factor(world_size) * rate * scale,
            collective.busbw_factor(world_size) * rate * scale)


# --------------------------------------------------------------------------- sizes

def scan_numels(world_size, maxsize):
    """Per-rank element counts of a scan: n * 2^p for p = 1 .. maxsize - 1."""
    return [world_size * 2 ** p for p in range(1, maxsize)]


def _read_field(path, key):
    """The number after `key` in a /proc or cgroup file (`key N`, or `key: N kB` in bytes);
    None when the file or the key is missing."""
    try:
        with open(path) as file:
            for line in file:
                fields = line.split()
                if len(fields) >= 2 and fields[0].rstrip(":") == key:
                    return int(fields[1]) * (1024 if fields[2:3] == ["kB"] else 1)
    except (OSError, ValueError):
        pass
    return None


def _meminfo_available():
    available = _read_field("/proc/meminfo", "MemAvailable")
    if available is not None:
        return available
    try:
        import psutil
        return psutil.virtual_memory().available
    except ImportError:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def _read_number(path):
    try:
        with open(path) as file:
            text = file.read().split()
    except OSError:
        return None
    return int(text[0]) if text and text[0].isdigit() else None


# (mount, limit file, usage file, reclaimable page-cache key in memory.stat) per cgroup version.
_CGROUP_MEMORY = {
    "v2": ("/sys/fs/cgroup", "memory.max", "memory.current", "inactive_file"),
    "v1": ("/sys/fs/cgroup/memory", "memory.limit_in_bytes", "memory.usage_in_bytes",
           "total_inactive_file"),
}


def cgroup_memory_headroom(proc_cgroup="/proc/self/cgroup"):
    """Bytes this process's memory cgroup still lets it use: limit - working set (usage less
    reclaimable page cache), the tightest over the cgroup and its ancestors; None without a
    limit. Inside a container or a Slurm job with ConstrainRAMSpace, MemAvailable describes
    the whole host and the cgroup is what the OOM killer enforces."""
    try:
        with open(proc_cgroup) as file:
            lines = file.read().splitlines()
    except OSError:
        return None
    headroom = None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            version = "v2"
        elif "memory" in controllers.split(","):
            version = "v1"
        else:
            continue
        mount, limit_file, usage_file, cache_key = _CGROUP_MEMORY[version]
        parts = [part for part in path.split("/") if part]
        for depth in range(len(parts), -1, -1):
            directory = os.path.join(mount, *parts[:depth])
            limit = _read_number(os.path.join(directory, limit_file))
            usage = _read_number(os.path.join(directory, usage_file))
            if limit is None or usage is None or limit >= 1 << 60:  # "max", or v1's no limit
                continue
            cache = _read_field(os.path.join(directory, "memory.stat"), cache_key) or 0
            working_set = usage - cache
            room = max(0, limit - max(working_set, 0))
            headroom = room if headroom is None else min(headroom, room)
    return headroom


def host_available_memory():
    """(bytes, where from): the host's available memory, or less if a cgroup limit binds."""
    available, source = _meminfo_available(), "MemAvailable"
    headroom = cgroup_memory_headroom()
    if headroom is not None and headroom < available:
        available, source = headroom, "cgroup memory limit less usage"
    return available, source


def _device_total_memory(comm):
    if comm.accelerator is not None:
        return comm.accelerator.total_memory(comm.device.index)
    module = torch.get_device_module(comm.device.type)
    return module.get_device_properties(comm.device.index).total_memory


def per_rank_memory(comm):
    """(bytes, where from) one rank may plan on: its device's total memory, or on CPU the host's
    available memory shared by the ranks on this host. The minimum over ranks: all agree."""
    if comm.on_accelerator:
        memory, source = _device_total_memory(comm), "device total"
    else:
        available, source = host_available_memory()
        memory = available // comm.local_world_size
        source = f"{source} / {comm.local_world_size} local rank" + \
            ("s" if comm.local_world_size > 1 else "")
    return comm.min_over_ranks(memory), source


def free_device_memory(comm, memory):
    """Bytes free on this rank's accelerator now (its context and other users excluded), at
    most `memory`; `memory` itself on CPU. Local to this rank."""
    if not comm.on_accelerator:
        return memory
    free = memory
    try:
        if comm.accelerator is not None and hasattr(comm.accelerator, "available_memory"):
            free = comm.accelerator.available_memory(comm.device.index)
        else:
            free = torch.get_device_module(comm.device.type).mem_get_info(comm.device.index)[0]
    except (AttributeError, RuntimeError, TypeError):
        pass
    return min(free, memory)


def rank_memory_now(comm):
    """Bytes this rank can still take now: its share of the host's available memory on CPU,
    its device's free memory on an accelerator. Local to this rank (no collective)."""
    if not comm.on_accelerator:
        return host_available_memory()[0] // comm.local_world_size
    return free_device_memory(comm, _device_total_memory(comm))


def buffer_multiples(collective, numel, comm):
    """[(what, bytes per byte of input)]: every buffer of one size as a multiple of the input."""
    n = comm.world_size
    parts = [("input", 1.0)]
    if collective.output_numel is not None:
        parts.append(("output", collective.output_numel(numel, n) / numel))
    if collective.staging is not None and not comm.on_accelerator:
        parts.append((f"{comm.backend} staging copy", collective.staging(n)))
    return parts


def footprint(collective, numel, element_size, args, comm):
    """(bytes, parts, reserve): what one size takes per rank: its buffers and the backend's
    staging copy (parts: [(what, multiple of the input)]), plus the fixed reserves. The
    multiples do not depend on E, so bytes = E x element size x their sum + reserve."""
    parts = buffer_multiples(collective, max(numel, comm.world_size), comm)
    reserve = constants.BACKEND_MEMORY_RESERVE + (CHECK_RESERVE if args.check else 0)
    multiple = sum(share for _, share in parts)
    return int(numel * element_size * multiple) + reserve, parts, reserve


def _power_of_two_below(x):
    return 2 ** math.floor(math.log2(x)) if x >= 1 else 0


def _round_numel(collective, elements, n):
    """SPEC §4's E from a budget of `elements` (all_gather's budget covers its n-fold output)."""
    if collective.size_rule == WHOLE:
        return int(elements)
    power = _power_of_two_below(elements / n)
    return power * (n if collective.size_rule == SPLIT else 1)


def _fitting_numel(collective, elements, n):
    """The largest E of the op's form (any, a power of two, n x a power of two) <= elements."""
    if collective.size_rule == WHOLE:
        return int(elements)
    if collective.size_rule == GATHERED:
        return _power_of_two_below(elements)
    return n * _power_of_two_below(elements / n)


def plan_single_size(collective, args, comm):
    """(E, plan line) of a single-size run.

    E follows SPEC §4 from the per-rank memory and --mem-factor (the original's rule), and is
    then capped so that everything the op allocates per rank fits in the usable memory: the
    input, the output (all_gather's is n-fold), the copy a CPU backend stages the data
    through (gloo: all_gather's n-fold output, reduce_scatter's input; measured by
    benchmarks/memory.py), the backend's fixed buffers, and the --check working set. The
    usable memory is 90% of the planned-on memory on CPU, 90% of the free memory on a device.
    """
    memory, source = per_rank_memory(comm)
    usable = int(comm.min_over_ranks(free_device_memory(comm, memory))
                 * constants.USABLE_MEMORY_FRACTION)
    element_size = get_dtype(args.dtype).itemsize
    n = comm.world_size
    if collective.size_rule == WHOLE:
        factor = 2 * args.mem_factor  # no output buffer, so twice the share
    elif collective.size_rule == GATHERED and comm.one_tensor_all_gather:
        factor = args.mem_factor + constants.ALL_GATHER_ONE_TENSOR_EXTRA_FACTOR
    else:
        factor = args.mem_factor
    budget = memory * factor
    numel = _round_numel(collective, budget / element_size, n)
    need, parts, reserve = footprint(collective, numel, element_size, args, comm)
    line = (f"{collective.name}: per-rank memory {memory} B ({source}); SPEC rule: {memory} B x "
            f"{factor:g} = {int(budget)} B -> {numel} elements of {element_size} B; buffers "
            f"({' + '.join(f'{what} {share:g}' for what, share in parts)}) x "
            f"{numel * element_size} B + {reserve} B reserve = {need} B, ")
    share = f"{constants.USABLE_MEMORY_FRACTION:.0%}"
    if need > usable:
        multiple = sum(part for _, part in parts)
        numel = _fitting_numel(collective, max(0, usable - reserve) / element_size / multiple, n)
        line += f"over the {usable} B usable ({share}), so capped; "
        if numel < 1:
            raise BenchmarkError(f"{collective.name}: a rank has {usable} B usable ({source}), "
                                 f"less than its smallest message takes ({reserve} B of reserves "
                                 "and buffers); free memory or use fewer ranks per host")
    else:
        line += f"within the {usable} B usable ({share}); "
    if numel < 1:
        raise BenchmarkError(f"{collective.name}: --mem-factor {args.mem_factor} of {memory} B per "
                             f"rank ({source}) leaves no room for one element per rank; raise "
                             "--mem-factor or free memory")
    planned = footprint(collective, numel, element_size, args, comm)[0]
    return numel, line + f"planned: {numel} elements, {planned} B"


# --------------------------------------------------------------------------- timing

class _HostMarks:
    """Host clock readings (CPU ranks)."""

    def __init__(self, count, comm):
        self._t = [0.0] * count

    def mark(self, i):
        self._t[i] = time.perf_counter()

    def between(self, i, j):
        return self._t[j] - self._t[i]


class _EventMarks:
    """Device timing events (accelerators): marks on the stream, read after a sync."""

    def __init__(self, count, comm):
        if comm.accelerator is not None:
            make = functools.partial(comm.accelerator.Event, enable_timing=True)
        else:
            make = functools.partial(torch.Event, device=comm.device, enable_timing=True)
        self._events, self._comm, self._synced = [make() for _ in range(count)], comm, False

    def mark(self, i):
        self._events[i].record()
        self._synced = False

    def between(self, i, j):
        if not self._synced:
            self._comm.synchronize()
            self._synced = True
        return self._events[i].elapsed_time(self._events[j]) / 1e3


def _issue(call, count, async_op):
    """Issue the op `count` times back to back; with async_op, wait on every handle at the end."""
    if async_op:
        works = [call() for _ in range(count)]
        for work in works:
            if work is not None:
                work.wait()
    else:
        for _ in range(count):
            call()


def _issue_marked(call, count, async_op, marks, delay):
    """As _issue, with marks around every trial (--stats): mark 2i-1 before trial i is called,
    mark 2i after it returns. With async_op a trial is its launch; the final waits belong to
    the last trial. `delay` (a test hook) sleeps before each trial, outside the op."""
    works = []
    for i in range(1, count + 1):
        if delay:
            time.sleep(delay)
        marks.mark(2 * i - 1)
        work = call()
        if async_op:
            works.append(work)
        marks.mark(2 * i)
    for work in works:
        if work is not None:
            work.wait()


@dataclass
class Timing:
    mean: float  # seconds of one trial: the timed window / trials (SPEC §5)
    count: int  # trials timed
    trials: Optional[list] = None  # with --stats: seconds of each trial, end to end
    late: float = 0.0  # with --stats: mean seconds between a trial's end and the next call


DELAY_VARIABLE = "COMMBENCH_INJECT_DELAY"


def _injected_delay(comm):
    """Test hook: COMMBENCH_INJECT_DELAY=rank:seconds makes that rank late for every trial."""
    target = os.environ.get(DELAY_VARIABLE, "")
    rank, _, seconds = target.partition(":")
    return float(seconds) if rank == str(comm.rank) else 0.0


MIN_BUDGET_TRIALS = 5


def trial_count(args, comm, pace):
    """--trials, or with --time-budget the count that fills the budget at `pace` seconds a
    trial (at least 5, at most --trials). Rank 0 decides and every rank uses its number: ranks
    that disagreed on a loop count would leave one waiting in a collective forever."""
    if args.time_budget is None:
        return args.trials
    wanted = args.time_budget / pace if pace > 0 else args.trials
    count = torch.tensor([max(MIN_BUDGET_TRIALS, min(args.trials, int(wanted)))],
                         dtype=torch.int64, device=comm.device)
    torch.distributed.broadcast(count, 0)
    return int(count.item())


def _paced_warmups(call, count, async_op, comm):
    """Issue the warmups one at a time, each waited for, and return the median seconds of one:
    the pace --time-budget plans with. A median, because on a shared host one warmup in a few
    meets a descheduled rank and takes 10x the others; a mean would halve the trials."""
    seconds = []
    for _ in range(count):
        started = time.perf_counter()
        work = call()
        if async_op and work is not None:
            work.wait()
        comm.synchronize()
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds)


def time_op(call, args, comm):
    """Time the trials on this rank (trial_count of them), after `args.warmups` untimed ones."""
    comm.sync_all()
    pace = 0.0
    if args.time_budget is not None:  # it needs a pace even without warmups: one call then
        pace = _paced_warmups(call, args.warmups or 1, args.async_op, comm)
    else:
        _issue(call, args.warmups, args.async_op)
    comm.sync_all()
    count = trial_count(args, comm, pace)
    marks = (_EventMarks if comm.on_accelerator else _HostMarks)(2 * count + 1 if args.stats else 2,
                                                                 comm)
    marks.mark(0)
    if args.stats:
        _issue_marked(call, count, args.async_op, marks, _injected_delay(comm))
        marks.mark(2 * count)  # after the waits of async ops
        trials = [marks.between(2 * i - 2, 2 * i) for i in range(1, count + 1)]
        late = sum(marks.between(2 * i - 2, 2 * i - 1) for i in range(1, count + 1)) / count
        return Timing(marks.between(0, 2 * count) / count, count, trials, late)
    _issue(call, count, args.async_op)
    marks.mark(1)
    return Timing(marks.between(0, 1) / count, count)


def percentile(ordered, q):
    """The q-th percentile of an ascending list, interpolated linearly between neighbours."""
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


STATS = ("min_s", "median_s", "p99_s", "max_s", "cv")


def summarize(durations):
    """min, median, p99, max and coefficient of variation of one rank's trial durations."""
    ordered = sorted(durations)
    mean = sum(ordered) / len(ordered)
    spread = math.sqrt(sum((d - mean) ** 2 for d in ordered) / len(ordered))
    figures = (ordered[0], percentile(ordered, 50), percentile(ordered, 99), ordered[-1],
               spread / mean if mean > 0 else 0.0)
    return dict(zip(STATS, figures))


# --------------------------------------------------------------------------- correctness

def exact_integer_limit(dtype):
    """The largest m such that every integer 0..m is exact in `dtype`."""
    if dtype.is_floating_point:
        return int(2 / torch.finfo(dtype).eps)
    return torch.iinfo(dtype).max


@dataclass(frozen=True)
class CheckValues:
    """Rank s's input element j is (7s + j) mod m: small integers, so results are exact in every
    dtype, and neighbouring ranks and elements differ."""

    modulus: int

    def __call__(self, source, index):
        return (source * 7 + index) % self.modulus


def check_values(collective, dtype, world_size):
    limit = exact_integer_limit(dtype)
    top = limit // world_size if collective.reduces else limit
    return CheckValues(max(1, min(101, top + 1)))


CHECK_CHUNK = 1 << 18  # elements compared at a time, to bound the memory of the check
# The check's working set: int64 temporaries of a chunk and the allocator's slack around them
# (at most ~25 MB measured by benchmarks/memory.py at 3 ranks).
CHECK_RESERVE = 64 << 20


def count_wrong(collective, call, input, output, args, comm):
    """Run the op once on known input and count this rank's wrong result elements."""
    values = check_values(collective, input.dtype, comm.world_size)
    numel = input.numel()
    for lo in range(0, numel, CHECK_CHUNK):
        index = torch.arange(lo, min(lo + CHECK_CHUNK, numel), device=comm.device)
        input[lo:lo + len(index)] = values(comm.rank, index).to(input.dtype)
    result = input if output is None else output
    if output is not None:
        sentinel = values.modulus if values.modulus <= exact_integer_limit(output.dtype) else 0
        output.fill_(sentinel)  # a value no rank sends: an element left untouched is wrong
    comm.sync_all()
    work = call()
    if args.async_op and work is not None:
        work.wait()
    comm.synchronize()
    _inject_fault(collective, comm, result)
    wrong = 0
    for lo in range(0, result.numel(), CHECK_CHUNK):
        index = torch.arange(lo, min(lo + CHECK_CHUNK, result.numel()), device=comm.device)
        want = collective.expected(values, comm.rank, comm.world_size, numel, index)
        wrong += int((result[lo:lo + len(index)] != want.to(result.dtype)).sum().item())
    return wrong


FAULT_VARIABLE = "COMMBENCH_INJECT_WRONG"


def _inject_fault(collective, comm, result):
    """Test hook: COMMBENCH_INJECT_WRONG=op:rank alters one result element of that op on that
    rank, so tests can prove that --check catches corruption."""
    target = os.environ.get(FAULT_VARIABLE)
    if target and target == f"{collective.name}:{comm.rank}" and result.numel():
        result[0] += 1


# --------------------------------------------------------------------------- printing

def emit(stream, line):
    """One line in one write, so that lines of several ranks sharing a pipe never interleave."""
    stream.write(line + "\n")
    stream.flush()


def print_rank_0(comm, message):
    if comm.rank == 0:
        emit(sys.stdout, message)


def note(comm, message):
    """A diagnostic on stderr, from rank 0."""
    if comm.rank == 0:
        emit(sys.stderr, f"{PROG}: {message}")


def convert_size(size_bytes):
    """1024-based human size as the original prints it: 8.0 B, 32.0 KB, 1.5 MB."""
    if size_bytes == 0:
        return "0B"
    names = ("B", "KB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB")
    index = 0
    while size_bytes >= 1024 ** (index + 1) and index < len(names) - 1:
        index += 1
    return f"{round(size_bytes / 1024 ** index, 2)} {names[index]}"


def get_metric_strings(args, tput, busbw, duration):
    duration_us = duration * 1e6
    if args.raw:
        duration_text = f"{duration_us:.3f}"
    elif duration_us < 1e3:
        duration_text = f"{duration_us:.3f} us"
    else:
        duration_text = f"{duration * 1e3:.3f} ms"
    return f"{tput / 1e9:.3f}", f"{busbw / 1e9:.3f}", duration_text


def _extra_columns(args):
    """(title, width) of the columns after BusBW: --time-budget's trial count, --stats
    figures, then --check's Wrong."""
    unit = " (us)" if args.raw else ""
    columns = [("Trials", 10)] if args.time_budget else []
    if args.stats:
        columns += [(f"Median{unit}", 20), (f"P99{unit}", 20), ("Slowest", 10)]
    if args.check:
        columns.append(("Wrong", 10))
    return columns


def print_header(args, op_name, world_size, comm):
    duration = "Duration (us)" if args.raw else "Duration"
    tput, busbw = f"Throughput ({args.bw_unit})", f"BusBW ({args.bw_unit})"
    extra = "".join(f" {title:{width}s}" for title, width in _extra_columns(args))
    print_rank_0(comm, f"\n---- Performance of {op_name} on {world_size} devices "
                       + "-" * 57 + "\n"
                       f"{'Size (Bytes)':20s} {'Description':25s} {duration:20s} {tput:20s} "
                       f"{busbw:20s}{extra}\n" + "-" * 100)


def print_row(args, comm, size, description, duration, tput, busbw, extra=()):
    """One row; `extra` holds the texts of the columns after BusBW, in _extra_columns order."""
    tput_text, busbw_text, duration_text = get_metric_strings(args, tput, busbw, duration)
    size_text = str(size) if args.raw else convert_size(size)
    tail = "".join(f" {text:{width}s}" for text, (_, width) in zip(extra, _extra_columns(args)))
    print_rank_0(comm, f"{size_text:<20} {description:25s} {duration_text:20s} "
                       f"{tput_text:20s} {busbw_text:20s}{tail}")


def duration_text(args, seconds):
    return get_metric_strings(args, 0, 0, seconds)[2]


# --------------------------------------------------------------------------- running an op

def _is_out_of_memory(error):
    text = str(error).lower()
    return isinstance(error, torch.OutOfMemoryError) or "out of memory" in text \
        or "can't allocate memory" in text


class MemoryMeter:
    """The most memory one message size takes on this rank, above what the rank held before
    its buffers were allocated: resident memory (VmHWM - VmRSS, the high-water mark reset
    first) on CPU, torch's allocator peak on an accelerator. None where neither is readable."""

    def __init__(self, comm):
        self._device = comm.device if comm.on_accelerator else None
        self._before = None
        try:
            if self._device is None:
                with open("/proc/self/clear_refs", "w") as clear:
                    clear.write("5")  # resets this process's peak resident set size
                self._before = self._status("VmRSS")
            else:
                module = torch.get_device_module(self._device.type)
                module.reset_peak_memory_stats(self._device)
                self._before = module.memory_allocated(self._device)
        except (OSError, AttributeError, RuntimeError, TypeError):
            self._before = None

    @staticmethod
    def _status(key):
        value = _read_field("/proc/self/status", key)
        if value is None:
            raise OSError(f"no {key} in /proc/self/status")
        return value

    def peak(self):
        if self._before is None:
            return None
        try:
            if self._device is None:
                return max(0, self._status("VmHWM") - self._before)
            module = torch.get_device_module(self._device.type)
            return max(0, module.max_memory_allocated(self._device) - self._before)
        except (OSError, AttributeError, RuntimeError, TypeError):
            return None


def allocate(collective, numel, args, comm):
    """(input, output) for one size, or None on every rank when any rank lacks the memory.

    Before allocating, each rank compares what the size takes (footprint: buffers, the
    backend's staging copy, reserves) with the memory it has now: on CPU an allocation that
    succeeds can still end in the OOM killer once its pages are touched, so a scan stops
    before that, as it stops when an allocation fails. The input is an n x (E/n) tensor filled
    with the rank id, flattened (as the original).
    """
    dtype = get_dtype(args.dtype)
    need = footprint(collective, numel, dtype.itemsize, args, comm)[0]
    room, buffers = rank_memory_now(comm), None
    if need <= room:
        try:
            rows = comm.world_size if numel % comm.world_size == 0 else 1
            input = torch.ones(rows, numel // rows, dtype=dtype, device=comm.device)
            input = input.mul_(comm.rank).view(-1)
            output = None
            if collective.output_numel is not None:
                output = torch.zeros(collective.output_numel(numel, comm.world_size),
                                     dtype=dtype, device=comm.device)
            buffers = (input, output)
        except (RuntimeError, MemoryError) as error:
            if not isinstance(error, MemoryError) and not _is_out_of_memory(error):
                raise
            room = -1
    room = comm.min_over_ranks(room)  # one agreement: every rank goes on, or none does
    if room < 0:
        note(comm, f"WARNING: {collective.name}: out of memory at {numel} elements of {args.dtype} "
                   "per rank; stopping this op here (lower --mem-factor or --maxsize)")
        return None
    if room < need:
        note(comm, f"WARNING: {collective.name}: {numel} elements of {args.dtype} per rank take "
                   f"{need} B with the backend's copies, more than the {room} B a rank has "
                   "free; stopping this op here (lower --mem-factor or --maxsize)")
        return None
    return buffers


def timed_collective(collective, input, output, args, comm, meter=None):
    """Time one message size, check it with --check, print its row and record it.

    meter: the MemoryMeter started before the buffers were allocated, for the record's
    memory figure. Returns the record written to the results file (bytes, seconds, bytes/s).
    """
    call = collective.bind(comm, input, output, args.async_op)
    timing = time_op(call, args, comm)
    wrong = None
    if args.check:
        wrong = comm.sum_over_ranks(count_wrong(collective, call, input, output, args, comm))
    used = meter.peak() if meter is not None else None
    mine = [timing.mean, timing.count, -1 if used is None else used]
    if args.stats:
        mine += [summarize(timing.trials)[k] for k in STATS] + [timing.late]
    per_rank = comm.gather_figures(mine)

    n, size, numel = comm.world_size, input.element_size() * input.nelement(), input.nelement()
    tput, busbw = get_bw(collective, size, timing.mean, n, "GBps")
    record = {"op": collective.name, "world_size": n, "size_bytes": size, "numel": numel,
              "element_size": input.element_size(), "trials": timing.count,
              "trials_per_rank": [int(figures[1]) for figures in per_rank],
              "duration_s": timing.mean, "throughput_Bps": tput, "busbw_Bps": busbw,
              "durations_per_rank_s": [figures[0] for figures in per_rank], "wrong": wrong,
              "memory_used_per_rank_bytes": [None if figures[2] < 0 else int(figures[2])
                                             for figures in per_rank]}
    extra = [str(timing.count)] if args.time_budget else []
    if args.stats:
        record["stats"] = dict(zip(STATS, per_rank[0][3:]))
        record["stats_per_rank"] = [dict(zip(STATS + ("late_s",), figures[3:]))
                                    for figures in per_rank]
        # The straggler is the rank the others wait for: in a collective every rank's trials
        # end together, so the one that is slowest is the one that comes latest to each call.
        slowest = max(range(n), key=lambda r: per_rank[r][-1])
        record["slowest_rank"] = slowest
        extra = [duration_text(args, record["stats"]["median_s"]),
                 duration_text(args, record["stats"]["p99_s"]), str(slowest)]
    if args.check:
        extra.append(str(wrong))
        if wrong:
            comm.failures.append(f"{collective.name} at {size} bytes per rank: {wrong} wrong "
                                 f"element{'s' if wrong > 1 else ''}")
    scale = 8 if args.bw_unit == "Gbps" else 1
    print_row(args, comm, size, f"{numel}x{input.element_size()}", timing.mean, tput * scale,
              busbw * scale, extra)
    if comm.results is not None:
        with RESULTS_LOCK:
            comm.results.add(record)
    if args.debug and collective.debug is not None:
        emit(sys.stderr, f"{PROG}: [rank {comm.rank}] {collective.debug(comm, input, output)}")
    return record


def _progress(comm, op_name, total):
    """A progress bar over the sizes of an op, on rank 0 when stderr is a terminal; else None."""
    if comm.rank != 0 or total < 2 or not sys.stderr.isatty():
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc=op_name, unit="size", leave=False, file=sys.stderr)


def run_collective(collective, args, comm):
    """The header, then one row per message size: a scan, or the largest size that fits."""
    if comm.world_size < collective.min_world_size:
        raise BenchmarkError(f"{collective.name} needs at least {collective.min_world_size} ranks, "
                             f"this world has {comm.world_size}; launch it with e.g. "
                             f"torchrun --nproc_per_node {collective.min_world_size}")
    if args.scan:
        numels = scan_numels(comm.world_size, args.maxsize)
    else:
        numel, plan = plan_single_size(collective, args, comm)
        note(comm, plan)
        numels = [numel]
    print_header(args, collective.name, collective.shown_world_size or comm.world_size, comm)
    records, bar = [], _progress(comm, collective.name, len(numels))
    for numel in numels:
        where = f"rank {comm.rank}: {collective.name} at {numel} elements of {args.dtype} per rank"
        with deadline(args.timeout, f"{where} did not finish within {args.timeout:g} s; a peer "
                                    "rank likely died or is stuck (see its log)"):
            try:
                meter = MemoryMeter(comm)
                buffers = allocate(collective, numel, args, comm)
                if buffers is None:
                    break
                if bar is not None:
                    bar.clear()  # the row goes where the bar was; the bar is redrawn below it
                records.append(timed_collective(collective, *buffers, args, comm, meter=meter))
            except RuntimeError as error:  # DistError is a RuntimeError: a peer failed, mostly
                reason = str(error).strip().splitlines()[0][:300] if str(error).strip() else \
                    type(error).__name__
                raise BenchmarkError(f"{where} failed: {reason}", rank_local=True) from None
            del buffers
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    return records


def run_op(collective, local_rank, args, comm=None):
    """What `run_<op>(local_rank, args)` does: run one op in the given Comm, or in one of its
    own (then the run ends here: results closed, --check failures raised)."""
    if comm is not None:
        return run_collective(collective, args, comm)
    comm = init_processes(local_rank, args, ops=[collective.name])
    records = run_collective(collective, args, comm)
    finish(comm)
    return records


# --------------------------------------------------------------------------- entry point

STOP_SIGNALS = {signal.SIGINT: 130, signal.SIGTERM: 143}
# Held while a record is written: a stop waits for it, so no file is left half-written.
RESULTS_LOCK = threading.Lock()


def guard_stop_signals():
    """SIGINT and SIGTERM stop the run at once, even while the main thread is blocked inside a
    collective (where Python runs no handler): the signal's number reaches a watcher thread
    through Python's wakeup fd; it finishes any record being written, says so, and exits 130
    or 143. Every size measured before is already on disk."""
    global _STOP_SOCKETS
    _STOP_SOCKETS = reader, writer = socket.socketpair()
    writer.setblocking(False)
    signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    for number in STOP_SIGNALS:
        signal.signal(number, lambda *_: None)  # the watcher acts; the main thread need not

    def wait_for_stop():
        while True:
            number = reader.recv(1)[0]
            if number in STOP_SIGNALS:
                break
        RESULTS_LOCK.acquire(timeout=5)
        if _rank_for_messages() == 0:
            emit(sys.stderr, f"{PROG}: stopped by {signal.Signals(number).name}; the sizes "
                             "measured so far are in the table and the results file")
        os._exit(STOP_SIGNALS[number])
    threading.Thread(target=wait_for_stop, name="commbench-stop", daemon=True).start()


def _rank_for_messages(exact=False):
    try:
        return discover_launch_env().rank
    except BenchmarkError:
        return "?" if exact else 0


PEER_FAILURES = ("Connection closed by peer", "Connection reset by peer", "Broken pipe",
                 "timed out", "Timed out")


def _peer_failure(error):
    """A collective failed because another rank went away or went silent."""
    dist_error = getattr(torch.distributed, "DistError", ())
    return isinstance(error, dist_error) or any(text in str(error) for text in PEER_FAILURES)


def cli(run, argv=None):
    """Parse the command line, call `run(local_rank, args)`, and turn expected failures into one
    line on stderr (from rank 0 when every rank fails alike) and an exit status."""
    status = 0
    guard_stop_signals()
    try:
        args = benchmark_parser().parse_args(argv)
        run(args.local_rank, args)
    except RuntimeError as error:
        if not _peer_failure(error):
            raise  # unexpected: keep the traceback
        status = 1
        first = str(error).strip().splitlines()[0][:300] if str(error).strip() else ""
        emit(sys.stderr, f"{PROG}: error: rank {_rank_for_messages(True)}: lost its peers between "
                         f"measurements: {first}")
    except BenchmarkError as error:
        status = error.exit_code
        if error.rank_local or _rank_for_messages() == 0:
            emit(sys.stderr, f"{PROG}: error: {error}")
        else:
            # Every rank failed alike and rank 0 says why; launchers kill the whole job when the
            # first rank exits, so the others give rank 0 a moment to be heard.
            time.sleep(1)
    finally:
        teardown()
    sys.exit(status)
