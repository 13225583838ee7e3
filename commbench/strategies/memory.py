"""parallel_bench.py's memory: glibc's malloc settled (or not) before the strategies, each
window's peak (resident high-water mark on CPU, the allocator's on an accelerator), and what a
strategy freed given back before the next."""

import ctypes
import ctypes.util
import gc
import os

import torch

from ..errors import UsageError
from ..bench.memory import read_field


# ------------------------------------------------------------------------------ glibc malloc

_M_MMAP_THRESHOLD = -3


def settle_malloc(args):
    """glibc raises its mmap threshold as large blocks are freed, after which freed blocks stay
    in a fragmented heap: ZeRO-3's resident memory grows step after step (here about 90 MiB
    over 12 steps of the default model). A fixed threshold (MALLOC_MMAP_THRESHOLD_, read at
    process start, or --malloc-mmap-threshold, set here through mallopt) keeps large blocks in
    mmap and returns them when freed, but every such allocation then faults its pages in
    again: steps were 10% (ddp) to 60% (zero3) slower here. So the default is glibc's own
    behaviour, what a training job gets; the record says which. Returns what it says."""
    from_env = os.environ.get("MALLOC_MMAP_THRESHOLD_")
    if args.malloc_mmap_threshold is None:
        if from_env is not None:
            return {"bytes": int(from_env) if from_env.isdigit() else from_env,
                    "set_by": "MALLOC_MMAP_THRESHOLD_"}
        return {"bytes": None, "set_by": "glibc dynamic default"}
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        done = libc.mallopt(_M_MMAP_THRESHOLD, ctypes.c_int(args.malloc_mmap_threshold)) == 1
    except (OSError, AttributeError):
        done = False
    if not done:
        raise UsageError(f"--malloc-mmap-threshold {args.malloc_mmap_threshold}: glibc's mallopt "
                         "refused it or is not there (glibc takes at most 32 MiB on 64-bit)")
    return {"bytes": args.malloc_mmap_threshold, "set_by": "--malloc-mmap-threshold (mallopt)"}


# ----------------------------------------------------------------------------------- memory

class PeakMemory:
    """Peak memory over a window: resident (VmHWM after resetting it through clear_refs) on
    CPU, the allocator's peak on an accelerator."""

    def __init__(self, comm):
        self.device = comm.device if comm.on_accelerator else None
        self.source = "device_allocator" if self.device is not None else "rss_high_water"
        self.reset_done = False

    def reset(self):
        if self.device is not None:
            torch.get_device_module(self.device.type).reset_peak_memory_stats(self.device)
            self.reset_done = True
            return
        try:
            with open("/proc/self/clear_refs", "w") as clear:
                clear.write("5")
            self.reset_done = True
        except OSError:
            self.reset_done = False  # the peak is then the process's since it started

    def now(self):
        """What the rank holds now: VmRSS, or the allocator's bytes in use."""
        if self.device is not None:
            return torch.get_device_module(self.device.type).memory_allocated(self.device)
        return read_field("/proc/self/status", "VmRSS") or 0

    def peak(self):
        if self.device is not None:
            return torch.get_device_module(self.device.type).max_memory_allocated(self.device)
        return read_field("/proc/self/status", "VmHWM") or 0


def release_memory():
    """Between strategies: what the last one freed goes back to the system (glibc keeps freed
    heap memory otherwise), so the next one's resident memory starts from the libraries, not
    from its predecessor's leftovers."""
    gc.collect()
    try:
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
