"""pt2pt: rank 0 sends its tensor to rank 1; every other rank stays idle. --pairs all or across:
every pair at once (0-1, 2-3, ... or i with i + n/2); --bidirectional: both ranks of a pair
send and receive at once (osu_bibw; with pairs, osu_mbw_mr)."""

import dataclasses
import functools

from commbench.bench import harness
from commbench.bench.collective import Collective
from commbench.opfacts import FACTS
from commbench.errors import UsageError


def pairs(mode, n):
    """The (sender, receiver) pairs of --pairs `mode` in a world of n: one (0, 1); all: 0-1,
    2-3, ...; across: i with i + n/2 (the first half with the second: across two hosts when
    ranks fill hosts in order)."""
    if mode == "one":
        return [(0, 1)]
    if n % 2:
        raise UsageError(f"--pairs {mode} pairs every rank with another: this world has {n} ranks "
                         "(an odd number); launch an even number, or use --pairs one")
    if mode == "all":
        return [(i, i + 1) for i in range(0, n, 2)]
    return [(i, i + n // 2) for i in range(n // 2)]


def _peer(mode, rank, n):
    """(this rank's peer, whether it sends) or (None, False) when it is in no pair."""
    for sender, receiver in pairs(mode, n):
        if rank == sender:
            return receiver, True
        if rank == receiver:
            return sender, False
    return None, False


class _Both:
    """The handles of a send and a receive, waited together."""

    def __init__(self, works):
        self._works = works

    def wait(self):
        for work in self._works:
            work.wait()


def _bind(mode, both, comm, input, output, async_op):
    peer, sends = _peer(mode, comm.rank, comm.world_size)
    if peer is None:
        return lambda: None
    dist = comm.dist
    if both:
        def exchange():
            # The first rank of a pair sends, then receives; the other the other way round. On
            # gloo and NCCL both are posted at once and run together; oneCCL's CPU isend and
            # irecv (worker offload off) return when done, so the same order on both ranks
            # would deadlock past its eager size, and this one runs the directions in turn.
            if sends:
                works = _Both([dist.isend(input, peer), dist.irecv(output, peer)])
            else:
                received = dist.irecv(output, peer)
                works = _Both([received, dist.isend(input, peer)])
            if async_op:
                return works
            works.wait()
        return exchange
    send, recv = (dist.isend, dist.irecv) if async_op else (dist.send, dist.recv)
    return functools.partial(send, input, peer) if sends else functools.partial(recv, input, peer)


def _expected(mode, both, values, rank, n, numel, index):
    """Unidirectional: a receiver ends with its sender's data, every other rank keeps its own.
    Both ways: each rank of a pair receives its peer's into the output (ranks in no pair have
    none to check)."""
    peer, sends = _peer(mode, rank, n)
    if both:
        return values(peer, index) if peer is not None else index[:0]
    return values(peer if peer is not None and not sends else rank, index)


def _message_rate(mode, both, n, numel, element_size, seconds):
    return len(pairs(mode, n)) * (2 if both else 1) / seconds if seconds > 0 else None


def specialize(args):
    """The descriptor of --pairs and --bidirectional: Throughput is every pair's bytes a second
    together (both directions counted), BusBW one pair's, and the table gains the message rate
    (messages of every pair a second, as osu_mbw_mr)."""
    mode, both = args.pairs, args.bidirectional
    if mode == "one" and not both:
        return PT2PT
    directions = 2 if both else 1

    def qualifier(n):
        chosen = pairs(mode, n)
        shown = " ".join(f"{s}-{r}" for s, r in chosen[:8]) + (" ..." if len(chosen) > 8 else "")
        return f"pairs {mode} ({shown})" + (", both ways" if both else "")

    def record_fields(numel, n, element_size):
        return {"pairs": [list(pair) for pair in pairs(mode, n)], "pairs_mode": mode,
                "bidirectional": both}

    return dataclasses.replace(
        PT2PT,
        bind=functools.partial(_bind, mode, both),
        output_numel=(lambda numel, n: numel) if both else None,
        algbw_factor=lambda n: len(pairs(mode, n)) * directions,
        busbw_factor=lambda n: directions,
        expected=functools.partial(_expected, mode, both),
        shown_world_size=2 if mode == "one" else None,
        specialize=None, qualifier=qualifier, record_fields=record_fields,
        rate=functools.partial(_message_rate, mode, both))


def flags(parser):
    """pt2pt's own flags (docs/traffic.md)."""
    parser.add_argument("--pairs", choices=("one", "all", "across"), default="one",
                        help="pt2pt: one (rank 0 to 1), all (0-1, 2-3, ... every pair at once) or "
                             "across (i with i + n/2: the first half with the second); "
                             "Throughput is then all pairs together, BusBW one pair's, and "
                             "Msgs/s their message rate (default %(default)s)")
    parser.add_argument("--bidirectional", action="store_true",
                        help="pt2pt: both ranks of a pair send and receive at once (bandwidth "
                             "counts both directions, as osu_bibw)")


PT2PT = Collective.of(
    FACTS["pt2pt"],
    bind=functools.partial(_bind, "one", False),
    output_numel=None,
    # Rank 1 ends with rank 0's data; every other rank keeps its own.
    expected=functools.partial(_expected, "one", False),
    min_world_size=2,
    shown_world_size=2,
    specialize=specialize,
    flags=flags,
)


# The original's entry points: time one size, and run the whole op (SPEC §1).
timed_pt2pt = functools.partial(harness.timed_collective, PT2PT)
run_pt2pt = functools.partial(harness.run_op, PT2PT)

