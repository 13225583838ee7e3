"""Issuing a rank's calls again: its groups made, buffers from a pool, each call with the op,
sizes, dtype, splits, root or peer the trace gives, asynchronous where the trace's was and
waited where it waited, a batch of sends and receives as one batch.

Times: a synchronous call's from its issue to its return (device synchronised); an asynchronous
one's from its issue to its completion (its Work's future where it has one, else the return of
its wait), as the recorder measured the job's. A pass's time runs from a barrier to the last
completion.

With `check`, inputs hold known values and each output is compared once its call is complete:
ones for the reductions (the sum is the group's size, exact in every dtype up to 256 ranks), and
w(sender, receiver) = (7 sender + 3 receiver) mod 97 + 1 for whatever travels from one rank to
another, so an element in the wrong place or from the wrong rank shows."""

import time

import torch
import torch.distributed

from .model import dtype_of

REDUCE_OPS = {"sum": "SUM", "avg": "AVG", "product": "PRODUCT", "min": "MIN", "max": "MAX"}


def value(sender, receiver):
    return (7 * sender + 3 * receiver) % 97 + 1


class Pool:
    """1-D tensors by (dtype, numel), reused once the call that held them completes."""

    def __init__(self, device):
        self.device, self.free = device, {}

    def take(self, dtype, numel):
        stack = self.free.get((dtype, numel))
        return stack.pop() if stack else torch.zeros(numel, dtype=dtype_of(dtype),
                                                     device=self.device)

    def give(self, tensors):
        for tensor in tensors:
            self.free.setdefault((str(tensor.dtype).removeprefix("torch."), tensor.numel()),
                                 []).append(tensor)


def bytes_in_flight(calls):
    """The most bytes a rank's calls hold at once (asynchronous ones until their wait)."""
    held, peak, by_req = 0, 0, {}
    for call in calls:
        if call.op == "wait":
            for req in call.waits:
                held -= by_req.pop(req, 0)
            continue
        need = call.in_numel * call.element_size + call.out_numel * call.element_size \
            if call.op != "batch" else call.nbytes
        peak = max(peak, held + need)
        if call.asynchronous:
            by_req[call.req] = by_req.get(call.req, 0) + need
            held += need
    return peak


class _InFlight:
    __slots__ = ("call", "works", "tensors", "start", "done")

    def __init__(self, call, works, tensors, start):
        self.call, self.works, self.tensors, self.start = call, works, tensors, start
        self.done = []
        future = None
        try:
            future = works[-1].get_future() if works and works[-1] is not None else None
        except (RuntimeError, AttributeError):  # gloo's send and receive works have none
            future = None
        if future is not None:
            future.then(lambda _f: self.done.append(time.perf_counter()))


