"""--overlap: how much of a collective hides behind computation, as OSU's non-blocking
benchmarks (osu_iallreduce, ...) measure it. Per size, three windows of the same count:
(a) the op issued asynchronously and waited, (b) a compute phase calibrated on this rank to
last about as long as (a) (--overlap-factor times as long), (c) the op issued, the same
compute, then the wait. overlap % = 100 x (1 - (total - compute) / comm), clipped to 0..100."""

import contextlib
import os
import statistics
import time
from dataclasses import dataclass

import torch

from .. import units

FIELDS = ("comm_s", "compute_s", "total_s", "overlap_pct")
# The compute phase: square matmuls of this dimension, as many as fill the pure collective's
# time. Small enough on CPU (~0.1 ms a matmul on one core) to size a phase to a fraction of a
# gloo collective; large enough on a GPU to keep kernel launches out of the figure.
CPU_DIM, DEVICE_DIM = 128, 1024


class Compute:
    """The compute phase of one rank: `run(k)` does k matmuls on the op's device."""

    def __init__(self, comm, cpus=None):
        self.comm = comm
        dim = CPU_DIM if comm.device.type == "cpu" else DEVICE_DIM
        self.dim = dim
        generator = torch.Generator(device="cpu").manual_seed(1234 + comm.rank)
        self.a = torch.rand(dim, dim, generator=generator).to(comm.device)
        self.b = torch.rand(dim, dim, generator=generator).to(comm.device)
        self.out = torch.empty(dim, dim, device=comm.device)
        self.cpus = cpus  # --compute-cpus: where this rank's thread runs the windows
        with self.pinned():
            self.seconds = self._calibrate()

    @contextlib.contextmanager
    def pinned(self):
        """With --compute-cpus, this thread (which issues the op and computes) on those CPUs
        alone; the backend's progress threads, started with the process group, keep theirs."""
        if not self.cpus:
            yield
            return
        before = os.sched_getaffinity(0)
        os.sched_setaffinity(0, self.cpus)
        try:
            yield
        finally:
            os.sched_setaffinity(0, before)

    def run(self, count):
        for _ in range(count):
            torch.mm(self.a, self.b, out=self.out)

    def _calibrate(self):
        """Seconds of one matmul on this rank: the median of 5 batches of 20, after a warm-up."""
        self.run(5)
        self.comm.synchronize()
        batches = []
        for _ in range(5):
            started = time.perf_counter()
            self.run(20)
            self.comm.synchronize()
            batches.append((time.perf_counter() - started) / 20)
        return statistics.median(batches)

    def count_for(self, seconds):
        """Matmuls that last about `seconds` (at least one)."""
        return max(1, round(seconds / self.seconds)) if self.seconds > 0 else 1

    def describe(self):
        threads = torch.get_num_threads()
        cores = (f"CPUs {format_cpus(self.cpus)} (--compute-cpus), the backend's progress "
                 f"threads on any of {len(os.sched_getaffinity(0))}" if self.cpus else
                 f"{len(os.sched_getaffinity(0))} cores; the {self.comm.backend} progress threads "
                 "compete with it for them")
        where = (f"{threads} thread{'s' if threads > 1 else ''} (OMP_NUM_THREADS="
                 f"{os.environ.get('OMP_NUM_THREADS', 'unset')}) on {cores}"
                 if self.comm.device.type == "cpu" else
                 f"the default stream of {self.comm.device}, beside the collective's own stream")
        return (f"--overlap: the compute phase is {self.dim}x{self.dim} float32 matmuls, "
                f"{units.duration(self.seconds)} each on rank {self.comm.global_rank}, in {where}")


def _wait(work):
    if work is not None:
        work.wait()


@dataclass
class Overlap:
    comm_s: float  # (a) one op, issued asynchronously and waited
    compute_s: float  # (b) the compute phase alone
    total_s: float  # (c) op issued, compute, wait
    overlap_pct: float

    def figures(self):
        return [self.comm_s, self.compute_s, self.total_s, self.overlap_pct]


def overlap_percent(comm_s, compute_s, total_s):
    """OSU's definition, clipped to 0..100: the share of the collective that did not add to the
    compute phase's time."""
    if comm_s <= 0:
        return 0.0
    return min(100.0, max(0.0, 100.0 * (1 - (total_s - compute_s) / comm_s)))


def format_cpus(cpus):
    return ",".join(str(c) for c in sorted(cpus))


def measure(call, count, comm, compute, window, factor=1.0):
    """The three windows of `count` iterations each for the async `call` (window(fn, count)
    times fn on this rank: timing.window); the compute phase lasts `factor` x the pure op."""
    with compute.pinned():
        return _measure(call, count, compute, window, factor)


def _measure(call, count, compute, window, factor):
    comm_s = window(lambda: _wait(call()), count)
    matmuls = compute.count_for(comm_s * factor)
    compute_s = window(lambda: compute.run(matmuls), count)

    def overlapped():
        work = call()
        compute.run(matmuls)
        _wait(work)
    total_s = window(overlapped, count)
    return Overlap(comm_s, compute_s, total_s, overlap_percent(comm_s, compute_s, total_s))
