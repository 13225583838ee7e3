"""Each op of a trace as the replay engine issues and checks it, described once (`REPLAYED`):
its buffers, what its input holds under --check, what its output must then hold, and the
call that issues it. The engine (engine.py) looks a call's op up here; an op the trace readers
produce (model.OPS, less `wait`, which the engine's pass handles) is one row.

Known values (engine.py's docstring): ones for the reductions, w(sender, receiver) for
whatever travels from one rank to another."""

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed


def value(sender, receiver):
    """What travels from `sender` to `receiver` under --check."""
    return (7 * sender + 3 * receiver) % 97 + 1


@dataclass(frozen=True)
class Replayed:
    buffers: Callable  # (take, call) -> (input, output): take(dtype, numel) gives a tensor
    fill: Callable  # (call, rank, input): the known input under --check
    expected: Callable  # (call, rank, input, output) -> [(tensor, value it must hold)]
    issue: Callable  # (engine, call, input, output, group, async_op) -> a Work, None, or a list


# ------------------------------------------------------------------------------ buffers

def _in_place(take, call):
    tensor = take(call.dtype, call.in_numel)
    return tensor, tensor


def _in_and_out(take, call):
    return (take(call.dtype, call.in_numel) if call.in_numel else None,
            take(call.dtype, call.out_numel) if call.out_numel else None)


def _parts(take, call):
    return [take(part.dtype, part.numel) for part in call.batch], None


def _no_buffers(take, call):
    return None, None


# ------------------------------------------------------------------------------ inputs

def _ones(call, rank, inp):
    inp.fill_(1)


def _own(call, rank, inp):
    inp.fill_(value(rank, 0))


def _roots(call, rank, inp):
    inp.fill_(value(call.root, 0) if rank == call.root else 0)


def _to_each(call, rank, inp):
    if call.op == "scatter" and rank != call.root:
        return
    group = call.group
    splits = call.in_split or [call.in_numel // len(group)] * len(group)
    for receiver, chunk in zip(group, inp.split(splits)):
        chunk.fill_(value(rank, receiver))


def _to_root(call, rank, inp):
    inp.fill_(value(rank, call.root))


def _to_peer(call, rank, inp):
    inp.fill_(value(rank, call.peer))


def _to_peers(call, rank, inp):
    for part, tensor in zip(call.batch, inp):
        tensor.fill_(value(rank, part.peer) if part.op == "send" else 0)


def _nothing(call, rank, inp):
    return None


# ------------------------------------------------------------------------------ outputs

def _reduced(call, rank, inp, out):
    if call.op == "reduce" and rank != call.root:
        return []
    return [(out, len(call.group) if (call.reduce_op or "sum") == "sum" else 1)]


def _from_root(call, rank, inp, out):
    return [(out, value(call.root, 0))]


def _from_each(call, rank, inp, out):
    return list(zip(out.chunk(len(call.group)), [value(r, 0) for r in call.group]))


def _each_to_me(call, rank, inp, out):
    if call.op == "gather" and rank != call.root:
        return []
    pieces = out.split(call.out_split) if call.op == "all_to_all" else out.chunk(len(call.group))
    return list(zip(pieces, [value(r, rank) for r in call.group]))


def _root_to_me(call, rank, inp, out):
    return [(out, value(call.root, rank))]


def _peer_to_me(call, rank, inp, out):
    return [(out, value(call.peer, rank))]


def _peers_to_me(call, rank, inp, out):
    return [(tensor, value(part.peer, rank)) for part, tensor in zip(call.batch, inp)
            if part.op == "recv"]


def _unchecked(call, rank, inp, out):
    return []


# ------------------------------------------------------------------------------ issuing

def _all_reduce(engine, call, inp, out, group, async_op):
    return engine.function("all_reduce")(inp, op=engine.reduce_op(call), group=group,
                                         async_op=async_op)


def _all_gather(engine, call, inp, out, group, async_op):
    return engine.function("all_gather_into_tensor")(out, inp, group=group, async_op=async_op)


def _reduce_scatter(engine, call, inp, out, group, async_op):
    return engine.function("reduce_scatter_tensor")(out, inp, op=engine.reduce_op(call),
                                                    group=group, async_op=async_op)


def _broadcast(engine, call, inp, out, group, async_op):
    return engine.function("broadcast")(inp, call.root, group=group, async_op=async_op)


def _reduce(engine, call, inp, out, group, async_op):
    return engine.function("reduce")(inp, call.root, op=engine.reduce_op(call), group=group,
                                     async_op=async_op)


def _all_to_all(engine, call, inp, out, group, async_op):
    return engine.function("all_to_all_single")(out, inp, call.out_split, call.in_split,
                                                group=group, async_op=async_op)


def _gather(engine, call, inp, out, group, async_op):
    chunks = list(out.chunk(len(call.group))) if engine.rank == call.root else None
    return torch.distributed.gather(inp, chunks, dst=call.root, group=group, async_op=async_op)


def _scatter(engine, call, inp, out, group, async_op):
    chunks = list(inp.chunk(len(call.group))) if engine.rank == call.root else None
    return torch.distributed.scatter(out, chunks, src=call.root, group=group, async_op=async_op)


def _send(engine, call, inp, out, group, async_op):
    d = torch.distributed
    return d.isend(inp, call.peer) if async_op else d.send(inp, call.peer)


def _recv(engine, call, inp, out, group, async_op):
    d = torch.distributed
    return d.irecv(out, call.peer) if async_op else d.recv(out, call.peer)


def _batch(engine, call, inp, out, group, async_op):
    """Its Works (a list) when asynchronous; waited here, and none, when not."""
    d = torch.distributed
    works = d.batch_isend_irecv([d.P2POp(d.isend if part.op == "send" else d.irecv, tensor,
                                         part.peer) for part, tensor in zip(call.batch, inp)])
    if not async_op:
        for work in works:
            work.wait()
        return []
    return list(works)


def _barrier(engine, call, inp, out, group, async_op):
    return torch.distributed.barrier(group=group, async_op=async_op)


REPLAYED = {
    "all_reduce": Replayed(_in_place, _ones, _reduced, _all_reduce),
    "all_gather": Replayed(_in_and_out, _own, _from_each, _all_gather),
    "reduce_scatter": Replayed(_in_and_out, _ones, _reduced, _reduce_scatter),
    "broadcast": Replayed(_in_place, _roots, _from_root, _broadcast),
    "reduce": Replayed(_in_place, _ones, _reduced, _reduce),
    "all_to_all": Replayed(_in_and_out, _to_each, _each_to_me, _all_to_all),
    "gather": Replayed(_in_and_out, _to_root, _each_to_me, _gather),
    "scatter": Replayed(_in_and_out, _to_each, _root_to_me, _scatter),
    "barrier": Replayed(_no_buffers, _nothing, _unchecked, _barrier),
    "send": Replayed(_in_and_out, _to_peer, _unchecked, _send),
    "recv": Replayed(_in_and_out, _nothing, _peer_to_me, _recv),
    "batch": Replayed(_parts, _to_peers, _peers_to_me, _batch),
}
