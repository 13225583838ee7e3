"""PARAM's basic comms trace (facebookresearch/param, et_replay's commsTraceParser
`_parseBasicTrace`): per rank a JSON list, one object a call:

    {"comms": "all_reduce", "req": 3, "in_msg_size": 1024, "out_msg_size": 1024,
     "dtype": "Float", "pg_id": 0, "global_ranks": [0, 1], "world_size": 2,
     "startTime_ns": 1700000000000}

Sizes are element counts; all_to_allv carries in_split and out_split (elements); root, src_rank
and dst_rank are global ranks; "wait" names the req it waits for; use_batch marks a send or
receive of a batch; "init" entries define groups (pg_id, global_ranks). Names are PARAM's own
(any case, underscores optional: allreduce, all_gather_base, ...). What PARAM's format does not
say, the replay assumes: a call is asynchronous when a later wait names its req, consecutive
use_batch sends and receives are one batch, and a call without global_ranks is the world's."""

from .model import REDUCING, ROOTED, Call, Part, Trace, TraceError, rooted_numel

ALIASES = {
    "allreduce": "all_reduce", "allgather": "all_gather", "allgatherbase": "all_gather",
    "allgatherintotensor": "all_gather", "reducescatter": "reduce_scatter",
    "reducescatterbase": "reduce_scatter", "reducescattertensor": "reduce_scatter",
    "alltoall": "all_to_all", "alltoallv": "all_to_all", "alltoallbase": "all_to_all",
    "alltoallsingle": "all_to_all", "broadcast": "broadcast", "reduce": "reduce",
    "gather": "gather", "scatter": "scatter", "barrier": "barrier", "wait": "wait",
    "send": "send", "isend": "send", "recv": "recv", "irecv": "recv", "recvanysource": "recv",
    "init": "init",
}
DTYPES = {"float": "float32", "float32": "float32", "double": "float64", "float64": "float64",
          "half": "float16", "float16": "float16", "bfloat16": "bfloat16", "bf16": "bfloat16",
          "int": "int32", "int32": "int32", "long": "int64", "int64": "int64", "byte": "uint8",
          "uint8": "uint8", "char": "int8", "int8": "int8", "bool": "bool", "short": "int16",
          "int16": "int16"}


def op_name(name):
    key = "".join(ch for ch in str(name).lower() if ch.isalpha())
    return ALIASES.get(key)


def read(documents, files, world_size):
    ranks = {}
    groups = []
    for rank, entries in documents.items():
        ranks[rank] = _calls(entries, rank, world_size, files[rank], groups)
    return Trace("param-basic", world_size, ranks, groups=groups,
                 notes=["PARAM basic trace: a call is asynchronous where a later wait names its "
                        "req; consecutive use_batch sends and receives are one batch"])


def _field(entry, name, where):
    if name not in entry:
        raise TraceError(f"{where}: no {name!r}")
    return entry[name]


