"""parallel_bench.py's run: the flags and the measured loop around each strategy (the table and
the JSON lines: output.py; the trace of the measured steps with --trace: commbench.trace).

For each strategy: build it, `--warmup` steps, then `--steps` measured steps, each after a
barrier, with the accounting installed (accounting.Recorder) and the memory high-water mark
reset at the window's start. Then every rank's figures are gathered (after the accounting is
removed, so the gathering is not counted) and rank 0 prints a row and writes a record.
"""

import argparse
import contextlib
import ctypes
import ctypes.util
import gc
import math
import os
import socket
import statistics
import time
from dataclasses import dataclass

import torch
import torch.distributed

from ..comm import init_comm
from ..errors import BenchmarkError, UsageError
from ..flags import UsageParser, prog
from ..guard import agree_to_go_on
from ..harness import exit_without_finalising, guarded
from ..memory import read_field
from ..numbers import float_in, int_at_least
from ..table import note
from ..trace.capture import Tracer
from .accounting import OPS, Recorder
from .model import ModelConfig
from .output import open_output, report
from .train import ORDER, STRATEGIES, import_deepspeed, optimizer_config

# ------------------------------------------------------------------------------------- flags

_positive = int_at_least(1)
_at_least_zero = int_at_least(0, exponent=True)
_seconds = float_in(0, 1e6, "a positive number of seconds")


def strategy_list(text):
    """`ddp,zero1`, or `all` (the six, in order); each once."""
    names = [name.strip() for name in text.split(",")]
    if names == ["all"]:
        return list(ORDER)
    unknown = [name for name in names if name not in STRATEGIES]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown strategy '{unknown[0]}': use {', '.join(ORDER)} or all (a comma list "
            "allowed)")
    if len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"'{text}' names a strategy twice")
    return names


def parser():
    p = UsageParser(prog=prog("parallel_bench.py"),
                description="Train a small decoder-only transformer with each parallel strategy "
                            "and measure step time, memory and the communication of a step.")
    p.add_argument("--local_rank", "--local-rank", dest="local_rank", type=int, default=None,
                   help="set by launchers; default: from the launcher's environment")
    p.add_argument("--strategy", type=strategy_list, default=list(ORDER),
                   help="ddp, zero1, zero2, zero3, tp, pp, a comma list, or all (default)")
    p.add_argument("--hidden", type=_positive, default=256,
                   help="model width (default %(default)s)")
    p.add_argument("--layers", type=_positive, default=4, help="blocks (default %(default)s)")
    p.add_argument("--heads", type=_positive, default=4,
                   help="attention heads; tp needs them divisible by the world size (default "
                        "%(default)s)")
    p.add_argument("--vocab", type=_positive, default=1024, help="vocabulary (default %(default)s)")
    p.add_argument("--seq", type=_positive, default=64,
                   help="tokens a sequence (default %(default)s)")
    p.add_argument("--micro-batch", type=_positive, default=8,
                   help="sequences per micro-batch (default %(default)s)")
    p.add_argument("--micro-batches", type=_positive, default=4,
                   help="gradient accumulation steps (ddp, zero, tp); pipeline micro-batches (pp) "
                        "(default %(default)s)")
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                   help="parameters, activations and communication (default %(default)s)")
    p.add_argument("--steps", type=_positive, default=10,
                   help="measured steps (default %(default)s)")
    p.add_argument("--warmup", type=_at_least_zero, default=2,
                   help="unmeasured steps first (default %(default)s)")
    p.add_argument("--seed", type=_at_least_zero, default=1234,
                   help="of the weights and the synthetic tokens (default %(default)s)")
    p.add_argument("--stage3-live", type=_positive, default=100_000, metavar="PARAMS",
                   help="zero3: stage3_max_live_parameters, stage3_max_reuse_distance and "
                        "stage3_prefetch_bucket_size (default %(default)s)")
    p.add_argument("--malloc-mmap-threshold", type=_at_least_zero, default=None, metavar="BYTES",
                   help="fix glibc's mmap threshold (mallopt M_MMAP_THRESHOLD): resident memory "
                        "stops growing from step to step (ZeRO-3), allocations get slower; "
                        "default: MALLOC_MMAP_THRESHOLD_ if set, else glibc's dynamic threshold")
    p.add_argument("--output", default=None, metavar="PATH", help="JSON lines, by rank 0")
    p.add_argument("--trace", default=None, metavar="DIR",
                   help="record the measured steps' communication, call by call, into "
                        "DIR/<strategy>/rank<R>.json, for replay.py (docs/replay.md)")
    p.add_argument("--device", default=None, help="default: cuda when available, else cpu")
    p.add_argument("--backend", default=None, help="default: nccl on cuda, gloo on cpu (also where oneCCL's bindings are "
                        "installed); ccl: --strategy ddp, tp and pp")
    p.add_argument("--timeout", type=_seconds, default=300,
                   help="seconds a rank waits for its peers (default %(default)s)")
    return p


