"""parallel_bench.py's run: the measured loop around each strategy (its flags: flags.py; its
memory: memory.py; its record from every rank's figures: record.py; the table and the JSON
lines: output.py; the trace of the measured steps with --trace: commbench.trace).

For each strategy: build it, `--warmup` steps, then `--steps` measured steps, each after a
barrier, with the accounting installed (accounting.Recorder) and the memory high-water mark
reset at the window's start. Then every rank's figures are gathered (after the accounting is
removed, so the gathering is not counted) and rank 0 prints a row and writes a record.
"""

import argparse
import contextlib
import gc
import math
import os
import socket
import time
from dataclasses import dataclass

import torch
import torch.distributed

from ..ranks import gathered, whereabouts
from ..records import results
from .. import units
from ..ranks.comm import init_comm
from ..errors import BenchmarkError, UsageError
from ..ranks.guard import agree_to_go_on, stall_deadline
from ..entry import exit_without_finalising, guarded
from ..settings import frozen
from ..table import note
from ..trace.capture import Tracer
from . import dsconfig, sweep
from ..trace.accounting import Recorder
from .flags import BenchSettings, check_backend, check_shape, parser, rank_settings
from .memory import PeakMemory, release_memory, settle_malloc
from .model import ModelConfig
from .output import open_output, report, report_sweep
from .record import strategy_record
from .train import ORDER, STRATEGIES, import_deepspeed

@dataclass
class Run:
    args: argparse.Namespace
    comm: object
    model_config: ModelConfig
    dtype: torch.dtype
    writer: object = None
    malloc: dict = None
    header_printed: bool = False
    user: object = None  # dsconfig.UserConfig with --ds-config
    ds_variant: dict = None  # the config deepspeed.initialize gets for the strategy measured now
    ds_label: str = None  # the sweep's value of it
    moved: int = 0  # steps begun and ended so far (the stall deadline's progress)



def _timed_steps(run, strategy, count, recorder=None, losses=None, memory=None, held=None,
                 phase="step"):
    """`count` steps, each after a barrier; this rank's wall time of each (and with `memory`,
    what the rank holds after each, in `held`). Each step's position is posted before its
    barrier (a timeout names the step, and with `recorder` the call, a rank did not reach)."""
    comm, times = run.comm, []
    found = whereabouts.of(comm)
    marks = whereabouts.Reading(lambda: {"call": recorder.calls_in_step() + 1}) \
        if recorder is not None else None
    for number in range(count):
        run.moved += 1
        if found is not None:
            found.at(f"{phase} {number + 1} of {count}", marks)
        with recorder.paused() if recorder else contextlib.nullcontext():
            comm.sync_all()
        if recorder:
            recorder.begin_step()
        start = time.perf_counter()
        loss = strategy.step()
        comm.synchronize()
        times.append(time.perf_counter() - start)
        if recorder:
            recorder.end_step()
        run.moved += 1
        if losses is not None:
            losses.append(math.nan if loss is None else loss)
        if memory is not None:
            held.append(memory.now())
    return times


def _stall_deadline(run, name, recorder):
    """The steps of a strategy end like gloo's timeout where the backend never times out
    (oneCCL): a step whose calls have not moved for --timeout names who did not come. Not its
    set-up, where DeepSpeed may build an op for minutes."""
    comm = run.comm
    late = (f"rank {comm.global_rank}: {name}: a step did not finish within "
            f"{run.args.timeout:g} s; a peer rank likely died or is stuck (see its log)")
    explain = comm.run.whereabouts.explain if comm.run.whereabouts is not None else None
    return stall_deadline(run.args.timeout, lambda: (run.moved, recorder.calls_in_step()), late,
                          explain, _failure_record(run, name))


