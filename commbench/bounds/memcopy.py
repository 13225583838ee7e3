"""Within a host on CPUs: a measured memory copy. Every rank of a host copies at once, in its
own placement (its affinity) on one thread (a backend copies on a thread of its own), a buffer
of each power of two from 8 B to 64 MiB into another (the op's sizes: a row takes the power of
two at or below its own); the bound at a size is a rank's copy pace there (bytes copied a
second, its fastest copy's, the mean over the ranks). The figures are cached by host, CPU model,
ranks on the host, threads a rank and pinning, in the suite's cache folder (`caches.cache_dir`),
and measured again only for sizes not yet there, or with --peak-refresh. A copy timed while other
work held the host's CPUs is slow, and a bound below the truth makes every row look better than
it is: such figures serve their own run but are not kept (`busy`), and a cached bound that a row
beat is dropped (`drop`, from ranks/peak.py at the run's end), so the next run times it again.
This module times a copy it is handed and keeps the cache; the rank's copy itself is torch's
(commbench/ranks/peak.py). Standard library only."""

import json
import math
import os
import socket
import time
from dataclasses import dataclass

from .. import caches
from .bound import Bound

CACHE_FILE = "memory-copy.json"
# The sizes copied: each power of two from SMALLEST_COPY to LARGEST_COPY (a row is held against
# the copy at the power of two at or below its size). Past the caches a copy's pace is flat, and
# a single-size run's buffer (most of a rank's memory) has no room for a second one.
SMALLEST_COPY = 8
LARGEST_COPY = 64 << 20
# Each size: this many untimed copies, then copies until both figures below are passed.
WARMUP_COPIES = 2
MIN_COPIES = 5
MIN_SECONDS = 0.01
# A host is too busy to keep its copy figures when its 1-minute load average, less the ranks that
# were copying, is above its CPU count (the load of the run that filled a cache at a third of the
# truth was 8-29 on 2 CPUs; a quiet start of 2 ranks reads 1-2.5).


def cpu_model(root="/"):
    """The CPU's model name from /proc/cpuinfo ("AMD EPYC", "Intel(R) Xeon(R) ..."); "unknown"
    where it says none."""
    try:
        with open(os.path.join(root, "proc/cpuinfo"), encoding="utf-8", errors="replace") as file:
            for line in file:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model name", "cpu model") and value.strip():
                    return value.strip()
    except OSError:
        pass
    return "unknown"


@dataclass(frozen=True)
class Host:
    """What a copy's pace depends on beyond the size: the cache's key."""

    host: str
    cpu: str
    ranks: int  # ranks on the host, copying at once
    threads: int  # torch's intra-op threads a rank
    pinned: bool

    @classmethod
    def here(cls, ranks, threads, pinned, root="/"):
        return cls(socket.gethostname(), cpu_model(root), ranks, threads, pinned)

    def key(self):
        return (f"{self.host}|{self.cpu}|{self.ranks} ranks|{self.threads} threads"
                f"|{'pinned' if self.pinned else 'unpinned'}")

    def source(self):
        threads = self.ranks * self.threads
        return f"measured, {threads} thread{'s' if threads != 1 else ''}"


def copy_size(nbytes):
    """The copy a row of `nbytes` a rank is held against: the power of two at or below it,
    within SMALLEST_COPY .. LARGEST_COPY."""
    nbytes = max(SMALLEST_COPY, min(int(nbytes), LARGEST_COPY))
    return 1 << (nbytes.bit_length() - 1)


def ladder():
    """Every size copied, smallest first."""
    return [1 << power for power in range(SMALLEST_COPY.bit_length() - 1,
                                          LARGEST_COPY.bit_length())]


