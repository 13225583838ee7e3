"""The screen's retests: which pairs are measured again (rounds of disjoint pairs, each suspect
beside a control pair of good hosts) and each suspect named or cleared by them (fleet.py's first
pass finds them).

Every suspect is retested before it is named (retest_plan: rounds of disjoint pairs, each
retested pair against good hosts beside a control pair of good hosts measured at the same
moment; a switch: all its hosts to good hosts outside it at once, a slow uplink showing only
under load, beside as many control pairs) and named only when its retests, each held against its
control (the difference of two pairs: sqrt(2) x the spread), are still below -RETEST_Z together
(their z's sum over the root of their number; a switch: their median). Both slow: the machine
was busy; named nothing."""

import math
import statistics

from . import retest
from .fleet import RETEST_Z
from .verdict import Finding


def good_hosts(figures, judgement):
    """Live hosts in no suspect, fastest (best pair) first."""
    bad = {h for f in judgement.suspects for h in f.hosts}
    best = judgement.scores.best
    return sorted((h for h in range(len(figures.names))
                   if h not in bad and h not in figures.unreachable),
                  key=lambda h: -best.get(h, 0.0))


def retest_plan(figures, judgement, per_host=2):
    """(rounds, controls): rounds of disjoint pairs retesting every suspect (a host against
    `per_host` good hosts, one a round, or, behind a suspect switch, against the switch's other
    hosts; a link itself; a switch: every one of its hosts against a good host behind another
    switch, in a round of its own), each beside a control pair of two good hosts (controls: one
    dict a round, control pair -> the pair it is the yardstick of in that round; one dict for
    all rounds kept only the last pair a control served, and a retest in an earlier round beside
    it went without its control: a healthy host behind a slowed uplink, 3.03 Gbps beside a
    control at 2.39, was held against the first pass's typical pair instead and named, z -3.8).
    Each finding's retested pairs go to its .pairs."""
    good = good_hosts(figures, judgement)
    leaf = figures.leaf
    # a suspect host behind a suspect switch meets its switch's other hosts: a pair outside
    # crosses the uplink the switch is suspected of, which would condemn the host for it
    mates = {h: [m for m in f.hosts if m != h] for f in judgement.suspects
             if f.kind == "switch" for h in f.hosts}
    wants = []  # [finding, suspect host or None (a link), hosts it may not meet, count]
    for finding in judgement.suspects:
        if finding.intra:
            continue  # the within-host phase again
        if finding.kind == "host":
            wants.append([finding, finding.hosts[0], set(), per_host])
        elif finding.kind == "link":
            wants.append([finding, None, set(), per_host])
    rounds, controls = [], []
    for finding in judgement.suspects:
        if finding.kind == "switch":  # a round of its own: its uplink loaded as in the screen
            controls.append({})
            rounds.append(_switch_round(finding, good, leaf, controls[-1]))
    picker = _Picker(good)
    while any(want[3] > 0 for want in wants) and len(rounds) < 4 * per_host + 4:
        mine = {}
        pairs = _retest_round(wants, picker, mates, mine)
        if not pairs:
            break
        rounds.append(sorted(pairs))
        controls.append(mine)
    return rounds, controls


class _Picker:
    """The good hosts taken in turn, the turn kept across rounds, each host once a round."""

    def __init__(self, good):
        self.good, self.cursor, self.used = good, 0, set()

    def take(self, allowed):
        for step in range(len(self.good)):
            g = self.good[(self.cursor + step) % len(self.good)]
            if g not in self.used and allowed(g):
                self.cursor = (self.cursor + step + 1) % len(self.good)
                self.used.add(g)
                return g
        return None


def _retest_round(wants, picker, mates, controls):
    """One round of disjoint pairs: each suspect that still wants a retest (a host against a good
    host it has not met, or a switch-mate; a link itself), each beside a control pair of two good
    hosts (`controls`, this round's: control pair -> the pair it is beside). Returns the
    round's pairs, controls among them."""
    picker.used = used = set()
    pairs = []
    for want in wants:
        finding, h, met, left = want
        if left <= 0:
            continue
        if h is None:
            pair = tuple(sorted(finding.hosts))
            if used & set(pair):
                continue
        else:
            if h in used:
                continue
            # none left to meet at all: done; none free this round (the good hosts taken by the
            # suspects before it and their controls): the next round (once given up here, host
            # 11 of 16 simulated hosts with 7 suspects was named "not retested")
            fresh = [m for m in (mates[h] if h in mates else picker.good)
                     if m != h and m not in met]
            if not fresh:
                want[3] = 0
                continue
            if h in mates:
                g = next((m for m in fresh if m not in used), None)
                if g is not None:
                    used.add(g)
            else:
                g = picker.take(lambda g: g != h and g not in met)
            if g is None:
                continue
            met.add(g)
            pair = (min(h, g), max(h, g))
        used.update(pair)
        pairs.append(pair)
        finding.pairs.append(pair)
        want[3] -= 1
        a = picker.take(lambda g: True)
        b = picker.take(lambda g: g != a) if a is not None else None
        if b is not None:
            control = (min(a, b), max(a, b))
            pairs.append(control)
            controls[control] = pair
        else:
            used.discard(a)
    return pairs