def measure(run, name):
    """One strategy: build, warm up, measure; the record (on every rank)."""
    args, comm = run.args, run.comm
    strategy = STRATEGIES[name](run)
    tracer = None
    if args.trace:
        tracer = Tracer(os.path.join(args.trace, name),
                        source=f"parallel_bench.py --strategy {name} (steps {args.steps})")
    memory, recorder = PeakMemory(comm), Recorder(tracer)
    gc.collect()
    before = memory.now()
    strategy.setup()
    losses = []
    with _stall_deadline(run, name, recorder):
        _timed_steps(run, strategy, args.warmup, losses=losses, phase="warmup step")
        gc.collect()
        memory.reset()
        held = []
        with recorder.installed():
            times = _timed_steps(run, strategy, args.steps, recorder, losses, memory, held)
        peak = memory.peak()
        if tracer is not None:
            write_trace(comm, tracer, args.steps)
        no_sync_times = None
        if name == "ddp":  # the same steps without communication, exposed = the difference
            strategy.communicate = False
            _timed_steps(run, strategy, 1, phase="step without communication")
            no_sync_times = _timed_steps(run, strategy, args.steps,
                                         phase="step without communication")
    built = {"settings": strategy.settings(), "loss_rank": strategy.loss_rank,
             "samples": strategy.samples_per_step, "dp": strategy.dp, "tp": strategy.tp,
             "pp": strategy.pp}
    params_mine = strategy.params_per_rank
    strategy.close()
    del strategy
    release_memory()

    # Every rank's figures on every rank: step times, per step per op [calls, bytes, time]
    # and blocked time, peak memory, parameters, losses.
    ranks = gathered.gather(comm, {
        "step_s": list(times), "calls": [step.figures() for step in recorder.steps],
        "peak": float(peak), "params": float(params_mine), "before": float(before),
        "losses": losses, "no_sync_s": list(no_sync_times or [0.0] * args.steps),
        "held": [float(x) for x in held]})
    return strategy_record(run, name, ranks, built, memory)


def write_trace(comm, tracer, steps):
    """Each rank its file; a rank that cannot write stops every rank (one line)."""
    failure = None
    try:
        tracer.write(steps)
    except OSError as error:
        failure = f"cannot write --trace {tracer.directory}: {error.strerror or error}"
    if comm.any_rank(failure is not None):
        raise BenchmarkError(failure or "a rank cannot write its --trace file",
                             rank_local=failure is not None)


# ------------------------------------------------------------------------------------- main

def user_config(args):
    """--ds-config read and checked before any process group starts (a bad file is one line on
    every rank, exit 2); the strategy, batch, accumulation and dtype taken from it. None
    without --ds-config."""
    if args.ds_config_sweep and not args.ds_config:
        raise UsageError("--ds-config-sweep needs --ds-config FILE (the config it varies)")
    if not args.ds_config:
        if args.strategy is None:
            args.strategy = list(ORDER)
        return None
    if args.ds_config_sweep and args.trace:
        raise UsageError("--ds-config-sweep with --trace: trace one value at a time (--ds-config "
                         "alone)")
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    user = dsconfig.load(args.ds_config, args.ds_config_sweep, device.split(":")[0])
    names = []
    for _, variant in user.variants():
        name = dsconfig.STAGE_STRATEGY[int(variant["zero_optimization"]["stage"])]
        if name not in names:
            names.append(name)
    if args.strategy is not None and args.strategy != names:
        raise UsageError(f"--strategy {','.join(args.strategy)} with --ds-config {args.ds_config}:"
                         f" the file's zero_optimization.stage is {', '.join(names)}; leave "
                         "--strategy out")
    args.strategy = names
    config = user.config
    if "train_micro_batch_size_per_gpu" in config:
        args.micro_batch = int(config["train_micro_batch_size_per_gpu"])
    if "gradient_accumulation_steps" in config:
        args.micro_batches = int(config["gradient_accumulation_steps"])
    bf16 = config.get("bf16")
    if isinstance(bf16, dict) and "enabled" in bf16:
        args.dtype = "bfloat16" if bf16["enabled"] else "float32"
    return user


def for_engine(config, args, world_size, where):
    """What deepspeed.initialize gets: the file's config as written, with the batch, the
    accumulation and bf16 of the run where the file is silent, and DeepSpeed's periodic
    printing off unless the file asks for it (the table owns stdout)."""
    engine = dict(config)
    engine.setdefault("train_micro_batch_size_per_gpu", args.micro_batch)
    engine.setdefault("gradient_accumulation_steps", args.micro_batches)
    whole = args.micro_batch * args.micro_batches * world_size
    if "train_batch_size" in engine and int(engine["train_batch_size"]) != whole:
        raise UsageError(f"--ds-config {where}: train_batch_size {engine['train_batch_size']} is "
                         f"not train_micro_batch_size_per_gpu {args.micro_batch} x "
                         f"gradient_accumulation_steps {args.micro_batches} x {world_size} ranks "
                         f"({whole}): fix it or leave it out")
    if "bf16" not in engine and "fp16" not in engine:
        engine["bf16"] = {"enabled": args.dtype == "bfloat16"}
    engine.setdefault("steps_per_print", 1 << 30)
    engine.setdefault("wall_clock_breakdown", False)
    return engine


