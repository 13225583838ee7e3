#!/usr/bin/env python3
"""What a user sees of a fixed set of commands, figures masked: before and after a refactor.

    scripts/behaviour.py record FILE     run the commands, write what they showed to FILE (JSON)
    scripts/behaviour.py compare A B     the differences between two records; exit 1 if any

The commands (COMMANDS below) are every op script, run_all.py with its main flags, doctor.py
on local ranks, replay.py of a recorded job, parallel_bench.py, report.py's commands and the
usual bad inputs, at world sizes 1, 2 and 3 on gloo (torch.distributed and deepspeed.comm). Of
each it keeps the exit status, stdout's lines and stderr's lines, and the results file it wrote.
Masked, because they move from run to run: every decimal number (durations, bandwidths, start-up
times; a size keeps its figure, "16.0 B"), the figure columns of a table (all but the size and
the description), ports, process ids, times of day, temporary paths and launcher log lines (
torchrun's and DeepSpeed's own, oneCCL's). In a results file every float is masked, and the few
integers that are measurements (the slowest rank, ports, pids). Nothing else: a changed word, a
changed column, a row more or less, an exit status or a key of a record all show.

It runs for about three minutes on 2 cores (docs/testing.md, "A refactor's before and after").
"""

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
TORCHRUN = [str(Path(PY).parent / "torchrun"), "--nproc_per_node"]
SCAN = ["--scan", "--maxsize", "4", "--trials", "2", "--warmups", "1"]
OPS = ["all_reduce", "all_gather", "all_to_all", "all_to_allv", "reduce_scatter", "broadcast",
       "pt2pt", "reduce", "gather", "scatter", "barrier"]


def _ranks(n, script, *args):
    """A command at n ranks on gloo: by itself at 1, else under torchrun on a free port."""
    launch = [PY] if n == 1 else TORCHRUN + [str(n), f"--master_port={_free_port()}"]
    return launch + [script, "--backend", "gloo"] + list(args)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def commands():
    """(name, argv, results file or None); {tmp} is the run's scratch folder."""
    out = []
    for op in OPS:
        out.append((f"{op} 2 ranks", _ranks(2, f"{op}.py", "--dist", "torch", *SCAN,
                                            "--output", f"{{tmp}}/{op}.jsonl"), f"{op}.jsonl"))
    out += [
        ("all_reduce 1 rank deepspeed", _ranks(1, "all_reduce.py", *SCAN, "--stats",
                                               "--output", "{tmp}/ar1.jsonl"), "ar1.jsonl"),
        ("all_gather 3 ranks check", _ranks(3, "all_gather.py", "--dist", "torch", *SCAN,
                                            "--check", "--output", "{tmp}/ag3.csv"), "ag3.csv"),
        ("run_all 3 ranks", _ranks(3, "run_all.py", "--dist", "torch", "--scan", "--maxsize", "3",
                                   "--trials", "2", "--warmups", "1", "--stats", "--check",
                                   "--output", "{tmp}/all3.jsonl"), "all3.jsonl"),
        ("run_all 2 ranks deepspeed raw bytes", _ranks(2, "run_all.py", "--scan", "--maxsize",
                                                       "3", "--trials", "2", "--raw", "--bw-unit",
                                                       "GBps", "--dtype", "bfloat16",
                                                       "--output", "{tmp}/all2.json"), "all2.json"),
        ("run_all 2 ranks repeat", _ranks(2, "run_all.py", "--dist", "torch", "--scan",
                                          "--maxsize", "3", "--trials", "2", "--repeat", "2",
                                          "--all-reduce", "--pt2pt",
                                          "--output", "{tmp}/rep.jsonl"), "rep.jsonl"),
        ("doctor 2 ranks", _ranks(2, "doctor.py", "--dist", "torch", "--trials", "4",
                                  "--repeat", "2", "--large-bytes", "1M",
                                  "--output", "{tmp}/doc.jsonl"), "doc.jsonl"),
        ("parallel_bench ddp 2 ranks", _ranks(2, "parallel_bench.py", "--strategy", "ddp",
                                              "--steps", "2", "--warmup", "1",
                                              "--trace", "{tmp}/trace",
                                              "--output", "{tmp}/pb.jsonl"), "pb.jsonl"),
        ("replay 2 ranks", _ranks(2, "replay.py", "--repeat", "2", "{tmp}/trace",
                                  "--output", "{tmp}/replay.jsonl"), "replay.jsonl"),
        ("report compare", [PY, "report.py", "compare", "{tmp}/all_reduce.jsonl",
                            "{tmp}/ar1.jsonl"], None),
        ("report plot", [PY, "report.py", "plot", "{tmp}/all3.jsonl", "-o", "{tmp}/c.png"], None),
        ("report html", [PY, "report.py", "html", "{tmp}/all3.jsonl", "-o", "{tmp}/r.html"], None),
        ("report strategy", [PY, "report.py", "strategy", "{tmp}/all3.jsonl",
                             "--measured", "{tmp}/pb.jsonl"], None),
        # the usual bad inputs
        ("bad maxsize", [PY, "all_reduce.py", "--maxsize", "x"], None),
        ("bad trials", [PY, "all_gather.py", "--trials", "0"], None),
        ("unknown flag", [PY, "run_all.py", "--scna"], None),
        ("gloo int16", _ranks(1, "all_reduce.py", "--dist", "torch", "--scan", "--maxsize", "3",
                               "--dtype", "int16"), None),
        ("output dir missing", _ranks(1, "all_reduce.py", "--dist", "torch", "--scan", "--maxsize",
                                       "3", "--output", "{tmp}/no/such/r.jsonl"), None),
        ("output exists", _ranks(1, "all_reduce.py", "--dist", "torch", "--scan", "--maxsize", "3",
                                  "--output", "{tmp}/all_reduce.jsonl"), None),
        ("report missing file", [PY, "report.py", "{tmp}/none.jsonl"], None),
        ("replay no trace", [PY, "replay.py", "{tmp}/none"], None),
        ("parallel_bench bad strategy", [PY, "parallel_bench.py", "--strategy", "zero9"], None),
        ("doctor bad fraction", [PY, "doctor.py", "--min-fraction", "2"], None),
    ]
    return out


