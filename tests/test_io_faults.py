"""Faults of the world the suite writes into, made for real: a pipe closed after a few lines, a
full terminal (/dev/full), a file system that fills up under --output (a 16 KB tmpfs). Each
ends with the documented status, one line or none, no traceback of ours, every rank out, and
a results file whose every record parses."""

import csv
import json
import os
import re
import subprocess
import sys
from contextlib import contextmanager

import pytest

from support import (ROOT, base_env, free_port, launch, launcher_command, parse_tables, rank_env,
                     require_launcher)
from commbench.records import results

START_NOTE = re.compile(r"^commbench: (torch|deepspeed) \((torch\.distributed|deepspeed\.comm)\), ")


def start(launcher, nproc, args, stdout):
    require_launcher(launcher)
    port = free_port()
    env = base_env(MASTER_PORT=str(port))
    cmd = launcher_command(launcher, nproc, port, env["PATH"]) + ["run_all.py", "--backend=gloo",
                                                                  *args]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=stdout, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True)


def our_lines(stderr):
    """stderr less the launchers' and DeepSpeed's own lines and their tracebacks' frames."""
    return [line for line in stderr.splitlines()
            if line.startswith("commbench:") or f'"{ROOT}/' in line and "/.venv/" not in line]


def errors(stderr):
    """Our lines less the start-up note, in a stable order (ranks write concurrently)."""
    return sorted(line for line in our_lines(stderr) if not START_NOTE.match(line))


def assert_no_traceback_of_ours(stderr):
    frames = [line for line in stderr.splitlines()
              if line.strip().startswith('File "') and f'"{ROOT}/' in line and "/.venv/" not in line]
    assert not frames, stderr


def whole_records(path):
    """Every record of a results file, each line checked to parse on its own."""
    text = path.read_text()
    if path.suffix == ".jsonl":
        lines = [json.loads(line) for line in text.splitlines()]
        assert lines and lines[0]["type"] == "meta"
        assert all(line["type"] == "result" for line in lines[1:])
    elif path.suffix == ".csv":
        rows = list(csv.DictReader(text.splitlines()))
        assert all(row["op"] and float(row["duration_s"]) > 0 for row in rows), rows
    else:
        json.loads(text)
    return results.read(str(path))[1]


@pytest.mark.parametrize("launcher,nproc", [("python", 1), ("torchrun", 2), ("deepspeed", 2)])
def test_a_closed_pipe_ends_the_run_quietly(launcher, nproc, tmp_path):
    output = tmp_path / "r.jsonl"
    producer = start(launcher, nproc, ["--dist=torch", "--scan", f"--output={output}"],
                     subprocess.PIPE)
    head = subprocess.Popen(["head", "-5"], stdin=producer.stdout, stdout=subprocess.PIPE,
                            text=True)
    producer.stdout.close()  # head holds the pipe's only reading end
    shown, _ = head.communicate(timeout=240)
    status = producer.wait(timeout=240)  # a hang guard only
    stderr = producer.stderr.read()
    assert status == 0, stderr
    assert_no_traceback_of_ours(stderr)
    # The ranks leave at the next size, not at the end of the scan (23 sizes, 20 s and more;
    # they left 0.35 s after head under python, 0.8-1.0 s under torchrun: docs/troubleshooting.md).
    assert len(whole_records(output)) < 23
    mine = our_lines(stderr)
    assert len(mine) == 1 and START_NOTE.match(mine[0]), stderr
    lines = shown.splitlines()
    assert len(lines) == 5
    if launcher != "deepspeed":  # DeepSpeed's launcher logs its own lines to stdout first
        assert lines[1].startswith(f"---- Performance of all_reduce on {nproc} devices")
        assert lines[2].startswith("Size (Bytes)") and lines[3] == "-" * 100
        assert parse_tables("\n".join(lines))[0].rows[0].description == f"{2 * nproc}x4"
        assert [line for line in stderr.splitlines() if line.strip()] == mine, stderr
        assert len(whole_records(output)) >= 1  # sizes written before head exited
    else:  # head took the launcher's lines: the ranks' first write met the closed pipe
        whole_records(output)


