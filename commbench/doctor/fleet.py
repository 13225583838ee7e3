"""The screen's verdict: each host's pairs against the fleet's, by a robust z on log bandwidth.

A pair's figure is its bandwidth (the slower direction) in log, less its round's reference (a
busy moment slows a whole round), over a spread: z. Three passes: the first with the round's
upper quartile (less a normal one's 0.674 spreads) and the noise model's spread (noise.SIGMA:
half a round slow, a slow switch's pairs, would move a median and swell a MAD); the next two with
the round's median and the fleet's own robust spread (1.4826 x MAD, never less than SIGMA) of
the pairs of hosts the pass before found in line. Then

- a **suspect host** is slow in every pair it was in: its best pair's z is below -t, with t
  chosen so that a healthy fleet of N hosts, each in k pairs, raises a first-pass alarm with
  probability ALPHA (normal noise: N x P(z < -t)^k = ALPHA, so t = -inv_cdf((ALPHA/N)^(1/k))),
  and never under RETEST_Z;
- with a topology, a **suspect switch**: the hosts behind it fine among themselves (the median
  z of their pairs inside it above -RETEST_Z, or at least half way from their z outside back
  to 0) and slow to everything outside (the median of their best cross-switch pairs below
  -t): its hosts are not named;
- a **suspect link**: one pair below -t for a single measurement among all of the check's
  (ALPHA / pairs), while both its hosts were fine in another pair; retested as often as a host,
  and named only when slow in every retest.

Every suspect is retested before it is named (retest_plan: rounds of disjoint pairs, each
retested pair against good hosts beside a control pair of good hosts measured at the same
moment; a switch: all its hosts to good hosts outside it at once, a slow uplink showing only
under load, beside as many control pairs) and named only when its retests, each held against its
control (the difference of two pairs: sqrt(2) x the spread), are still below -RETEST_Z together
(their z's sum over the root of their number; a switch: their median). Both slow: the machine
was busy; named nothing.

(Over 400 lines: the screen's verdict is one piece, first pass, retest plan and confirmation,
with its rules side by side, as verdict.py and retest.py are the full plan's.)"""

import math
import statistics
from statistics import NormalDist

from . import noise
from . import retest, verdict
from .verdict import Finding, Judgement

ALPHA = 0.001  # first-pass alarms per healthy fleet, at normal noise (the retest clears them)
RETEST_Z = 3.0
MAD_SCALE = 1.4826
UPPER_QUARTILE = 0.6745  # a normal sample's upper quartile, in standard deviations


def bar(count, pairs, alpha=ALPHA):
    """t: a host of `count` in `pairs` pairs is suspect when its best pair's z is below -t."""
    pairs = max(1, pairs)
    return -NormalDist().inv_cdf((alpha / max(1, count)) ** (1 / pairs))


def host_bar(count, pairs):
    """bar(), never under RETEST_Z: on a few hosts the rate alone would make a host 12% slow in
    three pairs a suspect (8 hosts: 1.6), and a busy machine does that."""
    return max(RETEST_Z, bar(count, pairs))


def _z(figures, skip=None):
    """[(round, i, j, z)] of every pair measured with a bandwidth, and the spread used. The
    reference of a round: the median of its pairs of hosts not in `skip`; on the first pass
    (skip None, no suspects known yet), its upper quartile less a normal one's 0.674 spreads
    (so that up to half of a round slow, a slow switch's pairs, leave it where it was)."""
    rounds = {}
    for number, i, j, link in figures.measured:
        bw = link.bandwidth
        if bw and bw > 0:
            rounds.setdefault(number, []).append((i, j, math.log(bw)))
    out, spread = [], []
    first = skip is None
    skip = skip or frozenset()
    for number, items in rounds.items():
        fair = [v for i, j, v in items if i not in skip and j not in skip]
        if first and len(items) >= 4:
            middle = statistics.quantiles([v for _, _, v in items], n=4)[2] - \
                UPPER_QUARTILE * noise.SIGMA
        else:
            middle = statistics.median(fair or [v for _, _, v in items])
        for i, j, v in items:
            out.append((number, i, j, v - middle))
            if i not in skip and j not in skip:
                spread.append(abs(v - middle))
    sigma = noise.SIGMA  # the first pass: the noise model's (half a round slow would swell
    if not first and len(spread) >= 8:  # the fleet's own); then the fleet's, if wider
        sigma = max(sigma, MAD_SCALE * statistics.median(spread))
    return [(n, i, j, x / sigma) for n, i, j, x in out], sigma


