"""One message size: timed (timing.py), checked (--check, --check-every), overlapped
(--overlap), gathered from every rank by name (gathered.py), then each group's row and record;
and the windows before the last of --repeat and --precision, each written as it ends."""

import functools
import sys

from .check import check_every, count_wrong
from .collective import get_bw
from ..errors import PROG, BenchmarkError
from ..ranks.guard import RESULTS_LOCK
from ..table import duration_text, emit_or_stop, note, print_row
from ..ranks import gathered, groups as grouping
from . import lateness, overlap, precision, trials as per_trial
from .timing import STATS, interval, odd_window, summarize, time_op, window


def timed_collective(collective, input, output, args, comm, meter=None, earlier=None,
                     counted=True):
    """Time one message size, check it with --check, print its row and record it.

    meter: the MemoryMeter started before the buffers were allocated, for the record's
    memory figure. earlier: the Timings of this size's earlier windows (--repeat); the row's
    figure is then the mean over every window's trials, with its 95% interval. counted=False
    (--precision): this window gives --check, --stats and --overlap, and the row's figure is
    that of the earlier windows alone, the ones the decision to stop saw. Under --groups
    every group of the layout gets its row (group 0's at once, the others' in their own table
    after the op) and its record. Returns the record of this rank's group (bytes, seconds,
    bytes/s).
    """
    call = collective.bind(comm, input, output, args.async_op)
    timing = time_op(call, args, comm)
    windows = list(earlier or []) + ([timing] if counted or not earlier else [])
    mean, low, high = interval([w.mean for w in windows], [w.count for w in windows])
    hidden = _overlap(collective, input, output, timing.count, args, comm) \
        if args.overlap else None
    checked = None
    if args.check_every:
        checked = check_every(collective, call, input, output, args, comm, timing.count)
        wrong = checked.wrong
    else:
        wrong = count_wrong(collective, call, input, output, args, comm) if args.check else 0
    used = meter.peak() if meter is not None else None
    # This rank's figures, gathered from every rank: each group's row is its first rank's
    # figure (rank 0's for the world, as the original prints), with its ranks' spread beside.
    mine = {"mean_s": mean, "low_s": low, "high_s": high,
            "trials": sum(w.count for w in windows), "memory": -1 if used is None else used,
            "wrong": wrong}
    if args.stats:
        mine.update(stats=[summarize(timing.trials)[k] for k in STATS], late_s=timing.late)
    if hidden is not None:
        mine["overlap"] = hidden.figures()
    if checked is not None:  # the first wrong trial and element (-1: none)
        mine.update(checked_s=checked.seconds, first_wrong=list(checked.first or (-1, -1)))
    if len(windows) > 1:  # --repeat: each window's figure
        mine.update(windows_s=[w.mean for w in windows],
                    window_trials=[w.count for w in windows])
    everyone = gathered.gather(comm, mine)
    trial_figures = gathered.gather(comm, per_trial.figures(timing)) \
        if timing.arrivals is not None else None  # --per-trial or --stats
    # (--precision: many windows, where an outlier is expected now and then and the interval
    # already carries it)
    if len(windows) > 1 and args.precision is None:
        odd = odd_window([w.mean for w in windows])
        if odd:
            note(comm, f"WARNING: {collective.name} at {input.element_size() * input.nelement()} "
                       f"bytes per rank: {odd}")
    found = _each_group(collective, input, args, comm, everyone, trial_figures, len(windows),
                        timing.clocks)
    if args.debug and collective.debug is not None:
        emit_or_stop(comm, sys.stderr, f"{PROG}: [rank {comm.global_rank}] "
                                       f"{collective.debug(comm, input, output)}", "--debug output")
    return found


