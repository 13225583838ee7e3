"""The suite across 2 simulated hosts x 2 ranks (scripts/sim-hosts.sh) under the launchers that
reach other hosts through ssh: MPICH's hydra, Open MPI's mpirun and DeepSpeed's runner (pdsh),
each started in host 1 with scripts/sim-ssh as its ssh, as docs/cluster.md runs them (its block,
run as written: run_all.py's default layer, deepspeed.comm). Neither MPI launch sets
MASTER_ADDR: the ranks find rank 0's address themselves (mpi4py, from the launcher's own MPI
library). Read from rank 0's tables, its start-up lines and each launcher's results file. Root
only; the hosts are torn down by name (and every process in them killed) even when a test
fails."""

import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from support import SIM_HOSTS as SCRIPT, BIN, OPEN_MPI, ROOT, base_env, parse_tables
from test_docs_examples import given_to, own_hosts, run_example

SSH = ROOT / "scripts" / "sim-ssh"
OPS = ["all_reduce", "all_gather", "all_to_all", "reduce_scatter", "pt2pt", "broadcast"]
SMALL = ("--scan", "--maxsize=5", "--trials=2", "--check")  # docs/cluster.md's block's too
LAUNCHERS = {"mpich": "MPICH/Intel MPI", "openmpi": "Open MPI", "deepspeed": "torchrun/deepspeed"}


def require(program, what):
    """Skip (fail in CI, COMMBENCH_REQUIRE_LAUNCHERS) when `program` is not installed here."""
    if shutil.which(str(program)):
        return
    why = f"{what} is not available here (scripts/test-services.sh up installs it, as root)"
    if os.environ.get("COMMBENCH_REQUIRE_LAUNCHERS"):
        pytest.fail(why)
    pytest.skip(why)


def in_host_1(name, command, env, timeout=300):
    """`command` started in host 1 of `name`, from the repository root, as a user would."""
    full = [str(SCRIPT), "run", name, "1", *map(str, command)]
    started = time.monotonic()
    proc = subprocess.run(full, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)
    print(f"$ {' '.join(full)}\n({time.monotonic() - started:.1f} s, exit {proc.returncode})")
    return proc


def openmpi_command(name, env, *args, exports=()):
    # Open MPI keeps the working folder but not the environment: -x names what travels, and
    # `env PATH=...` keeps the venv first (Open MPI puts /usr/bin first). --bind-to none: both
    # simulated hosts share this machine's cores, where binding would stack the ranks up.
    exported = [part for variable in ("TORCH_EXTENSIONS_DIR", "OMP_NUM_THREADS",
                                      "PYTHONUNBUFFERED", *exports) for part in ("-x", variable)]
    return [OPEN_MPI, "--allow-run-as-root", "--bind-to", "none",
            "--mca", "plm_rsh_agent", SSH, "--host", f"{name}1:2,{name}2:2", *exported,
            "env", f"PATH={env['PATH']}", sys.executable, "run_all.py", "--backend=gloo", *args]


def check_run(tables, name, subnet, output):
    """One launcher's run: rank 0's six tables (--check: 0 wrong) and its results file."""
    assert [t.op for t in tables] == OPS
    assert [t.devices for t in tables] == [4, 4, 4, 4, 2, 4]  # pt2pt: between 2 ranks
    assert all(row.extra[-1] == "0" for t in tables for row in t.rows)  # --check: 0 wrong
    lines = [json.loads(line) for line in output.read_text().splitlines()]
    meta, records = lines[0], lines[1:]
    assert meta["hostnames"] == [f"{name}1", f"{name}1", f"{name}2", f"{name}2"]
    assert meta["master_addr"] == f"{subnet}.1"  # host 1's address, never loopback
    assert meta["world_size"] == 4 and meta["dist"] == "deepspeed"
    assert records and all(r["wrong"] == 0 and r["world_size"] == 4 for r in records)


