"""The command line shared by every script (SPEC §2): the parser and its validators.

A bad flag is a UsageError (exit 2, one line), never argparse's own exit.
"""

import argparse
import importlib.util
import os
import sys

import torch

from . import defaults
from .bounds import parse_peak
from .ranks import groups as grouping
from .bench import precision
from .dtypes import dtype_list
from .errors import PROG, UsageError
from .flags import Parser, argument, prog
from .ranks.launch import discover_launch_env
from .numbers import byte_count, float_in, int_at_least, percentage
from .settings import settle


class _Parser(Parser):
    def error(self, message):
        raise UsageError(f"{message} (see --help)")

    def parse_known_args(self, args=None, namespace=None):
        namespace, extra = super().parse_known_args(args, namespace)
        settle_layer(namespace)
        settle(namespace, self.error)
        return namespace, extra

    def print_help(self, file=None):
        # argparse ignores a failed write of the help; here it raises (entry.cli says so).
        file = file or sys.stdout
        file.write(self.format_help())
        file.flush()


def _maxsize(text):
    value = int_at_least(defaults.MIN_MAXSIZE)(text)
    if value > defaults.MAX_MAXSIZE:
        raise argparse.ArgumentTypeError(f"must be <= {defaults.MAX_MAXSIZE} (2^{value} elements "
                                         f"fit no memory), got {value}")
    return value


def _minsize(text):
    value = int_at_least(1)(text)
    if value >= defaults.MAX_MAXSIZE:
        raise argparse.ArgumentTypeError(f"must be < {defaults.MAX_MAXSIZE}, got {value}")
    return value


_mem_factor = float_in(0, 1, "in (0, 1]")
_step_factor = float_in(1, 1e6, "greater than 1 (each size is the last one times it)")
_positive_seconds = float_in(0, 1e6, "a positive number of seconds")
_overlap_factor = float_in(0, 1000, "in (0, 1000]")


def _cpu_list(text):
    """CPU numbers as taskset takes them (0-3,6), each one this process may run on."""
    cpus = set()
    try:
        for part in text.split(","):
            low, _, high = part.partition("-")
            cpus.update(range(int(low), int(high or low) + 1))
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a CPU list such as 0-3,6") from None
    allowed = os.sched_getaffinity(0)
    if not cpus or not cpus <= allowed:
        usable = ",".join(map(str, sorted(allowed)))
        raise argparse.ArgumentTypeError(f"CPUs {text} are not all ones this process may use "
                                         f"({usable})")
    return cpus


_layouts = argument(grouping.kinds)
_split = argument(grouping.split_rule)


def _dtype_names(text):
    dtype_list(text)  # raises with the reason
    return text


def _device_type(text):
    if ":" in text:
        raise argparse.ArgumentTypeError(f"give a device type (cpu, cuda, ...) without an index, "
                                         f"got {text}; each rank takes its local rank's index")
    try:
        torch.device(text)
    except RuntimeError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a device type torch knows; use cpu, "
                                         "cuda, xpu, hpu, npu, ...") from None
    return text


def add_rank_flags(parser, dist_help):
    """What every script that starts the suite's ranks shares (the op scripts, run_all.py,
    doctor.py): the launcher's local rank, and the layer, backend and device to start. Their
    --timeout: add_timeout_flag (where --help lists it)."""
    add_local_rank_flag(parser)
    parser.add_argument("--backend", choices=defaults.BACKENDS, default=defaults.DEFAULT_BACKEND,
                        help="communication backend (default: detected from the device)")
    # None until settle_layer: deepspeed where DeepSpeed is installed, else torch
    parser.add_argument("--dist", choices=defaults.DISTS, default=None,
                        help=f"{dist_help} (default {defaults.DEFAULT_DIST}; torch where "
                             "DeepSpeed is not installed, with a note)")
    parser.add_argument("--device", type=_device_type, default=defaults.DEFAULT_DEVICE,
                        help="cuda, cpu, xpu, hpu, npu, ... (default: detected)")


