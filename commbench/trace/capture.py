"""Recording a job's communication: every torch.distributed call (and so every deepspeed.comm
call, which goes through it), in order, one file per rank.

Two lines in a training script:

    from commbench.trace import record
    with record("trace/"):          # or: recorder = record("trace/"); ...; recorder.close()
        train()

`record(...).step()` marks the end of a training step (the replay then reports per step).
Each rank writes `DIR/rank<R>.json` when the recording ends, and again at each step, so a job
that dies keeps what it ran. The wrapping is the strategies' accounting
(commbench/trace/accounting.py's Recorder): only the outermost call counts, the Work an async
call returns is handed back in a proxy that notes its first wait().
"""

import json
import os
import socket
import sys
import threading
import time

import torch
import torch.distributed
import torch.distributed.distributed_c10d as c10d

from .calls import FUNCTIONS, Where
from .model import FORMAT, VERSION, Call


class Tracer:
    """This rank's calls, in issue order, and their files."""

    def __init__(self, directory, source=None):
        self.directory = directory
        self.source = source
        self.lock = threading.Lock()
        self.calls = []
        self.t0 = time.perf_counter()
        self.started = time.time()
        self._groups = {}  # id(group) -> global ranks
        self._next_req = 0
        self._waited = set()
        self.rank = torch.distributed.get_rank()
        self.world_size = torch.distributed.get_world_size()

    # -- what a call is

    def _ranks(self, group):
        if group is None or group is c10d.GroupMember.WORLD:
            return tuple(range(self.world_size))
        key = id(group)
        if key not in self._groups:
            self._groups[key] = tuple(torch.distributed.get_process_group_ranks(group))
        return self._groups[key]

    def _describe(self, name, arguments):
        """What the trace keeps of a call (trace.calls: one description per function)."""
        ranks = self._ranks(arguments.get("group"))
        call = {"group": ranks, "function": name}
        call.update(FUNCTIONS[name].describe(Where(ranks, self.rank, self._ranks), arguments))
        return call

    # -- the accounting's hooks (called with the accounting's lock held, except waited)

    def issued(self, name, arguments, asynchronous, step):
        fields = self._describe(name, arguments)
        with self.lock:
            call = Call(index=len(self.calls), step=step,
                        start_s=time.perf_counter() - self.t0, **fields)
            if asynchronous:
                call.req = self._next_req
                self._next_req += 1
            self.calls.append(call)
        return call

    def returned(self, call, start, ended, result, asynchronous):
        if call.op == "recv" and call.peer is None and isinstance(result, int):
            call.peer = result  # a receive from any source: the sender it got
        if not asynchronous or result is None:
            call.duration_s = ended - start
            call.req = None  # nothing to wait for (a coalesced call returns no Work)

    def completed(self, call, seconds):
        call.duration_s = seconds

    def waited(self, call):
        with self.lock:
            if call.req is None or call.req in self._waited:
                return
            self._waited.add(call.req)
            self.calls.append(Call(index=len(self.calls), op="wait", waits=[call.req],
                                   step=call.step, start_s=time.perf_counter() - self.t0))

    # -- the file

    def job_groups(self):
        """The process groups the job made, in the order it made them (torch's own table)."""
        try:
            table = c10d._world.pg_group_ranks
        except AttributeError:
            return []
        groups = []
        for members in list(table.values()):
            ranks = tuple(sorted(members, key=members.get))
            if len(ranks) != self.world_size and ranks not in groups:
                groups.append(ranks)
        return [list(group) for group in groups]

    def _with_completions(self, calls):
        """An asynchronous call whose Work nobody waited for (its future did the work: DDP's
        comm hook) is taken as waited just before the first call the rank issued after it
        completed; one that had not completed when the recording ended, at the end."""
        waited = {req for call in calls if call.op == "wait" for req in call.waits}
        done = sorted((call.start_s + call.duration_s, call.req) for call in calls
                      if call.req is not None and call.req not in waited and
                      call.duration_s is not None)
        if not done:
            return calls
        result, at = [], 0
        for call in calls:
            while at < len(done) and done[at][0] <= call.start_s:
                result.append(Call(index=0, op="wait", waits=[done[at][1]], function="future",
                                   step=call.step, start_s=done[at][0]))
                at += 1
            result.append(call)
        result += [Call(index=0, op="wait", waits=[req], function="future", start_s=when)
                   for when, req in done[at:]]
        for index, call in enumerate(result):
            call.index = index
        return result

    def document(self, steps=None):
        with self.lock:
            calls = [call.record() for call in self._with_completions(
                [Call.from_record(call.record()) for call in self.calls])]
        return {"format": FORMAT, "version": VERSION, "rank": self.rank,
                "world_size": self.world_size, "hostname": socket.gethostname(),
                "backend": torch.distributed.get_backend(), "torch": torch.__version__,
                "source": self.source or " ".join([os.path.basename(sys.executable)] + sys.argv),
                "start_time": self.started, "steps": steps, "groups": self.job_groups(),
                "calls": calls}

    def write(self, steps=None):
        os.makedirs(self.directory, exist_ok=True)
        path = os.path.join(self.directory, f"rank{self.rank}.json")
        temporary = f"{path}.tmp"
        with open(temporary, "w", encoding="utf-8") as out:
            json.dump(self.document(steps), out)
        os.replace(temporary, path)  # a reader never sees half a file
        return path


class record:
    """Record this rank's communication into DIR (see the module's docstring). A context
    manager, or an object to close()."""

    def __init__(self, directory, source=None):
        from .accounting import Recorder
        if not torch.distributed.is_initialized():
            raise RuntimeError("commbench.trace.record: start the process group first "
                               "(torch.distributed.init_process_group or "
                               "deepspeed.init_distributed)")
        self.tracer = Tracer(directory, source)
        self.recorder = Recorder(self.tracer)
        self.recorder.install()
        self.recorder.begin_step()
        self.steps = 0
        self.closed = False

    def step(self):
        """The end of a training step: calls after it belong to the next."""
        self.recorder.end_step()
        self.steps += 1
        self.tracer.write(self.steps)
        self.recorder.begin_step()

    def close(self):
        if self.closed:
            return
        self.closed = True
        self.recorder.end_step()
        self.recorder.remove()
        self.tracer.write(self.steps or None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
