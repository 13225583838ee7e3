"""From figures to findings, with robust statistics: each host and each link against the median
of its peers (median and MAD, not mean and standard deviation: one bad host must not drag the
yardstick it is measured with). A host whose links are all slow is the suspect, not its
partners; a single slow pair, between hosts that are fast with everyone else, is a suspect
link. Suspects are re-measured against hosts already judged good before they are named: a
suspect host never against (nor judged by) the other end of a link that is itself a suspect (a
slow link would drag its retest down as it dragged its first pass), and each retest beside a
control pair of good hosts measured at the same time, where there are hosts for one (a busy
machine slows the control too: a suspect only as slow as its control is noise).

A bandwidth is an outlier below `fraction` of its peers' median (the threshold a user sets:
--min-fraction), however widely they spread: its retest beside a control pair decides (low()).
A latency is one above median / fraction and, with 5 peers or more, also three robust standard
deviations (1.4826 MAD) from it (the MAD of fewer values says little: two peers 8 and 14 would
excuse anything). A link's
latency is out of line only when the low end of its 95% interval is too: a window of
descheduled round trips (835 us, its interval 0-2310 us, beside links of 249 and 198 us) is
noise, not a slow link.

The first pass is here (its suspects); retest.py plans their retests and names or clears each
by them; fleet.py holds the screen's verdict."""

import statistics
from dataclasses import dataclass, field

from .. import units

MAD_SCALE = 1.4826  # MAD x this estimates the standard deviation of a normal sample
SPREAD = 3.0
SPREAD_PEERS = 5  # the MAD rule from this many peers on


@dataclass
class Link:
    """One pair's figures: one-way latency (ping-pong / 2) and bandwidth each way and both at
    once, in seconds and bytes per second; None where not measured (a peer that failed)."""
    latency_s: float = None
    forward_Bps: float = None  # the lower host to the higher
    backward_Bps: float = None
    both_Bps: float = None  # both directions at once, both counted
    latency_low_s: float = None  # the low end of the latency's 95% interval (None: not known)

    @property
    def bandwidth(self):
        """The link's bandwidth for the verdict: its slower direction."""
        ways = [w for w in (self.forward_Bps, self.backward_Bps) if w is not None]
        return min(ways) if ways else None


@dataclass
class Host:
    """A host's ranks among themselves: all_reduce bus bandwidth and small-message latency."""
    busbw_Bps: float = None
    latency_s: float = None
    latency_low_s: float = None  # the low end of the latency's 95% interval (None: not known)


@dataclass
class Finding:
    kind: str  # host, link, unreachable
    hosts: tuple  # host indices
    text: str  # the sentence, with host names
    retested: bool = False
    intra: bool = False  # a host found slow among its own ranks (retested the same way)
    measure: str = ""  # what condemned it: "bandwidth" or "latency" ("" for unreachable)
    # a suspect host's figure over its peers' median, as first judged: its latency (over 1) or
    # its bandwidth (under 1); None for one below --expect-gbps, whatever its peers do
    times: float | None = None
    switch: str = ""  # a switch finding's switch (its hosts: `hosts`)
    pairs: list = field(default_factory=list)  # the screen's retests of it


@dataclass
class Judgement:
    suspects: list = field(default_factory=list)  # Findings of the first pass (to retest)
    findings: list = field(default_factory=list)  # confirmed
    cleared: list = field(default_factory=list)  # sentences: suspects a retest cleared


def robust(values):
    """(median, MAD) of `values`."""
    middle = statistics.median(values)
    return middle, statistics.median(abs(v - middle) for v in values)


def low(value, peers, fraction):
    """Whether `value` lies below its peers (a bandwidth): under fraction x their median,
    however widely they spread. (False without peers.) No robust bar beside it: among pairs
    that spread 1.8-26 Gbps (six pairs at once on 2 cores), no pair is ever three MADs below a
    median near 7, and a real link at 0.13x was cleared unretested; its retest beside a control
    pair measured at the same time tells it from noise (confirm)."""
    if value is None or not peers:
        return False
    return value < fraction * statistics.median(peers)


def high(value, peers, fraction):
    """Whether `value` lies above its peers (a latency): over their median / fraction and over
    median + 3 robust deviations."""
    if value is None or not peers:
        return False
    middle, mad = robust(peers)
    if len(peers) < SPREAD_PEERS:
        return value > middle / fraction
    return value > max(middle / fraction, middle + SPREAD * MAD_SCALE * mad)


