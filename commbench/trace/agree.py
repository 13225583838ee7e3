"""Before anything runs: do the ranks' call sequences fit together? Every rank of a group must
make the same collective, of the same dtype and size, at the same position among that group's
calls, and every send must meet a receive of the same size. A replay that issued sequences that
do not fit would hang (gloo) or deadlock (nccl); this says where instead, in one line.

Every rank reads every rank's file and runs this alone: all reach the same verdict without a
word between them, and `--dry-run` runs it as one plain process."""

from collections import defaultdict

from .model import COLLECTIVES, TraceError


def _describe(call, rank, what=None):
    size = what if what is not None else f"{call.in_numel} {call.dtype}"
    extra = f" root {call.root}" if call.root is not None else ""
    return f"rank {rank} {call.op} of {size}{extra} (its call {call.index})"


def _piece(call, rank, group):
    """The size every rank of the group must agree on."""
    if call.op == "scatter":
        return call.out_numel
    if call.op == "all_to_all":
        return None  # checked pairwise
    return call.in_numel


def check(trace):
    """Raise TraceError naming the first position where the ranks disagree."""
    per_group = defaultdict(lambda: defaultdict(list))  # group -> rank -> [Call]
    for rank in sorted(trace.ranks):
        for call in trace.ranks[rank]:
            if call.op in COLLECTIVES:
                per_group[call.group][rank].append(call)
    for group in sorted(per_group, key=lambda g: (len(g), g)):
        sequences = per_group[group]
        members = list(group)
        lengths = {rank: len(sequences.get(rank, ())) for rank in members}
        shortest = min(lengths.values())
        for position in range(shortest):
            calls = {rank: sequences[rank][position] for rank in members}
            first = members[0]
            reference = calls[first]
            for rank in members[1:]:
                call = calls[rank]
                if call.signature() != reference.signature() or \
                        _piece(call, rank, group) != _piece(reference, first, group):
                    raise TraceError(
                        f"the trace's ranks disagree at the {_ordinal(position)} call in group "
                        f"{list(group)}: {_describe(reference, first)}, {_describe(call, rank)}; "
                        "replayed, the ranks would wait for each other forever")
            if reference.op == "all_to_all":
                for i, sender in enumerate(members):
                    for j, receiver in enumerate(members):
                        sent = calls[sender].in_split[j]
                        received = calls[receiver].out_split[i]
                        if sent != received:
                            raise TraceError(
                                f"the trace's ranks disagree at the {_ordinal(position)} call in "
                                f"group {list(group)} (all_to_all): rank {sender} sends {sent} "
                                f"elements to rank {receiver} (its call {calls[sender].index}), "
                                f"which expects {received} (its call {calls[receiver].index})")
        if len(set(lengths.values())) > 1:
            longest = max(members, key=lambda r: lengths[r])
            short = min(members, key=lambda r: lengths[r])
            extra = sequences[longest][shortest]
            raise TraceError(
                f"the trace's ranks disagree in group {list(group)}: rank {longest} makes "
                f"{lengths[longest]} calls in it, rank {short} {lengths[short]}; rank "
                f"{longest}'s {_ordinal(shortest)} ({extra.op}, its call {extra.index}) has no "
                "partner")
    _check_point_to_point(trace)


def _check_point_to_point(trace):
    sends, receives = defaultdict(list), defaultdict(list)  # (from, to) -> [(numel, dtype, index)]
    for rank in sorted(trace.ranks):
        for call in trace.ranks[rank]:
            parts = call.batch if call.op == "batch" else \
                [call] if call.op in ("send", "recv") else ()
            for part in parts:
                numel = part.numel if call.op == "batch" else \
                    (call.in_numel if call.op == "send" else call.out_numel)
                entry = (numel, part.dtype, call.index)
                if part.op == "send":
                    sends[(rank, part.peer)].append(entry)
                else:
                    receives[(part.peer, rank)].append(entry)
    for pair in sorted(set(sends) | set(receives)):
        sent, received = sends.get(pair, []), receives.get(pair, [])
        source, destination = pair
        for position, (out, into) in enumerate(zip(sent, received)):
            if out[:2] != into[:2]:
                raise TraceError(
                    f"the trace's ranks disagree: rank {source}'s {_ordinal(position)} send to "
                    f"rank {destination} is {out[0]} {out[1]} (its call {out[2]}), rank "
                    f"{destination}'s {_ordinal(position)} receive from it {into[0]} {into[1]} "
                    f"(its call {into[2]})")
        if len(sent) != len(received):
            raise TraceError(
                f"the trace's ranks disagree: rank {source} sends {len(sent)} message(s) to rank "
                f"{destination}, which receives {len(received)} from it; replayed, one of them "
                "would wait forever")


def _ordinal(position):
    number = position + 1
    suffix = "th" if 10 <= number % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(number % 10,
                                                                                   "th")
    return f"{number}{suffix}"
