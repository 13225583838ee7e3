"""doctor.py when hosts die mid-check (issue 57), repeated: N simulated hosts (scripts/
sim-hosts.sh; root), one rank each started by hand, one host capped by htb; once the check has
written its first records, some hosts' processes SIGKILLed, or their interface brought down (no
answer, not refused), K seconds later. Per run: the seconds from the losses to rank 0's verdict,
and whether the verdict names exactly the lost hosts unreachable and the capped host slow, and
nothing else; then the rate of exact verdicts.

    .venv/bin/python benchmarks/doctor_chaos.py                  # issue 57's setup, once
    .venv/bin/python benchmarks/doctor_chaos.py --repeat 5 --down 9 --kill 3

issue 57's setup: 12 hosts, `--plan screen --timeout 60 --repeat 8`, host 6 at 300 Mbit, hosts 3
and 9 killed 20 s into the check; the verdict is due within --timeout + 30 s of the losses.
"""

import argparse
import json
import os
import random
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SIM = ROOT / "scripts" / "sim-hosts.sh"


def hosts_list(text):
    return [int(h) for h in text.split(",") if h]


def start(name, subnet, count, args, output):
    port = random.randint(20000, 28000)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return [subprocess.Popen(
        [str(SIM), "run", name, str(node + 1), "env", f"PATH={env['PATH']}", f"RANK={node}",
         "LOCAL_RANK=0", f"WORLD_SIZE={count}", "LOCAL_WORLD_SIZE=1", f"MASTER_ADDR={subnet}.1",
         f"MASTER_PORT={port}", sys.executable, "doctor.py", "--dist=torch", "--backend=gloo",
         f"--plan={args.plan}", f"--timeout={args.timeout}", f"--repeat={args.doctor_repeat}",
         f"--output={output}", "--overwrite"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE if node == 0 else subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, text=True, stdin=subprocess.DEVNULL)
        for node in range(count)]


def lose(name, args):
    for host in args.kill:
        pids = subprocess.run(["ip", "netns", "pids", f"{name}{host}"], capture_output=True,
                              text=True).stdout.split()
        if pids:
            subprocess.run(["kill", "-9", *pids], check=False)
    for host in args.down:
        subprocess.run(["ip", "-n", f"{name}{host}", "link", "set", "eth0", "down"], check=True)


def one(args, output):
    name = "cc" + uuid.uuid4().hex[:5]
    subnet = f"10.{random.randint(64, 127)}.{random.randint(0, 255)}"
    subprocess.run([str(SIM), "up", name, str(args.hosts), subnet], check=True,
                   capture_output=True)
    procs = []
    output.unlink(missing_ok=True)  # the run before's: its records are not this run's start
    try:
        for host in args.slow:
            subprocess.run([str(SIM), "slow", name, str(host), args.rate], check=True,
                           capture_output=True)
        procs = start(name, subnet, args.hosts, args, output)
        while not (output.exists() and len(output.read_text().splitlines()) >= 2):
            if procs[0].poll() is not None:
                return None, "the check ended before its first records"
            time.sleep(0.05)
        time.sleep(args.after)
        lose(name, args)
        lost = time.monotonic()
        procs[0].communicate(timeout=args.timeout * 4 + 300)
        took = time.monotonic() - lost
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()
        subprocess.run([str(SIM), "down", name], capture_output=True)
    records = [json.loads(line) for line in output.read_text().splitlines()]
    final = next((r for r in reversed(records) if r.get("type") == "verdict"), None)
    if final is None:
        return took, "no verdict record"
    gone = sorted(f"{name}{h}" for h in args.kill + args.down)
    slow = sorted(f"{name}{h}" for h in args.slow)
    exact = (sorted(final["unreachable"]) == gone and sorted(final["suspect_hosts"]) == slow
             and not final["suspect_links"] and not final.get("suspect_switches"))
    named = (f"unreachable {', '.join(h.removeprefix(name) for h in final['unreachable'])}; "
             f"slow {', '.join(h.removeprefix(name) for h in final['suspect_hosts'])}"
             + (f"; links {final['suspect_links']}" if final["suspect_links"] else ""))
    return took, ("exact" if exact else "not exact") + f" ({named})"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", type=int, default=12)
    parser.add_argument("--kill", type=hosts_list, default=[3, 9], metavar="H,H",
                        help="hosts whose processes are SIGKILLed (1-based; default 3,9)")
    parser.add_argument("--down", type=hosts_list, default=[], metavar="H,H",
                        help="hosts whose interface is brought down")
    parser.add_argument("--slow", type=hosts_list, default=[6], metavar="H,H")
    parser.add_argument("--rate", default="300mbit")
    parser.add_argument("--after", type=float, default=20.0,
                        help="seconds after the check's first records (default 20)")
    parser.add_argument("--plan", default="screen")
    parser.add_argument("--timeout", type=int, default=60)
    parser.add_argument("--doctor-repeat", type=int, default=8, help="doctor.py --repeat")
    parser.add_argument("--repeat", type=int, default=1, help="runs (default 1)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("doctor_chaos: simulated hosts need root")
    if 1 in args.kill + args.down:
        parser.error("host 1 holds rank 0 and the store: lose another")
    output = Path(f"/tmp/doctor-chaos-{os.getpid()}.jsonl")
    print(f"# {args.hosts} hosts, --plan {args.plan} --timeout {args.timeout} --repeat "
          f"{args.doctor_repeat}; slow {args.slow} at {args.rate}; killed {args.kill}, down "
          f"{args.down}, {args.after:g} s into the check; load {os.getloadavg()[0]:.1f}")
    exact = 0
    for run in range(args.repeat):
        took, how = one(args, output)
        exact += how.startswith("exact")
        shown = "-" if took is None else f"{took:.1f} s"
        print(f"run {run + 1}: verdict {shown} after the losses (due within "
              f"{args.timeout + 30} s): {how}", flush=True)
    print(f"exact verdicts: {exact} of {args.repeat}")


if __name__ == "__main__":
    main()
