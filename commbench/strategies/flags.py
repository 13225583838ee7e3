"""parallel_bench.py's command line: its flags, the strategies named, and the checks that need
the world size or the backend (a model the strategies cannot split, a ZeRO stage oneCCL does
not run)."""

import argparse
from dataclasses import dataclass

import torch

from ..cli import add_local_rank_flag, add_store_flags, add_timeout_flag
from ..errors import UsageError
from ..flags import UsageParser, prog
from ..numbers import int_at_least
from ..settings import RankSettings, command_line
from .train import ORDER, STRATEGIES

_positive = int_at_least(1)
_at_least_zero = int_at_least(0, exponent=True)


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
    add_local_rank_flag(p)
    p.add_argument("--strategy", type=strategy_list, default=None,
                   help="ddp, zero1, zero2, zero3, tp, pp, a comma list, or all (default; with "
                        "--ds-config: the stage the file names)")
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
    p.add_argument("--ds-config", default=None, metavar="FILE",
                   help="your DeepSpeed config (JSON, as deepspeed.initialize takes it): its "
                        "zero_optimization stage, buckets, overlap_comm, prefetch and live limits, "
                        "bf16, gradient_accumulation_steps and train_micro_batch_size_per_gpu "
                        "drive the ZeRO strategy it names (docs/strategies.md)")
    p.add_argument("--ds-config-sweep", default=None, metavar="KEY=V1,V2,...",
                   help="with --ds-config: the same job once per value of one key (dotted, e.g. "
                        "zero_optimization.reduce_bucket_size=5e6,5e7,5e8), one row each, the "
                        "best named against the file's own value")
    p.add_argument("--malloc-mmap-threshold", type=_at_least_zero, default=None, metavar="BYTES",
                   help="fix glibc's mmap threshold (mallopt M_MMAP_THRESHOLD): resident memory "
                        "stops growing from step to step (ZeRO-3), allocations get slower; "
                        "default: MALLOC_MMAP_THRESHOLD_ if set, else glibc's dynamic threshold")
    p.add_argument("--output", default=None, metavar="PATH", help="JSON lines, by rank 0")
    p.add_argument("--overwrite", action="store_true",
                   help="replace --output if it exists (default: write PATH.1, PATH.2, ...)")
    add_store_flags(p)
    p.add_argument("--trace", default=None, metavar="DIR",
                   help="record the measured steps' communication, call by call, into "
                        "DIR/<strategy>/rank<R>.json, for replay.py (docs/replay.md)")
    p.add_argument("--device", default=None, help="default: cuda when available, else cpu")
    p.add_argument("--backend", default=None,
                   help="default: nccl on cuda, gloo on cpu (also where oneCCL's bindings are "
                        "installed); ccl: --strategy ddp, tp and pp")
    add_timeout_flag(p)
    return p


@dataclass(frozen=True)
class BenchSettings:
    """parallel_bench.py's command line, typed and frozen (parser()'s flags, one field each),
    once --ds-config has settled the strategy, the batch and the dtype (bench.user_config)."""
    local_rank: int | None
    strategy: list  # the strategies in run order (every one without --strategy)
    hidden: int
    layers: int
    heads: int
    vocab: int
    seq: int
    micro_batch: int
    micro_batches: int
    dtype: str
    steps: int
    warmup: int
    seed: int
    stage3_live: int
    ds_config: str | None
    ds_config_sweep: object
    malloc_mmap_threshold: int | None
    output: str | None
    overwrite: bool
    db: str | None
    tag: str | None
    prometheus: str | None
    trace: str | None
    device: str | None
    backend: str | None
    timeout: float


def rank_settings(args):
    """What starts parallel_bench.py's ranks (comm.init_comm): torch.distributed, this run's
    device, backend and dtype (the suite's start-up's other settings at their defaults). On CPU
    the backend is gloo unless asked (not the op scripts' detection of ccl): see
    check_backend."""
    on_cpu = args.device == "cpu" or (args.device is None and not torch.cuda.is_available())
    backend = args.backend or ("gloo" if on_cpu else None)
    given = argparse.Namespace(**{**vars(args), "backend": backend}, dist="torch")
    return RankSettings(dist="torch", backend=backend, device=args.device, timeout=args.timeout,
                        dtype=args.dtype, command_line=command_line(given))


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


# ------------------------------------------------------------------------------ measurement
