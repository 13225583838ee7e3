"""A modelled fabric, for checks at fleet scale: the planner (plan.py) and the screen's verdict
(fleet.py, fleet_retest.py) run unchanged against it instead of real ranks.

Hosts behind leaf switches (`per_switch` each) joined by a non-blocking spine; every host's
link at one rate, every leaf's uplink at its hosts' sum. A pair's bandwidth is the least of its
hosts' rates, its own link's, and each uplink it crosses shared among that round's pairs across
it, times the noise model's (noise.py: a round offset and a pair residual drawn from the real
runs, with a little jitter). Faults: a host slow by a factor; a link slow; a switch's uplink
slow; a host slow in some rounds only (flapping: in each round, slow with probability 1/2); a
dead host (its pairs fail from the second round on: unreachable).

A collective across a group of hosts at once (the fleet-wide check, bisect.py) loads the
uplinks as an all-to-all would: each host's traffic spread evenly over the group, so a switch's
uplink carries its hosts' share to the group's hosts behind other switches; a host's bandwidth
in it is the slowest member's rate, or an uplink's rate over that load, times the noise (one
round offset, one residual a group). Links do not enter it (one pair's share of a host's
traffic is small). A congested switch (`congested`) is slow to the rest only under a
collective's many flows at once (congestion no single pair shows: ECMP collisions, incast):
its pairs run at full speed."""

import math
import random
from dataclasses import dataclass, field

from . import bisect, fleet, fleet_retest, noise, plan
from .verdict import Figures, Link

BPS = noise.PAIR_GBPS * 1e9 / 8
JITTER = 0.02  # the residuals' kernel: log-normal jitter about each drawn value


@dataclass
class Fabric:
    count: int
    per_switch: int = 16
    slow_hosts: dict = field(default_factory=dict)  # host -> factor (0.5: 2x slow)
    slow_links: dict = field(default_factory=dict)  # (i, j), i < j -> factor
    slow_uplinks: dict = field(default_factory=dict)  # switch -> factor
    flapping: dict = field(default_factory=dict)  # host -> factor, in half the rounds
    congested: dict = field(default_factory=dict)  # switch -> factor, under a collective only
    dead: dict = field(default_factory=dict)  # host -> the round it dies in
    seed: int = 0

    def __post_init__(self):
        self.random = random.Random(self.seed)
        self.leaf = [h // self.per_switch for h in range(self.count)]
        self.switches = max(self.leaf) + 1
        self.names = [f"n{h + 1:04d}" for h in range(self.count)]

    def _rate(self, host, number):
        rate = self.slow_hosts.get(host, 1.0)
        if host in self.flapping and self.random.random() < 0.5:
            rate = min(rate, self.flapping[host])
        return rate

    def measure(self, pairs, number):
        """{pair: Link or None (a dead host's)} of `pairs` measured at once in round `number`."""
        offset = self.random.choice(noise.ROUND_OFFSETS)
        flows = [0] * self.switches
        for a, b in pairs:
            if self.leaf[a] != self.leaf[b]:
                flows[self.leaf[a]] += 1
                flows[self.leaf[b]] += 1
        out = {}
        for a, b in pairs:
            if any(h in self.dead and number >= self.dead[h] for h in (a, b)):
                out[(a, b)] = None
                continue
            rate = min(self._rate(a, number), self._rate(b, number),
                       self.slow_links.get((a, b), 1.0))
            if self.leaf[a] != self.leaf[b]:
                for s in (self.leaf[a], self.leaf[b]):
                    size = min(self.per_switch, self.count - s * self.per_switch)
                    rate = min(rate, self.slow_uplinks.get(s, 1.0) * size / flows[s])
            ways = [BPS * rate * math.exp(offset + self.random.choice(noise.RESIDUALS) +
                                          self.random.gauss(0, JITTER)) for _ in range(2)]
            out[(a, b)] = Link(latency_s=20e-6, forward_Bps=ways[0], backward_Bps=ways[1],
                               both_Bps=ways[0] + ways[1])
        return out


    def collective(self, groups, number):
        """[a host's bandwidth in each group's collective, or None (a dead host in it)] of
        `groups` (disjoint lists of hosts) measured at once in round `number`."""
        offset = self.random.choice(noise.ROUND_OFFSETS)
        out = []
        for group in groups:
            if any(h in self.dead and number >= self.dead[h] for h in group):
                out.append(None)
                continue
            rate = min(self._rate(h, number) for h in group)
            behind = {}
            for h in group:
                behind[self.leaf[h]] = behind.get(self.leaf[h], 0) + 1
            if len(behind) > 1:
                for s, count in behind.items():
                    size = min(self.per_switch, self.count - s * self.per_switch)
                    load = count * (len(group) - count) / (len(group) - 1)
                    rate = min(rate, self.slow_uplinks.get(s, 1.0) * size / load,
                               self.congested.get(s, 1.0))
            out.append(BPS * rate * math.exp(offset + self.random.choice(noise.RESIDUALS) +
                                             self.random.gauss(0, JITTER)))
        return out


@dataclass
class Outcome:
    figures: Figures
    judgement: object
    rounds: int  # pair rounds, the retests' included

    def named(self):
        """What the verdict names: ("host", name), ("link", a, b), ("switch", s), ..."""
        out = set()
        for f in self.judgement.findings:
            if f.kind == "switch":
                out.add(("switch", f.switch))
            elif f.kind == "group":
                out.add(("group",) + tuple(self.figures.names[h] for h in sorted(f.hosts)))
            elif f.kind == "link":
                out.add(("link",) + tuple(self.figures.names[h] for h in f.hosts))
            else:
                out.add((f.kind, self.figures.names[f.hosts[0]]))
        return out


def check(fabric, rounds=plan.DEFAULT_ROUNDS, seed=0, topology=True, retest=2, whole=False):
    """The screen on `fabric`, as doctor.py runs it on real ranks: the rounds (each planned
    from the last one's figures), the first pass, the retests beside their controls, the
    verdict; then (`whole`) the fleet-wide collective and its bisection (bisect.py)."""
    figures = Figures(fabric.names, 0.5)
    if topology:
        figures.leaf = fabric.leaf
        figures.switch_names = [f"s{s + 1}" for s in range(fabric.switches)]
    planner = plan.Screen(fabric.count, rounds, seed, figures.leaf)
    last = {}
    for number in range(len(planner)):
        pairs = planner.round(number, last, gone=figures.unreachable)
        for (a, b), link in fabric.measure(pairs, number).items():
            if link is None:
                figures.unreachable.update(h for h in (a, b) if h in fabric.dead)
                continue
            figures.measured.append((number, a, b, link))
            figures.links[(a, b)] = link
            last[a] = last[b] = link.bandwidth
    judgement = fleet.first_pass(figures)
    planned, controls = fleet_retest.retest_plan(figures, judgement, retest) if retest else ([], [])
    for offset, pairs in enumerate(planned):
        number, beside = len(planner) + offset, controls[offset]
        for pair, link in fabric.measure(pairs, number).items():
            if link is None:
                figures.unreachable.update(h for h in pair if h in fabric.dead)
            elif pair in beside:
                figures.controls[beside[pair]] = link
                figures.control_of[beside[pair]] = pair
                figures.retest_log.append((number, pair, link, beside[pair]))
            else:
                figures.retests[pair] = link
                figures.retest_log.append((number, pair, link, None))
    fleet_retest.confirm(figures, judgement)
    done = len(planner) + len(planned)
    if whole:
        done += bisect.run(figures, judgement, fabric.collective, done)
    return Outcome(figures, judgement, done)
