"""parallel_bench.py's output: the table rank 0 prints, row by row, and the JSON lines it
writes (a meta record, then one record a strategy, each on disk as it is measured, so that a run
that dies keeps what it measured: results.LinesWriter, by the suite's rules for every results
file)."""

from ..records import provenance, results
from .. import units
from ..errors import BenchmarkError
from ..table import note, print_rank_0

COLUMNS = (("strategy", 9), ("step (median)", 14), ("spread (min-max)", 24), ("samples/s", 11),
           ("tokens/s", 11), ("peak mem/rank", 14), ("exposed comm", 13), ("comm per step", 0))


def _cells(values):
    return " ".join(value.ljust(width) if width else value
                    for value, (_, width) in zip(values, COLUMNS)).rstrip()


def table_header(run):
    args, comm = run.args, run.comm
    title = (f"---- Parallel strategies on {comm.world_size} ranks: {run.model_config.params:,} "
             f"parameters (hidden {args.hidden}, layers {args.layers}, heads {args.heads}, vocab "
             f"{args.vocab}, seq {args.seq}), micro-batch {args.micro_batch} x "
             f"{args.micro_batches}, {args.dtype}{_config_words(run)} ")
    return [title.ljust(110, "-"), _cells([title for title, _ in COLUMNS]), "-" * 110]


def _config_words(run):
    if run.user is None:
        return ""
    return f", DeepSpeed config {run.user.path} (sha256 {run.user.sha256[:12]})"


SWEEP_COLUMNS = (("strategy", 9), ("step (mean [95% CI])", 36),
                 ("exposed comm (mean [95% CI])", 36), ("comm per step (mean [95% CI])", 0))


def _ci(triple, form):
    mean, low, high = triple
    return f"{form(mean)} [{form(max(0.0, low))}, {form(high)}]"


def sweep_header(run):
    key, width = run.user.sweep_key, max(len(run.user.sweep_key), 8) + 2
    title = (f"---- {key} swept on {run.comm.world_size} ranks: {run.model_config.params:,} "
             f"parameters, micro-batch {run.args.micro_batch} x {run.args.micro_batches}, "
             f"{run.args.dtype}{_config_words(run)} ")
    cells = [key.ljust(width)] + [t.ljust(w) if w else t for t, w in SWEEP_COLUMNS]
    return [title.ljust(110, "-"), " ".join(cells).rstrip(), "-" * 110], width


def sweep_row(run, record, figures, width):
    label = record["ds_config"]["sweep_value"]
    if label == run.user.own_label():
        label += " (file)"
    values = [label.ljust(width), record["strategy"].ljust(9),
              _ci(figures["step_s"], units.duration).ljust(36),
              _ci(figures["exposed_comm_s"], units.duration).ljust(36),
              _ci(figures["bytes_per_step"], units.size)]
    return " ".join(values).rstrip()


def report_sweep(run, record, figures=None):
    """A sweep's row (record a strategy record, figures its intervals), or its verdict (record
    the ds_config_sweep record): rank 0 prints it, the results file gets the record (with the
    intervals)."""
    comm = run.comm
    if figures is None:
        print_rank_0(comm, record["sentence"])
    else:
        header, width = sweep_header(run)
        if not run.header_printed:
            for line in header:
                print_rank_0(comm, line)
            run.header_printed = True
        print_rank_0(comm, sweep_row(run, record, figures, width))
        record = dict(record, sweep_figures={k: list(v) for k, v in figures.items()})
    _write(run, record)


def table_row(record):
    spread = record["step_time_s"]
    ops = ", ".join(f"{op} {units.size(figures['bytes'])} ({figures['calls']:g} call"
                    f"{'' if figures['calls'] == 1 else 's'})"
                    for op, figures in record["comm"].items()) or "none"
    return _cells([record["strategy"], units.duration(spread["median"]),
                   f"{units.duration(spread['min'])} - {units.duration(spread['max'])}",
                   f"{record['samples_per_s']:.1f}", f"{record['tokens_per_s']:.0f}",
                   units.size(max(record["peak_memory_bytes_per_rank"])),
                   units.duration(record["exposed_comm_s"]), ops])


def meta(run):
    args, comm = run.args, run.comm
    return {"type": "meta", "kind": "strategies", **provenance.placed(comm),
            "model": {"params": run.model_config.params, "hidden": args.hidden,
                      "layers": args.layers, "heads": args.heads, "vocab": args.vocab,
                      "seq": args.seq, "micro_batch": args.micro_batch,
                      "micro_batches": args.micro_batches, "dtype": args.dtype,
                      "element_size": run.dtype.itemsize},
            "steps": args.steps, "warmup": args.warmup,
            **({"ds_config": run.user.identity()} if run.user is not None else {}),
            **provenance.stamped(installed_deepspeed=True)}


def open_output(run):
    """Rank 0 opens --output (an existing file is kept: PATH.1, ..., unless --overwrite); every
    rank learns whether it could."""
    failure, asked = None, run.args.output
    if run.comm.global_rank == 0 and asked:
        try:
            run.writer = results.open_lines(asked, run.args.overwrite, meta(run))
        except (OSError, BenchmarkError) as error:
            failure = f"cannot write --output {asked}: {getattr(error, 'strerror', None) or error}"
        else:
            if run.writer.path != asked:
                note(run.comm, f"{asked} exists; writing {run.writer.path} (--overwrite "
                               "replaces it)")
    if run.comm.any_rank(failure is not None):
        raise BenchmarkError(failure or "rank 0 cannot write the results file")
    from ..records.outputs import beside  # --db, --prometheus: the strategy rows there too
    run.writer = beside(run.writer, run.args, run.comm, lambda: meta(run))


def report(run, record):
    comm = run.comm
    if not run.header_printed:
        for line in table_header(run):
            print_rank_0(comm, line)
        run.header_printed = True
    print_rank_0(comm, table_row(record))
    _write(run, record)


def _write(run, record):
    comm = run.comm
    if run.writer is not None:
        try:
            run.writer.write(record)
        except OSError as error:
            comm.stop_on(BenchmarkError(f"cannot write --output {run.writer.path}: "
                                        f"{error.strerror or error}", rank_local=True))
