"""`report.py plot`: bus bandwidth and latency against message size, one line per run.
matplotlib is imported only here, when a plot is asked for."""

from .. import units
from .bound import reaches, series
from .runs import ReportError, bandwidth, bandwidth_label, op_order


def byte_label(value, _position=None):
    """An axis tick in bytes a person reads: 512 B, 64 KiB, 16 MiB (matplotlib's formatter)."""
    return units.size(value)


def pyplot():
    """matplotlib.pyplot, headless (the Agg backend: no display needed)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def save(figure, output):
    """figure saved to `output`, or one ReportError line saying why it cannot be."""
    try:
        figure.savefig(output)
    except (OSError, ValueError) as error:
        raise ReportError(f"cannot write {output}: {error}") from None


def _bound(axis, run, op, color):
    """The run's bound (--peak) beside its curve: dashed, in its colour, its best fraction
    marked at the row that reaches it (report/bound.py)."""
    sizes, bound = series(run, op)
    if not sizes:
        return
    axis.plot(sizes, bound, linestyle="--", color=color, alpha=0.7,
              label=f"{run.label} bound: {run.bound_words}")
    reach = next((r for r in reaches(run) if r.op == op), None)
    if reach is not None:
        size, share = reach.best()
        axis.annotate(f"{share:.0%}", (size, bandwidth(run.ops[op][size].busbw, run.bw_unit)),
                      textcoords="offset points", xytext=(0, 6), ha="center", fontsize="small",
                      color=color)


def plot(runs, output):
    """One figure: a row per op, bus bandwidth vs size (log2 x) beside latency vs size
    (log-log), one line per run. Returns the matplotlib Figure (saved to `output`)."""
    plt = pyplot()
    from matplotlib.ticker import FuncFormatter

    # Sized ops only: a barrier (size 0) has no place on a log-size axis.
    ops = op_order(op for run in runs for op, data in run.ops.items() if any(s > 0 for s in data))
    if not ops:
        raise ReportError("nothing to plot: the runs hold no measurements")
    unit = runs[0].bw_unit  # the first run's --bw-unit, as its table printed it
    figure, axes = plt.subplots(len(ops), 2, figsize=(12, 3.4 * len(ops)), squeeze=False)
    for (busbw, latency), op in zip(axes, ops):
        for run in runs:
            data = run.ops.get(op)
            if not data:
                continue
            sizes = sorted(s for s in data if s > 0)
            line, = busbw.plot(sizes, [bandwidth(data[s].busbw, unit) for s in sizes],
                               marker=".", label=run.label)
            _bound(busbw, run, op, line.get_color())
            latency.plot(sizes, [data[s].duration * 1e6 for s in sizes], marker=".",
                         label=run.label)
        busbw.set_xscale("log", base=2)
        latency.set_xscale("log", base=2)
        latency.set_yscale("log")
        for axis, what in ((busbw, f"bus bandwidth ({bandwidth_label(unit)})"),
                           (latency, "latency (us)")):
            axis.xaxis.set_major_formatter(FuncFormatter(byte_label))
            axis.set_xlabel("message size per rank")
            axis.set_ylabel(what)
            axis.set_title(f"{op}: {what.split(' (')[0]}")
            axis.grid(True, which="major", alpha=0.3)
            axis.legend(fontsize="small")
    figure.tight_layout()
    save(figure, output)
    return figure
