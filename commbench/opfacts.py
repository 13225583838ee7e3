"""What each op is, one row each: its bandwidth factors, how a single-size run sizes it, its root,
whether it reduces over ranks, whether it moves data, and the report's legend of its formulas;
and the reduce ops by name. nccl-tests' descriptor, less the call: the op scripts' descriptors
(ops/, a `Collective` made with `Collective.of(FACTS[name], ...)`), the trace readers, the
replay, the doctor and report/ read these rows, and none keeps a copy.

Standard library only: report/ and db/ import no torch, and neither does this table. A new op is
a row here (docs/extending.md)."""

from collections.abc import Callable
from dataclasses import dataclass

# How a single-size run sizes its message from the memory it may use (SPEC §4).
WHOLE = "whole"  # E = M / es, with twice the memory factor (no output buffer)
GATHERED = "gathered"  # E = 2^floor(log2(M / es / n)); output is n times the input
SPLIT = "split"  # E = n * 2^floor(log2(M / es / n)); divisible by n


@dataclass(frozen=True)
class OpFacts:
    name: str
    algbw_factor: Callable[[int], float]  # Throughput = factor(n) * S / t, S the Size
    busbw_factor: Callable[[int], float]  # BusBW = factor(n) * S / t
    size_rule: str  # WHOLE, GATHERED or SPLIT
    legend: tuple[str, str]  # report.py html's legend: Throughput's and BusBW's formulas
    root: int | None = None  # the op scripts' root rank; None: the op has none
    reduces: bool = False  # --op applies; a trace's call carries a reduce op
    payload: bool = True  # False: moves no data (barrier): no sizes, no bandwidth


_ROWS = (
    OpFacts("all_reduce", lambda n: 2, lambda n: 2 * (n - 1) / n, WHOLE,
            ("2S/t", "(S/t)·2(n−1)/n"), reduces=True),
    # all_gather's and gather's Size is one rank's input; nccl-tests': the gathered n·S
    OpFacts("all_gather", lambda n: n, lambda n: n - 1, GATHERED,  # (nS/t) * (n-1)/n
            ("nS/t", "(nS/t)·(n−1)/n")),
    OpFacts("all_to_all", lambda n: 1, lambda n: (n - 1) / n, SPLIT,
            ("S/t", "(S/t)·(n−1)/n")),
    OpFacts("reduce_scatter", lambda n: 1, lambda n: (n - 1) / n, SPLIT,
            ("S/t", "(S/t)·(n−1)/n"), reduces=True),
    OpFacts("broadcast", lambda n: 1, lambda n: 1, WHOLE, ("S/t", "S/t"), root=0),
    # pt2pt's --pairs and --bidirectional scale these (ops/pt2pt.py)
    OpFacts("pt2pt", lambda n: 1, lambda n: 1, WHOLE, ("S/t", "S/t")),
    OpFacts("reduce", lambda n: 1, lambda n: 1, WHOLE,  # nccl-tests: S/t for both
            ("S/t", "S/t"), root=0, reduces=True),
    OpFacts("gather", lambda n: n, lambda n: n - 1, GATHERED,  # (nS/t) * (n-1)/n
            ("nS/t", "(nS/t)·(n−1)/n"), root=0),
    # Size is the root's whole message S, as reduce_scatter's
    OpFacts("scatter", lambda n: 1, lambda n: (n - 1) / n, SPLIT,
            ("S/t", "(S/t)·(n−1)/n"), root=0),
    # S the busiest sender's bytes; BusBW the busiest rank's bytes to or from the others (the
    # splits' own factor, ops/all_to_allv.py; all_to_all's when even). Sizes as all_to_all's.
    OpFacts("all_to_allv", lambda n: 1, lambda n: (n - 1) / n, SPLIT,
            ("S/t (S: the busiest sender's bytes)",
             "B/t (B: the busiest rank's bytes to or from the others)")),
    OpFacts("barrier", lambda n: 0, lambda n: 0, WHOLE, ("-", "-"), payload=False),
)

# The rows by name, in the legend's order.
FACTS = {row.name: row for row in _ROWS}

# --op's reductions (their order is --help's) -> the name of torch's ReduceOp member.
REDUCE_OPS = {"sum": "SUM", "prod": "PRODUCT", "min": "MIN", "max": "MAX", "avg": "AVG"}
# A trace's reductions (torch's names, lower case; the order a trace error lists them in) ->
# --op's.
TRACE_REDUCE_OPS = {"sum": "sum", "avg": "avg", "product": "prod", "min": "min", "max": "max"}

# The ops with a root, and those that reduce over ranks (a trace's call carries its reduce op).
ROOTED = tuple(row.name for row in _ROWS if row.root is not None)
REDUCING = tuple(row.name for row in _ROWS if row.reduces)
