"""`python -m commbench COMMAND [FLAGS]` and the `commbench` command: each COMMAND is the
top-level script of that name (all_reduce, ..., run_all, doctor, replay, report,
parallel_bench), with its flags, output and exit status.

DeepSpeed's launcher puts `--local_rank=N` right after the module (`python -u -m commbench
--local_rank=0 run_all --scan`): a rank flag before COMMAND is handed to COMMAND."""

import sys

from . import __version__, defaults

# What each command is, for `commbench --help` (the ops: defaults.OPS, each its own line).
SCRIPTS = {
    "run_all": "the selected ops in one process group (run_all.py)",
    "doctor": "the cluster check: which host, link or switch is slow (doctor.py)",
    "replay": "replay a recorded job's communication (replay.py)",
    "report": "compare, plot, html, strategy and buckets reports of results (report.py)",
    "parallel_bench": "DDP, ZeRO-1/2/3, TP and PP measured on a small transformer "
                      "(parallel_bench.py)",
}
_RANK_FLAGS = ("--local_rank", "--local-rank")


def usage():
    lines = [f"usage: commbench COMMAND [FLAGS]   (commbench {__version__}; also python -m "
             "commbench)", "", "Collective communication measured through deepspeed.comm or "
             "torch.distributed. COMMAND --help gives its flags.", "", "the ops:"]
    lines += [f"  {op:<16} one op (as {op}.py)" for op in defaults.OPS]
    lines += ["", "the scripts:"] + [f"  {name:<16} {text}" for name, text in SCRIPTS.items()]
    return "\n".join(lines)


def split(argv):
    """(COMMAND, its flags): rank flags given before COMMAND move after it."""
    moved, rest = [], list(argv)
    while rest and rest[0].split("=", 1)[0] in _RANK_FLAGS:
        flag = rest.pop(0)
        moved.append(flag)
        if "=" not in flag and rest:
            moved.append(rest.pop(0))
    if not rest:
        return None, moved
    return rest[0], rest[1:] + moved


def _run(command, argv):
    """Run COMMAND as its script would; returns its exit status."""
    if command in defaults.OPS or command == "run_all":  # entry.cli exits with the status
        import functools

        from .bench import harness
        from . import ops, run_all
        from .entry import cli
        run = run_all.run if command == "run_all" else \
            functools.partial(harness.run_op, ops.descriptor(command))
        cli(run, argv)
    if command == "doctor":
        from .doctor.run import command as doctor
        return doctor(argv)
    if command == "replay":
        from .trace.replay import main as replay
        return replay(argv)
    if command == "report":
        from .report.cli import main as report
        return report(argv)
    from .strategies.bench import main as parallel_bench
    return parallel_bench(argv)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    command, rest = split(argv)
    if command is None:
        print(usage(), file=sys.stderr)
        return 2
    if command in ("-h", "--help", "help"):
        print(usage())
        return 0
    if command == "--version":
        print(f"commbench {__version__}")
        return 0
    if command not in defaults.OPS and command not in SCRIPTS:
        print(f"commbench: error: unknown command '{command}'; one of: "
              f"{', '.join(list(defaults.OPS) + list(SCRIPTS))} (see commbench --help)",
              file=sys.stderr)
        return 2
    # As the process was started (its usage lines say `commbench COMMAND`: flags.prog), with the
    # rank flags where the command reads them.
    sys.argv = sys.argv[:1] + [command] + rest
    return _run(command, rest)


def console():
    """The `commbench` console command."""
    sys.exit(main())
