"""--peak with real ranks (docs/peak.md): the `% of peak` column, the results file's bound and
fraction, the start-up line; a bad --peak is one line and exit 2 before any rank connects. The
parsers, readers and cache are tested in-process (test_logic_bounds.py); the table without
--peak is the original's (test_single_size.py, test_output_stats.py, test_options.py)."""

import json
import re

import pytest

from commbench.records import results
from support import assert_no_traceback


def _records(path):
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return lines[0], [line for line in lines if line.get("type") == "result"]


def test_peak_auto_holds_busbw_against_the_memory_copy(run, tmp_path):
    path = tmp_path / "r.jsonl"
    result = run("all_reduce.py", "--dist=torch", "--scan", "--maxsize=12", "--trials=3",
                 "--peak=auto", f"--output={path}", nproc=2,
                 env={"COMMBENCH_CACHE": str(tmp_path / "cache")})
    assert result.returncode == 0, result
    line = re.search(r"; bound: memory copy ([\d.]+) GB/s \(measured, 2 threads\)$",
                     result.stderr, re.M)
    assert line, result
    table = result.table("all_reduce")
    assert table.columns[5] == "% of peak" and len(table.rows) == 11
    meta, records = _records(path)
    assert meta["peak"]["spec"] == "auto" and meta["peak"]["bound"]["kind"] == "memory copy"
    for row, record in zip(table.rows, records):
        bound = record["bound"]
        assert (bound["kind"], bound["source"]) == ("memory copy", "measured, 2 threads")
        assert bound["gbps"] > 0
        assert record["peak_fraction"] == pytest.approx(
            record["busbw_Bps"] * 8 / 1e9 / bound["gbps"])
        assert row.extra[0] == f"{record['peak_fraction'] * 100:.1f}"
    # kept for the next runs, unless the host was too busy for the figures to be a bound
    kept = (tmp_path / "cache" / "memory-copy.json").exists()
    assert kept != ("not kept: the host was busy" in result.stderr), result.stderr


def test_peak_rate_at_three_ranks_raw_prints_the_fraction(run, tmp_path):
    path = tmp_path / "r.csv"
    result = run("all_gather.py", "--dist=torch", "--scan", "--maxsize=8", "--trials=3",
                 "--peak=4gbit", "--raw", f"--output={path}", nproc=3)
    assert result.returncode == 0, result
    assert "; bound: given 4 Gb/s (--peak)\n" in result.stderr, result
    table = result.table("all_gather")
    assert table.columns[5] == "Of peak" and table.devices == 3
    for row in table.rows:
        assert float(row.extra[0]) == pytest.approx(float(row.busbw) / 4, abs=0.002)
    _, records = results.read(str(path))  # the .csv's columns: the bound and the fraction
    assert {r["bound"]["kind"] for r in records} == {"given"}
    assert all(r["bound"]["gbps"] == 4 for r in records)


@pytest.mark.parametrize("peak,says", [
    ("fast", "--peak fast: neither auto, a rate (100gbit, 25G, 12.5GB/s) nor a file"),
    ("-4gbit", "--peak -4gbit: a rate must be positive"),
    ("FILE", ":2: unknown op 'allreduce'"),
])
def test_a_bad_peak_is_one_line_and_exit_2(run, tmp_path, peak, says):
    if peak == "FILE":
        peak = tmp_path / "cluster.peak"
        peak.write_text("all_reduce 1M-64M 40gbit\nallreduce * 1gbit\n")
    result = run("all_reduce.py", "--dist=torch", f"--peak={peak}", nproc=2)
    assert result.returncode == 2, result
    assert_no_traceback(result)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("commbench: error: ") and says in lines[0], \
        result
    assert result.tables == []
