"""report.py import and history (docs/history.md): results files into the results database, and
the figures run by run with their change points (commbench.records.db.history)."""

import json
import math
import os
import sys

from .. import units
from ..records.db import ENVIRONMENT, history, power, store as stores
from ..errors import BenchmarkError
from .runs import ReportError, ReportUsageError


def _open(where, read_only=True):
    """The database at --db (or $COMMBENCH_DB). The commands that only read open it read-only:
    a database that is not there is one line and exit 2, and none is created."""
    where = where or os.environ.get(ENVIRONMENT)
    if not where:
        raise ReportUsageError(f"give --db URL (or set {ENVIRONMENT})")
    try:
        return stores.Store(where, read_only=read_only)
    except stores.StoreMissing as error:
        raise ReportUsageError(str(error)) from None
    except BenchmarkError as error:  # StoreError, a newer schema, no schema
        raise ReportError(str(error)) from None


def import_files(paths, where, tag):
    """Each results file as a run; a line per file on stderr. The count imported."""
    from ..records import results
    store = _open(where, read_only=False)
    count = 0
    try:
        for path in paths:
            try:
                run = stores.import_file(store, path, tag)
            except (OSError, ValueError, KeyError, results.ResultsError) as error:
                text = getattr(error, "strerror", None) or str(error).splitlines()[0]
                raise ReportError(f"{path} is not a results file it can read: {text}") from None
            print(f"report.py: {path}: " + (f"run {run}" if run else "imported before, skipped"),
                  file=sys.stderr)
            count += run is not None
    finally:
        store.close()
    return count


def figure(series, value):
    if series.metric == "latency":
        return units.duration(value)
    return f"{value / 1e9:.3f} GB/s"


def title(series):
    op, dtype, reduce_op, groups, group, dist, backend, device, world, band = series.key
    what = " ".join(str(x) for x in (op, dtype, reduce_op if op in ("all_reduce", "reduce",
                                                                   "reduce_scatter") else None)
                    if x)
    if groups:
        what += f" {groups} group {group}"
    sizes = units.size(series.sizes[0]) + (f"..{units.size(series.sizes[-1])}"
                                           if len(series.sizes) > 1 else "")
    metric = "latency" if series.metric == "latency" else "bus bandwidth"
    return (f"{what}, {dist} {backend} {device}, {world} ranks: {band} messages ({sizes}, "
            f"{series.count} size{'s' if series.count > 1 else ''}), {metric}")


def verdict(series):
    n = len(series.values)
    spread = f"run-to-run spread {series.spread:.1%}" if not math.isnan(series.spread) else \
        "run-to-run spread unknown"
    if n < 2 * history.MIN_SEGMENT:
        return (f"no change claimed: {n} run{'s are' if n > 1 else ' is'} too few to judge one "
                f"(it takes {2 * history.MIN_SEGMENT}); {spread}")
    if not series.changes:
        return (f"no change over {n} runs ({spread}; Pettitt p >= {history.ALPHA}); "
                + missable(power.of_series(series), n))
    parts = []
    for change in series.changes:
        worse = change.ratio > 1 if series.metric == "latency" else change.ratio < 1
        parts.append(f"changed at run {series.runs[change.at]} ({series.started[change.at]}; "
                     f"{change.at + 1} of the {n} runs here): {change.ratio - 1:+.1%} "
                     f"[{change.low - 1:+.1%}, {change.high - 1:+.1%}] "
                     f"({'worse' if worse else 'better'}; Pettitt p={change.p:.1g})")
    return "; ".join(parts) + f"; {spread}"


def _percent(change):
    return f"{change:+.0%}" if abs(change) >= 0.1 else f"{change:+.1%}"


