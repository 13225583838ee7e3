"""What a training step communicates: every torch.distributed collective and point-to-point
call, counted per step, with its bytes and its time, and the time the training thread spent
blocked in them.

While installed, a Recorder replaces the module-level functions of torch.distributed (and of
torch.distributed.distributed_c10d, where DeepSpeed reaches some of them, and the references
deepspeed.comm's backend took of them when it started) with wrappers, and puts them back when
removed. Only the outermost call counts: torch's own functions call each other (send calls
isend, all_gather_into_tensor calls all_gather_single).

Per call:
- op: the suite's names (all_reduce, all_gather, reduce_scatter, broadcast, reduce, all_to_all,
  gather, scatter, pt2pt for send/recv/isend/irecv/batch_isend_irecv, barrier);
- bytes: the suite's Size convention, the input tensor's bytes on this rank (all_gather: this
  rank's shard; reduce_scatter: the whole input; pt2pt: bytes sent plus bytes received);
- time: a synchronous call's wall time; an asynchronous one's from its issue to its
  completion (its Work's future, when it has one, else the return of its first wait()).
Blocked time: synchronous calls' durations, asynchronous calls' issue durations and the time
spent in the returned Work's wait(). The Work is handed back inside a thin proxy that times
wait() and passes everything else (get_future(), is_completed(), ...) to the real one.

With a tracer (commbench.trace.capture.Tracer), each counted call is also handed to it: its
arguments when issued, its duration when complete, and each first wait() on its Work.
"""

import contextlib
import inspect
import sys
import threading
import time

import torch
import torch.distributed
import torch.distributed.distributed_c10d as c10d

from .calls import FUNCTIONS

# torch.distributed function -> the suite's op name (each function described once: trace.calls).
OP_NAMES = {name: function.op for name, function in FUNCTIONS.items()}
# The ops in the order tables and records list them.
OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all",
       "gather", "scatter", "pt2pt", "barrier")


class StepCounts:
    """One step's communication on this rank: per op calls, bytes, time; and blocked time."""

    def __init__(self):
        self.ops = {}  # op -> [calls, bytes, time_s]
        self.blocked_s = 0.0

    def entry(self, op):
        return self.ops.setdefault(op, [0, 0, 0.0])

    def figures(self):
        """[calls, bytes, time_s] for each op of OPS, then blocked_s: a flat list of floats."""
        flat = []
        for op in OPS:
            flat += [float(x) for x in self.ops.get(op, (0, 0, 0.0))]
        return flat + [self.blocked_s]


class _TrackedWork:
    """A Work as returned by torch, with wait() timed (blocked time, and completion when the
    Work has no future). Everything else is the real Work's."""

    __slots__ = ("_work", "_recorder", "_counts", "_completed", "_call")

    def __init__(self, work, recorder, counts, entry, start, call=None):
        self._work, self._recorder, self._counts = work, recorder, counts
        done = []
        tracer = recorder.tracer

        def completed(_future=None):  # holds no reference to the Work: no cycle through C++
            now = time.perf_counter()
            with recorder.lock:
                if not done:
                    done.append(now)
                    entry[2] += now - start
                    if call is not None:
                        tracer.completed(call, now - start)

        self._completed, self._call = completed, call
        try:
            future = work.get_future()
        except (RuntimeError, AttributeError):  # gloo's send/recv works have none
            future = None
        if future is not None:
            future.then(completed)  # runs at once when the work is already complete

    def wait(self, *args, **kwargs):
        if self._call is not None:
            self._recorder.tracer.waited(self._call)
        began = time.perf_counter()
        try:
            return self._work.wait(*args, **kwargs)
        finally:
            ended = time.perf_counter()
            with self._recorder.lock:
                self._counts.blocked_s += ended - began
            self._completed()

    def __getattr__(self, name):
        return getattr(self._work, name)


