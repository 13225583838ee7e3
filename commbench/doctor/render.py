"""What a check prints (rank 0): on stdout a table per host, the pair matrices (bandwidth and
latency) and the verdict; on stderr one line per finding; and the verdict record."""

import statistics


def _cell(value, width):
    return str(value).rjust(width)


def _matrix(figures, title, value):
    """Rows and columns by host; `value(link)` is the cell's text (the diagonal is `-`)."""
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
            cells.append("x" if link is None else value(link, i < j))
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
    for h, name in enumerate(names):
        host = figures.hosts.get(h)
        bw, lat = figures.host_link_figures(h)
        state = "unreachable" if h in figures.unreachable else "SUSPECT" if h in named else "ok"
        lines.append(f"{name:<{width}}  "
                     f"{(f'{host.busbw_Bps * scale:.3f}' if host and host.busbw_Bps else '-'):>14}  "
                     f"{(f'{host.latency_s * 1e6:.1f}' if host and host.latency_s else '-'):>14}  "
                     f"{(f'{bw * scale:.3f}' if bw else '-'):>12}  "
                     f"{(f'{lat * 1e6:.1f}' if lat else '-'):>14}  {state}")
    if len(names) > 1:
        def one_way(link, forward):
            return f"{(link.forward_Bps if forward else link.backward_Bps) * scale:.3f}"
        lines += _matrix(figures, f"Bandwidth ({unit}), row to column, one way:", one_way)
        lines += _matrix(figures, f"Both ways at once ({unit}, both directions counted):",
                         lambda link, _: f"{link.both_Bps * scale:.3f}")
        lines += _matrix(figures, "Latency (us), one way:",
                         lambda link, _: f"{link.latency_s * 1e6:.1f}")
    lines.append("")
    if judgement.findings:
        lines.append(f"Verdict: {len(judgement.findings)} finding"
                     f"{'s' if len(judgement.findings) > 1 else ''}")
        lines += [f"  {line}" for line in findings(figures, judgement)]
    else:
        checked = "one host: no links between hosts checked" if len(names) == 1 else \
            f"{len(names)} hosts, {len(figures.links)} links"
        lines.append(f"Verdict: healthy ({checked}; nothing below {figures.fraction:g} of its "
                     "peers' median)")
    lines += [f"  ({line})" for line in judgement.cleared]
    return lines


def findings(figures, judgement):
    """One line per finding, with host names and the figure that condemned it."""
    out = []
    for finding in judgement.findings:
        if finding.kind == "host":
            out.append(f"suspect host {figures.names[finding.hosts[0]]}: {finding.text}")
        elif finding.kind == "link":
            out.append(f"suspect link {figures.pair(*finding.hosts)}: {finding.text}")
        else:
            out.append(f"unreachable host {figures.names[finding.hosts[0]]}: {finding.text}")
    return out


def verdict_record(figures, judgement):
    names = figures.names
    hosts = [names[f.hosts[0]] for f in judgement.findings if f.kind == "host"]
    links = [[names[a], names[b]] for f in judgement.findings if f.kind == "link"
             for a, b in (f.hosts,)]
    unreachable = [names[f.hosts[0]] for f in judgement.findings if f.kind == "unreachable"]
    bws = [lk.bandwidth for lk in figures.links.values() if lk.bandwidth]
    return {"type": "verdict", "suspect_hosts": hosts, "suspect_links": links,
            "unreachable": unreachable, "healthy": not judgement.findings,
            "findings": findings(figures, judgement), "cleared": judgement.cleared,
            "min_fraction": figures.fraction,
            "median_link_Bps": statistics.median(bws) if bws else None}
