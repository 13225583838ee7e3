"""`report.py compare A B` of two replays of one trace (replay.py --output): the pass, each op
kind and each call, B against A, each the median of its passes (as replay.py prints them), and
every call marked slower or faster listed. With several passes a side (--repeat), every ratio gets
the 95% interval compare.py gives sizes (Welch's, on the log times of the passes), and a change is
marked only when its interval excludes 1 and it is beyond the noise threshold."""

import json
import math
import statistics

from .compare import _log_moments, _table, _welch
from .runs import ReportError


def load(path):
    meta, calls, summary = None, {}, None
    try:
        with open(path, encoding="utf-8") as source:
            for number, line in enumerate(source, 1):  # noqa: B007 (the except names it)
                if not line.strip():
                    continue
                record = json.loads(line)
                if record.get("type") == "meta":
                    meta = record
                elif record.get("type") == "call":
                    calls[(record["rank"], record["index"])] = record
                elif record.get("type") == "replay_summary":
                    summary = record
    except OSError as error:
        raise ReportError(f"cannot read {path}: {error.strerror}") from None
    except (ValueError, KeyError) as error:
        raise ReportError(f"{path}: line {number} is not a replay record ({error})") from None
    if summary is None:
        raise ReportError(f"{path}: a replay that did not finish (no summary record)")
    return meta, calls, summary


def _shape(call):
    return (call["op"], call.get("dtype"), call.get("in_numel"), call.get("out_numel"),
            tuple(call.get("group") or ()))


def _label(meta, path):
    return f"{path}: {meta.get('backend')} ({meta.get('dist')}), {meta.get('world_size')} ranks " \
           f"on {len(set(meta.get('hostnames') or []))} host(s), {meta.get('repeat')} passes"


def _ratio(windows_a, windows_b, noise):
    """A and B's figure is the median over the passes, as replay.py prints it (its pass, kinds
    and calls); B/A is of the medians; the interval is Welch's on the log times of the passes."""
    a, b = statistics.median(windows_a), statistics.median(windows_b)
    row = {"a_s": a, "b_s": b, "ratio": b / a if a > 0 else None}
    usable = len(windows_a) > 1 and len(windows_b) > 1 and min(windows_a + windows_b) > 0
    if usable and row["ratio"]:
        mean_a, var_a, df_a = _log_moments(windows_a)
        mean_b, var_b, df_b = _log_moments(windows_b)
        diff, half = _welch([(mean_b - mean_a, var_a, df_a, var_b, df_b)])
        low, high = math.exp(diff - half), math.exp(diff + half)
        row["ratio_ci"] = [low, high]
        row["significant"] = low > 1 or high < 1
        row["marked"] = row["significant"] and abs(row["ratio"] - 1) >= noise
    return row


def _kind_windows(calls, kind_of):
    """{kind: [per pass: the slowest rank's sum]}"""
    sums: dict = {}  # kind -> rank -> [per pass]
    for (rank, _), call in calls.items():
        times = call.get("times_s")
        if not times:
            continue
        per_rank = sums.setdefault(kind_of(call["op"]), {})
        running = per_rank.setdefault(rank, [0.0] * len(times))
        for k, t in enumerate(times):
            running[k] += t
    return {kind: [max(r[k] for r in per_rank.values()) for k in range(len(next(iter(
        per_rank.values()))))] for kind, per_rank in sums.items()}


def kind(op):
    """The op kinds of replay.py's tables (commbench.trace.model.kind; torch not imported)."""
    return "pt2pt" if op in ("send", "recv", "batch") else op


