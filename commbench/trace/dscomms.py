"""DeepSpeed's comms logger (`"comms_logger": {"enabled": true}` in a DeepSpeed config), saved
per rank as JSON by the two lines docs/replay.md shows:

    summary = deepspeed.comm.log_summary(return_dict=True)
    json.dump(summary, open(f"comms/rank{deepspeed.comm.get_rank()}.json", "w"))

or the raw data, `deepspeed.comm.comms_logger.get_raw_data()`, dumped alike. DeepSpeed 0.19.8's
dictionaries (deepspeed/utils/comms_logging.py):
- log_summary: {"summary": {op: {msg_size: {"count", "total_latency_ms", "avg_latency_ms",
  "tput_avg_gbps", "busbw_avg_gbps", "msg_size_bytes", "msg_size_str"}}}, "straggler_analysis":
  ..., "metadata": {"world_size", "rank", "timestamp"}};
- get_raw_data: {op: {msg_size: [count, [latency_ms, ...], [algbw, ...], [busbw, ...]]}}.
An op's name is deepspeed.comm's function (its log_name; with the logger's debug on,
"op | [Caller Func: f]"); msg_size is the bytes of the call's tensor argument: the input, this
rank's shard for all_gather, the whole input for reduce_scatter.

The logger keeps per op and size a count and latencies, no order, no dtype, no group, no peer.
So the replay is a weighted workload: each op and size, its count of calls, in a stated order
(the suite's op order, then ascending size), on the world's group, float32 elements where the
size divides by 4, else uint8; each call's recorded duration DeepSpeed's latency (raw: that
call's own; summary: the op and size's mean, total / count). Point-to-point calls are refused
(the logger keeps no peer), as are ops the logger does not log.
"""

from ..opfacts import FACTS
from .model import Call, Trace, TraceError

# deepspeed.comm's logged functions -> the replay's op
OPS = {
    "all_reduce": "all_reduce", "all_reduce_coalesced": "all_reduce",
    "inference_all_reduce": "all_reduce",
    "all_gather": "all_gather", "all_gather_into_tensor": "all_gather",
    "all_gather_base": "all_gather",
    "reduce_scatter": "reduce_scatter", "reduce_scatter_tensor": "reduce_scatter",
    "reduce_scatter_base": "reduce_scatter",
    "all_to_all_single": "all_to_all", "all_to_all": "all_to_all",
    "broadcast": "broadcast", "reduce": "reduce", "barrier": "barrier",
    "monitored_barrier": "barrier",
}
SEND_RECV = ("send", "recv", "isend", "irecv")
POINT_TO_POINT = SEND_RECV + ("batch_isend_irecv",)
SKIPPED = ("log_summary_barrier",)  # the logger's own barrier
ORDER = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce",
         "barrier")


def is_summary(document):
    """Whether a JSON document has the shape of log_summary(return_dict=True) saved."""
    return isinstance(document, dict) and isinstance(document.get("summary"), dict) and \
        isinstance(document.get("metadata"), dict)


def is_raw(document):
    """Whether a JSON document has the shape of get_raw_data() saved (it keeps no world size)."""
    return isinstance(document, dict) and bool(document) and all(
        isinstance(sizes, dict) and bool(sizes) and all(
            isinstance(v, list) and len(v) == 4 and isinstance(v[0], int)
            for v in sizes.values())
        for sizes in document.values())


def recognise(document):
    """'summary' (log_summary's dict, with the world size the replay needs), 'raw'
    (get_raw_data's) or None."""
    if is_summary(document) and "world_size" in document["metadata"]:
        return "summary"
    if is_raw(document):
        return "raw"
    return None


def _op(name, path):
    base = str(name).split(" | ", 1)[0].strip()
    if base in SKIPPED:
        return None, base
    if base in POINT_TO_POINT:
        raise TraceError(f"{path}: {name}: DeepSpeed's comms logger keeps no peer of a "
                         "point-to-point call: it cannot be replayed (replay a trace of the "
                         "suite's own, or PyTorch's execution trace, for those)")
    if base not in OPS:
        raise TraceError(f"{path}: op {name!r}: not an op DeepSpeed's comms logger logs (it "
                         f"logs {', '.join(sorted(OPS))} and point-to-point calls)")
    return OPS[base], base


def _entries(document, kind, path):
    """[(op, deepspeed name, size, count, latencies_ms or None, summary figures)]."""
    source = document["summary"] if kind == "summary" else document
    found = []
    for name, sizes in source.items():
        op, base = _op(name, path)
        if op is None:
            continue
        if not isinstance(sizes, dict):
            raise TraceError(f"{path}: {name}: not a table of message sizes")
        for size_key, value in sizes.items():
            try:
                size = int(size_key)
            except ValueError:
                raise TraceError(f"{path}: {name}: message size {size_key!r} is not a number "
                                 "of bytes") from None
            if kind == "summary":
                if not isinstance(value, dict) or not isinstance(value.get("count"), int):
                    raise TraceError(f"{path}: {name} of {size} B: no count")
                count, latencies = value["count"], None
                figures = {k: value.get(k) for k in ("total_latency_ms", "avg_latency_ms",
                                                     "tput_avg_gbps", "busbw_avg_gbps")}
            else:
                count, latencies = value[0], list(value[1])
                figures = {"total_latency_ms": sum(latencies),
                           "avg_latency_ms": sum(latencies) / len(latencies) if latencies
                           else None,
                           "tput_avg_gbps": _mean(value[2]), "busbw_avg_gbps": _mean(value[3])}
            if count < 1 or size < 0:
                raise TraceError(f"{path}: {name} of {size} B: count {count}")
            found.append((op, base, size, count, latencies, figures))
    found.sort(key=lambda e: (ORDER.index(e[0]), e[2], e[1]))
    return found


