"""Running an op: for each message size, its buffers and passes (onesize.py times, checks and
records a size), the tables of a run's dtypes and layouts; the run's start (process group and
results file) and end. The entry point every script hands its run function to is entry.py's
`cli`, above the ops (it parses their flags): nothing here imports it."""

import os
import time

import torch

from ..ranks.comm import init_comm
from ..dtypes import dtypes_for, get_dtype
from ..errors import BenchmarkError, UsageError
from ..ranks.guard import RESULTS_LOCK, agree_to_go_on, deadline, peer_failure
from ..ranks.layer import processor_model
from .memory import MemoryMeter
from .onesize import add_record, time_window, timed_collective  # noqa: F401 (the ops' name)
from ..progress import open_progress
from .sizes import allocate, cap_sweep, plan_single_size, refuse_past_ceiling, sweep_numels
from ..table import extra_columns, note, print_header, print_row
from ..settings import Settings
from ..ranks import groups as grouping, whereabouts
from . import precision
from ..records import provenance


def init_processes(local_rank, args, ops=None):
    """The Comm of this run (comm.init_comm), with rank 0's results file open when its --output
    asks for one (only rank 0's counts: a multi-node launch may name it on one line alone).
    `ops` names the ops this run will measure, for the results file."""
    given, args = args, Settings.of(args)
    comm = init_comm(local_rank, args.ranks(given))
    comm.run.results = open_results(args, comm, lambda: run_meta(args, comm, ops or []))
    comm.run.whereabouts = whereabouts.start(comm)
    comm.run.budget = precision.Budget(args.time_budget, ops or []) \
        if args.precision is not None else None
    return comm


def open_results(args, comm, make_meta):
    """Rank 0 opens its outputs (--output's results file, --db's run, --prometheus; see
    commbench.records.outputs), the meta record make_meta() first, before anything is measured;
    every rank learns whether that worked, so that none goes on to measure alone. Rank 0's
    writer, or None. `args`: the front end's settings (outputs.py reads their output flags)."""
    writer, failure = None, None
    if comm.global_rank == 0:
        from ..records import outputs  # only runs that write one pay for it
        try:
            writer = outputs.open_outputs(args, make_meta, lambda text: note(comm, text))
        except BenchmarkError as error:
            failure = str(error)
    if comm.any_rank(failure is not None):
        raise BenchmarkError(failure or "rank 0 cannot write the results file")
    return writer


def run_meta(args, comm, ops):
    """The meta record of a results file: what was run, where, with what."""
    args = Settings.of(args)
    return {
        "ops": list(ops), **provenance.placed(comm),
        "master_addr": os.environ.get("MASTER_ADDR"), "master_port": os.environ.get("MASTER_PORT"),
        "dtype": args.dtype, "dtypes": dtypes_for(args, comm.backend), "reduce_op": args.op,
        # --groups: the layouts run, each as its groups' global ranks
        "groups": {kind: layout.groups for kind, layout in comm.layouts.items()
                   if kind in (args.groups or [])} or None,
        "trials": args.trials, "warmups": args.warmups,
        "async_op": args.async_op, "scan": args.scan, "maxsize": args.maxsize,
        "minsize": args.minsize, "min_bytes": args.min_bytes,
        "max_bytes": args.max_bytes,
        "step_factor": args.step_factor,
        "mem_factor": args.mem_factor, "bw_unit": args.bw_unit, "check": args.check,
        "check_every": args.check_every,
        "time_budget": args.time_budget,
        "stats": args.stats, "per_trial": args.per_trial,
        "repeat": args.repeat, "pin": args.pin,
        "precision": args.precision,
        "max_windows": args.max_windows,
        "overlap": args.overlap,
        # docs/traffic.md: --split N:rule, all_to_allv's splits, pt2pt's pairs
        "split": list(args.split) if args.split else None,
        "a2a_matrix": args.a2a_matrix,
        "a2a_skew": ":".join(map(str, args.a2a_skew)) if args.a2a_skew else None,
        "seed": args.seed, "pairs": args.pairs,
        "bidirectional": args.bidirectional,
        "overlap_factor": args.overlap_factor,
        "compute_cpus": sorted(args.compute_cpus or []) or None,
        # backend ccl: oneCCL's settings (env: the value of each, set_by_suite: those the suite
        # defaulted, oneccl_defaults: those left to oneCCL) and versions; None on other backends
        "ccl": comm.ccl,
        # seconds per rank from the start-up to the process group up and the first collective
        "startup": comm.startup,
        # --peak (docs/peak.md): what it said and the run's bound (kind, name, gbps, source)
        "peak": comm.run.peak.record() if comm.run.peak is not None else None,
        "torch_threads": torch.get_num_threads(), "processor": processor_model(comm.device),
        **provenance.stamped(),
    }


def finish(comm):
    """End of a run: the last agreement on stopping, rows above their bound named, the results
    file closed; wrong elements found by --check fail the run."""
    agree_to_go_on(comm)
    run = comm.run
    if run.peak is not None and comm.global_rank == 0:
        beaten = run.peak.beaten()  # rows above their bound: the bound is wrong (peak.py)
        if beaten:
            note(comm, beaten)
    if run.results is not None:
        run.results.close()
        run.results = None
    if run.failures:
        more = f" (and {len(run.failures) - 1} more)" if len(run.failures) > 1 else ""
        raise BenchmarkError(f"--check found wrong elements: {run.failures[0]}{more}")


def refuse_oversized_sweeps(collectives, args, comm):
    """run_all.py, before its first op: a sweep past its ceiling (sizes.refuse_past_ceiling) is
    refused before anything is measured, not once the ops before it ran. Under --groups or
    --split each op's sizes follow its groups, and each op checks its own (cap_sweep)."""
    args = Settings.of(args)
    if not args.scan or args.groups or args.split:
        return
    for one in runs_per_dtype(args, comm):
        for collective in collectives:
            if comm.world_size >= collective.min_world_size:
                refuse_past_ceiling(collective, sweep_numels(collective, one, comm.world_size),
                                    one, comm)