class Recorder:
    """Counts communication per step while installed (install / remove), between begin_step
    and end_step; calls outside a step, or under paused(), pass through uncounted."""

    def __init__(self, tracer=None):
        self.tracer = tracer
        self.lock = threading.Lock()
        self.steps = []  # StepCounts of each finished step
        self._current = None
        self._local = threading.local()
        self._patched = []  # (holder, attribute, original)

    # -- installing

    def install(self):
        originals, wrappers = {}, {}
        for name in OP_NAMES:
            original = getattr(torch.distributed, name, None)
            if original is None:
                continue
            originals[name] = original
            wrappers[id(original)] = self._wrap(name, original)
        for module in (torch.distributed, c10d):
            for name, original in originals.items():
                if getattr(module, name, None) is original:
                    self._patch(module, name, wrappers[id(original)])
        # deepspeed.comm's torch backend kept its own references at start-up
        # (all_gather_function, reduce_scatter_function): those are replaced too.
        comm = sys.modules.get("deepspeed.comm.comm")
        backend = getattr(comm, "cdb", None) if comm is not None else None
        if backend is not None:
            for attribute, value in list(vars(backend).items()):
                if callable(value) and id(value) in wrappers:
                    self._patch(backend, attribute, wrappers[id(value)])

    def _patch(self, holder, attribute, wrapper):
        self._patched.append((holder, attribute, getattr(holder, attribute)))
        setattr(holder, attribute, wrapper)

    def remove(self):
        for holder, attribute, original in reversed(self._patched):
            setattr(holder, attribute, original)
        self._patched = []

    @contextlib.contextmanager
    def installed(self):
        self.install()
        try:
            yield self
        finally:
            self.remove()

    # -- steps

    def begin_step(self):
        self._current = StepCounts()

    def calls_in_step(self):
        """The calls of the step under way counted so far (read at a timeout)."""
        counts = self._current
        return sum(entry[0] for entry in counts.ops.values()) if counts is not None else 0

    def end_step(self):
        with self.lock:
            self.steps.append(self._current)
            self._current = None

    @contextlib.contextmanager
    def paused(self):
        """Bookkeeping calls of the benchmark itself (barriers between steps): not counted."""
        self._local.depth = getattr(self._local, "depth", 0) + 1
        try:
            yield
        finally:
            self._local.depth -= 1

    # -- the wrapper

    def _wrap(self, name, original):
        function = FUNCTIONS[name]
        op, size = function.op, function.nbytes
        signature = inspect.signature(original)
        recorder, local = self, self._local

        def counted(*args, **kwargs):
            counts = recorder._current
            if counts is None or getattr(local, "depth", 0):
                return original(*args, **kwargs)
            try:
                bound = signature.bind(*args, **kwargs)
                nbytes = size(bound.arguments)
                asynchronous = function.always_async or bool(bound.arguments.get("async_op"))
            except (TypeError, KeyError):  # a call torch itself will refuse: let it say why
                return original(*args, **kwargs)
            tracer = recorder.tracer
            call = tracer.issued(name, bound.arguments, asynchronous, len(recorder.steps)) \
                if tracer is not None else None
            local.depth = getattr(local, "depth", 0) + 1
            start = time.perf_counter()
            try:
                result = original(*args, **kwargs)
            finally:
                local.depth -= 1
            ended = time.perf_counter()
            with recorder.lock:
                entry = counts.entry(op)
                entry[0] += 1
                entry[1] += nbytes
                counts.blocked_s += ended - start
                if not asynchronous or result is None:
                    entry[2] += ended - start
                if call is not None:
                    tracer.returned(call, start, ended, result, asynchronous)
            if not asynchronous or result is None:
                return result
            if isinstance(result, list):  # batch_isend_irecv: one completion for the batch
                return [_TrackedWork(work, recorder, counts, entry, start, call)
                        if i == len(result) - 1 else _TimedWaitOnly(work, recorder, counts, call)
                        for i, work in enumerate(result)]
            return _TrackedWork(result, recorder, counts, entry, start, call)

        counted.__wrapped__ = original
        counted.__name__ = getattr(original, "__name__", name)
        counted.__doc__ = getattr(original, "__doc__", None)
        return counted


class _TimedWaitOnly:
    """A Work of a batch whose completion another Work of the batch stands for: only its wait()
    is timed (blocked time)."""

    __slots__ = ("_work", "_recorder", "_counts", "_call")

    def __init__(self, work, recorder, counts, call=None):
        self._work, self._recorder, self._counts, self._call = work, recorder, counts, call

    def wait(self, *args, **kwargs):
        if self._call is not None:
            self._recorder.tracer.waited(self._call)
        began = time.perf_counter()
        try:
            return self._work.wait(*args, **kwargs)
        finally:
            with self._recorder.lock:
                self._counts.blocked_s += time.perf_counter() - began

    def __getattr__(self, name):
        return getattr(self._work, name)
