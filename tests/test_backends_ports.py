"""A MASTER_PORT that another process holds, and a master address that cannot be found.
(--backend ccl, for real: test_ccl.py.)"""

import socket

import pytest


# Rank 1's wait for a rendezvous that cannot come is --timeout long, and MPICH's mpirun polls
# (a core busy) all the while: a short one.
TIMEOUT = 3


@pytest.mark.parametrize("launcher,nproc", [("python", 1), ("mpirun", 2)])
def test_master_port_in_use(run, launcher, nproc):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = run("all_reduce.py", "--dist=torch", "--scan", "--maxsize=3", f"--timeout={TIMEOUT}",
                     nproc=nproc, launcher=launcher, env={"MASTER_PORT": str(port)})
    assert result.returncode == 1, result
    assert f"commbench: error: MASTER_PORT {port} is already in use on this host" in result.stderr
    assert "Traceback" not in result.stderr
    assert result.tables == []
    if nproc > 1:
        # Rank 1 reached the other process's socket, not rank 0: its deadline ends it (the line
        # is the deadline's own: the rank ended at --timeout, it did not hang).
        assert f"rank 1: no rendezvous of 2 ranks at 127.0.0.1:{port} within {TIMEOUT} s" in result.stderr
    else:  # rank 0 cannot bind: it says so at once, before any deadline
        assert f"within {TIMEOUT} s" not in result.stderr


def test_several_hosts_without_mpi4py_or_master_addr(run, tmp_path):
    """An Open MPI environment spread over two hosts (local size 1 of 2) needs rank 0's address:
    with mpi4py hidden and no MASTER_ADDR, one line says what to do."""
    (tmp_path / "mpi4py").mkdir()
    (tmp_path / "mpi4py" / "__init__.py").write_text("raise ImportError('hidden by the test')\n")
    env = {"PYTHONPATH": str(tmp_path), "OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2",
           "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "1"}
    result = run("all_reduce.py", "--dist=torch", env=env)
    assert result.returncode == 1, result
    assert result.stderr.strip() == ("commbench: error: ranks span several hosts and MASTER_ADDR is "
                                     "not set: install mpi4py (pip install mpi4py) or export "
                                     "MASTER_ADDR=<address of rank 0>")
