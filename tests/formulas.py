"""SPEC §3 and §4 written out independently of the code under test."""

import math

OPS = ["all_reduce", "all_gather", "all_to_all", "reduce_scatter", "pt2pt", "broadcast"]

# Throughput and BusBW as multiples of S/t for world size n.
THROUGHPUT = {
    "all_reduce": lambda n: 2,
    "all_gather": lambda n: n,
    "all_to_all": lambda n: 1,
    "reduce_scatter": lambda n: 1,
    "broadcast": lambda n: 1,
    "pt2pt": lambda n: 1,
}
BUSBW = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: n * (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1,
    "pt2pt": lambda n: 1,
}


def expected_ops(world_size):
    return [op for op in OPS if world_size >= 2 or op != "pt2pt"]


def single_size(op, memory, mem_factor, element_size, n):
    """(factor, E) of a single-size run with the one-tensor all_gather API."""
    if op in ("all_reduce", "pt2pt", "broadcast"):
        factor = 2 * mem_factor
        return factor, int(memory * factor // element_size)
    factor = mem_factor + 0.2 if op == "all_gather" else mem_factor
    per_peer = memory * factor / element_size / n
    power = 2 ** math.floor(math.log2(per_peer))
    return factor, power * (1 if op == "all_gather" else n)


def check_bandwidth(op, n, size, duration_us, throughput, busbw, scale=8):
    """Printed figures against the formula applied to the printed size and duration."""
    rate = size / (duration_us * 1e-6) * scale / 1e9
    for printed, factor in ((throughput, THROUGHPUT[op](n)), (busbw, BUSBW[op](n))):
        expected = factor * rate
        assert abs(float(printed) - expected) <= 0.0006 + 2e-4 * expected, \
            (op, n, size, duration_us, printed, expected)
