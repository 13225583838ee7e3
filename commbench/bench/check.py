"""--check: run the op once more on known input and count the result elements that differ
from what the op's descriptor says they must be. --check-every: a window of trials each on
known input, each checked, timed apart from the unchecked figure."""

import os
import time
from dataclasses import dataclass

import torch


def exact_integer_limit(dtype):
    """The largest m such that every integer 0..m is exact in `dtype`."""
    if dtype.is_floating_point:
        return int(2 / torch.finfo(dtype).eps)
    return torch.iinfo(dtype).max


@dataclass(frozen=True)
class CheckValues:
    """Rank s's input element j is (7s + j) mod m (+ 1 under prod, so that products are not
    mostly zero): small integers, so that results are exact in every dtype (avg aside, whose
    division rounds), and neighbouring ranks and elements differ."""

    modulus: int
    op: str = "sum"  # --op: how `reduce` combines the ranks' values

    @property
    def offset(self):
        return 1 if self.op == "prod" else 0

    def __call__(self, source, index):
        return (source * 7 + index) % self.modulus + self.offset

    def reduce(self, terms):
        """The --op reduction of `terms` (one tensor per rank), exactly, in int64 (float64 for
        avg)."""
        stacked = torch.stack(list(terms))
        if self.op == "sum":
            return stacked.sum(0)
        if self.op == "prod":
            return stacked.prod(0)
        if self.op == "min":
            return stacked.amin(0)
        if self.op == "max":
            return stacked.amax(0)
        return stacked.double().mean(0)


def check_values(collective, dtype, world_size, op="sum"):
    """The values of a check: as large a modulus (up to 101) as keeps every result exact."""
    limit = exact_integer_limit(dtype)
    if not collective.reduces:
        return CheckValues(max(1, min(101, limit + 1)))
    if op == "prod":  # every product of n values in 1..m at most m^n
        top = int(round(limit ** (1 / world_size)))
        while top > 1 and top ** world_size > limit:
            top -= 1
        return CheckValues(max(1, min(101, top)), op)
    top = limit if op in ("min", "max") else limit // world_size
    return CheckValues(max(1, min(101, top + 1)), op)


def _tolerance(dtype, want):
    """How far an average may be from the exact one: the division's rounding, and a backend that
    divides each rank's value before summing (a few roundings): 4 ulps of the result."""
    return 4 * torch.finfo(dtype).eps * want.abs().clamp(min=1)


CHECK_CHUNK = 1 << 18  # elements compared at a time, to bound the memory of the check
# The check's working set: int64 temporaries of a chunk and the allocator's slack around them
# (at most ~25 MB measured by benchmarks/memory.py at 3 ranks).
CHECK_RESERVE = 64 << 20


def count_wrong(collective, call, input, output, args, comm):
    """Run the op once on known input and count this rank's wrong result elements."""
    if collective.check is not None:
        return collective.check(comm, call, args) + (_injected(collective, comm, 0) is not None)
    values = check_values(collective, input.dtype, comm.world_size, args.op)
    result = _known_input(values, input, output, comm)
    comm.sync_all()
    _once(call, args, comm)
    _inject_fault(collective, comm, result, 0)
    return _compare(collective, values, result, input.numel(), comm)[0]


@dataclass
class Checked:
    """--check-every's window on one rank: wrong elements over its trials, the seconds of one
    trial (the op alone: the input's refill and the comparison are outside), and the first wrong
    element as (trial, element) or None."""

    wrong: int
    seconds: float
    first: tuple | None


def check_every(collective, call, input, output, args, comm, count):
    """--check-every: `count` trials, each on known input (refilled before it), each timed alone
    and its result checked, so that corruption that comes and goes is caught in the trial it
    happens. The ranks are in step at the start only, as in the unchecked window."""
    values = None if collective.check is not None else \
        check_values(collective, input.dtype, comm.world_size, args.op)
    wrong, seconds, first = 0, 0.0, None
    comm.sync_all()
    for trial in range(count):
        if values is None:  # an op checked by its own `check` (barrier): it times itself too
            started = time.perf_counter()
            found = collective.check(comm, call, args) + \
                (_injected(collective, comm, trial) is not None)
            seconds += time.perf_counter() - started
            where = 0 if found else None
        else:
            result = _known_input(values, input, output, comm)
            started = time.perf_counter()
            _once(call, args, comm)
            seconds += time.perf_counter() - started
            _inject_fault(collective, comm, result, trial)
            found, where = _compare(collective, values, result, input.numel(), comm)
        wrong += found
        if found and first is None:
            first = (trial, where)
    return Checked(wrong, seconds / count, first)


def _known_input(values, input, output, comm):
    """Fill this rank's input with the check's values (and the output with a value no rank
    sends); the buffer the result lands in."""
    numel = input.numel()
    for lo in range(0, numel, CHECK_CHUNK):
        index = torch.arange(lo, min(lo + CHECK_CHUNK, numel), device=comm.device)
        input[lo:lo + len(index)] = values(comm.rank, index).to(input.dtype)
    if output is None:
        return input
    top = values.modulus + values.offset
    sentinel = top if top <= exact_integer_limit(output.dtype) else 0
    output.fill_(sentinel)  # an element left untouched is wrong
    return output


def _once(call, args, comm):
    work = call()
    if args.async_op and work is not None:
        work.wait()
    comm.synchronize()


def _compare(collective, values, result, numel, comm):
    """(wrong elements of this rank's result, index of the first or None)."""
    wrong, first = 0, None
    approximate = collective.reduces and values.op == "avg"
    for lo in range(0, result.numel(), CHECK_CHUNK):
        index = torch.arange(lo, min(lo + CHECK_CHUNK, result.numel()), device=comm.device)
        want = collective.expected(values, comm.rank, comm.world_size, numel, index)
        if want is None or len(want) == 0:  # nothing (more) defined on this rank: the root's
            break  # result is checked there; all_to_allv's output past what the rank receives
        got = result[lo:lo + len(want)]
        if approximate:
            off = (got.double() - want).abs() > _tolerance(result.dtype, want)
        else:
            off = got != want.to(result.dtype)
        count = int(off.sum().item())
        if count and first is None:
            first = lo + int(off.nonzero()[0].item())
        wrong += count
    return wrong, first


FAULT_VARIABLE = "COMMBENCH_INJECT_WRONG"


def _injected(collective, comm, trial):
    """Test hook: COMMBENCH_INJECT_WRONG=op:rank[:trial[:element]] alters one result element
    (element 0 unless named) of that op on that rank: in --check's call, or in trial `trial`
    (counted from 0, default 0) of --check-every's window; several such, comma-separated, one
    each. The element to alter, or None."""
    for fault in os.environ.get(FAULT_VARIABLE, "").split(","):
        parts = fault.split(":")
        if len(parts) < 2 or parts[:2] != [collective.name, str(comm.rank)]:
            continue
        if trial == (int(parts[2]) if len(parts) > 2 else 0):
            return int(parts[3]) if len(parts) > 3 else 0
    return None


def _inject_fault(collective, comm, result, trial):
    """The test hook's wrong element (an op checked by its own `check`: one more in its
    count), so tests can prove that --check and --check-every catch corruption."""
    element = _injected(collective, comm, trial)
    if element is not None and result.numel():
        result[min(element, result.numel() - 1)] += 1