def comm_args(args):
    """The Namespace init_comm reads: torch.distributed, this run's device, backend, dtype.
    On CPU the backend is gloo unless asked (not the op scripts' detection of ccl):
    see check_backend."""
    on_cpu = args.device == "cpu" or (args.device is None and not torch.cuda.is_available())
    backend = args.backend or ("gloo" if on_cpu else None)
    return argparse.Namespace(**{**vars(args), "backend": backend}, dist="torch", pin=False,
                              groups=None, op="sum")


def check_backend(args, backend):
    """ZeRO on ccl: refused in one line, before anything is built."""
    zero = [name for name in args.strategy if name.startswith("zero")]
    if backend == "ccl" and zero:
        raise UsageError(f"--strategy {zero[0]} on --backend ccl is not measured: DeepSpeed "
                         "sends ZeRO's collectives through its own oneCCL op, past "
                         "torch.distributed, where the per-op accounting cannot see them, and "
                         "its ZeRO-3 on it grew past 3 GB per rank within seconds here; use "
                         "--backend gloo, or --strategy ddp,tp,pp on ccl")


def check_shape(args, world_size):
    """Bad combinations of model and world: one line, exit 2, before anything is built."""
    if args.hidden % args.heads:
        raise UsageError(f"--hidden {args.hidden} is not divisible by --heads {args.heads}")
    if "tp" in args.strategy and args.heads % world_size:
        raise UsageError(f"--strategy tp: --heads {args.heads} is not divisible by the "
                         f"{world_size} tensor-parallel ranks (the heads are split across them)")
    if "pp" in args.strategy and args.layers < world_size:
        raise UsageError(f"--strategy pp: --layers {args.layers} is fewer than the {world_size} "
                         "pipeline stages (each stage holds at least one layer)")


# ------------------------------------------------------------------------------ glibc malloc

_M_MMAP_THRESHOLD = -3


def settle_malloc(args):
    """glibc raises its mmap threshold as large blocks are freed, after which freed blocks stay
    in a fragmented heap: ZeRO-3's resident memory grows step after step (here about 90 MiB
    over 12 steps of the default model). A fixed threshold (MALLOC_MMAP_THRESHOLD_, read at
    process start, or --malloc-mmap-threshold, set here through mallopt) keeps large blocks in
    mmap and returns them when freed, but every such allocation then faults its pages in
    again: steps were 10% (ddp) to 60% (zero3) slower here. So the default is glibc's own
    behaviour, what a training job gets; the record says which. Returns what it says."""
    from_env = os.environ.get("MALLOC_MMAP_THRESHOLD_")
    if args.malloc_mmap_threshold is None:
        if from_env is not None:
            return {"bytes": int(from_env) if from_env.isdigit() else from_env,
                    "set_by": "MALLOC_MMAP_THRESHOLD_"}
        return {"bytes": None, "set_by": "glibc dynamic default"}
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        done = libc.mallopt(_M_MMAP_THRESHOLD, ctypes.c_int(args.malloc_mmap_threshold)) == 1
    except (OSError, AttributeError):
        done = False
    if not done:
        raise UsageError(f"--malloc-mmap-threshold {args.malloc_mmap_threshold}: glibc's mallopt "
                         "refused it or is not there (glibc takes at most 32 MiB on 64-bit)")
    return {"bytes": args.malloc_mmap_threshold, "set_by": "--malloc-mmap-threshold (mallopt)"}


