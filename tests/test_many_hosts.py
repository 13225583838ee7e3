"""Several hosts on one machine (scripts/sim-hosts.sh: network namespaces on a bridge, each with
its own address and host name): the suite across 3 hosts, read from the table on rank 0's host
and the results file; the hosts themselves. 2 hosts x 2 ranks under torchrun's multi-node
launch (across() below), both layers: tests/test_groups.py's test_layouts_across_two_hosts,
which reads what this file read of such a run (the start-up line, every op's table and --check,
--stats naming the straggler's host, the results file's host names and master address) beside
its layouts. Root only; the hosts are torn down by name (and every process in them killed)
even when a test fails."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support import (BIN, ROOT, SIM_HOSTS as SCRIPT, base_env, finish, free_port, parse_tables,
                     rank_env)


def across(name, subnet, count, nproc, *args, timeout=240):
    """run_all.py under `torchrun --nnodes count` on each host at once; rank 0 is on host 1.
    Returns (host 1's stdout, every host's stderr, exit statuses)."""
    port = free_port()
    env = base_env()
    procs = []
    for node in range(count):
        cmd = [str(SCRIPT), "run", name, str(node + 1), "env", f"PATH={env['PATH']}",
               str(BIN / "torchrun"), f"--nnodes={count}", f"--node-rank={node}",
               f"--nproc-per-node={nproc}", f"--master-addr={subnet}.1",
               f"--master-port={port}", "run_all.py", "--backend=gloo", *args]
        procs.append(subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True,
                                      stdin=subprocess.DEVNULL))
    outputs = [proc.communicate(timeout=timeout) for proc in procs]
    return outputs[0][0], [err for _, err in outputs], [proc.returncode for proc in procs]


def by_hand(name, subnet, count, nproc, *args, timeout=240):
    """run_all.py's ranks started by hand in each host, with the environment torchrun's
    multi-node launch gives them (rank 0 on host 1, whose address is MASTER_ADDR), without
    torchrun's agents: for the tests whose point is not the launcher (torchrun's own run is
    test_groups.py's test_layouts_across_two_hosts). The same answer as across(): (host 1's
    stdout, every host's stderr, each host's first non-zero exit status or 0)."""
    port = free_port()
    procs, cmd = [], None
    for node in range(count):
        for local in range(nproc):
            env = rank_env(node * nproc + local, count * nproc, port, LOCAL_RANK=str(local),
                           LOCAL_WORLD_SIZE=str(nproc), MASTER_ADDR=f"{subnet}.1")
            cmd = [str(SCRIPT), "run", name, str(node + 1), "env", f"PATH={env['PATH']}",
                   sys.executable, "run_all.py", "--backend=gloo", *map(str, args)]
            procs.append(subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True,
                                          stdin=subprocess.DEVNULL))
    outputs = finish(procs, cmd, timeout)
    hosts = [range(node * nproc, (node + 1) * nproc) for node in range(count)]
    statuses = [next((procs[i].returncode for i in ranks if procs[i].returncode), 0)
                for ranks in hosts]
    return ("".join(outputs[i][0] for i in hosts[0]),
            ["".join(outputs[i][1] for i in ranks) for ranks in hosts], statuses)


def test_three_hosts(hosts, tmp_path):
    """3 hosts (not a power of two) of one rank each: the world, and the inter-host layout
    (one group of the 3, through a sub-group). Ranks started by hand in each host."""
    name, subnet = hosts(3)
    output = tmp_path / "three.jsonl"
    stdout, stderrs, statuses = by_hand(name, subnet, 3, 1, "--dist=torch", "--all-reduce",
                                       "--all-to-all", "--scan", "--maxsize=5", "--trials=2",
                                       "--check", "--groups=world,inter", f"--output={output}")
    assert statuses == [0, 0, 0], stderrs
    assert "3 ranks on 3 host(s)" in stderrs[0]
    meta = json.loads(output.read_text().splitlines()[0])
    assert meta["hostnames"] == [f"{name}{i}" for i in (1, 2, 3)]
    assert meta["master_addr"] == f"{subnet}.1"
    tables = parse_tables(stdout)
    assert [(t.op, t.qualifiers.get("ranks")) for t in tables] == [
        ("all_reduce", None), ("all_reduce", [0, 1, 2]), ("all_to_all", None),
        ("all_to_all", [0, 1, 2])]
    assert all(row.extra == ["0"] for t in tables for row in t.rows)
    assert all(len(t.rows) == 4 for t in tables)


def _command_name(pid):
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:  # gone meanwhile
        return None


def _wait_until_it_sleeps_in(namespace):
    """Wait (up to 30 s) until a `sleep` runs in the host `namespace`: `sim-hosts.sh run` takes
    a while to get in on a busy machine."""
    for _ in range(300):
        pids = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True,
                              text=True).stdout.split()
        if "sleep" in map(_command_name, pids):
            return
        time.sleep(0.1)
    pytest.fail(f"the sleeper never ran in its host {namespace}")


def test_a_sweep_removes_the_sets_a_killed_run_left_and_nothing_in_use(hosts):
    """sim-hosts.sh sweep (make test runs it as it starts): a set brought up over 30 min ago with
    no process in it is removed, namespaces, fabric and directory; one as old with a process
    in a host, and a new one with none, are left as they are."""
    left, _ = hosts(2)
    busy, _ = hosts(1)
    young, _ = hosts(1)
    state = Path(os.environ.get("COMMBENCH_HOSTS_DIR", "/tmp/commbench-hosts"))
    for name in (left, busy):
        os.utime(state / name, (time.time() - 40 * 60,) * 2)
    sleeper = subprocess.Popen([str(SCRIPT), "run", busy, "1", "sleep", "300"])
    try:
        _wait_until_it_sleeps_in(f"{busy}1")
        result = subprocess.run([str(SCRIPT), "sweep"], capture_output=True, text=True,
                                timeout=60)
        assert result.returncode == 0, result.stderr
        assert f"sim-hosts: removed {left}, left by a killed run: 2 host(s) brought up 40 min " \
            "ago, no process in them" in result.stderr, result.stderr
        assert busy not in result.stderr and young not in result.stderr, result.stderr
        assert not any(os.path.exists(f"/run/netns/{left}{k}") for k in ("1", "2", "net"))
        assert not (state / left).exists()
        for name in (busy, young):
            assert os.path.exists(f"/run/netns/{name}1") and (state / name).is_dir(), name
        assert sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()


def test_hosts_go_down_with_what_runs_in_them(hosts):
    name, _ = hosts(2)
    sleeper = subprocess.Popen([str(SCRIPT), "run", name, "2", "sleep", "300"])
    try:
        # down kills what runs in a host: wait until the sleeper does (on a busy machine `run`
        # can still be on its way in when down comes, and then it is not in the host yet)
        _wait_until_it_sleeps_in(f"{name}2")
        subprocess.run([str(SCRIPT), "down", name], check=True, timeout=60)
        assert sleeper.wait(timeout=10) != 0  # killed with its host
        assert not os.path.exists(f"/run/netns/{name}2")
        assert not os.path.exists(f"/run/netns/{name}net")  # the fabric: bridge, hosts' links
        links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
        assert f"{name}br" not in links and f"{name}v1" not in links
    finally:
        sleeper.kill()


def test_rank_0_address_when_the_host_name_is_loopback(hosts, tmp_path):
    """Debian and Ubuntu map the host name to 127.0.1.1 in /etc/hosts; the address rank 0 offers
    the others under MPI is then its interface's, never loopback."""
    name, subnet = hosts(1)
    debian_hosts = tmp_path / "hosts"
    debian_hosts.write_text(f"127.0.0.1 localhost\n127.0.1.1 {name}1\n")
    probe = ("import socket; from commbench.ranks.launch import _own_address; "
             "print(socket.gethostbyname(socket.gethostname()), _own_address())")
    result = subprocess.run(
        [str(SCRIPT), "run", name, "1", "unshare", "--mount", "sh", "-c",
         'mount --bind "$0" /etc/hosts && exec "$1" -c "$2"', str(debian_hosts),
         str(BIN / "python"), probe], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["127.0.1.1", f"{subnet}.1"]
