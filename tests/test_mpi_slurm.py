"""The MPI and Slurm launchers for real: mpirun (MPICH), Open MPI's mpirun, and srun on a
one-node Slurm cluster (scripts/slurm-up.sh). Rank, local rank and world size come from each
launcher's own environment; MASTER_ADDR is derived, never set by the test.

Each launcher with each layer: one at 2 ranks (all_reduce: its bandwidth against the formulas,
the launcher named on the start-up line), the other at 3 ranks (run_all.py: every op, its
bandwidth against the formulas). The ccl backend under the same launchers: tests/test_ccl.py."""

import pytest

from formulas import OPS, check_bandwidth

NAMES = {"mpirun": "MPICH/Intel MPI", "openmpi": "Open MPI", "srun": "Slurm"}


@pytest.mark.parametrize("launcher,dist", [("mpirun", "torch"), ("openmpi", "deepspeed"),
                                           ("srun", "torch")])
def test_all_reduce(run, launcher, dist):
    nproc = 2
    result = run("all_reduce.py", "--scan", "--raw", "--maxsize=9", "--trials=3", f"--dist={dist}",
                 nproc=nproc, launcher=launcher)
    assert result.returncode == 0, result
    table = result.table("all_reduce")
    assert table.devices == nproc
    assert [row.description for row in table.rows] == [f"{nproc * 2 ** p}x4" for p in range(1, 9)]
    for row in table.rows:
        check_bandwidth("all_reduce", nproc, int(row.size), float(row.duration), row.throughput,
                        row.busbw)
    assert f"{nproc} ranks on 1 host(s)" in result.stderr, result
    assert f"launcher environment: {NAMES[launcher]}" in result.stderr, result


@pytest.mark.parametrize("launcher,dist", [("mpirun", "deepspeed"), ("openmpi", "torch"),
                                           ("srun", "deepspeed")])
def test_run_all(run, launcher, dist):
    result = run("run_all.py", "--scan", "--raw", "--maxsize=4", "--trials=2", f"--dist={dist}",
                 nproc=3, launcher=launcher)
    assert result.returncode == 0, result
    assert result.ops == OPS
    assert [t.devices for t in result.tables] == [3, 3, 3, 3, 2, 3]
    for table in result.tables:
        assert [row.description for row in table.rows] == ["6x4", "12x4", "24x4"]
        for row in table.rows:
            check_bandwidth(table.op, table.devices, int(row.size), float(row.duration),
                            row.throughput, row.busbw)
    assert "3 ranks on 1 host(s)" in result.stderr, result
    assert f"launcher environment: {NAMES[launcher]}" in result.stderr, result