def missable(modelled, runs, whose="this series'", by=""):
    """What a "no change" of `runs` runs could have missed, in words: power.of_series()'s
    ((drop, rise), runs drawn)."""
    figures, drawn = modelled
    if figures is None:
        return f"{runs} runs are too few to say what change they would show"
    length = f"{drawn} runs" + (f" (the model draws at most {drawn}; {runs} here)"
                                if drawn < runs else "")
    how = (f"halfway through {length} is found{by} within {power.TOLERANCE} runs of it in "
           f"{power.FOUND:.0%} of series with {whose} run-to-run deviations")
    drop, rise = figures
    if drop is None or rise is None:
        return (f"a change of any size up to {_percent(1 / power.LARGEST - 1)} or "
                f"{_percent(power.LARGEST - 1)} could have been missed at this spread: not even "
                f"{'a drop' if drop is None else 'a rise'} that large {how}")
    return (f"a change smaller than {_percent(-drop)} or {_percent(rise)} could have been missed "
            f"at this spread: a step of that size {how}")


def render(series_list, last):
    if not series_list:
        return "no op runs in the database (for these --tag, --op, --since)"
    lines = []
    for series in series_list:
        lines.append(title(series))
        marks = {c.at for c in series.changes}
        shown = range(len(series.values)) if not last else \
            range(max(0, len(series.values) - last), len(series.values))
        if shown and shown[0] > 0:
            lines.append(f"  ({shown[0]} earlier runs not shown; --last 0 shows every run)")
        for index in shown:
            mark = "  <- changed" if index in marks else ""
            lines.append(f"  run {series.runs[index]:<6} {series.started[index]:<26} "
                         f"{figure(series, series.values[index]):>14}{mark}")
        lines.append(f"  verdict: {verdict(series)}")
        lines.append("")
    return "\n".join(lines).rstrip()


def as_json(series_list):
    return json.dumps([{
        "key": dict(zip(("op", "dtype", "reduce_op", "groups", "group", "dist", "backend",
                         "device", "world_size", "band"), s.key)),
        "metric": s.metric, "sizes": list(s.sizes), "runs": s.runs, "started": s.started,
        "values": s.values, "spread": s.spread,
        "changes": [{"run": s.runs[c.at], "index": c.at, "ratio": c.ratio, "low": c.low,
                     "high": c.high, "p": c.p} for c in s.changes],
        **({} if s.changes or len(s.values) < 2 * history.MIN_SEGMENT else
           {"smallest_found": found_as_data(power.of_series(s))})}
        for s in series_list], indent=1)


def found_as_data(modelled):
    """power.of_series()'s ((drop, rise), runs drawn) as the JSON forms give it."""
    figures, drawn = modelled
    drop, rise = figures if figures else (None, None)
    return {"drop": drop, "rise": rise, "runs": drawn, "within_runs": power.TOLERANCE,
            "share": power.FOUND, "series": power.SERIES}