class Figures:
    """Everything measured, with the units and names to speak of it."""

    def __init__(self, names, fraction, unit="Gbps", expect_Bps=None, expect_latency_s=None):
        self.names = names
        self.fraction = fraction
        self.unit = unit
        self.expect_Bps = expect_Bps
        self.expect_latency_s = expect_latency_s
        self.hosts = {}  # index -> Host
        self.hosts_retest = {}  # index -> Host, the within-host phase again (intra suspects)
        self.links = {}  # (i, j) -> Link, first pass
        self.retests = {}  # (i, j) -> Link
        self.controls = {}  # (i, j) retested -> Link of its control pair, measured at that time
        self.control_of = {}  # (i, j) retested -> (k, l), its control pair
        self.unreachable = set()
        self.unreachable_why = {}  # host -> why it is taken as unreachable
        self.lost_when = {}  # host -> the step it was lost at ("round 2 of the pairs")
        self.measured = []  # (round, i, j, Link) of every pair measured, in order (the screen)
        self.fleet_log = []  # (round, hosts, a host's Bps, predicted Bps): --fleet-wide's
        self.leaf = None  # each host's switch (an index into switch_names), with a topology
        self.switch_names = []
        self.retest_log = []  # (round, pair, Link, control_for or None): each retest kept
        self.full = True  # every pair measured (the full plan); False: the screen's pairs
        self.bounds = {}  # index -> bound.HostBound: what its links can carry (--peak)
        self.bound_fraction = 0.7  # a link below this of its bound is named (bound.py)
        self.bound_words = ""  # where the bound came from, for the verdict's lines

    def bw(self, value):
        scale, label = (8e-9, "Gbps") if self.unit == "Gbps" else (1e-9, "GB/s")
        return f"{value * scale:.3g} {label}"

    @staticmethod
    def duration(seconds):
        return units.duration(seconds, 1)

    def pair(self, i, j):
        return f"{self.names[i]}-{self.names[j]}"

    def link(self, i, j, retest=False):
        table = self.retests if retest else self.links
        return table.get((min(i, j), max(i, j)))

    def links_of(self, host, without=()):
        return {other: link for (i, j), link in self.links.items()
                for other in ((j,) if i == host else (i,) if j == host else ())
                if other not in without}

    def host_link_figures(self, host):
        """(median bandwidth, median latency) of a host's links, or (None, None)."""
        mine = list(self.links_of(host).values())
        bws = [link.bandwidth for link in mine if link.bandwidth is not None]
        lats = [link.latency_s for link in mine if link.latency_s is not None]
        return (statistics.median(bws) if bws else None,
                statistics.median(lats) if lats else None)


def low_end(host):
    """A host's latency at the low end of its interval (its latency where that is not known): a
    host's ranks are late among themselves only when the interval is, as a pair's are (beside
    two busy loops, one descheduled window named a healthy host of 3 late among its own ranks,
    3.7x and 2.5x the others when retested)."""
    return host.latency_low_s if host.latency_low_s is not None else host.latency_s


def intra_suspects(figures):
    """{host: (why, measure, times)} of hosts slow among their own ranks against the other hosts'
    (every plan's within-host phase); times: the host's bandwidth or latency over the others'
    median (Finding.times)."""
    fraction = figures.fraction
    reachable = [h for h in range(len(figures.names)) if h not in figures.unreachable]
    suspect_hosts = {}
    intra = {h: figures.hosts[h] for h in reachable if h in figures.hosts}
    for h, host in intra.items():
        others = [o for k, o in intra.items() if k != h]
        if low(host.busbw_Bps, [o.busbw_Bps for o in others if o.busbw_Bps], fraction):
            middle = statistics.median(o.busbw_Bps for o in others if o.busbw_Bps)
            suspect_hosts[h] = (f"its ranks' all_reduce bus bandwidth {figures.bw(host.busbw_Bps)}"
                                f" is {host.busbw_Bps / middle:.2f}x the other hosts' median "
                                f"{figures.bw(middle)}", "bandwidth", host.busbw_Bps / middle)
        elif high(host.latency_s, [o.latency_s for o in others if o.latency_s], fraction) and \
                high(low_end(host), [o.latency_s for o in others if o.latency_s], fraction):
            middle = statistics.median(o.latency_s for o in others if o.latency_s)
            suspect_hosts[h] = (f"its ranks' small all_reduce takes "
                                f"{figures.duration(host.latency_s)}, "
                                f"{host.latency_s / middle:.1f}x the other hosts' median "
                                f"{figures.duration(middle)}", "latency",
                                host.latency_s / middle)
        elif figures.expect_Bps and host.busbw_Bps is not None and \
                host.busbw_Bps < figures.expect_Bps:
            suspect_hosts[h] = (f"its ranks' all_reduce bus bandwidth {figures.bw(host.busbw_Bps)}"
                                f" is below the {figures.bw(figures.expect_Bps)} expected",
                                "bandwidth", None)
    return suspect_hosts


