"""Each torch.distributed function the suite counts and records, described once.

A `Function` says, for one torch.distributed function (by the names of its bound arguments):
- `op`: the suite's op it counts as (the strategies' accounting: all_reduce, all_gather,
  reduce_scatter, broadcast, reduce, all_to_all, gather, scatter, pt2pt, barrier);
- `nbytes`: the bytes of one call by the suite's Size convention, the input tensor's bytes on
  this rank (all_gather: this rank's shard; reduce_scatter: the whole input; pt2pt: bytes sent
  plus bytes received);
- `describe`: what a trace keeps of the call (its op, dtype, elements in and out, root, peer,
  splits, reduce op), given where it ran (`Where`: the group's global ranks, this rank);
- `always_async`: issued without waiting whatever `async_op` says (isend, irecv, a batch).

`FUNCTIONS` is the table both readers use: trace.accounting.Recorder (what it wraps and
counts) and trace.capture.Tracer (what it records). A function torch adds is one row here.
"""

from collections.abc import Callable
from dataclasses import dataclass

import torch

from .model import Part, dtype_name, rooted_numel


@dataclass(frozen=True)
class Where:
    """Where a call ran: its group's global ranks (in group order), this rank, and how to find
    another group's ranks (a batch's parts name their own)."""
    ranks: tuple
    rank: int
    ranks_of: Callable

    def global_rank(self, plain, in_group, ranks=None):
        """A root or peer given as a global rank, or as a rank within the group."""
        if plain is not None:
            return int(plain)
        return (ranks or self.ranks)[in_group] if in_group is not None else None


@dataclass(frozen=True)
class Function:
    op: str
    nbytes: Callable[[dict], int]
    describe: Callable[[Where, dict], dict]
    always_async: bool = False


# ---------------------------------------------------------------------------- tensors

def _bytes(tensor):
    return tensor.numel() * tensor.element_size() if isinstance(tensor, torch.Tensor) else 0


def _total(tensors):
    return sum(_bytes(t) for t in tensors or ())


def _numel(tensor):
    return tensor.numel() if isinstance(tensor, torch.Tensor) else 0


def _dtype(tensor):
    return dtype_name(tensor.dtype) if isinstance(tensor, torch.Tensor) else None


def _first(tensors):
    return next((t for t in tensors or () if isinstance(t, torch.Tensor)), None)


def reduce_op_name(op):
    """The trace's name of a ReduceOp (None: torch's default, sum)."""
    if op is None:
        return "sum"
    name = getattr(op, "name", None) or str(op).rsplit(".", 1)[-1]
    return {"premul_sum": "sum"}.get(name.lower(), name.lower())


def _rows_to_elements(split, tensor):
    """torch's split sizes count rows of dimension 0; the trace counts elements."""
    if split is None:
        return None
    row = tensor.numel() // tensor.shape[0] if tensor.dim() and tensor.shape[0] else 1
    return [int(count) * row for count in split]


# ---------------------------------------------------------------------------- what a trace keeps

def _all_reduce(tensors):
    def describe(_where, a):
        chosen = tensors(a)
        numel = sum(_numel(t) for t in chosen)
        return dict(op="all_reduce", dtype=_dtype(_first(chosen)), in_numel=numel,
                    out_numel=numel, reduce_op=reduce_op_name(a.get("op")))
    return describe


def _all_gather_list(_where, a):
    return dict(op="all_gather", dtype=_dtype(a["tensor"]), in_numel=_numel(a["tensor"]),
                out_numel=sum(_numel(t) for t in a["tensor_list"]))


def _all_gather_tensor(_where, a):
    return dict(op="all_gather", dtype=_dtype(a["input_tensor"]),
                in_numel=_numel(a["input_tensor"]), out_numel=_numel(a["output_tensor"]))


def _all_gather_coalesced(_where, a):
    inputs = a["input_tensor_list"]
    return dict(op="all_gather", dtype=_dtype(_first(inputs)),
                in_numel=sum(_numel(t) for t in inputs),
                out_numel=sum(_numel(t) for out in a["output_tensor_lists"] for t in out))


def _reduce_scatter_list(_where, a):
    return dict(op="reduce_scatter", dtype=_dtype(a["output"]),
                in_numel=sum(_numel(t) for t in a["input_list"]),
                out_numel=_numel(a["output"]), reduce_op=reduce_op_name(a.get("op")))


def _reduce_scatter_tensor(_where, a):
    return dict(op="reduce_scatter", dtype=_dtype(a["input"]), in_numel=_numel(a["input"]),
                out_numel=_numel(a["output"]), reduce_op=reduce_op_name(a.get("op")))


def _broadcast(where, a):
    numel = _numel(a["tensor"])
    return dict(op="broadcast", dtype=_dtype(a["tensor"]), in_numel=numel, out_numel=numel,
                root=where.global_rank(a.get("src"), a.get("group_src")))


def _reduce(where, a):
    numel = _numel(a["tensor"])
    return dict(op="reduce", dtype=_dtype(a["tensor"]), in_numel=numel, out_numel=numel,
                root=where.global_rank(a.get("dst"), a.get("group_dst")),
                reduce_op=reduce_op_name(a.get("op")))


