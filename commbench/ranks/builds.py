"""DeepSpeed's CPU communication ops, which torch JIT-builds on first use: their build locks,
and a first run that says it is building.

torch.utils.cpp_extension guards each op's build directory with a `lock` file: the process that
creates it (O_EXCL) builds or loads the op, holding the file open until it is done, then removes
it; every other process waits for as long as the file exists. A build killed outright (Ctrl-C
during the silent first minute, a scheduler's SIGKILL) leaves the file behind, and every later
`--dist deepspeed` run on that directory then waits forever. Before the layer starts, the suite
looks at the locks of the ops DeepSpeed will load: one that no live process holds (no process
has it open or works in its directory, as the process table shows) is removed, with one note;
one that a live build holds is waited for, with one note, and the wait counts against --timeout,
whose message then names the lock."""

import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass

from ..errors import PROG, BenchmarkError

# The ops DeepSpeed 0.19's CPU accelerator builds when its layer starts, per backend: its shm
# all-reduce op always (TorchBackend), its oneCCL op too on ccl (CCLBackend).
OPS = {"gloo": ("deepspeed_shm_comm",), "ccl": ("deepspeed_ccl_comm", "deepspeed_shm_comm")}
# File systems on which another host's build may hold a lock that this host's process table
# cannot show.
NETWORK_FILE_SYSTEMS = {"nfs", "nfs4", "lustre", "gpfs", "beegfs", "cifs", "smb3", "fuse.sshfs",
                        "ceph", "glusterfs", "panfs", "wekafs"}
# On those, a lock whose directory has not changed for this long is taken as stale.
NETWORK_STALE_SECONDS = 600


def _say(line):
    print(f"{PROG}: {line}", file=sys.stderr, flush=True)


def build_directory(name):
    """Where torch builds extension `name` (TORCH_EXTENSIONS_DIR, or torch's default root)."""
    root = os.environ.get("TORCH_EXTENSIONS_DIR")
    if root is None:
        import torch
        from torch.utils.cpp_extension import get_default_build_root
        accelerator = f"cu{torch.version.cuda.replace('.', '')}" if torch.version.cuda else "cpu"
        python = sys.version_info
        version = f"py{python.major}{python.minor}{getattr(sys, 'abiflags', '')}"
        root = os.path.join(get_default_build_root(), f"{version}_{accelerator}")
    return os.path.join(root, name)


@dataclass
class Holder:
    pid: int
    command: str
    how: str  # "has the lock open" or "works in the build directory"


