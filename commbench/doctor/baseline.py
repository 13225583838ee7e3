"""doctor.py --baseline URL: each host and each pair of hosts judged against its own earlier checks
in a results database (docs/history.md), beside the verdict against its peers.

A host's figure (its ranks' all_reduce bus bandwidth) and a link's (its slower direction) are
divided by their own median over the last LAST complete doctor checks in the database that
measured them (the same --tag where one is given; at least MIN_CHECKS of them). So a host that
is always a little slower than its peers has a ratio near 1 and is no new alarm; a fleet that
slowed as a whole, which its peers cannot see, is named by the median of all the ratios
("every host's links 0.68x their median of the last 10 checks"); one host or link below its own
past while the rest are not is named alone. Slower means below FRACTION of its median and below
its own checks' run-to-run noise (exp(-3 x the robust spread of their logarithms)): on a machine
whose checks differ by 40% from run to run, 0.7x is that noise, not news.

Latency is judged the same way, apart (a host's small all_reduce time, a link's one-way
latency; a ratio is the past's median over now, so that under 1 is slower for both measures):
the record's "baseline" part holds it under "latency", and its sentences give the latency's own
multiple ("link n1 - n4: latency 2.10x its median of the last 10 checks"). Only the first pass
is judged: a retest measures a suspect against other partners than its past checks did.
"""

import math
import statistics

LAST = 10  # earlier checks a figure is judged against
MIN_CHECKS = 3  # fewer: no baseline for that figure, said so
FRACTION = 0.8  # below this ratio to its own median: slower than it was
SPREADS = 3  # ... and below exp(-3 x its own run-to-run spread): not its checks' usual noise


def spread(past):
    """The run-to-run spread of a figure's past checks: the robust standard deviation of their
    logarithms (1.4826 x the median absolute deviation)."""
    logs = [math.log(v) for v in past]
    middle = statistics.median(logs)
    return 1.4826 * statistics.median(abs(x - middle) for x in logs)


def history(store, tag=None, last=LAST, measure="bandwidth"):
    """The last `last` complete doctor checks' figures, oldest first: (hosts, links), hosts
    {name: [figure, ...]}, links {(a, b): [figure, ...]}; the figure is a host's all_reduce bus
    bandwidth and a link's slower direction (`measure` "bandwidth"), or a host's small
    all_reduce time and a link's one-way latency ("latency")."""
    runs = [run for run in store.runs(tag=tag) if run["kind"] == "doctor" and run["complete"]]
    hosts, links = {}, {}
    for run in runs[-last:]:
        _, records = store.records(run["id"])
        for record in records:
            if record.get("type") != "doctor" or "failed" in record or "control_for" in record:
                continue
            if record.get("phase") == "intra":
                value = record.get("busbw_Bps" if measure == "bandwidth" else "latency_s")
                if value:
                    hosts.setdefault(record["host"], []).append(value)
            elif record.get("phase") == "pairs" and record.get("hosts"):
                if measure == "bandwidth":
                    ways = [record.get(k) for k in ("forward_Bps", "backward_Bps")
                            if record.get(k)]
                    value = min(ways) if ways else None
                else:
                    value = record.get("latency_s")
                if value:
                    links.setdefault(tuple(record["hosts"]), []).append(value)
    return hosts, links


