#!/usr/bin/env python3
"""Run a command and stall one of its ranks from outside, as the OS, a daemon or a noisy
neighbour would: SIGSTOP for STOP ms of every EVERY ms, by the clock (absolute deadlines, so
the period does not creep), until the command ends. For trying report.py trials' verdicts on
a real straggler (docs/trials.md); the suite has no hook for it.

  scripts/stall.py --rank 2 --stop-ms 50 --every-ms 150 -- torchrun --nproc_per_node 3 \\
      all_reduce.py --dist torch --scan --per-trial --output run.jsonl

The rank is found by its environment (RANK=N, as torchrun, the deepspeed launcher and the
simulated hosts set it), among the command's descendants, or with --pid. Exit status: the
command's. Prints on stderr how many stops it made and when the first began."""

import argparse
import os
import signal
import subprocess
import sys
import time


def descendants(root):
    """Every live pid under `root` (by /proc's parent links)."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def rank_of(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            variables = dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)
    except OSError:
        return None
    value = variables.get(b"RANK")
    return int(value) if value is not None and value.isdigit() else None


def find_rank(root, rank, within):
    """The pid of the process with RANK=rank at or under root, the deepest one (a launcher's
    wrapper may carry the variable too; a chain of execs keeps root's pid); None after
    `within` seconds."""
    end = time.monotonic() + within
    while time.monotonic() < end:
        found = [pid for pid in [root] + descendants(root) if rank_of(pid) == rank]
        if found:
            time.sleep(0.2)  # a wrapper execs or forks the rank itself: take the last one
            found = [pid for pid in [root] + descendants(root) if rank_of(pid) == rank] or found
            return found[-1]
        time.sleep(0.05)
    return None


def stall(pid, stop, every, running):
    """SIGSTOP/SIGCONT pid on the clock while running() holds; (stops, first stop's time)."""
    stops, first, start = 0, None, time.monotonic()
    k = 1
    while running():
        begin = start + k * every
        time.sleep(max(0.0, begin - time.monotonic()))
        if not running():
            break
        try:
            os.kill(pid, signal.SIGSTOP)
        except ProcessLookupError:
            break
        first = first if first is not None else time.monotonic()
        stops += 1
        time.sleep(max(0.0, begin + stop - time.monotonic()))
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            break
        k += 1
    return stops, first


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rank", type=int, help="the rank to stall (RANK in its environment)")
    parser.add_argument("--pid", type=int, help="the process to stall instead")
    parser.add_argument("--stop-ms", type=float, required=True)
    parser.add_argument("--every-ms", type=float, required=True)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command or (args.rank is None) == (args.pid is None):
        parser.error("give a command after --, and one of --rank or --pid")
    if not 0 < args.stop_ms < args.every_ms:
        parser.error("--stop-ms must be above 0 and under --every-ms")
    proc = subprocess.Popen(command)
    pid = args.pid if args.pid is not None else find_rank(proc.pid, args.rank, 120)
    if pid is None:
        print(f"stall: no process with RANK={args.rank} under the command", file=sys.stderr)
        return proc.wait()
    stops, first = stall(pid, args.stop_ms / 1e3, args.every_ms / 1e3, lambda: proc.poll() is None)
    print(f"stall: pid {pid}: {stops} stops of {args.stop_ms:g} ms every {args.every_ms:g} ms",
          file=sys.stderr)
    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        pass
    return proc.wait()


if __name__ == "__main__":
    sys.exit(main())
