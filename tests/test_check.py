"""--check: every op's result compared element by element with the exact expected result."""

import pytest

from support import assert_no_traceback

from formulas import expected_ops

MAXSIZE = 6


def wrong_column(result):
    return {table.op: [int(row.extra[-1]) for row in table.rows] for table in result.tables}


DTYPES = ["float32", "bfloat16", "int32", "float16"]


# Both layers at 3 ranks (not a power of two: uneven chunks), one each at 1 and 2.
@pytest.mark.parametrize("nproc,dist", [(1, "torch"), (2, "deepspeed"), (3, "torch"),
                                        (3, "deepspeed")])
def test_check_passes(run, dist, nproc):
    """Every op, every size, in four dtypes (one run: a table per op and dtype)."""
    result = run("run_all.py", "--check", "--scan", f"--maxsize={MAXSIZE}", "--trials=1",
                 "--warmups=0", f"--dtype={','.join(DTYPES)}", f"--dist={dist}", nproc=nproc)
    assert result.returncode == 0, result
    assert result.ops == [op for op in expected_ops(nproc) for _ in DTYPES]
    assert [table.qualifiers["dtype"] for table in result.tables] == \
        DTYPES * len(expected_ops(nproc))
    for table in result.tables:
        assert table.columns[-1] == "Wrong"
        assert [int(row.extra[-1]) for row in table.rows] == [0] * (MAXSIZE - 1), table.op


@pytest.mark.parametrize("op,nproc,rank,dist", [
    ("all_reduce", 3, 2, "torch"),
    ("all_gather", 2, 1, "deepspeed"),
    ("reduce_scatter", 3, 0, "deepspeed"),
    ("pt2pt", 3, 1, "torch"),
])
def test_check_catches_one_wrong_element(run, op, nproc, rank, dist):
    """The harness's test hook alters one result element of `op` on `rank` after the check run."""
    result = run("run_all.py", "--check", "--scan", "--maxsize=4", "--trials=1", f"--dist={dist}",
                 nproc=nproc, env={"COMMBENCH_INJECT_WRONG": f"{op}:{rank}"})
    assert result.returncode == 1, result
    wrong = wrong_column(result)
    assert wrong.pop(op) == [1, 1, 1]
    assert all(counts == [0, 0, 0] for counts in wrong.values()), wrong
    assert len(result.tables) == 6  # the run went on to the end
    errors = [line for line in result.stderr.splitlines() if line.startswith("commbench: error:")]
    size = nproc * 2 * 4  # the first size of the scan: E = 2n elements of 4 bytes
    assert errors == [f"commbench: error: --check found wrong elements: {op} at {size} bytes per "
                      f"rank: 1 wrong element (and 2 more)"]
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
