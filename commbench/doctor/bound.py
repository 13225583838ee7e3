"""The check against the bound: each link between hosts held against what its hosts' network can
carry (--peak: a given rate, a file of expected figures, or each host's interface's line rate
from sysfs), not only against its peers. A fleet whose hosts are all alike is "healthy" by its
peers; against its bound it is named when every link is below `fraction` of it.

The rule, after the verdict against the peers (retest.confirm, fleet_retest.confirm) and a retest of
each link below its bound (with --retest above 0): a link's figure is its best of first pass and
retest (noise only ever slows a measurement), its bound the lower
of its two hosts' (a host whose bound is unknown leaves its links unjudged). Then
  - every judged link below fraction x its bound: the fleet is named (one finding, all hosts);
  - else a host of 2 links or more, all of them below, beside links that are not: the host;
  - else each link below: the link.
Hosts and links the peers' verdict named already are not named twice. The within-host figure
(its ranks' all_reduce) is held against no network bound: memory carries it.

DEFAULT_FRACTION, 0.7: TCP/IP over Ethernet carries at most ~0.94 of the line rate as payload
at a 1500-byte MTU (0.99 at 9000) and a healthy link measures 0.85-0.95; a port that negotiated
one speed down (100 to 50 or 40 Gb/s, 25 to 10, 10 to 1) carries 0.5 or less. 0.7 lies between,
with room for a busy host's noise (docs/doctor-method.md)."""

import os
import statistics
from dataclasses import dataclass

from ..bounds import network_bound
from .verdict import Finding

DEFAULT_FRACTION = 0.7


@dataclass(frozen=True)
class HostBound:
    """One host's bound for its links, in bytes a second (None: unknown), and its words (`eth0
    100 Gb/s (sysfs)`, `4 Gb/s (--peak)`, `unknown: eth0 reports no speed`)."""
    Bps: float | None
    words: str


def spec_record(spec):
    """What the meta record keeps of --peak (None without it)."""
    if spec is None:
        return None
    return {"mode": spec.mode, "gbps": spec.gbps, "path": spec.path}


def _host_bound(found):
    """A bounds.Bound as a HostBound."""
    if found is None or found.gbps is None:
        return HostBound(None, found.line().removeprefix("bound: ") if found else "unknown")
    return HostBound(found.gbps * 1e9 / 8, f"{found.name} {found.rate()} ({found.source})")


def settle(check):
    """Every rank: each host's bound into check.figures.bounds (rank 0), and one line on it.
    A given --peak is every host's; auto: each host's first rank reads its interface's line
    rate from sysfs (bounds.network_bound) and posts it to the store. Without --peak, none."""
    spec, figures = check.args.peak, check.figures
    figures.bound_fraction = check.args.peak_fraction
    if spec is None:
        return
    if spec.mode != "auto":
        given = spec.given("pt2pt", check.args.large_bytes)
        mine = _host_bound(given) if given is not None else HostBound(
            None, f"no line of {spec.path} covers pt2pt at {check.args.large_bytes} bytes")
        figures.bounds = {h: mine for h in range(len(check.hosts))}
    else:
        if check.leader:
            found = _host_bound(network_bound(os.environ, check.args.backend))
            check.control.post(f"bound/{check.my_host}", [found.Bps, found.words])
        check.sync("bound")
        if check.comm.global_rank == 0:
            for h in range(len(check.hosts)):
                posted = check.control.fetch(f"bound/{h}", timeout=0)
                if posted is not None:
                    figures.bounds[h] = HostBound(*posted)
    if check.comm.global_rank == 0:
        figures.bound_words = _words(figures, check.hosts)
        known = any(b.Bps is not None for b in figures.bounds.values())
        check.say(f"doctor: bound: {figures.bound_words}; " +
                  (f"a link below {figures.bound_fraction:g} of it is named" if known else
                   "links are judged against their peers only"))


def _words(figures, names):
    """The bound in words: one host's, where every host's is the same; else each host's."""
    said = {b.words for b in figures.bounds.values()}
    if len(said) == 1:
        return said.pop()
    return ", ".join(f"{names[h]} {b.words}" for h, b in sorted(figures.bounds.items()))


def link_bound(figures, i, j):
    """The bound of link (i, j): the lower of its hosts' (None when either is unknown)."""
    ends = [figures.bounds.get(h) for h in (i, j)]
    if any(end is None or end.Bps is None for end in ends):
        return None
    return min(end.Bps for end in ends)


def _best(figures, pair, link):
    """A link's figure against its bound: the better of its first pass and its retest."""
    again = figures.retests.get(pair)
    ways = [lk.bandwidth for lk in (link, again) if lk is not None and lk.bandwidth]
    return max(ways) if ways else None