def plot(series_list, path):
    """Each series' figure run by run, the medians of its regimes, and its changes marked."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    shown = series_list[:12]
    figure_, axes = plt.subplots(len(shown), 1, figsize=(9, 2.6 * len(shown)), squeeze=False)
    for axis, series in zip(axes[:, 0], shown):
        scale, unit = (1e6, "us") if series.metric == "latency" else (1e-9, "GB/s")
        values = [v * scale for v in series.values]
        axis.plot(range(1, len(values) + 1), values, "o-", markersize=3, linewidth=0.8)
        edges = [0] + [c.at for c in series.changes] + [len(values)]
        for a, b in zip(edges, edges[1:]):
            middle = sorted(values[a:b])[(b - a) // 2]
            axis.hlines(middle, a + 0.5, b + 0.5, colors="tab:green", linewidth=1.5)
        for change in series.changes:
            axis.axvline(change.at + 0.5, color="tab:red", linestyle="--")
            axis.annotate(f"{change.ratio - 1:+.0%}", (change.at + 0.5, max(values)),
                          color="tab:red", ha="left", va="top")
        axis.set_title(title(series), fontsize=8)
        axis.set_ylabel("latency (us)" if series.metric == "latency" else "busbw (GB/s)")
        axis.set_xlabel("run")
    figure_.tight_layout()
    figure_.savefig(path)
    plt.close(figure_)


def show(args):
    store = _open(args.db)
    try:
        series_list = history.judge(history.load(store, args.tag, args.op, args.since))
    finally:
        store.close()
    print(as_json(series_list) if args.format == "json" else render(series_list, args.last))
    if args.plot:
        if not series_list:
            raise ReportError("nothing to plot: no op runs in the database")
        plot(series_list, args.plot)
        print(f"report.py: wrote {args.plot}", file=sys.stderr)


# --------------------------------------------------------------------------- compare --db

def run_to_run(where, meta):
    """{(op, band): (runs, half, smallest found)} from the database's runs of the configuration
    `meta` (a results file's meta record) describes: what two processes of one command differ by,
    the half-width (in log) of the 95% prediction interval of log(a / b) for two new runs, t(df) x s
    x sqrt 2, where s is the standard deviation of the runs' log band figures about their
    regime's mean (the regimes between changes; df = runs - regimes). The plain standard
    deviation, not a robust one: the runs of one command are heavy-tailed (oneCCL here: 32 to
    139 us at small messages over ten runs, a robust spread of 18%), and the tails are what
    a single pair of runs meets; a robust spread called 4 of those ten pairs a change. The
    smallest found: power.smallest_found() of that series, what history over those runs would
    find within 2 runs in 95% of series (said where the pair shows no difference)."""
    from ..numbers import t975
    store = _open(where)
    try:
        found = history.judge(history.load(store))
    finally:
        store.close()
    want = {"dist": meta.get("dist"), "backend": meta.get("backend"),
            "device": meta.get("device"), "world_size": meta.get("world_size")}
    spreads: dict = {}
    for series in found:
        op, dtype, _, groups, _, dist, backend, device, world, band = series.key
        if groups or {"dist": dist, "backend": backend, "device": device,
                      "world_size": world} != want or len(series.values) < 3:
            continue
        squares, df = 0.0, 0
        edges = [0] + [c.at for c in series.changes] + [len(series.values)]
        for a, b in zip(edges, edges[1:]):
            part = [math.log(v) for v in series.values[a:b]]
            mean = sum(part) / len(part)
            squares += sum((x - mean) ** 2 for x in part)
            df += len(part) - 1
        if df < 2:
            continue
        half = t975(df) * math.sqrt(squares / df) * math.sqrt(2)
        if (op, band) not in spreads or spreads[(op, band)][0] < len(series.values):
            spreads[(op, band)] = (len(series.values), half, series)
    return {key: (runs, half, power.of_series(series))
            for key, (runs, half, series) in spreads.items()}


def _band_part(group_ratio, noise, where):
    if group_ratio is None:
        return f"no {where} messages to compare"
    if noise is None:
        return (f"{group_ratio - 1:+.0%} at {where} messages, run-to-run spread unknown (no "
                f"earlier runs of this configuration in the database)")
    runs, half, smallest = noise
    low, high = group_ratio * math.exp(-half), group_ratio * math.exp(half)
    figures = (f"{group_ratio - 1:+.0%} [{low - 1:+.0%}, {high - 1:+.0%}], against the spread "
               f"of {runs} runs in the database: two runs of it differ by up to "
               f"{math.exp(half):.2f}x (95%)")
    if low <= 1 <= high:
        return (f"no difference beyond the run-to-run noise at {where} messages ({figures}): "
                + missable(smallest, runs, "the database's runs'", " by report.py history"))
    return f"{'slower' if group_ratio > 1 else 'faster'} at {where} messages: {figures}"


def with_run_to_run(report, spreads):
    """compare()'s report of two single runs, its verdicts judged against the run-to-run spread
    of the database's runs (what two processes of one command differ by)."""
    for entry in report["ops"]:
        if not entry["rows"] or entry.get("difference"):
            continue
        op = entry["op"].split()[0]
        small, large = spreads.get((op, "small")), spreads.get((op, "large"))
        entry["run_to_run"] = {band: noise and {
            "runs": noise[0], "log_half_width": noise[1],
            "smallest_found": found_as_data(noise[2])}
            for band, noise in (("small", small), ("large", large))}
        entry["verdict"] = (f"{entry['op']}: {report['b']}: "
                            f"{_band_part(entry['small_ratio'], small, 'small')}; "
                            f"{_band_part(entry['large_ratio'], large, 'large')}.")
    return report
