"""What a check prints (rank 0): on stdout a table per host, the pair matrices (bandwidth and
latency) and the verdict; on stderr one line per finding; and the verdict record."""

import re
import statistics

from . import bound


def _cell(value, width):
    return str(value).rjust(width)


MATRIX_HOSTS = 32
UNREACHABLE = "unreach."  # a matrix cell of a pair never measured: one of its hosts was gone


def _matrix(figures, title, value):
    """Rows and columns by host; `value(link)` is the cell's text (the diagonal is `-`). A pair
    with an unreachable host shows what it measured before the host went, marked `*`, or
    `unreach.`: never a figure it did not measure; `x`, a pair of live hosts whose measurement
    failed."""
    names = figures.names
    width = max(9, *(len(name) for name in names))
    lines = ["", title, " " * width + " " + " ".join(_cell(n, width) for n in names)]
    for i, name in enumerate(names):
        cells = []
        for j in range(len(names)):
            if i == j:
                cells.append("-")
                continue
            link = figures.link(i, j)
            gone = i in figures.unreachable or j in figures.unreachable
            if link is None and figures.measured and not figures.full:
                cells.append(UNREACHABLE if gone else ".")  # the screen did not pair them
            elif link is None:
                cells.append(UNREACHABLE if gone else "x")
            else:
                cells.append(value(link, i < j) + ("*" if gone else ""))
        lines.append(name.ljust(width) + " " + " ".join(_cell(c, width) for c in cells))
    return lines


def report(figures, judgement, per_host):
    scale = 8e-9 if figures.unit == "Gbps" else 1e-9
    unit = "Gbps" if figures.unit == "Gbps" else "GB/s"
    lines = []
    names = figures.names
    width = max(8, *(len(name) for name in names))
    head = f"{'host':<{width}}  {'intra busbw':>14}  {'intra lat (us)':>14}  " \
           f"{'links bw':>12}  {'links lat (us)':>14}  verdict"
    lines += [f"---- doctor: {len(names)} hosts, {per_host} rank{'s' if per_host > 1 else ''} "
              f"each; bandwidth in {unit} " + "-" * 20, head, "-" * len(head)]
    named = {h for f in judgement.findings for h in f.hosts if f.kind in ("host", "unreachable")}
    fleet = {h for f in judgement.findings for h in f.hosts if f.kind == "fleet"}
    for h, name in enumerate(names):
        host = figures.hosts.get(h)
        bw, lat = figures.host_link_figures(h)
        state = "unreachable" if h in figures.unreachable else "SUSPECT" if h in named else \
            "BELOW BOUND" if h in fleet else "ok"
        if h in figures.unreachable:  # what it measured before it went is not its figure
            host, bw, lat = None, None, None
        busbw = f"{host.busbw_Bps * scale:.3f}" if host and host.busbw_Bps else "-"
        lines.append(f"{name:<{width}}  "
                     f"{busbw:>14}  "
                     f"{(f'{host.latency_s * 1e6:.1f}' if host and host.latency_s else '-'):>14}  "
                     f"{(f'{bw * scale:.3f}' if bw else '-'):>12}  "
                     f"{(f'{lat * 1e6:.1f}' if lat else '-'):>14}  {state}")
    if len(names) > MATRIX_HOSTS:
        lines += ["", f"(the pair matrices: not printed above {MATRIX_HOSTS} hosts; the "
                      "--output records have every pair measured)"]
    elif len(names) > 1:
        def one_way(link, forward):
            return f"{(link.forward_Bps if forward else link.backward_Bps) * scale:.3f}"
        lines += _matrix(figures, f"Bandwidth ({unit}), row to column, one way:", one_way)
        lines += _matrix(figures, f"Both ways at once ({unit}, both directions counted):",
                         lambda link, _: f"{link.both_Bps * scale:.3f}")
        lines += _matrix(figures, "Latency (us), one way:",
                         lambda link, _: f"{link.latency_s * 1e6:.1f}")
        live = [i for i in range(len(names)) if i not in figures.unreachable]
        if not figures.full and any(figures.link(i, j) is None
                                    for i in live for j in live if i < j):
            lines += ["", "(.: a pair the screen did not measure)"]
        if figures.unreachable and len(names) > 1:
            gone = ", ".join(names[h] for h in sorted(figures.unreachable))
            lines += ["", f"({UNREACHABLE}: not measured, a host of the pair did not answer; *: "
                          f"measured before {gone} stopped answering)"]
    lines.append("")
    if judgement.findings:
        lines.append(f"Verdict: {len(judgement.findings)} finding"
                     f"{'s' if len(judgement.findings) > 1 else ''}")
        lines += [f"  {line}" for line in findings(figures, judgement)]
    elif not figures.full:
        lines.append(f"Verdict: healthy ({len(names)} hosts, {len(figures.links)} pairs "
                     "screened; no host, link or switch out of line with the fleet)")
    else:
        checked = "one host: no links between hosts checked" if len(names) == 1 else \
            f"{len(names)} hosts, {len(figures.links)} links"
        lines.append(f"Verdict: healthy ({checked}; nothing below {figures.fraction:g} of its "
                     f"peers' median{bound.healthy_words(figures)})")
    lines += [f"  ({line})" for line in judgement.cleared]
    lines += advice(figures, judgement)
    return lines


