"""How much memory a rank has, and how much one message size took.

Readers of /proc and cgroup files (v1 and v2), the per-rank memory a plan starts from
(SPEC §4: device total, or the host's available memory shared by its local ranks), and the
meter of what one size used.
"""

import os

import torch


def read_field(path, key):
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
    available = read_field("/proc/meminfo", "MemAvailable")
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
            cache = read_field(os.path.join(directory, "memory.stat"), cache_key) or 0
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
        value = read_field("/proc/self/status", key)
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
