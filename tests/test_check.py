"""--check: every op's result compared element by element with the exact expected result."""

import pytest

from support import assert_no_traceback

from formulas import MORE_OPS, expected_ops


def wrong_column(result):
    return {table.op: [int(row.extra[-1]) for row in table.rows] for table in result.tables}


# --check passing for every op (--all), every size, four dtypes, at world sizes 1-3 (both layers
# at 3): test_scan.py's scan, which reads --check's column of every table.


# Every op's own check, each at one world size and layer (both layers at 3 ranks): (op, rank)
# faults injected together where they share them, one launch each; barrier's alone, its line
# its own.
@pytest.mark.parametrize("faults,nproc,dist", [
    ((("all_reduce", 2), ("pt2pt", 1), ("scatter", 2)), 3, "torch"),
    ((("all_gather", 1),), 2, "deepspeed"),
    ((("reduce_scatter", 0), ("reduce", 0)), 3, "deepspeed"),
    ((("gather", 0),), 2, "torch"),
    ((("barrier", 1),), 3, "deepspeed"),
], ids=lambda value: "-".join(op for op, _ in value) if isinstance(value, tuple) else None)
def test_check_catches_one_wrong_element(run, faults, nproc, dist):
    """The harness's test hook alters one result element of each `op` on its `rank` after the
    check run; every other op's check finds nothing (the six by default; with one of the
    others, --all)."""
    ops = [op for op, _ in faults]
    every = ["--all"] if set(ops) & set(MORE_OPS) else []
    result = run("run_all.py", *every, "--check", "--scan", "--maxsize=4", "--trials=1",
                 f"--dist={dist}", nproc=nproc,
                 env={"COMMBENCH_INJECT_WRONG": ",".join(f"{op}:{rank}" for op, rank in faults)})
    assert result.returncode == 1, result
    wrong = wrong_column(result)
    for op in ops:
        assert wrong.pop(op) == ([1] if op == "barrier" else [1, 1, 1]), op
    assert all(counts == ([0] if other == "barrier" else [0, 0, 0])
               for other, counts in wrong.items()), wrong
    # the run went on to the end
    assert len(result.tables) == len(expected_ops(nproc)) + (5 if every else 0)
    errors = [line for line in result.stderr.splitlines() if line.startswith("commbench: error:")]
    if ops == ["barrier"]:  # no payload, one row
        assert errors == ["commbench: error: --check found wrong elements: barrier at 0 bytes "
                          "per rank: 1 wrong element"]
    else:  # the first op's first size, and every other wrong size counted
        size = nproc * 2 * 4  # the first size of the scan: E = 2n elements of 4 bytes
        assert errors == [f"commbench: error: --check found wrong elements: {ops[0]} at {size} "
                          f"bytes per rank: 1 wrong element (and {3 * len(ops) - 1} more)"]
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
