"""What a replay prints and writes: a table per op kind, the heaviest calls, the pass's time
(per step where the trace knows its steps), and for a trace that carries the job's own timings
(the suite's recorder does), the job's communication time beside the replay's.

Figures over ranks: a kind's time is the slowest rank's sum of its calls' times in a pass (the
median over the passes); asynchronous calls overlap, so a sum can exceed the time they took
together, which the job-against-replay table gives too (the time with a call in flight). Bus
bytes of a call (what BusBW divides): all_reduce 2(g-1)/g of its bytes, all_gather and
reduce_scatter (g-1)/g of the whole buffer, all_to_all the bytes to other ranks, gather and
scatter (g-1)/g of the whole, broadcast, reduce and point-to-point their bytes."""

import statistics

from .. import units
from ..opfacts import FACTS
from ..bench.timing import interval
from .model import KINDS


def bus_bytes(call, rank):
    """The bytes of a call that BusBW divides: its Size times its op's BusBW factor over its
    group (opfacts.FACTS); all_to_all's, the bytes to other ranks (its splits may be uneven)."""
    if call.op == "all_to_all":
        own = call.in_split[call.group.index(rank)] if rank in call.group else 0
        return (call.in_numel - own) * call.element_size
    g = max(1, len(call.group))
    size = call.nbytes
    if call.op == "scatter":  # Size is the root's whole message: a rank's piece g times
        size = call.out_numel * call.element_size * g
    return FACTS[call.kind].busbw_factor(g) * size


def _rate(bytes_, seconds):
    if not seconds or not bytes_:
        return "-"
    rate = bytes_ / seconds
    if rate >= 1e8:
        return f"{rate / 1e9:.3f} GB/s"
    return f"{rate / 1e6:.1f} MB/s" if rate >= 1e5 else f"{rate / 1e3:.1f} kB/s"


def _sum_over_passes(figures, chosen):
    """The median over the passes of each pass's sum of `chosen` calls' times: not the sum of
    per-call medians, which leaves out every call's tail (a small call's is 10x its median on
    gloo here)."""
    passes = len(figures["times"][chosen[0].index] or ())
    sums = [sum(figures["times"][c.index][k] for c in chosen) for k in range(passes)]
    return statistics.median(sums) if sums else None


def kinds_table(trace, everyone=None):
    """{kind: figures}: the replay's from each rank's per-pass call times (everyone, from
    replay.gather), or without it the job's, from the trace's own durations (None where it has
    none)."""
    table = {}
    for kind in KINDS:
        per_rank = {}
        for rank, calls in trace.ranks.items():
            chosen = [c for c in calls if c.kind == kind]
            if not chosen:
                continue
            if everyone is None:
                times = [c.duration_s for c in chosen]
                if any(t is None for t in times):
                    return None
                total = sum(times)
            else:
                times = [statistics.median(everyone[rank]["times"][c.index]) for c in chosen]
                total = _sum_over_passes(everyone[rank], chosen)
            per_rank[rank] = {"calls": len(chosen), "bytes": sum(c.nbytes for c in chosen),
                              "time_s": total, "times": times,
                              "bus_bytes": sum(bus_bytes(c, rank) for c in chosen)}
        if not per_rank:
            continue
        slowest = max(per_rank, key=lambda r: per_rank[r]["time_s"])
        everything = [t for figures in per_rank.values() for t in figures["times"]]
        table[kind] = {
            "calls": max(f["calls"] for f in per_rank.values()),
            "bytes": max(f["bytes"] for f in per_rank.values()),
            "time_s": per_rank[slowest]["time_s"], "slowest_rank": slowest,
            "median_call_s": statistics.median(everything),
            "busbw": per_rank[slowest]["bus_bytes"] / per_rank[slowest]["time_s"]
            if per_rank[slowest]["time_s"] > 0 else None,
        }
    return table


def total_time(trace, everyone=None):
    """The slowest rank's sum over all its calls (the replay's: median over the passes)."""
    sums = []
    for rank, calls in trace.ranks.items():
        chosen = [c for c in calls if c.op != "wait"]
        if not chosen:
            continue
        if everyone is None:
            if any(c.duration_s is None for c in chosen):
                return None
            sums.append(sum(c.duration_s for c in chosen))
        else:
            sums.append(_sum_over_passes(everyone[rank], chosen))
    return max(sums) if sums else 0.0


def kinds_lines(table, title):
    lines = [title, f"{'op':<16}{'calls/rank':>11}{'bytes/rank':>13}{'time (slowest)':>16}"
                    f"{'median call':>13}{'BusBW':>13}  slowest rank"]
    for kind, row in table.items():
        lines.append(f"{kind:<16}{row['calls']:>11}{units.size(row['bytes']):>13}"
                     f"{units.duration(row['time_s']):>16}"
                     f"{units.duration(row['median_call_s']):>13}"
                     f"{_rate(row['busbw'], 1) if row['busbw'] else '-':>13}  "
                     f"{row['slowest_rank']}")
    return lines


