"""From numbers to decisions: compare two runs of the suite (or an nccl-tests run).

  python report.py compare A B [--threshold 1.10] [--noise-threshold 5] [--format text|markdown|json]
  python report.py compare RUN      (a run of --groups: its layouts side by side)
  python report.py compare R1 R2    (two replays of one trace, replay.py --output: call by call)
  python report.py plot A [B ...] -o curves.png     (a doctor.py run: its pair heatmaps)
  python report.py html A [B ...] -o report.html    (one self-contained page of runs)
  python report.py strategy RESULTS --params 7B [--world-size N] [--gpu-mem 80] ...
  python report.py strategy RESULTS --measured RUNS [--plot strategies.png]
  python report.py buckets RESULTS --grad-mb G [--backward-ms T] [--plot buckets.png]

A and B are result files of `--output` (.jsonl, .json, .csv), saved stdout of the suite
(a tee'd table, --raw or not, several ops in one file), or nccl-tests text output.
Standard library only, but for `plot` and `html` (matplotlib, and Jinja2, imported when used).
"""

import sys

from commbench import caches
from commbench.flags import Parser, prog
from commbench.numbers import byte_count, float_in, int_at_least
from commbench.report import buckets, doctor, html, measured, replays, strategy
from commbench.report.compare import compare, layouts, render, render_layouts
from commbench.report.plot import plot
from commbench.report.runs import ReportError, load_run
from commbench.table import output_failure

PROG = "report.py"


class _Parser(Parser):
    """Usage errors in one line, exit status 2 (as the suite's scripts)."""

    def error(self, message):
        print(f"{PROG}: error: {message} (see --help)", file=sys.stderr)
        sys.exit(2)


_at_least_1 = int_at_least(1)
_at_least_0 = int_at_least(0)
_positive = float_in(0, 1e15, "a positive number")
_percent = float_in(-1e-9, 100, "a percentage in [0, 100]")


def main(argv=None):
    """The command's exit status; a reader that closed stdout early (`| head`) ends it quietly,
    with status 0, as replay.py --dry-run does (commbench.table.output_failure)."""
    caches.keep_in_venv("MPLCONFIGDIR")  # matplotlib's font cache in the venv, not ~/.cache
    try:
        status = _main(argv)
        sys.stdout.flush()  # here, not at exit, where a closed pipe would print a traceback
        return status
    except BrokenPipeError as error:
        output_failure(error, sys.stdout, "the report")  # stdout is /dev/null from here on
        return 0


