"""pytest's hooks and fixtures for the suite; the helpers they use (and test files import) are in
support.py."""

import os
import subprocess
from pathlib import Path

import pytest

from support import SIM_HOSTS, launch, require_root, sim_host_names


# make test's first part runs files three at a time (pytest-xdist, --dist loadfile: a file is
# one unit of work, handed to whichever worker is free, in collection order). The longest
# first, so that no worker starts a long file when the others are nearly done: the order in
# file-order.txt, written from a clean CI run's times by scripts/test-times.py --order. A file
# missing there (a new one) runs last, in its own order.
LONGEST_FIRST = [line.split()[0] for line in
                 (Path(__file__).parent / "file-order.txt").read_text().splitlines()
                 if line.strip() and not line.startswith("#")]


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
