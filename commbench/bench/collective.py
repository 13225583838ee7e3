"""The descriptor an op script fills in (nccl-tests' idea): buffers, the one call, the
bandwidth factors, the single-size rule and the expected result. Bandwidth comes from it. The
op's facts (factors, size rule, whether it reduces or moves data) come from its row of
opfacts.FACTS (`Collective.of`)."""

import functools
from collections.abc import Callable
from dataclasses import dataclass

from ..opfacts import GATHERED, SPLIT, WHOLE, OpFacts  # noqa: F401  (the ops' names)


@dataclass(frozen=True)
class Collective:
    """What nccl-tests calls a collective's descriptor: all the harness needs to know."""

    name: str
    # bind(comm, input, output, async_op) -> a zero-argument callable that issues the op once
    # and returns its work handle (or None). Bound once per size: the timed loop only calls it.
    bind: Callable
    output_numel: Callable[[int, int], int] | None  # (E, n) -> elements; None: in place
    algbw_factor: Callable[[int], float]  # Throughput = factor(n) * S / t
    busbw_factor: Callable[[int], float]  # BusBW = factor(n) * S / t
    size_rule: str  # WHOLE, GATHERED or SPLIT
    # --check: expected(values, rank, n, E, index) -> the exact result at output positions
    # `index` (an int64 tensor) of this rank, where values(s, j) is rank s's input element j;
    # values.reduce(terms) applies --op over ranks. None: this rank's result is not defined
    # (reduce and gather leave every rank but the root as they are).
    expected: Callable | None
    # Reduces over ranks: --op applies (bind passes *comm.reduce_args after the buffers and
    # the root), and check values stay exact under the reduction.
    reduces: bool = False
    min_world_size: int = 1
    shown_world_size: int | None = None  # pt2pt's header always says 2 devices
    debug: Callable | None = None  # (comm, input, output) -> str, for --debug
    # n -> the multiple of the input a CPU backend copies it through while the op runs
    # (gloo, measured by benchmarks/memory.py); counted by the single-size memory plan.
    staging: Callable[[int], float] | None = None
    # False: the op moves no data (barrier): one row of latency, no bandwidth, no sizes.
    payload: bool = True
    # --check of an op whose result is not in a buffer: check(comm, call, args) -> wrong count
    # on this rank (barrier: ranks that left before the last one arrived).
    check: Callable | None = None
    # (args) -> the descriptor this run's flags make of it (all_to_allv: the splits of
    # --a2a-matrix or --a2a-skew); run_collective asks once, before the op's first size.
    specialize: Callable | None = None
    # n -> the header's words for this op in a world (or group) of n ranks (all_to_allv: whose
    # splits); a UsageError where the flags cannot make the op for n ranks
    qualifier: Callable[[int], str] | None = None
    # (E, n, element size) -> fields every record of a size adds (all_to_allv: bytes per rank,
    # the matrix); a busbw_Bps or throughput_Bps among them is per second of the op
    record_fields: Callable | None = None
    # (args, element size) -> E of a single-size run when the flags fix it (a matrix file in
    # bytes), or None: SPEC §4's memory plan
    fixed_numel: Callable | None = None
    # (n, E, element size, seconds) -> messages a second, for a Msgs/s column (pt2pt's pairs)
    rate: Callable | None = None
    # (parser) -> None: adds the op's own flags (all_to_allv's splits, pt2pt's pairs) to the op
    # scripts' command line, which every op script shares (run_all.py runs them all); each a
    # field of settings.Settings too
    flags: Callable | None = None

    @classmethod
    def of(cls, facts: OpFacts, **fields) -> "Collective":
        """The descriptor of the op whose facts are `facts` (its row of opfacts.FACTS), with the
        rest of its fields: its call, buffers and expected result."""
        given = dict(name=facts.name, algbw_factor=facts.algbw_factor,
                     busbw_factor=facts.busbw_factor, size_rule=facts.size_rule,
                     reduces=facts.reduces, payload=facts.payload)
        return cls(**{**given, **fields})  # a field given here wins (all_to_allv's busbw)


def bound(function, *args, async_op=False):
    """`function(*args)` ready to call once per trial. async_op is passed only when true: torch's
    collective wrappers spend about 0.5 us on a keyword argument, which a world of one measures."""
    if async_op:
        return functools.partial(function, *args, async_op=True)
    return functools.partial(function, *args)


def get_bw(collective, size, duration, world_size, bw_unit):
    """(Throughput, BusBW) in bytes/s, or bits/s with Gbps, for `size` bytes per rank;
    (None, None) for an op without payload."""
    if not collective.payload:
        return None, None
    scale = 8 if bw_unit == "Gbps" else 1
    rate = size / duration
    return (collective.algbw_factor(world_size) * rate * scale,
            collective.busbw_factor(world_size) * rate * scale)
