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

_ccl_endpoints = False


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