def add_local_rank_flag(parser):
    """The launcher's local rank, of every script that starts ranks (replay.py and
    parallel_bench.py declare their own layer flags: their defaults differ)."""
    parser.add_argument("--local_rank", "--local-rank", dest="local_rank", type=int, default=None,
                        help="set by launchers; default: from the launcher's environment")


def add_timeout_flag(parser, default=defaults.DEFAULT_TIMEOUT,
                     help="seconds a rank waits for its peers (default %(default)s)",
                     metavar=None):
    """--timeout, of every script that starts ranks (settings.RankSettings.timeout): seconds, the
    suite's default (defaults.DEFAULT_TIMEOUT) unless a front end's own (doctor.py's, shorter:
    a host that does not answer is named unreachable at it); `help` says what waits for it."""
    parser.add_argument("--timeout", type=_positive_seconds, default=default, metavar=metavar,
                        help=help)


def settle_layer(args):
    """--dist not given: deepspeed (SPEC's default) where DeepSpeed is installed; where it is
    not (a plain `pip install commbench`), torch, and one note from the launcher's rank 0 that
    says so. A --dist deepspeed given without DeepSpeed stays an error (layer.import_deepspeed).
    Whether DeepSpeed is installed is asked of the import system, not by importing it."""
    if args.dist is not None:
        return
    if importlib.util.find_spec("deepspeed") is not None:
        args.dist = defaults.DEFAULT_DIST
        return
    args.dist = "torch"
    try:  # the launcher's rank; an environment in error is said at start-up, not here
        rank = discover_launch_env(local_rank_arg=args.local_rank).rank
    except UsageError:
        return
    if rank == 0:
        print(f"{PROG}: note: DeepSpeed is not installed, so this run measures torch.distributed "
              "(--dist torch); for deepspeed.comm, pip install 'commbench[deepspeed]'",
              file=sys.stderr, flush=True)


def add_store_flags(parser):
    """The outputs beside --output (docs/history.md): the results database and Prometheus."""
    parser.add_argument("--db", metavar="URL", default=None,
                        help="also keep the run in a results database: an SQLite file "
                             "(results/commbench.db, or any path) or postgresql://USER@HOST/DB "
                             "(default: $COMMBENCH_DB, else none)")
    parser.add_argument("--tag", metavar="TAG", default=None,
                        help="with --db and --prometheus: name the cluster or the experiment "
                             "(report.py history --tag)")
    parser.add_argument("--prometheus", metavar="FILE", default=None,
                        help="write the run's figures to FILE at its end, in node_exporter's "
                             "textfile-collector format (FILE ending in .prom)")


def _timing_flags(parser):
    """--trials, --warmups: how many iterations a size."""
    parser.add_argument("--trials", type=int_at_least(1), default=defaults.DEFAULT_TRIALS,
                        help="number of timed iterations (default %(default)s)")
    parser.add_argument("--warmups", type=int_at_least(0), default=defaults.DEFAULT_WARMUPS,
                        help="number of untimed iterations before timing (default %(default)s)")


