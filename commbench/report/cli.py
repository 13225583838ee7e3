"""From numbers to decisions: compare two runs of the suite (or an nccl-tests run).

  python report.py compare A B [--threshold 1.10] [--noise-threshold 5]
                               [--format text|markdown|json]
  python report.py compare RUN      (a run of --groups: its layouts side by side)
  python report.py compare R1 R2    (two replays of one trace, replay.py --output: call by call)
  python report.py plot A [B ...] -o curves.png     (a doctor.py run: its pair heatmaps)
  python report.py html A [B ...] -o report.html    (one self-contained page of runs)
  python report.py strategy RESULTS --params 7B [--world-size N] [--gpu-mem 80] ...
  python report.py strategy RESULTS --measured RUNS [--plot strategies.png]
  python report.py buckets RESULTS --grad-mb G [--backward-ms T] [--plot buckets.png]
  python report.py trials RUN [--spike-factor 2] [--plot trials.png]   (a run of --per-trial)
  python report.py import FILES --db URL [--tag T]   (results files into the results database)
  python report.py history --db URL [--tag T] [--op OP] [--since DATE] [--plot trend.png]

A and B are result files of `--output` (.jsonl, .json, .csv), saved stdout of the suite
(a tee'd table, --raw or not, several ops in one file), or nccl-tests text output.
Standard library only, but for `plot` and `html` (matplotlib, and Jinja2, imported when used).
"""

import os
import sys

from commbench import caches
from commbench import units
from commbench.flags import Parser, prog
from commbench.numbers import byte_count, float_in, int_at_least
from commbench.report import bound, buckets, history, html, measured, strategy
from commbench.report import trials, trials_text
from commbench.report.compare import compare, render
from commbench.report.kinds import kind_of, load_run, records_of
from commbench.report.layouts import layouts, render_layouts
from commbench.report.plot import plot
from commbench.report.runs import ReportError, ReportUsageError
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


def _compare_flags(commands):
    """report.py compare A [B]: two runs size by size, or one run's layouts."""
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
    cmp.add_argument("--db", metavar="URL",
                     help="two single runs: judge them against the run-to-run spread of the "
                          "database's runs of the same configuration (docs/history.md)")


def _html_flags(commands):
    """report.py html RUNS: one self-contained page."""
    page = commands.add_parser("html", help="one self-contained page of runs: what ran, tables, "
                                            "curves, verdicts (docs/report.md)")
    page.add_argument("runs", nargs="*", help="results files, saved tables, doctor.py, "
                                              "parallel_bench.py or replay.py runs")
    page.add_argument("-o", "--output", default="report.html",
                      help="the page (default %(default)s)")
    page.add_argument("--db", metavar="URL",
                      help="a history section: report.py history's trends of this results "
                           "database, with their plot (docs/history.md)")
    page.add_argument("--tag", help="with --db: only the runs of this --tag")


def _plot_flags(commands):
    """report.py plot RUNS: the curves (a doctor.py run: its heat map)."""
    drawing = commands.add_parser("plot", help="bus bandwidth and latency curves of runs")
    drawing.add_argument("runs", nargs="+")
    drawing.add_argument("-o", "--output", default="curves.png",
                         help="PNG, or SVG/PDF by extension (default %(default)s)")


def _strategy_flags(commands):
    """report.py strategy RESULTS: the parallel strategies the network affords."""
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


def _buckets_flags(commands):
    """report.py buckets RESULTS: the gradient bucket size to use."""
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


def _trials_flags(commands):
    """report.py trials RUN: a --per-trial run trial by trial."""
    per_trial = commands.add_parser("trials", help="a --per-trial run trial by trial: the first "
                                                   "trial, spikes and their period, stragglers, "
                                                   "drift (docs/trials.md)")
    per_trial.add_argument("run", help="a results file of a run with --per-trial")
    per_trial.add_argument("--spike-factor", type=float_in(1, 1e6, "a factor above 1"),
                           default=2.0, help="a spike: a trial over this many times the steady "
                                             "median (default %(default)s)")
    per_trial.add_argument("--plot", metavar="PATH",
                           help="also draw trial time against trial number per rank to PATH")