class Scores:
    """The first pass's figures per host (best z, pairs) and per switch."""

    def __init__(self, figures, skip=None):
        self.z, self.sigma = _z(figures, skip)
        self.fraction = figures.fraction
        self.live = {h for h in range(len(figures.names)) if h not in figures.unreachable}
        self.best, self.count, self.cross, self.within = {}, {}, {}, {}
        leaf = figures.leaf
        for _, i, j, z in self.z:
            for h in (i, j):
                self.best[h] = max(self.best.get(h, -math.inf), z)
                self.count[h] = self.count.get(h, 0) + 1
            if leaf is not None:
                if leaf[i] == leaf[j]:
                    self.within.setdefault(leaf[i], []).append(z)
                else:
                    for h in (i, j):
                        self.cross[h] = max(self.cross.get(h, -math.inf), z)

    def host_bar(self, h):
        return host_bar(len(self.live), self.count.get(h, 1))

    def below_fraction(self, z):
        """Whether a pair's z is below --min-fraction of its round's reference: every such
        figure is retested (beside a control) before it is cleared, whatever the spread."""
        return self.fraction is not None and z * self.sigma < math.log(self.fraction)

    def suspect_hosts(self):
        return {h for h, best in self.best.items() if h in self.live and
                (best < -self.host_bar(h) or self.below_fraction(best))}

    def suspect_switches(self, figures):
        """{switch index: its live hosts} of switches fine inside and slow outside."""
        if figures.leaf is None:
            return {}
        found, behind = {}, {}
        for h in sorted(self.live):
            behind.setdefault(figures.leaf[h], []).append(h)
        for s in range(len(figures.switch_names)):
            members = behind.get(s, [])
            cross = [self.cross[h] for h in members if h in self.cross]
            inside = self.within.get(s, [])
            if len(cross) < 2 or not inside:
                continue
            outside, among = statistics.median(cross), statistics.median(inside)
            # fine among themselves: inside above -RETEST_Z, or at least half way back from
            # their figure outside to the fleet's (a slowed uplink at z -39 and one noisy pair
            # inside at -5 is the switch; two slow hosts of four are as slow inside as out)
            if outside < -host_bar(len(self.live), 1) and \
                    (among > -RETEST_Z or among > outside / 2):
                found[s] = members
        return found


def first_pass(figures, alpha=ALPHA):
    """Suspect hosts, switches and links from the screen's rounds (two passes: the second with
    the first's suspects out of each round's median and of the spread)."""
    scores = Scores(figures)
    for _ in range(2):
        hosts = scores.suspect_hosts()
        switches = scores.suspect_switches(figures)
        skip = hosts | {h for members in switches.values() for h in members}
        scores = Scores(figures, frozenset(skip))
    hosts = scores.suspect_hosts()
    switches = scores.suspect_switches(figures)
    judgement = Judgement()
    judgement.scores = scores
    for h, (why, measure) in sorted(verdict.intra_suspects(figures).items()):
        judgement.suspects.append(Finding("host", (h,), why, intra=True, measure=measure))
    behind = {h: s for s, members in switches.items() for h in members}
    for s, members in sorted(switches.items()):
        cross = statistics.median(scores.cross[h] for h in members if h in scores.cross)
        inside = statistics.median(scores.within[s])
        judgement.suspects.append(Finding(
            "switch", tuple(members), f"its {len(members)} hosts' pairs to hosts behind other "
            f"switches are {_ratio(cross, scores.sigma):.2f}x the fleet's (z {cross:.1f}), among "
            f"themselves {_ratio(inside, scores.sigma):.2f}x (z {inside:.1f})",
            measure="bandwidth", switch=figures.switch_names[s]))
    inside_slow = {f.hosts[0] for f in judgement.suspects if f.intra}
    for h in sorted(hosts - inside_slow):
        if h in behind:
            inside = max((z for _, i, j, z in scores.z if h in (i, j) and
                          figures.leaf[i] == figures.leaf[j]), default=None)
            if inside is None or inside > -scores.host_bar(h):
                continue  # slow only to the outside: its switch explains it
        judgement.suspects.append(Finding("host", (h,), _slow_in_all(scores, h),
                                          measure="bandwidth"))
    named = {h for f in judgement.suspects for h in f.hosts}
    link_bar = bar(max(1, len(scores.z)), 1, alpha)
    for _, i, j, z in scores.z:
        if (z >= -link_bar and not scores.below_fraction(z)) or i in named or j in named:
            continue
        elsewhere = [max((w for _, a, b, w in scores.z if h in (a, b) and {a, b} != {i, j}),
                         default=None) for h in (i, j)]
        if all(w is not None and w > -scores.host_bar(h) for w, h in zip(elsewhere, (i, j))):
            judgement.suspects.append(Finding(
                "link", (i, j), f"{_ratio(z, scores.sigma):.2f}x the fleet's median in its "
                f"round (z {z:.1f}, the bar -{link_bar:.1f}), both hosts in line in their other "
                "pairs", measure="bandwidth"))
    return judgement


def _slow_in_all(scores, h):
    best = scores.best[h]
    return (f"slow in all of its {scores.count[h]} pairs: its best {_ratio(best, scores.sigma):.2f}"
            f"x the fleet's median in the same round (z {best:.1f}; the bar "
            f"-{scores.host_bar(h):.1f}: at most {ALPHA:g} false alarms per healthy fleet)")


def consistent_hosts(figures, judgement):
    """The full plan's first pass (verdict.first_pass: the --min-fraction rule) joined by the
    screen's test on all of a host's pairs: a host slow in every pair it was in, its best pair
    below the bar against its round's reference, is a suspect too. The fraction alone is a coin
    for a host at about half its peers (one of three checks beside two busy loops missed a host
    capped at half); its retest beside a control pair then decides (retest.confirm)."""
    scores = Scores(figures)
    for _ in range(2):
        scores = Scores(figures, frozenset(scores.suspect_hosts()))
    known = {f.hosts[0] for f in judgement.suspects if f.kind == "host"}
    for h in sorted(scores.suspect_hosts() - known):
        judgement.suspects.append(Finding("host", (h,), _slow_in_all(scores, h),
                                          measure="bandwidth"))
    return judgement


def _ratio(z, sigma):
    return math.exp(z * sigma)


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
