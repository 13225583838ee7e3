"""Shared memory a rank would leave behind in /dev/shm (which is memory until reboot), released
by the rank itself.

- DeepSpeed's CPU ops (its shm op on gloo, its oneCCL op on ccl) create a ~66 MB all-reduce
  buffer per rank when every rank is on one host, named by MASTER_ADDR and MASTER_PORT, and
  never remove it: each run on a new port would leave world-size files behind. Each rank maps
  every peer's buffer while DeepSpeed starts, before it answers a first collective; after one,
  the names are no longer needed, and unlinking them leaves the mappings valid (the memory goes
  with the last rank, however it ends).
- oneCCL's shared-memory transport (libfabric's shm provider, CCL_ATL_SHM=1) names a 64 MiB
  endpoint /dev/shm/PID:N:N and removes it only when the transport is closed, which no one does
  when a rank ends otherwise: on DeepSpeed's layer (whose teardown must skip destroy), or at a
  deadline or a stop signal (os._exit). A rank whose ops are over unlinks its own.
"""

import contextlib
import glob
import os
import re
import sys

from .. import units

_ccl_endpoints = False
_CCL_ENDPOINT = re.compile(r"(\d+):\d+:\d+")
DEEPSPEED_BUFFER = "deepspeed_allreduce_buffer_"


def unlink_deepspeed_buffer(rank):
    """Unlink this rank's DeepSpeed all-reduce buffer; call after a first collective."""
    name = (f"/dev/shm/deepspeed_allreduce_buffer_{os.getuid()}_"
            f"{os.environ.get('MASTER_ADDR', '')}_{os.environ.get('MASTER_PORT', '')}_{rank}")
    with contextlib.suppress(OSError):
        os.unlink(name)


def expect_ccl_endpoints():
    """This process runs oneCCL: release_ccl_endpoints() has files to look for."""
    global _ccl_endpoints
    _ccl_endpoints = True


def release_ccl_endpoints():
    """Unlink this process's oneCCL shared-memory endpoints, once its ops are over."""
    if not _ccl_endpoints:
        return
    for path in glob.glob(f"/dev/shm/{os.getpid()}:*"):
        with contextlib.suppress(OSError):
            os.unlink(path)


def _in_use():
    """Every /dev/shm file some live process has open or mapped (its fds and maps), as far as
    this user may read the process table (a user's own files are all this user can remove)."""
    used = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for fd in os.scandir(f"/proc/{entry.name}/fd"):
                with contextlib.suppress(OSError):
                    target = os.readlink(fd.path)
                    if target.startswith("/dev/shm/"):
                        used.add(target.removesuffix(" (deleted)"))
        with contextlib.suppress(OSError):
            with open(f"/proc/{entry.name}/maps") as maps:
                for line in maps:
                    where = line.find("/dev/shm/")
                    if where >= 0:
                        used.add(line[where:].strip().removesuffix(" (deleted)"))
    return used


def leftovers():
    """This user's files in /dev/shm that ranks left when they were killed outright: oneCCL
    endpoints (PID:N:N) whose process is gone, and DeepSpeed's all-reduce buffers that no live
    process has open or mapped (a live run's ranks keep theirs mapped until they end).
    Never another live run's."""
    found, uid = [], os.getuid()
    candidates = []
    with contextlib.suppress(OSError):
        for entry in os.scandir("/dev/shm"):
            with contextlib.suppress(OSError):
                if entry.is_file(follow_symlinks=False) and entry.stat().st_uid == uid:
                    candidates.append(entry)
    buffers = [e for e in candidates if e.name.startswith(DEEPSPEED_BUFFER)]
    used = _in_use() if buffers else set()
    for entry in candidates:
        endpoint = _CCL_ENDPOINT.fullmatch(entry.name)
        if endpoint and not os.path.exists(f"/proc/{endpoint.group(1)}"):
            found.append(entry)
        elif entry in buffers and entry.path not in used:
            found.append(entry)
    return found


def remove_leftovers():
    """Remove leftovers(), with one note on stderr naming them (one rank per host calls this
    before its run adds files of its own). Returns the names removed."""
    names, size = [], 0
    for entry in sorted(leftovers(), key=lambda e: e.name):
        with contextlib.suppress(OSError):
            bytes_ = entry.stat().st_size
            os.unlink(entry.path)
            names.append(entry.name)
            size += bytes_
    if names:
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        print(f"commbench: removed {len(names)} file{'s' if len(names) > 1 else ''} "
              f"({units.size(size)}) from /dev/shm that ranks killed in earlier runs left "
              f"behind (their processes are gone): {shown}", file=sys.stderr, flush=True)
    return names
