"""`report.py buckets`: which gradient bucket size to use, from a measured all_reduce curve.

For each measured size b: G bytes of gradients all-reduced in buckets of b take
floor(G/b) x t(b) + t(G mod b) (t from the curve, as the strategy estimate reads it). With a
backward time T, buckets become ready as backward produces them, evenly over T (bucket i of k
at i/k x T); each starts when it is ready and the one before it has finished (one
communication stream, as DDP's); while backward still runs, the share of each bucket's time
that the run's --overlap measured as not hidden (100 - overlap %) adds to the step. What is left
after T, plus that, is the exposed communication of the step. Standard library only."""

import math
from dataclasses import dataclass, field

from ..records import results
from .. import units
from .runs import ReportError
from .strategy import Curves

MIB = 1 << 20
DDP_DEFAULT_BYTES = 25 * MIB  # torch DistributedDataParallel(bucket_cap_mb=25)
DEEPSPEED_REDUCE_BUCKET_ELEMENTS = 500_000_000  # zero_optimization.reduce_bucket_size default


@dataclass
class Row:
    bucket: int  # bytes
    buckets: int  # calls per step
    comm_s: float  # all buckets one after the other
    exposed_s: float | None = None  # with a backward time: what the step waits for after backward
    extrapolated: bool = False
    measured: bool = True  # a size of the curve (False: a default put beside it)


@dataclass
class Advice:
    grad_bytes: int
    backward_s: float | None  # None: no backward time given
    element_size: int
    overlap_source: str  # where the hidden share came from
    smallest: int = 1  # the smallest bucket size considered (bytes)
    rows: list = field(default_factory=list)  # measured sizes, ascending
    defaults: dict = field(default_factory=dict)  # name -> Row
    best: Row | None = None


def _overlap_curve(records):
    """(size, overlap %) of the all_reduce records that carry --overlap figures."""
    return sorted((r["size_bytes"], float(r["overlap"]["overlap_pct"])) for r in records
                  if r.get("op") == "all_reduce" and isinstance(r.get("overlap"), dict))


def _hidden_share(points, size):
    """The fraction of a bucket's time hidden behind backward, from the nearest measured size
    at or below `size` (the largest measured beyond it)."""
    below = [pct for s, pct in points if s <= size]
    return (below[-1] if below else points[0][1]) / 100


def _busy_before(first, pace, each, count, backward_s):
    """Seconds the communication stream is busy before `backward_s`, for `count` buckets of
    `each` seconds that become ready at first, first + pace, ... (first = pace): closed form."""
    if each >= pace:  # each bucket is ready before the one ahead of it ends: back to back
        return max(0.0, min(first + count * each, backward_s) - first)
    # each starts when it is ready, at i x pace, and runs `each`, or until backward ends
    whole = min(count, max(0, math.floor((backward_s - each) / pace)))
    rest = count - whole  # i = whole+1 .. count: cut at backward_s
    return whole * each + rest * backward_s - pace * (count * (count + 1) - whole * (whole + 1)) / 2


def evaluate(curves, grad_bytes, bucket, backward_s=None, overlap=None, measured=True):
    """The Row of one bucket size: closed-form in the number of buckets (G / b buckets of
    16 B are millions; the curve is read twice, not once a bucket)."""
    full, rest = divmod(grad_bytes, bucket)
    full = int(full)
    one = curves.time("all_reduce", bucket)
    last = curves.time("all_reduce", rest) if rest else None
    comm_s = full * one.seconds + (last.seconds if last else 0.0)
    row = Row(bucket, full + (1 if rest else 0), comm_s,
              extrapolated=one.extrapolated or bool(last and last.extrapolated),
              measured=measured)
    if backward_s is not None:
        hidden = _hidden_share(overlap, bucket) if overlap else 1.0
        tau, pace = one.seconds, backward_s * bucket / grad_bytes
        # bucket i of the full ones is ready at i x pace; the stream ends it at
        # max over j <= i of (j x pace + (i - j + 1) x tau): at j = 1 or j = i (linear in j)
        end = max(pace + full * tau, full * pace + tau) if full else 0.0
        slowed = _busy_before(pace, pace, tau, full, backward_s) * (1 - hidden) if full else 0.0
        if last:  # ready when backward ends, so none of it runs under backward
            end = max(end, backward_s) + last.seconds
        row.exposed_s = max(0.0, end - backward_s) + slowed
    return row


