"""How long a doctor.py check takes, and whether it names what is wrong and nothing else, on
simulated hosts (scripts/sim-hosts.sh: network namespaces; root): for each host count, R checks
of healthy hosts, then one with a host's link slowed and one with a single link slowed (htb).
One rank per host (`--per-host N`: N), started by hand as a launcher would (RANK, LOCAL_RANK,
WORLD_SIZE, MASTER_ADDR, ...).
`--plans full,screen` runs each plan on the same simulated hosts, one after the other, for
each case (`--cases`: healthy, slow host, slow link).

    .venv/bin/python benchmarks/doctor_check.py --hosts 4,8 --repeat 5
    .venv/bin/python benchmarks/doctor_check.py --hosts 16 --repeat 1 --plans full,screen \
        --cases "healthy,slow host"
    .venv/bin/python benchmarks/doctor_check.py --hosts 8 --repeat 5 --slow-repeat 3 \
        --plans full,screen --cases "healthy,slow host" --busy 2 --rate half
    .venv/bin/python benchmarks/doctor_check.py --hosts 3 --per-host 2 --repeat 20 \
        --cases healthy --busy 2 -- --large-bytes=4M --trials=10 --repeat=3

    .venv/bin/python benchmarks/doctor_check.py --busy 2 --repeat 20 \
        --tests tests/test_doctor.py::test_a_slow_link_is_named_and_neither_of_its_hosts

(the third: two CPU-bound loops beside every check, a host capped at half of the healthy
checks' median pair bandwidth, measured beside the same loops; the fourth: tests/test_doctor.py's
healthy 3 hosts of 2 ranks, 20 times beside two busy loops, with the tests' own flags; the last:
a test itself, its exact assertions on the verdict and all, 20 times beside two busy loops:
`--tests` takes pytest node ids, comma-separated, and prints each run's outcome and each
test's count of passes)

Prints one line per check and a summary per host count; benchmarks/doctor-results.md keeps
what it printed.
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


def check(name, subnet, count, args, output, per_host=1):
    port = random.randint(20000, 28000)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    started = time.monotonic()
    procs = [subprocess.Popen(
        [str(SIM), "run", name, str(i // per_host + 1), "env", f"PATH={env['PATH']}", f"RANK={i}",
         f"LOCAL_RANK={i % per_host}", f"WORLD_SIZE={count * per_host}",
         f"LOCAL_WORLD_SIZE={per_host}", f"MASTER_ADDR={subnet}.1",
         f"MASTER_PORT={port}", sys.executable, "doctor.py", "--dist=torch", "--backend=gloo",
         f"--output={output}", "--overwrite", *args],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for i in range(count * per_host)]
    statuses = [proc.wait(timeout=1200) for proc in procs]
    seconds = time.monotonic() - started
    text = Path(output).read_text()
    lines = [json.loads(line) for line in text.splitlines()]
    verdict = next(line for line in lines if line.get("type") == "verdict")
    verdict["text"] = text  # every record, kept when the check was wrong
    # each pair's bandwidth (its slower direction) in the first pass: what "half" is half of
    verdict["pair_Bps"] = [min(r["forward_Bps"], r["backward_Bps"]) for r in lines
                           if r.get("type") == "doctor" and r.get("phase") == "pairs"
                           and "control_for" not in r and r.get("forward_Bps")
                           and r.get("backward_Bps")]
    return seconds, statuses, verdict


def busy_loops(count):
    """`count` CPU-bound processes beside the check (another job's on a shared machine)."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


def named(verdict):
    return ([f"host {h}" for h in verdict["suspect_hosts"]] +
            [f"link {a}-{b}" for a, b in verdict["suspect_links"]] +
            [f"switch {s}" for s in verdict.get("suspect_switches", [])] +
            [f"unreachable {h}" for h in verdict["unreachable"]])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", default="4,8", help="host counts (default 4,8)")
    parser.add_argument("--repeat", type=int, default=5, help="healthy checks per count")
    parser.add_argument("--rate", default="200mbit", help="a slowed host's or link's rate; "
                        "'half': half of the healthy checks' median pair bandwidth (the healthy "
                        "checks run first)")
    parser.add_argument("--slow-repeat", type=int, default=1,
                        help="checks per slow case (default 1)")
    parser.add_argument("--per-host", type=int, default=1, metavar="N",
                        help="ranks a host (default 1)")
    parser.add_argument("--per-switch", type=int, default=0, metavar="N",
                        help="hosts behind switches of N (sim-hosts.sh up ... N), the check "
                             "given their --topology; needed by the slow uplink case")
    parser.add_argument("--busy", type=int, default=0,
                        help="CPU-bound busy loops running beside every check (default 0)")
    parser.add_argument("--plans", default="", help="doctor.py --plan of each check, "
                        "comma-separated (full,screen: both on the same hosts); default: "
                        "doctor.py's own (auto)")
    parser.add_argument("--cases", default="healthy,slow host,slow link",
                        help="comma-separated, of: healthy, slow host, slow link, slow uplink "
                             "(switch 1's, with --per-switch)")
    parser.add_argument("--tests", default="", metavar="IDS",
                        help="pytest node ids, comma-separated: run each test --repeat times "
                             "(beside --busy loops) instead of the checks above")
    parser.add_argument("doctor_args", nargs="*", help="flags for doctor.py (after --)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("doctor_check: simulated hosts need root")
    if args.tests:
        return run_tests(args)
    out = Path(tempfile.mkdtemp()) / "doctor.jsonl"
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((line.split(":", 1)[1].strip() for line in lscpu.splitlines()
                  if line.startswith("Model name")), "?")
    print(f"# {model}, {os.cpu_count()} CPUs; doctor.py {' '.join(args.doctor_args)}")
    plans = [p for p in args.plans.split(",") if p] or [""]
    cases = [c.strip() for c in args.cases.split(",")]
    if any(c not in ("healthy", "slow host", "slow link", "slow uplink") for c in cases):
        parser.error(f"--cases: healthy, slow host, slow link, slow uplink: {args.cases}")
    if "slow uplink" in cases and not args.per_switch:
        parser.error("--cases 'slow uplink' needs --per-switch N")
    loops = busy_loops(args.busy)
    if loops:
        print(f"# {len(loops)} busy loop(s) beside every check (python -c 'while True: pass')")
    try:
        for count in map(int, args.hosts.split(",")):
            each_count(count, args, plans, cases, out)
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()


def run_tests(args):
    """Each test of --tests, --repeat times in turn, beside --busy loops: a line a run (its
    outcome, seconds, and a failure's first assertion line) and each test's passes."""
    ids = [i.strip() for i in args.tests.split(",") if i.strip()]
    loops = busy_loops(args.busy)
    print(f"# {len(loops)} busy loop(s) beside every run (python -c 'while True: pass')")
    passed = {i: 0 for i in ids}
    try:
        for test in ids:
            for k in range(args.repeat):
                started = time.monotonic()
                result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly",
                                         "-p", "no:cacheprovider", test], cwd=ROOT,
                                        capture_output=True, text=True)
                seconds = time.monotonic() - started
                passed[test] += result.returncode == 0
                why = next((line for line in result.stdout.splitlines()
                            if line.startswith("E ")), "")
                print(f"{test.rsplit('::', 1)[-1]}  run {k + 1}  {seconds:6.1f} s  "
                      f"{'passed' if result.returncode == 0 else 'FAILED'}  {why[:200]}",
                      flush=True)
                if result.returncode != 0:  # pytest's report: the assertion, stdout, stderr
                    kept = Path(tempfile.gettempdir()) / \
                        f"doctor-check-{test.rsplit('::', 1)[-1]}-{k + 1}.txt"
                    kept.write_text(result.stdout + result.stderr)
                    print(f"    (its report: {kept})", flush=True)
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
    for test in ids:
        print(f"{test}: {passed[test]}/{args.repeat} passed", flush=True)


