"""`report.py trials RUN`: what a run of --per-trial says trial by trial, per op and size.

  first     the first timed trial against the steady median (the median of trials 2..T)
  spikes    trials over FACTOR x the steady median (default 2), the rank last to call each, and
            their period: the spacing p (2 to T/3 trials) of a comb k, k+p, k+2p, ... of which
            at least 60% are spikes, at least 3 of them, and so many that chance would put them
            there with probability below 1% (the binomial tail at the share of spikes off the
            comb, times the number of combs tried); the most spikes on the comb first, then the
            shortest p; in milliseconds, the median time between its spikes. Fewer than 3
            spikes, or no comb that fits: no period (a quiet run: spikes that come at random).
  stragglers per rank: how often it called the trial last, by how much after the median of the
            others each time (the time the others waited for it), and its host; a rank is named
            the straggler when it caused more than half of all that waiting and that waiting is
            at least MATERIAL (10%) of the trials' time: a rank last by a fraction of a
            millisecond in most trials of a quiet run (rank 0, which keeps the store, or the
            end of a ring) slows no one that matters, and is listed, not named
  drift     the least-squares slope of the trial time over trials 2..T, spikes left out, with
            its 95% interval: drift only when the interval leaves out 0

A trial's time is the slowest rank's, end to end (each rank's trial runs from the end of the one
before to its own end). Arrivals are as good as the clocks' alignment (commbench/trials.py):
the bound is printed with each size.
"""

import math
import statistics

from .. import results, trials, units
from ..numbers import t975
from .runs import ReportError

MIN_SPIKES = 3
COMB_SHARE = 0.6
MATERIAL = 0.10  # the straggler's waiting, at least this share of the trials' time
CHANCE = 0.01  # family-wise: the chance of a comb so full with spikes that come at random


def load(path):
    """The records of RUN that carry per-trial data, each with its decoded figures."""
    try:
        meta, records = results.read_all(path)  # the measured sizes, and replay.py's summary
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ReportError(f"cannot read {path}: {str(error).splitlines()[0] if str(error) else error}"
                          ) from None
    found = []
    for record in records:
        if not isinstance(record, dict) or "per_trial" not in record:
            continue
        if record.get("type") == "replay_summary":  # replay.py --per-trial: a trial is a pass
            record = {**record, "op": "replay (a trial is a pass)", "size_bytes": None}
        try:
            ranks, durations, arrivals, error = trials.decode(record["per_trial"])
        except ValueError as problem:
            raise ReportError(f"{path}: {record.get('op')} at {record.get('size_bytes')} bytes: "
                              f"per-trial data unreadable: {problem}") from None
        found.append((record, ranks, durations, arrivals, error))
    if not found and str(path).endswith(".csv"):
        raise ReportError(f"{path}: a .csv results file does not keep per-trial data: run with "
                          "--per-trial --output RUN.jsonl (or .json)")
    if not found:
        raise ReportError(f"{path} holds no per-trial data: run the op with --per-trial "
                          "(and --output)")
    return meta.get("hostnames") or [], found


def spikes(times, factor):
    """(steady median, the 1-based trials over factor x it, among trials 2..T)."""
    steady = statistics.median(times[1:]) if len(times) > 1 else times[0]
    return steady, [i + 1 for i, t in enumerate(times) if i > 0 and t > factor * steady]


