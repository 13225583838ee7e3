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

Every suspect is retested before it is named: fleet_retest.py plans the retests and names or
clears each suspect by them (as verdict.py and retest.py are the full plan's)."""

import math
import statistics
from statistics import NormalDist

from . import noise
from . import verdict
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
    for h, (why, measure, times) in sorted(verdict.intra_suspects(figures).items()):
        judgement.suspects.append(Finding("host", (h,), why, intra=True, measure=measure,
                                          times=times))
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
