"""replay.py's command line: its flags, the checks across them (`settled`: before any rank
connects), its typed, frozen settings (`ReplaySettings`) and what starts its ranks
(`rank_settings`)."""

import sys
from dataclasses import dataclass

from .. import defaults
from ..cli import add_local_rank_flag, add_store_flags, add_timeout_flag
from ..errors import UsageError
from ..flags import UsageParser, prog
from ..numbers import int_at_least
from ..settings import RankSettings, command_line
from . import compute

PACES = ("sleep", "compute")


@dataclass(frozen=True)
class ReplaySettings:
    """replay.py's command line, typed and frozen (parser()'s flags, one field each)."""
    trace: str
    local_rank: int | None
    dist: str
    backend: str | None
    device: str | None
    timeout: float
    warmup: int
    repeat: int
    pace: str | None  # None: back to back; "sleep" (a bare --pace) or "compute"
    isolated: bool
    compute_kernel: str | None
    check: bool
    per_trial: bool
    dry_run: bool
    top: int
    output: str | None
    overwrite: bool
    db: str | None
    tag: str | None
    prometheus: str | None


def rank_settings(args):
    """What starts replay.py's ranks (comm.init_comm): its layer, backend, device, --timeout."""
    return RankSettings(dist=args.dist, backend=args.backend, device=args.device,
                        timeout=args.timeout, command_line=command_line(args))


def parser():
    p = UsageParser(prog=prog("replay.py"),
                description="Replay a recorded job's communication: the same collectives, "
                            "sizes, groups and order, timed; how close to the job it came.")
    p.add_argument("trace", metavar="TRACE_DIR",
                   help="one file per rank, the rank the last number in its name (the suite's "
                        "own traces, PyTorch execution traces, PARAM basic comms traces, "
                        "DeepSpeed comms logger summaries)")
    add_local_rank_flag(p)
    p.add_argument("--dist", choices=defaults.DISTS, default="torch",
                   help="issue the calls through torch.distributed (default) or deepspeed.comm")
    p.add_argument("--backend", default=None,
                   help="default: nccl on cuda, ccl where oneCCL's bindings are, else gloo")
    p.add_argument("--device", default=None, help="default: the accelerator, else cpu")
    p.add_argument("--warmup", type=int_at_least(0), default=1,
                   help="untimed passes first (default %(default)s)")
    p.add_argument("--repeat", type=int_at_least(1), default=5,
                   help="timed passes of the whole trace (default %(default)s)")
    p.add_argument("--pace", nargs="?", const="sleep", default=None, choices=PACES,
                   help="keep the trace's gaps between calls (default: back to back): sleep "
                        "through them (a bare --pace), or fill them with compute of the gap's "
                        "length on the ranks' own threads (--pace compute)")
    p.add_argument("--compute-kernel", choices=compute.KERNELS, default=None,
                   help="--pace compute's kernel: a dense matmul (default) or a memory-bound "
                        "add; calibrated once per rank before the passes")
    p.add_argument("--isolated", action="store_true",
                   help="each call alone between barriers of its group, timed from its issue "
                        "to its completion, as PARAM's comms replay times it")
    p.add_argument("--check", action="store_true",
                   help="one more pass with known inputs, every output compared (0 wrong "
                        "expected; exit 1 otherwise)")
    p.add_argument("--per-trial", action="store_true",
                   help="every timed pass on every rank: its time and when each rank came to "
                        "it, in --output's summary (report.py trials reads it)")
    p.add_argument("--dry-run", action="store_true",
                   help="what would run and the trace's totals, without communicating (one "
                        "plain process: python replay.py DIR --dry-run)")
    p.add_argument("--top", type=int_at_least(0), default=10,
                   help="the heaviest calls listed (default %(default)s)")
    p.add_argument("--output", default=None, metavar="FILE.jsonl",
                   help="one record per replayed call, in trace order, and a summary")
    p.add_argument("--overwrite", action="store_true",
                   help="replace --output if it exists (default: write FILE.jsonl.1, ...)")
    add_store_flags(p)
    add_timeout_flag(p)
    return p


def bare_pace(argv):
    """A bare --pace stays a bare --pace (sleep) before a word that is not one of its values:
    `replay.py --pace TRACE_DIR` means what it meant before --pace took a value."""
    words = list(sys.argv[1:] if argv is None else argv)
    for index, word in enumerate(words):
        if word == "--":
            break
        if word == "--pace" and (index + 1 == len(words) or words[index + 1] not in PACES):
            words[index] = "--pace=sleep"
    return words


def settled(namespace):
    """Checks across the flags, before any rank connects; the kernel's default."""
    def refuse(message):
        raise UsageError(f"{message} (see --help)")
    if namespace.isolated and namespace.pace:
        refuse(f"--isolated and --pace{' compute' if namespace.pace == 'compute' else ''} do "
               "not go together: --isolated times each call alone between barriers, --pace "
               "keeps the job's gaps between them")
    if namespace.compute_kernel is not None and namespace.pace != "compute":
        refuse("--compute-kernel is --pace compute's kernel: give --pace compute too")
    if namespace.pace == "compute" and namespace.compute_kernel is None:
        namespace.compute_kernel = compute.DEFAULT_KERNEL
    return namespace
