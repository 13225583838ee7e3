"""A process that has imported torch once and forks the tests' hand-started ranks from it.

Every rank the tests start by hand (support.launch's `ranks` and `python` launchers) would
otherwise pay for `import torch` again: 1.2-1.4 s of CPU a process on these 2-core machines,
most of a short run's cost. A rank forked from here is a process of its own that runs the
script from its first line as `python SCRIPT ARGS` would (the script's directory first on
sys.path, its own environment, working directory, argv and standard streams; `__main__`;
non-daemon threads joined, atexit run, the exit status Python would give), with torch already
in memory; its signal dispositions are the server's, which sets none: those Python starts with
under the same parent). What it cannot be is shown by support.spawn's rules: an environment
that Python or the OpenMP runtime read at start-up (PYTHON*, OMP_*, LD_*) differs, or the test
asks for a fresh interpreter; then the rank is started the ordinary way. The launchers' own
tests (torchrun, deepspeed, mpirun, srun) always start fresh interpreters.

    python tests/forkserver.py SOCKET     serve until the test process that started it ends

The protocol (a SOCK_SEQPACKET Unix socket, one connection a rank): the request is one JSON
message {"argv", "env", "cwd"} with three file descriptors (stdin, stdout, stderr); the answer
is the rank's pid, then, when it ends, its exit status as subprocess gives it (-N: signal N).
"""

import json
import os
import runpy
import socket
import sys

import torch  # noqa: F401  the point of this process

try:  # what a training rank imports next, once per rank: torch.optim's first optimizer imports
    # torch._dynamo (1.1 s of CPU), DeepSpeed's ZeRO (its Muon optimizer, torch.compile)
    # torch._inductor (0.8 s); neither starts a thread or a process at import
    import torch._dynamo  # noqa: F401
    import torch._inductor.compile_fx  # noqa: F401
except ImportError:
    pass

READY = b"ready"


def _run_rank(request, fds):
    """In the forked child: become `python argv...` and never return."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    script = request["argv"][0]
    sys.argv = list(request["argv"])
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    code = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as stop:
        code = _exit_code(stop.code)
    except BaseException:  # noqa: B902  what the interpreter does with an uncaught exception
        sys.excepthook(*sys.exc_info())
        code = 1
    code = _shut_down(code)
    os._exit(code)


def _exit_code(value):
    if value is None:
        return 0
    if isinstance(value, int):
        return value & 0xFF
    print(value, file=sys.stderr)
    return 1


def _shut_down(code):
    """What Python does at exit: non-daemon threads joined, atexit functions run, the standard
    streams flushed (a flush that fails is exit status 120, as Python's)."""
    import atexit
    import threading
    try:
        threading._shutdown()
    except BaseException:  # noqa: B902
        pass
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: B902
            if stream is sys.stdout:
                code = code or 120
    return code


def _serve_one(connection, request, fds):
    """In a forked waiter: fork the rank, say its pid, wait for it, say its status."""
    pid = os.fork()
    if pid == 0:
        connection.close()
        _run_rank(request, fds)
    for fd in fds:
        os.close(fd)
    try:
        connection.send(str(pid).encode())
        _, status = os.waitpid(pid, 0)
        connection.send(str(os.waitstatus_to_exitcode(status)).encode())
    except OSError:
        pass
    os._exit(0)


def main(path):
    server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    server.bind(path)
    server.listen(64)
    server.settimeout(2.0)
    parent = os.getppid()
    print(READY.decode(), flush=True)
    while os.getppid() == parent:  # the test process gone: so is this one
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:  # the waiters that are done
                pass
        except ChildProcessError:
            pass
        try:
            connection, _ = server.accept()
        except TimeoutError:
            continue
        with connection:
            message, fds, _, _ = socket.recv_fds(connection, 1 << 20, 3)
            try:
                if os.fork() == 0:
                    server.close()
                    _serve_one(connection, json.loads(message), fds)
            finally:
                for fd in fds:
                    os.close(fd)


if __name__ == "__main__":
    main(sys.argv[1])