def smallest_bucket(grad_bytes, min_bucket=None):
    """The smallest bucket size the report considers: --min-bucket, else 1 MiB (DDP's first
    bucket, the smallest it makes), or G/16 for gradients under 16 MiB."""
    if min_bucket is not None:
        return min_bucket
    return min(MIB, max(1, grad_bytes // 16))


def advise(path, grad_mb, backward_ms=None, min_bucket=None):
    """The Advice for `grad_mb` MiB of gradients from the all_reduce curve in `path`, over the
    measured sizes from smallest_bucket() up to the gradients."""
    try:
        meta, records = results.read(path)
    except (OSError, ValueError, KeyError, results.ResultsError) as error:
        raise ReportError(f"{path}: not a results file of this suite ({error})") from None
    mine = [r for r in results.final(records)
            if r.get("op") == "all_reduce" and r.get("size_bytes")]
    if not mine:
        raise ReportError(f"{path}: no all_reduce results in it; measure a curve with "
                          "all_reduce.py --scan --output FILE (add --overlap for exposed time)")
    if len({r.get("dtype") for r in mine}) > 1:
        raise ReportError(f"{path}: all_reduce was measured in several dtypes; give a run of the "
                          "gradients' dtype alone")
    from .runs import Measurement
    curves = Curves({"all_reduce": {r["size_bytes"]: Measurement(
        r["size_bytes"], float(r["duration_s"]), 0.0) for r in mine}})
    grad_bytes = int(grad_mb * MIB)
    backward_s = None if backward_ms is None else backward_ms / 1e3
    overlap = _overlap_curve(mine)
    source = ("the run's --overlap figures" if overlap else
              "none measured: buckets are assumed fully hidden while backward runs (run the "
              "scan with --overlap for the measured share)")
    element_size = int(mine[0].get("element_size") or 4)
    lowest = smallest_bucket(grad_bytes, min_bucket)
    advice = Advice(grad_bytes, backward_s, element_size, source, lowest)
    for size in sorted({r["size_bytes"] for r in mine}):
        if lowest <= size <= grad_bytes:
            advice.rows.append(evaluate(curves, grad_bytes, size, backward_s, overlap))
    if not advice.rows:
        sizes = sorted({r["size_bytes"] for r in mine})
        raise ReportError(f"{path}: no measured size from {units.size(lowest)} to {grad_mb:g} MiB "
                          f"of gradients (the curve has {units.size(sizes[0])} to "
                          f"{units.size(sizes[-1])}); "
                          "give another --grad-mb or --min-bucket, or scan those sizes")
    for name, bucket in (("DDP default (bucket_cap_mb=25)", DDP_DEFAULT_BYTES),
                         (f"DeepSpeed reduce_bucket_size default (5e8 elements x "
                          f"{element_size} B)", DEEPSPEED_REDUCE_BUCKET_ELEMENTS * element_size)):
        advice.defaults[name] = evaluate(curves, grad_bytes, min(bucket, grad_bytes), backward_s,
                                         overlap, measured=False)
    key = (lambda r: (r.exposed_s, r.comm_s)) if backward_s is not None else \
        (lambda r: (r.comm_s, -r.bucket))
    advice.best = min(advice.rows, key=key)
    return advice


def _ms(seconds):
    return "-" if seconds is None else f"{seconds * 1e3:.3f}"


def render(advice):
    exposed = advice.backward_s is not None
    lines = [f"Gradients: {units.size(advice.grad_bytes)} per step" +
             (f", backward {advice.backward_s * 1e3:g} ms" if exposed else "") +
             (f"; hidden share: {advice.overlap_source}" if exposed else ""),
             f"Measured bucket sizes from {units.size(advice.smallest)} up to the gradients "
             "(--min-bucket for smaller ones).", ""]
    head = f"{'bucket':>12} {'buckets':>8} {'comm/step (ms)':>15}"
    head += f" {'exposed/step (ms)':>18}" if exposed else ""
    lines += [head]
    named = [(row, "") for row in advice.rows] + \
        [(row, f" <- {name.split(' (')[0]}") for name, row in advice.defaults.items()]
    for row, tag in named:
        text = (f"{units.size(row.bucket):>12} {row.buckets:>8} {_ms(row.comm_s):>15}" +
                (f" {_ms(row.exposed_s):>18}" if exposed else "") +
                (" *" if row is advice.best else "") + tag +
                (" (beyond the curve: extrapolated)" if row.extrapolated else ""))
        lines.append(text)
    best = advice.best
    figure = (f"{units.duration(best.exposed_s)} exposed per step" if exposed else
              f"{units.duration(best.comm_s)} of all_reduce per step")
    lines += ["", f"Best bucket size: {units.size(best.bucket)} ({best.buckets} buckets, "
                  f"{figure})."]
    for name, row in advice.defaults.items():
        mine = row.exposed_s if exposed else row.comm_s
        theirs = best.exposed_s if exposed else best.comm_s
        change = f"{(mine / theirs - 1) * 100:+.0f}%" if theirs > 0 else "n/a"
        lines.append(f"{name}: {units.size(row.bucket)} -> {units.duration(mine)} ({change} "
                     "against the best)" +
                     (", extrapolated beyond the curve" if row.extrapolated else ""))
    if not exposed:
        lines.append("Only the per-call cost counts without a backward time, so large buckets "
                     "win; give --backward-ms to weigh their late start against it.")
    return "\n".join(lines)


def plot(advice, output):
    """Communication and exposed time per step against bucket size."""
    from matplotlib.ticker import FuncFormatter

    from .plot import byte_label, pyplot, save
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(8, 4.5))
    sizes = [r.bucket for r in advice.rows]
    axis.plot(sizes, [r.comm_s * 1e3 for r in advice.rows], marker=".",
              label="all_reduce time per step")
    if advice.backward_s is not None:
        axis.plot(sizes, [r.exposed_s * 1e3 for r in advice.rows], marker=".",
                  label="exposed per step")
    axis.axvline(advice.best.bucket, color="grey", linestyle="--",
                 label=f"best: {units.size(advice.best.bucket)}")
    axis.set_xscale("log", base=2)
    axis.xaxis.set_major_formatter(FuncFormatter(byte_label))
    axis.set_yscale("log")
    axis.set_xlabel("bucket size")
    axis.set_ylabel("ms per step")
    axis.set_title(f"{units.size(advice.grad_bytes)} of gradients")
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize="small")
    figure.tight_layout()
    save(figure, output)
    plt.close(figure)
    return figure