def judge(hosts_now, links_now, hosts_past, links_past, fraction=FRACTION, last=LAST,
          measure="bandwidth"):
    """This check's figures ({name: figure}, {(a, b): figure}) against their own past
    (history()'s, of the same `measure`): the verdict record's "baseline" part (or its
    "latency" part), with its lines and findings (sentences). A ratio is as fast as it was: now
    over the past's median for a bandwidth, the past's median over now for a latency, so that
    under 1 is slower either way; a latency's sentences give its own multiple (2.00x: twice as
    long as it used to take)."""
    latency = measure == "latency"

    def ratios(now, past):
        return {key: (statistics.median(past[key]) / value if latency else
                      value / statistics.median(past[key]))
                for key, value in now.items() if value and len(past.get(key, ())) >= MIN_CHECKS}

    def x(ratio):  # what a sentence says of a ratio
        return f"latency {1 / ratio:.2f}x" if latency else f"{ratio:.2f}x"

    host_ratios, link_ratios = ratios(hosts_now, hosts_past), ratios(links_now, links_past)
    # how far below its median a figure must be to be told from its own checks' noise
    floors = {key: min(fraction, math.exp(-SPREADS * spread(past[key])))
              for past, found in ((hosts_past, host_ratios), (links_past, link_ratios))
              for key in found}
    result = {"last": last, "fraction": fraction, "findings": [], "lines": [],
              "hosts": {name: round(r, 4) for name, r in host_ratios.items()},
              "links": {f"{a}-{b}": round(r, 4) for (a, b), r in link_ratios.items()},
              "fleet_ratio": None}
    unknown = len(hosts_now) - len(host_ratios) + len(links_now) - len(link_ratios)
    label = "baseline (latency)" if latency else "baseline"
    if not host_ratios and not link_ratios:
        result["lines"].append(f"{label}: no host or link has {MIN_CHECKS} earlier checks in the "
                               "database yet; nothing judged against its past")
        return result
    everything = list(host_ratios.values()) + list(link_ratios.values())
    fleet = statistics.median(everything)
    floor = statistics.median(floors.values())
    result["fleet_ratio"], result["floor"] = round(fleet, 4), round(floor, 4)
    what = "links" if link_ratios else "ranks"
    worse = [r for r in (link_ratios or host_ratios).values() if r < floor]
    if fleet < floor:
        whole = "every host's" if len(worse) == len(link_ratios or host_ratios) else \
            f"{len(worse)} of {len(link_ratios or host_ratios)} hosts'"
        result["findings"].append(f"{whole} {what}{chr(39) if latency else ''} {x(fleet)} their "
                                  f"median of the last {last} checks: the fleet is slower than it "
                                  "was (its peers cannot see that)")
    else:
        result["findings"] += _each_against_its_past(host_ratios, link_ratios, floors, fleet,
                                                     last, latency, x)
    result["lines"].append(
        f"{label}: {len(host_ratios)} host(s) and {len(link_ratios)} link(s) against their "
        f"own last {last} checks: median {x(fleet)}"
        + f" (slower {'above' if latency else 'below'} {1 / floor if latency else floor:.2f}x: "
        f"{'1/' if latency else ''}{fraction:g}, or {SPREADS} run-to-run spreads of "
        "their checks where those are wider)"
        + (f"; {unknown} with fewer than {MIN_CHECKS} earlier checks, not judged" if unknown
           else "") + ("" if result["findings"] else "; none slower than it was"))
    return result


def _each_against_its_past(host_ratios, link_ratios, floors, fleet, last, latency, x):
    """A host or link below its own past while the rest are not: judged against the fleet's own
    ratio today, so that a busy moment for everyone is not blamed on one."""
    found = []
    for name, ratio in sorted(host_ratios.items()):
        if ratio < floors[name] * fleet:
            found.append(f"{name}: its ranks{chr(39) if latency else ''} {x(ratio)} their median "
                         f"of the last {last} checks (the others {x(fleet)})")
    for (a, b), ratio in sorted(link_ratios.items()):
        if ratio < floors[(a, b)] * fleet:
            found.append(f"link {a} - {b}: {x(ratio)} its median of the last {last} checks "
                         f"(the others {x(fleet)})")
    return found


def check(where, figures, tag=None, last=LAST):
    """The verdict record's "baseline" part for this check (doctor.verdict.Figures) against the
    database at `where`; one warning line (and None) when it cannot be read."""
    from sqlalchemy.exc import SQLAlchemyError
    from ..records import outputs
    from ..records.db.store import Store, StoreError, _first_line
    try:
        store = Store(where)
        try:
            past = {measure: history(store, tag=tag, last=last, measure=measure)
                    for measure in ("bandwidth", "latency")}
        finally:
            store.close()
    except (StoreError, SQLAlchemyError) as error:
        text = str(error) if isinstance(error, StoreError) else _first_line(error)
        outputs._warn(f"--baseline: {text}; nothing judged against its past")
        return None
    names = figures.names
    hosts_now = {names[i]: host.busbw_Bps for i, host in figures.hosts.items()}
    links_now = {(names[a], names[b]): link.bandwidth for (a, b), link in figures.links.items()}
    part = judge(hosts_now, links_now, *past["bandwidth"], last=last)
    hosts_now = {names[i]: host.latency_s for i, host in figures.hosts.items()}
    links_now = {(names[a], names[b]): link.latency_s for (a, b), link in figures.links.items()}
    part["latency"] = judge(hosts_now, links_now, *past["latency"], last=last, measure="latency")
    part["lines"] += part["latency"]["lines"]
    part["findings"] += part["latency"]["findings"]
    return part


def report(where, figures, final, tag=None):
    """check(), its lines on stdout and its findings on stderr; a finding makes the check
    unhealthy (final["healthy"], the exit status). The "baseline" part, or None."""
    import sys
    from ..table import emit
    part = check(where, figures, tag=tag)
    if part is not None:
        for line in part["lines"]:
            emit(sys.stdout, line)
        for line in part["findings"]:
            emit(sys.stderr, f"commbench: {line}")
        if part["findings"]:
            final["healthy"] = False
    return part
