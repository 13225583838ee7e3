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
  that touches one of its tensors' storage, else at the end of the pass."""

import json
import re

from .model import Call, Trace, TraceError

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
_ARGUMENT = re.compile(r"(?:^|,\s*)[^,()]*?\s(\w+)(?:=[^,]*)?(?=,|$)")
_TENSOR_TYPE = re.compile(r"Tensor\(([^)]*)\)")


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
                f"{'s' if len(job_groups) != 1 else ''}: {' '.join(str(list(g)) for g in job_groups[:4])})"
                if job_groups else ""),
             "PyTorch execution trace: an asynchronous call is waited for before the first later "
             "operator that touches its tensors, else at the end of the pass"]
    return Trace("execution-trace", world_size, ranks, groups=[], notes=notes)


def _calls(nodes, rank, world_size, path):
    world = tuple(range(world_size))
    comm_ids = {n.get("id") for n in nodes if str(n.get("name", "")).startswith("c10d::")}
    calls, inflight = [], {}  # storage -> req
    next_req = 0
    for node in nodes:
        name = str(node.get("name", ""))
        if node.get("ctrl_deps") in comm_ids or name.startswith("gloo:") or \
                name.startswith("nccl:") or name.startswith("## "):
            continue  # a c10d op's own children and the backend's spans
        values, types, shapes = _inputs(node)
        outputs = node.get("outputs")
        written = outputs.get("values") if isinstance(outputs, dict) else outputs
        storages = {t[1] for t in _tensors(values) + _tensors(written or [])}
        touched = sorted({inflight[s] for s in storages if s in inflight})
        if touched:
            calls.append(Call(index=len(calls), op="wait", waits=touched))
            inflight = {s: r for s, r in inflight.items() if r not in touched}
        if not name.startswith("c10d::"):
            continue
        short = name.split("::", 1)[1]
        op = OPS.get(short)
        if op is None:
            raise TraceError(f"{path}: node {node.get('id')}: {name} is an op the communication "
                             "layer does not have")
        schema = _attrs(node).get("op_schema") or ""
        try:
            names = _names(schema)
        except ValueError:
            raise TraceError(f"{path}: node {node.get('id')} ({name}): no op_schema to read "
                             "its arguments by") from None
        arguments = dict(zip(names, values))
        kinds = dict(zip(names, types))
        shape = dict(zip(names, shapes))
        call = Call(index=len(calls), op=op, group=world, function=name)
        asynchronous = bool(arguments.get("async_op", arguments.get("asyncOp", False)))
        where = f"{path}: node {node.get('id')} ({name})"
        if op != "barrier":
            first = names[0]
            call.dtype = _dtype(kinds.get(first), path, node)
        numel = lambda key: sum(t[3] for t in _tensors(arguments.get(key)))  # noqa: E731
        if op in ("all_reduce", "broadcast", "reduce"):
            call.in_numel = call.out_numel = numel(names[0])
            if op in ("all_reduce", "reduce"):
                call.reduce_op = "sum"
            if op != "all_reduce":
                call.root = world[int(arguments.get("root_rank", 0))]
        elif op in ("all_gather", "reduce_scatter", "all_to_all"):
            out_key = next(k for k in names if k.startswith("output"))
            in_key = next(k for k in names if k.startswith("input"))
            call.in_numel, call.out_numel = numel(in_key), numel(out_key)
            if op == "all_to_all":
                for key, tensor_key, field in (("input_split_sizes", in_key, "in_split"),
                                               ("output_split_sizes", out_key, "out_split")):
                    split = arguments.get(key)
                    rows = (shape.get(tensor_key) or [0])[0] or 1
                    total = numel(tensor_key)
                    if split:
                        setattr(call, field, [int(s) * (total // rows) for s in split])
        elif op in ("gather", "scatter"):
            root = int(arguments.get("root_rank", 0))
            call.root = world[root]
            mine = "input_tensors" if op == "gather" else "output_tensors"
            piece = numel(mine)
            if op == "gather":
                call.in_numel, call.out_numel = piece, piece * world_size if rank == root else 0
            else:
                call.out_numel, call.in_numel = piece, piece * world_size if rank == root else 0
        elif op in ("send", "recv"):
            peer = arguments.get("dst", arguments.get("srcRank", arguments.get("src")))
            if not isinstance(peer, int):
                raise TraceError(f"{where}: no peer rank")
            call.peer = world[peer]
            if op == "send":
                call.in_numel = numel(names[0])
            else:
                call.out_numel = numel(names[0])
            asynchronous = False  # isend and irecv are the same node; send()'s wait is inside
        if asynchronous:
            call.req = next_req
            next_req += 1
            for tensor in _tensors(values):
                inflight[tensor[1]] = call.req
        calls.append(call)
    return calls
