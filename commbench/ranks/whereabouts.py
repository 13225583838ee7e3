"""Where each rank is, kept where the others can read it without a collective: the rendezvous
store (torch.distributed's TCPStore). A rank posts its position (op, size, phase) at each phase
of a size, outside the timed window: four small writes a size. When a size's --timeout fires,
every rank's deadline thread (alive while the main thread is blocked in the collective) posts
whether it is inside the collective's call, and in which trial (read from the trial marks of
--stats / --per-trial, never written by the loop); rank 0 waits for those posts and names the
ranks that did not post (stopped, hung in C, dead: last seen where, how long ago) or
that posted from outside the call (alive, but not at the collective). Seconds since seen are
rank 0's wall clock against the poster's: exact on one host, as good as NTP across hosts.

Dead or stuck: each rank also holds a listening TCP socket (its "pulse", pulse.py). At its
deadline rank 0 tries the pulse of every rank that has not posted, all at once under one
deadline of PROBE_S (probe_all), and waits the rest of GRACE_S only for ranks whose pulse
answered (a live rank whose deadline fired later): so the line comes about PROBE_S after rank
0's deadline whether 1 or 100 ranks are silent (benchmarks/silent_ranks.py). Refused is named
"cannot be reached: its process is gone", no answer "its host does not answer"; a completed
connection keeps "did not reach"."""

import contextlib
import json
import os
import threading
import time
from datetime import timedelta

import torch.distributed

from ..errors import PROG, BenchmarkError
from .guard import peer_failure, say
from .pulse import PROBE_S, open_pulse, probe_all
from ..table import convert_size

PREFIX = "commbench/ranks/whereabouts/"
GRACE_S = 3.0  # rank 0 waits at most this long for a live rank's post after its own deadline
STORE_S = 5.0  # a store operation of the deadline thread gives up after this long
POLL_S = 0.05


def seen_key(rank):
    """The key, under PREFIX, where `rank` posts its position (JSON: op, size, phase, time)."""
    return f"seen/{rank}"


def seen_key_in_store(rank):
    """seen_key as the default store holds it: PrefixStore joins PREFIX and the key with "/"
    (the store's full key has torch's own group prefixes before this)."""
    return f"{PREFIX}/{seen_key(rank)}"


def of(comm):
    """The run's Whereabouts (comm.run's), or None: none started, or a Comm of no run."""
    return getattr(getattr(comm, "run", None), "whereabouts", None)


def start(comm):
    """The run's Whereabouts, or None (a world of one, or no store to keep positions in)."""
    if comm.world_size < 2:
        return None
    try:
        default = torch.distributed.distributed_c10d._get_default_store()
        store = torch.distributed.PrefixStore(PREFIX, default)
        alarm = store.clone()  # the deadline thread's own connection
        alarm.set_timeout(timedelta(seconds=STORE_S))
    except (AttributeError, RuntimeError, ValueError):
        return None
    found = Whereabouts(comm.global_rank, comm.world_size, comm.hostnames, store, alarm)
    found.pulse = open_pulse(os.environ.get("MASTER_ADDR", "127.0.0.1"))
    if found.pulse is not None:
        with contextlib.suppress(RuntimeError):
            store.set(f"pulse/{comm.global_rank}", "{} {:d}".format(*found.pulse.getsockname()[:2]))
    return found



def size_text(size_bytes):
    return convert_size(size_bytes) if size_bytes is not None else "?"


def describe(position):
    """'all_reduce 4.0 MB trial 7', 'all_reduce 4.0 MB (warmups)', 'start-up'."""
    if not position or position.get("op") is None:
        return "start-up"
    where = position["op"] if position.get("size") is None \
        else f"{position['op']} {size_text(position['size'])}"
    if position.get("trial") is not None:
        return f"{where} trial {position['trial']}"
    if position.get("call") is not None:  # replay.py (pass, call), parallel_bench (step, call)
        op = f" ({position['call_op']})" if position.get("call_op") else ""
        return f"{where} {position.get('phase')}, call {position['call']}{op}"
    if position.get("at") is not None:  # a named point between calls (a pass's opening barrier)
        return f"{where} {position.get('phase')}, {position['at']}"
    return f"{where} ({position.get('phase')})"