def _switch_round(finding, good, leaf, controls):
    """Every host behind the switch against a good host behind another, all at once (a slow
    uplink shows only when its hosts load it), beside as many control pairs of the other good
    hosts, across switches where they can be."""
    members = set(finding.hosts)
    outside = [g for g in good if leaf[g] != leaf[finding.hosts[0]]]
    pairs = []
    for h, g in zip(finding.hosts, outside):
        pairs.append((min(h, g), max(h, g)))
    finding.pairs += pairs
    rest = [g for g in outside[len(pairs):] if g not in members]
    spare = []
    while len(rest) >= 2 and len(spare) < len(pairs):
        a = rest.pop(0)
        b = next((g for g in rest if leaf[g] != leaf[a]), rest[0])
        rest.remove(b)
        spare.append((min(a, b), max(a, b)))
    for control, pair in zip(spare, pairs):
        controls[control] = pair
    return sorted(pairs + spare)


def _retests(figures, pairs):
    """[(pair, its Link, its control's pair and Link or None)] of every retest of `pairs`."""
    controls = {(number, of): (pair, link) for number, pair, link, of in figures.retest_log
                if of is not None}
    return [(pair, link, controls.get((number, pair)))
            for number, pair, link, of in figures.retest_log
            if of is None and pair in pairs and link.bandwidth]


def _against_controls(figures, measured, sigma, typical):
    """Each retest's z against its control pair, and its words ("a-b X Gbps beside c-d Y
    Gbps"). A retest with no control pair is held against the first pass's typical pair by the
    fraction rule only (--min-fraction, as the full plan's first rule): below it, its z against
    that pair; above it, 0, nothing against it. Measured at another moment, beside up to 8
    pairs at once on a busy machine, such a retest ran 0.6-0.7x the first pass's typical pair
    on healthy hosts, z -5 to -6 by the spread alone, and a healthy host and a healthy link
    were named (16 simulated hosts, load average 7 from other tests: 2 checks of 5)."""
    against, words = [], []
    for pair, again, control in measured:
        bw = again.bandwidth
        if control is not None and control[1].bandwidth:
            z = math.log(bw / control[1].bandwidth) / (sigma * math.sqrt(2))
        elif typical:
            low = figures.fraction is None or bw < figures.fraction * typical
            z, control = (math.log(bw / typical) / sigma if low else 0.0), None
        else:
            z, control = 0.0, None
        against.append(z)
        words.append(f"{figures.pair(*pair)} {figures.bw(bw)}" +
                     (f" beside {figures.pair(*control[0])} {figures.bw(control[1].bandwidth)}"
                      if control else ""))
    return against, words


def _typical(figures, judgement):
    """A healthy pair's bandwidth, what a retest without a control pair is held against: the
    median of the first pass's pairs between hosts in no suspect (3 slow hosts of 8 are in most
    of the screen's pairs after its first round, and the median of every pair would be theirs:
    two of them were cleared as noise); of every pair where no such pair was measured."""
    suspect = {h for finding in judgement.suspects for h in finding.hosts}
    every = [(i, j, lk.bandwidth) for _, i, j, lk in figures.measured if lk.bandwidth]
    healthy = [bw for i, j, bw in every if i not in suspect and j not in suspect]
    chosen = healthy or [bw for _, _, bw in every]
    return statistics.median(chosen) if chosen else None


def confirm(figures, judgement):
    """Each suspect named when its retest is still below -RETEST_Z against the control pair
    measured at the same time (or, with no control, against the first pass's median pair
    between unsuspected hosts: _typical), else cleared; then the unreachable hosts."""
    sigma = judgement.scores.sigma
    typical = _typical(figures, judgement)
    for finding in judgement.suspects:
        if finding.intra:
            retest.confirm_intra(figures, judgement, finding)
            continue
        measured = _retests(figures, set(finding.pairs))
        if not measured:
            finding.text += " (not retested)"
            judgement.findings.append(finding)
            continue
        against, words = _against_controls(figures, measured, sigma, typical)
        # a host: its retests together (z's sum over the root of their number: one noisy
        # control clears nothing); a link: the best of its retests (one descheduled rank on a
        # busy machine made a healthy pair 0.17x its control); a switch: the median of its
        # hosts' (one noisy fast pair among them clears nothing)
        if finding.kind == "switch":
            best = statistics.median(against)
        elif finding.kind == "link":
            best = max(against)
        else:  # and every retest slow by half the bar at least
            best = sum(against) / math.sqrt(len(against))
            best = best if max(against) < -RETEST_Z / 2 else max(against)
        what = ", ".join(words[:3]) + (f" and {len(words) - 3} more pairs" if len(words) > 3
                                       else "")
        name = finding.switch or ("-".join(figures.names[h] for h in finding.hosts)
                                  if finding.kind == "link" else figures.names[finding.hosts[0]])
        if best < -RETEST_Z:
            finding.retested = True
            held = "the control" if all(c is not None for _, _, c in measured) else \
                "the fleet's typical pair" if all(c is None for _, _, c in measured) else \
                "the control where one ran, else the fleet's typical pair"
            finding.text += f"; retested: {what} (z {best:.1f} against {held})"
            judgement.findings.append(finding)
        else:
            slow_alone = typical and all(
                again.bandwidth < typical * math.exp(-RETEST_Z * sigma)
                for _, again, _ in measured)
            alone = all(control is None for _, _, control in measured)
            judgement.cleared.append(
                f"{finding.kind} {name} was slow in the screen ({finding.text}) " +
                (f"and when retested with no control pair beside it, but not below "
                 f"--min-fraction {figures.fraction:g} of the fleet's typical pair ({what}): "
                 "the machine was busy, or noise" if slow_alone and alone else
                 "and when retested, but so was the control pair beside it: the machine was "
                 f"busy, not the {finding.kind} ({what})" if slow_alone else
                 f"but not when retested ({what}): noise"))
    for h in sorted(figures.unreachable):
        judgement.findings.append(Finding("unreachable", (h,), figures.unreachable_why.get(
            h, "did not answer within --timeout")))
    return judgement
