"""PyTorch's execution trace (torch.profiler.ExecutionTraceObserver, schema 1.x): per rank a
JSON object whose "nodes" are the operators the rank ran, in order. The communication is in the
c10d nodes (c10d::allreduce_, c10d::_allgather_base_, c10d::alltoall_base_, c10d::send, ...):
their "op_schema" attribute names the arguments, their inputs give tensors as
[id, storage, offset, elements, element bytes, device] with types "Tensor(float)" and the like,
splits, roots and the async flag. A "## process_group:init ##" node lists the job's groups.

What the trace does not say, and what the replay then assumes (said before the run):
- which group a call used (torch 2.13 on CPU records the process group as "<Object>"): the
  world, for every call;
- the reduction (also "<Object>"): sum;
- where an asynchronous call was waited for (no wait node): before the first later operator
  that touches one of its tensors' storage, else at the end of the pass.

What the job computed between its calls is there too, with no times: each outermost ATen
operator (one whose parent is not an ATen operator itself: aten::linear, not the aten::addmm it
runs) with its schema, arguments and shapes. Each call keeps those before it (`Call.compute`,
ComputeOp), and `replay.py --pace compute` runs them at those shapes before the call
(trace/etcompute.py), as PARAM's et_replay does; the ops after the last call are not run."""

import json
import re
from dataclasses import dataclass

from .model import REDUCING, Call, Trace, TraceError, rooted_numel

DTYPES = {"float": "float32", "double": "float64", "c10::Half": "float16", "half": "float16",
          "c10::BFloat16": "bfloat16", "int": "int32", "long int": "int64", "long": "int64",
          "short int": "int16", "short": "int16", "unsigned char": "uint8",
          "signed char": "int8", "bool": "bool"}
OPS = {"allreduce_": "all_reduce", "allreduce_coalesced_": "all_reduce",
       "allgather_": "all_gather", "_allgather_base_": "all_gather",
       "allgather_into_tensor_coalesced_": "all_gather", "allgather_coalesced_": "all_gather",
       "reduce_scatter_": "reduce_scatter", "_reduce_scatter_base_": "reduce_scatter",
       "reduce_scatter_tensor_coalesced_": "reduce_scatter", "broadcast_": "broadcast",
       "reduce_": "reduce", "gather_": "gather", "scatter_": "scatter",
       "alltoall_base_": "all_to_all", "alltoall_": "all_to_all", "send": "send",
       "recv_": "recv", "barrier": "barrier", "monitored_barrier_": "barrier"}
_TENSOR_TYPE = re.compile(r"Tensor\(([^)]*)\)")


@dataclass(frozen=True)
class ComputeOp:
    """One ATen operator the job ran between calls, as the trace keeps it."""

    name: str  # "aten::addmm"
    schema: str  # its op_schema
    values: list  # its inputs' values (a tensor: [id, storage, offset, elements, bytes, device])
    types: list  # "Tensor(float)", "Int", "GenericList[Tensor(float),...]", ...
    shapes: list


def _is_tensor(value):
    return isinstance(value, list) and len(value) == 6 and isinstance(value[5], str) and \
        all(isinstance(x, int) for x in value[:5])


def _tensors(value):
    """Every tensor descriptor inside a (nested) input value."""
    if _is_tensor(value):
        return [value]
    if isinstance(value, list):
        return [t for item in value for t in _tensors(item)]
    return []


def _names(schema):
    """Argument names from an op schema: 'c10d::send(Tensor[] tensors, ... int dst, int tag)'."""
    inside = schema[schema.index("(") + 1:schema.rindex(") ->")] if ") ->" in schema else \
        schema[schema.index("(") + 1:schema.rindex(")")]
    names, depth, current = [], 0, ""
    for ch in inside:  # split at top-level commas
        if ch == "," and depth == 0:
            names.append(current)
            current = ""
            continue
        depth += ch in "([<"
        depth -= ch in ")]>"
        current += ch
    names.append(current)
    return [part.split("=")[0].strip().split()[-1] for part in names if part.strip()]


def _attrs(node):
    return {a.get("name"): a.get("value") for a in node.get("attrs") or ()}