def first_pass(figures):
    """Suspect hosts and links from the first round of measurements."""
    judgement = Judgement()
    fraction = figures.fraction
    reachable = [h for h in range(len(figures.names)) if h not in figures.unreachable]
    # A host against the others: its own ranks together, then its links' medians.
    suspect_hosts = intra_suspects(figures)
    scores = {h: figures.host_link_figures(h) for h in reachable}
    for h in reachable:
        if h in suspect_hosts:
            continue
        bw, lat = scores[h]
        peers = [scores[k] for k in reachable if k != h]
        if low(bw, [p[0] for p in peers if p[0] is not None], fraction):
            middle = statistics.median(p[0] for p in peers if p[0] is not None)
            suspect_hosts[h] = (f"its links' bandwidth {figures.bw(bw)} (median of "
                                f"{len(figures.links_of(h))}) is {bw / middle:.2f}x the other "
                                f"hosts' median {figures.bw(middle)}", "bandwidth", bw / middle)
        elif high(lat, [p[1] for p in peers if p[1] is not None], fraction):
            middle = statistics.median(p[1] for p in peers if p[1] is not None)
            suspect_hosts[h] = (f"its links' latency {figures.duration(lat)} (median of "
                                f"{len(figures.links_of(h))}) is {lat / middle:.1f}x the other "
                                f"hosts' median {figures.duration(middle)}",
                                "latency", lat / middle)
        elif figures.expect_Bps and bw is not None and len(reachable) > 2 and all(
                link.bandwidth is not None and link.bandwidth < figures.expect_Bps
                for link in figures.links_of(h).values()):
            suspect_hosts[h] = (f"every link of it is below the {figures.bw(figures.expect_Bps)} "
                                f"expected (median {figures.bw(bw)})", "bandwidth", None)
    for h, (why, measure, times) in suspect_hosts.items():
        judgement.suspects.append(Finding("host", (h,), why, intra=why.startswith("its ranks'"),
                                          measure=measure, times=times))
    # A link against both its hosts' other links. One whose host is a suspect too is retested
    # all the same: if the retest clears the host (a slow link drags its hosts' medians), the
    # link still stands; if it names the host, the host explains the link.
    for (i, j), link in sorted(figures.links.items()):
        outlier = link_outlier(figures, i, j, link)
        if outlier:
            measure, why, _ = outlier
            judgement.suspects.append(Finding("link", (i, j), why, measure=measure))
    return judgement


def link_outlier(figures, i, j, link):
    """(measure, why, floor) link (i, j) is slow against both its hosts' other links (measure:
    "bandwidth" or "latency"; floor: below --expect-gbps or above --expect-latency-us instead,
    whatever its peers do), or None."""
    fraction = figures.fraction
    refs_bw, refs_lat = [], []
    for host, other in ((i, j), (j, i)):
        others = [lk for k, lk in figures.links_of(host, without=(other,)).items()
                  if k not in figures.unreachable]
        refs_bw.append([lk.bandwidth for lk in others if lk.bandwidth is not None])
        refs_lat.append([lk.latency_s for lk in others if lk.latency_s is not None])
    bw, lat = link.bandwidth, link.latency_s
    if all(refs_bw) and all(low(bw, ref, fraction) for ref in refs_bw):
        a, b = (statistics.median(ref) for ref in refs_bw)
        return "bandwidth", (f"{figures.bw(bw)}, {bw / a:.2f}x the median of "
                             f"{figures.names[i]}'s other links ({figures.bw(a)}) and "
                             f"{bw / b:.2f}x {figures.names[j]}'s ({figures.bw(b)})"), False
    sure = link.latency_low_s is None or all(high(link.latency_low_s, ref, fraction)
                                             for ref in refs_lat)
    if all(refs_lat) and all(high(lat, ref, fraction) for ref in refs_lat) and sure:
        a, b = (statistics.median(ref) for ref in refs_lat)
        return "latency", (f"latency {figures.duration(lat)}, {lat / a:.1f}x the median of "
                           f"{figures.names[i]}'s other links ({figures.duration(a)}) and "
                           f"{lat / b:.1f}x {figures.names[j]}'s ({figures.duration(b)})"), False
    if figures.expect_Bps and bw is not None and bw < figures.expect_Bps:
        return "bandwidth", f"{figures.bw(bw)}, below the {figures.bw(figures.expect_Bps)} " \
            "expected", True
    if figures.expect_latency_s and lat is not None and lat > figures.expect_latency_s:
        return "latency", (f"latency {figures.duration(lat)}, above the "
                           f"{figures.duration(figures.expect_latency_s)} expected"), True
    return None