def _command(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            words = file.read().split(b"\0")
        return " ".join(w.decode(errors="replace") for w in words if w)[:120] or "?"
    except OSError:
        return "?"


def holders(directory):
    """Live processes that hold the build at `directory`: with its lock open (the process that
    builds or loads the op) or working in it (ninja and the compilers it starts)."""
    lock = os.path.realpath(os.path.join(directory, "lock"))
    real = os.path.realpath(directory)
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        pid = int(entry.name)
        try:
            if os.readlink(f"/proc/{pid}/cwd") == real:
                found.append(Holder(pid, _command(pid), "works in the build directory"))
                continue
            for fd in os.scandir(f"/proc/{pid}/fd"):
                if os.readlink(fd.path) == lock:
                    found.append(Holder(pid, _command(pid), "has the lock open"))
                    break
        except OSError:  # gone meanwhile, or another user's
            continue
    return found


def _file_system(path):
    """The type of the file system `path` is on, from /proc/mounts (longest mount point)."""
    best, kind = "", ""
    try:
        with open("/proc/mounts") as mounts:
            for line in mounts:
                fields = line.split()
                if len(fields) >= 3 and (path == fields[1] or
                                         path.startswith(fields[1].rstrip("/") + "/")) \
                        and len(fields[1]) > len(best):
                    best, kind = fields[1], fields[2]
    except OSError:
        pass
    return kind


def _last_change(directory):
    try:
        return max(entry.stat().st_mtime for entry in os.scandir(directory))
    except (OSError, ValueError):
        return 0.0


def _when(seconds):
    return time.strftime("%H:%M:%S", time.localtime(seconds))


def stale(directory):
    """Whether the lock in `directory` is left by a build that is gone: no live process holds
    it, seen twice 0.2 s apart on the same file (a lock is briefly without its holder while
    torch releases it); on a network file system, also unchanged for NETWORK_STALE_SECONDS
    (another host's build is not in this host's process table)."""
    lock = os.path.join(directory, "lock")
    try:
        first = os.stat(lock)
    except FileNotFoundError:
        return False
    if holders(directory):
        return False
    time.sleep(0.2)
    try:
        second = os.stat(lock)
    except FileNotFoundError:
        return False
    if (first.st_ino, first.st_mtime_ns) != (second.st_ino, second.st_mtime_ns) or \
            holders(directory):
        return False
    if _file_system(os.path.realpath(directory)) in NETWORK_FILE_SYSTEMS:
        return time.time() - _last_change(directory) > NETWORK_STALE_SECONDS
    return True


def built(directory, name):
    """Whether torch will load op `name` without building it: its library there, its build file
    written for this venv (ninja rebuilds everything for another's), and ninja, asked for a dry
    run in the build directory, with no work to do (a build a rank's deadline interrupted leaves
    the library but not what ninja needs, and ninja rebuilds the objects: minutes on a loaded
    host)."""
    if not os.path.exists(os.path.join(directory, f"{name}.so")):
        return False
    if built_elsewhere(directory):
        return False
    ninja = shutil.which("ninja")
    if ninja is None or not os.path.exists(os.path.join(directory, "build.ninja")):
        return True  # torch loads a library it cannot rebuild
    try:
        dry = subprocess.run([ninja, "-C", directory, "-n"], capture_output=True, text=True,
                             timeout=10)
    except (OSError, subprocess.SubprocessError):
        return True
    return dry.returncode != 0 or "no work to do" in dry.stdout


def _this_venvs_paths():
    """The paths torch writes into an op's build file here: Python's headers, torch's, and
    DeepSpeed's sources (as torch and DeepSpeed spell them: absolute, links kept). Found
    without importing either."""
    import importlib.util
    import sysconfig
    paths = [sysconfig.get_paths()["include"]]
    for package, inside in (("torch", "include"), ("deepspeed", "ops")):
        spec = importlib.util.find_spec(package)
        if spec is not None and spec.origin:
            paths.append(os.path.join(os.path.dirname(os.path.abspath(spec.origin)), inside))
    return paths


def built_elsewhere(directory):
    """Where the build in `directory` was made, when not for this venv (another venv's torch,
    DeepSpeed or Python: torch then writes a new build file and ninja rebuilds the op, about a
    minute); None for a build of this venv's or none at all."""
    try:
        with open(os.path.join(directory, "build.ninja"), encoding="utf-8") as file:
            text = file.read()
    except (OSError, UnicodeDecodeError):
        return None
    found = re.search(r"-isystem (\S+)/torch/include\s", text)
    if found is None or all(path in text for path in _this_venvs_paths()):
        return None  # not torch's build file, or this venv's
    where = found.group(1)
    prefix = re.match(r"(.+)/lib/python[^/]+/site-packages$", where)
    return prefix.group(1) if prefix else where


def prepare(backend, timeout, local_rank, rank):
    """Before DeepSpeed's layer starts on CPU: stale locks removed (by local rank 0, with a
    note), live builds waited for (every local rank, until `timeout`: then one line naming the
    lock), and a note when an op is about to be built. Returns (seconds waited, the ops to be
    built, when preparing ended) for finish()."""
    started = time.monotonic()
    building = []
    for name in OPS.get(backend, ()):
        directory = build_directory(name)
        lock = os.path.join(directory, "lock")
        told = False
        while os.path.exists(lock):
            found = holders(directory)
            if not found and local_rank == 0 and stale(directory):
                # the other local ranks wait until it is gone (torch would wait forever)
                try:
                    os.unlink(lock)
                    _say(f"removed {lock}: a build lock no process holds (a build of "
                         f"DeepSpeed's {name} op was killed); the op is built or loaded afresh")
                except FileNotFoundError:
                    pass
                break
            waited = time.monotonic() - started
            if waited >= timeout:
                who = f"held by PID {found[0].pid} ({found[0].command})" if found else \
                    "held by no process of this host"
                raise BenchmarkError(f"DeepSpeed's build of {name} did not finish within "
                                     f"{timeout:g} s: {lock} is {who}; wait for that build, or "
                                     "if it is no longer running remove the lock and start again")
            if not told and local_rank == 0:
                try:
                    since = _when(os.stat(lock).st_mtime)
                except FileNotFoundError:
                    continue  # released meanwhile
                who = f"held by PID {found[0].pid} ({found[0].command}), which " \
                      f"{found[0].how}" if found else "held by a process this host cannot see"
                _say(f"waiting for DeepSpeed's build of {name}: {lock} is {who}, since {since}; "
                     f"this counts against --timeout {timeout:g}")
                told = True
            time.sleep(0.5)
        if not built(directory, name):
            building.append(name)
    if building and rank == 0:
        ops = f"{' and '.join(building)} op{'s' if len(building) > 1 else ''}"
        root = os.path.dirname(build_directory(building[0]))
        elsewhere = built_elsewhere(build_directory(building[0]))
        if elsewhere:
            _say(f"building DeepSpeed's {ops} again ({root} holds a build made by another venv, "
                 f"{elsewhere}, which torch rebuilds for this one: about a minute on 2 cores, "
                 "before the process group starts)")
        else:
            _say(f"building DeepSpeed's {ops} (once per venv, into {root}: about a minute on 2 "
                 "cores, before the process group starts)")
    return time.monotonic() - started, building, time.time()


def finish(building, since, rank):
    """After the layer started: how long the first build took, from the op's library."""
    if rank != 0:
        return
    built = []
    for name in building:
        try:
            built.append((os.stat(os.path.join(build_directory(name), f"{name}.so")).st_mtime,
                          name))
        except OSError:
            continue
    for when, name in sorted(built):  # in the order they were built, each from the last
        if when < since - 1:  # its library is older than the start: ninja found it current
            _say(f"DeepSpeed's {name} op needed no build after all: loaded as it was")
            continue
        _say(f"built DeepSpeed's {name} op in {max(0.0, when - since):.0f} s; later runs of "
             "this venv load it")
        since = when