def each_count(count, args, plans, cases, out):
    """Every case's checks on `count` hosts, a line each, then the host count's summary."""
    times, healthy = {p: [] for p in plans}, {p: 0 for p in plans}
    slow = {}  # (plan, case): [right, checks]
    pair_Bps = []
    each = [c for c in ["healthy"] * args.repeat +
            ["slow host"] * args.slow_repeat + ["slow link"] * args.slow_repeat +
            ["slow uplink"] * args.slow_repeat if c in cases]
    for case in each:
        rate = args.rate
        if rate == "half" and case != "healthy":
            if not pair_Bps:
                sys.exit("doctor_check: --rate half needs healthy checks first (--cases)")
            rate = f"{int(statistics.median(pair_Bps) * 8 / 1e6 / 2)}mbit"
        name = "bd" + uuid.uuid4().hex[:5]
        subnet = f"10.{random.randint(128, 191)}.{random.randint(0, 255)}"
        layout = [str(args.per_switch)] if args.per_switch else []
        subprocess.run([str(SIM), "up", name, str(count), subnet, *layout], check=True,
                       capture_output=True)
        topology = []
        if args.per_switch:
            conf = out.with_name("topology.conf")
            conf.write_text(subprocess.run([str(SIM), "topology", name], check=True,
                                           capture_output=True, text=True).stdout)
            topology = [f"--topology={conf}"]
        try:
            want = inject(name, case, rate)
            runs = []
            for plan in plans:
                flags = [f"--plan={plan}"] if plan else []
                runs.append((plan, *check(name, subnet, count,
                                          [*flags, *topology, *args.doctor_args], out,
                                          args.per_host)))
        finally:
            subprocess.run([str(SIM), "down", name], capture_output=True)
        for plan, seconds, statuses, verdict in runs:
            where = f"{count} hosts" + (f" x {args.per_host}" if args.per_host > 1 else "")
            right = show(where, name, plan, case, rate, want, seconds, statuses, verdict)
            if case == "healthy":
                times[plan].append(seconds)
                healthy[plan] += right
                pair_Bps += verdict["pair_Bps"]
            else:
                done = slow.setdefault((plan, case), [0, 0])
                done[0], done[1] = done[0] + right, done[1] + 1
    summary(count, args, plans, times, healthy, slow, pair_Bps)