# ---------------------------------------------------------------------------- masking

NUMBER = re.compile(r"(?<![\w.])-?\d+\.\d+(e[-+]?\d+)?(?![\w.])")
SIZE = re.compile(r"^\d+\.\d+ (B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)\b")
DROP = [re.compile(p) for p in (
    r"^[WIE]\d{4} \d\d:\d\d:\d\d",              # torchrun's log lines
    r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+\]",  # DeepSpeed's
    r"\|CCL_(WARN|INFO|ERROR)\|",              # oneCCL's
    r"^\s*\*+\s*$", r"Setting OMP_NUM_THREADS",
    r"waiting for DeepSpeed's build",          # another process's build: the machine's, not ours
)]
VOLATILE = [(re.compile(p, re.I), r) for p, r in (
    (r"20\d\d-\d\d-\d\d[T_ ]\d\d:\d\d:\d\d([+-]\d{4})?", "TIMESTAMP"),
    (r"\b\d{1,2}:\d\d:\d\d\b", "HH:MM:SS"),
    (r"\b20\d\d-\d\d-\d\d\b", "YYYY-MM-DD"),
    (r"(port|pid)[ =:]+\d+", r"\1 #"),
    (r"slowest: rank \d+", "slowest: rank #"),
    (r"\(\d+ KiB\)", "(# KiB)"),
    (r"(wrote \S+) \([\d.]+ (KiB|MiB)\)", r"\1 (# KiB)"),  # a page's size: its figures' SVG
    (r" \(slowest: [^)]*\)", ""),            # said only when one rank's start-up stands out
    (r"[-+]?\d+%", "#%"),
    (r"[\d#]+(\.[\d#]+)? (tokens/s|samples/s|MiB of memory)", r"# \2"),  # or masked as a size
    (r"; \w+ spends #% of its step in exposed communication[^.]*", ""),  # said above a share
)]


def mask_number(match):
    rest = match.string[match.start():]
    return match.group(0) if SIZE.match(rest) else "#"


def mask_line(line, tmp):
    line = line.replace(tmp, "{tmp}").replace(str(ROOT), "{root}")
    for pattern, repl in VOLATILE:
        line = pattern.sub(repl, line)
    if line.startswith("|"):  # a markdown table's row: every figure in it is measured
        return re.sub(r"\d+(\.\d+)?", "#", line)
    return re.sub(r" {2,}", "  ", NUMBER.sub(mask_number, line))


# The columns of a printed table that are not measurements (by their heading's first word).
KEPT_COLUMNS = ("Size", "Description", "strategy", "comm per step")


def _before_launchers_summary(lines):
    """The lines before torchrun's failure summary (a block of ===== lines at the end of stderr
    naming the ranks that failed first: the launcher's, and in an order that races)."""
    for at, line in enumerate(lines):
        if re.fullmatch(r"={20,}", line):
            return lines[:at]
    return lines


def mask_text(text, tmp):
    lines, header = [], None
    raw = _before_launchers_summary([line for line in text.splitlines()
                                     if not any(p.search(line) for p in DROP)])
    for i, line in enumerate(raw):
        following = raw[i + 1] if i + 1 < len(raw) else ""
        if line.strip() and following.startswith("---"):
            # a table's heading: its columns start after two spaces
            header = [m.start() - 2 for m in re.finditer(r"(?<=  )\S", "  " + line)]
            names = [line[a:b].strip() for a, b in zip(header, header[1:] + [10**6])]
            kept = [any(n.startswith(k) for k in KEPT_COLUMNS) for n in names]
            lines.append(mask_line(line, tmp))
            continue
        if header and line.strip() and not line.startswith("-"):
            # a row: the columns that say what was measured as they are, the figures masked
            cells = [line[a:b].strip() for a, b in zip(header, header[1:] + [10**6])]
            lines.append(" | ".join(mask_line(c, tmp) if k else ("#" if c else "")
                                    for c, k in zip(cells, kept)))
            continue
        if not line.strip():
            header = None
        lines.append(mask_line(line, tmp))
    return lines


