"""--check: run the op once more on known input and count the result elements that differ
from what the op's descriptor says they must be."""

import os
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
        return collective.check(comm, call, args) + _injected(collective, comm)
    values = check_values(collective, input.dtype, comm.world_size, getattr(args, "op", "sum"))
    numel = input.numel()
    for lo in range(0, numel, CHECK_CHUNK):
        index = torch.arange(lo, min(lo + CHECK_CHUNK, numel), device=comm.device)
        input[lo:lo + len(index)] = values(comm.rank, index).to(input.dtype)
    result = input if output is None else output
    if output is not None:
        top = values.modulus + values.offset
        sentinel = top if top <= exact_integer_limit(output.dtype) else 0
        output.fill_(sentinel)  # a value no rank sends: an element left untouched is wrong
    comm.sync_all()
    work = call()
    if args.async_op and work is not None:
        work.wait()
    comm.synchronize()
    _inject_fault(collective, comm, result)
    wrong = 0
    approximate = collective.reduces and values.op == "avg"
    for lo in range(0, result.numel(), CHECK_CHUNK):
        index = torch.arange(lo, min(lo + CHECK_CHUNK, result.numel()), device=comm.device)
        want = collective.expected(values, comm.rank, comm.world_size, numel, index)
        if want is None:  # nothing defined on this rank (the root's result is checked there)
            break
        got = result[lo:lo + len(index)]
        if approximate:
            off = (got.double() - want).abs() > _tolerance(result.dtype, want)
        else:
            off = got != want.to(result.dtype)
        wrong += int(off.sum().item())
    return wrong


FAULT_VARIABLE = "COMMBENCH_INJECT_WRONG"


def _injected(collective, comm):
    target = os.environ.get(FAULT_VARIABLE)
    return bool(target) and target == f"{collective.name}:{comm.rank}"


def _inject_fault(collective, comm, result):
    """Test hook: COMMBENCH_INJECT_WRONG=op:rank alters one result element of that op on that
    rank (an op checked by its own `check`: adds one to its count), so tests can prove that
    --check catches corruption."""
    if _injected(collective, comm) and result.numel():
        result[0] += 1
