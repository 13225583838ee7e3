"""--peak on the ranks (docs/peak.md): the bound of the run found at start-up, named in the
start-up's line, and the bound each row is held against (its `% of peak`, the results file's
`bound` and `peak_fraction`). The bound depends on where the ranks are: between hosts, the line
rate of the interface the process group uses (sysfs); within one host on GPUs, NVLink or PCIe
(NVML); within one host on CPUs, a memory copy timed on the ranks themselves, only with --peak
auto (the others cost nothing and are named in every run's start-up line). A row above its
bound is named at the run's end: the bound is wrong, not the row (a memory copy cached from a
busy host is dropped then, and timed again by the next run). The readers and the cache are
commbench/bounds/ (no torch)."""

import os
import time
from dataclasses import dataclass, field

import torch

from ..bounds import AUTO, Bound, PeakSpec, fraction, memcopy, nvml, unknown
from ..bounds.sysfs import infiniband_bound, infiniband_devices, network_bound
from ..table import note


@dataclass
class Peak:
    """The run's bound (`bound`, for the start-up line and the meta record) and what each row is
    held against (`at`). `spec` None: no --peak, no column."""

    spec: PeakSpec | None
    bound: Bound | None
    copies: dict = field(default_factory=dict)  # {copy bytes: Gbit/s}, the memory copy
    host: memcopy.Host | None = None
    timed: str = ""  # the memory copy: "timed now" or "cached <when>, load <load>"
    beyond: list = field(default_factory=list)  # (share, op, bytes a rank, bound): rows above it

    @property
    def column(self):
        return self.spec is not None

    def at(self, op, nbytes):
        """The bound of a row of `op` at `nbytes` a rank."""
        if self.spec is not None and self.spec.mode != AUTO:
            return self.spec.given(op, nbytes)
        if self.copies:
            return memcopy.bound_at(self.copies, self.host, nbytes)
        return self.bound

    def row(self, op, nbytes, busbw_bytes_per_s, raw):
        """The row's `% of peak` text (--raw: the fraction) and its record's fields."""
        bound = self.at(op, nbytes)
        share = fraction(None if busbw_bytes_per_s is None else busbw_bytes_per_s * 8 / 1e9,
                         bound)
        if share is not None and share > 1:
            self.beyond.append((share, op, nbytes, bound))
        text = "-" if share is None else f"{share:.3f}" if raw else f"{share * 100:.1f}"
        return text, {"bound": None if bound is None else bound.record(),
                      "peak_fraction": share}

    def line(self):
        if self.spec is not None and self.spec.mode == "file":
            count = len(self.spec.bands)
            return (f"bound: the expected figures of {self.spec.path} "
                    f"({count} line{'s' if count != 1 else ''}, --peak)")
        return (self.bound or unknown("link", "-", "nothing to read it from")).line()

    def beaten(self):
        """The run's end: None, or the line naming the rows above their bound and what it means
        (a memory copy's cached figures are dropped here, on the rank that calls it)."""
        if not self.beyond:
            return None
        share, op, nbytes, bound = max(self.beyond, key=lambda row: row[0])
        count = len(self.beyond)
        rows = (f"{count} row{'s' if count != 1 else ''} above {'its' if count == 1 else 'their'}"
                f" bound, up to {share * 100:.0f}% ({op} at {nbytes} B a rank, "
                f"{bound.line().removeprefix('bound: ')})")
        if bound.kind != "memory copy" or self.host is None:
            return (f"{rows}: the bound is below what was measured; check the rate or the file "
                    f"--peak gave")
        memcopy.drop(self.host)
        return (f"{rows}: the memory copy ({self.timed}) was slower than the collective, as a "
                f"copy timed on a busy host is; its figures are dropped from the cache, and the "
                f"next run with --peak auto times them again (on a quiet host; now: "
                f"--peak-refresh)")

    def record(self):
        """The meta record's `peak`: what --peak said and the run's bound."""
        spec = self.spec
        return {"spec": None if spec is None else spec.path if spec.mode == "file" else
                spec.mode if spec.mode == AUTO else spec.gbps,
                "bound": None if self.bound is None else self.bound.record()}