def period(spiked, count):
    """(p, phase, hits) of the comb that fits the spikes (the docstring's rule), or None."""
    if len(spiked) < MIN_SPIKES:
        return None
    best = None
    on = set(spiked)
    combs = sum(range(2, count // 3 + 1))
    for p in range(2, count // 3 + 1):
        for phase in range(p):
            comb = [i for i in range(phase if phase else p, count + 1, p) if i >= 2]
            hits = sum(1 for i in comb if i in on)
            if hits < MIN_SPIKES or hits < COMB_SHARE * len(comb):
                continue
            off = max((len(spiked) - hits) / max(1, count - 1 - len(comb)), 1 / count)
            if _tail(len(comb), hits, min(off, 1.0)) * combs < CHANCE:
                if best is None or hits > best[2]:
                    best = (p, phase, hits)
    return best


def _tail(n, k, q):
    """P(at least k of n) for a binomial of rate q."""
    return sum(math.comb(n, j) * q ** j * (1 - q) ** (n - j) for j in range(k, n + 1))


def period_seconds(times, p, phase, spiked):
    """The median time between consecutive spikes on the comb (end to end)."""
    ends, total = {}, 0.0
    for i, t in enumerate(times, start=1):
        total += t
        ends[i] = total
    on = [i for i in spiked if i % p == phase % p]
    gaps = [ends[b] - ends[a] for a, b in zip(on, on[1:]) if b - a == p]
    return statistics.median(gaps) if gaps else None


def drift(times, spiked):
    """(slope s a trial, low, high) over trials 2..T without the spikes, or None (< 4 trials)."""
    points = [(i, t) for i, t in enumerate(times, start=1) if i > 1 and i not in set(spiked)]
    n = len(points)
    if n < 4:
        return None
    mx = sum(i for i, _ in points) / n
    my = sum(t for _, t in points) / n
    sxx = sum((i - mx) ** 2 for i, _ in points)
    slope = sum((i - mx) * (t - my) for i, t in points) / sxx
    residual = sum((t - my - slope * (i - mx)) ** 2 for i, t in points) / (n - 2)
    half = t975(n - 2) * math.sqrt(residual / sxx)
    return slope, slope - half, slope + half


def stragglers(arrivals):
    """Per rank index: (times last, median lateness when last, total lateness) — lateness: its
    call after the median of the others' calls of that trial."""
    count = len(arrivals[0])
    out = [[0, [], 0.0] for _ in arrivals]
    for i in range(count):
        calls = [a[i] for a in arrivals]
        last = max(range(len(calls)), key=lambda r: calls[r])
        others = calls[:last] + calls[last + 1:]
        late = calls[last] - statistics.median(others) if others else 0.0
        out[last][0] += 1
        out[last][1].append(late)
        out[last][2] += late
    return [(n, statistics.median(lates) if lates else 0.0, total) for n, lates, total in out]


def analyse(path, factor=2.0):
    """One dict per op and size: the figures of the four parts."""
    hosts, found = load(path)
    sizes = []
    for record, ranks, durations, arrivals, error in found:
        times = [max(d[i] for d in durations) for i in range(len(durations[0]))]
        steady, spiked = spikes(times, factor)
        comb = period(spiked, len(times))
        late = stragglers(arrivals)
        order = sorted(range(len(ranks)), key=lambda r: late[r][2], reverse=True)
        named, waiting = None, sum(row[2] for row in late)
        most = late[order[0]][2] / sum(times) if len(order) > 1 and sum(times) > 0 else 0.0
        if len(order) > 1 and waiting > 0 and late[order[0]][2] > waiting / 2 and \
                most >= MATERIAL:
            named = ranks[order[0]]
        last_in_spikes = {}
        for i in spiked:
            calls = [a[i - 1] for a in arrivals]
            rank = ranks[max(range(len(calls)), key=lambda r: calls[r])]
            last_in_spikes[rank] = last_in_spikes.get(rank, 0) + 1
        sizes.append({
            "op": record.get("op"), "size_bytes": record.get("size_bytes"),
            "group": record.get("group"), "trials": len(times), "ranks": ranks,
            "hosts": [hosts[r] if r < len(hosts) else "?" for r in ranks],
            "clock_error_s": error, "first_s": times[0], "steady_s": steady,
            "factor": factor, "spikes": spiked,
            "period": None if comb is None else {
                "trials": comb[0], "first": comb[1] or comb[0], "on_comb": comb[2],
                "seconds": period_seconds(times, comb[0], comb[1], spiked)},
            "stragglers": [{"rank": ranks[r], "last": late[r][0], "median_late_s": late[r][1],
                            "total_late_s": late[r][2]} for r in order],
            "straggler": named, "most_waiting_share": most, "last_in_spikes": last_in_spikes,
            "drift": drift(times, spiked), "times": times, "durations": durations})
    return sizes


def _why_none(s):
    top = s["stragglers"][0]
    waiting = sum(row["total_late_s"] for row in s["stragglers"])
    if waiting <= 0 or top["total_late_s"] <= waiting / 2:
        return "no rank caused more than half of the waiting"
    return (f"rank {top['rank']} caused most of the waiting, {units.duration(top['total_late_s'])}"
            f", {s['most_waiting_share']:.0%} of the trials' time: under the {MATERIAL:.0%} that "
            "names one")


def render(sizes):
    lines = []
    for s in sizes:
        group = f", group {s['group']}" if s.get("group") is not None else ""
        size = f" {units.size(s['size_bytes'])}" if s["size_bytes"] is not None else ""
        lines.append(f"{s['op']}{size}{group}: {s['trials']} trials on "
                     f"{len(s['ranks'])} ranks (arrivals within "
                     f"+-{units.duration(s['clock_error_s'])}, the clocks' alignment)")
        ratio = s["first_s"] / s["steady_s"] if s["steady_s"] > 0 else float("nan")
        lines.append(f"  first trial   {units.duration(s['first_s'])}, {ratio:.1f}x the steady "
                     f"median {units.duration(s['steady_s'])} (trials 2-{s['trials']})")
        shown = ", ".join(map(str, s["spikes"][:12])) + (" ..." if len(s["spikes"]) > 12 else "")
        text = (f"  spikes        {len(s['spikes'])} over {s['factor']:g}x the steady median"
                + (f" (trials {shown})" if s["spikes"] else ""))
        p = s["period"]
        if s["last_in_spikes"] and len(s["ranks"]) > 1:
            rank, n = max(s["last_in_spikes"].items(), key=lambda item: item[1])
            text += f", rank {rank} last to call {n} of them"
        if p is not None:
            when = f", every {units.duration(p['seconds'])}" if p["seconds"] is not None else ""
            text += (f"; period {p['trials']} trials{when} (from trial {p['first']}, "
                     f"{p['on_comb']} spikes on it)")
        else:
            text += "; no period"
        lines.append(text)
        for row in s["stragglers"] if len(s["ranks"]) > 1 else []:
            index = s["ranks"].index(row["rank"])
            if not row["last"]:
                continue
            mark = "   <- straggler" if row["rank"] == s["straggler"] else ""
            lines.append(f"  last to call  rank {row['rank']} on {s['hosts'][index]}: "
                         f"{row['last']} of {s['trials']} trials, by "
                         f"{units.duration(row['median_late_s'])} (median), "
                         f"{units.duration(row['total_late_s'])} in all{mark}")
        if len(s["ranks"]) == 1:
            lines.append("  last to call  - (one rank: no arrivals to compare)")
        elif s["straggler"] is None:
            lines.append(f"  straggler     none ({_why_none(s)})")
        d = s["drift"]
        if d is None:
            lines.append("  drift         - (fewer than 4 steady trials)")
        else:
            slope, low, high = d
            verdict = "drift" if low > 0 or high < 0 else "no drift"
            lines.append(f"  drift         {_signed(slope)} a trial (95% interval {_signed(low)} "
                         f"to {_signed(high)}): {verdict}")
    return "\n".join(lines)


def _signed(seconds):
    return ("+" if seconds >= 0 else "-") + units.duration(abs(seconds))


def plot(sizes, output):
    """Trial time against trial number, one line per rank, a panel per op and size."""
    from .plot import pyplot, save
    plt = pyplot()
    shown = sizes[:12]
    figure, axes = plt.subplots(len(shown), 1, figsize=(8, 2.6 * len(shown)), squeeze=False)
    for ax, s in zip(axes[:, 0], shown):
        for rank, durations in zip(s["ranks"], s["durations"]):
            ax.plot(range(1, len(durations) + 1), [d * 1e3 for d in durations],
                    label=f"rank {rank}", linewidth=0.8)
        size = f" {units.size(s['size_bytes'])}" if s["size_bytes"] is not None else ""
        ax.set_title(f"{s['op']}{size}", fontsize=9)
        ax.set_xlabel("trial")
        ax.set_ylabel("ms")
        ax.legend(fontsize=7)
    figure.tight_layout()
    save(figure, output)
    plt.close(figure)
    return len(shown)
