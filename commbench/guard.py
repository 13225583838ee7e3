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

from . import shm
from .errors import PROG, BenchmarkError, OutputClosed
from .launch import discover_launch_env
from .table import emit


def say(line):
    """A last line on stderr, if stderr can still take one."""
    try:
        emit(sys.stderr, line)
    except (OSError, ValueError):
        pass


@contextlib.contextmanager
def deadline(seconds, message):
    """Ends the process with one error line, exit 1, if the block still runs after `seconds`.

    A rank blocked in a rendezvous or a collective cannot be interrupted from Python; it can
    only be abandoned, and a benchmark that waits forever costs a cluster reservation.
    """
    def expire():
        say(f"{PROG}: error: {message}")
        shm.release_ccl_endpoints()
        os._exit(1)
    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


STOP_SIGNALS = {signal.SIGINT: 130, signal.SIGTERM: 143}
# Held while a record is written: a stop waits for it, so no file is left half-written.
RESULTS_LOCK = threading.Lock()


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
    stop (comm.stop), and all stop together if one has: that rank with its own error, the
    others pointing to it, or all quietly when the reader closed the output. Without this, a
    rank that stops alone leaves the others to fail in their next collective as if the network
    had failed."""
    mine = 0 if comm.stop is None else 1 if isinstance(comm.stop, OutputClosed) else 2
    codes = [int(figures[0]) for figures in comm.gather_figures([mine])]
    if not any(codes):
        return
    failed = [rank for rank, code in enumerate(codes) if code == 2]  # an error beats a quiet stop
    if comm.stop is not None:
        error = comm.stop
    elif not failed:
        error = OutputClosed()
    else:
        error = BenchmarkError(f"rank {comm.global_rank}: stopping because rank {failed[0]} stopped (its "
                               "message says why)", rank_local=True)
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