def detect(comm, settings):
    """The run's Peak: --peak's, or the bound where the ranks are (module docstring); the memory
    copy is timed (or read from the cache) only with --peak auto."""
    spec = settings.peak
    if spec is not None and spec.mode == "rate":
        return Peak(spec, spec.given("", 0))
    one_host = len(set(comm.hostnames)) == 1
    if not one_host:
        bound = _between_hosts(comm)
    elif comm.device.type == "cuda":
        bound = nvml.gpu_bound(nvml.load(), comm.device.index or 0) or unknown(
            "nvlink", "GPU", "NVML is not installed (pip install nvidia-ml-py) or says nothing")
    elif spec is not None and spec.mode == AUTO:
        return _memory_copy(comm, spec, settings)
    else:
        bound = unknown("memory copy", "memory copy", "within one host on CPUs the bound is a "
                        "memory copy; --peak auto measures it")
    return Peak(spec, bound)


def _between_hosts(comm):
    """The link the process group crosses between hosts: NCCL's InfiniBand HCA where it has one
    (NCCL_IB_HCA's first, else the first), else the interface of its sockets."""
    hcas = infiniband_devices()
    if comm.backend == "nccl" and hcas and os.environ.get("NCCL_IB_DISABLE", "0") == "0":
        named = os.environ.get("NCCL_IB_HCA", "").lstrip("=^").split(",")[0].split(":")[0]
        return infiniband_bound(named if named in hcas else hcas[0])
    return network_bound(os.environ, comm.backend)


def _memory_copy(comm, spec, settings):
    """Every rank copies each size at once, on one thread; the cache of this host, CPU, ranks
    and pinning holds the figures after the first time (--peak-refresh: again)."""
    # One thread a rank, in the rank's own placement: a backend copies on a thread of its own, not
    # on torch's intra-op pool (whose threads, on a busy host, wait for CPUs at every copy: 64 KiB
    # took 30 ms under a load of 17 on 2 cores).
    host = memcopy.Host.here(comm.local_world_size, 1, settings.pin)
    needed = comm.global_rank == 0 and bool(memcopy.missing(host, refresh=settings.peak_refresh))
    if comm.any_rank(needed):
        started = time.monotonic()
        sizes, threads = memcopy.ladder(), torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            mine = [_copy_pace(comm, nbytes) for nbytes in sizes]
        finally:
            torch.set_num_threads(threads)
        everyone = comm.gather_figures(mine)
        rates = {nbytes: sum(rank[i] for rank in everyone) / len(everyone) * 8 / 1e9
                 for i, nbytes in enumerate(sizes)}
        load, cpus = memcopy.host_load()
        timed = f"timed now, load {load:.1f} on {cpus} CPUs" if load is not None else "timed now"
        if comm.global_rank == 0:
            took = f"memory copy timed at {len(sizes)} sizes on {comm.local_world_size} " \
                   f"rank(s) in {time.monotonic() - started:.1f} s"
            if memcopy.busy(load, cpus, comm.local_world_size):
                note(comm, f"{took}, not kept: the host was busy (load {load:.1f} on {cpus} "
                           f"CPUs), so the bound may be low; the next run times it again")
            else:
                memcopy.store(host, rates, load, cpus)
                note(comm, f"{took}, kept for the next runs (--peak-refresh: again)")
    else:
        rates, timed = memcopy.cached(host), _when_cached(memcopy.entry(host))
    return Peak(spec, memcopy.summary(rates, host), rates, host, timed)


def _when_cached(entry):
    load = entry.get("load")
    return (f"cached {entry.get('measured', 'at an unknown time')}"
            + (f", load {load:.1f}" if isinstance(load, (int, float)) else ""))


def _copy_pace(comm, nbytes):
    """This rank's pace copying `nbytes`, every rank at once (a barrier first)."""
    source = torch.ones(nbytes, dtype=torch.uint8)
    target = torch.empty_like(source)
    comm.barrier()
    return memcopy.pace(lambda: target.copy_(source), nbytes)