# ----------------------------------------------------------------------------------- memory

class PeakMemory:
    """Peak memory over a window: resident (VmHWM after resetting it through clear_refs) on
    CPU, the allocator's peak on an accelerator."""

    def __init__(self, comm):
        self.device = comm.device if comm.on_accelerator else None
        self.source = "device_allocator" if self.device is not None else "rss_high_water"
        self.reset_done = False

    def reset(self):
        if self.device is not None:
            torch.get_device_module(self.device.type).reset_peak_memory_stats(self.device)
            self.reset_done = True
            return
        try:
            with open("/proc/self/clear_refs", "w") as clear:
                clear.write("5")
            self.reset_done = True
        except OSError:
            self.reset_done = False  # the peak is then the process's since it started

    def now(self):
        """What the rank holds now: VmRSS, or the allocator's bytes in use."""
        if self.device is not None:
            return torch.get_device_module(self.device.type).memory_allocated(self.device)
        return read_field("/proc/self/status", "VmRSS") or 0

    def peak(self):
        if self.device is not None:
            return torch.get_device_module(self.device.type).max_memory_allocated(self.device)
        return read_field("/proc/self/status", "VmHWM") or 0


def release_memory():
    """Between strategies: what the last one freed goes back to the system (glibc keeps freed
    heap memory otherwise), so the next one's resident memory starts from the libraries, not
    from its predecessor's leftovers."""
    gc.collect()
    try:
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


# ------------------------------------------------------------------------------ measurement

@dataclass
class Run:
    args: argparse.Namespace
    comm: object
    model_config: ModelConfig
    dtype: torch.dtype
    writer: object = None
    malloc: dict = None
    header_printed: bool = False


def _median(values):
    return statistics.median(values)


def _p90(values):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.9 * len(ordered)) - 1)]


