"""Running an op: for each message size, buffers, timing, --check, the row and the record;
the run's start (process group and results file) and end; and the entry point every script
hands its run function to."""

import argparse
import functools
import os
import sys
import time

import torch

from .check import check_every, count_wrong
from .cli import benchmark_parser
from .collective import get_bw
from .comm import init_comm, teardown
from .dtypes import dtypes_for, get_dtype
from .errors import PROG, BenchmarkError, OutputClosed, UsageError
from .guard import (RESULTS_LOCK, agree_to_go_on, deadline, guard_stop_signals,
                    leave_it_to_the_stop, peer_failure, rank_for_messages, say)
from .layer import processor_model
from .memory import MemoryMeter
from .progress import open_progress
from .sizes import allocate, cap_sweep, plan_single_size, refuse_past_ceiling, sweep_numels
from .table import (duration_text, emit_or_stop, extra_columns, note, output_failure, print_header,
                    print_row)
from . import groups as grouping, overlap, precision, provenance, trials as per_trial, whereabouts
from .timing import STATS, interval, odd_window, summarize, time_op, window


def init_processes(local_rank, args, ops=None):
    """The Comm of this run (comm.init_comm), with rank 0's results file open when its --output
    asks for one (only rank 0's counts: a multi-node launch may name it on one line alone).
    `ops` names the ops this run will measure, for the results file."""
    comm = init_comm(local_rank, args)
    comm.results = open_results(args, comm, lambda: run_meta(args, comm, ops or []))
    comm.whereabouts = whereabouts.start(comm)
    comm.budget = precision.Budget(args.time_budget, ops or []) \
        if getattr(args, "precision", None) is not None else None
    return comm


def open_results(args, comm, make_meta):
    """Rank 0 opens its outputs (--output's results file, --db's run, --prometheus; see
    commbench.outputs), the meta record make_meta() first, before anything is measured; every
    rank learns whether that worked, so that none goes on to measure alone. Rank 0's writer, or
    None."""
    writer, failure = None, None
    if comm.global_rank == 0:
        from . import outputs  # only runs that write one pay for it
        try:
            writer = outputs.open_outputs(args, make_meta, lambda text: note(comm, text))
        except BenchmarkError as error:
            failure = str(error)
    if comm.any_rank(failure is not None):
        raise BenchmarkError(failure or "rank 0 cannot write the results file")
    return writer


def run_meta(args, comm, ops):
    """The meta record of a results file: what was run, where, with what."""
    return {
        "ops": list(ops), "dist": comm.name, "backend": comm.backend, "device": comm.device.type,
        "master_addr": os.environ.get("MASTER_ADDR"), "master_port": os.environ.get("MASTER_PORT"),
        "dtype": args.dtype, "dtypes": dtypes_for(args, comm.backend),
        "reduce_op": getattr(args, "op", "sum"), "world_size": len(comm.hostnames),
        "hostnames": comm.hostnames,
        # --groups: the layouts run, each as its groups' global ranks
        "groups": {kind: layout.groups for kind, layout in comm.layouts.items()
                   if kind in (getattr(args, "groups", None) or [])} or None,
        "versions": provenance.versions(), "trials": args.trials, "warmups": args.warmups,
        "async_op": args.async_op, "scan": args.scan, "maxsize": args.maxsize,
        "minsize": getattr(args, "minsize", 1), "min_bytes": getattr(args, "min_bytes", None),
        "max_bytes": getattr(args, "max_bytes", None),
        "step_factor": getattr(args, "step_factor", None),
        "mem_factor": args.mem_factor, "bw_unit": args.bw_unit, "check": args.check,
        "check_every": getattr(args, "check_every", False),
        "time_budget": args.time_budget,
        "stats": args.stats, "per_trial": getattr(args, "per_trial", False),
        "repeat": getattr(args, "repeat", 1), "pin": getattr(args, "pin", False),
        "precision": getattr(args, "precision", None),
        "max_windows": getattr(args, "max_windows", None),
        "overlap": getattr(args, "overlap", False),
        # docs/traffic.md: --split N:rule, all_to_allv's splits, pt2pt's pairs
        "split": list(args.split) if getattr(args, "split", None) else None,
        "a2a_matrix": getattr(args, "a2a_matrix", None),
        "a2a_skew": ":".join(map(str, args.a2a_skew)) if getattr(args, "a2a_skew", None) else None,
        "seed": getattr(args, "seed", 0), "pairs": getattr(args, "pairs", "one"),
        "bidirectional": getattr(args, "bidirectional", False),
        "overlap_factor": getattr(args, "overlap_factor", 1.0),
        "compute_cpus": sorted(getattr(args, "compute_cpus", None) or []) or None,
        # backend ccl: oneCCL's settings (env: the value of each, set_by_suite: those the suite
        # defaulted, oneccl_defaults: those left to oneCCL) and versions; None on other backends
        "ccl": comm.ccl,
        # seconds per rank from the start-up to the process group up and the first collective
        "startup": comm.startup,
        "torch_threads": torch.get_num_threads(), "processor": processor_model(comm.device),
        **provenance.invocation(),
    }