def _main(argv=None):
    parser = _Parser(prog=prog(PROG), description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    cmp = commands.add_parser("compare", help="compare two runs size by size (or, given one run of "
                                              "--groups, its layouts side by side)")
    cmp.add_argument("a")
    cmp.add_argument("b", nargs="?")
    cmp.add_argument("--threshold", type=_positive, default=1.10,
                     help="mark sizes where B/A exceeds this (default %(default)s)")
    cmp.add_argument("--noise-threshold", type=_percent, default=5.0, metavar="PERCENT",
                     help="with --repeat runs: a significant change smaller than this is called "
                          "noise (default %(default)s)")
    cmp.add_argument("--format", choices=("text", "markdown", "json"), default="text")
    page = commands.add_parser("html", help="one self-contained page of runs: what ran, tables, "
                                            "curves, verdicts (docs/report.md)")
    page.add_argument("runs", nargs="+", help="results files, saved tables, doctor.py, "
                                              "parallel_bench.py or replay.py runs")
    page.add_argument("-o", "--output", default="report.html",
                      help="the page (default %(default)s)")
    drawing = commands.add_parser("plot", help="bus bandwidth and latency curves of runs")
    drawing.add_argument("runs", nargs="+")
    drawing.add_argument("-o", "--output", default="curves.png",
                         help="PNG, or SVG/PDF by extension (default %(default)s)")
    plan = commands.add_parser("strategy", help="which parallel strategy the measured network "
                                                "affords for a model")
    plan.add_argument("results", help="a run of the suite (results file or saved table)")
    plan.add_argument("--params", help="model parameters: 7B, 350M, 1e9, ... (with --measured: "
                                       "the measured model's)")
    plan.add_argument("--measured", metavar="RUNS",
                      help="strategy runs of parallel_bench.py (--output): each held against "
                           "the estimate for the same model and ranks, and against DDP")
    plan.add_argument("--plot", metavar="PATH",
                      help="with --measured: step time (compute, exposed communication) and "
                           "memory per rank per strategy, drawn to PATH")
    plan.add_argument("--world-size", type=_at_least_1,
                      help="ranks (default: the run's world size)")
    plan.add_argument("--gpu-mem", type=_positive, default=80, help="GB per rank (default 80)")
    plan.add_argument("--bucket-mb", type=_positive, default=25,
                      help="DDP/ZeRO-1/2 gradient bucket, MiB (default 25)")
    plan.add_argument("--prefetch-mb", type=_positive, default=50,
                      help="ZeRO-3 message size, MiB (default 50)")
    for name in ("hidden", "layers", "seq"):
        plan.add_argument(f"--{name}", type=_at_least_0, default=0)
    plan.add_argument("--micro-batch", type=_at_least_1, default=1)
    plan.add_argument("--micro-batches", type=_at_least_1, default=1,
                      help="micro-batches per step (PP, TP)")
    plan.add_argument("--tp", type=_at_least_0, default=0,
                      help="also estimate tensor parallelism of this degree")
    plan.add_argument("--pp", type=_at_least_0, default=0,
                      help="also estimate this many pipeline stages")
    plan.add_argument("--stage3-max-live", type=_positive, default=1e9, metavar="ELEMENTS",
                      help="DeepSpeed's stage3_max_live_parameters: ZeRO-3 re-gathers the "
                           "parameters in backward only for a model beyond it (default 1e9)")
    plan.add_argument("--zero-bucket", type=_positive, default=5e8, metavar="ELEMENTS",
                      help="DeepSpeed's reduce_bucket_size / allgather_bucket_size for ZeRO-1/2 "
                           "(default 5e8)")
    plan.add_argument("--format", choices=("markdown", "json"), default="markdown")
    bucket = commands.add_parser("buckets", help="which gradient bucket size to use, from a "
                                                 "measured all_reduce curve")
    bucket.add_argument("results", help="a results file with an all_reduce --scan (with "
                                        "--overlap: the exposed time uses its overlap %%)")
    bucket.add_argument("--grad-mb", type=_positive, required=True,
                        help="gradient bytes per step, MiB (fp32: 4 x parameters / 2^20)")
    bucket.add_argument("--backward-ms", type=_positive,
                        help="backward time per step: buckets start as backward produces them")
    bucket.add_argument("--min-bucket", type=byte_count, metavar="BYTES",
                        help="the smallest bucket size to consider (8K, 1M, ...; default 1M, "
                             "DDP's smallest bucket, or a 16th of the gradients below 16 MiB)")
    bucket.add_argument("--plot", metavar="PATH", help="also draw both curves to PATH (PNG)")
    args = parser.parse_args(argv)
    try:
        if args.command == "strategy":
            print(_strategy(args))
        elif args.command == "buckets":
            advice = buckets.advise(args.results, args.grad_mb, args.backward_ms, args.min_bucket)
            print(buckets.render(advice))
            if args.plot:
                buckets.plot(advice, args.plot)
                print(f"{PROG}: wrote {args.plot}", file=sys.stderr)
        elif args.command == "compare" and args.b is None:
            try:
                print(render_layouts(layouts(load_run(args.a)), args.format))
            except ValueError as error:
                raise ReportError(str(error)) from None
        elif args.command == "html":
            written = html.write(args.runs, args.output)
            print(f"{PROG}: wrote {args.output} ({written / 1024:.0f} KiB)", file=sys.stderr)
        elif args.command == "compare" and replays.is_replay(args.a):
            if not replays.is_replay(args.b):
                raise ReportError(f"{args.a} is a replay (replay.py --output) and {args.b} is "
                                  "not: compare two replays of one trace")
            print(replays.render(replays.compare(args.a, args.b, args.noise_threshold / 100),
                                 args.format))
        elif args.command == "compare":
            print(render(compare(load_run(args.a), load_run(args.b), args.threshold,
                                 args.noise_threshold / 100), args.format))
        elif len(args.runs) == 1 and doctor.is_doctor_run(args.runs[0]):
            doctor.heatmap(args.runs[0], args.output)
            print(f"{PROG}: wrote {args.output}", file=sys.stderr)
        else:
            plot([load_run(path) for path in args.runs], args.output)
            print(f"{PROG}: wrote {args.output}", file=sys.stderr)
    except (ReportError, strategy.StrategyError) as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 1
    return 0


def _strategy(args):
    run = load_run(args.results)
    if args.measured:
        return _measured(args, run)
    if args.params is None:
        raise ReportError("give --params (the model's parameter count), or --measured RUNS")
    world_size = args.world_size or run.world_size
    if not world_size:
        raise ReportError(f"{args.results} does not say its world size: give --world-size")
    workload = strategy.Workload(
        params=strategy.parse_count(args.params), world_size=world_size, gpu_mem_gb=args.gpu_mem,
        bucket_bytes=args.bucket_mb * 2 ** 20, prefetch_bytes=args.prefetch_mb * 2 ** 20,
        hidden=args.hidden, layers=args.layers, seq=args.seq, micro_batch=args.micro_batch,
        tp=args.tp, pp=args.pp, micro_batches=args.micro_batches,
        stage3_max_live=args.stage3_max_live, zero_bucket_elements=args.zero_bucket)
    analysis = strategy.analyse(workload, strategy.Curves(run.ops), run.world_size)
    return strategy.render(analysis, args.format)


def _measured(args, run):
    meta, records = measured.load(args.measured)
    extra = {"bucket_bytes": args.bucket_mb * 2 ** 20} if args.bucket_mb != 25 else {}
    workload = measured.workload(meta, records, args.gpu_mem, **extra)
    if args.params:
        workload.params = strategy.parse_count(args.params)
    if run.world_size and run.world_size != workload.world_size:
        print(f"{PROG}: warning: the curves were measured on {run.world_size} ranks, the "
              f"strategies on {workload.world_size}", file=sys.stderr)
    analysis = measured.analyse(meta, records, strategy.Curves(run.ops), workload)
    if args.plot:
        measured.plot(analysis, args.plot)
        print(f"{PROG}: wrote {args.plot}", file=sys.stderr)
    return measured.render(analysis, "json" if args.format == "json" else "markdown")

