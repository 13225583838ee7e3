"""--precision P: each size measured in windows until its 95% interval is within P (a warm-up
window first, at least 3 counted, the rows' window for --check and --stats not counted), --time-budget shared over the run, --max-windows the cap; the
table's interval and window count per row, the rows that stopped short marked and named; the
records as the table; report.py compare reads them as --repeat's."""

import json
import re

import pytest

from commbench.records import results
from commbench.numbers import t975
from support import launch, usage_error
from test_errors import assert_one_error_line


def half_width(windows, trials):
    """The 95% interval's half-width relative to the mean, computed here from the windows."""
    mean = sum(w * c for w, c in zip(windows, trials)) / sum(trials)
    plain = sum(windows) / len(windows)
    sd = (sum((w - plain) ** 2 for w in windows) / (len(windows) - 1)) ** 0.5
    return t975(len(windows) - 1) * sd / len(windows) ** 0.5 / mean


def by_size(records):
    """{(op, size): (whole record, [window records in order])}."""
    found = {}
    for r in records:
        whole, windows = found.setdefault((r["op"], r["size_bytes"]), [None, []])
        if r.get("window") is None:
            found[(r["op"], r["size_bytes"])][0] = r
        else:
            windows.append(r)
    return found


def test_a_target_reached_at_two_ranks(tmp_path):
    """±50% is in reach of every size: no row marked, each row's interval within it, its window
    count in the table and the record, the warm-up window recorded and left out."""
    output = tmp_path / "p.jsonl"
    result = launch("all_reduce.py", "--scan", "--maxsize=8", "--precision=50%", "--trials=10",
                    "--raw", "--dist=torch", f"--output={output}", nproc=2)
    assert result.returncode == 0, result
    table = result.table("all_reduce")
    assert table.columns[5:] == ["±95% CI", "Windows"]
    assert "did not reach" not in result.stderr
    meta, records = results.read(str(output))
    assert (meta["precision"], meta["max_windows"], meta["repeat"]) == (0.5, 100, 1)
    sizes = by_size(records)
    assert len(sizes) == len(table.rows) == 7
    for row in table.rows:
        ci, windows = row.extra
        reached = float(re.fullmatch(r"±([\d.]+)%", ci).group(1))  # no "!"
        assert reached <= 50 and int(windows) >= 3
        whole, recorded = sizes[("all_reduce", int(row.size))]
        assert whole["repeat"] == int(windows) == len(whole["windows_s"])
        assert whole["precision"] == 0.5 and whole["precision_met"] is True
        assert abs(whole["precision_reached"] * 100 - reached) < 0.051
        assert abs(half_width(whole["windows_s"], whole["window_trials"]) -
                   whole["precision_reached"]) < 1e-9
        # the warm-up, then every counted window, as measured (the rows' pass's is not one)
        assert [r["window"] for r in recorded] == list(range(int(windows) + 1))
        assert [r["warmup"] for r in recorded] == [True] + [False] * int(windows)
        assert [r["duration_s"] for r in recorded[1:]] == whole["windows_s"]
    # report.py compare treats the windows as --repeat's: intervals on every ratio
    compared = launch("report.py", "compare", str(output), str(output), "--format=json")
    assert compared.returncode == 0, compared
    report = json.loads(compared.stdout)
    assert report["repeated"] and all("ratio_ci" in row for row in report["ops"][0]["rows"])


def test_a_target_missed_at_the_budget_at_three_ranks(tmp_path):
    """±0.5% is out of reach of gloo here: within a 2 s budget for two ops the passes stop
    before --max-windows (each size has its 3 windows whatever the budget), every row that
    missed is marked and the note says why."""
    output = tmp_path / "p.csv"
    result = launch("run_all.py", "--all-reduce", "--all-gather", "--scan", "--maxsize=8",
                    "--precision=0.5%", "--time-budget=2", "--trials=20", "--dist=torch",
                    f"--output={output}", nproc=3)
    assert result.returncode == 0, result
    marked = 0
    for table in result.tables:
        assert table.columns[5:] == ["±95% CI", "Windows"]  # no Trials: windows are --trials long
        for row in table.rows:
            ci, windows = row.extra
            assert 3 <= int(windows) < 100, row  # the budget stopped it, not --max-windows
            marked += ci.endswith("!")
    assert marked >= 10, result.stdout  # of 14 rows
    notes = [line for line in result.stderr.splitlines() if "did not reach ±0.5%" in line]
    assert len(notes) == 2 and all("the time budget ran out" in n for n in notes), result.stderr
    _, records = results.read(str(output))
    whole = [r for r in records if r["window"] is None]
    assert len(whole) == 14 and sum(r["precision_met"] is False for r in whole) == marked
    assert all(r["precision"] == 0.005 and r["repeat"] >= 3 for r in whole)
    assert {r["warmup"] for r in records if r["window"] == 0} == {True}


def test_max_windows_stops_a_size_at_one_rank(tmp_path):
    output = tmp_path / "p.jsonl"
    result = launch("broadcast.py", "--scan", "--maxsize=6", "--precision=0.01%",
                    "--max-windows=4", "--trials=5", "--dist=torch", f"--output={output}")
    assert result.returncode == 0, result
    rows = result.table("broadcast").rows
    assert len(rows) == 5 and all(row.extra[1] == "4" and row.extra[0].endswith("!")
                                  for row in rows), result.stdout
    (line,) = [line for line in result.stderr.splitlines() if "did not reach" in line]
    assert line.startswith("commbench: broadcast: 5 of 5 rows did not reach ±0.01% (marked !; "
                           "--max-windows reached): 8 B ±"), line
    _, records = results.read(str(output))
    assert [r["repeat"] for r in records if r.get("window") is None] == [4] * 5


@pytest.mark.parametrize("value,text", [
    ("0%", "--precision: must be above 0% and below 100%, got 0%"),
    ("100%", "--precision: must be above 0% and below 100%, got 100%"),
    ("-5%", "--precision: must be above 0% and below 100%, got -5%"),
    ("5", "--precision: '5' is not a percentage: give one such as 5%"),
])
@pytest.mark.fast
def test_bad_precision_is_one_line(value, text):
    """In-process (the parser's UsageError); the line itself from real ranks: the test below."""
    assert text in usage_error(["--scan", f"--precision={value}", "--dist=torch"])


@pytest.mark.parametrize("args,text", [
    (["--precision=5%", "--repeat=3"], "give one of them"),
    (["--max-windows=10"], "--max-windows caps --precision's windows; give --precision too"),
    (["--precision=5%", "--max-windows=2"], "--max-windows: must be >= 3"),
])
@pytest.mark.fast
def test_precision_flags_that_do_not_go_together(args, text):
    assert text in usage_error(["--scan", *args, "--dist=torch"])


def test_a_precision_flag_refused_on_two_ranks_is_one_line():
    result = launch("all_reduce.py", "--scan", "--precision=5%", "--repeat=3", "--dist=torch",
                    nproc=2)
    assert_one_error_line(result, 2, "give one of them")
