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
    """Rank s's input element j is (7s + j) mod m: small integers, so results are exact in every
    dtype, and neighbouring ranks and elements differ."""

    modulus: int

    def __call__(self, source, index):
        return (source * 7 + index) % self.modulus


def check_values(collective, dtype, world_size):
    limit = exact_integer_limit(dtype)
    top = limit // world_size if collective.reduces else limit
    return CheckValues(max(1, min(101, top + 1)))


CHECK_CHUNK = 1 << 18  # elements compared at a time, to bound the memory of the check
# The check's working set: int64 temporaries of a chunk and the allocator's slack around them
# (at most ~25 MB measured by benchmarks/memory.py at 3 ranks).
CHECK_RESERVE = 64 << 20


def count_wrong(collective, call, input, output, args, comm):
    """Run the op once on known input and count this rank's wrong result elements."""
    values = check_values(collective, input.dtype, comm.world_size)
    numel = input.numel()
    for lo in range(0, numel, CHECK_CHUNK):
        index = torch.arange(lo, min(lo + CHECK_CHUNK, numel), device=comm.device)
        input[lo:lo + len(index)] = values(comm.rank, index).to(input.dtype)
    result = input if output is None else output
    if output is not None:
        sentinel = values.modulus if values.modulus <= exact_integer_limit(output.dtype) else 0
        output.fill_(sentinel)  # a value no rank sends: an element left untouched is wrong
    comm.sync_all()
    work = call()
    if args.async_op and work is not None:
        work.wait()
    comm.synchronize()
    _inject_fault(collective, comm, result)
    wrong = 0
    for lo in range(0, result.numel(), CHECK_CHUNK):
        index = torch.arange(lo, min(lo + CHECK_CHUNK, result.numel()), device=comm.device)
        want = collective.expected(values, comm.rank, comm.world_size, numel, index)
        wrong += int((result[lo:lo + len(index)] != want.to(result.dtype)).sum().item())
    return wrong


FAULT_VARIABLE = "COMMBENCH_INJECT_WRONG"


def _inject_fault(collective, comm, result):
    """Test hook: COMMBENCH_INJECT_WRONG=op:rank alters one result element of that op on that
    rank, so tests can prove that --check catches corruption."""
    target = os.environ.get(FAULT_VARIABLE)
    if target and target == f"{collective.name}:{comm.rank}" and result.numel():
        result[0] += 1
