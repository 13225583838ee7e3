"""Op selection, --async-op, --bw-unit, --dtype, --debug."""

import pytest

from formulas import check_bandwidth


def test_run_all_selected_ops_in_spec_order(run):
    result = run("run_all.py", "--scan", "--maxsize=4", "--trials=2", "--dist=torch",
                 "--broadcast", "--all-reduce", nproc=2)
    assert result.returncode == 0, result
    assert result.ops == ["all_reduce", "broadcast"]


def test_run_all_explicit_pt2pt_on_one_rank_fails(run):
    result = run("run_all.py", "--scan", "--maxsize=4", "--dist=torch", "--pt2pt")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith("commbench: error: pt2pt needs at least 2")


@pytest.mark.parametrize("dist,dtype,element_size", [("torch", "bfloat16", 2), ("deepspeed", "int32", 4)])
def test_async_op_dtype_and_gbytes(run, dist, dtype, element_size):
    result = run("run_all.py", "--scan", "--raw", "--maxsize=10", "--trials=3", "--async-op",
                 f"--dtype={dtype}", "--bw-unit=GBps", f"--dist={dist}", nproc=2)
    assert result.returncode == 0, result
    assert len(result.tables) == 6
    for table in result.tables:
        assert table.columns[3:] == ["Throughput (GBps)", "BusBW (GBps)"]
        assert len(table.rows) == 9
        for p, row in enumerate(table.rows, start=1):
            assert row.description == f"{2 * 2 ** p}x{element_size}"
            check_bandwidth(table.op, 2, int(row.size), float(row.duration), row.throughput,
                            row.busbw, scale=1)


def test_gbps_is_eight_times_gbytes(run):
    """Same run, both units: bits are bytes x 8 (checked through the formula on each row)."""
    result = run("all_reduce.py", "--scan", "--raw", "--maxsize=10", "--trials=3", "--dist=torch",
                 "--bw-unit=Gbps", nproc=2)
    assert result.returncode == 0, result
    rows = result.table("all_reduce").rows
    for row in rows:
        check_bandwidth("all_reduce", 2, int(row.size), float(row.duration), row.throughput,
                        row.busbw, scale=8)
    large = [row for row in rows if float(row.throughput) > 0.01]
    assert large, rows
    for row in large:
        with pytest.raises(AssertionError):
            check_bandwidth("all_reduce", 2, int(row.size), float(row.duration), row.throughput,
                            row.busbw, scale=1)


def test_all_to_all_debug_is_bounded(run):
    result = run("all_to_all.py", "--scan", "--maxsize=12", "--trials=1", "--debug",
                 "--dist=torch", nproc=3)
    assert result.returncode == 0, result
    lines = [line for line in result.stderr.splitlines() if "all_to_all" in line and "[rank" in line]
    assert len(lines) == 3 * 11
    for rank in range(3):
        mine = [line for line in lines if f"[rank {rank}]" in line]
        assert len(mine) == 11
        # Output chunk j came from rank j (inputs are filled with the rank id).
        assert all("first element of each output chunk=[0.0, 1.0, 2.0]" in line for line in mine)
        assert all(f"input[:4]=[{rank}.0, {rank}.0, {rank}.0, {rank}.0]" in line for line in mine[1:])
    assert max(len(line) for line in lines) < 200


def test_out_of_memory_ends_the_op_cleanly():
    """With the address space capped at 2.5 GB, the 2 GiB buffers of a deep scan cannot be
    allocated: one warning, the rows so far kept, the next op runs, exit 0."""
    import resource
    import subprocess
    import sys

    from support import ROOT, base_env, free_port, parse_tables

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (2_500_000_000, 2_500_000_000))

    proc = subprocess.run([sys.executable, "run_all.py", "--dist=torch", "--backend=gloo",
                           "--scan", "--maxsize=30",
                           "--trials=1", "--warmups=0", "--all-reduce", "--broadcast"],
                          cwd=ROOT, env=base_env(MASTER_PORT=str(free_port())),
                          capture_output=True, text=True, timeout=300, preexec_fn=cap)
    assert proc.returncode == 0, proc.stderr
    tables = parse_tables(proc.stdout)
    assert [t.op for t in tables] == ["all_reduce", "broadcast"]
    for table in tables:
        assert 20 <= len(table.rows) < 29
        assert [row.numel for row in table.rows] == [2 ** p for p in range(1, len(table.rows) + 1)]
    warnings = [line for line in proc.stderr.splitlines() if "out of memory" in line]
    assert warnings == [
        f"commbench: WARNING: {t.op}: out of memory at {2 ** (len(t.rows) + 1)} elements of float "
        "per rank; stopping this op here (lower --maxsize)" for t in tables]
    assert "Traceback" not in proc.stderr