def _import_flags(commands):
    """report.py import FILES: results files into the database."""
    loading = commands.add_parser("import", help="load results files written before into the "
                                                 "results database (docs/history.md)")
    loading.add_argument("files", nargs="+", help="results files (.jsonl, .json, .csv)")
    loading.add_argument("--db", metavar="URL", help="an SQLite path or postgresql://... "
                                                     "(default: $COMMBENCH_DB)")
    loading.add_argument("--tag", metavar="TAG", help="the runs' tag (the cluster, the experiment)")


def _history_flags(commands):
    """report.py history: each series run by run, and where it changed."""
    trend = commands.add_parser("history", help="each op's figure run by run from the results "
                                                "database, and where it changed")
    trend.add_argument("--db", metavar="URL", help="an SQLite path or postgresql://... "
                                                   "(default: $COMMBENCH_DB)")
    trend.add_argument("--tag", metavar="TAG", help="only the runs of this --tag")
    trend.add_argument("--op", action="append", metavar="OP",
                       help="only this op (again for more)")
    trend.add_argument("--since", metavar="DATE",
                       help="only runs started at or after DATE (2026-12-01, 2026-12-01T08:00)")
    trend.add_argument("--last", type=_at_least_0, default=20, metavar="N",
                       help="print the last N runs of each series (0: all; default %(default)s); "
                            "the verdict weighs them all")
    trend.add_argument("--plot", metavar="PATH", help="draw the trends, changes marked, to PATH")
    trend.add_argument("--format", choices=("text", "json"), default="text")


def parser():
    """report.py's parser: a subcommand each (_<command>_flags)."""
    made = _Parser(prog=prog(PROG), description=__doc__.split("\n")[0])
    commands = made.add_subparsers(dest="command", required=True)
    for flags in (_compare_flags, _html_flags, _plot_flags, _strategy_flags, _buckets_flags,
                  _trials_flags, _import_flags, _history_flags):
        flags(commands)
    return made


def _run_trials(args):
    records_of(args.run, "trials", ("results", "replay", "strategies"))
    sizes = trials.analyse(args.run, args.spike_factor)
    print(trials_text.render(sizes))
    if args.plot:
        trials.plot(sizes, args.plot)
        print(f"{PROG}: wrote {args.plot}", file=sys.stderr)


def _run_import(args):
    count = history.import_files(args.files, args.db, args.tag)
    print(f"{PROG}: imported {count} run{'' if count == 1 else 's'}", file=sys.stderr)


def _run_buckets(args):
    records_of(args.results, "buckets", ("results",))
    advice = buckets.advise(args.results, args.grad_mb, args.backward_ms, args.min_bucket)
    print(buckets.render(advice))
    if args.plot:
        buckets.plot(advice, args.plot)
        print(f"{PROG}: wrote {args.plot}", file=sys.stderr)


def _run_html(args):
    written = html.write(args.runs, args.output, db=args.db, tag=args.tag)
    print(f"{PROG}: wrote {args.output} ({units.size(written)})", file=sys.stderr)


def _run_compare(args):
    """Two runs size by size (or what A's kind compares instead: two replays); one run of
    --groups: its layouts."""
    if args.b is None:
        try:
            print(render_layouts(layouts(load_run(args.a)), args.format))
        except ValueError as error:
            raise ReportError(str(error)) from None
        return
    compared = kind_of(args.a).compare
    if compared:
        print(compared(args.a, args.b, args.noise_threshold / 100, args.format))
        return
    report = compare(load_run(args.a), load_run(args.b), args.threshold,
                     args.noise_threshold / 100)
    if not report["repeated"]:
        report = _single_runs(report, args)
    # each run against its bound (--peak), where it has one (report/bound.py)
    said = bound.lines(load_run(args.a)) + bound.lines(load_run(args.b))
    if args.format == "json":
        report["bound"] = said
    print(render(report, args.format))
    for line in [] if args.format == "json" else said:
        print(f"\n{line}" if args.format == "text" else f"\n- {line}")


