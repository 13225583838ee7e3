"""Issuing a rank's calls again: its groups made, buffers from a pool, each call with the op,
sizes, dtype, splits, root or peer the trace gives, asynchronous where the trace's was and
waited where it waited, a batch of sends and receives as one batch.

Times: a synchronous call's from its issue to its return (device synchronised); an asynchronous
one's from its issue to its completion (its Work's future where it has one, else the return of
its wait), as the recorder measured the job's. A pass's time runs from a barrier to the last
completion.

Isolated (replay.py --isolated), each call is timed as PARAM's comms replay times it in its
default, blocking mode (train/comms/pt/commsTraceReplay.py, runComms): a barrier of the call's
group (device synchronised before and after), then the timer from the issue to the call's
completion (its Works waited, the device synchronised), then another barrier, untimed. An
asynchronous call is waited at once; the trace's wait for it is then a no-op.

With `check`, inputs hold known values and each output is compared once its call is complete:
ones for the reductions (the sum is the group's size, exact in every dtype up to 256 ranks), and
w(sender, receiver) = (7 sender + 3 receiver) mod 97 + 1 for whatever travels from one rank to
another, so an element in the wrong place or from the wrong rank shows."""

import time

import torch
import torch.distributed

from ..opfacts import REDUCE_OPS, TRACE_REDUCE_OPS
from .model import dtype_of
from .replayed import REPLAYED


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
        self.fill_gap = None  # --pace compute: fill_gap(seconds) computes that long
        self.compute_ops = None  # --pace compute on an execution trace: etcompute.Runner
        self.gaps = [None] * len(self.calls)  # the job's gap before each call (compute.gaps)

    def make_groups(self, pairs=False):
        """Every group of the trace, on every rank, in one order (trace.all_groups); with
        `pairs` (--isolated) also every pair of ranks that send to each other, for the barrier
        that isolates a send or a receive."""
        made = []
        extra = sorted({tuple(sorted((rank, call.peer))) for rank, calls in self.trace.ranks.items()
                        for call in calls if call.op in ("send", "recv")}) if pairs else []
        known = set(self.trace.all_groups())
        for group in self.trace.all_groups() + [p for p in extra
                                                if p not in known and p != self.world]:
            handle = torch.distributed.new_group(list(group))
            if self.rank in group:
                self.handles[group] = handle
            made.append(group)
        return made

    def _group(self, call):
        return None if call.group in ((), self.world) else self.handles[call.group]

    def _barrier_group(self, call):
        """--isolated: the group whose barrier sets `call` apart: its own; for a send or a
        receive the pair's; for a batch the world's."""
        if call.op in ("send", "recv"):
            pair = tuple(sorted((self.rank, call.peer)))
            return None if pair == self.world else self.handles[pair]
        return None if call.op == "batch" else self._group(call)

    def _isolated(self, call, inp, out):
        """(start, seconds) of `call` alone between barriers, timed as PARAM's runComms."""
        group, comm = self._barrier_group(call), self.comm
        comm.synchronize()
        self.dist.barrier(group=group)
        comm.synchronize()
        start = time.perf_counter()
        for work in self.issue(call, inp, out):
            work.wait()
        comm.synchronize()
        seconds = time.perf_counter() - start
        self.dist.barrier(group=group)
        return start, seconds

    def _back_to_back(self, call, inp, out, inflight, times):
        """Issue `call` and time it; an asynchronous one is put in flight instead, timed at its
        completion. Its start."""
        start = time.perf_counter()
        works = self.issue(call, inp, out)
        if call.asynchronous and works:
            inflight[call.req] = _InFlight(call, works, (inp, out), start)
            return start
        self.comm.synchronize()
        times[call.index] = time.perf_counter() - start
        return start

    def _arrive(self, call, index, began, base):
        """--pace: wait until `call`'s start in the job, on the shared clock; with --pace
        compute, first the job's gap before it filled with compute (cut short at the call's
        start in the job: a call late already gets less, so the ranks keep the job's
        arrivals)."""
        at = began + (self.trace.shared_start(self.rank, call) - base)
        if self.fill_gap is not None and self.gaps[index]:  # no later than the call's start
            self.fill_gap(min(self.gaps[index], at - time.perf_counter()))
        while time.perf_counter() < at:  # a job's gap, however long, is no stall
            time.sleep(max(0.0, min(1.0, at - time.perf_counter())))
            self.steps += 1

    def reduce_op(self, call):
        """The layer's own ReduceOp member (deepspeed.comm has its own enum)."""
        layer = self.dist if hasattr(self.dist, "ReduceOp") else torch.distributed
        return getattr(layer.ReduceOp, REDUCE_OPS[TRACE_REDUCE_OPS[call.reduce_op or "sum"]])

    def function(self, name):
        """The layer's `name` (torch.distributed's where the layer has none)."""
        return getattr(self.dist, name, None) or getattr(torch.distributed, name)

    # -- buffers, what they hold under --check, issuing: each op's row in replayed.REPLAYED

    def buffers(self, call):
        """(input, output) tensors; the same one twice for in-place ops; None where none."""
        return REPLAYED[call.op].buffers(self.pool.take, call)

    def fill(self, call, inp, out):
        REPLAYED[call.op].fill(call, self.rank, inp)
        if out is not None and out is not inp:
            out.zero_()

    def wrong(self, call, inp, out):
        """Elements that differ from what the call should have left."""
        expected = REPLAYED[call.op].expected(call, self.rank, inp, out)
        return sum(int((tensor != torch.full_like(tensor, number)).sum())
                   for tensor, number in expected if tensor.numel())

    def issue(self, call, inp, out):
        """Issue `call`; its Works (a list, empty when it ran synchronously)."""
        asynchronous = call.asynchronous
        work = REPLAYED[call.op].issue(self, call, inp, out, self._group(call), asynchronous)
        if isinstance(work, list):  # a batch's: waited already when synchronous
            return work
        return [work] if asynchronous and work is not None and not isinstance(work, int) else []

    # -- a pass

    def run_pass(self, check=False, pace=False, isolated=False):
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
            if pace and self.compute_ops is not None and call.compute:
                self.compute_ops.run(call.compute)  # the job's own compute before the call
            if pace and call.start_s is not None:
                self._arrive(call, call.index, began, base)
            if call.op == "wait":
                for req in call.waits:
                    finish(req)
                continue
            inp, out = self.buffers(call)
            if check:
                self.fill(call, inp, out)
            if isolated:
                start, times[call.index] = self._isolated(call, inp, out)
            else:
                start = self._back_to_back(call, inp, out, inflight, times)
            starts[call.index] = start - began
            if call.req is not None and call.req in inflight:
                continue  # its time and its check at its wait
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