def variants(run):
    """[(label, strategy name, engine config)] to measure: one without a sweep."""
    if run.user is None:
        return [(None, name, None) for name in run.args.strategy]
    found = []
    for label, config in run.user.variants():
        where = run.user.path if label is None else f"{run.user.path} with " \
            f"{run.user.sweep_key}={label}"
        engine = for_engine(config, run.args, run.comm.world_size, where)
        found.append((label, dsconfig.STAGE_STRATEGY[int(config["zero_optimization"]["stage"])],
                      engine))
    return found


def run_all(args):
    user = user_config(args)  # the Namespace settled from --ds-config, then frozen
    args = frozen(BenchSettings, args)
    malloc = settle_malloc(args)
    check_backend(args, args.backend)  # ccl only when asked for (rank_settings): before it starts
    comm = init_comm(args.local_rank, rank_settings(args))
    check_shape(args, comm.world_size)
    config = ModelConfig(args.hidden, args.layers, args.heads, args.vocab, args.seq)
    run = Run(args, comm, config, getattr(torch, args.dtype), malloc=malloc, user=user)
    planned = variants(run)
    note(comm, f"strategies {', '.join(args.strategy)}: {config.params:,} parameters, "
               f"{args.steps} measured steps after {args.warmup} warmup, on {socket.gethostname()}"
               "; glibc malloc: " + (f"mmap threshold {malloc['bytes']} B ({malloc['set_by']})"
                                     if malloc["bytes"] is not None else malloc["set_by"]))
    if any(name.startswith("zero") for name in args.strategy):
        # Imported before any strategy runs, so that every strategy's resident memory counts
        # the same libraries.
        import_deepspeed(comm.device.type)
    if user is not None:
        note(comm, f"DeepSpeed config {user.path} (sha256 {user.sha256[:12]}): "
                   f"{', '.join(args.strategy)}, micro-batch {args.micro_batch} x "
                   f"{args.micro_batches}, {args.dtype}" +
                   ("; its optimizer section is not used: the suite passes "
                    "torch.optim.AdamW to deepspeed.initialize, which takes precedence"
                    if "optimizer" in user.config else ""))
    open_output(run)
    comm.run.whereabouts = whereabouts.start(comm)
    swept = []
    try:
        for label, name, engine in planned:
            run.ds_variant, run.ds_label = engine, label
            if comm.run.whereabouts is not None:
                comm.run.whereabouts.size_starts(name, None, "set-up")
            with whereabouts.named_on_timeout(comm, f"rank {comm.global_rank}: {name}",
                                              _failure_record(run, name)):
                record = measure(run, name)
            if label is None:
                report(run, record)
            else:
                swept.append((label, record))
                report_sweep(run, record, sweep.figures(record))
            _say_measured(comm, name if label is None else f"{name} {user.sweep_key}={label}",
                          record)
            agree_to_go_on(comm)
        if swept:
            report_sweep(run, sweep.verdict(user.sweep_key, swept, user.own_label()))
    finally:
        if run.writer is not None:
            run.writer.close()
    if run.writer is not None:  # the run ended well: where its results are, if not as asked
        own = getattr(run.writer, "own", run.writer)
        moved = own and results.written_elsewhere(own.asked, own.path)
        if moved:
            note(comm, moved)


def _say_measured(comm, what, record):
    """A strategy's notes once measured: its loss, its exposed communication, and its bytes
    against the estimate."""
    note(comm, f"{what}: loss {record['loss'][0]:.4f} -> {record['loss'][-1]:.4f}, "
               f"exposed communication {units.duration(record['exposed_comm_s'])} per step "
               f"({record['exposed_method']})")
    if record.get("bytes_vs_estimate"):
        note(comm, f"{what}: bytes per step, measured / estimated for the config's "
                   "buckets: " + ", ".join(
                       f"{op} " + ("not estimated" if r is None else f"{r:.3f}")
                       for op, r in record["bytes_vs_estimate"].items()))


def _failure_record(run, name):
    def record(line):
        if run.writer is not None:
            run.writer.write({"type": "failure", "strategy": name, "reason": "timeout",
                              "message": line})
    return record


def main(argv=None):
    """The entry point: expected failures are one line on stderr and a non-zero exit."""
    exit_without_finalising(guarded(lambda: run_all(parser().parse_args(argv))))  # not sys.exit
