"""replay.py's run: read the trace (every rank reads every file), check that the ranks'
sequences fit together, start the process group on as many ranks as the trace has, make the
trace's groups, then warmup passes, --repeat timed passes and with --check one more pass whose
outputs are compared. Rank 0 prints the tables and writes --output. (Its command line: flags.py.)

Every bad trace is found before the process group starts, alike on every rank: one line, exit
2, no rank left waiting for another."""

import math
import os
import statistics
import sys

from ..ranks import clocks, gathered, whereabouts
from .. import units
from ..records import provenance
from ..bench import trials as encoding
from ..ranks.comm import init_comm
from ..errors import BenchmarkError
from ..ranks.guard import agree_to_go_on, stall_deadline
from ..ranks.launch import discover_launch_env
from ..bench.memory import per_rank_memory
from ..records.results import FORMATS, open_lines, written_elsewhere
from ..settings import frozen
from ..table import emit, note, output_failure, print_rank_0
from . import agree, summary
from .engine import Replayer, bytes_in_flight
from .formats import FORMAT_NAMES, read
from . import compute, etcompute
from .flags import ReplaySettings, bare_pace, parser, rank_settings, settled
from .model import KINDS, TraceError


# ------------------------------------------------------------------------------- the trace

def load(args):
    trace = read(args.trace)
    agree.check(trace)
    return trace


def describe(trace):
    """The trace in lines: its format, ranks, calls, groups, totals per kind."""
    counts = {rank: sum(1 for c in calls if c.op != "wait") for rank, calls in trace.ranks.items()}
    lines = [f"trace {os.path.abspath(trace.directory)}: {FORMAT_NAMES[trace.format]}, "
             f"{trace.world_size} ranks, {sum(counts.values())} calls "
             f"({min(counts.values())}-{max(counts.values())} per rank)"
             + (f", {trace.steps} step{'s' if trace.steps != 1 else ''}" if trace.steps else "")
             + (f", recorded by: {trace.source}" if trace.source else "")]
    groups = trace.all_groups()
    lines.append(f"groups besides the world: {len(groups)}" +
                 (": " + " ".join(str(list(g)) for g in groups[:8]) +
                  (" ..." if len(groups) > 8 else "") if groups else ""))
    lines += [f"note: {text}" for text in trace.notes]
    return lines


def totals_lines(trace):
    lines = [f"{'op':<16}{'calls/rank':>11}{'bytes/rank':>13}{'async':>7}{'job time':>12}"]
    for kind in KINDS:
        per_rank = [[c for c in calls if c.kind == kind] for calls in trace.ranks.values()]
        if not any(per_rank):
            continue
        durations = [sum(c.duration_s for c in chosen) for chosen in per_rank
                     if all(c.duration_s is not None for c in chosen)]
        job = units.duration(max(durations)) if len(durations) == len(per_rank) else "-"
        lines.append(f"{kind:<16}{max(len(c) for c in per_rank):>11}"
                     f"{units.size(max(sum(c.nbytes for c in chosen) for chosen in per_rank)):>13}"
                     f"{max(sum(1 for c in chosen if c.asynchronous) for chosen in per_rank):>7}"
                     f"{job:>12}")
    return lines


def dry_run(args):
    trace = load(args)
    need = max(bytes_in_flight(calls) for calls in trace.ranks.values())
    lines = describe(trace) + totals_lines(trace) + [
        f"the most a rank holds at once: {units.size(need)}; the ranks' sequences agree; "
        "nothing was sent (--dry-run)"]
    for line in lines:
        try:
            emit(sys.stdout, line)
        except OSError as error:  # `| head`: quiet; a full disk: one line
            raise output_failure(error, sys.stdout, "the dry run") from None


# --------------------------------------------------------------------------------- the run

def check_world(trace, args):
    launch = discover_launch_env(local_rank_arg=args.local_rank)
    if launch.world_size != trace.world_size:
        raise TraceError(f"{args.trace} holds a {trace.world_size}-rank trace; this run has "
                         f"{launch.world_size} rank{'s' if launch.world_size != 1 else ''}: "
                         f"launch it on {trace.world_size}")