def _timed_steps(run, strategy, count, recorder=None, losses=None, memory=None, held=None):
    """`count` steps, each after a barrier; this rank's wall time of each (and with `memory`,
    what the rank holds after each, in `held`)."""
    comm, times = run.comm, []
    for _ in range(count):
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
        if losses is not None:
            losses.append(math.nan if loss is None else loss)
        if memory is not None:
            held.append(memory.now())
    return times


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
    _timed_steps(run, strategy, args.warmup, losses=losses)
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
        _timed_steps(run, strategy, 1)
        no_sync_times = _timed_steps(run, strategy, args.steps)
    settings = strategy.settings()
    params_mine = strategy.params_per_rank
    loss_rank, samples = strategy.loss_rank, strategy.samples_per_step
    dp, tp, pp = strategy.dp, strategy.tp, strategy.pp
    strategy.close()
    del strategy
    release_memory()

    # Every rank's figures on every rank: step times, per step per op [calls, bytes, time]
    # and blocked time, peak memory, parameters, losses.
    mine = list(times) + [f for step in recorder.steps for f in step.figures()] + \
        [float(peak), float(params_mine), float(before)] + losses + \
        list(no_sync_times or [0.0] * args.steps) + [float(x) for x in held]
    rows = comm.gather_figures(mine)
    per_step = 3 * len(OPS) + 1
    n, steps = comm.world_size, args.steps

    def unpack(row):
        at = 0
        step_times = row[at:at + steps]
        at += steps
        counts = [row[at + k * per_step:at + (k + 1) * per_step] for k in range(steps)]
        at += steps * per_step
        peak_, params_, before_ = row[at], row[at + 1], row[at + 2]
        at += 3
        losses_ = row[at:at + args.warmup + steps]
        at += args.warmup + steps
        return (step_times, counts, peak_, params_, losses_, row[at:at + steps], before_,
                row[at + steps:at + 2 * steps])

    ranks = [unpack(row) for row in rows]
    step_times = [max(r[0][k] for r in ranks) for k in range(steps)]
    median = _median(step_times)
    blocked = [max(r[1][k][-1] for r in ranks) for k in range(steps)]
    comm_summary, comm_per_rank = {}, {}
    for index, op in enumerate(OPS):
        def mean_of(rank_counts, field):
            return sum(c[3 * index + field] for c in rank_counts) / steps
        if not any(mean_of(r[1], 0) for r in ranks):
            continue
        rank0 = ranks[0][1]
        comm_summary[op] = {"calls": mean_of(rank0, 0), "bytes": mean_of(rank0, 1),
                            "time_s": mean_of(rank0, 2)}
        comm_per_rank[op] = [mean_of(r[1], 1) for r in ranks]
    if name == "ddp":
        no_sync = [max(r[5][k] for r in ranks) for k in range(steps)]
        exposed, method = max(0.0, median - _median(no_sync)), "no_sync difference"
        settings["no_sync_step_time_s"] = _spread(no_sync)
        settings["no_sync_step_times_s"] = no_sync
    else:
        exposed, method = _median(blocked), "blocked in calls"
    settings["optimizer"] = optimizer_config()
    settings["lm_head"] = "untied"
    settings["malloc_mmap_threshold"] = run.malloc
    # What each rank held before the strategy was built (libraries, earlier strategies' leftovers):
    # peak minus this is about what the strategy itself took.
    settings["memory_before_setup_bytes_per_rank"] = [int(r[6]) for r in ranks]
    # After each measured step, the most a rank held (VmRSS or allocated): growth from step to
    # step is the allocator's (see settle_malloc), not the strategy's.
    settings["memory_after_step_bytes"] = [int(max(r[7][k] for r in ranks)) for k in range(steps)]
    if memory.source == "rss_high_water":
        settings["rss_high_water_reset"] = memory.reset_done
    return {
        "type": "strategy", "strategy": name, "world_size": n, "dp": dp, "tp": tp, "pp": pp,
        "params": run.model_config.params,
        "params_per_rank": [int(r[3]) for r in ranks],
        "dtype": args.dtype, "steps": steps,
        "step_time_s": _spread(step_times),
        "step_times_s": step_times,
        "samples_per_s": samples / median,
        "tokens_per_s": samples * args.seq / median,
        "peak_memory_bytes_per_rank": [int(r[2]) for r in ranks],
        "memory_source": memory.source,
        "loss": [None if math.isnan(x) else x for x in ranks[loss_rank][4]],
        "comm": comm_summary,
        "comm_bytes_per_rank": comm_per_rank,
        "exposed_comm_s": exposed,
        "exposed_method": method,
        "compute_s": median - exposed,
        "config": settings,
    }


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


def _spread(values):
    return {"median": _median(values), "min": min(values), "max": max(values), "p90": _p90(values)}


# ------------------------------------------------------------------------------------- main

def run_all(args):
    malloc = settle_malloc(args)
    check_backend(args, args.backend)  # ccl only when asked for (comm_args): before it starts
    comm = init_comm(args.local_rank, comm_args(args))
    check_shape(args, comm.world_size)
    config = ModelConfig(args.hidden, args.layers, args.heads, args.vocab, args.seq)
    run = Run(args, comm, config, getattr(torch, args.dtype), malloc=malloc)
    note(comm, f"strategies {', '.join(args.strategy)}: {config.params:,} parameters, "
               f"{args.steps} measured steps after {args.warmup} warmup, on {socket.gethostname()}"
               "; glibc malloc: " + (f"mmap threshold {malloc['bytes']} B ({malloc['set_by']})"
                                     if malloc["bytes"] is not None else malloc["set_by"]))
    if any(name.startswith("zero") for name in args.strategy):
        # Imported before any strategy runs, so that every strategy's resident memory counts
        # the same libraries.
        import_deepspeed(comm.device.type)
    open_output(run)
    try:
        for name in args.strategy:
            record = measure(run, name)
            report(run, record)
            note(comm, f"{name}: loss {record['loss'][0]:.4f} -> {record['loss'][-1]:.4f}, "
                       f"exposed communication {record['exposed_comm_s'] * 1e3:.1f} ms per step "
                       f"({record['exposed_method']})")
            agree_to_go_on(comm)
    finally:
        if run.writer is not None:
            run.writer.close()


def main(argv=None):
    """The entry point: expected failures are one line on stderr and a non-zero exit."""
    exit_without_finalising(guarded(lambda: run_all(parser().parse_args(argv))))  # not sys.exit