def _size_flags(parser):
    """The message sizes (--maxsize/--minsize as the original, nccl-tests' byte sweep, --scan),
    --async-op, and the table's units."""
    parser.add_argument("--maxsize", type=_maxsize, default=None,
                        help="scan up to n x 2^(maxsize-1) elements per rank "
                             f"(default {defaults.DEFAULT_MAXSIZE})")
    parser.add_argument("--minsize", type=_minsize, default=None,
                        help="scan from n x 2^minsize elements per rank (implies --scan; "
                             f"default {defaults.DEFAULT_MINSIZE})")
    parser.add_argument("--min-bytes", type=byte_count, default=None, metavar="BYTES",
                        help="sweep message sizes in bytes per rank from BYTES (8, 1K, 4M, 1G; "
                             "implies --scan; default 8), as nccl-tests' -b")
    parser.add_argument("--max-bytes", type=byte_count, default=None, metavar="BYTES",
                        help="... up to BYTES, as nccl-tests' -e (default 32M)")
    parser.add_argument("--step-factor", type=_step_factor, default=None, metavar="F",
                        help="... each size F times the last, as nccl-tests' -f (default 2); "
                             "sizes are rounded down to what the op can move (docs/running.md)")
    parser.add_argument("--async-op", action="store_true",
                        help="issue ops with async_op=True (pt2pt: isend/irecv) and wait on "
                             "every handle inside the timed window")
    parser.add_argument("--bw-unit", choices=defaults.BW_UNITS, default=defaults.DEFAULT_UNIT)
    parser.add_argument("--scan", action="store_true",
                        help="sweep message sizes instead of one large message")
    parser.add_argument("--raw", action="store_true",
                        help="print sizes in bytes and durations in microseconds, without units")
    parser.add_argument("--peak", type=parse_peak, default=None, metavar="auto|RATE|FILE",
                        help="hold each row's BusBW against a bound, in a column %% of peak: "
                             "auto (the link between hosts, NVLink/PCIe on GPUs, a memory copy "
                             "timed once per host on CPUs), a RATE (100gbit, 12.5GB/s) or a "
                             "FILE of expected figures per op and size (docs/peak.md)")
    parser.add_argument("--peak-refresh", action="store_true",
                        help="--peak auto: time the memory copy again instead of reading the "
                             "cache")


def _op_flags(parser):
    """Which ops (run_all.py), their dtype, reduction and single-size memory share."""
    for op in defaults.OPS:
        parser.add_argument(f"--{op.replace('_', '-')}", dest=op, action="store_true",
                            help=f"run {op} (run_all.py; none given = the original six)")
    parser.add_argument("--all", action="store_true",
                        help="run every registered op (run_all.py): the six, reduce, gather, "
                             "scatter and barrier")
    parser.add_argument("--dtype", type=_dtype_names, default=defaults.DEFAULT_TYPE,
                        help="torch dtype of the buffers, or several (float32,bfloat16,int32: one "
                             "table each), or all that the backend moves (default %(default)s)")
    parser.add_argument("--op", choices=defaults.REDUCE_OPS, default=defaults.DEFAULT_REDUCE_OP,
                        help="the reduction of all_reduce, reduce_scatter and reduce "
                             "(default %(default)s)")
    parser.add_argument("--mem-factor", type=_mem_factor, default=defaults.DEFAULT_MEM_FACTOR,
                        help="fraction of per-rank memory a single-size run may use, in (0, 1] "
                             "(default %(default)s)")
    parser.add_argument("--debug", action="store_true",
                        help="all_to_all: print a few elements of each rank's buffers")


def _check_and_statistics_flags(parser):
    """--check, --check-every, --stats, --per-trial, --repeat, --precision."""
    parser.add_argument("--check", action="store_true",
                        help="after timing each size, run the op once more on known input and "
                             "count wrong elements (column Wrong; any wrong: exit status 1)")
    parser.add_argument("--check-every", action="store_true",
                        help="check every timed trial instead: after the timed window, a second "
                             "one of as many trials, each on fresh known input and checked "
                             "(column Checked: its time a trial; Duration stays unchecked); a "
                             "wrong one is named by trial, rank and element (implies --check)")
    parser.add_argument("--stats", action="store_true",
                        help="time every trial too: median, p99 and the slowest rank per size")
    parser.add_argument("--per-trial", action="store_true",
                        help="keep every timed trial's duration and arrival on every rank in "
                             "the results file (report.py trials reads them; "
                             "docs/trials.md)")
    parser.add_argument("--repeat", type=int_at_least(1), default=1, metavar="R",
                        help="time each size as R windows of --trials trials, spread over the "
                             "run (one per pass over the sizes); the table gains a 95%% "
                             "interval of Duration (default 1)")
    parser.add_argument("--precision", type=percentage, default=None, metavar="P",
                        help="time each size in windows of --trials trials until the 95%% "
                             "interval of Duration is within P of it (5%%): at least 3 windows "
                             "after a warm-up one, spread over the run as --repeat's; "
                             "--time-budget then covers the whole run; rows that stop short are "
                             "marked !")
    parser.add_argument("--max-windows", type=int_at_least(precision.MIN_WINDOWS), default=None,
                        metavar="M", help="--precision: at most M windows a size, the warm-up "
                                          f"not counted (default {defaults.DEFAULT_MAX_WINDOWS})")