def check_memory(comm, trace):
    memory, source = per_rank_memory(comm)
    needs = {rank: bytes_in_flight(calls) for rank, calls in trace.ranks.items()}
    rank = max(needs, key=needs.get)
    if needs[rank] > 0.9 * memory:
        raise TraceError(f"the trace's calls need up to {units.size(needs[rank])} at once on "
                         f"rank {rank}, more than the {units.size(memory)} a rank has here "
                         f"({source})")


def meta(args, comm, trace):
    return {"type": "meta", "kind": "replay", "trace": os.path.abspath(args.trace),
            "trace_format": trace.format, "trace_source": trace.source,
            "trace_steps": trace.steps, **provenance.placed(comm), "warmup": args.warmup,
            "repeat": args.repeat, "pace": args.pace is not None, "mode": mode(args, trace),
            "check": args.check, **provenance.stamped()}


def open_output(args, comm, trace):
    writer, failure = None, None
    if comm.global_rank == 0 and args.output:
        try:
            writer = open_lines(args.output, args.overwrite, meta(args, comm, trace), FORMATS)
        except (OSError, BenchmarkError) as error:
            failure = f"cannot write --output {args.output}: " \
                      f"{getattr(error, 'strerror', None) or error}"
        else:
            if writer.path != args.output:
                note(comm, f"{args.output} exists; writing {writer.path} (--overwrite replaces "
                           "it)")
    if comm.any_rank(failure is not None):
        raise BenchmarkError(failure or "rank 0 cannot write --output")
    from ..records.outputs import beside  # --db, --prometheus: the summary and the calls there too
    return beside(writer, args, comm, lambda: meta(args, comm, trace))


def gather(comm, trace, times, starts, wrong, passes):
    """Every rank's per-pass call times and starts, wrong counts and pass times, on every
    rank: {rank: {"times": [per call: [per pass] or None], "starts": (alike), "wrong",
    "passes"}}."""
    longest = max(len(calls) for calls in trace.ranks.values())
    nan = float("nan")

    def padded(table):  # [per call: [per pass]], NaN where a rank has fewer calls than longest
        return [[table[k][index] if index < len(table[k]) and table[k][index] is not None
                 else nan for k in range(len(passes))] for index in range(longest)]
    rows = gathered.gather(comm, {"times": padded(times), "starts": padded(starts),
                                  "wrong": [float(w) for w in wrong] +
                                  [0.0] * (longest - len(wrong)),
                                  "passes": list(passes)})
    result = {}
    for rank, row in enumerate(rows):
        count = len(trace.ranks[rank])

        def per_call(values):
            return [None if any(x != x for x in v) else v for v in values[:count]]
        result[rank] = {"times": per_call(row["times"]), "starts": per_call(row["starts"]),
                        "wrong": [int(x) for x in row["wrong"][:count]],
                        "passes": row["passes"]}
    return result


def gather_passes(comm, passes, came, aligned):
    """--per-trial: each timed pass a trial, in commbench/bench/trials.py's encoding: its time on
    each rank (the opening barrier's exit to the pass's end), when the rank came to the pass (the
    opening barrier's entry: its call) and its time from there to the pass's end, on rank 0's
    clock (`aligned`: clocks.alignment of the readings before and after the passes)."""
    start = came[0][0]
    mine = {"start_s": start, "trials_s": list(passes),
            "arrivals_s": [entered - start for entered, _ in came],
            "in_call_s": [began - entered + seconds
                          for (entered, began), seconds in zip(came, passes)],
            "stopped_s": [math.nan] * len(passes)}  # the time not run: not measured in a replay
    rows = gathered.gather(comm, mine)
    if comm.global_rank != 0:  # rank 0 alone holds the clocks' alignment, and writes
        return None
    return encoding.encode(rows, list(range(len(rows))), comm.hostnames, aligned)


