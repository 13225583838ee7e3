"""`report.py html RUN [RUN ...] -o report.html`: one self-contained page to open and share.

Everything is inline: the style, and the figures as matplotlib's SVG (the plot module's own
figures, drawn to SVG instead of PNG, glyphs as paths). No script, no font or image fetched:
the page opens offline, prints, and asks the network for nothing. Why SVG from matplotlib
rather than an interactive library inlined: the six ops' curves are ~0.4 MB of SVG, against
~3.5 MB of plotly.js before any data; they print sharp, and every exact figure is in a table
beside its curve (each cell also carries the figure in full in its `data-value`). The markup
comes from a Jinja2 template (Jinja2 is a dependency of torch: nothing new to install),
autoescaped.

Each file given is recognised from its content: a run of the op scripts (tables, curves, and
its --groups layouts, --overlap, --stats, --check and --repeat columns when present), a saved
table, nccl-tests output or one rank's DeepSpeed comms logger summary (curves and tables from
their figures), a doctor.py run (its heatmaps and verdict), a parallel_bench.py run (its
strategies), a replay.py run (its tables and the job against the replay). Two or more runs of
the op scripts: compare's verdicts, each against the first, and their curves overlaid. The page
leads with the answer: a summary of each run's headline figures (and the verdicts, with the
sizes only one run has and a verdict on few sizes said so), what ran (the command as typed),
the curves, the tables, the legend last. The file is written whole or not at all."""

import os
import tempfile
import time

from .. import units
from . import compare as comparing
from .runs import ReportError, bandwidth, bandwidth_label, op_order
from .kinds import section_of
from .sections import LEGEND, complete, curves, svg

TEMPLATE = os.path.join(os.path.dirname(__file__), "report.html.j2")


# ------------------------------------------------------------------------------ the page

def headlines(runs):
    """The summary: per op (in report order, every run's) and run (A, B, ...: as compared),
    the peak bus bandwidth and the size it was reached at, and the small-message latency (the
    smallest size's duration)."""
    found = []
    for letter, run in zip(_letters(), runs):
        by_op = {}
        for key, sizes in run.ops.items():
            if not sizes:
                continue
            peak = max(sizes.values(), key=lambda m: (m.busbw, -m.size))
            by_op[key] = {"peak": peak if peak.busbw > 0 else None, "latency": sizes[min(sizes)],
                          "busbw": None if peak.busbw <= 0 else
                          f"{bandwidth(peak.busbw, run.bw_unit):.3f}"}
        found.append({"letter": letter, "label": run.label, "path": run.path,
                      "unit": bandwidth_label(run.bw_unit), "ops": by_op})
    return {"runs": found, "ops": op_order([key for run in found for key in run["ops"]])}


def _letters():
    for number in range(10 ** 6):
        yield "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[number] if number < 26 else f"R{number + 1}"


# A verdict of a group of sizes (small, large) resting on fewer sizes than this says so.
FEW_SIZES = 3


def _sizes(sizes):
    return ", ".join(map(units.size, sizes))


def notes(entry):
    """What a verdict should say beside it: the sizes only one run has, and a group verdict
    resting on fewer than FEW_SIZES sizes (which)."""
    found = []
    for side, sizes in (("A", entry["only_a"]), ("B", entry["only_b"])):
        if sizes and entry["rows"]:
            found.append(f"sizes only in {side} (not compared): {_sizes(sizes)}")
    ratios = [r for r in entry["rows"] if r["ratio"]]
    groups = [("small-message", [r["size"] for r in ratios if r["size"] < comparing.SMALL]),
              ("large-message", [r["size"] for r in ratios if r["size"] >= comparing.LARGE])]
    if not any(sizes for _, sizes in groups):  # a verdict over every size both runs have
        groups = [("", [r["size"] for r in ratios])] if entry.get("all") else []
    for name, sizes in groups:
        if 0 < len(sizes) < FEW_SIZES:
            found.append(f"the {name + ' ' if name else ''}verdict rests on {len(sizes)} "
                         f"size{'s' if len(sizes) > 1 else ''}: {_sizes(sizes)} (fewer than "
                         f"{FEW_SIZES})")
    return found


def comparisons(runs):
    """Each run against the first: compare's verdicts and rows, with intervals, each verdict
    with its notes (sizes in one run only, a verdict on few sizes)."""
    found = []
    for run in runs[1:]:
        report = comparing.compare(runs[0], run, 1.10)
        ops = [{**entry, "notes": notes(entry)} for entry in report["ops"]]
        found.append({"a": report["a"], "b": report["b"], "warnings": report["warnings"],
                      "unit": bandwidth_label(report["bw_unit"]), "ops": ops,
                      "repeated": report["repeated"]})
    return found


def history_section(where, tag=None):
    """report.py history's trends of the database at `where` (--tag's runs), with its plot."""
    from ..records.db import history as series_of
    from . import history
    store = history._open(where)
    try:
        found = series_of.judge(series_of.load(store, tag, None, None))
        shown_where = store.where
    finally:
        store.close()
    return {"where": shown_where, "tag": tag, "figure": svg(
        lambda path: history.plot(found, path)) if found else None,
        "series": [{"title": history.title(s), "verdict": history.verdict(s),
                    "changed": {c.at for c in s.changes},
                    "rows": [(s.runs[i], s.started[i], history.figure(s, s.values[i]), s.values[i])
                             for i in range(len(s.values))]} for s in found]}


def render(paths, db=None, tag=None):
    import jinja2
    sections, runs = [], []
    for path in paths:
        section, run = section_of(path)
        sections.append(complete(section))
        if run is not None:
            runs.append(run)
    # one figure of every run's curves (overlaid when several), after the runs' facts
    drawn = curves(runs) if runs and any(s > 0 for run in runs for data in run.ops.values()
                                         for s in data) else None
    environment = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined,
                                     loader=jinja2.FileSystemLoader(os.path.dirname(TEMPLATE)))
    environment.filters["size"] = units.size
    environment.filters["duration"] = units.duration
    page = environment.get_template(os.path.basename(TEMPLATE)).render(
        generated=time.strftime("%Y-%m-%d %H:%M:%S %z"), paths=paths, sections=sections,
        comparisons=comparisons(runs) if len(runs) > 1 else [], headlines=headlines(runs),
        curves=drawn, few_sizes=FEW_SIZES, legend=LEGEND,
        history=history_section(db, tag) if db else None)
    return page


def write(paths, output, db=None, tag=None):
    """The page for `paths` (and --db's history), written whole to `output` (a temporary file
    renamed), or one ReportError line and nothing left behind."""
    page = render(paths, db, tag)
    folder = os.path.dirname(os.path.abspath(output))
    try:
        handle, temporary = tempfile.mkstemp(prefix=".report-", suffix=".html", dir=folder)
    except OSError as error:
        raise ReportError(f"cannot write {output}: {error.strerror}") from None
    try:
        with open(handle, "w", encoding="utf-8") as out:
            out.write(page)
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(temporary, 0o666 & ~mask)  # as open() would have made it, not mkstemp's 0600
        os.replace(temporary, output)
    except OSError as error:
        os.unlink(temporary)
        raise ReportError(f"cannot write {output}: {error.strerror}") from None
    return len(page.encode("utf-8"))



