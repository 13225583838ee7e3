"""--check: every op's result compared element by element with the exact expected result."""

import pytest

from support import assert_no_traceback

from formulas import MORE_OPS, expected_ops


def wrong_column(result):
    return {table.op: [int(row.extra[-1]) for row in table.rows] for table in result.tables}


# --check passing for every op (--all), every size, four dtypes, at world sizes 1-3 (both layers
# at 3): test_scan.py's scan, which reads --check's column of every table.


# Every op's own check, each at one world size and layer (both layers at 3 ranks).
@pytest.mark.parametrize("op,nproc,rank,dist", [
    ("all_reduce", 3, 2, "torch"),
    ("all_gather", 2, 1, "deepspeed"),
    ("reduce_scatter", 3, 0, "deepspeed"),
    ("pt2pt", 3, 1, "torch"),
    ("reduce", 3, 0, "deepspeed"),
    ("gather", 2, 0, "torch"),
    ("scatter", 3, 2, "torch"),
    ("barrier", 3, 1, "deepspeed"),
])
def test_check_catches_one_wrong_element(run, op, nproc, rank, dist):
    """The harness's test hook alters one result element of `op` on `rank` after the check run;
    every other op's check finds nothing (the six by default; with one of the others, --all)."""
    every = ["--all"] if op in MORE_OPS else []
    result = run("run_all.py", *every, "--check", "--scan", "--maxsize=4", "--trials=1",
                 f"--dist={dist}", nproc=nproc, env={"COMMBENCH_INJECT_WRONG": f"{op}:{rank}"})
    assert result.returncode == 1, result
    wrong = wrong_column(result)
    assert wrong.pop(op) == ([1] if op == "barrier" else [1, 1, 1])
    assert all(counts == ([0] if other == "barrier" else [0, 0, 0])
               for other, counts in wrong.items()), wrong
    # the run went on to the end
    assert len(result.tables) == len(expected_ops(nproc)) + (5 if every else 0)
    errors = [line for line in result.stderr.splitlines() if line.startswith("commbench: error:")]
    if op == "barrier":  # no payload, one row
        assert errors == ["commbench: error: --check found wrong elements: barrier at 0 bytes "
                          "per rank: 1 wrong element"]
    else:
        size = nproc * 2 * 4  # the first size of the scan: E = 2n elements of 4 bytes
        assert errors == [f"commbench: error: --check found wrong elements: {op} at {size} bytes "
                          f"per rank: 1 wrong element (and 2 more)"]
    assert_no_traceback(result)


def test_check_small_types_at_world_size_3_single_size(run):
    """Values stay exact even for 8-bit and bfloat16 sums; single-size runs check too.
    (all_gather is left out: its single size takes mem-factor + 0.2 of memory, SPEC §4,
    gigabytes here, and it is checked in every scan.)"""
    dtypes = ["int8", "uint8", "double", "bfloat16"]
    result = run("run_all.py", "--check", "--mem-factor=0.000002", "--trials=1",
                 f"--dtype={','.join(dtypes)}", "--dist=torch", "--all-reduce", "--all-to-all",
                 "--reduce-scatter", "--pt2pt", "--broadcast", nproc=3)
    assert result.returncode == 0, result
    assert len(result.tables) == 5 * len(dtypes)
    assert [table.qualifiers["dtype"] for table in result.tables] == dtypes * 5
    assert all(len(table.rows) == 1 for table in result.tables)
    assert all(row.extra[-1] == "0" for table in result.tables for row in table.rows)


def test_check_with_async_op(run):
    result = run("run_all.py", "--check", "--async-op", "--scan", "--maxsize=5", "--trials=2",
                 "--dist=torch", nproc=2)
    assert result.returncode == 0, result
    assert wrong_column(result) == {op: [0] * 4 for op in expected_ops(2)}
