"""Where this rank stands, from its launcher: rank, local rank and world size from the
environment of torchrun/deepspeed, Open MPI, MPICH/Intel MPI, MVAPICH or Slurm (SPEC §7),
Slurm's node lists, and the MASTER_ADDR and MASTER_PORT every rank meets at."""

import os
import re
import socket
import sys
from dataclasses import dataclass

from .. import defaults
from ..errors import BenchmarkError, UsageError

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
        raise UsageError(f"launcher environment: {name}={environ[name]!r} is not an "
                         "integer") from None
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
    """This host's address as other hosts reach it, from the standard library alone: its host
    name's address, unless that is a loopback one (Debian and Ubuntu map the host name to
    127.0.1.1 in /etc/hosts), then the first address of an interface that is up."""
    host = socket.getfqdn()
    try:
        infos = socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)
    except socket.gaierror:
        infos = []
    addresses = [info[4][0] for info in infos]
    routable = [a for a in addresses if not a.startswith("127.")]
    return (routable or _interface_addresses() or addresses or ["127.0.0.1"])[0]


def _interface_addresses():
    """The IPv4 addresses of this host's interfaces other than loopback, in interface order
    (Linux: SIOCGIFADDR on each interface; elsewhere none)."""
    try:
        import fcntl
        import struct
        names = [name for _, name in socket.if_nameindex()]
    except (ImportError, OSError):
        return []
    found = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for name in names:
            try:
                answer = fcntl.ioctl(probe.fileno(), 0x8915,  # SIOCGIFADDR
                                     struct.pack("256s", name.encode()[:15]))
            except OSError:  # no IPv4 address on it
                continue
            address = socket.inet_ntoa(answer[20:24])
            if not address.startswith("127."):
                found.append(address)
    return found


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
    return _rank0_address_by_mpi(launch)


# Open MPI's library by the name it has had since 3.0; where mpirun --prefix or a module put it
# on LD_LIBRARY_PATH, or in the system's library folders, the dynamic loader finds it by name.
OPEN_MPI_LIBRARY = "libmpi.so.40"


def _open_mpi_library():
    """Open MPI's libmpi, as mpi4py's MPI4PY_LIBMPI wants it, when it loads here; else None."""
    import ctypes
    candidates = [os.path.join(os.environ["OPAL_PREFIX"], "lib", OPEN_MPI_LIBRARY)] \
        if os.environ.get("OPAL_PREFIX") else []
    candidates += [os.path.join(sys.prefix, "lib", OPEN_MPI_LIBRARY), OPEN_MPI_LIBRARY]
    for candidate in candidates:
        try:
            library = ctypes.CDLL(candidate)
        except OSError:
            continue
        if hasattr(library, "ompi_mpi_comm_self"):  # Open MPI's, not another libmpi.so.40
            return candidate
    return None


def _rank0_address_by_mpi(launch):
    """Rank 0's address, gathered with mpi4py from the MPI library of the launcher (SPEC §7).

    mpi4py's wheels carry builds for MPICH and Open MPI and load the first libmpi they find,
    the venv's (the `mpich` package's) before the system's: in ranks started by Open MPI that
    MPICH would refuse Open MPI's PMIx and abort, or run as a world of one and give every rank
    its own address. So under Open MPI mpi4py is pointed at Open MPI's library (unless the
    user chose one: MPI4PY_LIBMPI, MPI4PY_MPIABI). A library that is not the launcher's (before
    MPI starts), or a world of another size than the launcher's, is one line naming
    MASTER_ADDR, alike on every rank: each ends, none waits for a master of its own."""
    advice = "export MASTER_ADDR=<address of rank 0>"
    if launch.launcher == "Open MPI" and not (os.environ.get("MPI4PY_LIBMPI")
                                              or os.environ.get("MPI4PY_MPIABI")):
        library = _open_mpi_library()
        if library:
            os.environ["MPI4PY_LIBMPI"] = library
    try:
        import mpi4py
        if "mpi4py.MPI" not in sys.modules:
            mpi4py.rc.initialize = False  # started below, once its library is known to fit
            mpi4py.rc.finalize = False
        from mpi4py import MPI
    except ImportError:
        raise BenchmarkError("ranks span several hosts and MASTER_ADDR is not set: install mpi4py "
                             f"(pip install mpi4py) or {advice}") from None
    except RuntimeError as error:  # mpi4py found no MPI library it can load
        raise BenchmarkError(f"ranks span several hosts and MASTER_ADDR is not set, and mpi4py "
                             f"cannot load an MPI library ({str(error).splitlines()[0]}): "
                             f"{advice}") from None
    # its first words: 'MPICH Version: 5.0.2', 'Open MPI v4.1.4'
    version = " ".join(MPI.Get_library_version().replace("\0", "").split("\n")[0].split(",")[0]
                       .split())
    is_open_mpi = "Open MPI" in version
    if (launch.launcher == "Open MPI") != is_open_mpi and launch.launcher != "Slurm":
        raise BenchmarkError(f"ranks span several hosts and MASTER_ADDR is not set, but mpi4py "
                             f"uses {version!r}, not the MPI of the launcher ({launch.launcher}): "
                             f"{advice}, or point mpi4py at the launcher's libmpi "
                             "(MPI4PY_LIBMPI=/path/to/libmpi.so)")
    started = not MPI.Is_initialized()
    if started:
        MPI.Init()
    try:
        world = MPI.COMM_WORLD
        if world.Get_size() != launch.world_size:
            raise BenchmarkError(f"ranks span several hosts and MASTER_ADDR is not set, but "
                                 f"mpi4py ({version}) sees {world.Get_size()} rank(s) where the "
                                 f"launcher ({launch.launcher}) started {launch.world_size}: "
                                 f"{advice}")
        # the launcher's rank 0, whichever MPI rank it is
        pairs = world.allgather((launch.rank, _own_address() if launch.rank == 0 else None))
    finally:
        if started:
            MPI.Finalize()  # MPI's part ends here; what follows is torch's
    return next(address for rank, address in pairs if rank == 0)


def master_port(environ):
    text = environ.get("MASTER_PORT") or str(defaults.TORCH_DISTRIBUTED_DEFAULT_PORT)
    try:
        port = int(text)
    except ValueError:
        raise UsageError(f"MASTER_PORT={text!r} is not a port number") from None
    if not 1 <= port <= 65535:
        raise UsageError(f"MASTER_PORT={port} is not a port number (1-65535)")
    return port