def _inputs(node):
    """(values, types, shapes) of a node, either schema's layout."""
    inputs = node.get("inputs")
    if isinstance(inputs, dict):
        return inputs.get("values") or [], inputs.get("types") or [], inputs.get("shapes") or []
    return inputs or [], node.get("input_types") or [], node.get("input_shapes") or []


def _dtype(type_text, path, node):
    found = _TENSOR_TYPE.search(type_text or "")
    if not found:
        raise TraceError(f"{path}: node {node.get('id')} ({node.get('name')}): no tensor type in "
                         f"{type_text!r}")
    name = DTYPES.get(found.group(1))
    if name is None:
        raise TraceError(f"{path}: node {node.get('id')} ({node.get('name')}): dtype "
                         f"{found.group(1)!r}")
    return name


def _groups(nodes, path):
    """(world size, the job's groups) from the process_group:init node."""
    for node in nodes:
        if "process_group:init" in str(node.get("name")):
            values, _, _ = _inputs(node)
            try:
                entries = json.loads(values[0])
            except (IndexError, TypeError, ValueError):
                return None, []  # truncated: PARAM's parser skips it too
            world, groups = None, []
            for entry in entries:
                ranks = entry.get("ranks") or []
                if entry.get("pg_desc") == "default_pg" or str(entry.get("pg_name")) == "0":
                    world = entry.get("group_size")
                elif ranks:
                    groups.append(tuple(ranks))
            return world, groups
    return None, []


def read(documents, files, world_size):
    ranks, job_groups = {}, []
    for rank, document in documents.items():
        path = files[rank]
        nodes = document.get("nodes")
        if not isinstance(nodes, list):
            raise TraceError(f"{path}: an execution trace without a list of nodes")
        nodes = sorted((n for n in nodes if isinstance(n, dict)), key=lambda n: n.get("id", 0))
        world, groups = _groups(nodes, path)
        if world is not None and world != world_size:
            raise TraceError(f"{path}: recorded on {world} ranks, but the directory holds "
                             f"{world_size} rank files")
        job_groups = job_groups or groups
        ranks[rank] = _calls(nodes, rank, world_size, path)
    notes = ["PyTorch execution trace: it does not say which group a call used, nor its "
             "reduction: every call is replayed in the world group, with sum"
             + (f" (the job made {len(job_groups)} other group"
                f"{'s' if len(job_groups) != 1 else ''}: "
                f"{' '.join(str(list(g)) for g in job_groups[:4])})"
                if job_groups else ""),
             "PyTorch execution trace: an asynchronous call is waited for before the first later "
             "operator that touches its tensors, else at the end of the pass"]
    return Trace("execution-trace", world_size, ranks, groups=[], notes=notes)


class _Node:
    """One c10d node's arguments by name, read the way every op's fields need."""

    def __init__(self, names, values, types, shapes, rank, world_size, where):
        self.names, self.rank, self.where = names, rank, where
        self.arguments = dict(zip(names, values))
        self.kinds = dict(zip(names, types))
        self.shape = dict(zip(names, shapes))
        self.world = tuple(range(world_size))

    def numel(self, key):
        return sum(t[3] for t in _tensors(self.arguments.get(key)))

    def asynchronous(self):
        return bool(self.arguments.get("async_op", self.arguments.get("asyncOp", False)))

    def key(self, prefix):
        return next(k for k in self.names if k.startswith(prefix))


def _one_buffer(call, n):
    call.in_numel = call.out_numel = n.numel(n.names[0])
    if call.op in REDUCING:
        call.reduce_op = "sum"
    if call.op != "all_reduce":
        call.root = n.world[int(n.arguments.get("root_rank", 0))]


