"""The sections of report.py html's page, one for each kind of input (kinds.KINDS recognises
it from the content; its section is one of the `of_*` below): a run of the op scripts (tables,
curves, its --groups layouts, --overlap, --stats, --check and --repeat columns), a saved table
or nccl-tests output, a doctor.py run (its heatmaps and verdict), a parallel_bench.py run, a
replay.py run; and what they share: the figures as inline SVG, a table's cells, the command as
typed (sizes and durations: units.py). html.py puts them on the page."""

import json
import os
import re
import shlex
import tempfile

from ..records import results
from .. import units
from ..opfacts import FACTS
from . import bound, layouts
from . import doctor, replays, trials, trials_text
from .runs import ReportError, bandwidth, bandwidth_label, op_order, record_key


# ----------------------------------------------------------------------------- figures

def svg(draw):
    """The SVG text of what `draw(path)` saves (matplotlib chooses SVG by the extension)."""
    import matplotlib
    with tempfile.TemporaryDirectory(prefix="commbench-html-") as folder, \
            matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "commbench"}):
        # text as text (the reader's sans-serif), not glyph paths: a third of the size
        path = os.path.join(folder, "figure.svg")
        figure = draw(path)
        if figure is not None:
            from .plot import pyplot
            pyplot().close(figure)
        with open(path, encoding="utf-8") as drawn:
            text = drawn.read()
    text = text[text.index("<svg"):]  # no XML prologue or DOCTYPE inside HTML
    # ids unique across the page's figures (matplotlib numbers its clip paths per figure)
    prefix = f"f{next(_COUNTER)}"
    return re.sub(r'(id="|url\(#|href="#)([\w-]+)', lambda m: f"{m.group(1)}{prefix}{m.group(2)}",
                  text)


def _counter():
    number = 0
    while True:
        number += 1
        yield number


_COUNTER = _counter()


def curves(runs):
    from .plot import plot
    return svg(lambda path: plot(runs, path))


# ------------------------------------------------------------------------- a table's cell

def cell(text, value=None):
    """A table cell: what is shown, and the figure in full for a program (data-value)."""
    return {"text": text, "value": None if value is None else repr(value)}


# ------------------------------------------------------------------------- the runs

# The page's legend: each op's Throughput and BusBW formulas (opfacts.FACTS)
LEGEND = [(name, *facts.legend) for name, facts in FACTS.items()]


# What a launcher adds to each rank's command line (the deepspeed launcher and torch's old
# launch: --local_rank=N; torchrun --no-python and others: --local-rank N), not typed by anyone.
LAUNCHER_ARGUMENTS = ("--local_rank", "--local-rank")


def typed_command(command):
    """The command as typed, as a shell line: the interpreter by its name, then the script and
    its arguments without those a launcher added to every rank's (`--local_rank=0`)."""
    if not command:
        return "-"
    words, rest = [os.path.basename(command[0])], list(command[1:])
    while rest:
        word = rest.pop(0)
        name = word.split("=", 1)[0]
        if name in LAUNCHER_ARGUMENTS:
            if "=" not in word and rest and re.fullmatch(r"\d+", rest[0]):
                rest.pop(0)  # --local-rank 0: its value too
            continue
        words.append(word)
    return shlex.join(words)


def what_ran(meta):
    versions = ", ".join(f"{k} {v}" for k, v in (meta.get("versions") or {}).items())
    hosts = meta.get("hostnames") or meta.get("hosts") or []
    rows = [("command", typed_command(meta.get("command"))),
            ("layer", {"deepspeed": "deepspeed.comm", "torch": "torch.distributed"}.get(
                meta.get("dist"), meta.get("dist") or "-")),
            ("backend, device", f"{meta.get('backend', '-')}, {meta.get('device', '-')}"),
            ("ranks, hosts", f"{meta.get('world_size', '-')} ranks on "
                             f"{len(set(hosts)) if hosts else '?'} host(s)"
                             + (f": {', '.join(sorted(set(hosts)))}" if hosts else "")),
            ("processor", _processor(meta)),
            ("versions", versions or "-"), ("date", meta.get("start_time") or "-")]
    if meta.get("ccl"):
        rows.append(("oneCCL", " ".join(f"{k}={v}" for k, v in
                                        (meta["ccl"].get("env") or {}).items())))
    return rows


def _processor(meta):
    found = meta.get("processor") or {}
    if found.get("cpu"):
        return ", ".join(part for part in (
            found["cpu"] + (f" ({found['cpus']} CPUs)" if found.get("cpus") else ""),
            found.get("accelerator")) if part)
    return _cpu_model()


