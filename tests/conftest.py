"""pytest's hooks and fixtures for the suite; the helpers they use (and test files import) are in
support.py."""

import os
import subprocess
from pathlib import Path

import pytest

from support import SIM_HOSTS, launch, require_root, sim_host_names


# make test's first part runs files three at a time (pytest-xdist, --dist loadfile: a file is
# one unit of work, handed to whichever worker is free, in collection order). The longest
# first, so that no worker starts a long file when the others are nearly done: measured in a
# clean CI run (scripts/test-times.py, 2026-12-07), each of these takes 15-110 s of a worker;
# the rest, a few seconds to 15, follow in their own order. A file missing here runs late: a
# new long one goes in its place.
LONGEST_FIRST = ("test_docs_examples.py", "test_gpu_check.py", "test_trials.py", "test_package.py",
                 "test_groups.py", "test_memory.py", "test_report_html.py",
                 "test_many_hosts_mpi.py", "test_io_faults.py", "test_sweeps_and_ops.py",
                 "test_launchers.py", "test_output_stats.py", "test_replay.py",
                 "test_parallel_bench.py", "test_hardening.py", "test_doctor.py", "test_scan.py",
                 "test_mpi_slurm.py", "test_property.py", "test_ds_config.py",
                 "test_many_hosts_slurm.py", "test_ccl.py", "test_first_hour.py", "test_docs.py",
                 "test_check.py", "test_options.py", "test_report_slips.py", "test_torch_alone.py",
                 "test_overlap_buckets.py", "test_sweep_limits.py", "test_performance.py",
                 "test_errors.py", "test_precision.py", "test_traffic.py",
                 "test_report_strategy.py")


def pytest_collection_modifyitems(items):
    order = {name: index for index, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: order.get(item.path.name, len(order)))  # stable: files keep theirs


@pytest.fixture
def run():
    return launch


@pytest.fixture(scope="session")
def two_runs(tmp_path_factory):
    """The same scan through torch.distributed and through deepspeed.comm, 2 ranks, saved both
    as results files and as the printed table."""
    folder = tmp_path_factory.mktemp("runs")
    runs = {}
    for dist in ("torch", "deepspeed"):
        path = folder / f"{dist}.jsonl"
        result = launch("run_all.py", "--scan", "--maxsize=18", "--trials=5", f"--dist={dist}",
                        "--all-reduce", "--broadcast", f"--output={path}", nproc=2)
        assert result.returncode == 0, result
        table = folder / f"{dist}.txt"
        table.write_text(result.stdout)
        runs[dist] = (path, table)
    return runs


@pytest.fixture
def hosts():
    """A function that brings up N simulated hosts (scripts/sim-hosts.sh: network namespaces on a
    bridge) and returns (name, subnet), names and subnets unique per use; all torn down by name
    after the test, with every process in them, whatever its outcome. Root only."""
    require_root("simulated hosts need root (network namespaces)")
    made = []

    def up(count, per_switch=0):
        """`per_switch`: the hosts behind switches of that many, joined by uplinks."""
        name, subnet = sim_host_names()
        made.append(name)
        layout = [str(per_switch)] if per_switch else []
        result = subprocess.run([str(SIM_HOSTS), "up", name, str(count), subnet, *layout],
                                capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        return name, subnet
    yield up
    for name in made:
        subprocess.run([str(SIM_HOSTS), "down", name], capture_output=True, timeout=60)
        assert not os.path.exists(f"/run/netns/{name}1")


@pytest.fixture(scope="session", autouse=True)
def no_dead_ranks_memory():
    """After the session, oneCCL shm endpoints (/dev/shm/PID:N:N, 64 MiB of memory each) whose
    process is gone: ranks the tests killed outright (SIGKILL), which cannot release their own.
    Removed by pid; a live process's are left alone."""
    yield
    for path in Path("/dev/shm").glob("*:*:*"):
        pid = path.name.split(":", 1)[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            path.unlink(missing_ok=True)
