"""all_to_allv: rank r sends splits[r][j] elements to rank j (all_to_all_single with split sizes),
the splits from --a2a-matrix, --a2a-skew or even; Size is the busiest sender's bytes."""

import dataclasses
import functools

import torch

from commbench.bench import harness
from commbench.bench.collective import Collective, bound
from commbench.flags import argument
from commbench.numbers import int_at_least
from commbench.opfacts import FACTS
from commbench.bench.traffic import Traffic, parse_skew, read_matrix


def _bind(traffic, comm, input, output, async_op):
    splits = traffic.splits(input.numel(), comm.world_size)
    rank = comm.rank
    send = splits[rank]
    receive = [row[rank] for row in splits]
    return bound(comm.dist.all_to_all_single, output[:sum(receive)], input[:sum(send)], receive,
                 send, async_op=async_op)


def _received(traffic, values, rank, n, numel, index):
    """Output element i of rank r: from the sender s whose block holds i, its element at the
    start of what it sends r plus i's place in the block. The output past what r receives is
    not the op's (an empty tensor there)."""
    splits = traffic.splits(numel, n)
    counts = torch.tensor([row[rank] for row in splits], dtype=torch.int64)
    ends = counts.cumsum(0)
    index = index[index < int(ends[-1])]
    sender = torch.searchsorted(ends.to(index.device), index, right=True)
    starts = (ends - counts).to(index.device)
    offsets = torch.tensor([sum(row[:rank]) for row in splits], dtype=torch.int64,
                           device=index.device)
    return values(sender, offsets[sender] + index - starts[sender])


def _largest_received(traffic, numel, n):
    splits = traffic.splits(numel, n)
    return max(sum(row[r] for row in splits) for r in range(n))


def specialize(args):
    """The descriptor of this run's splits."""
    traffic = Traffic.from_args(args)

    def qualifier(n):
        traffic.check_world(n)
        weights = traffic.weights(n)
        received = [sum(row[r] for row in weights) for r in range(n)]
        if len(set(received)) == 1:
            return traffic.describe()
        busiest = max(range(n), key=lambda r: (received[r], -r))
        return f"{traffic.describe()}, busiest receiver rank {busiest}"

    def record_fields(numel, n, element_size):
        fields = traffic.record(numel, n, element_size)
        return {**fields, "busbw_bytes": fields["busiest_bytes_between_ranks"]}

    return dataclasses.replace(
        ALL_TO_ALLV,
        bind=functools.partial(_bind, traffic),
        output_numel=functools.partial(_largest_received, traffic),
        busbw_factor=traffic.busbw_factor,
        expected=functools.partial(_received, traffic),
        specialize=None, qualifier=qualifier, record_fields=record_fields,
        fixed_numel=(lambda args, element_size: traffic.fixed_numel(element_size))
        if traffic.file is not None else None)


_EVEN = Traffic()

def flags(parser):
    """all_to_allv's own flags (docs/traffic.md): its splits. The matrix file is read (and
    refused) on every rank as the command line is parsed; the path is what the run keeps."""
    parser.add_argument("--a2a-matrix", type=argument(lambda text: read_matrix(text) and text),
                        default=None, metavar="FILE",
                        help="all_to_allv: an n x n CSV, row = sender, of the bytes each rank "
                             "sends each (run as written; with --scan, weights scaled so the "
                             "busiest sender sends each size)")
    parser.add_argument("--a2a-skew", type=argument(parse_skew), default=None, metavar="SKEW",
                        help="all_to_allv: zipf:S (receivers in a random popularity order, the "
                             "i-th getting 1/i^S) or hot:K[:F] (K random receivers get F times "
                             "another's share, default 8) (default: even splits)")
    parser.add_argument("--seed", type=int_at_least(0), default=0,
                        help="all_to_allv: the seed of --a2a-skew's draw (default %(default)s)")


ALL_TO_ALLV = Collective.of(
    FACTS["all_to_allv"],
    bind=functools.partial(_bind, _EVEN),
    output_numel=functools.partial(_largest_received, _EVEN),
    # the busiest rank's bytes to or from the others, per byte the busiest sender sends
    busbw_factor=_EVEN.busbw_factor,
    expected=functools.partial(_received, _EVEN),
    specialize=specialize,
    flags=flags,
)


# The original's entry points: time one size, and run the whole op (SPEC §1).
timed_all_to_allv = functools.partial(harness.timed_collective, ALL_TO_ALLV)
run_all_to_allv = functools.partial(harness.run_op, ALL_TO_ALLV)