class Reading:
    """marks for a loop that is not the timed trials: reading() -> the fields of where it is
    (replay.py: the call index; parallel_bench: the call of the step), read only at a deadline
    or a backend's timeout, from a reference the loop keeps anyway."""

    def __init__(self, reading):
        self.reading = reading

    def now(self):
        try:
            return self.reading() or {}
        except Exception:  # a half-updated loop: its phase alone
            return {}


@contextlib.contextmanager
def named_on_timeout(comm, where, record=None):
    """A block (replay's passes, a strategy's steps) whose backend failure (the process group's
    --timeout, or a peer's: its sockets closed) ends the run with the line naming the ranks that
    did not come, kept by record(line) (rank 0's failure record) too."""
    try:
        yield
    except RuntimeError as error:
        found = of(comm)
        if found is None or not peer_failure(error):
            raise
        raise found.name_on_failure(f"{where} failed: {reason_of(error)}", record) from None


def reason_of(error):
    """An exception's first line, at most 300 characters (its type's name when it has none)."""
    text = str(error).strip()
    return text.splitlines()[0][:300] if text else type(error).__name__


class Whereabouts:
    def __init__(self, rank, world_size, hostnames, store, alarm):
        self.rank, self.world_size, self.hostnames = rank, world_size, hostnames
        self.store, self.alarm = store, alarm
        self.op, self.size, self.phase, self.marks = None, None, "start-up", None
        self._lock, self._claimed = threading.Lock(), False
        self.pulse, self._posted = None, []

    def claim(self):
        """True for the first of the deadline thread and the main thread (the backend's own
        timeout) to ask: that one names who did not come and says it; the other waits."""
        with self._lock:
            first, self._claimed = not self._claimed, True
            return first

    def name_on_failure(self, line, record=None):
        """The main thread's collective failed on the backend's side (its own timeout, or a
        peer's that closed the connection first): the error to raise, its line naming who did
        not come, kept by record(line). Rank 0 says it (and records it) before it lets the other
        ranks go: a launcher ends the whole job at the first rank's exit, and rank 0's line is
        the one that names. The deadline's thread may have begun first: it says it and ends the
        process."""
        if not self.claim():
            time.sleep(3600)
        line = self.explain(line)
        if record is not None:
            with contextlib.suppress(Exception):
                record(line)
        error = BenchmarkError(line, rank_local=True)
        if self.rank == 0:
            say(f"{PROG}: error: {line}")
            error.reported = True
            self.release()
        return error

    def size_starts(self, op, size_bytes, phase="start"):
        self.op, self.size = op, size_bytes
        self.at(phase)

    def at(self, phase, marks=None):
        """This rank's new phase (marks: the timed loop's, read only when a deadline fires)."""
        self.phase, self.marks = phase, marks
        try:
            self.store.set(seen_key(self.rank), json.dumps(self.position()))
        except RuntimeError:
            pass  # the store gone: the collective that follows says so

    def position(self, now=False):
        """This rank's position; now=True (the deadline thread): with the trial it is in, from
        the marks, and whether it is inside the collective's call."""
        position = {"op": self.op, "size": self.size, "phase": self.phase, "time": time.time()}
        if now and isinstance(self.marks, Reading):
            position.update(self.marks.now())
        elif now and self.marks is not None and hasattr(self.marks, "done"):
            taken = self.marks.done()  # mark 2i-1 before trial i's call, 2i after it returned
            position["trial"] = (taken + 1) // 2
            position["in_call"] = taken % 2 == 0
        return position

    def explain(self, message):
        """At a deadline: this rank's line. Rank 0's names who did not come."""
        try:
            self.alarm.set(f"waiting/{self.rank}", json.dumps(self.position(now=True)))
        except RuntimeError:
            return (f"{message}; rank 0 on host {self.hostnames[0]}, which holds the positions, "
                    "cannot be reached")
        if self.rank != 0:
            if _wait(self.alarm, ["named"], 2 * GRACE_S + 2 + PROBE_S):  # rank 0's line first
                with contextlib.suppress(RuntimeError):
                    self.alarm.set(f"left/{self.rank}", "1")  # rank 0, the store, may go now
            return f"{message} (rank 0's line names the ranks that did not come)"
        posts, seen, states = self._gather()
        line = name_absent(posts, seen, self.hostnames, time.time(), states)
        self._posted = [r for r in posts if r and posts[r] is not None]
        return f"{message.split('; a peer rank')[0]}: {line}"

    def _gather(self):
        """Rank 0 at its deadline: every rank's post ({rank: position or None}), the last
        position of those without one, and what their pulses said. The ranks without a post
        are probed at once (the live ones' posts come meanwhile); only those whose pulse
        answered (or who posted none) are waited for, to GRACE_S: a rank whose host does not
        answer, or whose process is gone, never posts, and is not waited for once that is
        known (PROBE_S at most)."""
        began = time.monotonic()
        keys = {r: f"waiting/{r}" for r in range(self.world_size)}
        missing = [r for r in keys if _read(self.alarm, keys[r]) is None]
        states = probe_all({r: self.pulse_of(r) for r in missing}, PROBE_S)  # at once
        awaited = [keys[r] for r in missing if states.get(r) in ("alive", None)]
        if awaited:
            _wait(self.alarm, awaited, GRACE_S - (time.monotonic() - began))
        posts = {r: _read(self.alarm, keys[r]) for r in keys}
        seen = {r: _read(self.alarm, seen_key(r)) for r in keys if posts[r] is None}
        return posts, seen, {r: states.get(r) for r in seen}

    def release(self):
        """Rank 0, its line said: the other ranks may say theirs and go. The store dies with rank
        0, so it waits (1 s at most) for them to have read that (no C++ warning)."""
        try:
            self.alarm.set("named", "1")
        except RuntimeError:
            return
        _wait(self.alarm, [f"left/{r}" for r in self._posted], 1.0)

    def pulse_of(self, rank):
        """The rank's pulse ("address port") as it posted it, or None."""
        try:
            return self.alarm.get(f"pulse/{rank}").decode() \
                if self.alarm.check([f"pulse/{rank}"]) else None
        except (RuntimeError, UnicodeDecodeError):
            return None


