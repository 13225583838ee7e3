"""How long after its deadline rank 0 names ranks whose hosts stopped answering (issue 57).

N simulated hosts (scripts/sim-hosts.sh: network namespaces; root), R ranks a host started by
hand as a launcher would, all_reduce.py scanning small sizes with --timeout T (each size well
under T). Once every rank is measuring, the interfaces of the last hosts, K ranks' worth, go
down at once: no answer, not refused. Every other rank then blocks in the size's collective;
the size's deadline fires T after the size began (the time rank 0 printed the size before it),
and rank 0 says its line naming who did not come. Printed per K: the seconds from the
deadline to that line, and whether it names exactly the K silent ranks ("its host does not
answer") and no other.

    .venv/bin/python benchmarks/silent_ranks.py --hosts 16 --per-host 2 --silent 2,6,16
    .venv/bin/python benchmarks/silent_ranks.py --code /tmp/before ...   # another checkout's

--code DIR runs DIR's all_reduce.py with DIR first on PYTHONPATH (a `git worktree add DIR
COMMIT` of an earlier commit: the figures before a change).
"""

import argparse
import os
import random
import re
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SIM = ROOT / "scripts" / "sim-hosts.sh"
ROW = re.compile(r"^\s*\d+(\.\d+)? [KMG]?B\s")


def stamped(stream, lines):
    """Every line of `stream` with the monotonic time it came."""
    for line in stream:
        lines.append((time.monotonic(), line.rstrip("\n")))


def one(args, silent):
    name = "cs" + uuid.uuid4().hex[:6]
    subnet = f"10.{random.randint(64, 127)}.{random.randint(0, 255)}"
    subprocess.run([str(SIM), "up", name, str(args.hosts), subnet], check=True,
                   capture_output=True)
    try:
        return _measure(args, silent, name, subnet)
    finally:
        subprocess.run([str(SIM), "down", name], capture_output=True)


def _measure(args, silent, name, subnet):
    code = Path(args.code).resolve()
    world, port = args.hosts * args.per_host, random.randint(20000, 28000)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(code))
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    procs, out, err = [], [], []
    for rank in range(world):
        host = rank // args.per_host + 1
        procs.append(subprocess.Popen(
            [str(SIM), "run", name, str(host), "env", f"PATH={env['PATH']}", f"RANK={rank}",
             f"LOCAL_RANK={rank % args.per_host}", f"WORLD_SIZE={world}",
             f"LOCAL_WORLD_SIZE={args.per_host}", f"MASTER_ADDR={subnet}.1",
             f"MASTER_PORT={port}", sys.executable, "all_reduce.py", "--dist=torch",
             "--backend=gloo", "--scan", "--maxsize=16", f"--trials={args.trials}",
             f"--timeout={args.timeout}"],
            cwd=code, env=env, stdout=subprocess.PIPE if rank == 0 else subprocess.DEVNULL,
            stderr=subprocess.PIPE if rank == 0 else subprocess.DEVNULL, text=True,
            stdin=subprocess.DEVNULL))
    readers = [threading.Thread(target=stamped, args=(procs[0].stdout, out), daemon=True),
               threading.Thread(target=stamped, args=(procs[0].stderr, err), daemon=True)]
    for reader in readers:
        reader.start()
    try:
        started = time.monotonic()
        while sum(1 for _, line in out if ROW.match(line)) < args.rows_before:
            if time.monotonic() - started > args.start_timeout or procs[0].poll() is not None:
                return None, f"rank 0 did not measure {args.rows_before} sizes", err
            time.sleep(0.05)
        hosts = sorted({rank // args.per_host + 1 for rank in range(world - silent, world)})
        for host in hosts:
            subprocess.run(["ip", "-n", f"{name}{host}", "link", "set", "eth0", "down"],
                           check=True)
        down = time.monotonic()
        procs[0].wait(timeout=args.timeout + 120)
        for reader in readers:
            reader.join(5)
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()
    size_began = max(t for t, line in out if ROW.match(line) and t <= down)
    said = [(t, line) for t, line in err if "cannot be reached" in line or "did not reach" in line]
    if not said:
        return None, "no line named who did not come", err
    when, line = said[0]
    gone = sorted(int(r) for r in re.findall(r"rank (\d+) on host \S+ cannot be reached: its "
                                             r"host does not answer", line))
    named = sorted(int(r) for r in re.findall(r"rank (\d+) on host", line))
    exact = gone == list(range(world - silent, world)) and named == gone
    return when - (size_began + args.timeout), "exact" if exact else f"named {named}", err


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", type=int, default=16)
    parser.add_argument("--per-host", type=int, default=2)
    parser.add_argument("--silent", default="2,6,16", help="silent ranks, each a run "
                        "(whole hosts: multiples of --per-host)")
    parser.add_argument("--timeout", type=int, default=20)
    parser.add_argument("--trials", type=int, default=5, help="each size's (short sizes: the "
                        "deadline is the size's start + --timeout)")
    parser.add_argument("--rows-before", type=int, default=4,
                        help="sizes measured before the interfaces go down")
    parser.add_argument("--start-timeout", type=int, default=600)
    parser.add_argument("--code", default=str(ROOT), help="the checkout whose scripts run")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("silent_ranks: simulated hosts need root")
    counts = [int(k) for k in args.silent.split(",")]
    if any(k % args.per_host or not 0 < k < args.hosts * args.per_host for k in counts):
        parser.error("--silent: whole hosts (multiples of --per-host), host 1 (rank 0) spared")
    commit = subprocess.run(["git", "-C", args.code, "log", "-1", "--format=%h %s"],
                            capture_output=True, text=True).stdout.strip()[:90]
    print(f"# {args.hosts} hosts x {args.per_host} ranks, all_reduce.py --timeout "
          f"{args.timeout}; code: {args.code} ({commit}); load {os.getloadavg()[0]:.1f}")
    print(f"{'silent':>6}  {'line after the deadline':>24}  named")
    for silent in counts:
        late, how, err = one(args, silent)
        if late is None:
            print(f"{silent:>6}  {'-':>24}  {how}")
            print("\n".join(line for _, line in err[-5:]), file=sys.stderr)
        else:
            print(f"{silent:>6}  {late:>22.2f} s  {how}", flush=True)


if __name__ == "__main__":
    main()
