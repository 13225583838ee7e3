"""From numbers to decisions: compare two runs of the suite (or an nccl-tests run).

  python report.py compare A B [--threshold 1.10] [--format text|markdown|json]
  python report.py plot A [B ...] -o curves.png
  python report.py strategy RESULTS --params 7B [--world-size N] [--gpu-mem 80] ...

A and B are result files of `--output` (.jsonl, .json, .csv), saved stdout of the suite
(a tee'd table, --raw or not, several ops in one file), or nccl-tests text output.
Standard library only, but for `plot` (matplotlib, imported when plotting).
"""

import argparse
import json
import math
import os
import re
import sys
from dataclasses import dataclass, field

import results
import strategy

PROG = "report.py"
SMALL = 64 * 1024  # below: latency-bound messages
LARGE = 1024 * 1024  # from here: bandwidth-bound messages
OPS = ("all_reduce", "all_gather", "all_to_all", "reduce_scatter", "pt2pt", "broadcast")


class ReportError(Exception):
    """A file that cannot be read or understood: one line, exit 1."""


@dataclass
class Measurement:
    size: int  # bytes per rank, as the suite's Size column
    duration: float  # seconds
    busbw: float  # bytes per second


@dataclass
class Run:
    path: str
    label: str
    world_size: object = None
    dtype: object = None
    ops: dict = field(default_factory=dict)  # op -> {size: Measurement}


# --------------------------------------------------------------------------- reading runs

def load_run(path):
    """Any of the formats above, recognised by extension or content."""
    try:
        with open(path, errors="replace") as handle:
            text = handle.read()
    except OSError as error:
        raise ReportError(f"cannot read {path}: {error.strerror}") from None
    try:
        kind = results.output_format(path)
    except results.ResultsError:
        kind = None
    if kind:
        return _from_results(path)
    if "---- Performance of" in text:
        return _from_table(path, text)
    if re.search(r"^\s*#\s*size\s+count\s+type", text, re.M) or "nccl-tests" in text.lower():
        return _from_nccl_tests(path, text)
    raise ReportError(f"{path}: neither a results file, a saved table of this suite, nor "
                      "nccl-tests output")


def _label(meta, path):
    if meta.get("dist"):
        layer = "deepspeed.comm" if meta["dist"] == "deepspeed" else "torch.distributed"
        return f"{layer} {meta.get('backend', '')} n={meta.get('world_size', '?')}".strip()
    return os.path.basename(path)


def _from_results(path):
    try:
        meta, records = results.read(path)
    except (ValueError, KeyError) as error:
        raise ReportError(f"{path}: not a readable results file ({error})") from None
    world_sizes = {r["world_size"] for r in records}
    dtypes = {r.get("dtype") or meta.get("dtype") for r in records}
    run = Run(path, _label(meta or (records[0] if records else {}), path),
              world_sizes.pop() if len(world_sizes) == 1 else None,
              dtypes.pop() if len(dtypes) == 1 else None)
    for r in records:
        run.ops.setdefault(r["op"], {})[r["size_bytes"]] = Measurement(
            r["size_bytes"], r["duration_s"], r["busbw_Bps"])
    return run


HEADER = re.compile(r"^---- Performance of (\w+) on (\d+) devices")


def _from_table(path, text):
    """Saved stdout: sizes from the Description (exact E x element size), durations and busbw
    converted back to seconds and bytes/s from the header's units."""
    run, op, raw, scale, world = Run(path, os.path.basename(path)), None, False, 8, set()
    for line in text.splitlines():
        header = HEADER.match(line)
        if header:
            op = header.group(1)
            if op != "pt2pt":  # pt2pt's header always says 2 devices
                world.add(int(header.group(2)))
            continue
        if line.startswith("Size (Bytes)"):
            raw = "Duration (us)" in line
            scale = 8 if "(Gbps)" in line else 1
            continue
        fields = line.split()
        if op is None or len(fields) < 5 or not re.fullmatch(r"\d+x\d+", fields[1 if raw else 2]):
            continue
        if raw:
            description, duration, busbw = fields[1], float(fields[2]) * 1e-6, float(fields[4])
        else:
            description = fields[2]
            value, unit = float(fields[3]), fields[4]
            duration = value * (1e-3 if unit == "ms" else 1e-6)
            busbw = float(fields[6])
        numel, element_size = map(int, description.split("x"))
        size = numel * element_size
        run.ops.setdefault(op, {})[size] = Measurement(size, duration, busbw * 1e9 / scale)
    run.world_size = world.pop() if len(world) == 1 else None
    if not run.ops:
        raise ReportError(f"{path}: no table rows found")
    return run