def inject(name, case, rate):
    """Slow what `case` says on the simulated hosts `name` (htb at `rate`); what a right
    verdict names."""
    if case == "slow uplink":
        subprocess.run([str(SIM), "slow-uplink", name, "1", rate], check=True,
                       capture_output=True)
        return ["switch s1"]
    if case == "slow host":
        subprocess.run([str(SIM), "slow", name, "2", rate], check=True, capture_output=True)
        return [f"host {name}2"]
    if case == "slow link":
        subprocess.run([str(SIM), "slow-link", name, "1", "3", rate], check=True,
                       capture_output=True)
        return [f"link {name}1-{name}3"]
    return []


def show(where, name, plan, case, rate, want, seconds, statuses, verdict):
    """One check's line (and, when it is wrong, what it saw); whether it was right."""
    found = named(verdict)
    right = found == want and set(statuses) == {0 if not want else 1}
    shown = f"--plan {plan:<6}  " if plan else ""
    at = f" at {rate}" if case != "healthy" else ""
    print(f"{where}  {shown}{case + at:<9}  {seconds:6.1f} s  exit {statuses[0]}  "
          f"named: {', '.join(found) or 'nothing'}  {'ok' if right else 'WRONG'}"
          + (f"  (cleared: {len(verdict['cleared'])})" if verdict["cleared"] else ""),
          flush=True)
    if not right:  # what it saw, to tell a real fault of the machine from a false alarm
        kept = Path(tempfile.gettempdir()) / f"doctor-check-{name}-{plan or 'auto'}.jsonl"
        kept.write_text(verdict["text"])
        print(f"    (its records: {kept})", flush=True)
        for finding in verdict["findings"]:
            print(f"    {finding}", flush=True)
        for cleared in verdict["cleared"]:
            print(f"    cleared: {cleared}", flush=True)
    return right


def summary(count, args, plans, times, healthy, slow, pair_Bps):
    if pair_Bps:
        print(f"{count} hosts: healthy pairs' median {statistics.median(pair_Bps) * 8 / 1e9:.2f}"
              f" Gbps ({len(pair_Bps)} pairs)", flush=True)
    for plan in plans:
        shown = f" --plan {plan}" if plan else ""
        if times[plan]:
            print(f"{count} hosts{shown}: healthy checks {healthy[plan]}/{args.repeat} right, "
                  f"median {statistics.median(times[plan]):.1f} s (min {min(times[plan]):.1f}, "
                  f"max {max(times[plan]):.1f})", flush=True)
        for case in ("slow host", "slow link", "slow uplink"):
            right, checks = slow.get((plan, case), (0, 0))
            if checks:
                print(f"{count} hosts{shown}: {case} named exactly {right}/{checks}",
                      flush=True)


if __name__ == "__main__":
    main()
