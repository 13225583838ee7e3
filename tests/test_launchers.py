"""Every op script runs as a script, under each launcher that needs no extra daemon."""

from pathlib import Path

import pytest

from formulas import MORE_OPS, OPS, check_bandwidth
from support import free_port


# Each op script the other tests seldom start (all_reduce.py, all_gather.py and pt2pt.py run in
# many of them, under every launcher; all_to_allv.py in test_traffic.py), from its first line
# as `python SCRIPT` runs it, at 2 ranks: its table alone, --minsize honoured (and the scan it
# implies, without --scan). torchrun starts an op script in
# test_torchrun_deepspeed_dist_three_ranks below.
@pytest.mark.parametrize("op", [op for op in OPS if op not in ("all_reduce", "all_gather", "pt2pt")]
                         + MORE_OPS)
def test_each_op_script_runs_alone(run, op):
    result = run(f"{op}.py", "--raw", "--minsize=3", "--maxsize=6", "--trials=2",
                 "--dist=torch", nproc=2)
    assert result.returncode == 0, result
    assert result.ops == [op]
    table = result.table(op)
    assert table.devices == 2
    if op == "barrier":
        assert [row.size for row in table.rows] == ["0"]
        return
    assert [row.description for row in table.rows] == [f"{2 * 2 ** p}x4" for p in (3, 4, 5)]
    assert [row.size for row in table.rows] == [str(2 * 2 ** p * 4) for p in (3, 4, 5)]
    for row in table.rows:
        check_bandwidth(op, 2, int(row.size), float(row.duration), row.throughput, row.busbw)


def shm_left(run):
    """DeepSpeed's shm buffers of the run (named by its master port: the port, or a launcher's
    run) still in /dev/shm."""
    port = run if isinstance(run, int) else next(
        a.split("=", 1)[1] for a in run.cmd if str(a).startswith("--master_port="))
    return sorted(p.name for p in Path("/dev/shm").glob(f"deepspeed_allreduce_buffer_*_{port}_*"))


def test_deepspeed_launcher_torch_layer(run):
    result = run("all_reduce.py", "--scan", "--maxsize=5", "--trials=2", "--dist=torch",
                 nproc=2, launcher="deepspeed")
    assert result.returncode == 0, result
    table = result.table("all_reduce")
    assert table.devices == 2 and len(table.rows) == 4
    assert "commbench: torch (torch.distributed)" in result.stderr, result


def test_deepspeed_launcher_run_all_default_dist(run):
    """`deepspeed --num_gpus 3 run_all.py --scan`: the README's main job, in small, on
    DeepSpeed's layer (the default) at 3 ranks. DeepSpeed's CPU shm op (its ranks all on one
    host: the deepspeed launcher sets LOCAL_SIZE) creates a ~66 MB file per rank in /dev/shm,
    named by the master port, and never removes it; the suite unlinks them once every rank has
    mapped them, so the run leaves no memory behind."""
    result = run("run_all.py", "--scan", "--maxsize=4", "--trials=2", nproc=3,
                 launcher="deepspeed")
    assert result.returncode == 0, result
    assert result.ops == OPS
    assert "commbench: deepspeed (deepspeed.comm)" in result.stderr, result
    assert result.table("all_reduce").devices == 3 and len(result.table("all_reduce").rows) == 3
    assert shm_left(result) == []


@pytest.mark.parametrize("dist", ["deepspeed", "torch"])
def test_plain_python_is_a_world_of_one(run, dist):
    """And stdout is only the table: DeepSpeed's own log lines and build messages go to stderr,
    never into it."""
    result = run("broadcast.py", "--scan", "--maxsize=5", "--trials=2", f"--dist={dist}")
    assert result.returncode == 0, result
    assert result.table("broadcast").devices == 1
    assert "Traceback" not in result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "" and lines[1].startswith("---- Performance of broadcast on 1 devices")
    assert len(lines) == 4 + 4  # title, columns, rule, the 4 sizes, and the blank line first
    assert "Warning" not in result.stderr and "deprecated" not in result.stderr


def test_torchrun_deepspeed_dist_three_ranks(run):
    result = run("reduce_scatter.py", "--scan", "--raw", "--maxsize=5", "--trials=2",
                 "--dist=deepspeed", nproc=3, launcher="torchrun")
    assert result.returncode == 0, result
    assert [row.description for row in result.table("reduce_scatter").rows] == \
        [f"{3 * 2 ** p}x4" for p in range(1, 5)]


def test_parallel_bench_zero_leaves_nothing_in_dev_shm(run):
    """ZeRO starts DeepSpeed's communication itself (deepspeed.initialize), after the suite's
    start-up: its shm buffers are unlinked there too. The ranks are started by hand with what
    the deepspeed launcher adds to torchrun's environment (LOCAL_SIZE, CROSS_RANK, CROSS_SIZE:
    DeepSpeed's shm op then takes every rank for one host's); the launcher's own run is the
    test above."""
    port = free_port()
    result = run("parallel_bench.py", "--strategy=zero1", "--hidden=64", "--layers=2", "--heads=4",
                 "--vocab=128", "--seq=8", "--micro-batch=2", "--micro-batches=1", "--steps=1",
                 "--warmup=0", nproc=2, env={"MASTER_PORT": str(port), "LOCAL_SIZE": "2",
                                             "CROSS_RANK": "0", "CROSS_SIZE": "1"})
    assert result.returncode == 0, result
    assert shm_left(port) == []
