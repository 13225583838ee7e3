"""What nccl-tests and PARAM users reach for: byte sweeps (--min-bytes/--max-bytes/--step-factor,
--minsize), the reduction operator (--op), several dtypes in one run, and reduce, gather,
scatter and barrier beside the six. Real ranks, read from the table, the results file and the
exit status."""

import json

import pytest

from support import ROOT, assert_no_traceback, launch, parse_tables, usage_error
from test_docs_examples import given_to, run_example

KIB = 1024
ALL_DTYPES = ["float32", "float64", "float16", "bfloat16", "int8", "uint8", "int32", "int64"]


def records(path):
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[0]["type"] == "meta"
    return lines[0], lines[1:]


def wrong(table):
    return [int(row.extra[-1]) for row in table.rows]


# --------------------------------------------------------------------------- the four new ops

# Their scan at world sizes 1-3 (both layers at 3) with --check and --output: test_scan.py's
# --all; each one's script alone: test_launchers.py; their single-size rules:
# test_single_size.py; --check catching an altered element of each: test_check.py.

def test_barrier_check_catches_ranks_that_do_not_wait(run, tmp_path):
    """The barrier's check on a 'barrier' that does not wait: every rank but the late one is
    counted wrong, in a real two-rank process group."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
        "import utils, barrier\n"
        "args = utils.benchmark_parser().parse_args(['--dist', 'torch'])\n"
        "comm = utils.init_processes(None, args)\n"
        "print('rank', comm.rank, 'waited', barrier.BARRIER.check(comm, comm.dist.barrier, args),\n"
        "      'skipped', barrier.BARRIER.check(comm, lambda: None, args), flush=True)\n")
    result = launch(str(probe), nproc=2)
    lines = sorted(line for line in result.stdout.splitlines() if line.startswith("rank"))
    assert result.returncode == 0, result
    assert lines == ["rank 0 waited 0 skipped 1", "rank 1 waited 0 skipped 0"]


# --------------------------------------------------------------------------- sizes

def test_byte_sweep_rounds_to_what_each_op_can_move(run, tmp_path):
    output = tmp_path / "bytes.jsonl"
    result = run("run_all.py", "--all-reduce", "--all-to-all", "--gather", "--min-bytes=1K",
                 "--max-bytes=64K", "--step-factor=4", "--raw", "--trials=2", "--dist=torch",
                 f"--output={output}", nproc=3)
    assert result.returncode == 0, result
    wanted = [1 * KIB, 4 * KIB, 16 * KIB, 64 * KIB]
    for op in ("all_reduce", "gather"):
        assert [int(r.size) for r in result.table(op).rows] == wanted
    # all_to_all splits into 3 equal chunks: 256 floats round down to 255, and the row says so.
    rows = result.table("all_to_all").rows
    assert [r.description for r in rows] == ["255x4", "1023x4", "4095x4", "16383x4"]
    assert [int(r.size) for r in rows] == [1020, 4092, 16380, 65532]
    meta, found = records(output)
    assert (meta["min_bytes"], meta["max_bytes"], meta["step_factor"], meta["scan"]) == \
        (1024, 65536, 4.0, True)
    assert [r["size_bytes"] for r in found if r["op"] == "all_to_all"] == [1020, 4092, 16380, 65532]


# A fractional --step-factor and a byte suffix: test_logic_sizes.py, in-process; --minsize
# implying the scan: test_launchers.py's op scripts.


@pytest.mark.parametrize("flags,message", [
    (["--min-bytes=4K", "--max-bytes=1K"], "--min-bytes 4096 is above --max-bytes 1024"),
    (["--min-bytes=1K", "--step-factor=1"], "argument --step-factor: must be greater than 1"),
    (["--step-factor=0.5"], "argument --step-factor: must be greater than 1"),
    (["--min-bytes=2", "--dtype=float32"],
     "--min-bytes 2 is below one element of float32 (4 bytes)"),
    (["--min-bytes=12X"], "argument --min-bytes: '12X' is not a byte count"),
    (["--minsize=3", "--max-bytes=1M"], "give message sizes as exponents (--minsize/--maxsize) or "
                                        "in bytes"),
    (["--minsize=6", "--maxsize=6"], "--minsize 6 must be below --maxsize 6"),
    (["--op=avg", "--dtype=float32,int32"], "--op avg on an integer dtype (int32)"),
    (["--op=mean"], "argument --op: invalid choice: 'mean'"),
    (["--dtype=float32,float"], "float32 and float name the same dtype"),
    (["--dtype=float32,,int8"], "has an empty dtype name"),
])
@pytest.mark.fast
def test_bad_sizes_ops_and_dtypes_are_one_line(flags, message):
    """In-process (run_all.py's parser); the line and exit status 2 on real ranks: the test
    below."""
    assert message in usage_error([*flags, "--dist=torch"])


def test_min_bytes_below_an_element_of_dtype_all_is_refused_on_every_rank(run):
    """`all` is known only once the backend is: refused before anything is measured, no hang."""
    result = run("run_all.py", "--dtype=all", "--min-bytes=2", "--dist=torch", nproc=2)
    assert result.returncode == 2, result  # a usage error, on both ranks
    assert_no_traceback(result)
    assert result.stdout == ""
    errors = [line for line in result.stderr.splitlines() if line.startswith("commbench: error:")]
    assert errors == ["commbench: error: --min-bytes 2 is below one element of float32 (4 bytes)"]
    assert result.tables == []


# --------------------------------------------------------------------------- --op

# Every operator, one layer each, every dtype the operator's case lists; avg under DeepSpeed's
# layer, which maps it on its own (torch's avg is checked over every dtype in
# test_dtype_all_is_every_dtype_the_backend_moves).
@pytest.mark.parametrize("op,dtypes,dist", [
    ("prod", "float32,bfloat16,int8", "deepspeed"),
    ("min", "float32,int32", "torch"),
    ("max", "bfloat16,uint8", "deepspeed"),
    ("avg", "float32,bfloat16,float16", "deepspeed"),
])
def test_every_reducing_op_checks_under_each_operator(run, tmp_path, op, dtypes, dist):
    output = tmp_path / "op.jsonl"
    result = run("run_all.py", "--all-reduce", "--reduce-scatter", "--reduce", "--all-gather",
                 f"--op={op}", f"--dtype={dtypes}", "--check", "--scan", "--maxsize=7",
                 "--trials=2", "--warmups=0", f"--dist={dist}", f"--output={output}", nproc=3)
    assert result.returncode == 0, result
    names = dtypes.split(",")
    assert [(t.op, t.qualifiers) for t in result.tables] == [
        (o, {"dtype": d, **({"op": op} if o != "all_gather" else {})})
        for o in ("all_reduce", "all_gather", "reduce_scatter", "reduce") for d in names]
    assert all(set(wrong(t)) == {0} for t in result.tables)
    meta, found = records(output)
    assert meta["reduce_op"] == op and meta["dtypes"] == names
    assert {r["reduce_op"] for r in found if r["op"] != "all_gather"} == {op}


def test_check_sees_a_wrong_element_under_another_operator(run):
    result = run("run_all.py", "--all-reduce", "--reduce", "--op=min", "--check", "--scan",
                 "--maxsize=4", "--trials=1", "--dist=torch", nproc=3,
                 env={"COMMBENCH_INJECT_WRONG": "reduce:0"})
    assert result.returncode == 1, result
    assert wrong(result.table("reduce")) == [1, 1, 1]
    assert set(wrong(result.table("all_reduce"))) == {0}


# --------------------------------------------------------------------------- several dtypes

def test_dtype_list_gives_one_table_per_op_and_dtype(run, tmp_path):
    output = tmp_path / "dtypes.jsonl"
    result = run("run_all.py", "--all-reduce", "--all-gather", "--barrier",
                 "--dtype=float32,bfloat16,int32", "--min-bytes=64", "--max-bytes=1K", "--raw",
                 "--trials=2", "--dist=torch", f"--output={output}", nproc=2)
    assert result.returncode == 0, result
    assert [(t.op, t.qualifiers.get("dtype")) for t in result.tables] == [
        ("all_reduce", "float32"), ("all_reduce", "bfloat16"), ("all_reduce", "int32"),
        ("all_gather", "float32"), ("all_gather", "bfloat16"), ("all_gather", "int32"),
        ("barrier", None)]  # a barrier moves no dtype: once
    for table in result.tables[:-1]:
        size = 2 if table.qualifiers["dtype"] == "bfloat16" else 4
        assert [int(r.size) for r in table.rows] == [64, 128, 256, 512, 1024]
        assert {r.element_size for r in table.rows} == {size}
    meta, found = records(output)
    assert meta["dtypes"] == ["float32", "bfloat16", "int32"]
    assert [r["dtype"] for r in found] == ["float32"] * 5 + ["bfloat16"] * 5 + ["int32"] * 5 + \
        ["float32"] * 5 + ["bfloat16"] * 5 + ["int32"] * 5 + [None]
    # report.py keeps the dtypes of one file apart
    compared = launch("report.py", "compare", str(output), str(output), "--format=json")
    assert compared.returncode == 0, compared
    keys = [op["op"] for op in json.loads(compared.stdout)["ops"]]
    assert keys == ["all_reduce float32", "all_reduce bfloat16", "all_reduce int32",
                    "all_gather float32", "all_gather bfloat16", "all_gather int32", "barrier"]


@pytest.mark.parametrize("op,expected", [("sum", ALL_DTYPES),
                                         ("avg", ["float32", "float64", "float16", "bfloat16"])])
def test_dtype_all_is_every_dtype_the_backend_moves(run, op, expected):
    result = run("all_reduce.py", "--dtype=all", f"--op={op}", "--scan", "--maxsize=3",
                 "--trials=1", "--check", "--dist=torch", nproc=2)
    assert result.returncode == 0, result
    assert [t.qualifiers["dtype"] for t in result.tables] == expected
    assert all(set(wrong(t)) == {0} for t in result.tables)


def test_the_issue_command(tmp_path):
    """The issue's own: every op, 1K to 4M bytes, float32 and bfloat16, 3 ranks, 0 wrong; as
    docs/sweeps.md's example runs it (under torchrun), which is run here and not in
    test_docs_examples.py."""
    proc = run_example(*given_to("test_the_issue_command"), tmp_path)
    tables = parse_tables(proc.stdout)
    ops = ["all_reduce", "all_gather", "all_to_all", "reduce_scatter", "pt2pt", "broadcast",
           "reduce", "gather", "scatter", "all_to_allv", "barrier"]
    assert [t.op for t in tables] == [o for o in ops for _ in (1, 2)][:-1], proc.stdout
    assert [t.qualifiers.get("dtype") for t in tables] == ["float32", "bfloat16"] * 10 + [None]
    for table in tables:
        assert table.devices == (2 if table.op == "pt2pt" else 3)
        assert set(wrong(table)) == {0}
        assert len(table.rows) == (1 if table.op == "barrier" else 13)
