"""--scan: every op, world sizes 1, 2, 3, each layer at 3 ranks, read from --raw output."""

import pytest

from formulas import check_bandwidth, expected_ops

MAXSIZE = 12


@pytest.mark.parametrize("nproc,dist", [(1, "deepspeed"), (2, "torch"), (3, "torch"),
                                        (3, "deepspeed")])
def test_scan_all_ops(run, nproc, dist):
    result = run("run_all.py", "--scan", "--raw", f"--maxsize={MAXSIZE}", "--trials=4",
                 "--warmups=1", f"--dist={dist}", nproc=nproc)
    assert result.returncode == 0, result
    assert "Traceback" not in result.stderr, result
    assert result.ops == expected_ops(nproc), result
    if nproc == 1:
        assert "skipping pt2pt" in result.stderr
    for table in result.tables:
        shown = 2 if table.op == "pt2pt" else nproc
        assert table.devices == shown
        assert table.columns == ["Size (Bytes)", "Description", "Duration (us)",
                                 "Throughput (Gbps)", "BusBW (Gbps)"]
        assert len(table.rows) == MAXSIZE - 1
        for p, row in enumerate(table.rows, start=1):
            numel = nproc * 2 ** p
            assert row.description == f"{numel}x4"
            assert int(row.size) == numel * 4
            duration = float(row.duration)
            assert duration > 0
            check_bandwidth(table.op, nproc, numel * 4, duration, row.throughput, row.busbw)


def test_scan_human_units(run):
    result = run("run_all.py", "--scan", "--maxsize=12", "--trials=2", "--warmups=0",
                 "--dist=torch", "--all-gather", nproc=2)
    assert result.returncode == 0, result
    table = result.table("all_gather")
    assert table.columns[2] == "Duration"
    sizes = [row.size for row in table.rows]
    assert sizes[:3] == ["16.0 B", "32.0 B", "64.0 B"]
    assert sizes[6] == "1.0 KB" and sizes[-1] == "16.0 KB"
    for row in table.rows:
        number, unit = row.duration.split()
        assert unit in ("us", "ms")
        assert (float(number) < 1000) if unit == "us" else (float(number) >= 1)