# What each kind of finding is, in the words that open its line: a slow host (by its links, or
# among its own ranks), a slow link, an unreachable host; and whether bandwidth or latency.
KINDS = {
    ("host", False, "bandwidth"): "slow host {name} (bandwidth of its links to the other hosts)",
    ("host", False, "latency"): "slow host {name} (latency of its links to the other hosts)",
    ("host", True, "bandwidth"): "slow host {name} (bandwidth among its own ranks)",
    ("host", True, "latency"): "slow host {name} (latency among its own ranks)",
    ("link", False, "bandwidth"): "slow link {name} (bandwidth between these two hosts only)",
    ("link", False, "latency"): "slow link {name} (latency between these two hosts only)",
    ("host", False, "load"): "slow host {name} (bandwidth under the fleet's load)",
    ("host", False, "bound"): "slow host {name} (its links below their bound)",
    ("link", False, "bound"): "slow link {name} (below its bound)",
}


def label(figures, finding):
    """The opening words of a finding's line: its kind, its host or link, what is slow."""
    if finding.kind == "unreachable":
        return f"unreachable host {figures.names[finding.hosts[0]]} (no answer)"
    if finding.kind == "switch" and finding.measure == "load":
        return (f"slow switch {finding.switch} (its hosts slow to the rest of the fleet under a "
                "collective's load: its uplink?)")
    if finding.kind == "switch":
        return (f"suspect switch {finding.switch} (its hosts in line among themselves, slow to "
                "every host outside it: its uplink)")
    if finding.kind == "fleet":
        return f"slow fleet ({len(finding.hosts)} hosts, every link below its bound)"
    if finding.kind == "group":
        from .bisect import span
        return (f"slow group {span(figures.names, sorted(finding.hosts))} "
                f"({len(finding.hosts)} hosts slow together under the fleet's load: a switch or "
                "uplink they share?)")
    name = figures.pair(*finding.hosts) if finding.kind == "link" else \
        figures.names[finding.hosts[0]]
    words = KINDS.get((finding.kind, finding.intra, finding.measure or "bandwidth"))
    return words.format(name=name)


def findings(figures, judgement):
    """One line per finding, with host names and the figure that condemned it."""
    return [f"{label(figures, finding)}: {finding.text}" for finding in judgement.findings]


def hostlist(names):
    """Slurm's hostlist of `names`, as --exclude, -w and scontrol take it: n3, n7 -> n[3,7];
    n1, n2, n3 -> n[1-3]; zero-padded numbers keep their width (n01, n02 -> n[01-02]); a name
    that does not end in a number is left as it is."""
    groups, order = {}, []
    for name in names:
        match = re.fullmatch(r"(.*\D)(\d+)", name)
        if not match:
            key = (name, None)
        else:
            prefix, digits = match.groups()
            key = (prefix, len(digits) if digits.startswith("0") and len(digits) > 1 else 0)
        if key not in groups:
            groups[key] = []
            order.append(key)
        if match:
            groups[key].append(int(match.group(2)))
    parts = []
    for key in order:
        prefix, width = key
        if width is None:
            parts.append(prefix)
            continue
        numbers = sorted(set(groups[key]))
        text = (lambda n: str(n).zfill(width)) if width else str
        if len(numbers) == 1:
            parts.append(prefix + text(numbers[0]))
            continue
        ranges, start = [], numbers[0]
        for previous, number in zip(numbers, numbers[1:] + [None]):
            if number is None or number != previous + 1:  # a run ends at `previous`
                ranges.append(text(start) if start == previous else
                              f"{text(start)}-{text(previous)}")
                start = number
        parts.append(f"{prefix}[{','.join(ranges)}]")
    return ",".join(parts)


def excluded(figures, judgement):
    """The hosts to leave out: each slow or unreachable host named, in the hosts' order."""
    named = {h for f in judgement.findings if f.kind in ("host", "unreachable") for h in f.hosts}
    return [figures.names[h] for h in sorted(named)]