def _each_group(collective, input, args, comm, everyone, trial_figures, repeat, timing_clocks):
    """Each group's record and row from every rank's figures: group 0's row at once, the others'
    kept for their own table after the op (--groups); --check's failures kept. Returns the
    record of this rank's group."""
    kind, groups, own = comm.group_layout
    found = None
    for index, ranks in enumerate(groups):
        # every trial of every rank on rank 0's clock (--per-trial keeps it; --stats names its
        # slowest rank from it): rank 0 alone holds the clocks' alignment
        entry = per_trial.encode([trial_figures[r] for r in ranks], ranks, comm.hostnames,
                                 timing_clocks) \
            if trial_figures is not None and comm.global_rank == 0 else None
        record, row = _group_result(collective, input, args, comm, [everyone[r] for r in ranks],
                                    ranks, repeat, entry)
        if entry is not None and args.per_trial:
            record["per_trial"] = entry
        if kind != "world":
            record.update(groups=kind, group=index, group_ranks=ranks)
            where = f" in {grouping.header_qualifier(kind, index, ranks, comm.hostnames)}"
        else:
            where = ""
        if record["wrong"]:
            first = record.get("first_wrong")
            comm.run.failures.append(f"{collective.name} at {record['size_bytes']} bytes per rank"
                                 f"{where}: {record['wrong']} wrong element"
                                 f"{'s' if record['wrong'] > 1 else ''}" + (
                                     f" (the first in trial {first['trial']} of "
                                     f"{record['trials']}, rank {first['rank']}, element "
                                     f"{first['element']})" if first else ""))
        if index == 0:
            print_row(args, comm, *row)
        elif comm.global_rank == 0:
            comm.layout.pending.setdefault(index, []).append(row)
        if kind == "split" and comm.global_rank == 0:
            comm.layout.totals.setdefault(record["size_bytes"], []).append(record)
        add_record(comm, record)
        if index == own:
            found = record
    return found


def _group_result(collective, input, args, comm, per_rank, ranks, repeat, entry=None):
    """The record and the table row (print_row's arguments after comm) of one group's ranks'
    figures (`per_rank`: timed_collective's named figures, in the order of `ranks`, global
    ranks; `entry`: their trials on rank 0's clock, trials.encode's, on rank 0)."""
    lead = per_rank[0]
    mean, trials = lead["mean_s"], int(lead["trials"])
    size, numel = input.element_size() * input.nelement(), input.nelement()
    record = {**_size_record(collective, input, comm, mean), "trials": trials,
              "trials_per_rank": [int(figures["trials"]) for figures in per_rank],
              "durations_per_rank_s": [figures["mean_s"] for figures in per_rank],
              "wrong": int(sum(f["wrong"] for f in per_rank)) if args.check else None,
              "memory_used_per_rank_bytes": [None if figures["memory"] < 0 else
                                             int(figures["memory"]) for figures in per_rank]}
    if collective.reduces:
        record["reduce_op"] = args.op
    target = args.precision
    extra = []
    if collective.rate is not None:
        rate = collective.rate(comm.world_size, numel, input.element_size(), mean)
        record["message_rate_per_s"] = rate
        extra.append("-" if rate is None else f"{rate:.0f}")
    if args.time_budget and target is None:
        extra.append(str(trials))
    if repeat > 1:
        extra.append(_repeat_figures(record, lead, repeat, target))
    if target is not None:
        extra.append(str(repeat))
    if args.stats:
        extra += _stats_figures(record, per_rank, ranks, args, comm, entry)
    if "overlap" in lead:
        figures = lead["overlap"]
        record["overlap"] = dict(zip(overlap.FIELDS, figures))
        record["overlap_pct_per_rank"] = [f["overlap"][overlap.FIELDS.index("overlap_pct")]
                                          for f in per_rank]
        comm_s, compute_s, total_s, pct = figures
        extra += [duration_text(args, comm_s), duration_text(args, compute_s),
                  duration_text(args, total_s), f"{pct:.1f}"]
    if "checked_s" in lead:
        # the first wrong trial of the group's ranks (then the lowest rank), as global ranks
        found = [(int(f["first_wrong"][0]), ranks[i], int(f["first_wrong"][1]))
                 for i, f in enumerate(per_rank) if f["first_wrong"][0] >= 0]
        first = min(found) if found else None
        record.update(check_every=True, checked_duration_s=lead["checked_s"],
                      checked_durations_per_rank_s=[f["checked_s"] for f in per_rank],
                      first_wrong=None if first is None else dict(
                          zip(("trial", "rank", "element"), first)))
        extra.append(duration_text(args, lead["checked_s"]))
    if args.check:
        extra.append(str(record["wrong"]))
    if args.peak is not None:  # the row held against its bound (peak.py)
        text, fields = comm.run.peak.row(collective.name, size, record["busbw_Bps"], args.raw)
        record.update(fields)
        extra.insert(0, text)
    scale = 8 if args.bw_unit == "Gbps" else 1
    description = f"{numel}x{input.element_size()}" if collective.payload else "-"
    tput, busbw = record["throughput_Bps"], record["busbw_Bps"]
    return record, (size, description, mean, tput and tput * scale, busbw and busbw * scale,
                    extra)