def _run_plot(args):
    """The runs' curves; a file given alone whose kind draws itself (a doctor.py run's
    heatmaps): that drawing."""
    alone = kind_of(args.runs[0]).plot if len(args.runs) == 1 else None
    if alone:
        alone(args.runs[0], args.output)
    else:
        plot([load_run(path) for path in args.runs], args.output)
    print(f"{PROG}: wrote {args.output}", file=sys.stderr)


# Each command's arguments that name files it reads (a path, or a list of them).
INPUTS = {"compare": ("a", "b"), "html": ("runs",), "plot": ("runs",),
          "strategy": ("results", "measured"), "buckets": ("results",), "trials": ("run",),
          "import": ("files",)}


def newer_beside(path):
    """(the newest `PATH.N` beside `path`, PATH), N above M when `path` is PATH.M: a run given
    --output PATH found a file there and wrote PATH.N, so the run the user has in mind may be
    that one. None when there is none."""
    base, own = path, 0
    head, dot, tail = path.rpartition(".")
    if dot and tail.isdigit() and head:
        base, own = head, int(tail)
    folder = os.path.dirname(base) or "."
    name = os.path.basename(base)
    try:
        entries = os.listdir(folder)
    except OSError:
        return None
    numbers = [int(entry[len(name) + 1:]) for entry in entries
               if entry.startswith(name + ".") and entry[len(name) + 1:].isdigit()]
    newer = [n for n in numbers if n > own]
    return (os.path.join(os.path.dirname(base), f"{name}.{max(newer)}"), base) if newer else None


def warn_newer_inputs(args):
    """One warning per input file that has a newer PATH.N beside it, naming that file."""
    for name in INPUTS.get(args.command, ()):
        given = getattr(args, name, None)
        for path in given if isinstance(given, list) else [given]:
            found = newer_beside(path) if path and os.path.isfile(path) else None
            if found:
                newer, base = found
                print(f"{PROG}: warning: {path} has a newer run beside it, {newer} (a later run "
                      f"given --output {base} wrote it and kept {base}); this reads {path}",
                      file=sys.stderr)


RUNS = {"compare": _run_compare, "html": _run_html, "plot": _run_plot,
        "strategy": lambda args: print(_strategy(args)), "buckets": _run_buckets,
        "trials": _run_trials, "import": _run_import, "history": lambda args: history.show(args)}


def _main(argv=None):
    made = parser()
    args = made.parse_args(argv)
    if args.command == "html" and not args.runs and not args.db:
        made.error("html: give results files, --db URL, or both")
    warn_newer_inputs(args)
    try:
        RUNS[args.command](args)
    except (ReportError, strategy.StrategyError) as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 2 if isinstance(error, ReportUsageError) else 1
    return 0


def _single_runs(report, args):
    """Two runs of one window each: against the database's run-to-run spread with --db; else
    as compare() left them, the ratios and what would let it judge."""
    if not args.db:  # each op's verdict line says what would let it judge
        return report
    from commbench.records import results
    try:
        meta = results.read_all(args.a)[0]
    except (OSError, ValueError, KeyError, results.ResultsError):
        raise ReportError(f"--db: {args.a} is no results file (--output) that says its "
                          "configuration") from None
    return history.with_run_to_run(report, history.run_to_run(args.db, meta))


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
    # a results file of the op scripts: measured.load's own line (no strategy runs in it)
    records_of(args.measured, "strategy --measured", ("strategies", "results"),
               reads="a parallel_bench.py run")
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

