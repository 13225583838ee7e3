"""replay.py --pace compute: the job's gaps between calls filled with compute of the gap's
length on the rank's own thread, instead of a sleep: before each call, compute for the job's
gap before it or until the call's start in the job, whichever is sooner, then wait for that
start as --pace does.

The logic is torch-free (a kernel is any callable doing n units of work; the clock is given):
`calibrate` times the kernel once per rank, before the passes, and keeps its units a second;
`units_for` turns a gap into units by that rate, `fill` computes for a time in slices of them;
`gaps` reads the job's gaps from a rank's calls. The kernels themselves (`kernel`) are
torch's: a dense matmul (the default, the job's own kind of compute) or a memory-bound loop (an
element-wise add over buffers larger than a core's cache)."""

import time
from dataclasses import dataclass

KERNELS = ("matmul", "memory")
DEFAULT_KERNEL = "matmul"
MATMUL_SIDE = 128  # one unit: a 128 x 128 float32 matmul, 4.2 MFLOP
MEMORY_ELEMENTS = 1 << 20  # one unit: out = a + b over 1 Mi float32 (12 MiB moved)
UNIT = {"matmul": f"a {MATMUL_SIDE}x{MATMUL_SIDE} float32 matmul",
        "memory": f"an add of {MEMORY_ELEMENTS >> 20} Mi float32 elements"}


@dataclass(frozen=True)
class Calibration:
    kernel: str
    units_per_s: float  # the kernel's rate on this rank, as calibrated
    seconds: float  # how long the calibration's timed runs took

    @property
    def unit_s(self):
        return 1.0 / self.units_per_s


def calibrate(kernel_name, run, clock=time.perf_counter, at_least_s=0.05, rounds=5):
    """The kernel's rate: `run(n)` does n units. The count doubles until one run takes
    `at_least_s`, then `rounds` runs of that count; the median rate (a round slowed by a
    neighbour does not set it)."""
    count = 1
    while True:
        began = clock()
        run(count)
        took = clock() - began
        if took >= at_least_s or count >= 1 << 30:
            break
        count *= 2
    rates, spent = [], took
    for _ in range(rounds):
        began = clock()
        run(count)
        took = clock() - began
        spent += took
        rates.append(count / max(took, 1e-9))
    rates.sort()
    return Calibration(kernel_name, rates[len(rates) // 2], spent)


def units_for(gap_s, calibration):
    """The units of compute that take `gap_s` at the calibrated rate (0 for no gap)."""
    return max(0, round(gap_s * calibration.units_per_s))


SLICE_S = 0.005  # fill() computes in slices of this much, the clock read between them


def fill(seconds, run, calibration, clock=time.perf_counter):
    """Compute for `seconds`: slices of units_for(SLICE_S) or less, until what is left is
    under half a unit. A neighbour that slows the kernel down makes the slices longer, not
    the fill: it ends within a slice of `seconds` whatever the rate does after the
    calibration. The units run."""
    until, done = clock() + seconds, 0
    while True:
        units = units_for(min(until - clock(), SLICE_S), calibration)
        if units <= 0:
            return done
        run(units)
        done += units


def gaps(offsets, calls):
    """Each call's gap before it in the job: from the end of the rank's call before to its
    start. The end: a synchronous call's completion; a wait's end; an asynchronous call's issue
    where the trace has its wait (the job went on computing while it flew, until it waited),
    but its completion where the wait is the recorder's guess (`function: future`: DDP's
    reducer waited for it in C++ at once, the rank blocked). `offsets`: each call's start on
    the shared clock from the pass's origin (None where the trace has no times); the first
    call's gap is its offset. None where a call or the one before has no times."""
    guessed = {req for call in calls if call.op == "wait" and call.function == "future"
               for req in call.waits or ()}
    result: list = []
    end: float | None = 0.0
    for offset, call in zip(offsets, calls):
        result.append(None if offset is None or end is None else max(0.0, offset - end))
        if offset is None:
            end = None
            continue
        flew = call.asynchronous and call.req not in guessed
        end = offset + (0.0 if flew or call.duration_s is None else call.duration_s)
    return result


def describe(calibrations):
    """The start-up line: the kernel, its unit and each rank's rate."""
    kernel = calibrations[0].kernel
    rates = ", ".join(f"{c.units_per_s:,.0f}" for c in calibrations)
    return (f"--pace compute: the job's gaps filled with {kernel} compute (one unit: "
            f"{UNIT[kernel]}), calibrated on every rank at once before the passes: "
            f"{rates} units/s by rank ({1e6 * calibrations[0].unit_s:.1f} us a unit on rank 0)")


def kernel(name, device):
    """`run(n)`: n units of `name`'s compute on `device`, synchronous."""
    import torch
    if name == "matmul":
        a = torch.rand(MATMUL_SIDE, MATMUL_SIDE, device=device)
        b = torch.rand(MATMUL_SIDE, MATMUL_SIDE, device=device)
        out = torch.empty_like(a)

        def run(count):
            for _ in range(count):
                torch.mm(a, b, out=out)
    else:
        a = torch.rand(MEMORY_ELEMENTS, device=device)
        b = torch.rand(MEMORY_ELEMENTS, device=device)
        out = torch.empty_like(a)

        def run(count):
            for _ in range(count):
                torch.add(a, b, out=out)
    if torch.device(device).type != "cpu":
        inner = run

        def run(count):
            inner(count)
            torch.accelerator.synchronize(device)
    return run