def pace(copy, nbytes, clock=time.perf_counter):
    """Bytes a second that `copy()` (one copy of `nbytes`) moves at its fastest: after
    WARMUP_COPIES, copies until MIN_SECONDS and MIN_COPIES have passed, each timed on its own;
    the fastest one is the figure. A bound is what the memory can do: on a shared host a copy
    the scheduler interrupted says nothing of it, and a mean over the copies would take it in."""
    for _ in range(WARMUP_COPIES):
        copy()
    start = before = clock()
    best, copies = math.inf, 0
    while True:
        copy()
        after = clock()
        best, copies, elapsed = min(best, after - before), copies + 1, after - start
        if copies >= MIN_COPIES and elapsed >= MIN_SECONDS:
            # a clock too coarse to time one copy: the mean over them
            return nbytes / (best if best > 0 else elapsed / copies)
        before = after


def host_load():
    """(1-minute load average or None where the system keeps none, online CPUs)."""
    try:
        load = os.getloadavg()[0]
    except (OSError, AttributeError):
        load = None
    return load, os.cpu_count() or 1


def busy(load, cpus, ranks):
    """Whether a copy timed at `load` on `cpus` by `ranks` copying ranks was held back by other
    work (module docstring): a figure not to keep."""
    return load is not None and load - ranks > cpus


def _cache_path(folder=None):
    return os.path.join(folder or caches.cache_dir(), CACHE_FILE)


def _read_all(folder=None):
    try:
        with open(_cache_path(folder), encoding="utf-8") as file:
            everything = json.load(file)
    except (OSError, ValueError):
        return {}
    return everything if isinstance(everything, dict) else {}


def entry(host, folder=None):
    """What the cache keeps of `host` (its figures, when and under what load they were timed);
    {} if nothing."""
    found = _read_all(folder).get(host.key(), {})
    return found if isinstance(found, dict) else {}


def cached(host, folder=None):
    """{bytes: Gbit/s} this host's copies were measured at before; {} if never."""
    try:
        figures = entry(host, folder).get("gbps", {})
        return {int(size): float(gbps) for size, gbps in figures.items()}
    except (ValueError, AttributeError, TypeError):
        return {}


def store(host, rates, load=None, cpus=None, folder=None):
    """Keep `rates` ({bytes: Gbit/s}, timed at 1-minute load `load` on `cpus` CPUs) for `host`
    beside what the cache holds of others; written whole, then renamed, so that a reader never
    sees half a file."""
    everything = _read_all(folder)
    everything[host.key()] = {"host": host.host, "cpu": host.cpu, "ranks": host.ranks,
                              "threads": host.threads, "pinned": host.pinned,
                              "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                              "load": load, "cpus": cpus,
                              "gbps": {str(size): gbps for size, gbps in sorted(rates.items())}}
    _write_all(everything, folder)


def drop(host, folder=None):
    """Forget `host`'s figures (a row beat them: they were timed on a busy host, or the host
    changed), so that the next --peak auto times the copy again. Whether there were any."""
    everything = _read_all(folder)
    if everything.pop(host.key(), None) is None:
        return False
    _write_all(everything, folder)
    return True


def _write_all(everything, folder=None):
    path = _cache_path(folder)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        temporary = f"{path}.{os.getpid()}"
        with open(temporary, "w", encoding="utf-8") as file:
            json.dump(everything, file, indent=1)
        os.replace(temporary, path)
    except OSError:
        pass  # a read-only venv: measured again next time


def missing(host, sizes=None, refresh=False, folder=None):
    """The copy sizes of `sizes` (default: the whole ladder) the cache does not hold (all of them
    with `refresh`)."""
    wanted = sorted({copy_size(size) for size in sizes}) if sizes is not None else ladder()
    if refresh:
        return wanted
    have = cached(host, folder)
    return [size for size in wanted if size not in have]


def bound_at(rates, host, nbytes):
    """The memory-copy bound of a row of `nbytes` a rank, from {copy bytes: Gbit/s}."""
    gbps = rates.get(copy_size(nbytes))
    if gbps is None:
        return None
    return Bound("memory copy", "memory copy", gbps, host.source())


def summary(rates, host):
    """The start-up's bound: the fastest copy measured (each row is held against its own
    size's)."""
    if not rates:
        return None
    return Bound("memory copy", "memory copy", max(rates.values()), host.source())
