"""Reading a trace directory: one file per rank, the rank the last number in the file's name,
in one of three formats recognised from the files themselves:

- the suite's own (`commbench.trace.record`, `parallel_bench.py --trace`): a JSON object with
  "format": "commbench-trace";
- PyTorch's execution trace (torch.profiler.ExecutionTraceObserver): a JSON object with
  "schema" and "nodes" (etrace.py);
- PARAM's basic comms trace: a JSON list of objects with "comms" (param.py);
- DeepSpeed's comms logger: log_summary(return_dict=True)'s dictionary ("summary" and
  "metadata") or get_raw_data()'s, saved as JSON (dscomms.py).

Every problem is one line (TraceError) naming the file and, where it is one call, the call.
"""

import gzip
import json
import os
import re

from .model import (COLLECTIVES, FORMAT, OPS, REDUCE_OPS, ROOTED, Call, Trace, TraceError,
                    dtype_of)

_NUMBER = re.compile(r"(\d+)")


def rank_files(directory):
    """{rank: path} of the trace files in `directory`."""
    if os.path.isfile(directory):
        raise TraceError(f"{directory}: a file, not a directory: replay.py reads a directory "
                         "holding one trace file per rank (rank0.json, rank1.json, ...); give "
                         f"the one this file is in: {os.path.dirname(directory) or '.'}")
    if not os.path.isdir(directory):
        raise TraceError(f"{directory}: no such directory (replay.py reads a directory holding "
                         "one trace file per rank)")
    found = {}
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if name.startswith(".") or name.endswith(".tmp") or not os.path.isfile(path):
            continue
        numbers = _NUMBER.findall(name.split(".", 1)[0]) or _NUMBER.findall(name)
        if not numbers:
            continue
        rank = int(numbers[-1])
        if rank in found:
            raise TraceError(f"{directory}: two files for rank {rank}: "
                             f"{os.path.basename(found[rank])} and {name}")
        found[rank] = path
    if not found:
        raise TraceError(f"{directory}: no trace files (one per rank, the rank the last number "
                         "in the name: rank0.json, rank1.json, ...)")
    missing = [rank for rank in range(max(found) + 1) if rank not in found]
    if missing:
        raise TraceError(f"{directory}: no file for rank {missing[0]} (found ranks "
                         f"{_ranges(sorted(found))})")
    return found


def _ranges(ranks):
    return ", ".join(str(r) for r in ranks) if len(ranks) < 8 else f"{ranks[0]}-{ranks[-1]}"


def load_json(path):
    try:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8") as source:
            return json.load(source)
    except (OSError, EOFError) as error:
        raise TraceError(f"{path}: cannot read it: {getattr(error, 'strerror', None) or error}") \
            from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise TraceError(f"{path}: not JSON: {error}") from None


def is_commbench(document):
    return isinstance(document, dict) and document.get("format") == FORMAT


def is_execution_trace(document):
    return isinstance(document, dict) and "nodes" in document and "schema" in document


def is_param_basic(document):
    """A PARAM basic trace's rank file: a list of entries, one at least with "comms"; or an empty
    list (a rank that made no call: in a directory of them, the others name the format)."""
    return isinstance(document, list) and all(isinstance(entry, dict) for entry in document) and \
        (not document or any("comms" in entry for entry in document))


def recognise(document):
    if is_commbench(document):
        return "commbench"
    if is_execution_trace(document):
        return "execution-trace"
    if is_param_basic(document):
        return "param-basic"
    from .dscomms import recognise as deepspeed_kind
    if deepspeed_kind(document):
        return "deepspeed-comms"
    return None


FORMAT_NAMES = {"commbench": "commbench trace", "execution-trace": "PyTorch execution trace",
                "param-basic": "PARAM basic comms trace",
                "deepspeed-comms": "DeepSpeed comms logger"}


def read(directory):
    """The Trace in `directory`, checked call by call."""
    from . import dscomms, etrace, param
    files = rank_files(directory)
    world_size = len(files)
    documents, kinds = {}, {}
    for rank, path in files.items():
        documents[rank] = load_json(path)
        kinds[rank] = recognise(documents[rank])
        if kinds[rank] is None:
            raise TraceError(f"{path}: not a trace this replay reads (the suite's own, PyTorch's "
                             "execution trace, PARAM's basic comms trace, or DeepSpeed's comms "
                             "logger's dictionary)")
    if len(set(kinds.values())) > 1:
        raise TraceError(f"{directory}: files of different formats ({files[0]} is "
                         f"{FORMAT_NAMES[kinds[0]]})")
    kind = kinds[0]
    readers = {"commbench": _read_commbench, "execution-trace": etrace.read,
               "param-basic": param.read}
    if kind == "deepspeed-comms":
        trace = dscomms.read(documents, files, world_size,
                             {rank: dscomms.recognise(d) for rank, d in documents.items()})
    else:
        trace = readers[kind](documents, files, world_size)
    trace.directory = directory
    for rank, calls in trace.ranks.items():
        validate(calls, rank, trace.world_size, files[rank])
    return trace