def advice(figures, judgement):
    """What to do, the verdict's last lines: nothing (healthy); for a slow link between hosts
    that are fine otherwise, leave out one of its two (the host in most of them first); then the
    hosts to leave out as ready lines for each launcher, Slurm's --exclude hostlist last."""
    if not judgement.findings:
        return ["What to do: nothing; every host and link is in line with its peers."]
    names = figures.names
    out = ["What to do:"]
    leave = excluded(figures, judgement)
    links = [f.hosts for f in judgement.findings if f.kind == "link"]
    counts = {}
    for pair in links:
        for h in pair:
            counts[h] = counts.get(h, 0) + 1
    for f in judgement.findings:
        if f.kind == "fleet":
            out.append(f"  the whole fleet is below {figures.bound_fraction:g} of its bound "
                       f"({figures.bound_words}): either the bound is not this network's (give "
                       "--peak the rate it can carry), or every host is held back alike: the "
                       "interfaces' negotiated speed (ethtool DEV), a rate limit (tc qdisc show), "
                       "the MTU, the switch ports' speed")
        elif f.kind == "switch":
            out.append(f"  switch {f.switch}: its uplink (or the switch): report it; to run now, "
                       f"leave out its hosts: --exclude="
                       f"{hostlist([names[h] for h in sorted(f.hosts)])}")
        elif f.kind == "group":
            out.append(f"  these {len(f.hosts)} hosts share what slows them (a switch or an "
                       "uplink: the cluster's topology says which): report it; to run now, "
                       f"leave them out: --exclude={hostlist([names[h] for h in sorted(f.hosts)])}")
    for i, j in links:
        a, b = (i, j) if counts[i] >= counts[j] else (j, i)
        common = f" ({names[a]} is in {counts[a]} of the slow links)" if counts[a] > 1 else ""
        out.append(f"  link {figures.pair(i, j)}: a cable, port or route between these two, not "
                   f"either host: report it; to run now, leave out one of the two{common}: "
                   f"--exclude={names[a]} (or --exclude={names[b]}), then run doctor.py again")
    if leave:
        listed = ", ".join(leave)
        out += [f"  leave out {listed}, then run doctor.py again on the rest:",
                f"    hostfile (mpirun --hostfile, deepspeed --hostfile): delete the lines of "
                f"{listed}",
                f"    deepspeed: --exclude={'@'.join(leave)}",
                f"    torchrun: start no node on {listed}",
                f"    Slurm (sbatch, salloc, srun): --exclude={hostlist(leave)}"]
    gone = lost(figures)
    if gone:
        out.append(f"  lost during the check: {lost_words(gone)}: the rest were judged "
                   f"without them; bring them back, then check them with the others "
                   f"(--exclude={hostlist([g['host'] for g in gone])} until then)")
    return out


def lost(figures):
    """[{"host", "when", "why"}] of the hosts lost while the check ran (their rank died or went
    silent at a step), in the hosts' order; a host unreachable before any step has no "when"."""
    return [{"host": figures.names[h], "when": figures.lost_when[h],
             "why": figures.unreachable_why.get(h)}
            for h in sorted(figures.unreachable) if h in figures.lost_when]


def lost_words(gone):
    """'n3 (round 2 of the pairs), n9 (within the hosts)'."""
    return ", ".join(f"{g['host']} ({g['when']})" for g in gone)


def exit_line(status, host=None, gone=()):
    """The line before a launcher's own error lines: exit status 1 is the check's verdict;
    `gone` (lost()): the hosts lost during the check, and when."""
    where = f" on {host}" if host else ""
    return (f"doctor.py{where} exits with status {status}: its verdict (something is suspect or "
            "unreachable: see the findings and 'What to do'" +
            (f"; lost during the check: {lost_words(gone)}" if gone else "") +
            "), not a crash; the launcher's own "
            f"error lines after this one ('exits with return code = {status}', 'exit code "
            f"{status}', 'ChildFailedError') say the same")


def verdict_record(figures, judgement):
    names = figures.names
    hosts = [names[f.hosts[0]] for f in judgement.findings if f.kind == "host"]
    links = [[names[a], names[b]] for f in judgement.findings if f.kind == "link"
             for a, b in (f.hosts,)]
    unreachable = [names[f.hosts[0]] for f in judgement.findings if f.kind == "unreachable"]
    switches = [f.switch for f in judgement.findings if f.kind == "switch"]
    groups = [[names[h] for h in sorted(f.hosts)] for f in judgement.findings
              if f.kind == "group"]
    bws = [lk.bandwidth for pair, lk in figures.links.items() if lk.bandwidth and
           not set(pair) & figures.unreachable]  # the live hosts' links
    leave = excluded(figures, judgement)
    return {"type": "verdict", "suspect_hosts": hosts, "suspect_links": links,
            "suspect_switches": switches, "suspect_groups": groups,
            "fleet_wide": [{"round": number, "hosts": [names[h] for h in hosts],
                            "busbw_Bps": value, "predicted_Bps": predicted}
                           for number, hosts, value, predicted in figures.fleet_log],
            "unreachable": unreachable, "lost": lost(figures),
            "healthy": not judgement.findings,
            "findings": findings(figures, judgement), "cleared": judgement.cleared,
            "exclude": leave, "exclude_hostlist": hostlist(leave),
            "what_to_do": advice(figures, judgement),
            "min_fraction": figures.fraction,
            "below_bound": [names[h] for f in judgement.findings if f.kind == "fleet"
                            for h in f.hosts],
            "bound": bound.record(figures) if figures.bounds else None,
            "median_link_Bps": statistics.median(bws) if bws else None}