def run(args):
    import warnings
    # torch deprecates the *_tensor collectives the replay issues (they are what jobs call)
    warnings.filterwarnings("ignore", message=r"`torch\.distributed\.\w+` is deprecated",
                            category=FutureWarning)
    trace = load(args)
    check_world(trace, args)
    comm = init_comm(args.local_rank, rank_settings(args))
    rank = comm.global_rank
    check_memory(comm, trace)
    for line in describe(trace):
        note(comm, line)
    replayer = _replayer(comm, trace, args)
    writer = open_output(args, comm, trace)
    post = _positions(comm, replayer)
    record = _failure_record(writer)
    late = (f"rank {rank}: replay: a call did not finish within {args.timeout:g} s; a peer rank "
            "likely died or is stuck (see its log)")
    explain = comm.run.whereabouts.explain if comm.run.whereabouts is not None else None
    try:
        # the backend's own timeout (gloo's) names who did not come in the main thread; the
        # stall deadline does it where the backend never times out (oneCCL)
        with whereabouts.named_on_timeout(comm, f"rank {rank}: replay", record), \
                stall_deadline(args.timeout, lambda: replayer.steps, late, explain, record):
            for number in range(args.warmup):
                post(f"warmup pass {number + 1} of {args.warmup}")
                replayer.run_pass()
            before = clocks.measure(comm) if args.per_trial else None
            times, starts, passes, came = [], [], [], []
            for number in range(args.repeat):
                post(f"pass {number + 1} of {args.repeat}")
                call_times, call_starts, _, seconds = replayer.run_pass(
                    pace=args.pace is not None, isolated=args.isolated)
                times.append(call_times)
                starts.append(call_starts)
                passes.append(seconds)
                came.append((replayer.entered, replayer.began))
            if replayer.compute_ops is not None:
                note(comm, replayer.compute_ops.said(args.repeat))
            wrong = [0] * len(replayer.calls)
            if args.check:
                post("--check pass")
                _, _, wrong, _ = replayer.run_pass(check=True)
            post("after the passes", reading=False)
            everyone = gather(comm, trace, times, starts, wrong, passes)
            per_trial = gather_passes(comm, passes, came, clocks.alignment(
                before, clocks.measure(comm))) if args.per_trial else None
        if rank == 0:
            report(args, comm, trace, everyone, writer, per_trial)
        bad = sum(sum(r["wrong"]) for r in everyone.values())
        if args.check and bad:
            raise BenchmarkError(_wrong_line(trace, everyone, bad))
        agree_to_go_on(comm)
    finally:
        if writer is not None:
            writer.close()
    own = getattr(writer, "own", writer)  # the run ended well: where its results are
    moved = own and written_elsewhere(own.asked, own.path)
    if moved:
        note(comm, moved)


def _replayer(comm, trace, args):
    """The rank's Replayer, its groups made (--isolated: its pairs' too), --pace compute's
    kernel calibrated."""
    replayer = Replayer(comm, trace, comm.global_rank)
    replayer.make_groups(pairs=args.isolated)
    if args.pace == "compute" and trace.format == "execution-trace":
        replayer.compute_ops = etcompute.Runner(comm.device)  # the job's own ops, no gaps
        ops = etcompute.count(replayer.calls)
        note(comm, f"--pace compute: the execution trace keeps no times but the job's compute "
                   f"ops: rank {comm.global_rank}'s {ops} ops run before its calls at their "
                   f"shapes (--compute-kernel is not used)")
    elif args.pace == "compute":
        _calibrate(comm, trace, replayer, args.compute_kernel)
    return replayer


def _calibrate(comm, trace, replayer, kernel):
    """--pace compute: the kernel calibrated on every rank at once (as the gaps will run it:
    beside the other ranks' compute), its rates said in the start-up lines; the rank's gaps."""
    run = compute.kernel(kernel, comm.device)
    run(1)  # its first call allocates and warms the library up
    comm.sync_all()
    calibration = compute.calibrate(kernel, run)
    rates = comm.gather_figures([calibration.units_per_s])
    note(comm, compute.describe([compute.Calibration(kernel, row[0], 0.0) for row in rates]))
    base = trace.origin()
    offsets = [None if call.start_s is None else trace.shared_start(comm.global_rank, call) - base
               for call in replayer.calls]
    replayer.gaps = compute.gaps(offsets, replayer.calls)
    replayer.fill_gap = lambda seconds: compute.fill(seconds, run, calibration)