def _from_nccl_tests(path, text):
    """nccl-tests: `size count type redop root time algbw busbw #wrong` out-of-place, then the
    same in place; `#` lines are comments. The op comes from the file or its name."""
    named = re.search(r"(all_reduce|all_gather|alltoall|all_to_all|reduce_scatter|broadcast|"
                      r"sendrecv)", text + " " + os.path.basename(path))
    if not named:
        raise ReportError(f"{path}: nccl-tests output, but which collective? name the file "
                          "after it (e.g. all_reduce_perf.txt)")
    op = {"alltoall": "all_to_all", "sendrecv": "pt2pt"}.get(named.group(1), named.group(1))
    ranks = len(re.findall(r"^#\s+Rank\s+\d+", text, re.M)) or None
    run = Run(path, f"nccl-tests n={ranks or '?'}", ranks)
    for line in text.splitlines():
        fields = line.split()
        if not fields or line.lstrip().startswith("#") or not fields[0].isdigit():
            continue
        try:
            size, dtype = int(fields[0]), fields[2]
            time_us, busbw_gbs = float(fields[5]), float(fields[7])
        except (IndexError, ValueError):
            continue
        run.dtype = dtype
        if op == "all_gather" and ranks:
            size //= ranks  # nccl-tests counts the gathered output; the suite the input per rank
        run.ops.setdefault(op, {})[size] = Measurement(size, time_us * 1e-6, busbw_gbs * 1e9)
    if not run.ops:
        raise ReportError(f"{path}: no nccl-tests data rows found")
    return run


# --------------------------------------------------------------------------- comparing

def geometric_mean(values):
    values = [v for v in values if v > 0]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def _percent(ratio):
    return f"{(ratio - 1) * 100:+.0f}%"


def verdict(op, small, large, label_b):
    """One sentence: where B is slower than A."""
    def part(ratio, where):
        if ratio is None:
            return f"no {where} messages to compare"
        if ratio > 1.02:
            return f"adds {(ratio - 1) * 100:.0f}% at {where} messages"
        if ratio < 0.98:
            return f"is {(1 - ratio) * 100:.0f}% faster at {where} messages"
        return f"adds nothing at {where} messages"
    return f"{op}: {label_b} {part(small, 'small')}, {part(large, 'large')}."


def compare(a, b, threshold):
    """The comparison as data: per op rows, ratios, one-sided sizes, verdicts, warnings."""
    warnings = []
    if a.world_size and b.world_size and a.world_size != b.world_size:
        warnings.append(f"world sizes differ: {a.world_size} ({a.label}) vs {b.world_size} "
                        f"({b.label})")
    if a.dtype and b.dtype and a.dtype != b.dtype:
        warnings.append(f"dtypes differ: {a.dtype} ({a.label}) vs {b.dtype} ({b.label})")
    ops = []
    for op in [o for o in OPS if o in a.ops or o in b.ops] + \
            sorted(o for o in set(a.ops) | set(b.ops) if o not in OPS):
        mine, theirs = a.ops.get(op, {}), b.ops.get(op, {})
        rows = []
        for size in sorted(set(mine) & set(theirs)):
            x, y = mine[size], theirs[size]
            ratio = y.duration / x.duration if x.duration > 0 else None
            rows.append({"size": size, "duration_a": x.duration, "duration_b": y.duration,
                         "ratio": ratio, "busbw_a": x.busbw, "busbw_b": y.busbw,
                         "slower": ratio is not None and ratio > threshold})
        small = geometric_mean([r["ratio"] for r in rows if r["size"] < SMALL and r["ratio"]])
        large = geometric_mean([r["ratio"] for r in rows if r["size"] >= LARGE and r["ratio"]])
        ops.append({"op": op, "rows": rows, "small_ratio": small, "large_ratio": large,
                    "only_a": sorted(set(mine) - set(theirs)),
                    "only_b": sorted(set(theirs) - set(mine)),
                    "verdict": verdict(op, small, large, b.label) if rows else
                    f"{op}: no message size in both runs."})
    return {"a": a.label, "b": b.label, "threshold": threshold, "warnings": warnings, "ops": ops}