@pytest.mark.parametrize("nproc", [1, 2])
def test_a_full_terminal_is_one_line_and_exit_1(nproc, tmp_path):
    """Each rank started by hand with its stdout on /dev/full (the launchers' own part in an
    output fault is the closed pipe's test)."""
    output = tmp_path / "r.csv"
    port = free_port()
    cmd = [sys.executable, "run_all.py", "--backend=gloo", "--dist=torch", "--scan",
           "--maxsize=8", f"--output={output}"]
    with open("/dev/full", "w") as full:
        ranks = [subprocess.Popen(cmd, cwd=ROOT, stdout=full,
                                  env=rank_env(rank, nproc, port) if nproc > 1 else
                                  base_env(MASTER_PORT=str(port)),
                                  stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
                 for rank in range(nproc)]
        stderr = "".join(rank.communicate(timeout=240)[1] for rank in ranks)
    assert [rank.returncode for rank in ranks] == [1] * nproc, stderr
    assert_no_traceback_of_ours(stderr)
    expected = ["commbench: error: cannot write the table to stdout: No space left on device"]
    if nproc == 2:  # rank 1 is told why it stops: not a network error
        expected.append("commbench: error: rank 1: stopping because rank 0 stopped (its message "
                        "says why)")
    assert errors(stderr) == sorted(expected), stderr
    assert "Connection" not in stderr and "GLHF" not in stderr
    assert whole_records(output) == []  # the header failed: nothing was measured


@contextmanager
def small_file_system(path, size="16k"):
    if os.geteuid() != 0:
        why = "mounting a tmpfs needs root"
        if os.environ.get("COMMBENCH_REQUIRE_LAUNCHERS"):
            pytest.fail(why)
        pytest.skip(why)
    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


# Ranks started by hand (forked from the tests' fork server): what fills the disk is rank 0's
# writing, whichever launcher started it; each format once, rank 1's line at world size 2.
# csv's records are short: a disk of one page (4 KB) fills early in the run, where
# 16 KB took the run through ops and sizes to large ones (7.6 s of a CI worker; 9.3 s of CPU
# against 2.8 s here).
@pytest.mark.parametrize("nproc,name,disk", [(1, "r.jsonl", "16k"), (2, "r.csv", "4k"),
                                             (1, "r.json", "16k")])
def test_a_full_disk_leaves_whole_records(nproc, name, disk, tmp_path):
    with small_file_system(tmp_path / "small", disk) as small:
        output = small / name
        # few trials: the file fills at a larger size for shorter records (csv), and each size
        # up to it is quick
        result = launch("run_all.py", "--dist=torch", "--scan", "--stats", "--trials=5",
                        f"--output={output}", nproc=nproc, timeout=300)
        stderr = result.stderr
        assert result.returncode == 1, stderr
        assert_no_traceback_of_ours(stderr)
        records = whole_records(output)
        want = [f"commbench: error: cannot write results to {output}: No space left on device; it "
                f"holds the {len(records)} whole records written before; stopping (every size "
                "measured is in the table)"]
        if nproc == 2:
            want.append("commbench: error: rank 1: stopping because rank 0 stopped (its message "
                        "says why)")
        assert errors(stderr) == sorted(want), stderr
        assert len(records) >= 3
        # The table has the size whose record did not fit, and every one before it.
        rows = [row for table in result.tables for row in table.rows]
        assert len(rows) == len(records) + 1
        assert [r["numel"] for r in records] == [row.numel for row in rows[:-1]]
        # report.py reads what is left.
        compared = subprocess.run(["python", "report.py", "compare", str(output), str(output)],
                                  cwd=ROOT, env=base_env(), capture_output=True, text=True)
        assert compared.returncode == 0, compared.stderr
        assert not [p for p in small.iterdir() if p.name != name]  # no temporary left behind


def test_help_into_a_closed_pipe_or_a_full_disk():
    env = base_env()
    reading, writing = os.pipe()
    os.close(reading)  # a reader that is gone before the first line
    try:
        piped = subprocess.run(["python", "run_all.py", "--help"], cwd=ROOT, env=env,
                               stdout=writing, stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(writing)
    assert (piped.returncode, piped.stderr) == (0, "")
    with open("/dev/full", "w") as full:
        filled = subprocess.run(["python", "run_all.py", "--help"], cwd=ROOT, env=env,
                                stdout=full, stderr=subprocess.PIPE, text=True, timeout=60)
    assert filled.returncode == 1
    assert filled.stderr == "commbench: error: cannot write the help to stdout: No space left " \
                            "on device\n"


NO_RESULTS = [("", "no results in it (an empty file)"),
              ('{"a": 1}\n{"b": 2}\n', "no results in it (not a results file of this suite)")]


def test_report_names_a_file_that_holds_no_results(tmp_path):
    """The line and the status from report.py itself for one such file."""
    content, why = NO_RESULTS[1]
    path = tmp_path / "other.jsonl"
    path.write_text(content)
    result = subprocess.run(["python", "report.py", "compare", str(path), str(path)], cwd=ROOT,
                            env=base_env(), capture_output=True, text=True)
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == f"report.py: error: {path}: {why}\n"


@pytest.mark.fast  # in-process: report.py's main, as the process runs it
@pytest.mark.parametrize("content,why", NO_RESULTS)
def test_report_names_each_file_that_holds_no_results(tmp_path, capsys, content, why):
    from commbench.report.cli import main as report
    path = tmp_path / "other.jsonl"
    path.write_text(content)
    assert report(["compare", str(path), str(path)]) == 1
    out, err = capsys.readouterr()
    assert (out, err) == ("", f"report.py: error: {path}: {why}\n")


STRATEGY_FLAGS = ["--world-size=0", "--gpu-mem=0", "--micro-batch=0", "--tp=-1", "--bucket-mb=-5",
                  "--seq=x"]


def assert_strategy_usage_error(flag, status, stderr):
    assert status == 2
    assert re.fullmatch(rf"report\.py: error: argument {flag.split('=')[0]}: .* \(see --help\)\n",
                        stderr), stderr


def test_report_strategy_numbers_that_make_no_sense_are_usage_errors():
    """The line and the status from report.py itself, for one flag; each flag in-process below."""
    flag = STRATEGY_FLAGS[-1]
    result = subprocess.run(["python", "report.py", "strategy", "r.jsonl", "--params=1B", flag],
                            cwd=ROOT, env=base_env(), capture_output=True, text=True)
    assert_strategy_usage_error(flag, result.returncode, result.stderr)


@pytest.mark.fast  # in-process: report.py's main and its parser's exit
@pytest.mark.parametrize("flag", STRATEGY_FLAGS)
def test_report_strategy_each_number_that_makes_no_sense(capsys, flag):
    from commbench.report.cli import main as report
    with pytest.raises(SystemExit) as stop:
        report(["strategy", "r.jsonl", "--params=1B", flag])
    assert_strategy_usage_error(flag, stop.value.code, capsys.readouterr().err)