GONE = {"gone": "its process is gone (its host refused a connection to it)",
        "silent": f"its host does not answer (no connection in {PROBE_S:g} s)"}


def name_absent(posts, seen, hostnames, now, states=None):
    """The words for ranks that did not come. posts: rank -> what it posted at its deadline
    (None: nothing); seen: rank -> its last position posted before (None: never); states:
    rank -> what its pulse said (probe(): "gone" and "silent" make it unreachable)."""
    states = states or {}
    reached = [p for p in posts.values() if p and p.get("in_call", True)]
    target = None
    if reached:
        first = reached[0]
        trials = [p["trial"] for p in reached if p.get("trial") is not None]
        target = describe({**first, "trial": max(trials) if trials else None})
    parts = []
    for rank in sorted(posts):
        post = posts[rank]
        what = f"rank {rank} on host {hostnames[rank]}"
        goal = f" {target}" if target else " the collective"
        if post is None:
            last = seen.get(rank)
            if states.get(rank) in GONE:
                when = "no position ever posted" if last is None else \
                    f"last seen at {describe(last)}, {max(0.0, now - last['time']):.1f} s ago"
                parts.append(f"{what} cannot be reached: {GONE[states[rank]]} ({when})")
            elif last is None:
                parts.append(f"{what} cannot be reached (no position ever posted)")
            else:
                parts.append(f"{what} did not reach{goal} (last seen at {describe(last)}, "
                             f"{max(0.0, now - last['time']):.1f} s ago)")
        elif not post.get("in_call", True):
            parts.append(f"{what} did not reach{goal} (alive, at {describe(post)}, outside the "
                         "call)")
    if not parts:
        return ("every rank is waiting inside the collective " +
                (f"({target}): " if target else ": ") + "the backend or the network stalled")
    return "; ".join(parts)


def _read(store, key):
    try:
        return json.loads(store.get(key)) if store.check([key]) else None
    except (RuntimeError, ValueError):
        return None


def _wait(store, keys, seconds):
    ends = time.monotonic() + seconds
    while time.monotonic() < ends:
        try:
            if store.check(keys):
                return True
        except RuntimeError:
            return False
        time.sleep(POLL_S)
    return False
