"""How long a doctor.py check takes, and whether it names what is wrong and nothing else, on
simulated hosts (scripts/sim-hosts.sh: network namespaces; root): for each host count, R checks
of healthy hosts, then one with a host's link slowed and one with a single link slowed (htb).
One rank per host, started by hand as a launcher would (RANK, WORLD_SIZE, MASTER_ADDR, ...).
`--plans full,screen` runs each plan on the same simulated hosts, one after the other, for
each case (`--cases`: healthy, slow host, slow link).

    .venv/bin/python benchmarks/doctor_check.py --hosts 4,8 --repeat 5
    .venv/bin/python benchmarks/doctor_check.py --hosts 16 --repeat 1 --plans full,screen \
        --cases "healthy,slow host"

Prints one line per check and a summary per host count; docs/doctor.md quotes it.
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SIM = ROOT / "scripts" / "sim-hosts.sh"


def check(name, subnet, count, args, output):
    port = random.randint(20000, 28000)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    started = time.monotonic()
    procs = [subprocess.Popen(
        [str(SIM), "run", name, str(i + 1), "env", f"PATH={env['PATH']}", f"RANK={i}",
         "LOCAL_RANK=0", f"WORLD_SIZE={count}", "LOCAL_WORLD_SIZE=1", f"MASTER_ADDR={subnet}.1",
         f"MASTER_PORT={port}", sys.executable, "doctor.py", "--dist=torch", "--backend=gloo",
         f"--output={output}", "--overwrite", *args],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for i in range(count)]
    statuses = [proc.wait(timeout=1200) for proc in procs]
    seconds = time.monotonic() - started
    lines = [json.loads(line) for line in Path(output).read_text().splitlines()]
    verdict = next(line for line in lines if line.get("type") == "verdict")
    return seconds, statuses, verdict


def named(verdict):
    return ([f"host {h}" for h in verdict["suspect_hosts"]] +
            [f"link {a}-{b}" for a, b in verdict["suspect_links"]] +
            [f"switch {s}" for s in verdict.get("suspect_switches", [])] +
            [f"unreachable {h}" for h in verdict["unreachable"]])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", default="4,8", help="host counts (default 4,8)")
    parser.add_argument("--repeat", type=int, default=5, help="healthy checks per count")
    parser.add_argument("--rate", default="200mbit", help="a slowed host's or link's rate")
    parser.add_argument("--plans", default="", help="doctor.py --plan of each check, "
                        "comma-separated (full,screen: both on the same hosts); default: "
                        "doctor.py's own (auto)")
    parser.add_argument("--cases", default="healthy,slow host,slow link",
                        help="comma-separated, of: healthy, slow host, slow link")
    parser.add_argument("doctor_args", nargs="*", help="flags for doctor.py (after --)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("doctor_check: simulated hosts need root")
    out = Path(tempfile.mkdtemp()) / "doctor.jsonl"
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((line.split(":", 1)[1].strip() for line in lscpu.splitlines()
                  if line.startswith("Model name")), "?")
    print(f"# {model}, {os.cpu_count()} CPUs; doctor.py {' '.join(args.doctor_args)}")
    plans = [p for p in args.plans.split(",") if p] or [""]
    cases = [c.strip() for c in args.cases.split(",")]
    if any(c not in ("healthy", "slow host", "slow link") for c in cases):
        parser.error(f"--cases: healthy, slow host, slow link: {args.cases}")
    for count in map(int, args.hosts.split(",")):
        times, healthy = {p: [] for p in plans}, {p: 0 for p in plans}
        each = [c for c in ["healthy"] * args.repeat + ["slow host", "slow link"] if c in cases]
        for case in each:
            name = "bd" + uuid.uuid4().hex[:5]
            subnet = f"10.{random.randint(128, 191)}.{random.randint(0, 255)}"
            subprocess.run([str(SIM), "up", name, str(count), subnet], check=True,
                           capture_output=True)
            try:
                if case == "slow host":
                    subprocess.run([str(SIM), "slow", name, "2", args.rate], check=True,
                                   capture_output=True)
                    want = [f"host {name}2"]
                elif case == "slow link":
                    subprocess.run([str(SIM), "slow-link", name, "1", "3", args.rate],
                                   check=True, capture_output=True)
                    want = [f"link {name}1-{name}3"]
                else:
                    want = []
                runs = []
                for plan in plans:
                    flags = [f"--plan={plan}"] if plan else []
                    runs.append((plan, *check(name, subnet, count,
                                              [*flags, *args.doctor_args], out)))
            finally:
                subprocess.run([str(SIM), "down", name], capture_output=True)
            for plan, seconds, statuses, verdict in runs:
                found = named(verdict)
                right = found == want and set(statuses) == {0 if not want else 1}
                if case == "healthy":
                    times[plan].append(seconds)
                    healthy[plan] += right
                shown = f"--plan {plan:<6}  " if plan else ""
                print(f"{count} hosts  {shown}{case:<9}  {seconds:6.1f} s  exit {statuses[0]}  "
                      f"named: {', '.join(found) or 'nothing'}  {'ok' if right else 'WRONG'}"
                      + (f"  (cleared: {len(verdict['cleared'])})" if verdict["cleared"] else ""),
                      flush=True)
                if not right:  # what it saw, to tell a real fault of the machine from a false alarm
                    for finding in verdict["findings"]:
                        print(f"    {finding}", flush=True)
        for plan in plans:
            if times[plan]:
                shown = f" --plan {plan}" if plan else ""
                print(f"{count} hosts{shown}: healthy checks {healthy[plan]}/{args.repeat} right, "
                      f"median {statistics.median(times[plan]):.1f} s (min {min(times[plan]):.1f}, "
                      f"max {max(times[plan]):.1f})", flush=True)

if __name__ == "__main__":
    main()