class _Reader:
    """One rank's entries read in order: the groups its init entries define, the batch being
    gathered, the reqs that later waits name (and a batch's later parts' reqs, its own)."""

    def __init__(self, entries, rank, world_size, groups):
        self.rank, self.world, self.groups = rank, tuple(range(world_size)), groups
        self.by_pg = {}
        self.waited = {entry.get("req") for entry in entries
                       if op_name(entry.get("comms")) == "wait"}
        self.calls, self.batch = [], None
        self.alias = {}  # the req of a batch's later part -> the batch's req (one completion)

    def req(self, entry):
        """The entry's req where a later wait names it (then the call is asynchronous)."""
        return entry.get("req") if entry.get("req") in self.waited else None

    def add(self, call, in_batch=False):
        self.calls.append(call)
        if not in_batch:
            self.batch = None

    def entry(self, entry, op, name, where):
        ranks = entry.get("global_ranks")
        if op == "init":
            if ranks:
                self.by_pg[entry.get("pg_id")] = tuple(ranks)
                if tuple(ranks) != self.world and tuple(ranks) not in self.groups:
                    self.groups.append(tuple(ranks))
            return
        group = tuple(ranks) if ranks else self.by_pg.get(entry.get("pg_id"), self.world)
        started = entry.get("startTime_ns")  # the wall clock's: shared by the ranks
        start_s = started / 1e9 if isinstance(started, (int, float)) else None
        if op == "wait":
            req = entry.get("req")
            self.add(Call(index=len(self.calls), op="wait", waits=[self.alias.get(req, req)],
                          start_s=start_s, function=name))
        elif op == "barrier":
            self.add(Call(index=len(self.calls), op="barrier", group=group, function=name,
                          start_s=start_s, req=self.req(entry)))
        elif op in ("send", "recv"):
            self.point_to_point(entry, op, name, where, start_s)
        else:
            self.collective(entry, op, name, where, group, start_s)

    def point_to_point(self, entry, op, name, where, start_s):
        dtype = _dtype(entry, where)
        in_numel, out_numel = _field(entry, "in_msg_size", where), \
            _field(entry, "out_msg_size", where)
        peer = _field(entry, "dst_rank" if op == "send" else "src_rank", where)
        numel = in_numel if op == "send" else out_numel
        if not entry.get("use_batch"):
            self.add(Call(index=len(self.calls), op=op, peer=peer, dtype=dtype,
                          in_numel=numel if op == "send" else 0,
                          out_numel=numel if op == "recv" else 0, function=name,
                          start_s=start_s, req=self.req(entry)))
            return
        if self.batch is None:
            self.batch = Call(index=len(self.calls), op="batch", batch=[], function="batch",
                              start_s=start_s)
            self.add(self.batch, in_batch=True)
        self.batch.batch.append(Part(op, peer, numel, dtype))
        req = entry.get("req")
        if req in self.waited and self.batch.req is None:
            self.batch.req = req
        elif req in self.waited:
            self.alias[req] = self.batch.req

    def collective(self, entry, op, name, where, group, start_s):
        dtype = _dtype(entry, where)
        call = Call(index=len(self.calls), op=op, group=group, dtype=dtype,
                    in_numel=_field(entry, "in_msg_size", where),
                    out_numel=_field(entry, "out_msg_size", where), function=name,
                    start_s=start_s, req=self.req(entry))
        if op in ROOTED:
            call.root = entry.get("root", group[0])
        if op in REDUCING:
            call.reduce_op = "sum"
        if op == "all_to_all":
            call.in_split, call.out_split = entry.get("in_split") or None, \
                entry.get("out_split") or None
        if op in ("gather", "scatter"):  # the file's sizes are the root's
            piece = call.in_numel if op == "gather" else call.out_numel
            call.in_numel, call.out_numel = rooted_numel(op, piece, len(group),
                                                         call.root == self.rank)
        self.add(call)


def _dtype(entry, where):
    dtype = DTYPES.get(str(_field(entry, "dtype", where)).lower())
    if dtype is None:
        raise TraceError(f"{where}: dtype {entry['dtype']!r} (PARAM's names: "
                         f"{', '.join(sorted(DTYPES))})")
    return dtype


def _calls(entries, rank, world_size, path, groups):
    reader = _Reader(entries, rank, world_size, groups)
    for position, entry in enumerate(entries):
        where = f"{path}: entry {position}"
        if "compute" in entry and "comms" not in entry:
            continue  # PARAM's compute entries: the replay is of communication only
        name = _field(entry, "comms", where)
        op = op_name(name)
        if op is None:
            raise TraceError(f"{where}: {name!r} is an op the communication layer does not have")
        reader.entry(entry, op, name, f"{where} ({name})")
    for call in reader.calls:  # a batch's parts share one req; the batch sums them
        if call.op == "batch":
            call.in_numel = sum(p.numel for p in call.batch if p.op == "send")
            call.out_numel = sum(p.numel for p in call.batch if p.op == "recv")
    return reader.calls
