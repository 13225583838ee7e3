"""SPEC §3 and §4 written out independently of the code under test."""

import math

OPS = ["all_reduce", "all_gather", "all_to_all", "reduce_scatter", "pt2pt", "broadcast"]
# The four that nccl-tests and PARAM have besides (run_all.py runs them with their flags or --all).
MORE_OPS = ["reduce", "gather", "scatter", "barrier"]

# Throughput and BusBW as multiples of S/t for world size n.
THROUGHPUT = {
    "all_reduce": lambda n: 2,
    "all_gather": lambda n: n,
    "all_to_all": lambda n: 1,
    "reduce_scatter": lambda n: 1,
    "broadcast": lambda n: 1,
    "pt2pt": lambda n: 1,
    # nccl-tests doc/PERFORMANCE.md: reduce S/t; gather the gathered nS/t; scatter, whose Size
    # is the root's whole message as reduce_scatter's, S/t.
    "reduce": lambda n: 1,
    "gather": lambda n: n,
    "scatter": lambda n: 1,
}
BUSBW = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: n * (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1,
    "pt2pt": lambda n: 1,
    "reduce": lambda n: 1,
    "gather": lambda n: n - 1,
    "scatter": lambda n: (n - 1) / n,
}


def expected_ops(world_size):
    return [op for op in OPS if world_size >= 2 or op != "pt2pt"]


def _round(op, elements, n):
    if op in ("all_reduce", "pt2pt", "broadcast"):
        return int(elements)
    per_peer = elements / n
    power = 2 ** math.floor(math.log2(per_peer)) if per_peer >= 1 else 0
    return power * (1 if op == "all_gather" else n)


def single_size(op, memory, mem_factor, element_size, n):
    """(factor, E) of a single-size run by SPEC §4's rule, with the one-tensor all_gather API."""
    if op in ("all_reduce", "pt2pt", "broadcast"):
        factor = 2 * mem_factor
    else:
        factor = mem_factor + 0.2 if op == "all_gather" else mem_factor
    return factor, _round(op, memory * factor / element_size, n)


# Bytes per rank as a multiple of the input on a CPU backend (gloo): input, output, and the
# copy gloo stages the data through (all_gather gathers into a temporary n-fold output;
# reduce_scatter reduces a copy of its input), as measured by benchmarks/memory.py.
CPU_FOOTPRINT = {
    "all_reduce": lambda n: 1,
    "all_gather": lambda n: 1 + n + n,
    "all_to_all": lambda n: 2,
    "reduce_scatter": lambda n: 1 + 1 / n + 1,
    "pt2pt": lambda n: 1,
    "broadcast": lambda n: 1,
}
MIB = 1 << 20


def planned_single_size(op, memory, mem_factor, element_size, n, check=False):
    """E of a single-size run on CPU: SPEC's E, or less so that the footprint, with 64 MiB for
    the backend (and 64 MiB more for --check), fits in 90% of the per-rank memory."""
    nominal = single_size(op, memory, mem_factor, element_size, n)[1]
    usable = int(memory * 0.9) - 64 * MIB - (64 * MIB if check else 0)
    elements = max(0, usable) / element_size / CPU_FOOTPRINT[op](n)  # footprint counts all
    if op in ("all_reduce", "pt2pt", "broadcast"):
        fitting = int(elements)
    elif op == "all_gather":
        fitting = 2 ** math.floor(math.log2(elements)) if elements >= 1 else 0
    else:
        fitting = n * 2 ** math.floor(math.log2(elements / n)) if elements >= n else 0
    return min(nominal, fitting)


def check_bandwidth(op, n, size, duration_us, throughput, busbw, scale=8):
    """Printed figures against the formula applied to the printed size and duration."""
    rate = size / (duration_us * 1e-6) * scale / 1e9
    for printed, factor in ((throughput, THROUGHPUT[op](n)), (busbw, BUSBW[op](n))):
        expected = factor * rate
        assert abs(float(printed) - expected) <= 0.0006 + 2e-4 * expected, \
            (op, n, size, duration_us, printed, expected)