def _read_commbench(documents, files, world_size):
    ranks, groups, steps, source, clocks = {}, [], None, None, {}
    for rank, document in documents.items():
        path = files[rank]
        if document.get("version") != 1:
            raise TraceError(f"{path}: commbench trace version {document.get('version')!r}; this "
                             "replay reads version 1")
        if document.get("world_size") != world_size:
            raise TraceError(f"{path}: recorded on {document.get('world_size')} ranks, but the "
                             f"directory holds {world_size} rank files")
        if document.get("rank") != rank:
            raise TraceError(f"{path}: holds rank {document.get('rank')}'s calls, not rank "
                             f"{rank}'s (the last number in a file's name is its rank)")
        calls = []
        for position, entry in enumerate(document.get("calls") or ()):
            if not isinstance(entry, dict):
                raise TraceError(f"{path}: call {position} is not an object")
            try:
                calls.append(Call.from_record(entry))
            except TypeError as error:
                raise TraceError(f"{path}: call {position}: {error}") from None
        ranks[rank] = calls
        if isinstance(document.get("start_time"), (int, float)):
            clocks[rank] = float(document["start_time"])
        groups = groups or [tuple(g) for g in document.get("groups") or ()]
        steps = steps or document.get("steps")
        source = source or document.get("source")
    if len(clocks) != len(ranks):
        clocks = {}
    return Trace("commbench", world_size, ranks, groups=groups, source=source, steps=steps,
                 clocks=clocks)


def _is_count(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def validate(calls, rank, world_size, path):
    """Each call on its own: a known op and dtype, counts, ranks inside the world."""
    reqs = set()
    for position, call in enumerate(calls):
        where = f"{path}: call {position} ({call.op})"
        call.index = position
        if call.op not in OPS:
            raise TraceError(f"{where}: an op the communication layer does not have "
                             f"(replayed: {', '.join(OPS)})")
        if call.op == "wait":
            unknown = [req for req in call.waits or () if req not in reqs]
            if unknown:
                raise TraceError(f"{where}: waits for request {unknown[0]}, which no earlier "
                                 "asynchronous call made")
            continue
        if call.req is not None:
            reqs.add(call.req)
        if call.op == "batch":
            _check_batch(call, rank, world_size, where)
            continue
        if call.op != "barrier":
            _check_dtype(call.dtype, where)
        if not (_is_count(call.in_numel) and _is_count(call.out_numel)):
            raise TraceError(f"{where}: element counts {call.in_numel!r} in, {call.out_numel!r} "
                             "out")
        if call.op in ("send", "recv"):
            _check_peer(call.peer, rank, world_size, where)
            continue
        _check_collective(call, rank, world_size, where)


def _check_batch(call, rank, world_size, where):
    if not call.batch:
        raise TraceError(f"{where}: a batch without sends or receives")
    for part in call.batch:
        _check_dtype(part.dtype, where)
        _check_peer(part.peer, rank, world_size, where)
        if not _is_count(part.numel):
            raise TraceError(f"{where}: element count {part.numel!r}")


def _check_collective(call, rank, world_size, where):
    """A collective's group, root, reduction and counts against its group's size (all_to_all's
    even splits filled in where the trace gives none)."""
    group = call.group or tuple(range(world_size))
    call.group = tuple(group)
    if any(not _is_count(r) or r >= world_size for r in group) or len(set(group)) != len(group):
        raise TraceError(f"{where}: group {list(group)} is not a set of ranks of a "
                         f"{world_size}-rank world")
    if rank not in group:
        raise TraceError(f"{where}: rank {rank} is not in its own call's group {list(group)}")
    if call.op in ROOTED and call.root not in group:
        raise TraceError(f"{where}: root {call.root!r} is not a rank of the group "
                         f"{list(group)}")
    if call.reduce_op is not None and call.reduce_op not in REDUCE_OPS:
        raise TraceError(f"{where}: reduction {call.reduce_op!r} (replayed: "
                         f"{', '.join(REDUCE_OPS)})")
    g = len(group)
    if call.op == "all_to_all":
        for name in ("in_split", "out_split"):
            split = getattr(call, name)
            if split is None:
                numel = call.in_numel if name == "in_split" else call.out_numel
                if numel % g:
                    raise TraceError(f"{where}: {numel} elements do not split evenly "
                                     f"among {g} ranks, and the trace gives no {name}")
                setattr(call, name, [numel // g] * g)
            elif len(split) != g or not all(_is_count(x) for x in split):
                raise TraceError(f"{where}: {name} {split!r} is not {g} element counts")
        call.in_numel, call.out_numel = sum(call.in_split), sum(call.out_split)
    elif call.op == "all_gather" and call.out_numel != call.in_numel * g:
        raise TraceError(f"{where}: gathers {call.in_numel} elements from each of {g} ranks "
                         f"into {call.out_numel}")
    elif call.op == "reduce_scatter" and call.in_numel != call.out_numel * g:
        raise TraceError(f"{where}: reduces {call.in_numel} elements to {call.out_numel} per "
                         f"rank over {g} ranks")
    assert call.op in COLLECTIVES


def _check_dtype(name, where):
    try:
        dtype_of(name)
    except TraceError as error:
        raise TraceError(f"{where}: {error}") from None


def _check_peer(peer, rank, world_size, where):
    if not _is_count(peer) or peer >= world_size:
        raise TraceError(f"{where}: peer {peer!r} is not a rank of the {world_size}-rank world")
    if peer == rank:
        raise TraceError(f"{where}: rank {rank} sends to or receives from itself")