def _cpu_model():
    """This machine's processor, for a results file that does not name its own (written before
    the suite recorded it): said as such."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip() + " (where this report was made)"
    except OSError:
        pass
    return "-"


def flat(record):
    """A record with its nested figures at the top, as a .csv row has them (a .csv file's
    records are so already): stats, overlap, the interval."""
    row = dict(record)
    row.update(record.get("stats") or {})
    row.update(record.get("overlap") if isinstance(record.get("overlap"), dict) else {})
    if record.get("ci95_s"):
        row["ci95_low_s"], row["ci95_high_s"] = record["ci95_s"]
    return row


def op_tables(meta, records, run):
    """Per op key: header cells and rows, from the results file's own records."""
    records = [flat(r) for r in records]
    stats = meta.get("stats") or any("median_s" in r for r in records)
    checked = meta.get("check") or any(r.get("wrong") is not None for r in records)
    interval = any(r.get("ci95_low_s") is not None for r in records)
    overlap = any(r.get("overlap_pct") is not None for r in records)
    unit = meta.get("bw_unit") or "Gbps"
    tables: dict = {}
    keys: dict = {}
    for record in records:
        key = record_key(record, run is not None and run.dtype is None)
        keys.setdefault(key, []).append(record)
    for key in op_order(keys):
        heads = ["Size", "Description", "Duration"] + (["95% interval"] if interval else []) + \
            [f"Throughput ({bandwidth_label(unit)})", f"BusBW ({bandwidth_label(unit)})"] + \
            (["Median", "P99", "Slowest rank"] if stats else []) + \
            (["Wrong"] if checked else []) + (["Overlap %"] if overlap else [])
        rows = []
        for r in sorted(keys[key], key=lambda r: r["size_bytes"]):
            row = [cell(units.size(r["size_bytes"]), r["size_bytes"]),
                   cell(f"{r.get('numel', '-')}x{r.get('element_size', '-')}"),
                   cell(units.duration(r["duration_s"]), r["duration_s"])]
            if interval:
                low, high = r.get("ci95_low_s"), r.get("ci95_high_s")
                row.append(cell("-" if low is None else
                                f"{units.duration(low)} - {units.duration(high)}"))
            for name in ("throughput_Bps", "busbw_Bps"):
                value = r.get(name)
                row.append(cell("-" if value is None else f"{bandwidth(value, unit):.3f}", value))
            if stats:
                row += [cell(units.duration(r.get("median_s")), r.get("median_s")),
                        cell(units.duration(r.get("p99_s")), r.get("p99_s")),
                        cell(str(r.get("slowest_rank", "-")), r.get("slowest_rank"))]
            if checked:
                row.append(cell(str(r.get("wrong", "-")), r.get("wrong")))
            if overlap:
                value = r.get("overlap_pct")
                row.append(cell("-" if value is None else f"{value:.1f}", value))
            rows.append(row)
        tables[key] = {"heads": heads, "rows": rows}
    return tables


def warnings_of(meta, records):
    found = []
    wrong = [r for r in records if r.get("wrong")]
    if wrong:
        found.append(f"--check: {sum(r['wrong'] for r in wrong)} wrong element(s), first at "
                     f"{wrong[0]['op']} {units.size(wrong[0]['size_bytes'])}")
    missed = [r for r in records if r.get("precision_met") is False]
    if missed:
        found.append(f"--precision: {len(missed)} size(s) ended before their interval was "
                     f"{meta.get('precision')} wide")
    if meta.get("world_size") == 1:
        found.append("a world of one rank: BusBW is 0 for every op but broadcast and pt2pt")
    return found


def suite_section(path, meta, records, run):
    section = {"kind": "suite", "path": path, "title": run.label, "what": what_ran(meta),
               "tables": op_tables(meta, records, run), "warnings": warnings_of(meta, records),
               "layouts": None, "bound": bound.lines(run)}
    if meta.get("groups") or meta.get("split"):
        try:
            section["layouts"] = layouts.layouts(run)
        except ValueError:
            pass
    if any("per_trial" in r for r in records):  # --per-trial: report.py trials' text
        section["trials"] = trials_text.render(trials.analyse(path))
    return section


def text_section(path, run, source="a saved table or nccl-tests output (no meta record)"):
    """A saved table or nccl-tests output (or another tool's figures: `source`): what it
    printed."""
    tables = {}
    for key in op_order(run.ops):
        rows = [[cell(units.size(size), size), cell(units.duration(m.duration), m.duration),
                 cell(f"{bandwidth(m.busbw, run.bw_unit):.3f}", m.busbw)]
                for size, m in sorted(run.ops[key].items())]
        tables[key] = {"heads": ["Size", "Duration", f"BusBW ({bandwidth_label(run.bw_unit)})"],
                       "rows": rows}
    return {"kind": "suite", "path": path, "title": run.label, "tables": tables,
            "what": [("source", source)],
            "warnings": [], "layouts": None}