def _in_and_out(call, n):
    in_key, out_key = n.key("input"), n.key("output")
    call.in_numel, call.out_numel = n.numel(in_key), n.numel(out_key)
    if call.op != "all_to_all":
        return
    for key, tensor_key, field in (("input_split_sizes", in_key, "in_split"),
                                   ("output_split_sizes", out_key, "out_split")):
        split = n.arguments.get(key)
        rows = (n.shape.get(tensor_key) or [0])[0] or 1
        if split:
            setattr(call, field, [int(s) * (n.numel(tensor_key) // rows) for s in split])


def _rooted(call, n):
    root = int(n.arguments.get("root_rank", 0))
    call.root = n.world[root]
    piece = n.numel("input_tensors" if call.op == "gather" else "output_tensors")
    call.in_numel, call.out_numel = rooted_numel(call.op, piece, len(n.world), n.rank == root)


def _peer(call, n):
    peer = n.arguments.get("dst", n.arguments.get("srcRank", n.arguments.get("src")))
    if not isinstance(peer, int):
        raise TraceError(f"{n.where}: no peer rank")
    call.peer = n.world[peer]
    if call.op == "send":
        call.in_numel = n.numel(n.names[0])
    else:
        call.out_numel = n.numel(n.names[0])


# The trace's op -> how its node's arguments become the call's fields.
_FIELDS = {"all_reduce": _one_buffer, "broadcast": _one_buffer, "reduce": _one_buffer,
           "all_gather": _in_and_out, "reduce_scatter": _in_and_out, "all_to_all": _in_and_out,
           "gather": _rooted, "scatter": _rooted, "send": _peer, "recv": _peer,
           "barrier": lambda call, n: None}


def _outermost_aten(node, names):
    """An ATen operator whose parent is none: what the job's code called, not what it ran."""
    return str(node.get("name", "")).startswith("aten::") and \
        not names.get(node.get("ctrl_deps"), "").startswith("aten::")


def _compute_op(node, values, types, shapes):
    schema = _attrs(node).get("op_schema")
    return ComputeOp(str(node.get("name")), schema, values, types, shapes) if schema else None


def _calls(nodes, rank, world_size, path):
    world = tuple(range(world_size))
    comm_ids = {n.get("id") for n in nodes if str(n.get("name", "")).startswith("c10d::")}
    names = {n.get("id"): str(n.get("name", "")) for n in nodes}
    calls, inflight = [], {}  # storage -> req
    next_req, computed = 0, []  # the compute ops since the last call
    for node in nodes:
        name = str(node.get("name", ""))
        if node.get("ctrl_deps") in comm_ids or name.startswith("gloo:") or \
                name.startswith("nccl:") or name.startswith("## "):
            continue  # a c10d op's own children and the backend's spans
        values, types, shapes = _inputs(node)
        if _outermost_aten(node, names):
            op = _compute_op(node, values, types, shapes)
            computed += [op] if op is not None else []
        outputs = node.get("outputs")
        written = outputs.get("values") if isinstance(outputs, dict) else outputs
        storages = {t[1] for t in _tensors(values) + _tensors(written or [])}
        touched = sorted({inflight[s] for s in storages if s in inflight})
        if touched:
            calls.append(Call(index=len(calls), op="wait", waits=touched))
            inflight = {s: r for s, r in inflight.items() if r not in touched}
        if not name.startswith("c10d::"):
            continue
        call, n = _call(node, name, values, types, shapes, rank, world_size, path)
        call.index, call.group = len(calls), world
        call.compute, computed = computed or None, []
        # isend and irecv are the same node as send and recv; send()'s wait is inside it
        if call.op not in ("send", "recv") and n.asynchronous():
            call.req = next_req
            next_req += 1
            for tensor in _tensors(values):
                inflight[tensor[1]] = call.req
        calls.append(call)
    return calls


def _call(node, name, values, types, shapes, rank, world_size, path):
    """One c10d node as a call (its op, dtype and the fields its op has), and its arguments."""
    op = OPS.get(name.split("::", 1)[1])
    if op is None:
        raise TraceError(f"{path}: node {node.get('id')}: {name} is an op the communication "
                         "layer does not have")
    try:
        names = _names(_attrs(node).get("op_schema") or "")
    except ValueError:
        raise TraceError(f"{path}: node {node.get('id')} ({name}): no op_schema to read "
                         "its arguments by") from None
    n = _Node(names, values, types, shapes, rank, world_size,
              f"{path}: node {node.get('id')} ({name})")
    call = Call(index=0, op=op, function=name)
    if op != "barrier":
        call.dtype = _dtype(n.kinds.get(names[0]), path, node)
    _FIELDS[op](call, n)
    return call, n
