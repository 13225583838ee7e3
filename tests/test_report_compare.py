"""report.py compare: result files, saved tables and nccl-tests output, side by side."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from commbench.records import results
from commbench.report import compare
from support import ROOT

FIXTURES = Path(__file__).parent / "fixtures"


def compare_json(a, b, *extra):
    proc = subprocess.run([sys.executable, "report.py", "compare", str(a), str(b), "--format",
                           "json", *extra], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)

def test_compare_two_real_runs(two_runs):
    torch_file, deepspeed_file = two_runs["torch"][0], two_runs["deepspeed"][0]
    report_ = compare_json(torch_file, deepspeed_file)
    assert report_["a"] == "torch.distributed gloo n=2"
    assert report_["b"] == "deepspeed.comm gloo n=2"
    assert [op["op"] for op in report_["ops"]] == ["all_reduce", "broadcast"]
    _, records_a = results.read(str(torch_file))
    _, records_b = results.read(str(deepspeed_file))
    for op in report_["ops"]:
        a = {r["size_bytes"]: r for r in records_a if r["op"] == op["op"]}
        b = {r["size_bytes"]: r for r in records_b if r["op"] == op["op"]}
        assert [row["size"] for row in op["rows"]] == sorted(a) == sorted(b)
        for row in op["rows"]:
            assert row["ratio"] == pytest.approx(b[row["size"]]["duration_s"] /
                                                 a[row["size"]]["duration_s"])
            assert row["busbw_a"] == a[row["size"]]["busbw_Bps"]
            assert row["above_threshold"] == (row["ratio"] > 1.10)
        small = [row["ratio"] for row in op["rows"] if row["size"] < 65536]
        assert op["small_ratio"] == pytest.approx(compare.geometric_mean(small))
        assert op["verdict"].startswith(f"{op['op']}: B/A {op['small_ratio']:.3f} at small "
                                        "messages, ") and "no verdict" in op["verdict"]
    text = subprocess.run([sys.executable, "report.py", "compare", str(torch_file),
                           str(deepspeed_file)], cwd=ROOT, capture_output=True, text=True).stdout
    assert "---- all_reduce" in text and "geometric mean B/A: small (< 64 KiB)" in text


@pytest.mark.parametrize("dist", ["torch", "deepspeed"])
def test_saved_table_equals_its_results_file(two_runs, dist):
    results_file, table = two_runs[dist]
    report_ = compare_json(results_file, table)
    for op in report_["ops"]:
        assert op["only_a"] == op["only_b"] == []
        for row in op["rows"]:
            # The table rounds durations to 1 ns (or 1 us above 1 ms): ratio 1 within that.
            assert row["ratio"] == pytest.approx(1, abs=1e-6 / row["duration_a"] + 1e-6)
            assert row["busbw_b"] == pytest.approx(row["busbw_a"], abs=0.0006e9 / 8 + 1e-9)


def test_nccl_tests_output_stands_beside_a_run(two_runs, tmp_path):
    report_ = compare_json(FIXTURES / "all_reduce_perf.txt", two_runs["torch"][0])
    assert report_["a"] == "nccl-tests n=2"
    (op,) = [o for o in report_["ops"] if o["op"] == "all_reduce"]
    rows = {row["size"]: row for row in op["rows"]}
    assert rows[1048576]["duration_a"] == pytest.approx(40e-6)  # out-of-place columns
    assert rows[1048576]["busbw_a"] == pytest.approx(26.21e9)
    assert 8 in op["only_a"]  # 8 B is not a size of the suite's 2-rank scan: listed, not dropped
    assert [o["op"] for o in report_["ops"]] == ["all_reduce", "broadcast"]
    broadcast = report_["ops"][1]
    assert broadcast["rows"] == [] and broadcast["only_b"]


def test_world_size_and_dtype_mismatch_warn(tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    header = ("\n---- Performance of all_reduce on {n} devices " + "-" * 57 + "\n"
              "Size (Bytes)         Description               Duration (us)        "
              "Throughput (Gbps)    BusBW (Gbps)\n" + "-" * 100 + "\n")
    a.write_text(header.format(n=2) + "16                   4x4                       10.000"
                 "               0.026                0.013\n")
    b.write_text(header.format(n=4) + "16                   4x4                       20.000"
                 "               0.026                0.013\n")
    report_ = compare_json(a, b)
    assert report_["warnings"][0] == "world sizes differ: 2 (a.txt) vs 4 (b.txt)"
    assert report_["warnings"][1].startswith("A and B have no repeated windows")
    (row,) = report_["ops"][0]["rows"]
    assert row["ratio"] == 2.0 and row["above_threshold"]
    assert report_["ops"][0]["verdict"].startswith(
        "all_reduce: B/A 2.000 at small messages, no large messages to compare (geometric "
        "means); no verdict: one window a run cannot tell a change from the run-to-run noise")


def test_unreadable_input_is_one_line(tmp_path):
    junk = tmp_path / "junk.txt"
    junk.write_text("hello\n")
    proc = subprocess.run([sys.executable, "report.py", "compare", str(junk), str(junk)],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 1
    assert proc.stderr.strip().count("\n") == 0 and "neither a results file" in proc.stderr