def _own_flags(parser):
    """Each op's own flags, from its descriptor (`flags`), in the registry's order: pt2pt's
    pairs, all_to_allv's splits (docs/traffic.md)."""
    from . import ops  # the ops' modules import the harness, which imports this module
    for name in defaults.OPS:
        own = ops.descriptor(name).flags
        if own is not None:
            own(parser)


def _layout_flags(parser):
    """--groups, --split, --pin: where the ops run."""
    parser.add_argument("--groups", type=_layouts, default=None, metavar="LAYOUTS",
                        help="run each op concurrently in sub-groups instead of the whole world: "
                             "intra (the ranks of each host together, every host at once), inter "
                             "(one rank per host, every local-rank column at once), world; a "
                             "comma list runs each in turn (default: world)")
    parser.add_argument("--split", type=_split, default=None, metavar="N[:RULE]",
                        help="run each op in N groups at once, one table each and their "
                             "aggregate: blocks (consecutive ranks, the default) or strided "
                             "(every N-th rank together: across hosts); after --groups' layouts")
    parser.add_argument("--pin", action="store_true",
                        help="pin each rank and the threads it starts (the backend's) to one CPU "
                             "of its own, by local rank: steadier figures on a shared host")


def _overlap_flags(parser):
    """--overlap and its compute phase (docs/overlap.md)."""
    parser.add_argument("--overlap", action="store_true",
                        help="per size, also time the op issued asynchronously (Comm), a compute "
                             "phase as long (Compute), both together (Overlapped), and how much "
                             "of the op hid behind the compute (Overlap %%, as OSU's)")
    parser.add_argument("--overlap-factor", type=_overlap_factor, default=1.0, metavar="F",
                        help="--overlap's compute phase lasts F times the pure collective "
                             "(default 1, as OSU's; a backward pass is often much longer)")
    parser.add_argument("--compute-cpus", type=_cpu_list, default=None, metavar="LIST",
                        help="--overlap on CPU: run each rank's windows (the op's issue and the "
                             "compute) on these CPUs only (0-3,6), leaving the others to the "
                             "backend's progress threads, as oneCCL's CCL_WORKER_AFFINITY does")


def _output_and_limit_flags(parser):
    """--output and the store's flags; --time-budget, --timeout."""
    parser.add_argument("--output", metavar="PATH",
                        help="write results to PATH as it runs: .jsonl, .csv or .json")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an existing --output file (default: write PATH.1, "
                             "PATH.2, ...)")
    add_store_flags(parser)
    parser.add_argument("--time-budget", type=_positive_seconds, default=None, metavar="SECONDS",
                        help="per message size, time about this long: the trial count comes "
                             "from the median warmup's pace, at least 5 and at most --trials; "
                             "with --precision, the seconds of the whole run, shared between "
                             "its ops and sizes")
    add_timeout_flag(parser, help="seconds a rank waits for its peers (rendezvous, process "
                                  "group) before it gives up with an error (default %(default)s)")


def benchmark_parser():
    """The op scripts' and run_all.py's flags, in the order --help lists them."""
    parser = _Parser(prog=prog(os.path.basename(sys.argv[0]) or PROG),
                     description="Measure collective communication through deepspeed.comm "
                                 "or torch.distributed.")
    add_rank_flags(parser, "communication layer to measure")
    _timing_flags(parser)
    _size_flags(parser)
    _op_flags(parser)
    _check_and_statistics_flags(parser)
    _own_flags(parser)
    _layout_flags(parser)
    _overlap_flags(parser)
    _output_and_limit_flags(parser)
    return parser