def heaviest_lines(trace, medians, count):
    rows = [(medians[rank][c.index], rank, c) for rank, calls in trace.ranks.items()
            for c in calls if c.op != "wait" and medians[rank][c.index] is not None]
    rows.sort(key=lambda row: -row[0])
    lines = [f"---- the {min(count, len(rows))} heaviest calls",
             f"{'rank':>4} {'call':>6}  {'op':<15}{'dtype':<10}{'elements':>12}{'bytes':>11}"
             f"  {'group':<14}{'job':>11}{'replay':>11}"]
    for seconds, rank, call in rows[:count]:
        group = _group_text(call)
        lines.append(f"{rank:>4} {call.index:>6}  {call.op:<15}{call.dtype or '-':<10}"
                     f"{max(call.in_numel, call.out_numel):>12}{units.size(call.nbytes):>11}"
                     f"  {group:<14}{units.duration(call.duration_s):>11}"
                     f"{units.duration(seconds):>11}")
    return lines


def _group_text(call):
    if call.op in ("send", "recv"):
        return f"peer {call.peer}"
    if call.op == "batch":
        return "peers " + ",".join(str(p.peer) for p in call.batch)[:8]
    ranks = list(call.group)
    if len(ranks) > 4:
        return f"{ranks[0]}..{ranks[-1]} ({len(ranks)})"
    return ",".join(map(str, ranks))


def union(intervals):
    """Seconds covered by at least one of the (start, end) intervals."""
    covered, reach = 0.0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            covered += end - start
            reach = end
        elif end > reach:
            covered += end - reach
            reach = end
    return covered


def job_in_flight(trace, kind=None):
    """The slowest rank's time with at least one call (of `kind`) in flight, as the job ran."""
    spans = []
    for _rank, calls in trace.ranks.items():
        chosen = [c for c in calls if c.op != "wait" and (kind is None or c.kind == kind)]
        if any(c.start_s is None or c.duration_s is None for c in chosen):
            return None
        spans.append(union([(c.start_s, c.start_s + c.duration_s) for c in chosen]))
    return max(spans) if spans else None


def replay_in_flight(trace, everyone, kind=None):
    """The same in the replay: per pass the slowest rank's, then the median over passes."""
    per_pass = None
    for rank, calls in trace.ranks.items():
        figures = everyone[rank]
        chosen = [c for c in calls if c.op != "wait" and (kind is None or c.kind == kind)
                  and figures["times"][c.index] is not None]
        if not chosen:
            continue
        passes = len(figures["times"][chosen[0].index])
        spans = [union([(figures["starts"][c.index][k],
                         figures["starts"][c.index][k] + figures["times"][c.index][k])
                        for c in chosen]) for k in range(passes)]
        per_pass = spans if per_pass is None else [max(a, b) for a, b in zip(per_pass, spans)]
    return statistics.median(per_pass) if per_pass else None


def _ratio(ours, theirs):
    return ours / theirs if ours is not None and theirs else None


def prediction(trace, everyone):
    """{kind: {job_s, replay_s, ratio, job_in_flight_s, replay_in_flight_s, in_flight_ratio}}
    and a "total" entry, or None when the trace has no timings of its own."""
    job = kinds_table(trace)
    if not job:
        return None
    replay = kinds_table(trace, everyone)
    result = {}
    for kind in list(job) + ["total"]:
        if kind == "total":
            theirs, ours = total_time(trace), total_time(trace, everyone)
            select = None
        else:
            theirs, ours, select = job[kind]["time_s"], replay[kind]["time_s"], kind
        flight_job = job_in_flight(trace, select)
        flight_ours = replay_in_flight(trace, everyone, select)
        result[kind] = {"job_s": theirs, "replay_s": ours, "ratio": _ratio(ours, theirs),
                        "job_in_flight_s": flight_job, "replay_in_flight_s": flight_ours,
                        "in_flight_ratio": _ratio(flight_ours, flight_job)}
    return result


def prediction_lines(table, source):
    lines = [f"---- the job's communication ({source}) against the replay's, the slowest rank's: "
             "sum of call times; time with a call in flight",
             f"{'op':<16}{'job':>12}{'replay':>12}{'replay/job':>12}{'job':>14}{'replay':>12}"
             f"{'replay/job':>12}"]

    def ratio(value):
        return f"{value:.2f}" if value is not None else "-"
    for kind, row in table.items():
        lines.append(f"{kind:<16}{units.duration(row['job_s']):>12}"
                     f"{units.duration(row['replay_s']):>12}"
                     f"{ratio(row['ratio']):>12}{units.duration(row['job_in_flight_s']):>14}"
                     f"{units.duration(row['replay_in_flight_s']):>12}"
                     f"{ratio(row['in_flight_ratio']):>12}")
    return lines


def pass_figures(pass_times, steps):
    """The pass's time over the repeats (each the slowest rank's), with a 95% interval, and per
    step."""
    ordered = sorted(pass_times)
    mean, low, high = interval(pass_times, [1] * len(pass_times))
    figures = {"median": statistics.median(ordered), "min": ordered[0], "max": ordered[-1],
               "mean": mean, "ci95": [low, high] if len(pass_times) > 1 else None}
    if steps:
        figures["per_step_s"] = figures["median"] / steps
    return figures


def pass_line(figures, repeat, steps):
    line = f"one pass of the trace: {units.duration(figures['median'])} median of {repeat} " \
           f"(min {units.duration(figures['min'])}, max {units.duration(figures['max'])}"
    if figures.get("ci95"):
        low, high = figures["ci95"]
        line += f"; mean {units.duration(figures['mean'])}, 95% interval " \
                f"{units.duration(max(0.0, low))} - {units.duration(high)}"
    line += ")"
    if steps:
        line += f"; per step {units.duration(figures['per_step_s'])} over {steps} step" + \
                ("s" if steps != 1 else "")
    return line