def compare(path_a, path_b, noise=0.05, top=10):
    meta_a, calls_a, summary_a = load(path_a)
    meta_b, calls_b, summary_b = load(path_b)
    if set(calls_a) != set(calls_b) or any(_shape(calls_a[k]) != _shape(calls_b[k])
                                           for k in calls_a):
        differing = next((k for k in sorted(calls_a) if k not in calls_b or
                          _shape(calls_a[k]) != _shape(calls_b[k])), None)
        raise ReportError(f"{path_a} and {path_b} are not replays of one trace (first "
                          f"difference: rank {differing[0]} call {differing[1]})" if differing
                          else f"{path_a} and {path_b} are not replays of one trace")
    report = {"a": _label(meta_a, path_a), "b": _label(meta_b, path_b),
              "trace": meta_a.get("trace"),
              "pass": _ratio(summary_a["pass_times_s"], summary_b["pass_times_s"], noise)}
    windows_a, windows_b = _kind_windows(calls_a, kind), _kind_windows(calls_b, kind)
    report["kinds"] = {k: _ratio(windows_a[k], windows_b[k], noise) for k in windows_a}
    rows = []
    for key in sorted(calls_a):
        a, b = calls_a[key], calls_b[key]
        if not a.get("times_s") or not b.get("times_s"):
            continue
        row = _ratio(a["times_s"], b["times_s"], noise)
        row.update(rank=key[0], index=key[1], op=a["op"], dtype=a.get("dtype"),
                   elements=max(a.get("in_numel", 0), a.get("out_numel", 0)))
        rows.append(row)
    report["calls"] = len(rows)
    # every call the counts count, the most changed first
    report["slower_calls"] = sorted((r for r in rows if r.get("marked") and r["ratio"] > 1),
                                    key=lambda r: -r["ratio"])
    report["faster_calls"] = sorted((r for r in rows if r.get("marked") and r["ratio"] < 1),
                                    key=lambda r: r["ratio"])
    report["slower"], report["faster"] = len(report["slower_calls"]), len(report["faster_calls"])
    report["heaviest"] = sorted(rows, key=lambda r: -r["a_s"])[:top]
    return report


def _ms(seconds):
    return f"{seconds * 1e3:.3f}"


def _cells(name, row):
    interval = f"[{row['ratio_ci'][0]:.3f}, {row['ratio_ci'][1]:.3f}]" if "ratio_ci" in row \
        else "-"
    ratio = f"{row['ratio']:.3f}" if row["ratio"] else "-"
    return [name, _ms(row["a_s"]), _ms(row["b_s"]), ratio + (" *" if row.get("marked") else ""),
            interval]


def render(report, form):
    if form == "json":
        return json.dumps(report, indent=1)
    lines = [f"A: {report['a']}", f"B: {report['b']}", f"trace: {report['trace']}"]
    heads = ["", "A (ms)", "B (ms)", "B/A", "95% interval of B/A"]
    table = [_cells("one pass", report["pass"])] + \
        [_cells(kind, row) for kind, row in report["kinds"].items()]
    lines += _table("the pass and each op kind (the slowest rank's sum of call times; the "
                    "median of the passes, as replay.py prints it)", heads, table, form)
    heads = ["rank", "call", "op", "elements", "A (ms)", "B (ms)", "B/A", "95% interval of B/A"]

    def calls(chosen):
        return [[str(r["rank"]), str(r["index"]), r["op"], str(r["elements"])] +
                _cells("", r)[1:] for r in chosen]
    lines += _table(f"the {len(report['heaviest'])} heaviest calls of A (medians)", heads,
                    calls(report["heaviest"]), form)
    for how in ("slower", "faster"):
        chosen = report.get(f"{how}_calls") or []
        if chosen:
            lines += _table(f"the {len(chosen)} call{'s' if len(chosen) > 1 else ''} marked "
                            f"{how} in B", heads, calls(chosen), form)
    change = report["pass"]
    if "ratio_ci" in change:
        low, high = change["ratio_ci"]
        what = ("no significant difference" if not change["significant"] else
                f"B takes {change['ratio'] - 1:.0%} more time" if change["ratio"] > 1 else
                f"B takes {1 - change['ratio']:.0%} less time")
        lines.append(f"the pass: {what} (B/A {change['ratio']:.3f}, 95% interval "
                     f"[{low:.3f}, {high:.3f}]); calls marked slower in B: {report['slower']}, "
                     f"faster: {report['faster']}, of {report['calls']}")
    else:
        lines.append(f"the pass: B/A {change['ratio']:.3f} (one pass a side: no interval; "
                     "replay with --repeat for one)")
    return "\n".join(lines)