MEASURED_INTS = {"slowest", "slowest_rank", "master_port", "pid", "port", "late_rank",
                 "start_time", "end_time"}


def measured(key):
    """A key whose integers (and missing values) are measurements: memory, times, intervals."""
    return key in MEASURED_INTS or "memory" in (key or "") or \
        (key or "").endswith(("_Bps", "_bytes_peak", "_s")) or "ci" in (key or "").split("_")


def mask_value(value, tmp, key=None):
    if isinstance(value, dict):
        return {k: mask_value(v, tmp, k) for k, v in value.items()}
    if isinstance(value, list):
        return [mask_value(v, tmp, key) for v in value]
    if isinstance(value, bool):
        return value
    if value is None:
        return "#" if measured(key) else None
    if isinstance(value, float) or (isinstance(value, int) and measured(key)):
        return "#"
    if isinstance(value, str):
        if key in MEASURED_INTS:
            return "#"
        return mask_line(value, tmp)
    return value


def mask_results(path, tmp):
    if not path.exists():
        return None
    text = path.read_text()
    if path.suffix == ".jsonl":
        return [mask_value(json.loads(line), tmp) for line in text.splitlines() if line.strip()]
    if path.suffix == ".json":
        return mask_value(json.loads(text), tmp)
    if path.suffix == ".csv":
        import csv
        rows = list(csv.DictReader(text.splitlines()))
        return [{k: mask_value(_number(v), tmp, k) for k, v in row.items()} for row in rows]
    return mask_text(text, tmp)


def _number(text):
    """A CSV cell as the value it holds: measured figures are masked like the JSON's."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    if " " in text and all(_is_number(t) for t in text.split()):
        return [_number(t) for t in text.split()]
    return text


def _is_number(text):
    try:
        float(text)
        return True
    except ValueError:
        return False


# ---------------------------------------------------------------------------- record, compare

def record(file):
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    env.setdefault("TORCH_EXTENSIONS_DIR", str(ROOT / ".venv" / "torch_extensions"))
    env["PATH"] = f"{Path(PY).parent}:{env.get('PATH', '')}"
    tmp = tempfile.mkdtemp(prefix="behaviour-")
    seen = {}
    try:
        for name, argv, made in commands():
            argv = [a.replace("{tmp}", tmp) for a in argv]
            done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True,
                                  timeout=600)
            seen[name] = {"exit": done.returncode, "stdout": mask_text(done.stdout, tmp),
                          "stderr": mask_text(done.stderr, tmp),
                          "results": mask_results(Path(tmp, made), tmp) if made else None}
            print(f"behaviour: {name}: exit {done.returncode}", file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    Path(file).write_text(json.dumps(seen, indent=1, sort_keys=True) + "\n")


def compare(a, b):
    # masked again with today's rules, so that a record made before a rule was added compares
    before, after = (_remasked(json.loads(Path(f).read_text())) for f in (a, b))
    differ = 0
    for name in sorted(set(before) | set(after)):
        if name not in before or name not in after:
            print(f"{name}: only in {'after' if name in after else 'before'}")
            differ += 1
            continue
        for part in ("exit", "stdout", "stderr", "results"):
            x, y = before[name][part], after[name][part]
            if x != y:
                differ += 1
                print(f"{name}: {part} differs")
                for line in _diff(x, y):
                    print("    " + line)
    print(f"{len(before)} commands before, {len(after)} after; {differ} differences")
    return 1 if differ else 0


def _remasked(seen):
    for shown in seen.values():
        for part in ("stdout", "stderr"):
            shown[part] = [mask_line(line, "\0")
                           for line in _before_launchers_summary(shown[part])]
        shown["results"] = mask_value(shown["results"], "\0")
    return seen


def _diff(x, y):
    import difflib
    def show(v):
        if isinstance(v, list) and all(isinstance(s, str) for s in v):
            return v
        return json.dumps(v, indent=1, sort_keys=True).splitlines()
    return list(difflib.unified_diff(show(x), show(y), "before", "after", lineterm="", n=1))[:40]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    sub = parser.add_subparsers(dest="what", required=True)
    sub.add_parser("record").add_argument("file")
    c = sub.add_parser("compare")
    c.add_argument("before")
    c.add_argument("after")
    args = parser.parse_args()
    if args.what == "record":
        record(args.file)
        return 0
    return compare(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())