def human_size(size):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:g} {unit}" if unit == "B" else f"{size:.4g} {unit}"
        size /= 1024


def _us(seconds):
    return f"{seconds * 1e6:.3f}"


def render(report, form):
    if form == "json":
        return json.dumps(report, indent=1)
    lines = [f"A: {report['a']}", f"B: {report['b']}"]
    lines += [f"WARNING: {w}" for w in report["warnings"]]
    heads = ["size", "duration A (us)", "duration B (us)", "B/A", "busbw A (GB/s)",
             "busbw B (GB/s)"]
    for op in report["ops"]:
        table = [[human_size(r["size"]), _us(r["duration_a"]), _us(r["duration_b"]),
                  (f"{r['ratio']:.3f}" if r["ratio"] else "-") + (" *" if r["slower"] else ""),
                  f"{r['busbw_a'] / 1e9:.3f}", f"{r['busbw_b'] / 1e9:.3f}"] for r in op["rows"]]
        lines.append("")
        if form == "markdown":
            lines += [f"### {op['op']}", "", "| " + " | ".join(heads) + " |",
                      "|" + "---|" * len(heads)]
            lines += ["| " + " | ".join(row) + " |" for row in table]
            lines.append("")
        else:
            lines.append(f"---- {op['op']}")
            widths = [max(len(h), *(len(row[i]) for row in table)) if table else len(h)
                      for i, h in enumerate(heads)]
            lines.append("  ".join(h.rjust(w) for h, w in zip(heads, widths)))
            lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in table]
        means = [f"geometric mean B/A: small (< 64 KiB) "
                 f"{op['small_ratio']:.3f}" if op["small_ratio"] else "small: -",
                 f"large (>= 1 MiB) {op['large_ratio']:.3f}" if op["large_ratio"] else "large: -"]
        lines.append(", ".join(means))
        for side, sizes in (("A", op["only_a"]), ("B", op["only_b"])):
            if sizes:
                lines.append(f"only in {side}: {', '.join(map(human_size, sizes))}")
        lines.append(op["verdict"])
    lines.append(f"(* B/A above {report['threshold']:g})")
    return "\n".join(lines)


# --------------------------------------------------------------------------- plotting

def _byte_label(value, _position=None):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:g} {unit}"
        value /= 1024


def plot(runs, output):
    """One figure: a row per op, bus bandwidth vs size (log2 x) beside latency vs size
    (log-log), one line per run. Returns the matplotlib Figure (saved to `output`)."""
    import matplotlib
    matplotlib.use("Agg")  # headless: no display needed
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    ops = [op for op in OPS if any(op in run.ops for run in runs)]
    ops += sorted({op for run in runs for op in run.ops} - set(ops))
    if not ops:
        raise ReportError("nothing to plot: the runs hold no measurements")
    figure, axes = plt.subplots(len(ops), 2, figsize=(12, 3.4 * len(ops)), squeeze=False)
    for (bandwidth, latency), op in zip(axes, ops):
        for run in runs:
            data = run.ops.get(op)
            if not data:
                continue
            sizes = sorted(data)
            bandwidth.plot(sizes, [data[s].busbw / 1e9 for s in sizes], marker=".",
                           label=run.label)
            latency.plot(sizes, [data[s].duration * 1e6 for s in sizes], marker=".",
                         label=run.label)
        bandwidth.set_xscale("log", base=2)
        latency.set_xscale("log", base=2)
        latency.set_yscale("log")
        for axis, what in ((bandwidth, "bus bandwidth (GB/s)"), (latency, "latency (us)")):
            axis.xaxis.set_major_formatter(FuncFormatter(_byte_label))
            axis.set_xlabel("message size per rank")
            axis.set_ylabel(what)
            axis.set_title(f"{op}: {what.split(' (')[0]}")
            axis.grid(True, which="major", alpha=0.3)
            axis.legend(fontsize="small")
    figure.tight_layout()
    try:
        figure.savefig(output)
    except (OSError, ValueError) as error:
        raise ReportError(f"cannot write {output}: {error}") from None
    return figure


