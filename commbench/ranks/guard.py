"""What ends a run cleanly instead of a hang or a traceback: a deadline on blocking steps,
stop signals that keep every record written, the ranks' agreement to stop when one of them
has a reason of its own (its output failed), and telling a lost peer from a bug."""

import contextlib
import os
import signal
import socket
import sys
import threading
import time

import torch.distributed

from . import gathered, shm
from ..errors import PROG, BenchmarkError, OutputClosed
from .launch import discover_launch_env
from ..table import emit


def say(line):
    """A last line on stderr, if stderr can still take one."""
    try:
        emit(sys.stderr, line)
    except (OSError, ValueError):
        pass


def _expire(message, explain, on_expire):
    """A deadline's end: one error line (explain(message) where given), on_expire(line), exit 1
    (unless the main thread got the backend's own timeout first and says it)."""
    line = message
    claim = getattr(explain, "__self__", None)
    if claim is not None and not claim.claim():
        return False  # the main thread got the backend's timeout first and says it
    if explain is not None:
        try:
            line = explain(message)
        except Exception:  # the plain line rather than none
            line = message
    if on_expire is not None:  # rank 0's failure record, then its line, then the others go
        with contextlib.suppress(Exception):
            on_expire(line)
    say(f"{PROG}: error: {line}")
    if claim is not None and getattr(claim, "rank", None) == 0:
        with contextlib.suppress(Exception):
            claim.release()
    shm.release_ccl_endpoints()
    os._exit(1)


@contextlib.contextmanager
def deadline(seconds, message, explain=None, on_expire=None):
    """Ends the process with one error line, exit 1, if the block still runs after `seconds`.
    explain(message) -> the line to say instead (whereabouts: who did not come); on_expire(line)
    is called before the exit (rank 0's failure record).

    A rank blocked in a rendezvous or a collective cannot be interrupted from Python; it can
    only be abandoned, and a benchmark that waits forever costs a cluster reservation.
    """
    timer = threading.Timer(seconds, _expire, (message, explain, on_expire))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


@contextlib.contextmanager
def stall_deadline(seconds, progress, message, explain=None, on_expire=None):
    """deadline() for a long block of many blocking calls (replay's passes): the process ends
    the same way once progress() has returned the same value for `seconds`. Each call gets
    `seconds`, as the process group's own timeout would give it, which a backend that does not
    honour it (oneCCL) never enforces; a timer a call would cost more than a small call."""
    stop = threading.Event()

    def watch():
        seen, since = progress(), time.monotonic()
        while not stop.wait(min(1.0, seconds / 10)):
            now, value = time.monotonic(), progress()
            if value != seen:
                seen, since = value, now
            elif now - since >= seconds and _expire(message, explain, on_expire) is False:
                return
    watcher = threading.Thread(target=watch, daemon=True, name="commbench-stall-deadline")
    watcher.start()
    try:
        yield
    finally:
        stop.set()


STOP_SIGNALS = {signal.SIGINT: 130, signal.SIGTERM: 143}
# Held while a record is written: a stop waits for it, so no file is left half-written.
RESULTS_LOCK = threading.Lock()
_STOP_SOCKETS = None
_STOPPING = threading.Event()  # the watcher has a stop signal and is ending the process


def stop_signalled(wait=0.0):
    """Whether a stop signal reached this process (the watcher then ends it with 130 or 143),
    waiting up to `wait` seconds for one. A Ctrl-C or an scancel reaches every rank at about
    the same moment: a rank whose peer acted on it first sees the peer's connection close,
    and must say it was stopped, not that it lost its peers."""
    ends = time.monotonic() + wait
    while True:
        if _STOPPING.is_set():
            return True
        try:  # the signal's byte, not yet read by the watcher
            pending = _STOP_SOCKETS[0].recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) \
                if _STOP_SOCKETS is not None else b""
        except OSError:
            pending = b""
        if pending and pending[0] in STOP_SIGNALS:
            return True
        if time.monotonic() >= ends:
            return False
        time.sleep(0.01)


def leave_it_to_the_stop(wait=0.0, longest=30.0):
    """A failure that a stop signal explains: let the watcher end the process (it says so and
    exits 130 or 143); True only if it did not within `longest` seconds."""
    if not stop_signalled(wait):
        return False
    time.sleep(longest)
    return True


def guard_stop_signals():
    """SIGINT and SIGTERM stop the run at once, even while the main thread is blocked inside a
    collective (where Python runs no handler): the signal's number reaches a watcher thread
    through Python's wakeup fd; it finishes any record being written, says so, and exits 130
    or 143. Every size measured before is already on disk."""
    global _STOP_SOCKETS
    _STOP_SOCKETS = reader, writer = socket.socketpair()
    writer.setblocking(False)
    signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    for number in STOP_SIGNALS:
        signal.signal(number, lambda *_: None)  # the watcher acts; the main thread need not

    def wait_for_stop():
        while True:
            number = reader.recv(1)[0]
            if number in STOP_SIGNALS:
                _STOPPING.set()
                break
        RESULTS_LOCK.acquire(timeout=5)
        if rank_for_messages() == 0:
            say(f"{PROG}: stopped by {signal.Signals(number).name}; the sizes measured so far "
                "are in the table and the results file")
        shm.release_ccl_endpoints()
        os._exit(STOP_SIGNALS[number])
    threading.Thread(target=wait_for_stop, name="commbench-stop", daemon=True).start()


def agree_to_go_on(comm):
    """Before each size and at the end: every rank says whether it has a reason of its own to
    stop (comm.run.stop), and all stop together if one has: that rank with its own error, the
    others pointing to it, or all quietly when the reader closed the output. Without this, a
    rank that stops alone leaves the others to fail in their next collective as if the network
    had failed."""
    stop = comm.run.stop
    mine = 0 if stop is None else 1 if isinstance(stop, OutputClosed) else 2
    codes = [int(row["stop"]) for row in gathered.gather(comm, {"stop": mine})]
    if not any(codes):
        return
    failed = [rank for rank, code in enumerate(codes) if code == 2]  # an error beats a quiet stop
    if stop is not None:
        error = stop
    elif not failed:
        error = OutputClosed()
    else:
        error = BenchmarkError(f"rank {comm.global_rank}: stopping because rank {failed[0]} "
                               "stopped (its message says why)", rank_local=True)
        time.sleep(0.2)  # the stopping rank's line first, mostly
    if not isinstance(error, OutputClosed):
        say(f"{PROG}: error: {error}")
        error.reported = True
    # Every line is out before any rank exits: a launcher ends the whole job at the first
    # non-zero exit, and a rank ended that way would say nothing.
    torch.distributed.barrier()
    raise error


def rank_for_messages(exact=False):
    try:
        return discover_launch_env().rank
    except BenchmarkError:
        return "?" if exact else 0


PEER_FAILURES = ("Connection closed by peer", "Connection reset by peer", "Broken pipe",
                 "timed out", "Timed out")


def peer_failure(error):
    """A collective failed because another rank went away or went silent."""
    dist_error = getattr(torch.distributed, "DistError", ())
    return isinstance(error, dist_error) or any(text in str(error) for text in PEER_FAILURES)
