"""A communication trace as the replay reads it, whatever format it came in: per rank, the
calls in the order the rank issued them, each with everything needed to issue it again.

A call (`Call`) is one of:
- a collective: all_reduce, all_gather, reduce_scatter, broadcast, reduce, all_to_all, gather,
  scatter, barrier: its group as global ranks, its root as a global rank where it has one;
- a point-to-point call: send, recv (one peer, a global rank);
- batch: batched point-to-point (torch's batch_isend_irecv), its parts in `batch`;
- wait: the rank waited for the asynchronous call(s) whose `req` it names.
An asynchronous call carries `req` (a number unique on its rank); the wait that completed it
names that number. Element counts, not bytes: in_numel what the rank sends or contributes,
out_numel what it receives or ends with (all_gather: in the shard, out the whole; all_to_all:
the sums of in_split and out_split).
"""

from dataclasses import asdict, dataclass, field

from .. import opfacts
from ..errors import UsageError

FORMAT = "commbench-trace"
VERSION = 1

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all",
               "gather", "scatter", "barrier")
POINT_TO_POINT = ("send", "recv", "batch")
OPS = COLLECTIVES + POINT_TO_POINT + ("wait",)
ROOTED = opfacts.ROOTED  # a root: a global rank
REDUCING = opfacts.REDUCING  # a reduce op (reduce_op)
REDUCE_OPS = tuple(opfacts.TRACE_REDUCE_OPS)  # reduce_op's names (torch's: "product")

# The op kinds of the tables, in the suite's order: point-to-point is pt2pt, as elsewhere.
KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce",
         "gather", "scatter", "pt2pt", "barrier")


def kind(op):
    return "pt2pt" if op in POINT_TO_POINT else op


def rooted_numel(op, piece, group_size, is_root):
    """gather and scatter: (in_numel, out_numel) of a rank whose own piece is `piece` elements;
    the root sends (scatter) or receives (gather) every rank's piece, the others none."""
    whole = piece * group_size if is_root else 0
    return (piece, whole) if op == "gather" else (whole, piece)


class TraceError(UsageError):
    """A trace the replay cannot run: one line, exit 2."""


def dtype_of(name):
    """A torch dtype from its name in a trace ('float32', 'bfloat16', ...)."""
    import torch  # here: the trace's readers (report/'s too) run without torch
    value = getattr(torch, name, None) if isinstance(name, str) else None
    if not isinstance(value, torch.dtype):
        raise TraceError(f"unknown dtype {name!r}")
    return value


def dtype_name(dtype):
    return str(dtype).removeprefix("torch.")


@dataclass
class Part:
    """One send or receive of a batch."""

    op: str  # "send" or "recv"
    peer: int  # global rank
    numel: int
    dtype: str

    def record(self):
        return asdict(self)


@dataclass
class Call:
    index: int  # position in the rank's sequence, from 0
    op: str
    group: tuple = ()  # global ranks (collectives; a send's or recv's group)
    dtype: str = None
    in_numel: int = 0
    out_numel: int = 0
    root: int = None  # broadcast, reduce, gather, scatter: global rank
    peer: int = None  # send, recv: global rank
    in_split: list = None  # all_to_all: elements to each rank of the group
    out_split: list = None  # all_to_all: elements from each rank of the group
    reduce_op: str = None  # all_reduce, reduce, reduce_scatter
    req: int = None  # asynchronous: its handle's number
    waits: list = None  # op "wait": the reqs it completed
    batch: list = None  # op "batch": its Parts
    function: str = None  # what the job called (torch.distributed's name), for the reader
    step: int = None  # the job's step, where the trace knows it
    start_s: float = None  # from the trace's start, on this rank
    duration_s: float = None  # issue to completion, as the job measured it
    compute: list = None  # an execution trace's compute ops before the call (etrace.ComputeOp)

    @property
    def asynchronous(self):
        return self.req is not None

    @property
    def kind(self):
        return kind(self.op)

    @property
    def element_size(self):
        return dtype_of(self.dtype).itemsize if self.dtype else 0

    @property
    def nbytes(self):
        """The suite's Size: what the rank contributes (all_gather: its shard; pt2pt: sent plus
        received)."""
        if self.op == "batch":
            return sum(part.numel * dtype_of(part.dtype).itemsize for part in self.batch)
        return self.in_numel * self.element_size if self.op != "recv" else \
            self.out_numel * self.element_size

    def signature(self):
        """What must agree across the ranks of a group at one position."""
        return (self.op, self.dtype, self.reduce_op, self.root)

    def record(self):
        """The fields a results record and a trace file keep (None left out)."""
        fields = asdict(self)
        fields["group"] = list(self.group)
        if self.batch is not None:
            fields["batch"] = [part.record() for part in self.batch]
        return {key: value for key, value in fields.items() if value is not None}

    @classmethod
    def from_record(cls, record):
        fields = dict(record)
        fields["group"] = tuple(fields.get("group", ()))
        if fields.get("batch") is not None:
            fields["batch"] = [Part(**part) for part in fields["batch"]]
        known = cls.__dataclass_fields__
        return cls(**{key: value for key, value in fields.items() if key in known})


@dataclass
class Trace:
    """Every rank's calls. `format` names where it came from; `notes` what the replay assumes
    of it (said once, before the run)."""

    format: str
    world_size: int
    ranks: dict  # rank -> [Call]
    groups: list = field(default_factory=list)  # process groups as the job made them, in order
    source: str = None  # what recorded it (a command line, a file name)
    notes: list = field(default_factory=list)
    steps: int = None  # the job's steps the trace holds, where it knows
    directory: str = None  # where it was read from
    # rank -> seconds to add to its calls' start_s for one clock shared by the ranks (the
    # recorder's start on the wall clock); absent: start_s is on a shared clock already
    clocks: dict = field(default_factory=dict)

    def shared_start(self, rank, call):
        """`call`'s start on the clock every rank shares, or None."""
        return None if call.start_s is None else call.start_s + self.clocks.get(rank, 0.0)

    def origin(self):
        """The earliest call's start on the shared clock (what --pace counts from)."""
        starts = [self.shared_start(rank, call) for rank, calls in self.ranks.items()
                  for call in calls if call.start_s is not None]
        return min(starts) if starts else 0.0

    def calls(self, rank):
        return self.ranks[rank]

    def all_groups(self):
        """Every group any rank's calls use, plus the job's own list, in one order that every
        rank computes alike: the job's list first, then by first use, rank by rank."""
        ordered, seen = [], set()
        world = tuple(range(self.world_size))
        for group in list(self.groups) + [call.group for rank in sorted(self.ranks)
                                          for call in self.ranks[rank]]:
            group = tuple(group)
            if group and group != world and group not in seen:
                seen.add(group)
                ordered.append(group)
        return ordered