def _all_to_all_single(where, a):
    inp, out, g = a["input"], a["output"], len(where.ranks)
    in_split = _rows_to_elements(a.get("input_split_sizes"), inp) or [_numel(inp) // g] * g
    out_split = _rows_to_elements(a.get("output_split_sizes"), out) or [_numel(out) // g] * g
    return dict(op="all_to_all", dtype=_dtype(inp), in_numel=sum(in_split),
                out_numel=sum(out_split), in_split=in_split, out_split=out_split)


def _all_to_all_list(_where, a):
    in_split = [_numel(t) for t in a["input_tensor_list"]]
    out_split = [_numel(t) for t in a["output_tensor_list"]]
    return dict(op="all_to_all", dtype=_dtype(_first(a["input_tensor_list"])),
                in_numel=sum(in_split), out_numel=sum(out_split), in_split=in_split,
                out_split=out_split)


def _rooted(op, root_key):
    def describe(where, a):
        root = where.global_rank(a.get(root_key), a.get(f"group_{root_key}"))
        in_numel, out_numel = rooted_numel(op, _numel(a["tensor"]), len(where.ranks),
                                           root == where.rank)
        return dict(op=op, dtype=_dtype(a["tensor"]), in_numel=in_numel, out_numel=out_numel,
                    root=root)
    return describe


def _send(where, a):
    return dict(op="send", dtype=_dtype(a["tensor"]), in_numel=_numel(a["tensor"]),
                peer=where.global_rank(a.get("dst"), a.get("group_dst")))


def _recv(where, a):
    return dict(op="recv", dtype=_dtype(a["tensor"]), out_numel=_numel(a["tensor"]),
                peer=where.global_rank(a.get("src"), a.get("group_src")))


def _batch(where, a):
    parts = []
    for p2p in a["p2p_op_list"]:
        sends = "send" in getattr(p2p.op, "__name__", "")
        peer = where.global_rank(getattr(p2p, "peer", None), getattr(p2p, "group_peer", None),
                                 where.ranks_of(getattr(p2p, "group", None)))
        parts.append(Part("send" if sends else "recv", peer, _numel(p2p.tensor),
                          _dtype(p2p.tensor)))
    return dict(op="batch", batch=parts, group=(),
                in_numel=sum(p.numel for p in parts if p.op == "send"),
                out_numel=sum(p.numel for p in parts if p.op == "recv"))


def _barrier(_where, _a):
    return dict(op="barrier")


def _tensor(a):
    return _bytes(a["tensor"])


def _input(a):
    return _bytes(a["input"])


def _input_tensor(a):
    return _bytes(a["input_tensor"])


# ---------------------------------------------------------------------------- the table

FUNCTIONS = {
    "all_reduce": Function("all_reduce", _tensor, _all_reduce(lambda a: [a["tensor"]])),
    "all_reduce_coalesced": Function("all_reduce", lambda a: _total(a["tensors"]),
                                     _all_reduce(lambda a: a["tensors"])),
    "all_gather": Function("all_gather", _tensor, _all_gather_list),
    "all_gather_into_tensor": Function("all_gather", _input_tensor, _all_gather_tensor),
    "all_gather_single": Function("all_gather", _input_tensor, _all_gather_tensor),
    "_all_gather_base": Function("all_gather", _input_tensor, _all_gather_tensor),
    "all_gather_coalesced": Function("all_gather", lambda a: _total(a["input_tensor_list"]),
                                     _all_gather_coalesced),
    "reduce_scatter": Function("reduce_scatter", lambda a: _total(a["input_list"]),
                               _reduce_scatter_list),
    "reduce_scatter_tensor": Function("reduce_scatter", _input, _reduce_scatter_tensor),
    "reduce_scatter_single": Function("reduce_scatter", _input, _reduce_scatter_tensor),
    "_reduce_scatter_base": Function("reduce_scatter", _input, _reduce_scatter_tensor),
    "broadcast": Function("broadcast", _tensor, _broadcast),
    "reduce": Function("reduce", _tensor, _reduce),
    "all_to_all_single": Function("all_to_all", _input, _all_to_all_single),
    "all_to_all": Function("all_to_all", lambda a: _total(a["input_tensor_list"]),
                           _all_to_all_list),
    "gather": Function("gather", _tensor, _rooted("gather", "dst")),
    "scatter": Function("scatter", _tensor, _rooted("scatter", "src")),
    "send": Function("pt2pt", _tensor, _send),
    "recv": Function("pt2pt", _tensor, _recv),
    "isend": Function("pt2pt", _tensor, _send, always_async=True),
    "irecv": Function("pt2pt", _tensor, _recv, always_async=True),
    "batch_isend_irecv": Function(
        "pt2pt", lambda a: sum(_bytes(op.tensor) for op in a["p2p_op_list"]), _batch,
        always_async=True),
    "barrier": Function("barrier", lambda a: 0, _barrier),
    "monitored_barrier": Function("barrier", lambda a: 0, _barrier),
}
