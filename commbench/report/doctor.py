"""`report.py plot` of a doctor.py run: the pair matrix as heatmaps (bandwidth each way, both
ways at once, latency), the suspects outlined, the verdict in the title."""

from ..records import results
from .runs import ReportError, bandwidth, bandwidth_label


def load(path):
    """(meta, pair records of the first pass, the verdict record or None)."""
    try:
        meta, records = results.read_all(path)
    except (OSError, ValueError, KeyError, results.ResultsError) as error:
        raise ReportError(f"{path}: not a results file of this suite ({error})") from None
    pairs = [r for r in records if r.get("type") == "doctor" and r.get("phase") == "pairs"]
    final = next((r for r in records if r.get("type") == "verdict"), None)
    return meta, pairs, final


def heatmap(path, output):
    meta, pairs, final = load(path)
    hosts = meta.get("hosts") or []
    if len(hosts) < 2 or not pairs:
        raise ReportError(f"{path}: a doctor run of {len(hosts)} host(s) has no pair matrix to "
                          "draw (a check of one host measures no links)")
    from .plot import pyplot, save
    unit = meta.get("bw_unit", "Gbps")
    one_way, both, latency = _matrices(hosts, pairs, unit)
    n = len(hosts)
    plt = pyplot()
    figure, axes = plt.subplots(1, 3, figsize=(5 + 3.2 * n, 2.2 + 1.0 * n), squeeze=False)
    panels = ((one_way, f"bandwidth row -> column ({bandwidth_label(unit)})", "viridis"),
              (both, f"both ways at once ({bandwidth_label(unit)})", "viridis"),
              (latency, "latency one way (us)", "viridis_r"))
    for axis, (matrix, title, colours) in zip(axes[0], panels):
        _panel(figure, axis, matrix, title, colours, hosts)
        _mark_suspects(axis, hosts, final or {})
    figure.suptitle(f"doctor: {n} hosts, {meta.get('backend', '?')}: {_verdict(final)}")
    figure.tight_layout()
    save(figure, output)
    plt.close(figure)
    return figure


def _matrices(hosts, pairs, unit):
    """Host x host: bandwidth row -> column, both ways at once, latency (us); NaN unmeasured."""
    index = {name: i for i, name in enumerate(hosts)}
    n, nan = len(hosts), float("nan")
    one_way, both, latency = ([[nan] * n for _ in range(n)] for _ in range(3))
    for record in pairs:
        if "failed" in record:
            continue
        a, b = (index[name] for name in record["hosts"])
        one_way[a][b] = bandwidth(record["forward_Bps"], unit)
        one_way[b][a] = bandwidth(record["backward_Bps"], unit)
        both[a][b] = both[b][a] = bandwidth(record["both_Bps"], unit)
        latency[a][b] = latency[b][a] = record["latency_s"] * 1e6
    return one_way, both, latency


def _panel(figure, axis, matrix, title, colours, hosts):
    """One matrix, its figures written in its cells (a red x where a pair was not measured)."""
    n = len(hosts)
    image = axis.imshow(matrix, cmap=colours)
    figure.colorbar(image, ax=axis, shrink=0.8)
    axis.set_xticks(range(n), hosts, rotation=45, ha="right")
    axis.set_yticks(range(n), hosts)
    axis.set_title(title, fontsize="medium")
    for i in range(n):
        for j in range(n):
            value = matrix[i][j]
            if value == value:  # not NaN
                shade = float(image.norm(value))  # dark at 0 (viridis) or at 1 (reversed)
                dark = shade < 0.6 if colours == "viridis" else shade > 0.4
                axis.text(j, i, f"{value:.0f}" if value >= 100 else f"{value:.3g}",
                          ha="center", va="center", fontsize="small",
                          color="white" if dark else "black")
            elif i != j:
                axis.text(j, i, "x", ha="center", va="center", color="red")


def _mark_suspects(axis, hosts, final):
    """A suspect or unreachable host's row and column outlined in red, a suspect link's cells."""
    from matplotlib.patches import Rectangle
    index, n = {name: i for i, name in enumerate(hosts)}, len(hosts)
    for name in set(final.get("suspect_hosts") or []) | set(final.get("unreachable") or []):
        k = index[name]
        for rect in ((k - 0.5, -0.5, 1, n), (-0.5, k - 0.5, n, 1)):
            axis.add_patch(Rectangle(rect[:2], rect[2], rect[3], fill=False,
                                     edgecolor="red", linewidth=2))
    for a, b in (tuple(link) for link in final.get("suspect_links") or []):
        for i, j in ((index[a], index[b]), (index[b], index[a])):
            axis.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="red",
                                     linewidth=2))


def _verdict(final):
    if final is None:
        return "no verdict (the run ended early)"
    if final.get("healthy"):
        return "healthy"
    return "; ".join([f"suspect host {h}" for h in final["suspect_hosts"]] +
                     [f"suspect link {a}-{b}" for a, b in final["suspect_links"]] +
                     [f"unreachable {h}" for h in final["unreachable"]])