def runs_per_dtype(args, comm):
    """One variant of the settings per dtype of --dtype (a list, or `all` of what the backend
    moves), each naming its dtype alone; sizes below one element of any of them are refused
    first."""
    args = Settings.of(args)
    names = dtypes_for(args, comm.backend)
    if args.min_bytes is not None:
        for name in names:
            size = get_dtype(name).itemsize
            if args.min_bytes < size:
                raise UsageError(f"--min-bytes {args.min_bytes} is below one element of {name} "
                                 f"({size} bytes)")
    return [args.but(dtype=name) for name in names]


def run_collective(collective, args, comm):
    """For each layout of --groups (the world without it) and each dtype of the run, the
    header, then one row per message size: a scan, or the largest size that fits. An op
    without payload (barrier) runs once, whatever the dtypes."""
    args = Settings.of(args)
    if comm.world_size < collective.min_world_size:
        raise BenchmarkError(f"{collective.name} needs at least {collective.min_world_size} ranks, "
                             f"this world has {comm.world_size}; launch it with e.g. "
                             f"torchrun --nproc_per_node {collective.min_world_size}")
    if collective.specialize is not None:
        collective = collective.specialize(args)
    if collective.qualifier is not None:  # refuses, before measuring, what a group cannot run
        for kind in args.layouts:
            for ranks in (comm.layouts[kind].groups if comm.layouts else [range(comm.world_size)]):
                collective.qualifier(len(ranks))
    runs = runs_per_dtype(args, comm)
    if collective.rate is not None:
        runs = [one.but(op_columns=(("Msgs/s", 12),)) for one in runs]
    several = len(runs) > 1 and collective.payload
    if comm.run.budget is not None:
        layouts = len(args.layouts)
        comm.run.budget.start_op(collective.name,
                                 layouts * (len(runs) if collective.payload else 1))
    records = []
    for kind in args.layouts:
        here = comm.in_layout(kind) if comm.layouts else comm
        for one in runs if collective.payload else runs[:1]:
            records += _run_sizes(collective, one, here, one.dtype if several else None)
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
    if collective.reduces and args.op != "sum":
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
    # passes until each size's interval is tight enough (commbench.bench.precision).
    adaptive = args.adaptive
    schedule = precision.Schedule(args, comm, len(numels), groups) if adaptive else \
        precision.FixedPasses(args.repeat, len(numels))
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
    adaptive = args.adaptive
    groups = comm.group_layout[1]
    for number, positions, last in schedule.passes():
        for position in positions:
            numel = numels[position]
            where = (f"rank {comm.global_rank}: {collective.name} at {numel} elements of "
                     f"{args.dtype} per rank")
            late = (f"{where} did not finish within {args.timeout:g} s; a peer rank likely died "
                    "or is stuck (see its log)")
            explain, record_failure = _naming(comm, collective.name)
            with deadline(args.timeout, late, explain, record_failure):
                try:
                    if comm.run.whereabouts is not None:  # inside: a store that hangs is a timeout
                        comm.run.whereabouts.size_starts(collective.name,
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
                        timing, everyone = time_window(collective, *buffers, args, comm, number,
                                                        warmup)
                        if not warmup:
                            windows[numel].append(timing)
                        if adaptive:
                            schedule.measured(position, everyone, groups,
                                              time.perf_counter() - started)
                except RuntimeError as error:  # DistError is a RuntimeError: a peer failed
                    line = f"{where} failed: {whereabouts.reason_of(error)}"
                    if explain is not None and peer_failure(error):  # a timeout, ours or a peer's
                        raise comm.run.whereabouts.name_on_failure(line, record_failure) from None
                    raise BenchmarkError(line, rank_local=True) from None
                del buffers
            if bar is not None:
                bar.update()
    return numels


def _naming(comm, op):
    """deadline()'s explain and on_expire: the line names who did not come, and rank 0's
    results file keeps it as a failure record."""
    run = comm.run
    if run.whereabouts is None:
        return None, None

    def record(line):
        if run.results is not None:
            with RESULTS_LOCK:
                run.results.add_failure({"op": op, "reason": "timeout", "message": line})
    return run.whereabouts.explain, record


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
                  "size_bytes": size, "numel": first["numel"],
                  "element_size": first["element_size"],
                  "dtype": first["dtype"], "groups": "split", "aggregate": True,
                  "group_count": count, "duration_s": max(r["duration_s"] for r in records),
                  "durations_per_group_s": [r["duration_s"] for r in records], **total,
                  "wrong": sum(r["wrong"] for r in records) if args.check else None}
        add_record(comm, record)
        extra = ["-"] * (columns - (1 if args.check else 0)) + \
            ([str(record["wrong"])] if args.check else [])
        scale = 8 if args.bw_unit == "Gbps" else 1
        print_row(args, comm, size, f"{first['numel']}x{first['element_size']}"
                  if collective.payload else "-", record["duration_s"],
                  total["throughput_Bps"] and total["throughput_Bps"] * scale,
                  total["busbw_Bps"] and total["busbw_Bps"] * scale, extra)


def run_op(collective, local_rank, args, comm=None):
    """What `run_<op>(local_rank, args)` does: run one op in the given Comm, or in one of its
    own (then the run ends here: results closed, --check failures raised)."""
    if comm is not None:
        return run_collective(collective, Settings.of(args), comm)
    comm = init_processes(local_rank, args, ops=[collective.name])
    records = run_collective(collective, Settings.of(args), comm)
    finish(comm)
    return records