def below(figures):
    """{(i, j): (figure, bound)} of every judged link (live hosts, a known bound, a figure) and
    whether it is below fraction x its bound, as (figure, bound, below)."""
    judged = {}
    for pair, link in sorted(figures.links.items()):
        if set(pair) & figures.unreachable:
            continue
        bound, best = link_bound(figures, *pair), _best(figures, pair, link)
        if bound is None or best is None:
            continue
        judged[pair] = (best, bound, best < figures.bound_fraction * bound)
    return judged


def retest(check, first):
    """Every rank: each link below its bound measured once more before any is named (a busy
    host's noise only ever slows a measurement; judge takes the better figure), one pair a
    round, planned on rank 0 and handed out through the store. Returns the rounds run (none
    without --peak or with --retest 0)."""
    if check.args.peak is None or not check.args.retest:
        return 0
    if check.comm.global_rank == 0:
        pairs = [list(pair) for pair, v in below(check.figures).items() if v[2]]
        check.control.post("bound-retest-plan", pairs)
    else:
        pairs = check.control.fetch("bound-retest-plan",
                                    timeout=2 * check.args.timeout + 30) or []
    rounds = [[tuple(pair)] for pair in pairs]
    if rounds:
        check.pairs(rounds, "retest", first=first)
    return len(rounds)


def judge(figures, judgement):
    """Adds the bound's findings to judgement.findings (rank 0, after the peers' verdict)."""
    judged = below(figures)
    slow = {pair: v for pair, v in judged.items() if v[2]}
    if not slow:
        return
    named = {h for f in judgement.findings if f.kind in ("host", "unreachable") for h in f.hosts}
    named_links = {tuple(sorted(f.hosts)) for f in judgement.findings if f.kind == "link"}
    if len(slow) == len(judged):
        hosts = tuple(sorted({h for pair in judged for h in pair}))
        judgement.findings.append(Finding("fleet", hosts, _fleet_words(figures, judged),
                                          measure="bound"))
        return
    for h in sorted({h for pair in slow for h in pair} - named):
        mine = {pair: v for pair, v in judged.items() if h in pair}
        if len(mine) >= 2 and all(v[2] for v in mine.values()):
            figure = statistics.median(v[0] for v in mine.values())
            bound = min(v[1] for v in mine.values())
            judgement.findings.append(Finding(
                "host", (h,), f"every link of it below {figures.bound_fraction:g} of its bound: "
                f"median {figures.bw(figure)}, {figure / bound:.2f} of "
                f"{figures.bw(bound)}", measure="bound"))
            named.add(h)
    for pair, (figure, bound, _) in slow.items():
        if set(pair) & named or pair in named_links:
            continue
        judgement.findings.append(Finding(
            "link", pair, f"{figures.bw(figure)}, {figure / bound:.2f} of its bound "
            f"{figures.bw(bound)} (under {figures.bound_fraction:g})", measure="bound"))


def _fleet_words(figures, judged):
    figures_of = [v[0] for v in judged.values()]
    bounds = sorted({v[1] for v in judged.values()})
    middle = statistics.median(figures_of)
    bound_words = figures.bw(bounds[0]) if len(bounds) == 1 else \
        f"{figures.bw(bounds[0])}-{figures.bw(bounds[-1])}"
    return (f"every one of its {len(judged)} link{'s' if len(judged) > 1 else ''} is below "
            f"{figures.bound_fraction:g} of the bound {bound_words} "
            f"({figures.bound_words}): median {figures.bw(middle)}, "
            f"{middle / bounds[0]:.2f} of it (slowest {figures.bw(min(figures_of))}, fastest "
            f"{figures.bw(max(figures_of))})")


def healthy_words(figures):
    """The healthy verdict's clause on the bound ('' without one)."""
    judged = below(figures)
    if not judged:
        return f"; bound: {figures.bound_words}" if figures.bound_words else ""
    worst = min(v[0] / v[1] for v in judged.values())
    return (f"; every link at {figures.bound_fraction:g} of its bound or more "
            f"({figures.bound_words}; the lowest {worst:.2f})")


def record(figures):
    """The verdict record's part on the bound."""
    judged = below(figures)
    return {"fraction": figures.bound_fraction, "source": figures.bound_words,
            "hosts": {figures.names[h]: b.Bps for h, b in sorted(figures.bounds.items())},
            "links": [{"hosts": [figures.names[i], figures.names[j]], "Bps": v[0],
                       "bound_Bps": v[1], "fraction": v[0] / v[1], "below": v[2]}
                      for (i, j), v in judged.items()]}
