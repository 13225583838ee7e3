"""The whole fleet at once, and bisection into the group that slows it (after the screen).

Pairs do not load what many hosts share: a switch's uplink slowed 2x carries one pair's flow at
full speed, and shows only when most of its hosts send outside at once. So, after the screen's
verdict, one collective runs across every live host not named yet (what is named sits out),
held against what its pairs predict: the median pair's bandwidth times the slowest host's own
figure (its best pair against the median, counted only under 0.75). Under 1/SLOW of it
(0.85x), the fleet is slower than its pairs:

- its two halves run at once (by switch when the topology is known: whole switches in each
  half; without it, by host order, as names usually follow racks), each against its own
  prediction and each padded with as many good hosts from outside the group, so that it still
  spans switches and loads what they share as the fleet did; the half APART slower than the
  other is split again, about log2 N rounds; halves alike twice stop it (both fine: the group
  needs all its hosts' load; both slow: the fault is in both, the machine was busy, or the
  whole fabric); when the larger of two unequal halves is the slower, it is given back what its
  size alone would make of the fleet's slowness (size_term: a larger ring is slower on the same
  busy cores), no more than to alike;
- the last split is measured once more: the same half slower again, and slower by APART on
  the mean of every measurement of that split (one that came out alike counts too: two of
  three over the bar by a hair is not enough), or nothing is named; the
  group found is a switch when it is the live hosts of one (with the topology), else a group
  of hosts (without it: a switch or uplink, nothing says which), one host alone a slow host
  (under the fleet's load only).

It needs the pairs' figures only, so it runs unchanged on real ranks or on model.py's fabric:
`collective(groups, number)` measures each group's collective at once (a host's bandwidth in
it, or None)."""

import math
import statistics

from .verdict import Finding

SLOW = math.log(1 / 0.85)  # a fleet at under 0.85x its prediction (rounds' offsets: 0.16 sd)
CLEAR = math.log(1 / 0.75)  # a host's best pair under 0.75x the median lowers the prediction
APART = 0.35  # log: one half slower than the other beyond two pairs' residuals (noise.py)


def host_factors(figures):
    """(median pair bandwidth, {host: its best pair / that median, where under 0.75})."""
    measured = figures.measured or [(None, a, b, link) for (a, b), link in figures.links.items()
                                    if link is not None]  # the full plan: every pair's
    values = [link.bandwidth for _, _, _, link in measured if link.bandwidth]
    if not values:
        return 0.0, {}
    middle = statistics.median(values)
    best = {}
    for _, a, b, link in measured:
        for h in (a, b):
            best[h] = max(best.get(h, 0.0), link.bandwidth or 0.0)
    # a host lowers the prediction only when it is clearly slow (the best of a few healthy
    # pairs is rarely under 0.75x the median): else the fleet's noisiest host would set it
    return middle, {h: v / middle for h, v in best.items() if v / middle < math.exp(-CLEAR)}


def halves(group, leaf):
    """`group` (sorted hosts) in two: whole switches in each when `leaf` is known and the group
    spans more than one, else by host order."""
    if leaf is not None:
        switches = sorted({leaf[h] for h in group})
        if len(switches) > 1:
            first, total, seen = [], len(group), 0
            for s in switches:
                members = [h for h in group if leaf[h] == s]
                if seen and seen + len(members) / 2 > total / 2:
                    break
                first += members
                seen += len(members)
            chosen = set(first)
            return first, [h for h in group if h not in chosen]
    middle = len(group) // 2
    return group[:middle], group[middle:]


def run(figures, judgement, collective, number):
    """The fleet-wide collective and its bisection after `judgement` (fleet_retest.confirm done):
    a finding added to judgement.findings; figures.fleet_log gets every collective measured
    (round, hosts, a host's bandwidth, the prediction). Returns the rounds it took."""
    middle, factor = host_factors(figures)
    named = {h for f in judgement.findings for h in f.hosts}
    live = [h for h in range(len(figures.names))
            if h not in figures.unreachable and h not in named]
    log = figures.fleet_log = []
    if len(live) < 4 or not middle:
        return 0
    start = number

    def ratios(groups):
        nonlocal number
        measured = collective(groups, number)
        out = []
        for group, value in zip(groups, measured):
            predicted = middle * min(factor.get(h, 1.0) for h in group)
            log.append((number, tuple(group), value, predicted))
            out.append(math.log(value / predicted) if value else -math.inf)
        number += 1
        return out

    def padded(group, a, b):
        """a and b, each with as many good hosts from outside `group` (the ballast: so each
        spans switches and loads what it shares as in the fleet), disjoint."""
        inside = set(group)
        outside = [h for h in live if h not in inside]
        return sorted(a + outside[0::2][:len(a)]), sorted(b + outside[1::2][:len(b)])

    (whole,) = ratios([live])
    if whole >= -SLOW:
        return number - start

    def split(group, a, b):  # the halves at once, the larger's size given back (_sized)
        groups = list(padded(group, a, b))
        return _sized(*ratios(groups), *map(len, groups), whole, len(live))

    group, last = _narrow(live, figures.leaf, split)
    if last is None:
        judgement.cleared.append(
            f"the fleet-wide collective ran at {math.exp(whole):.2f}x what its pairs predict; "
            "its halves alike: the machine was busy, or the whole fabric (nothing named)")
        return number - start
    parent, a, b, first, gaps = last  # the last split again, at once: the same half slower?
    ra, rb = split(parent, a, b)
    mean = statistics.fmean(gaps + [ra - rb])
    if not (abs(ra - rb) >= APART and (ra < rb) == first and abs(mean) >= APART
            and (mean < 0) == first):
        judgement.cleared.append(
            f"the fleet-wide collective ran at {math.exp(whole):.2f}x what its pairs predict; "
            "bisected, its last split measured again did not hold: the slower half at "
            f"{math.exp(-abs(ra - rb)):.3f}x the other, {math.exp(-abs(mean)):.3f}x on the mean "
            f"of its {len(gaps) + 1} measurements (the bar {math.exp(-APART):.3f}x; nothing "
            "named)")
        return number - start
    _name(figures, judgement, sorted(group), whole, number - start, min(ra, rb))
    return number - start