class Replayer:
    def __init__(self, comm, trace, rank):
        self.comm, self.trace, self.rank = comm, trace, rank
        self.calls = trace.calls(rank)
        self.current_call = None  # the call issued or waited last (a timeout's line names it)
        self.opening = False  # in the barrier that opens a pass, before its first call
        self.steps = 0  # moves at every call issued or waited (replay's stall deadline reads it)
        self.dist = comm.dist
        self.pool = Pool(comm.device)
        self.handles = {}  # group (global ranks) -> ProcessGroup, for this rank's groups
        self.world = tuple(range(trace.world_size))

    def make_groups(self):
        """Every group of the trace, on every rank, in one order (trace.all_groups)."""
        made = []
        for group in self.trace.all_groups():
            handle = torch.distributed.new_group(list(group))
            if self.rank in group:
                self.handles[group] = handle
            made.append(group)
        return made

    def _group(self, call):
        return None if call.group in ((), self.world) else self.handles[call.group]

    def _reduce(self, call):
        """The layer's own ReduceOp member (deepspeed.comm has its own enum)."""
        layer = self.dist if hasattr(self.dist, "ReduceOp") else torch.distributed
        return getattr(layer.ReduceOp, REDUCE_OPS[call.reduce_op or "sum"])

    def _function(self, name):
        return getattr(self.dist, name, None) or getattr(torch.distributed, name)

    # -- buffers, and what they hold under --check

    def buffers(self, call):
        """(input, output) tensors; the same one twice for in-place ops; None where none."""
        take = self.pool.take
        if call.op in ("all_reduce", "broadcast", "reduce"):
            tensor = take(call.dtype, call.in_numel)
            return tensor, tensor
        if call.op == "barrier":
            return None, None
        if call.op == "batch":
            return [take(part.dtype, part.numel) for part in call.batch], None
        inp = take(call.dtype, call.in_numel) if call.in_numel else None
        out = take(call.dtype, call.out_numel) if call.out_numel else None
        return inp, out

    def fill(self, call, inp, out):
        rank, group = self.rank, call.group
        if call.op in ("all_reduce", "reduce", "reduce_scatter"):
            inp.fill_(1)
        elif call.op == "all_gather":
            inp.fill_(value(rank, 0))
        elif call.op == "broadcast":
            inp.fill_(value(call.root, 0) if rank == call.root else 0)
        elif call.op in ("all_to_all", "scatter"):
            if call.op == "scatter" and rank != call.root:
                return
            splits = call.in_split or [call.in_numel // len(group)] * len(group)
            for receiver, chunk in zip(group, inp.split(splits)):
                chunk.fill_(value(rank, receiver))
        elif call.op == "gather":
            inp.fill_(value(rank, call.root))
        elif call.op == "send":
            inp.fill_(value(rank, call.peer))
        elif call.op == "batch":
            for part, tensor in zip(call.batch, inp):
                tensor.fill_(value(rank, part.peer) if part.op == "send" else 0)
        if out is not None and out is not inp:
            out.zero_()

    def wrong(self, call, inp, out):
        """Elements that differ from what the call should have left."""
        rank, group = self.rank, call.group
        expected = []  # (tensor, value)
        if call.op == "all_reduce" or (call.op == "reduce" and rank == call.root):
            expected = [(out, len(group) if (call.reduce_op or "sum") == "sum" else 1)]
        elif call.op == "reduce_scatter":
            expected = [(out, len(group) if (call.reduce_op or "sum") == "sum" else 1)]
        elif call.op == "broadcast":
            expected = [(out, value(call.root, 0))]
        elif call.op == "all_gather":
            expected = list(zip(out.chunk(len(group)), [value(r, 0) for r in group]))
        elif call.op == "all_to_all":
            expected = list(zip(out.split(call.out_split), [value(r, rank) for r in group]))
        elif call.op == "gather" and rank == call.root:
            expected = list(zip(out.chunk(len(group)), [value(r, rank) for r in group]))
        elif call.op == "scatter":
            expected = [(out, value(call.root, rank))]
        elif call.op == "recv":
            expected = [(out, value(call.peer, rank))]
        elif call.op == "batch":
            expected = [(tensor, value(part.peer, rank))
                        for part, tensor in zip(call.batch, inp) if part.op == "recv"]
        return sum(int((tensor != torch.full_like(tensor, number)).sum())
                   for tensor, number in expected if tensor.numel())

    # -- issuing

    def issue(self, call, inp, out):
        """Issue `call`; its Works (a list, empty when it ran synchronously)."""
        asynchronous = call.asynchronous
        group = self._group(call)
        op = call.op
        if op == "all_reduce":
            work = self._function("all_reduce")(inp, op=self._reduce(call), group=group,
                                                async_op=asynchronous)
        elif op == "all_gather":
            work = self._function("all_gather_into_tensor")(out, inp, group=group,
                                                            async_op=asynchronous)
        elif op == "reduce_scatter":
            work = self._function("reduce_scatter_tensor")(out, inp, op=self._reduce(call),
                                                           group=group, async_op=asynchronous)
        elif op == "broadcast":
            work = self._function("broadcast")(inp, call.root, group=group, async_op=asynchronous)
        elif op == "reduce":
            work = self._function("reduce")(inp, call.root, op=self._reduce(call), group=group,
                                            async_op=asynchronous)
        elif op == "all_to_all":
            work = self._function("all_to_all_single")(out, inp, call.out_split, call.in_split,
                                                       group=group, async_op=asynchronous)
        elif op == "gather":
            chunks = list(out.chunk(len(call.group))) if self.rank == call.root else None
            work = torch.distributed.gather(inp, chunks, dst=call.root, group=group,
                                            async_op=asynchronous)
        elif op == "scatter":
            chunks = list(inp.chunk(len(call.group))) if self.rank == call.root else None
            work = torch.distributed.scatter(out, chunks, src=call.root, group=group,
                                             async_op=asynchronous)
        elif op == "send":
            work = torch.distributed.isend(inp, call.peer) if asynchronous else \
                torch.distributed.send(inp, call.peer)
        elif op == "recv":
            work = torch.distributed.irecv(out, call.peer) if asynchronous else \
                torch.distributed.recv(out, call.peer)
        elif op == "batch":
            ops = [torch.distributed.P2POp(torch.distributed.isend if part.op == "send"
                                           else torch.distributed.irecv, tensor, part.peer)
                   for part, tensor in zip(call.batch, inp)]
            works = torch.distributed.batch_isend_irecv(ops)
            if not asynchronous:
                for work in works:
                    work.wait()
                return []
            return list(works)
        else:
            work = torch.distributed.barrier(group=group, async_op=asynchronous)
        return [work] if asynchronous and work is not None and not isinstance(work, int) else []

    # -- a pass

    def run_pass(self, check=False, pace=False):
        """(seconds of each call, None for waits; its start from the pass's start; wrong
        elements of each call; the pass's seconds)."""
        calls, comm, trace = self.calls, self.comm, self.trace
        times, wrong, starts = [None] * len(calls), [0] * len(calls), [None] * len(calls)
        inflight = {}

        def finish(req):
            entry = inflight.pop(req, None)
            self.steps += 1
            if entry is None:
                return  # waited already (a second wait on one request is a no-op)
            for work in entry.works:
                work.wait()
            comm.synchronize()
            ended = entry.done[0] if entry.done else time.perf_counter()
            times[entry.call.index] = ended - entry.start
            inp, out = entry.tensors
            if check:
                wrong[entry.call.index] = self.wrong(entry.call, inp, out)
            self._release(inp, out)

        base = trace.origin()
        self.steps += 1
        self.current_call, self.opening = None, True
        self.entered = time.perf_counter()  # --per-trial: when this rank came to the pass
        comm.sync_all()
        self.opening = False
        began = self.began = time.perf_counter()
        for call in calls:
            self.current_call = call
            self.steps += 1
            if pace and call.start_s is not None:
                at = began + (trace.shared_start(self.rank, call) - base)
                while time.perf_counter() < at:  # a job's gap, however long, is no stall
                    time.sleep(max(0.0, min(1.0, at - time.perf_counter())))
                    self.steps += 1
            if call.op == "wait":
                for req in call.waits:
                    finish(req)
                continue
            inp, out = self.buffers(call)
            if check:
                self.fill(call, inp, out)
            start = time.perf_counter()
            starts[call.index] = start - began
            works = self.issue(call, inp, out)
            if call.asynchronous and works:
                inflight[call.req] = _InFlight(call, works, (inp, out), start)
                continue
            comm.synchronize()
            times[call.index] = time.perf_counter() - start
            if check:
                wrong[call.index] = self.wrong(call, inp, out)
            self._release(inp, out)
        for req in list(inflight):  # never waited in the trace: at the pass's end
            finish(req)
        comm.synchronize()
        return times, starts, wrong, time.perf_counter() - began

    def _release(self, inp, out):
        tensors = inp if isinstance(inp, list) else [t for t in (inp, out) if t is not None]
        seen, unique = set(), []
        for tensor in tensors:
            if id(tensor) not in seen:
                seen.add(id(tensor))
                unique.append(tensor)
        self.pool.give(unique)