def _mean(values):
    return sum(values) / len(values) if values else None


def _call(op, size, world_size, path, name):
    n = world_size
    dtype, element = ("float32", 4) if size % 4 == 0 else ("uint8", 1)
    numel = size // element
    call = Call(index=0, op=op, group=tuple(range(n)), dtype=dtype, in_numel=numel,
                out_numel=numel, function=name)
    facts = FACTS[op]
    if facts.reduces:
        call.reduce_op = "sum"
    if op == "all_gather":
        call.out_numel = numel * n
    elif op == "reduce_scatter":
        if numel % n:
            raise TraceError(f"{path}: {name} of {size} B does not split among {n} ranks")
        call.out_numel = numel // n
    elif op == "all_to_all" and numel % n:
        raise TraceError(f"{path}: {name} of {size} B does not split among {n} ranks")
    elif facts.root is not None:  # broadcast, reduce (the logger keeps no gather, scatter)
        call.root = facts.root
    elif op == "barrier":
        call.dtype, call.in_numel, call.out_numel = None, 0, 0
    return call


def read(documents, files, world_size, kinds):
    ranks, rows = {}, {}
    for rank, document in documents.items():
        path, kind = files[rank], kinds[rank]
        if kind == "summary":
            recorded = document["metadata"].get("world_size")
            if recorded != world_size:
                raise TraceError(f"{path}: DeepSpeed's comms logger ran on {recorded} ranks, but "
                                 f"the directory holds {world_size} rank files")
            if document["metadata"].get("rank") not in (None, rank):
                raise TraceError(f"{path}: holds rank {document['metadata'].get('rank')}'s "
                                 f"log, not rank {rank}'s (the last number in a file's name is "
                                 "its rank)")
        calls, table = [], []
        for op, name, size, count, latencies, figures in _entries(document, kind, path):
            first = len(calls)
            for k in range(count):
                call = _call(op, size, world_size, path, name)
                call.index = len(calls)
                if latencies is not None and k < len(latencies):
                    call.duration_s = latencies[k] / 1e3
                elif figures.get("total_latency_ms") is not None:
                    call.duration_s = figures["total_latency_ms"] / count / 1e3
                calls.append(call)
            table.append({"op": name, "kind": op, "msg_size_bytes": size, "count": count,
                          "first": first, **figures})
        ranks[rank], rows[rank] = calls, table
    what = "log_summary(return_dict=True)" if kinds[0] == "summary" else "get_raw_data()"
    trace = Trace("deepspeed-comms", world_size, ranks, source=f"DeepSpeed comms logger, {what}",
                  notes=["DeepSpeed's comms logger keeps counts per op and size, no order: "
                         "replayed as a weighted workload, each op and size its count of calls "
                         "back to back, ops in the order " + ", ".join(ORDER) + ", sizes "
                         "ascending; the world's group; float32 elements (uint8 where the size "
                         "does not divide by 4); the job time is DeepSpeed's latencies"])
    trace.logger_rows = rows
    return trace


def lines(trace, medians, world_size):
    """DeepSpeed's figures beside the replay's, per op and size (rank 0's)."""
    from ..table import convert_size
    out = [f"{'DeepSpeed op':<24}{'size':>12}{'count':>8}{'DS avg lat':>13}{'replay lat':>13}"
           f"{'DS busbw':>12}{'replay busbw':>14}"]
    for row in trace.logger_rows[0]:
        times = [medians[i] for i in range(row["first"], row["first"] + row["count"])
                 if medians[i] is not None]
        replay = sum(times) / len(times) if times else None
        ds = row.get("avg_latency_ms")
        busbw = _busbw(row["kind"], row["msg_size_bytes"], replay, world_size) if replay else None
        out.append(f"{row['op']:<24}{convert_size(row['msg_size_bytes']):>12}{row['count']:>8}"
                   f"{_ms(ds and ds / 1e3):>13}{_ms(replay):>13}"
                   f"{_gbps(row.get('busbw_avg_gbps')):>12}{_gbps(busbw):>14}")
    out.append("DS: DeepSpeed's logger (its trimmed mean latency and busbw, Gbps); replay: the "
               "median over passes of this op and size's calls, busbw by DeepSpeed's formula")
    return out


def _busbw(kind, size, seconds, n):
    """DeepSpeed's calc_bw_log busbw, Gbps, for `size` bytes in `seconds`."""
    if kind in ("all_gather", "reduce_scatter"):
        return size * n / seconds * (n - 1) / n * 8 / 1e9
    if kind == "all_reduce":
        return size / seconds * 2 * (n - 1) / n * 8 / 1e9
    if kind == "all_to_all":
        return size / seconds * (n - 1) / n * 8 / 1e9
    return size / seconds * 8 / 1e9


def _ms(seconds):
    return "-" if seconds is None else f"{seconds * 1e3:.3f} ms"


def _gbps(value):
    return "-" if value is None else f"{value:.3f}"