def _sized(ra, rb, size_a, size_b, whole, fleet):
    """The halves' log ratios [ra, rb], the larger half, when it is the slower, given back what
    its size alone would make of the fleet's slowness over the other's (size_term), no more
    than to alike: a size never makes a half look slower than it measured, nor the smaller one
    slower at all."""
    expected = size_term(whole, size_a, fleet) - size_term(whole, size_b, fleet)
    if expected < 0 and ra < rb:  # a the larger, expected slower
        ra = min(rb, ra - expected)
    elif expected > 0 and rb < ra:
        rb = min(ra, rb + expected)
    return [ra, rb]


def size_term(whole, size, fleet):
    """The log ratio a group of `size` hosts is expected to come to from its size alone, when
    the whole fleet of `fleet` came to `whole` and a pair to 0: interpolated in log size (a
    collective of more ranks has more steps to lose time in, one late rank holding up each).
    Halves of 7 and 4 hosts of a fleet of 11 at 0.5x its pairs: 0.60x and 0.75x, so the 7
    are held apart only below 0.80x the 4 (the bar's 0.705x of that); equal halves, the same
    term each: nothing changes between them. 16 simulated hosts on 2 cores beside
    other jobs (2026-12-06): a fleet of 11 at 0.38-0.60x its prediction, its 7-host half read
    as a slow group in 4 of 10 checks, for its size on the busy cores alone."""
    if fleet <= 2 or size <= 2 or whole >= 0:
        return 0.0
    return whole * min(1.0, math.log(size / 2) / math.log(fleet / 2))


def _narrow(group, leaf, measure):
    """Halve `group` while one half is slower than the other (measure(group, a, b): the halves'
    log ratios, at once). Returns (the group found, the last split (parent, a, b, a slower, the
    gaps ra - rb it measured) or None when the first split's halves were alike)."""
    last = None
    while len(group) > 1:
        a, b = halves(group, leaf)
        if not a or not b:
            break
        ra, rb = measure(group, a, b)
        gaps = [ra - rb]
        if abs(ra - rb) < APART:  # alike: once more (a pair's residual can hide 2x)
            ra, rb = measure(group, a, b)
            gaps.append(ra - rb)
        if abs(ra - rb) < APART:
            break  # alike twice (both fine: the group needs all of its load; both slow: the
            # fault is in both, or the machine was busy): nothing to narrow
        last = (group, a, b, ra < rb, gaps)
        group = a if ra < rb else b
    return group, last


def _name(figures, judgement, group, whole, rounds, ratio):
    said = (f"the fleet-wide collective ran at {math.exp(whole):.2f}x what its pairs predict; "
            f"bisected in {rounds} rounds to these {len(group)} hosts, at {math.exp(ratio):.2f}x "
            "with as many good hosts (twice, the other half beside it at once)")
    switch = _one_switch(figures, group)
    if len(group) == 1:
        finding = Finding("host", tuple(group), said, retested=True, measure="load")
    elif switch is not None:
        finding = Finding("switch", tuple(group), said, retested=True, measure="load",
                          switch=figures.switch_names[switch])
    else:
        finding = Finding("group", tuple(group), said, retested=True, measure="load")
    judgement.findings.append(finding)


def _one_switch(figures, hosts):
    """The switch whose live hosts `hosts` are (with the topology), else None."""
    if figures.leaf is None:
        return None
    switches = {figures.leaf[h] for h in hosts}
    if len(switches) != 1:
        return None
    (s,) = switches
    behind = {h for h in range(len(figures.names))
              if figures.leaf[h] == s and h not in figures.unreachable}
    return s if set(hosts) == behind else None


def span(names, hosts):
    if len(hosts) <= 4:
        return ", ".join(names[h] for h in hosts)
    return f"{names[hosts[0]]} .. {names[hosts[-1]]}"
