"""The entry point every script hands its run function to: the command line parsed, the run
called, expected failures turned into one line on stderr and an exit status, the process group
torn down whatever happens."""

import os
import sys
import time

from .cli import benchmark_parser
from .ranks.comm import teardown
from .errors import PROG, BenchmarkError, OutputClosed
from .ranks.guard import (guard_stop_signals, leave_it_to_the_stop, peer_failure,
                          rank_for_messages, say)
from .table import output_failure


def cli(run, argv=None):
    """Parse the command line, call `run(local_rank, args)`, and turn expected failures into one
    line on stderr (from rank 0 when every rank fails alike) and an exit status."""
    def body():
        try:
            args = benchmark_parser().parse_args(argv)
        except OSError as error:  # --help into a closed pipe or onto a full disk
            raise output_failure(error, sys.stdout, "the help") from None
        run(args.local_rank, args)
    sys.exit(guarded(body))


def exit_without_finalising(status):
    """Flush and end the process at once, for a run after a training loop or a replay: gloo's
    worker thread destroys the last collective's Work (and drops its tensors, which needs the
    GIL) just after wait() returned; when the interpreter is already finalising by then, that
    thread is killed inside C++ and the rank aborts ("terminate called without an active
    exception", exit -6: one run in four here after a training loop). Everything is written;
    the process has nothing left to finalise."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status)


def guarded(body):
    """Call body() (parse the flags and run) and return the exit status: expected failures are
    one line on stderr (from rank 0 when every rank fails alike), a lost peer too, a closed
    reader none; the process group is torn down whatever happens."""
    status = 0
    guard_stop_signals()
    try:
        body()
    except RuntimeError as error:
        if not peer_failure(error):
            raise  # unexpected: keep the traceback
        leave_it_to_the_stop(wait=0.2)  # the peer was stopped, and so is this rank
        status = 1
        first = str(error).strip().splitlines()[0][:300] if str(error).strip() else ""
        say(f"{PROG}: error: rank {rank_for_messages(True)}: lost its peers between "
            f"measurements: {first}")
    except OutputClosed:
        status = 0  # the reader has what it wanted: no message, as a Unix tool in a pipeline
    except BenchmarkError as error:
        status = error.exit_code
        leave_it_to_the_stop()  # a stop signal reached this rank as it failed: that is its end
        if error.reported:
            pass
        elif error.rank_local or rank_for_messages() == 0:
            say(f"{PROG}: error: {error}")
        else:
            # Every rank failed alike and rank 0 says why; launchers kill the whole job when the
            # first rank exits, so the others give rank 0 a moment to be heard.
            time.sleep(1)
    finally:
        teardown()
    return status
