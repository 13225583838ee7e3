"""Several hosts under Slurm: a Slurm cluster of its own (scripts/sim-slurm.sh: slurmctld, a
slurmd per simulated host, its own munged and slurm.conf) over 2 simulated hosts
(scripts/sim-hosts.sh), and the suite started as a user would start it there: `srun` in host 1,
with no MASTER_ADDR or MASTER_PORT, so each rank finds the master from Slurm's node list.
Root only; the cluster is stopped and the hosts torn down even when a test fails."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from support import SIM_HOSTS as SCRIPT, ROOT, base_env, parse_tables
from test_docs_examples import given_to, own_hosts, run_example

SLURM_SCRIPT = ROOT / "scripts" / "sim-slurm.sh"
STATE_ROOT = Path(os.environ.get("COMMBENCH_HOSTS_DIR", "/tmp/commbench-hosts"))
DAEMONS = ("slurmctld", "slurmd", "srun", "munged")


def require_slurm():
    search = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    missing = [name for name in DAEMONS if shutil.which(name, path=search) is None]
    if missing:
        why = (f"Slurm is not installed here ({', '.join(missing)} missing; scripts/slurm-up.sh "
               "installs it, as root)")
        if os.environ.get("COMMBENCH_REQUIRE_LAUNCHERS"):
            pytest.fail(why)
        pytest.skip(why)


@pytest.fixture
def cluster(hosts):  # noqa: F811
    """2 simulated hosts with a Slurm node on each: (name, subnet, slurm.conf). Stopped after,
    before the hosts go down (this fixture's teardown runs first)."""
    require_slurm()
    name, subnet = hosts(2)
    try:
        result = subprocess.run([str(SLURM_SCRIPT), "up", name], capture_output=True, text=True,
                                timeout=120)
        assert result.returncode == 0, result.stdout + result.stderr
        conf = STATE_ROOT / name / "slurm" / "slurm.conf"
        assert conf.is_file()
        yield name, subnet, conf
    finally:
        subprocess.run([str(SLURM_SCRIPT), "down", name], capture_output=True, timeout=120)


def in_host(name, conf, *cmd, timeout=240):
    """CMD in host 1 of NAME with the cluster's SLURM_CONF and the tests' environment (no
    MASTER_ADDR, no MASTER_PORT: base_env strips them; nor a Slurm job's variables, should the
    tests run inside one: srun would take it for the job to run in)."""
    env = {key: value for key, value in base_env().items() if not key.startswith("SLURM_")}
    env["SLURM_CONF"] = str(conf)
    try:
        return subprocess.run([str(SCRIPT), "run", name, "1", *cmd], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as error:
        def text(data):
            return data.decode(errors="replace") if isinstance(data, bytes) else data or ""
        pytest.fail(f"{' '.join(cmd)}: no end after {timeout} s\n--- stdout\n"
                    f"{text(error.stdout)[-3000:]}\n--- stderr\n{text(error.stderr)[-6000:]}")


def test_srun_across_two_hosts(tmp_path):
    """Both layers, one after the other on one cluster: docs/cluster.md's example, run as
    written (its hosts, subnet and results files renamed: other tests run beside it), and not in
    test_docs_examples.py."""
    require_slurm()
    renames, name, _ = own_hosts()
    outputs = {dist: tmp_path / f"slurm-{dist}.jsonl" for dist in ("torch", "deepspeed")}
    proc = run_example(*given_to("test_srun_across_two_hosts"), tmp_path,
                       renames={**renames, **{f"slurm-{dist}.jsonl": path
                                              for dist, path in outputs.items()}})
    assert proc.stderr.count("4 ranks on 2 host(s), launcher environment: Slurm") == 2, \
        proc.stderr
    for layer in ("torch (torch.distributed)", "deepspeed (deepspeed.comm)"):
        assert f"commbench: {layer}" in proc.stderr, proc.stderr
    tables = parse_tables(proc.stdout)
    assert [t.op for t in tables] == ["all_reduce", "all_gather", "all_to_all",
                                      "reduce_scatter", "pt2pt", "broadcast"] * 2
    assert all(t.rows for t in tables)
    assert all(row.extra == ["0"] for t in tables for row in t.rows), proc.stdout
    for dist, output in outputs.items():
        meta = json.loads(output.read_text().splitlines()[0])
        assert meta["dist"] == dist and meta["world_size"] == 4
        assert meta["hostnames"] == [f"{name}1", f"{name}1", f"{name}2", f"{name}2"]
        # The first host of Slurm's node list (`NAME[1-2]`), not loopback; the default port,
        # which nothing else holds in host 1.
        assert meta["master_addr"] == f"{name}1"
        assert meta["master_port"] == "29500"


def test_node_list_is_compressed_and_read_back_then_down_stops_every_daemon(cluster):
    """srun hands each task the node list compressed, the whole run of trailing digits as the
    number (NAME `cb12ab34` gives `cb12ab[341-342]`); the suite reads it back. Then the same
    cluster is stopped: every daemon gone, the hosts left up."""
    node_list_is_compressed_and_read_back(cluster)
    down_stops_every_daemon(cluster)


def node_list_is_compressed_and_read_back(cluster):
    from commbench.ranks.launch import expand_nodelist
    name, _, conf = cluster
    result = in_host(name, conf, "srun", "-N", "2", "--ntasks-per-node=1", "sh", "-c",
                     'echo "$SLURMD_NODENAME $SLURM_STEP_NODELIST"', timeout=60)
    assert result.returncode == 0, result.stderr
    lines = sorted(result.stdout.split("\n")[:-1])
    assert [line.split()[0] for line in lines] == [f"{name}1", f"{name}2"]
    nodelists = {line.split()[1] for line in lines}
    assert len(nodelists) == 1
    nodelist = nodelists.pop()
    assert "[" in nodelist and nodelist.endswith("]"), nodelist
    assert expand_nodelist(nodelist) == [f"{name}1", f"{name}2"]


def running(pid):
    """The process is there and not a zombie (one its parent has yet to reap)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    state = next(line.split()[1] for line in status.splitlines() if line.startswith("State:"))
    return state != "Z"


def down_stops_every_daemon(cluster):
    name, _, _ = cluster
    state = STATE_ROOT / name / "slurm"
    files = sorted(state.glob("run/*.pid")) + [state / "munge" / "munged.pid"]
    assert [f.name for f in files] == ["slurmctld.pid", f"slurmd-{name}1.pid",
                                       f"slurmd-{name}2.pid", "munged.pid"]
    pids = [int(f.read_text()) for f in files]
    assert all(running(pid) for pid in pids)
    result = subprocess.run([str(SLURM_SCRIPT), "down", name], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert not [pid for pid in pids if running(pid)]
    assert not state.exists()
    # the hosts themselves are still up, for sim-hosts.sh down to remove
    assert os.path.exists(f"/run/netns/{name}1")
