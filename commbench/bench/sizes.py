"""Which message sizes an op runs: the scan (SPEC §4), the single size that fits, and the
buffers of one size, allocated only when every rank has the room."""

import math

import torch

from .. import defaults, units
from .check import CHECK_RESERVE
from .collective import GATHERED, SPLIT, WHOLE
from ..dtypes import get_dtype
from ..errors import BenchmarkError, UsageError
from .memory import free_device_memory, per_rank_memory, rank_memory_now
from ..table import note


def scan_numels(world_size, maxsize, minsize=1):
    """Per-rank element counts of a scan: n * 2^p for p = minsize .. maxsize - 1."""
    return [world_size * 2 ** p for p in range(minsize, maxsize)]


def message_numel(collective, size_bytes, element_size, world_size):
    """The elements per rank that a message of `size_bytes` per rank becomes: whole elements,
    rounded down, and for an op whose input splits into n equal chunks (all_to_all,
    reduce_scatter, scatter) down to a multiple of n, at least n (rounded up to it)."""
    numel = max(1, size_bytes // element_size)
    if collective.size_rule == SPLIT:
        numel = max(world_size, numel - numel % world_size)
    return numel


def sweep_numels(collective, args, world_size):
    """The per-rank element counts of a --scan: by exponents (--minsize/--maxsize, SPEC §4), or
    in bytes (--min-bytes, x --step-factor, up to --max-bytes, each size as message_numel
    rounds it; a size that rounds to one already measured is measured once). An op without
    payload (barrier) has one size, none."""
    if not collective.payload:
        return [0]
    if args.min_bytes is None:
        return scan_numels(world_size, args.maxsize, args.minsize)
    element_size = get_dtype(args.dtype).itemsize
    numels, size = [], args.min_bytes
    while size <= args.max_bytes:
        numel = message_numel(collective, size, element_size, world_size)
        if numel not in numels:
            numels.append(numel)
        size = max(size + 1, int(size * args.step_factor))
    return numels


def _sweep_flag(args):
    """The flag that set the largest size of a sweep, as the user gave it."""
    if args.min_bytes is not None:
        return f"--max-bytes {args.max_bytes}"
    return f"--maxsize {args.maxsize}"


def cap_sweep(collective, numels, args, comm):
    """The sweep's sizes up to the largest whose buffers fit in a rank's usable memory now (90%
    of what the single-size plan starts from, the least over ranks), with one note naming the
    flag that asked for more: a sweep that cannot fit ends before it starts to allocate, not
    at its first failed allocation. Every rank calls this (one agreement on the memory)."""
    if not collective.payload or not numels:
        return numels
    refuse_past_ceiling(collective, numels, args, comm)
    memory, source = per_rank_memory(comm)
    usable = int(comm.min_over_ranks(free_device_memory(comm, memory))
                 * defaults.USABLE_MEMORY_FRACTION)
    element_size = get_dtype(args.dtype).itemsize
    fitting = [numel for numel in numels
               if footprint(collective, numel, element_size, args, comm)[0] <= usable]
    if len(fitting) < len(numels):
        short = len(numels) - len(fitting)
        if fitting:
            largest = fitting[-1] * element_size
            note(comm, f"{_sweep_flag(args)}: {collective.name}'s buffers fit the {usable} B a "
                       f"rank may use (90% of {source}) up to {units.size(largest)} per rank "
                       f"({fitting[-1]} elements of {args.dtype}); the sweep stops there, "
                       f"{short} size{'s' if short > 1 else ''} short")
        else:
            raise BenchmarkError(f"{collective.name}: a rank has {usable} B usable ({source}), "
                                 "less than the sweep's smallest message takes with the "
                                 "backend's reserves; free memory or use fewer ranks per host")
    return fitting


def in_flight(args):
    """How many ops of one size can be in flight at once: with --async-op every warmup, then
    every trial, is issued before the first is waited on (timing.time_op)."""
    return max(args.trials, args.warmups) if args.async_op else 1


def buffer_multiples(collective, numel, comm, ops_in_flight=1):
    """[(what, bytes per byte of input)]: every buffer of one size as a multiple of the input.
    A CPU backend's staging copy is per op, so ops in flight hold one each (gloo: a
    reduce_scatter scan with --async-op was OOM-killed when only one was counted)."""
    n = comm.world_size
    parts = [("input", 1.0)]
    if collective.output_numel is not None:
        parts.append(("output", collective.output_numel(numel, n) / numel))
    if collective.staging is not None and not comm.on_accelerator:
        copies = f" x {ops_in_flight} in flight" if ops_in_flight > 1 else ""
        parts.append((f"{comm.backend} staging copy{copies}",
                      collective.staging(n) * ops_in_flight))
    return parts


def footprint(collective, numel, element_size, args, comm):
    """(bytes, parts, reserve): what one size takes per rank: its buffers and the backend's
    staging copies (parts: [(what, multiple of the input)]), plus the fixed reserves. The
    multiples do not depend on E, so bytes = E x element size x their sum + reserve."""
    parts = buffer_multiples(collective, max(numel, comm.world_size), comm, in_flight(args))
    reserve = defaults.BACKEND_MEMORY_RESERVE + (CHECK_RESERVE if args.check else 0)
    multiple = sum(share for _, share in parts)
    return int(numel * element_size * multiple) + reserve, parts, reserve


def _power_of_two_below(x):
    return 2 ** math.floor(math.log2(x)) if x >= 1 else 0


def _round_numel(collective, elements, n):
    """SPEC §4's E from a budget of `elements` (all_gather's budget covers its n-fold output)."""
    if collective.size_rule == WHOLE:
        return int(elements)
    power = _power_of_two_below(elements / n)
    return power * (n if collective.size_rule == SPLIT else 1)


def _fitting_numel(collective, elements, n):
    """The largest E of the op's form (any, a power of two, n x a power of two) <= elements."""
    if collective.size_rule == WHOLE:
        return int(elements)
    if collective.size_rule == GATHERED:
        return _power_of_two_below(elements)
    return n * _power_of_two_below(elements / n)


def memory_factor(collective, args, comm):
    """The share of a rank's memory that one message of `collective` may take (SPEC §4)."""
    if collective.size_rule == WHOLE:
        return 2 * args.mem_factor  # no output buffer, so twice the share
    if collective.size_rule == GATHERED and comm.one_tensor_all_gather:
        return args.mem_factor + defaults.ALL_GATHER_ONE_TENSOR_EXTRA_FACTOR
    return args.mem_factor


def _largest_within(collective, args, comm, ceiling, element_size):
    """The flag value of the largest sweep whose messages stay within `ceiling` bytes."""
    if args.min_bytes is not None:
        return f"--max-bytes {ceiling}"
    n, maxsize = comm.world_size, args.maxsize
    while maxsize > defaults.MIN_MAXSIZE and n * 2 ** (maxsize - 1) * element_size > ceiling:
        maxsize -= 1
    return f"--maxsize {maxsize}"


def refuse_past_ceiling(collective, numels, args, comm):
    """A sweep asks for no message larger than the one the single-size run of the same op would
    measure: --mem-factor of a rank's memory (SPEC §4's rule, 0.3 by default: twice that for an
    op without an output buffer). Past it, one line naming the flags, exit status 2, before
    anything is allocated: on a machine shared with other work a sweep must not take what is
    not its own (--maxsize 40 once held 8.6 GB a rank for minutes). The memory is a rank's at
    the run's first sweep: run_all.py checks every op before the first, and an op's own check
    later (cap_sweep) must agree, whatever the ops before it left in use. Every rank calls this."""
    if not collective.payload or not numels:
        return
    if comm.run.sweep_memory is None:
        comm.run.sweep_memory = per_rank_memory(comm)
    memory, source = comm.run.sweep_memory
    element_size = get_dtype(args.dtype).itemsize
    factor = memory_factor(collective, args, comm)
    ceiling = int(memory * factor)
    asked = max(numels) * element_size
    if asked <= ceiling:
        return
    within = _largest_within(collective, args, comm, ceiling, element_size)
    lift = " (at most 1)" if args.mem_factor < 1 else ""
    raise UsageError(f"{_sweep_flag(args)} asks {collective.name} for {units.size(asked)} per "
                     f"rank, past a sweep's ceiling of {units.size(ceiling)} ({factor:g} x the "
                     f"{units.size(memory)} a rank has: {source}; --mem-factor "
                     f"{args.mem_factor:g}); "
                     f"{within} stays within it, a larger --mem-factor{lift} raises it")


def plan_single_size(collective, args, comm):
    """(E, plan line) of a single-size run.

    E follows SPEC §4 from the per-rank memory and --mem-factor (the original's rule), and is
    then capped so that everything the op allocates per rank fits in the usable memory: the
    input, the output (all_gather's is n-fold), the copy a CPU backend stages the data
    through (gloo: all_gather's n-fold output, reduce_scatter's input; measured by
    benchmarks/memory.py), the backend's fixed buffers, and the --check working set. The
    usable memory is 90% of the planned-on memory on CPU, 90% of the free memory on a device.
    """
    memory, source = per_rank_memory(comm)
    usable = int(comm.min_over_ranks(free_device_memory(comm, memory))
                 * defaults.USABLE_MEMORY_FRACTION)
    element_size = get_dtype(args.dtype).itemsize
    n = comm.world_size
    factor = memory_factor(collective, args, comm)
    budget = memory * factor
    numel = _round_numel(collective, budget / element_size, n)
    need, parts, reserve = footprint(collective, numel, element_size, args, comm)
    line = (f"{collective.name}: per-rank memory {memory} B ({source}); SPEC rule: {memory} B x "
            f"{factor:g} = {int(budget)} B -> {numel} elements of {element_size} B; buffers "
            f"({' + '.join(f'{what} {share:g}' for what, share in parts)}) x "
            f"{numel * element_size} B + {reserve} B reserve = {need} B, ")
    share = f"{defaults.USABLE_MEMORY_FRACTION:.0%}"
    if need > usable:
        multiple = sum(part for _, part in parts)
        numel = _fitting_numel(collective, max(0, usable - reserve) / element_size / multiple, n)
        line += f"over the {usable} B usable ({share}), so capped; "
        if numel < 1:
            raise BenchmarkError(f"{collective.name}: a rank has {usable} B usable ({source}), "
                                 f"less than its smallest message takes ({reserve} B of reserves "
                                 "and buffers); free memory or use fewer ranks per host")
    else:
        line += f"within the {usable} B usable ({share}); "
    if numel < 1:
        raise BenchmarkError(f"{collective.name}: --mem-factor {args.mem_factor} of {memory} B per "
                             f"rank ({source}) leaves no room for one element per rank; raise "
                             "--mem-factor or free memory")
    planned = footprint(collective, numel, element_size, args, comm)[0]
    return numel, line + f"planned: {numel} elements, {planned} B"


def _is_out_of_memory(error):
    text = str(error).lower()
    return isinstance(error, torch.OutOfMemoryError) or "out of memory" in text \
        or "can't allocate memory" in text


def _size_flag(args):
    """The flag that sets the size of this run's largest message."""
    if not args.scan:
        return "--mem-factor"
    return "--max-bytes" if args.min_bytes is not None else "--maxsize"


def allocate(collective, numel, args, comm):
    """(input, output) for one size, or None on every rank when any rank lacks the memory.

    Before allocating, each rank compares what the size takes (footprint: buffers, the
    backend's staging copy, reserves) with the memory it has now: on CPU an allocation that
    succeeds can still end in the OOM killer once its pages are touched, so a scan stops
    before that, as it stops when an allocation fails. The input is an n x (E/n) tensor filled
    with the rank id, flattened (as the original).
    """
    dtype = get_dtype(args.dtype)
    need = footprint(collective, numel, dtype.itemsize, args, comm)[0]
    room, buffers = rank_memory_now(comm), None
    if need <= room:
        try:
            rows = comm.world_size if numel % comm.world_size == 0 else 1
            input = torch.ones(rows, numel // rows, dtype=dtype, device=comm.device)
            input = input.mul_(comm.rank).view(-1)
            output = None
            if collective.output_numel is not None:
                output = torch.zeros(collective.output_numel(numel, comm.world_size),
                                     dtype=dtype, device=comm.device)
            buffers = (input, output)
        except (RuntimeError, MemoryError) as error:
            if not isinstance(error, MemoryError) and not _is_out_of_memory(error):
                raise
            room = -1
    room = comm.min_over_ranks(room)  # one agreement: every rank goes on, or none does
    if room < 0:
        note(comm, f"WARNING: {collective.name}: out of memory at {numel} elements of {args.dtype} "
                   f"per rank; stopping this op here (lower {_size_flag(args)})")
        return None
    if room < need:
        note(comm, f"WARNING: {collective.name}: {numel} elements of {args.dtype} per rank take "
                   f"{need} B with the backend's copies, more than the {room} B a rank has "
                   f"free; stopping this op here (lower {_size_flag(args)})")
        return None
    return buffers