def doctor_section(path):
    meta, pairs, final = doctor.load(path)
    figure = None
    if len(meta.get("hosts") or []) >= 2 and pairs:
        figure = svg(lambda out: doctor.heatmap(path, out))
    verdict = []
    if final is None:
        verdict.append(("verdict", "none: the check ended before its verdict"))
    else:
        verdict.append(("verdict", "healthy: nothing out of line" if final.get("healthy")
                        else f"{len(final.get('findings') or [])} finding(s)"))
        verdict += [("finding", line) for line in final.get("findings") or []]
        verdict += [("cleared by a retest", json.dumps(item)) for item in
                    final.get("cleared") or []]
    return {"kind": "doctor", "path": path, "title": f"doctor.py: {len(meta.get('hosts') or [])} "
            "hosts", "what": what_ran(meta), "verdict": verdict, "figure": figure}


def strategies_section(path, meta, records):
    heads = ["strategy", "step (median)", "samples/s", "tokens/s", "peak memory/rank",
             "exposed comm", "comm per step"]
    rows = []
    for r in records:
        comm = ", ".join(f"{op} {units.size(f['bytes'])} ({f['calls']:g} calls)"
                         for op, f in r["comm"].items()) or "none"
        rows.append([cell(r["strategy"]), cell(units.duration(r["step_time_s"]["median"]),
                                               r["step_time_s"]["median"]),
                     cell(f"{r['samples_per_s']:.1f}", r["samples_per_s"]),
                     cell(f"{r['tokens_per_s']:.0f}", r["tokens_per_s"]),
                     cell(units.size(max(r["peak_memory_bytes_per_rank"])),
                          max(r["peak_memory_bytes_per_rank"])),
                     cell(units.duration(r["exposed_comm_s"]), r["exposed_comm_s"]), cell(comm)])
    model = meta.get("model") or {}
    what = what_ran(meta) + [("model", ", ".join(f"{k} {v}" for k, v in model.items()))]
    return {"kind": "table", "path": path, "title": "parallel_bench.py: the six strategies",
            "what": what, "tables": {"strategies": {"heads": heads, "rows": rows}}}


def replay_section(path):
    meta, _, summary = replays.load(path)
    kinds = summary.get("kinds") or {}
    heads = ["op", "calls/rank", "bytes/rank", "time (slowest rank)", "median call",
             "BusBW (GB/s)"]
    rows = [[cell(kind), cell(str(row["calls"]), row["calls"]),
             cell(units.size(row["bytes"]), row["bytes"]),
             cell(units.duration(row["time_s"]), row["time_s"]),
             cell(units.duration(row["median_call_s"]), row["median_call_s"]),
             cell("-" if not row.get("busbw") else f"{row['busbw'] / 1e9:.3f}", row.get("busbw"))]
            for kind, row in kinds.items()]
    tables = {"the replay": {"heads": heads, "rows": rows}}
    if summary.get("prediction"):
        heads = ["op", "job", "replay", "replay/job", "job, in flight", "replay, in flight"]
        tables["the job against the replay"] = {"heads": heads, "rows": [
            [cell(kind), cell(units.duration(p["job_s"]), p["job_s"]),
             cell(units.duration(p["replay_s"]), p["replay_s"]),
             cell("-" if p["ratio"] is None else f"{p['ratio']:.2f}", p["ratio"]),
             cell(units.duration(p.get("job_in_flight_s")), p.get("job_in_flight_s")),
             cell(units.duration(p.get("replay_in_flight_s")), p.get("replay_in_flight_s"))]
            for kind, p in summary["prediction"].items()]}
    what = what_ran(meta) + [("trace", f"{meta.get('trace')} ({meta.get('trace_format')})"),
                             ("one pass", units.duration(summary["pass_s"]["median"]))]
    return {"kind": "table", "path": path, "title": "replay.py", "what": what, "tables": tables}


def complete(section):
    """Every key the template reads, on every section."""
    return {"warnings": [], "tables": {}, "layouts": None, "verdict": [],
            "figure": None, "trials": None, **section}


# What each kind of input shows (kinds.KINDS): `(path, text, read)` -> (section, Run or None),
# `read(path, text)` the kind's reader (or its one line, where the kind holds no run).

def of_replay(path, text, read):
    return replay_section(path), None


def of_doctor(path, text, read):
    return doctor_section(path), None


def of_strategies(path, text, read):
    meta, records = results.parse_all(results.output_format(path), text)
    chosen = [r for r in records if r.get("type") == "strategy"]
    if not chosen:
        raise ReportError(f"{path}: no strategy measured in it")
    return strategies_section(path, meta, chosen), None


def of_results(path, text, read):
    """A file named as a results file: its records' tables, with what ran."""
    try:
        meta, records = results.read_all(path)
    except (OSError, ValueError, KeyError, TypeError, AttributeError,
            results.ResultsError) as error:
        read(path, text)  # its own line on what is wrong with it, where it has one
        raise ReportError(f"{path}: not a results file of this suite ({error})") from None
    run = read(path, text)
    final = results.final([r for r in records if r.get("type", "result") == "result"
                           and "size_bytes" in r])
    return suite_section(path, meta or {}, final, run), run


def of_printed(path, text, read):
    """A saved table or nccl-tests output: what it printed."""
    run = read(path, text)
    return text_section(path, run), run