def test_the_launchers_over_ssh_as_cluster_md_runs_them(tmp_path):
    """docs/cluster.md's block, run as written (its hosts, subnet and results files renamed:
    other tests run beside it), and not in test_docs_examples.py: MPICH's hydra, Open MPI's
    mpirun and `deepspeed --hostfile` (pdsh, which runs `ssh`: sim-ssh, first on PATH, into every
    host; the runner finds the master address with `ssh host1 hostname -I`; the remote shell
    starts clean, so what the ranks need travels in a .deepspeed_env file, DS_ENV_FILE), each
    across 2 hosts x 2 ranks, all six ops checked."""
    require(BIN / "mpiexec", "MPICH's mpiexec (pip install mpich)")
    require(OPEN_MPI, "Open MPI (apt-get install openmpi-bin)")
    require(BIN / "deepspeed", "deepspeed")
    require("pdsh", "pdsh (apt-get install pdsh)")
    renames, name, subnet = own_hosts()
    outputs = {launcher: tmp_path / f"{launcher}.jsonl" for launcher in LAUNCHERS}
    proc = run_example(*given_to("test_the_launchers_over_ssh_as_cluster_md_runs_them"),
                       tmp_path, renames={**renames, **{f"{launcher}.jsonl": path
                                                        for launcher, path in outputs.items()}})
    assert "MASTER_ADDR" not in base_env()  # the MPI ranks find rank 0's address themselves
    assert proc.stderr.count("4 ranks on 2 host(s)") == 3, proc.stderr[-6000:]
    for launcher in LAUNCHERS:
        assert f"launcher environment: {LAUNCHERS[launcher]}" in proc.stderr, launcher
    # pdsh puts the host's name before each line a host writes; rank 0's are host 1's
    prefix = f"{name}1: "
    pdsh = "\n".join(line[len(prefix):] for line in proc.stdout.splitlines()
                     if line.startswith(prefix))
    mpi = parse_tables("\n".join(line for line in proc.stdout.splitlines()
                                 if not line.startswith((prefix, f"{name}2: "))))
    check_run(mpi[:6], name, subnet, outputs["mpich"])
    check_run(mpi[6:], name, subnet, outputs["openmpi"])
    assert len(mpi) == 12
    check_run(parse_tables(pdsh), name, subnet, outputs["deepspeed"])
    assert f"Using IP address of {subnet}.1 for node {name}1" in proc.stdout + proc.stderr


def test_open_mpi_with_another_mpi_in_mpi4py(hosts, tmp_path):
    """mpi4py held to MPICH's library under Open MPI: one line naming MASTER_ADDR on rank 0,
    every rank ends at once (no MPICH abort, no rank waiting for a master of its own)."""
    require(OPEN_MPI, "Open MPI (apt-get install openmpi-bin)")
    mpich = BIN.parent / "lib" / "libmpi.so.12"
    if not mpich.exists():
        pytest.skip("no MPICH library in the venv (pip install mpich)")
    name, _ = hosts(2)
    env = base_env(MPI4PY_LIBMPI=str(mpich))
    proc = in_host_1(name, openmpi_command(name, env, "--dist=torch", "--all-reduce", *SMALL,
                                           exports=("MPI4PY_LIBMPI",)), env, timeout=120)
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if line.startswith("commbench: error:")]
    assert len(errors) == 1, proc.stderr
    assert re.fullmatch(r"commbench: error: ranks span several hosts and MASTER_ADDR is not set, "
                        r"but mpi4py uses 'MPICH Version:.*', not the MPI of the launcher "
                        r"\(Open MPI\): export MASTER_ADDR=<address of rank 0>, or point mpi4py "
                        r"at the launcher's libmpi \(MPI4PY_LIBMPI=/path/to/libmpi.so\)",
                        errors[0]), errors[0]
    assert "Traceback" not in proc.stderr and "Abort" not in proc.stderr
    assert parse_tables(proc.stdout) == []


def test_sim_ssh(hosts):
    """The ssh stand-in: ssh's options skipped, user@host or an address, the command run in
    that host in a clean login environment, stdin and the exit status passed through."""
    name, subnet = hosts(2)
    env = base_env(MASTER_ADDR="leaked")
    proc = subprocess.run([str(SSH), "-o", "PasswordAuthentication=no", "-p", "22", "-l", "root",
                           "-i", "/nonexistent", "-2axTq", "-oBatchMode=yes", f"root@{name}2",
                           "hostname;", "hostname -I;", "pwd;", 'echo "$PATH ${MASTER_ADDR-}";',
                           "cat"], input="from stdin\n", env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    home = os.path.expanduser("~")
    assert proc.stdout.split("\n") == [f"{name}2", f"{subnet}.2 ", home,
                                       "/usr/local/bin:/usr/bin:/bin ", "from stdin", ""]
    proc = subprocess.run([str(SSH), "-n", f"{subnet}.1", "hostname; cat; exit 7"],
                          input="not read\n", capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout) == (7, f"{name}1\n")
    proc = subprocess.run([str(SSH), f"{name}9", "true"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 255
    assert proc.stderr.startswith(f"sim-ssh: no simulated host {name}9 ")
    assert proc.stderr.count("\n") == 1
