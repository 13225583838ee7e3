"""Run a script as a rank "on" a simulated host, from a process forked by the tests' fork server.

    python tests/on_sim_host.py NAME INDEX SCRIPT ARGS...

does what `scripts/sim-hosts.sh run NAME INDEX python SCRIPT ARGS...` does (enter host INDEX's
network namespace; a mount and a UTS namespace of its own, its mounts private, the hosts' file
bound over /etc/hosts, its host name set), then runs SCRIPT as `python SCRIPT ARGS` would. Run
through support.spawn, the rank is forked from a process that has imported torch instead of
paying for `import torch` again (1.2-1.4 s of CPU a rank; 16 ranks in a 16-host check). Root,
and a single-threaded process (a forked child is): setns and unshare need both.
"""

import ctypes
import os
import runpy
import sys

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWNET = 0x00020000, 0x04000000, 0x40000000
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18


def _check(result, what):
    if result != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"{what}: {os.strerror(error)}")


def enter(name, index):
    """Become a process of simulated host `index` of `name` (scripts/sim-hosts.sh up)."""
    libc = ctypes.CDLL(None, use_errno=True)
    hosts = os.path.join(os.environ.get("COMMBENCH_HOSTS_DIR", "/tmp/commbench-hosts"), name,
                         "hosts")
    fd = os.open(f"/run/netns/{name}{index}", os.O_RDONLY)
    try:
        _check(libc.setns(fd, CLONE_NEWNET), "setns")
    finally:
        os.close(fd)
    _check(libc.unshare(CLONE_NEWNS | CLONE_NEWUTS), "unshare")
    # private first, as unshare(1) makes them: a bind mount must not reach the machine's /etc
    _check(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
    _check(libc.mount(hosts.encode(), b"/etc/hosts", None, MS_BIND, None), "mount --bind")
    host = f"{name}{index}".encode()
    _check(libc.sethostname(host, len(host)), "sethostname")


def main():
    name, index, script = sys.argv[1:4]
    enter(name, index)
    sys.argv = sys.argv[3:]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