def _positions(comm, replayer):
    """post(phase): this rank's position in the store, once a pass (outside its timed calls);
    at a timeout the call it is in (its index in this rank's trace, and its op) is read from
    the replayer."""
    comm.run.whereabouts = found = whereabouts.start(comm)
    if found is None:
        return lambda phase, reading=True: None

    def current():
        call = replayer.current_call
        if call is not None:
            return {"call": call.index, "call_op": call.op}
        return {"at": "the barrier before its first call"} if replayer.opening else {}
    marks = whereabouts.Reading(current)
    found.size_starts("replay", None, "start")

    def post(phase, reading=True):
        replayer.current_call = None
        found.at(phase, marks if reading else None)
    return post


def _failure_record(writer):
    def record(line):
        if writer is not None:
            writer.write({"type": "failure", "op": "replay", "reason": "timeout",
                          "message": line})
    return record


def _wrong_line(trace, everyone, bad):
    for rank, figures in everyone.items():
        for index, count in enumerate(figures["wrong"]):
            if count:
                call = trace.ranks[rank][index]
                return (f"--check: {bad} wrong element(s); the first: rank {rank}'s call {index} "
                        f"({call.op} of {max(call.in_numel, call.out_numel)} {call.dtype}), "
                        f"{count} wrong")
    return f"--check: {bad} wrong element(s)"


def report(args, comm, trace, everyone, writer, per_trial=None):
    medians = {rank: [statistics.median(t) if t else None for t in figures["times"]]
               for rank, figures in everyone.items()}
    pass_times = [max(everyone[r]["passes"][k] for r in everyone) for k in range(args.repeat)]
    figures = summary.pass_figures(pass_times, trace.steps)
    table = summary.kinds_table(trace, everyone)
    title = (f"---- replay of {args.trace} on {comm.world_size} ranks ({comm.backend}, "
             f"{args.dist}), {args.repeat} pass{'es' if args.repeat != 1 else ''} after "
             f"{args.warmup} warmup, {mode(args, trace)} ").ljust(100, "-")
    lines = summary.kinds_lines(table, title)
    lines.append(summary.pass_line(figures, args.repeat, trace.steps))
    predicted = summary.prediction(trace, everyone)
    if predicted:
        lines += [""] + summary.prediction_lines(predicted, trace.source or "as recorded")
    if trace.format == "deepspeed-comms":
        from .dscomms import lines as deepspeed_lines
        lines += [""] + deepspeed_lines(trace, medians[0], comm.world_size)
    if args.top:
        lines += [""] + summary.heaviest_lines(trace, medians, args.top)
    wrong = sum(sum(r["wrong"]) for r in everyone.values())
    if args.check:
        lines.append(f"--check: {wrong} wrong element(s) in "
                     f"{sum(c.op != 'wait' for calls in trace.ranks.values() for c in calls)} "
                     "calls")
    for line in lines:
        print_rank_0(comm, line)
    if writer is None:
        return
    calls = []
    for rank in sorted(trace.ranks):
        for call in trace.ranks[rank]:
            record = {"type": "call", "rank": rank, **call.record()}
            record.pop("start_s", None)
            record["recorded_s"] = record.pop("duration_s", None)
            if call.op != "wait":
                record["time_s"] = medians[rank][call.index]
                record["times_s"] = everyone[rank]["times"][call.index]
                if args.check:
                    record["wrong"] = everyone[rank]["wrong"][call.index]
            calls.append(record)
    writer.write_many(calls)
    writer.write({
        "type": "replay_summary", "world_size": comm.world_size, "repeat": args.repeat,
        "steps": trace.steps, "pass_s": figures, "pass_times_s": pass_times, "kinds": table,
        "total_s": summary.total_time(trace, everyone), "prediction": predicted,
        "wrong": wrong if args.check else None,
        **({"per_trial": per_trial} if per_trial is not None else {})})


def mode(args, trace=None):
    """The mode the table's title and the results file name."""
    if args.isolated:
        return "isolated"
    if args.pace == "compute" and trace is not None and trace.format == "execution-trace":
        return "the job's compute ops before each call"
    if args.pace == "compute":
        return f"paced, gaps filled with {args.compute_kernel} compute"
    return "paced" if args.pace else "back to back"


def main(argv=None):
    from ..entry import exit_without_finalising, guarded

    def body():
        args = frozen(ReplaySettings, settled(parser().parse_args(bare_pace(argv))))
        if args.dry_run:
            dry_run(args)
        else:
            run(args)
    exit_without_finalising(guarded(body))  # after the passes, as after a training loop