def finish(comm):
    """End of a run: the last agreement on stopping, the results file closed; wrong elements
    found by --check fail the run."""
    agree_to_go_on(comm)
    if comm.results is not None:
        comm.results.close()
        comm.results = None
    if comm.failures:
        more = f" (and {len(comm.failures) - 1} more)" if len(comm.failures) > 1 else ""
        raise BenchmarkError(f"--check found wrong elements: {comm.failures[0]}{more}")


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
        if getattr(args, "overlap", False) else None
    checked = None
    if getattr(args, "check_every", False):
        checked = check_every(collective, call, input, output, args, comm, timing.count)
        wrong = checked.wrong
    else:
        wrong = count_wrong(collective, call, input, output, args, comm) if args.check else 0
    used = meter.peak() if meter is not None else None
    # This rank's figures, gathered from every rank: each group's row is its first rank's
    # figure (rank 0's for the world, as the original prints), with its ranks' spread beside.
    mine = [mean, low, high, sum(w.count for w in windows), -1 if used is None else used, wrong]
    if args.stats:
        mine += [summarize(timing.trials)[k] for k in STATS] + [timing.late]
    if hidden is not None:
        mine += hidden.figures()
    if checked is not None:
        mine += [checked.seconds, *(checked.first or (-1, -1))]
    if len(windows) > 1:  # --repeat: each window's figure, last
        mine += [w.mean for w in windows] + [w.count for w in windows]
    everyone = comm.gather_figures(mine)
    trial_figures = comm.gather_figures(per_trial.figures(timing)) \
        if timing.arrivals is not None else None
    # (--precision: many windows, where an outlier is expected now and then and the interval
    # already carries it)
    if len(windows) > 1 and getattr(args, "precision", None) is None:
        odd = odd_window([w.mean for w in windows])
        if odd:
            note(comm, f"WARNING: {collective.name} at {input.element_size() * input.nelement()} "
                       f"bytes per rank: {odd}")
    kind, groups, own = comm.group_layout
    found = None
    for index, ranks in enumerate(groups):
        record, row = _group_result(collective, input, args, comm, [everyone[r] for r in ranks],
                                    ranks, len(windows))
        if trial_figures is not None and comm.global_rank == 0:
            record["per_trial"] = per_trial.encode([trial_figures[r] for r in ranks], ranks)
        if kind != "world":
            record.update(groups=kind, group=index, group_ranks=ranks)
            where = f" in {grouping.header_qualifier(kind, index, ranks, comm.hostnames)}"
        else:
            where = ""
        if record["wrong"]:
            first = record.get("first_wrong")
            comm.failures.append(f"{collective.name} at {record['size_bytes']} bytes per rank"
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
        _add_record(comm, record)
        if index == own:
            found = record
    if args.debug and collective.debug is not None:
        emit_or_stop(comm, sys.stderr, f"{PROG}: [rank {comm.global_rank}] "
                                       f"{collective.debug(comm, input, output)}", "--debug output")
    return found


# Where each figure sits in the per-rank lists timed_collective gathers.
_MEAN, _LOW, _HIGH, _TRIALS, _MEMORY, _WRONG = range(6)
_STATS_AT = 6


def _group_result(collective, input, args, comm, per_rank, ranks, repeat):
    """The record and the table row (print_row's arguments after comm) of one group's ranks'
    figures (`per_rank`, in the order of `ranks`, global ranks)."""
    lead = per_rank[0]
    mean, trials = lead[_MEAN], int(lead[_TRIALS])
    size, numel = input.element_size() * input.nelement(), input.nelement()
    record = {**_size_record(collective, input, comm, mean), "trials": trials,
              "trials_per_rank": [int(figures[_TRIALS]) for figures in per_rank],
              "durations_per_rank_s": [figures[_MEAN] for figures in per_rank],
              "wrong": int(sum(figures[_WRONG] for figures in per_rank)) if args.check else None,
              "memory_used_per_rank_bytes": [None if figures[_MEMORY] < 0 else
                                             int(figures[_MEMORY]) for figures in per_rank]}
    if collective.reduces:
        record["reduce_op"] = getattr(args, "op", "sum")
    target = getattr(args, "precision", None)
    extra = []
    if collective.rate is not None:
        rate = collective.rate(comm.world_size, numel, input.element_size(), mean)
        record["message_rate_per_s"] = rate
        extra.append("-" if rate is None else f"{rate:.0f}")
    if args.time_budget and target is None:
        extra.append(str(trials))
    if repeat > 1:
        low, high = lead[_LOW], lead[_HIGH]
        record.update(repeat=repeat, windows_s=lead[-2 * repeat:-repeat],
                      window_trials=[int(count) for count in lead[-repeat:]], ci95_s=[low, high])
        reached = precision.half_width(record["windows_s"], record["window_trials"])
        text = "-" if reached is None else f"±{reached * 100:.1f}%"
        if target is not None:
            met = reached is not None and reached <= target
            record.update(precision=target, precision_reached=reached, precision_met=met)
            text += "" if met else "!"
        extra.append(text)
    if target is not None:
        extra.append(str(repeat))
    at = _STATS_AT
    if args.stats:
        stats_end = at + len(STATS)
        record["stats"] = dict(zip(STATS, lead[at:stats_end]))
        record["stats_per_rank"] = [dict(zip(STATS + ("late_s",), figures[at:stats_end + 1]))
                                    for figures in per_rank]
        # The straggler is the rank the others wait for: in a collective every rank's trials
        # end together, so the one that is slowest is the one that comes latest to each call.
        slowest = ranks[max(range(len(ranks)), key=lambda i: per_rank[i][stats_end])]
        record["slowest_rank"] = slowest
        record["slowest_host"] = comm.hostnames[slowest]
        extra += [duration_text(args, record["stats"]["median_s"]),
                  duration_text(args, record["stats"]["p99_s"]),
                  # across hosts, the straggler's host too: which link or node to look at
                  str(slowest) if len(set(comm.hostnames)) == 1 else
                  f"{slowest}@{comm.hostnames[slowest]}"]
        at = stats_end + 1
    if getattr(args, "overlap", False):
        figures = lead[at:at + len(overlap.FIELDS)]
        record["overlap"] = dict(zip(overlap.FIELDS, figures))
        record["overlap_pct_per_rank"] = [f[at + overlap.FIELDS.index("overlap_pct")]
                                          for f in per_rank]
        comm_s, compute_s, total_s, pct = figures
        extra += [duration_text(args, comm_s), duration_text(args, compute_s),
                  duration_text(args, total_s), f"{pct:.1f}"]
        at += len(overlap.FIELDS)
    if getattr(args, "check_every", False):
        # the first wrong trial of the group's ranks (then the lowest rank), as global ranks
        found = [(int(f[at + 1]), ranks[i], int(f[at + 2])) for i, f in enumerate(per_rank)
                 if f[at + 1] >= 0]
        first = min(found) if found else None
        record.update(check_every=True, checked_duration_s=lead[at],
                      checked_durations_per_rank_s=[f[at] for f in per_rank],
                      first_wrong=None if first is None else dict(
                          zip(("trial", "rank", "element"), first)))
        extra.append(duration_text(args, lead[at]))
    if args.check:
        extra.append(str(record["wrong"]))
    scale = 8 if args.bw_unit == "Gbps" else 1
    description = f"{numel}x{input.element_size()}" if collective.payload else "-"
    tput, busbw = record["throughput_Bps"], record["busbw_Bps"]
    return record, (size, description, mean, tput and tput * scale, busbw and busbw * scale,
                    extra)


def _overlap(collective, input, output, count, args, comm):
    """--overlap's three windows for this size (commbench.overlap), with the op issued
    asynchronously whatever --async-op says; the compute phase is calibrated once per run."""
    if comm.compute is None:
        comm.compute = overlap.Compute(comm, getattr(args, "compute_cpus", None))
        note(comm, comm.compute.describe())
    call = collective.bind(comm, input, output, True)
    return overlap.measure(call, count, comm, comm.compute, functools.partial(window, comm=comm),
                           getattr(args, "overlap_factor", 1.0))


def refuse_oversized_sweeps(collectives, args, comm):
    """run_all.py, before its first op: a sweep past its ceiling (sizes.refuse_past_ceiling) is
    refused before anything is measured, not once the ops before it ran. Under --groups or
    --split each op's sizes follow its groups, and each op checks its own (cap_sweep)."""
    if not args.scan or getattr(args, "groups", None) or getattr(args, "split", None):
        return
    for one in runs_per_dtype(args, comm):
        for collective in collectives:
            if comm.world_size >= collective.min_world_size:
                refuse_past_ceiling(collective, sweep_numels(collective, one, comm.world_size),
                                    one, comm)


def runs_per_dtype(args, comm):
    """One copy of `args` per dtype of --dtype (a list, or `all` of what the backend moves),
    each naming its dtype alone; sizes below one element of any of them are refused first."""
    names = dtypes_for(args, comm.backend)
    if getattr(args, "min_bytes", None) is not None:
        for name in names:
            size = get_dtype(name).itemsize
            if args.min_bytes < size:
                raise UsageError(f"--min-bytes {args.min_bytes} is below one element of {name} "
                                 f"({size} bytes)")
    return [argparse.Namespace(**{**vars(args), "dtype": name}) for name in names]


def run_collective(collective, args, comm):
    """For each layout of --groups (the world without it) and each dtype of the run, the
    header, then one row per message size: a scan, or the largest size that fits. An op
    without payload (barrier) runs once, whatever the dtypes."""
    if comm.world_size < collective.min_world_size:
        raise BenchmarkError(f"{collective.name} needs at least {collective.min_world_size} ranks, "
                             f"this world has {comm.world_size}; launch it with e.g. "
                             f"torchrun --nproc_per_node {collective.min_world_size}")
    if collective.specialize is not None:
        collective = collective.specialize(args)
    if collective.qualifier is not None:  # refuses, before measuring, what a group cannot run
        for kind in getattr(args, "groups", None) or ["world"]:
            for ranks in (comm.layouts[kind].groups if comm.layouts else [range(comm.world_size)]):
                collective.qualifier(len(ranks))
    runs = runs_per_dtype(args, comm)
    if collective.rate is not None:
        for one in runs:
            one.op_columns = [("Msgs/s", 12)]
    several = len(runs) > 1 and collective.payload
    if comm.budget is not None:
        layouts = len(getattr(args, "groups", None) or ["world"])
        comm.budget.start_op(collective.name, layouts * (len(runs) if collective.payload else 1))
    records = []
    try:
        for kind in getattr(args, "groups", None) or ["world"]:
            if comm.layouts:
                comm.use_layout(kind)
            for one in runs if collective.payload else runs[:1]:
                records += _run_sizes(collective, one, comm, one.dtype if several else None)
    finally:
        if comm.layouts:
            comm.use_layout("world")
    return records


def _run_sizes(collective, args, comm, dtype_shown):
    """One table: the header (naming the dtype when the run has several), one row per size."""
    fixed = collective.fixed_numel(args, get_dtype(args.dtype).itemsize) \
        if collective.fixed_numel is not None and not args.scan else None
    if args.scan or not collective.payload:
        numels = cap_sweep(collective, sweep_numels(collective, args, comm.world_size), args,
                           comm)
    elif fixed is not None:
        numels = [fixed]
    else:
        numel, plan = plan_single_size(collective, args, comm)
        note(comm, plan)
        numels = [numel]
    qualifiers = [f"dtype {dtype_shown}"] if dtype_shown else []
    if collective.reduces and getattr(args, "op", "sum") != "sum":
        qualifiers.append(f"op {args.op}")
    if collective.qualifier is not None:
        qualifiers.append(collective.qualifier(comm.world_size))
    kind, groups, _ = comm.group_layout
    shown = collective.shown_world_size or comm.world_size

    def header(index):
        where = [grouping.header_qualifier(kind, index, groups[index], comm.hostnames)] \
            if kind != "world" else []
        print_header(args, collective.name, shown, comm, qualifiers + where)
    header(0)
    # --repeat R: R passes over the sizes, one window of each size per pass, so that each size's
    # windows are spread over the op's whole run and drift hits them alike; the rows (and the
    # whole records) come in the last pass, each window's record as it is measured. --precision:
    # passes until each size's interval is tight enough (commbench.precision).
    adaptive = getattr(args, "precision", None) is not None
    schedule = precision.Schedule(args, comm, len(numels), groups) if adaptive else \
        precision.FixedPasses(getattr(args, "repeat", 1), len(numels))
    records, windows = [], {numel: [] for numel in numels}
    element_size = get_dtype(args.dtype).itemsize
    bar = open_progress(comm, collective.name, [numel * element_size for numel in numels],
                        None if adaptive else len(numels) * schedule.repeat)
    try:
        numels = _measure_passes(collective, args, comm, numels, schedule, windows, records,
                                 bar)
    finally:
        if bar is not None:
            bar.close()
    if adaptive:
        precision.note_shortfalls(collective.name, args, comm, records, schedule.shortfalls(),
                                  numels)
    if comm.layout is not None:  # the other groups' tables, rows as measured
        for index in range(1, len(groups)):
            header(index)
            for row in comm.layout.pending.pop(index, []):
                print_row(args, comm, *row)
    if kind == "split":
        _aggregate(collective, args, comm, len(groups), qualifiers, sum(map(len, groups)))
    return records


def _measure_passes(collective, args, comm, numels, schedule, windows, records, bar):
    """The windows of every pass over the sizes (records: the rows' records, appended; windows:
    each size's earlier windows); the sizes left, fewer when an allocation failed."""
    adaptive = getattr(args, "precision", None) is not None
    groups = comm.group_layout[1]
    for number, positions, last in schedule.passes():
        for position in positions:
            numel = numels[position]
            where = (f"rank {comm.global_rank}: {collective.name} at {numel} elements of {args.dtype} "
                     "per rank")
            late = (f"{where} did not finish within {args.timeout:g} s; a peer rank likely died "
                    "or is stuck (see its log)")
            explain, record_failure = _naming(comm, collective.name)
            with deadline(args.timeout, late, explain, record_failure):
                try:
                    if comm.whereabouts is not None:  # inside: a store that hangs is a timeout
                        comm.whereabouts.size_starts(collective.name,
                                                     numel * get_dtype(args.dtype).itemsize)
                    agree_to_go_on(comm)
                    if bar is not None:
                        bar.begin(position)
                    started = time.perf_counter()
                    meter = MemoryMeter(comm)
                    buffers = allocate(collective, numel, args, comm)
                    if buffers is None:
                        schedule.truncate(position)  # later passes stop where this one did
                        numels = numels[:position]
                        break
                    if bar is not None:
                        bar.clear()  # the row goes where the bar was; the bar is redrawn below
                    if last:
                        records.append(timed_collective(collective, *buffers, args, comm,
                                                        meter=meter, earlier=windows[numel],
                                                        counted=not adaptive))
                    else:
                        warmup = adaptive and number == 0
                        timing, everyone = _time_window(collective, *buffers, args, comm, number,
                                                        warmup)
                        if not warmup:
                            windows[numel].append(timing)
                        if adaptive:
                            schedule.measured(position, everyone, groups,
                                              time.perf_counter() - started)
                except RuntimeError as error:  # DistError is a RuntimeError: a peer failed
                    line = f"{where} failed: {whereabouts.reason_of(error)}"
                    if explain is not None and peer_failure(error):  # a timeout, ours or a peer's
                        raise comm.whereabouts.name_on_failure(line, record_failure) from None
                    raise BenchmarkError(line, rank_local=True) from None
                del buffers
            if bar is not None:
                bar.update()
    return numels


def _naming(comm, op):
    """deadline()'s explain and on_expire: the line names who did not come, and rank 0's
    results file keeps it as a failure record."""
    if comm.whereabouts is None:
        return None, None

    def record(line):
        if comm.results is not None:
            with RESULTS_LOCK:
                comm.results.add_failure({"op": op, "reason": "timeout", "message": line})
    return comm.whereabouts.explain, record


def _aggregate(collective, args, comm, count, qualifiers, shown):
    """--split: the table of every group together, one row a size: the slowest group's
    duration (they ran at once), the sum of their bandwidths, and their wrong elements; and its
    record ("aggregate": true)."""
    totals = comm.layout.totals
    comm.layout.totals = {}
    print_header(args, collective.name, shown, comm,
                 qualifiers + [f"split aggregate of {count} groups at once"])
    if comm.global_rank != 0:
        return
    columns = len(extra_columns(args))
    for size, records in totals.items():
        first = records[0]
        total = {key: None if any(r[key] is None for r in records) else sum(r[key] for r in records)
                 for key in ("throughput_Bps", "busbw_Bps")}
        record = {"op": collective.name, "world_size": len(comm.hostnames),
                  "size_bytes": size, "numel": first["numel"], "element_size": first["element_size"],
                  "dtype": first["dtype"], "groups": "split", "aggregate": True,
                  "group_count": count, "duration_s": max(r["duration_s"] for r in records),
                  "durations_per_group_s": [r["duration_s"] for r in records], **total,
                  "wrong": sum(r["wrong"] for r in records) if args.check else None}
        _add_record(comm, record)
        extra = ["-"] * (columns - (1 if args.check else 0)) + \
            ([str(record["wrong"])] if args.check else [])
        scale = 8 if args.bw_unit == "Gbps" else 1
        print_row(args, comm, size, f"{first['numel']}x{first['element_size']}"
                  if collective.payload else "-", record["duration_s"],
                  total["throughput_Bps"] and total["throughput_Bps"] * scale,
                  total["busbw_Bps"] and total["busbw_Bps"] * scale, extra)


def _time_window(collective, input, output, args, comm, index, warmup=False):
    """One window of a size in a pass before the last (--repeat, --precision): timed, and its
    figure written to the results file at once (a record with "window": index, one per group
    under --groups), so that a run that dies keeps it. (This rank's Timing, every rank's
    [mean, trials].)"""
    timing = time_op(collective.bind(comm, input, output, args.async_op), args, comm)
    everyone = comm.gather_figures([timing.mean, timing.count])
    kind, groups, _ = comm.group_layout
    target = getattr(args, "precision", None)
    for number, ranks in enumerate(groups):
        mean, count = everyone[ranks[0]]
        record = {**_size_record(collective, input, comm, mean), "window": index,
                  "trials": int(count)}
        if target is None:
            record["repeat"] = args.repeat
        else:
            record.update(precision=target, warmup=warmup)
        if kind != "world":
            record.update(groups=kind, group=number, group_ranks=ranks)
        _add_record(comm, record)
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


def _add_record(comm, record):
    if comm.results is None:
        return
    with RESULTS_LOCK:
        try:
            comm.results.add(record)
        except BenchmarkError as error:  # a full disk: the file ends in its last whole record
            comm.results.close()
            comm.results = None
            comm.stop_on(error)


def run_op(collective, local_rank, args, comm=None):
    """What `run_<op>(local_rank, args)` does: run one op in the given Comm, or in one of its
    own (then the run ends here: results closed, --check failures raised)."""
    if comm is not None:
        return run_collective(collective, args, comm)
    comm = init_processes(local_rank, args, ops=[collective.name])
    records = run_collective(collective, args, comm)
    finish(comm)
    return records


def cli(run, argv=None):
    """Parse the command line, call `run(local_rank, args)`, and turn expected failures into one
    line on stderr (from rank 0 when every rank fails alike) and an exit status."""
    def body():
        try:
            args = benchmark_parser().parse_args(argv)
        except OSError as error:  # --help into a closed pipe or onto a full disk
            raise output_failure(error, sys.stdout, "the help") from None
        run(args.local_rank, args)
    sys.exit(guarded(body))


def exit_without_finalising(status):
    """Flush and end the process at once, for a run after a training loop or a replay: gloo's
    worker thread destroys the last collective's Work (and drops its tensors, which needs the
    GIL) just after wait() returned; when the interpreter is already finalising by then, that
    thread is killed inside C++ and the rank aborts ("terminate called without an active
    exception", exit -6: one run in four here after a training loop). Everything is written;
    the process has nothing left to finalise."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status)


def guarded(body):
    """Call body() (parse the flags and run) and return the exit status: expected failures are
    one line on stderr (from rank 0 when every rank fails alike), a lost peer too, a closed
    reader none; the process group is torn down whatever happens."""
    status = 0
    guard_stop_signals()
    try:
        body()
    except RuntimeError as error:
        if not peer_failure(error):
            raise  # unexpected: keep the traceback
        leave_it_to_the_stop(wait=0.2)  # the peer was stopped, and so is this rank
        status = 1
        first = str(error).strip().splitlines()[0][:300] if str(error).strip() else ""
        say(f"{PROG}: error: rank {rank_for_messages(True)}: lost its peers between "
            f"measurements: {first}")
    except OutputClosed:
        status = 0  # the reader has what it wanted: no message, as a Unix tool in a pipeline
    except BenchmarkError as error:
        status = error.exit_code
        leave_it_to_the_stop()  # a stop signal reached this rank as it failed: that is its end
        if error.reported:
            pass
        elif error.rank_local or rank_for_messages() == 0:
            say(f"{PROG}: error: {error}")
        else:
            # Every rank failed alike and rank 0 says why; launchers kill the whole job when the
            # first rank exits, so the others give rank 0 a moment to be heard.
            time.sleep(1)
    finally:
        teardown()
    return status
