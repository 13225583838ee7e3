"""--scan: every op (--all) in four dtypes, world sizes 1, 2, 3, each layer at 3 ranks, read
from --raw output, --check's column and the results file."""

import json

import pytest

from formulas import check_bandwidth, expected_ops
from support import assert_no_traceback

MAXSIZE = 8
# --all: the six, then the four nccl-tests and PARAM have besides, and all_to_allv (even splits:
# all_to_all's figures) before barrier, which moves no dtype (one table).
MORE = ["reduce", "gather", "scatter", "all_to_allv", "barrier"]
DTYPES = {"float32": 4, "bfloat16": 2, "int32": 4, "float16": 2}
COLUMNS = ["Size (Bytes)", "Description", "Duration (us)", "Throughput (Gbps)", "BusBW (Gbps)",
           "Wrong"]


# Both layers at 3 ranks (not a power of two: uneven chunks), one each at 1 and 2.
@pytest.mark.parametrize("nproc,dist", [(1, "deepspeed"), (2, "torch"), (3, "torch"),
                                        (3, "deepspeed")])
def test_scan_all_ops(run, tmp_path, nproc, dist):
    """Every op, every size, four dtypes, --check on (one run: a table per op and dtype)."""
    output = tmp_path / "scan.jsonl"
    result = run("run_all.py", "--all", "--scan", "--raw", f"--maxsize={MAXSIZE}", "--trials=2",
                 "--warmups=1", "--check", f"--dtype={','.join(DTYPES)}", f"--dist={dist}",
                 f"--output={output}", nproc=nproc)
    assert result.returncode == 0, result
    assert_no_traceback(result)
    ops = expected_ops(nproc) + MORE
    assert result.ops == [op for op in ops[:-1] for _ in DTYPES] + ["barrier"], result
    if nproc == 1:
        assert "skipping pt2pt" in result.stderr
    assert [table.qualifiers.get("dtype") for table in result.tables] == \
        list(DTYPES) * (len(ops) - 1) + [None]
    sizes = [nproc * 2 ** p for p in range(1, MAXSIZE)]
    for table in result.tables:
        assert table.devices == (2 if table.op == "pt2pt" else nproc)
        assert table.columns == COLUMNS
        assert {int(row.extra[-1]) for row in table.rows} == {0}, table  # --check: 0 wrong
        if table.op == "barrier":
            assert table.qualifiers == {}
            continue
        dtype = table.qualifiers["dtype"]
        assert table.qualifiers == {"dtype": dtype, **({"splits": "even"} if table.op ==
                                                       "all_to_allv" else {})}, table
        element = DTYPES[dtype]
        assert [row.numel for row in table.rows] == sizes
        for numel, row in zip(sizes, table.rows):
            assert row.description == f"{numel}x{element}"
            assert int(row.size) == numel * element
            duration = float(row.duration)
            assert duration > 0
            check_bandwidth("all_to_all" if table.op == "all_to_allv" else table.op, nproc,
                            numel * element, duration, row.throughput, row.busbw)
    (barrier,) = result.table("barrier").rows  # no payload: one row, latency only
    assert (barrier.size, barrier.description, barrier.throughput, barrier.busbw) == \
        ("0", "-", "-", "-")
    assert float(barrier.duration) > 0
    meta, *found = [json.loads(line) for line in output.read_text().splitlines()]
    assert meta["type"] == "meta"
    assert meta["ops"] == expected_ops(2) + MORE  # what --all asked for, pt2pt at 1 rank too
    assert meta["dtypes"] == list(DTYPES)
    assert [(r["op"], r["dtype"]) for r in found] == \
        [(op, dtype) for op in ops[:-1] for dtype in DTYPES for _ in sizes] + [("barrier", None)]
    assert all(r["wrong"] == 0 for r in found)
    assert found[-1]["size_bytes"] == 0 and found[-1]["busbw_Bps"] is None
    by_op = {r["op"]: r for r in found}
    assert by_op["reduce"]["reduce_op"] == "sum" and "reduce_op" not in by_op["gather"]


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
