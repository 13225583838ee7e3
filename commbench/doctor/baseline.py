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


def history(store, tag=None, last=LAST):
    """The last `last` complete doctor checks' figures, oldest first: (hosts, links), hosts
    {name: [busbw_Bps, ...]}, links {(a, b): [slower direction's Bps, ...]}."""
    runs = [run for run in store.runs(tag=tag) if run["kind"] == "doctor" and run["complete"]]
    hosts, links = {}, {}
    for run in runs[-last:]:
        _, records = store.records(run["id"])
        for record in records:
            if record.get("type") != "doctor" or "failed" in record or "control_for" in record:
                continue
            if record.get("phase") == "intra" and record.get("busbw_Bps"):
                hosts.setdefault(record["host"], []).append(record["busbw_Bps"])
            elif record.get("phase") == "pairs" and record.get("hosts"):
                ways = [record.get(k) for k in ("forward_Bps", "backward_Bps") if record.get(k)]
                if ways:
                    links.setdefault(tuple(record["hosts"]), []).append(min(ways))
    return hosts, links


def judge(hosts_now, links_now, hosts_past, links_past, fraction=FRACTION, last=LAST):
    """This check's figures ({name: Bps}, {(a, b): Bps}) against their own past (history()'s):
    the verdict record's "baseline" part, with its lines and findings (sentences)."""
    def ratios(now, past):
        return {key: value / statistics.median(past[key]) for key, value in now.items()
                if value and len(past.get(key, ())) >= MIN_CHECKS}

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
    if not host_ratios and not link_ratios:
        result["lines"].append(f"baseline: no host or link has {MIN_CHECKS} earlier checks in the "
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
        result["findings"].append(f"{whole} {what} {fleet:.2f}x their median of the last {last} "
                                  "checks: the fleet is slower than it was (its peers cannot "
                                  "see that)")
    else:
        # one below its own past while the rest are not; judged against the fleet's own ratio
        # today, so that a busy moment for everyone is not blamed on one
        for name, ratio in sorted(host_ratios.items()):
            if ratio < floors[name] * fleet:
                result["findings"].append(f"{name}: its ranks {ratio:.2f}x their median of the "
                                          f"last {last} checks (the others {fleet:.2f}x)")
        for (a, b), ratio in sorted(link_ratios.items()):
            if ratio < floors[(a, b)] * fleet:
                result["findings"].append(f"link {a} - {b}: {ratio:.2f}x its median of the last "
                                          f"{last} checks (the others {fleet:.2f}x)")
    result["lines"].append(
        f"baseline: {len(host_ratios)} host(s) and {len(link_ratios)} link(s) against their "
        f"own last {last} checks: median {fleet:.2f}x"
        + f" (slower below {floor:.2f}x: {fraction:g}, or {SPREADS} run-to-run spreads of "
        "their checks where those are wider)"
        + (f"; {unknown} with fewer than {MIN_CHECKS} earlier checks, not judged" if unknown
           else "") + ("" if result["findings"] else "; none slower than it was"))
    return result


def check(where, figures, tag=None, last=LAST):
    """The verdict record's "baseline" part for this check (doctor.verdict.Figures) against the
    database at `where`; one warning line (and None) when it cannot be read."""
    from sqlalchemy.exc import SQLAlchemyError
    from .. import outputs
    from ..db.store import Store, StoreError, _first_line
    try:
        store = Store(where)
        try:
            hosts_past, links_past = history(store, tag=tag, last=last)
        finally:
            store.close()
    except (StoreError, SQLAlchemyError) as error:
        text = str(error) if isinstance(error, StoreError) else _first_line(error)
        outputs._warn(f"--baseline: {text}; nothing judged against its past")
        return None
    names = figures.names
    hosts_now = {names[i]: host.busbw_Bps for i, host in figures.hosts.items()}
    links_now = {(names[a], names[b]): link.bandwidth for (a, b), link in figures.links.items()}
    return judge(hosts_now, links_now, hosts_past, links_past, last=last)


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