def _repeat_figures(record, lead, repeat, target):
    """--repeat's part of the record (each window, the interval, --precision's verdict) and
    its column's text."""
    record.update(repeat=repeat, windows_s=lead["windows_s"],
                  window_trials=[int(count) for count in lead["window_trials"]],
                  ci95_s=[lead["low_s"], lead["high_s"]])
    reached = precision.half_width(record["windows_s"], record["window_trials"])
    text = "-" if reached is None else f"±{reached * 100:.1f}%"
    if target is not None:
        met = reached is not None and reached <= target
        record.update(precision=target, precision_reached=reached, precision_met=met)
        text += "" if met else "!"
    return text


def _stats_figures(record, per_rank, ranks, args, comm, entry):
    """--stats' part of the record (the lead rank's statistics, every rank's, the slowest
    rank) and its columns' texts."""
    record["stats"] = dict(zip(STATS, per_rank[0]["stats"]))
    record["stats_per_rank"] = [dict(zip(STATS + ("late_s",), f["stats"] + [f["late_s"]]))
                                for f in per_rank]
    # The slowest rank is the straggler by commbench/bench/lateness.py's rule, the one report.py
    # trials applies: "-" when the evidence names no one (none late beyond the clocks' error
    # or by the call times, or the waiting it caused under 10% of the trials' time).
    slowest = None
    if entry is not None:
        decoded = per_trial.decode(entry)
        bounds = [decoded.host_errors.get(comm.hostnames[r], decoded.error) for r in ranks]
        named = lateness.judge(decoded, record["op"], bounds).named
        slowest = None if named is None else ranks[named]
    record["slowest_rank"] = slowest
    record["slowest_host"] = None if slowest is None else comm.hostnames[slowest]
    return [duration_text(args, record["stats"]["median_s"]),
            duration_text(args, record["stats"]["p99_s"]),
            # across hosts, the straggler's host too: which link or node to look at
            "-" if slowest is None else str(slowest) if len(set(comm.hostnames)) == 1 else
            f"{slowest}@{comm.hostnames[slowest]}"]


def _overlap(collective, input, output, count, args, comm):
    """--overlap's three windows for this size (commbench.bench.overlap), with the op issued
    asynchronously whatever --async-op says; the compute phase is calibrated once per run."""
    if comm.run.compute is None:
        comm.run.compute = overlap.Compute(comm, args.compute_cpus)
        note(comm, comm.run.compute.describe())
    call = collective.bind(comm, input, output, True)
    return overlap.measure(call, count, comm, comm.run.compute,
                           functools.partial(window, comm=comm), args.overlap_factor)


def time_window(collective, input, output, args, comm, index, warmup=False):
    """One window of a size in a pass before the last (--repeat, --precision): timed, and its
    figure written to the results file at once (a record with "window": index, one per group
    under --groups), so that a run that dies keeps it. (This rank's Timing, every rank's
    {"mean_s", "trials"}.)"""
    timing = time_op(collective.bind(comm, input, output, args.async_op), args, comm)
    everyone = gathered.gather(comm, {"mean_s": timing.mean, "trials": timing.count})
    kind, groups, _ = comm.group_layout
    target = args.precision
    for number, ranks in enumerate(groups):
        first = everyone[ranks[0]]
        record = {**_size_record(collective, input, comm, first["mean_s"]), "window": index,
                  "trials": int(first["trials"])}
        if target is None:
            record["repeat"] = args.repeat
        else:
            record.update(precision=target, warmup=warmup)
        if kind != "world":
            record.update(groups=kind, group=number, group_ranks=ranks)
        add_record(comm, record)
    return timing, everyone


def _size_record(collective, input, comm, mean):
    """The fields every record of one size starts with: what was moved, and how fast."""
    size = input.element_size() * input.nelement()
    tput, busbw = get_bw(collective, size, mean, comm.world_size, "GBps")
    extra = collective.record_fields(input.nelement(), comm.world_size, input.element_size()) \
        if collective.record_fields is not None else {}
    if "busbw_bytes" in extra:  # uneven traffic: the busiest rank's bytes between ranks
        busbw = extra.pop("busbw_bytes") / mean if mean > 0 else None
    return {"op": collective.name, "world_size": comm.world_size, "size_bytes": size,
            "numel": input.nelement(), "element_size": input.element_size(),
            "dtype": str(input.dtype).removeprefix("torch.") if collective.payload else None,
            "duration_s": mean, "throughput_Bps": tput, "busbw_Bps": busbw, **extra}


def add_record(comm, record):
    run = comm.run
    if run.results is None:
        return
    with RESULTS_LOCK:
        try:
            run.results.add(record)
        except BenchmarkError as error:  # a full disk: the file ends in its last whole record
            run.results.close()
            run.results = None
            run.stop_on(error)
