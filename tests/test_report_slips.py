"""Issue 36's slips in report.py, replay.py and the table: each says what it should in one line
(a file that is no run, a trace file for a directory, ccl without its bindings), prints sizes
and rules as the rest of the table does, and ends quietly into a closed pipe."""

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from commbench import table, units
from commbench.report import cli as report_cli
from commbench.settings import Settings
from support import ROOT, launch

FIXTURES = Path(__file__).parent / "fixtures"


def report(*args, timeout=60):
    return subprocess.run([sys.executable, "report.py", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def in_process(capsys, *args):
    """report.py's command in this process (commbench.report.cli.main, what report.py runs):
    its exit status, stdout and stderr as report() gives them. Each kind of slip keeps one run
    of report.py's own process (test_a_trace_given_to_report_is_named_as_a_trace)."""
    capsys.readouterr()
    status = report_cli.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return SimpleNamespace(returncode=status, stdout=out, stderr=err)


def one_line_error(proc):
    assert proc.returncode == 1, proc
    assert proc.stdout == "" and "Traceback" not in proc.stderr, proc.stderr
    (line,) = proc.stderr.splitlines()
    return line


def commbench_trace(directory):
    directory.mkdir()
    calls = [{"index": 0, "op": "all_reduce", "dtype": "float32", "in_numel": 8, "out_numel": 8,
              "reduce_op": "sum"}]
    path = directory / "rank0.json"
    path.write_text(json.dumps({"format": "commbench-trace", "version": 1, "world_size": 1,
                                "rank": 0, "calls": calls}))
    return path


def test_an_html_page_given_as_a_run_is_named_as_one(tmp_path, capsys):
    page = tmp_path / "report.html"
    made = in_process(capsys, "html", FIXTURES / "curves_2ranks.jsonl", "-o", page)
    assert made.returncode == 0, made.stderr
    for command in (["plot", page, "-o", tmp_path / "c.png"],
                    ["compare", page, FIXTURES / "curves_2ranks.jsonl"]):
        line = one_line_error(in_process(capsys, *command))
        assert line == (f"report.py: error: {page}: a page report.py html wrote, not a results "
                        "file: give the runs it shows"), line
    other = tmp_path / "notes.html"
    other.write_text("<!DOCTYPE html>\n<html><body>all_reduce nccl-tests</body></html>\n")
    line = one_line_error(in_process(capsys, "plot", other))
    assert f"{other}: an HTML page, not a results file" in line and "nccl-tests data" not in line


def test_a_trace_given_to_report_is_named_as_a_trace(tmp_path, capsys):
    """plot as report.py's own process (the one line, the exit status, nothing on stdout), the
    rest in this process."""
    trace = commbench_trace(tmp_path / "trace")
    for command in (["plot", trace, "-o", tmp_path / "c.png"], ["compare", trace, trace],
                    ["html", trace, "-o", tmp_path / "r.html"]):
        ran = report(*command) if command[0] == "plot" else in_process(capsys, *command)
        line = one_line_error(ran)
        assert line.startswith(f"report.py: error: {trace}: a trace of commbench.trace.record "
                               "(replay.py's input), not a results file: `replay.py"), line
        assert "KeyError" not in line and "'meta'" not in line
    other = tmp_path / "other.json"
    other.write_text('{"a": 1}')
    line = one_line_error(in_process(capsys, "plot", other))
    assert line == (f'report.py: error: {other}: not a results file of this suite (a JSON '
                    'document without the "meta" and "results" of one)'), line
    assert not (tmp_path / "r.html").exists()


def test_a_trace_file_given_to_replay_names_the_directory_it_is_in(tmp_path):
    trace = commbench_trace(tmp_path / "trace")
    proc = launch("replay.py", trace, "--dry-run", backend=None)  # one process, forked
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.splitlines()[-1] == (
        f"commbench: error: {trace}: a file, not a directory: replay.py reads a directory "
        "holding one trace file per rank (rank0.json, rank1.json, ...); give the one this file "
        f"is in: {trace.parent}"), proc.stderr
    assert "no such directory" not in proc.stderr


@pytest.mark.fast
@pytest.mark.parametrize("size,text", [(1048572, "1.0 MB"), (1048575, "1.0 MB"),
                                       (1024 ** 3 - 4, "1.0 GB"), (1023 * 1024, "1023.0 KB"),
                                       (1024, "1.0 KB"), (1 << 20, "1.0 MB"), (1023, "1023.0 B")])
def test_a_size_that_rounds_to_1024_of_a_unit_is_shown_in_the_next(size, text):
    assert table.convert_size(size) == text
    assert units.size(size) == text.replace(".0", "").replace("B", "iB").replace(" iB", " B")


def test_reduce_scatter_on_3_ranks_prints_its_megabyte_as_the_others(run):
    # 1 MiB in elements divisible by 3 ranks: 1048572 B, once printed 1024.0 KB beside 2.0 MB
    result = run("reduce_scatter.py", "--min-bytes=1M", "--max-bytes=2M", "--trials=1",
                 "--warmups=1", nproc=3)
    assert result.returncode == 0, result
    rows = result.table("reduce_scatter").rows
    assert [(r.size, r.description) for r in rows] == [("1.0 MB", "262143x4"),
                                                         ("2.0 MB", "524286x4")], result


ORIGINAL_TITLE = "---- Performance of all_reduce on 2 devices " + "-" * 57


def test_the_original_table_keeps_its_rules_and_a_wider_one_spans_its_columns(run):
    plain = run("all_reduce.py", "--scan", "--maxsize=4", "--trials=1", "--warmups=1", nproc=2)
    assert plain.returncode == 0, plain
    lines = plain.stdout.splitlines()
    at = lines.index(ORIGINAL_TITLE)  # SPEC §6, the original's line byte for byte
    assert lines[at + 2] == "-" * 100, plain
    wide = run("all_reduce.py", "--scan", "--maxsize=4", "--trials=1", "--warmups=1", "--stats",
               "--check", nproc=2)
    assert wide.returncode == 0, wide
    lines = wide.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("---- Performance of"))
    title, columns, rule, rows = lines[at], lines[at + 1], lines[at + 2], lines[at + 3:]
    width = len(columns.rstrip())
    assert columns.rstrip().endswith("Wrong") and width > 100
    assert rule == "-" * width and len(title) == width, wide
    assert title == "---- Performance of all_reduce on 2 devices ".ljust(width, "-")
    assert rows and all(len(row.rstrip()) <= width for row in rows if row.strip()), wide
    assert wide.table("all_reduce").rows  # and the tests' parser reads it


@pytest.mark.fast
@pytest.mark.parametrize("qualifiers", [(), ("dtype bfloat16",), ("dtype bfloat16", "op max")])
def test_a_title_with_qualifiers_grows_no_longer_than_the_originals(qualifiers):
    args = Settings(raw=False, bw_unit="Gbps", time_budget=None, stats=False, check=False)
    _, title, _, rule = table.header_text(args, "all_reduce", 2, qualifiers).splitlines()
    assert len(title) == len(ORIGINAL_TITLE) and rule == "-" * 100
    assert title.startswith(ORIGINAL_TITLE.rstrip("-")[:-1] + "".join(f", {q}" for q in qualifiers)
                            + " ---")


def test_pt2pt_headers_say_the_devices_the_readme_says(run):
    for pairs, devices in (("one", 2), ("all", 4)):
        result = run("pt2pt.py", "--scan", "--maxsize=3", "--trials=1", "--warmups=1",
                     f"--pairs={pairs}", nproc=4)
        assert result.returncode == 0, result
        assert result.table("pt2pt").devices == devices, result
    for page in ("README.md", "docs/running.md"):
        text = " ".join((ROOT / page).read_text().split())
        assert "always says 2 devices" not in text, page
        assert "pt2pt's header says 2 devices with the default `--pairs one`" in text, page
        assert "and the world size with `--pairs all` or `across`" in text, page


def test_report_into_a_pipe_closed_early_ends_quietly():
    for args in (["compare", FIXTURES / "curves_2ranks.jsonl", FIXTURES / "all_reduce_perf.txt"],
                 ["compare", FIXTURES / "curves_2ranks.jsonl", FIXTURES / "curves_2ranks.jsonl",
                  "--format", "json"],
                 ["--help"]):
        read_end, write_end = os.pipe()
        os.close(read_end)  # the reader is gone before the first line (`| head` that quit)
        try:
            proc = subprocess.run([sys.executable, "report.py", *map(str, args)], cwd=ROOT,
                                  stdout=write_end, stderr=subprocess.PIPE, text=True,
                                  timeout=60)
        finally:
            os.close(write_end)
        assert (proc.returncode, proc.stderr) == (0, ""), (args, proc.stderr)
    # and a real pipeline: `report.py compare ... | head -1`
    shell = subprocess.run(f"{sys.executable} report.py compare {FIXTURES}/curves_2ranks.jsonl "
                           f"{FIXTURES}/all_reduce_perf.txt | head -1", shell=True, cwd=ROOT,
                           capture_output=True, text=True, timeout=60)
    assert shell.stdout.startswith("A: ") and "Traceback" not in shell.stderr, shell.stderr