# --------------------------------------------------------------------------- command line

def main(argv=None):
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    cmp = commands.add_parser("compare", help="compare two runs size by size")
    cmp.add_argument("a")
    cmp.add_argument("b")
    cmp.add_argument("--threshold", type=float, default=1.10,
                     help="mark sizes where B/A exceeds this (default %(default)s)")
    cmp.add_argument("--format", choices=("text", "markdown", "json"), default="text")
    drawing = commands.add_parser("plot", help="bus bandwidth and latency curves of runs")
    drawing.add_argument("runs", nargs="+")
    drawing.add_argument("-o", "--output", default="curves.png",
                         help="PNG, or SVG/PDF by extension (default %(default)s)")
    plan = commands.add_parser("strategy", help="which parallel strategy the measured network "
                                                "affords for a model")
    plan.add_argument("results", help="a run of the suite (results file or saved table)")
    plan.add_argument("--params", required=True, help="model parameters: 7B, 350M, 1e9, ...")
    plan.add_argument("--world-size", type=int, help="ranks (default: the run's world size)")
    plan.add_argument("--gpu-mem", type=float, default=80, help="GB per rank (default 80)")
    plan.add_argument("--bucket-mb", type=float, default=25,
                      help="DDP/ZeRO-1/2 gradient bucket, MiB (default 25)")
    plan.add_argument("--prefetch-mb", type=float, default=50,
                      help="ZeRO-3 message size, MiB (default 50)")
    for name in ("hidden", "layers", "seq"):
        plan.add_argument(f"--{name}", type=int, default=0)
    plan.add_argument("--micro-batch", type=int, default=1)
    plan.add_argument("--micro-batches", type=int, default=1,
                      help="micro-batches per step (PP, TP)")
    plan.add_argument("--tp", type=int, default=0, help="also estimate tensor parallelism of this degree")
    plan.add_argument("--pp", type=int, default=0, help="also estimate this many pipeline stages")
    plan.add_argument("--format", choices=("markdown", "json"), default="markdown")
    args = parser.parse_args(argv)
    try:
        if args.command == "strategy":
            print(_strategy(args))
        elif args.command == "compare":
            print(render(compare(load_run(args.a), load_run(args.b), args.threshold),
                         args.format))
        else:
            plot([load_run(path) for path in args.runs], args.output)
            print(f"{PROG}: wrote {args.output}", file=sys.stderr)
    except (ReportError, strategy.StrategyError) as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 1
    return 0


def _strategy(args):
    run = load_run(args.results)
    world_size = args.world_size or run.world_size
    if not world_size:
        raise ReportError(f"{args.results} does not say its world size: give --world-size")
    workload = strategy.Workload(
        params=strategy.parse_count(args.params), world_size=world_size, gpu_mem_gb=args.gpu_mem,
        bucket_bytes=args.bucket_mb * 2 ** 20, prefetch_bytes=args.prefetch_mb * 2 ** 20,
        hidden=args.hidden, layers=args.layers, seq=args.seq, micro_batch=args.micro_batch,
        tp=args.tp, pp=args.pp, micro_batches=args.micro_batches)
    analysis = strategy.analyse(workload, strategy.Curves(run.ops), run.world_size)
    return strategy.render(analysis, args.format)


if __name__ == "__main__":
    sys.exit(main())
