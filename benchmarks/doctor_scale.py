"""doctor.py's screen at fleet scale, on the modelled fabric (commbench/doctor/model.py): the
planner and the verdict that run on real ranks, run against random fleets of N hosts behind
switches of 16, with the noise measured on real simulated hosts here (noise.py). Per case, F
fleets, each with its fault on a host, link or switch drawn at random:

    .venv/bin/python benchmarks/doctor_scale.py --hosts 64,256,1024,4096 --fleets 200

Prints per host count and plan: rounds (median and most, the retests' included), the modelled
wall time (the most rounds x noise.ROUND_S, the seconds a round took here), the fraction of
fleets whose verdict named exactly the fault (nothing else), and the false alarms (anything
named that is not the fault) per fleet. `--plan full` has every pair once: N-1 rounds, shown
for its time only (it is not simulated here). The congested cases (a switch slow to the rest
only under a collective's load, which no pair shows) add the fleet-wide collective and its
bisection (commbench/doctor/bisect.py) after the screen, and so does "healthy + fleet-wide
too" (its false alarms); the other cases run without it."""

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from commbench.doctor import model, noise  # noqa: E402

CASES = ("healthy", "healthy + fleet-wide", "host 2x", "host 10x", "host 50x", "link 10x",
         "uplink 2x", "uplink 2x without topology", "congested switch 2x",
         "congested switch 2x without topology", "flapping 10x", "dead host")


def fleet(case, count, seed):
    """(Fabric, what an exact verdict names, whether the check knows the topology)."""
    pick = random.Random(seed * 7919 + count)
    host = pick.randrange(count)
    name = f"n{host + 1:04d}"
    faults, want, topology = {}, set(), True
    if case.startswith("host"):
        faults = {"slow_hosts": {host: 1 / float(case.split()[1][:-1])}}
        want = {("host", name)}
    elif case.startswith("link"):
        a, b = sorted(pick.sample(range(count), 2))
        faults = {"slow_links": {(a, b): 0.1}}
        want = {("link", f"n{a + 1:04d}", f"n{b + 1:04d}")}
    elif case.startswith("uplink"):
        switch = pick.randrange(count // 16)
        faults = {"slow_uplinks": {switch: 0.5}}
        want = {("switch", f"s{switch + 1}")}
        topology = "without topology" not in case
    elif case.startswith("congested"):  # slow under a collective only: no pair shows it
        switch = pick.randrange(count // 16)
        faults = {"congested": {switch: 0.5}}
        topology = "without topology" not in case
        members = tuple(f"n{h + 1:04d}" for h in range(16 * switch, 16 * switch + 16))
        want = {("switch", f"s{switch + 1}")} if topology else {("group",) + members}
    elif case.startswith("flapping"):
        faults = {"flapping": {host: 0.1}}
        want = {("host", name)}
    elif case == "dead host":
        faults = {"dead": {host: 1}}
        want = {("unreachable", name)}
    return model.Fabric(count, seed=seed, **faults), want, topology


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", default="64,256,1024,4096")
    parser.add_argument("--fleets", type=int, default=200, help="random fleets per case")
    parser.add_argument("--rounds", type=int, default=3, help="the screen's --rounds")
    parser.add_argument("--cases", default=",".join(CASES),
                        help="comma-separated, of: " + ", ".join(CASES))
    args = parser.parse_args()
    cases = [c.strip() for c in args.cases.split(",")]
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        parser.error(f"unknown case '{unknown[0]}'")
    print(f"# modelled fabric: switches of 16 hosts, noise from real runs here (sigma "
          f"{noise.SIGMA}); {args.fleets} fleets a case; a round {noise.ROUND_S} s")
    print("| hosts | plan | case | rounds (median, most) | modelled time | named exactly | "
          "false alarms / fleet |")
    print("|---|---|---|---|---|---|---|")
    for count in map(int, args.hosts.split(",")):
        full = count - 1 if count % 2 == 0 else count
        print(f"| {count} | full | any | {full} | {full * noise.ROUND_S / 60:.0f} min | "
              "(not simulated) | |", flush=True)
        for case in cases:
            started = time.monotonic()
            rounds, exact, alarms = [], 0, 0
            for seed in range(args.fleets):
                fabric, want, topology = fleet(case, count, seed)
                outcome = model.check(fabric, args.rounds, seed, topology=topology,
                                      whole="congested" in case or "fleet-wide" in case)
                named = outcome.named()
                rounds.append(outcome.rounds)
                exact += named == want
                alarms += len(named - want)
            print(f"| {count} | screen --rounds {args.rounds} | {case} | "
                  f"{statistics.median(rounds):g}, {max(rounds)} | "
                  f"{max(rounds) * noise.ROUND_S:.0f} s | {exact / args.fleets:.1%} | "
                  f"{alarms / args.fleets:.3f} |", flush=True)
            print(f"#   ({time.monotonic() - started:.0f} s)", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
