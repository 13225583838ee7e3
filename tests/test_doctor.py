"""doctor.py on simulated hosts (scripts/sim-hosts.sh, root): healthy clusters pass with exit 0
and nothing named, a slowed host is named and only it, a slowed link is named and neither of
its hosts, a host killed mid-check is named unreachable while the rest goes on; bad usage is
one line, exit 2. Slow hosts and links are made with the kernel's htb qdisc (no netem here)."""

import json
import socket
import subprocess
import sys
import time

import pytest

from commbench.records import results
from support import (BIN, ROOT, SIM_HOSTS, base_env, finish, free_port, launch, rank_env,
                     spawn, without_exit_barrier_race)

# Run alone (make test's second part): the verdict judges latency and bandwidth: other tests' load
# would be its noise. Beside the others: bad usage, refused before any rank measures; one host's
# checks (under each launcher), which hold their figures against nothing that load could move (no
# other host, an earlier check at 1 B/s); the hosts lost at once, which asserts who is unreachable, why and when,
# and lets load name a live host slow (it is then excluded as a suspect, not as lost); and the
# healthy 3 hosts of 2 ranks and the screen of 3 with one slow, each exact in 20 of 20 checks
# beside two busy loops (benchmarks/doctor_check.py, 2026-12-07). Two busy loops are less than
# the first part's neighbours: the slow link, 20 of 20 beside them as `--tests`, named two
# healthy hosts in one of three clean CI runs beside the others (its two good hosts joined by the
# slow link: no good link left to retest against), so it, the fleet bound and the screen of 16
# (also 20 of 20 beside the loops) run alone again.
serial = pytest.mark.serial

# Small enough that a slowed link (200 Mbit: 0.17 s a message) keeps a check short.
QUICK = ["--large-bytes=4M", "--trials=10", "--repeat=3"]


def across(name, subnet, count, nproc, *args, timeout=300):
    """doctor.py under `torchrun --nnodes count` on each host at once (rank 0 on host 1):
    (host 1's stdout, every host's stderr, exit statuses)."""
    port = free_port()
    env = base_env()
    procs = [subprocess.Popen(
        [str(SIM_HOSTS), "run", name, str(node + 1), "env", f"PATH={env['PATH']}",
         str(BIN / "torchrun"), f"--nnodes={count}", f"--node-rank={node}",
         f"--nproc-per-node={nproc}", f"--master-addr={subnet}.1", f"--master-port={port}",
         "doctor.py", "--backend=gloo", "--dist=torch", *args],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        stdin=subprocess.DEVNULL) for node in range(count)]
    outputs = [proc.communicate(timeout=timeout) for proc in procs]
    return outputs[0][0], [err for _, err in outputs], [proc.returncode for proc in procs]


def by_hand(name, subnet, count, *args, per_host=1, dist="torch"):
    """`per_host` ranks a host (ranks 0 to per_host - 1 on host 1, ...), each started by hand
    (RANK, LOCAL_RANK, WORLD_SIZE, ... as a launch script sets them) and forked from the tests'
    fork server into its host's namespaces (tests/on_sim_host.py: what sim-hosts.sh run does,
    without a new interpreter's `import torch`): each rank's process is its own, to kill or to
    wait for. The launcher across hosts is torchrun's in `across` (and DeepSpeed's in
    docs/doctor.md's example)."""
    port = free_port()
    return [spawn([sys.executable, str(ROOT / "tests" / "on_sim_host.py"), name,
                   str(rank // per_host + 1), "doctor.py", "--backend=gloo", f"--dist={dist}",
                   *args],
                  rank_env(rank, count * per_host, port, LOCAL_RANK=str(rank % per_host),
                           LOCAL_WORLD_SIZE=str(per_host), MASTER_ADDR=f"{subnet}.1"))
            for rank in range(count * per_host)]


def forked(name, subnet, count, *args, timeout=300, per_host=1, dist="torch"):
    """doctor.py on `count` hosts, `per_host` ranks each, by hand (by_hand): as `across` gives
    it, (rank 0's stdout, every rank's stderr, exit statuses)."""
    procs = by_hand(name, subnet, count, *args, per_host=per_host, dist=dist)
    outputs = finish(procs, "doctor.py", timeout)  # every rank's pipes read at once
    return outputs[0][0], [err for _, err in outputs], [proc.returncode for proc in procs]


def slow_host(name, index, rate="200mbit"):
    """Host `index`'s link, both ways (scripts/sim-hosts.sh slow: htb on its veth and eth0)."""
    subprocess.run([str(SIM_HOSTS), "slow", name, str(index), rate], check=True,
                   capture_output=True)


def slow_link(name, subnet, a, b, rate="200mbit"):
    """Only the link between hosts a and b, both ways (scripts/sim-hosts.sh slow-link: htb with
    a fast default class and a slow one that a u32 filter sends the other host's address to)."""
    subprocess.run([str(SIM_HOSTS), "slow-link", name, str(a), str(b), rate], check=True,
                   capture_output=True)


def verdict_of(path, shown=""):
    meta, records = results.read_all(str(path))
    final = [r for r in records if r.get("type") == "verdict"]
    assert len(final) == 1, f"{records}\n{shown}"
    return meta, records, final[0]


def findings(stderr):
    return [line for line in stderr.splitlines()
            if line.startswith(("commbench: slow ", "commbench: unreachable "))]


def test_three_hosts_of_two_ranks_healthy(hosts, tmp_path):
    """3 hosts (odd: one sits out each round) x 2 ranks, under --dist deepspeed (torch: every
    other test here): exit 0 on every rank, nothing named, the within-host phase, every pair
    once, the verdict record empty. The one healthy end-to-end run of --plan full (4 hosts'
    full matrix: the slow host's test; a healthy screen: the model's tests). Its ranks forked
    by hand (torchrun across hosts: the slow host's test)."""
    name, subnet = hosts(3)
    output = tmp_path / "three.json"
    stdout, stderrs, statuses = forked(name, subnet, 3, *QUICK, f"--output={output}",
                                       per_host=2, dist="deepspeed")
    assert statuses == [0] * 6, stdout + stderrs[0]
    assert "Verdict: healthy (3 hosts, 3 links;" in stdout, stdout + stderrs[0]
    assert not findings(stderrs[0])
    meta, records, final = verdict_of(output)
    assert (final["suspect_hosts"], final["suspect_links"], final["unreachable"]) == \
        ([], [], [])
    intra = [r for r in records if r.get("phase") == "intra"]
    assert [r["host"] for r in intra] == [f"{name}{i}" for i in (1, 2, 3)]
    assert all(r["busbw_Bps"] > 0 and len(r["ranks"]) == 2 for r in intra)
    pairs = [r for r in records if r.get("phase") == "pairs"]
    assert sorted(tuple(r["hosts"]) for r in pairs) == sorted(
        (f"{name}{a}", f"{name}{b}") for a in range(1, 4) for b in range(a + 1, 4))
    assert all(r["forward_Bps"] > 0 and r["latency_s"] > 0 for r in pairs)
    assert sorted(r["round"] for r in pairs) == [0, 1, 2]
    assert meta["hosts"] == [f"{name}{i}" for i in range(1, 4)]
    assert len(meta["startup"]["process_group_s"]) == 6
    assert "process group up in" in stderrs[0]
    assert final["healthy"]


@serial
def test_a_slow_host_is_named_and_only_it(hosts, tmp_path):
    """Its line says what is slow; the verdict ends with the hosts to leave out (Slurm's
    --exclude last), and a line says exit status 1 is the verdict before any launcher's error
    lines. And report.py plot draws the run: three heatmaps of the hosts, the suspect in the
    title."""
    name, subnet = hosts(4)
    slow_host(name, 3)
    output = tmp_path / "slow.jsonl"
    stdout, stderrs, statuses = across(name, subnet, 4, 1, *QUICK, f"--output={output}")
    assert statuses == [1, 1, 1, 1], stdout + stderrs[0]
    _, records, final = verdict_of(output)
    assert (final["suspect_hosts"], final["suspect_links"], final["unreachable"]) == \
        ([f"{name}3"], [], [])
    pairs = [r for r in records if r.get("phase") == "pairs"]  # --plan full: every pair once
    assert sorted(tuple(r["hosts"]) for r in pairs) == sorted(
        (f"{name}{a}", f"{name}{b}") for a in range(1, 5) for b in range(a + 1, 5))
    assert sorted(r["round"] for r in pairs) == [0, 0, 1, 1, 2, 2]  # 3 rounds of 2 at once
    (line,) = findings(stderrs[0])
    assert line.startswith(f"commbench: slow host {name}3 (bandwidth of its links to the other "
                           "hosts): its links' bandwidth ") and \
        "the other hosts' median" in line and "retested against" in line, line
    row = next(r for r in stdout.splitlines() if r.startswith(f"{name}3 "))
    assert row.endswith("SUSPECT")
    tail = stdout.rstrip("\n").splitlines()
    assert tail[-5:] == [
        f"  leave out {name}3, then run doctor.py again on the rest:",
        f"    hostfile (mpirun --hostfile, deepspeed --hostfile): delete the lines of {name}3",
        f"    deepspeed: --exclude={name}3", f"    torchrun: start no node on {name}3",
        f"    Slurm (sbatch, salloc, srun): --exclude={name}3"], stdout
    assert final["exclude"] == [f"{name}3"] and final["what_to_do"][-1] == tail[-1]
    for err in stderrs:  # each host's log: before torchrun's own lines
        said = [i for i, text in enumerate(err.splitlines()) if "exits with status 1: its " +
                "verdict (something is suspect or unreachable" in text and "not a crash" in text]
        failed = [i for i, text in enumerate(err.splitlines()) if "exitcode  : 1" in text]
        assert len(said) == 1 and failed and said[0] < failed[0], err
    from commbench.report.doctor import heatmap
    figure = heatmap(str(output), str(tmp_path / "h.png"))
    assert (tmp_path / "h.png").stat().st_size > 20_000
    titles = [axis.get_title() for axis in figure.axes if axis.get_title()]
    assert titles == ["bandwidth row -> column (Gbps)", "both ways at once (Gbps)",
                      "latency one way (us)"]
    assert figure._suptitle.get_text() == f"doctor: 4 hosts, gloo: suspect host {name}3"
    # report.py plot and html, in this process (report.py's own process draws a doctor run in
    # docs/doctor.md's example, which the docs test runs)
    from commbench.report.cli import main as report
    assert report(["plot", str(output), "-o", str(tmp_path / "p.png")]) == 0
    assert (tmp_path / "p.png").stat().st_size > 20_000
    page = tmp_path / "doctor.html"  # report.py html: the heatmaps and the finding on the page
    assert report(["html", str(output), "-o", str(page)]) == 0
    text = page.read_text()
    assert text.count("<svg") == 1 and "latency one way (us)" in text
    assert f"slow host {name}3 (bandwidth of its links to the other hosts): its links" in text
    assert "1 finding(s)" in text


def test_a_screen_of_three_hosts_runs_the_full_plan_and_names_the_slow_one(hosts, tmp_path):
    """--plan screen on 3 hosts, one at 200 Mbit: its pairs are 2 of the 3, the screen's median
    would be theirs (it called the fleet healthy, exit 0); it says so, runs every pair, and
    names the slow host, exit 1."""
    name, subnet = hosts(3)
    slow_host(name, 2)
    output = tmp_path / "three.jsonl"
    stdout, stderrs, statuses = forked(name, subnet, 3, *QUICK, "--plan=screen",
                                       f"--output={output}")
    assert statuses == [1, 1, 1], stdout + stderrs[0]
    assert "--plan screen judges each pair against the other pairs of its round, and 3 hosts " \
        "make 1 a round" in stderrs[0], stderrs[0]
    _, records, final = verdict_of(output)
    assert final["suspect_hosts"] == [f"{name}2"] and final["unreachable"] == [], final
    pairs = [r for r in records if r.get("phase") == "pairs"]
    assert len({tuple(r["hosts"]) for r in pairs}) == 3  # every pair
    assert "(.: a pair the screen did not measure)" not in stdout


@serial
def test_a_slow_link_is_named_and_neither_of_its_hosts(hosts, tmp_path):
    name, subnet = hosts(4)
    slow_link(name, subnet, 1, 2)
    output = tmp_path / "link.jsonl"
    stdout, stderrs, statuses = forked(name, subnet, 4, *QUICK, f"--output={output}")
    assert statuses == [1, 1, 1, 1], stdout + stderrs[0]
    _, _, final = verdict_of(output)
    assert (final["suspect_hosts"], final["suspect_links"], final["unreachable"]) == \
        ([], [[f"{name}1", f"{name}2"]], [])
    (line,) = findings(stderrs[0])
    assert line.startswith(f"commbench: slow link {name}1-{name}2 (bandwidth between these two "
                           "hosts only): ") and "retested" in line


def run_by_hand(name, subnet, count, *args, timeout=240):
    """by_hand's ranks waited for: (rank 0's stdout and stderr, exit statuses)."""
    procs = by_hand(name, subnet, count, *args)
    outputs = finish(procs, "doctor.py", timeout)
    return outputs[0], [proc.returncode for proc in procs]


def written(path):
    """The records of a results file being written: its complete lines, parsed."""
    text = path.read_text() if path.exists() else ""
    return [json.loads(line) for line in text.splitlines(keepends=True) if line.endswith("\n")]


def wait_for(path, procs, enough, limit=120):
    """Until enough(the records written so far to `path`) holds; every rank still running."""
    deadline = time.monotonic() + limit
    while not enough(written(path)):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), \
            [p.communicate() for p in procs]
        time.sleep(0.05)


@serial
def test_the_screen_of_sixteen_hosts_names_a_slow_uplink_and_a_slow_host_and_nothing_else(
        hosts, tmp_path):
    """16 hosts behind 4 switches of 4 (--topology from sim-hosts.sh), --plan screen, one rank
    each; switch 1's uplink at 1 Gbit (its hosts at full speed among themselves, slow to all
    outside) and host 11, behind switch 3, at 300 Mbit. The screen: 3 rounds of 8 disjoint pairs
    (the first inside the switches, the next two across); switch s1 named as the switch (none of
    its hosts) and host 11 as a host, each confirmed by its retests beside control pairs, and
    none of the other 11 hosts or their links (the healthy fleet's no-false-alarm check at this
    scale: a healthy run of these 16 repeated it at twice the time), exit 1; with --fleet-wide,
    the other 11 hosts' all_reduce after. (A healthy screen in-process: test_logic_doctor_screen;
    healthy hosts end to end: test_three_hosts_of_two_ranks_healthy.)"""
    name, subnet = hosts(16, per_switch=4)
    conf = tmp_path / "topology.conf"
    conf.write_text(subprocess.run([str(SIM_HOSTS), "topology", name], check=True,
                                   capture_output=True, text=True).stdout)
    subprocess.run([str(SIM_HOSTS), "slow-uplink", name, "1", "1gbit"], check=True,
                   capture_output=True)
    slow_host(name, 11, "300mbit")
    output = tmp_path / "faults.jsonl"
    (stdout, stderr), statuses = run_by_hand(name, subnet, 16, *QUICK, "--plan=screen",
                                             "--seed=4", f"--topology={conf}", "--fleet-wide",
                                             f"--output={output}")
    assert statuses == [1] * 16, stdout + stderr
    assert "the screen: 3 rounds of disjoint pairs of hosts (--seed 4, across switches)" in \
        stderr
    _, records, final = verdict_of(output, stdout + stderr)
    pairs = [r for r in records if r.get("phase") == "pairs"]  # the screen's (retests apart)
    for number in range(3):
        hosts_of = sorted(h for r in pairs if r["round"] == number for h in r["hosts"])
        assert hosts_of == sorted(f"{name}{i}" for i in range(1, 17))  # a perfect matching
        inside = [(int(a[len(name):]) - 1) // 4 == (int(b[len(name):]) - 1) // 4
                  for r in pairs if r["round"] == number for a, b in (r["hosts"],)]
        assert all(inside) if number == 0 else not any(inside), (number, pairs)
    assert (final["suspect_switches"], final["suspect_hosts"], final["suspect_links"],
            final["suspect_groups"], final["unreachable"]) == \
        (["s1"], [f"{name}11"], [], [], []), stdout + stderr
    # --fleet-wide: what is named sits out of the whole fleet's all_reduce (11 hosts), which
    # runs after the pairs and their retests; its halves at once, both as slow on these shared
    # cores, name nothing more
    whole = [r for r in records if r.get("phase") == "fleet"]
    others = [f"{name}{i}" for i in range(5, 17) if i != 11]
    assert whole and whole[0]["hosts"] == others and whole[0]["busbw_Bps"] > 0, whole
    assert whole[0]["round"] > max(r["round"] for r in records if r.get("round") is not None
                                   and r.get("phase") != "fleet"), records
    assert [f["hosts"] for f in final["fleet_wide"]] == [r["hosts"] for r in whole]
    assert "doctor: the whole fleet at once: one all_reduce across 11 hosts (5 named or " \
        "unreachable sit out)" in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.startswith(
        ("commbench: slow ", "commbench: suspect switch ", "commbench: unreachable "))]
    assert len(lines) == 2, stderr
    said = "\n".join(lines)
    assert f"slow host {name}11 (bandwidth of its links to the other hosts)" in said, said
    assert "suspect switch s1 (its hosts in line among themselves, slow to every host outside " \
        "it: its uplink)" in said and "against the control" in said, said


def test_a_bad_topology_is_refused_before_anything_starts(tmp_path):
    """A host under two switches: one line naming the file's line, exit 2 (no rank started)."""
    conf = tmp_path / "bad.conf"
    conf.write_text("SwitchName=s1 Nodes=n[1-4]\nSwitchName=s2 Nodes=n[4-8]\n")
    result = launch("doctor.py", "--dist=torch", "--backend=gloo", f"--topology={conf}")
    assert result.returncode == 2, result
    (line,) = result.stderr.strip().splitlines()
    assert line == f"commbench: error: --topology {conf}:2: host n4 is under two switches, s1 " \
        "(line 1) and s2", line


def test_a_topology_naming_an_unknown_host_is_one_line_before_any_measurement(tmp_path):
    """(Beside other tests: refused before any rank measures.)"""
    conf = tmp_path / "other.conf"
    conf.write_text("# another cluster's\nSwitchName=s1 Nodes=elsewhere[1-2]\n")
    result = launch("doctor.py", "--dist=torch", "--backend=gloo", f"--topology={conf}",
                    f"--output={tmp_path / 'o.jsonl'}", nproc=2)
    assert result.returncode == 2, result
    errors = [line for line in result.stderr.splitlines() if "error:" in line]
    assert errors and errors[0].startswith(f"commbench: error: --topology {conf}:2: unknown host "
                                           "elsewhere1: the check runs on "), result.stderr
    assert not (tmp_path / "o.jsonl").exists() or "doctor" not in \
        (tmp_path / "o.jsonl").read_text()


def test_a_host_killed_in_round_2_of_a_screen_of_sixteen_is_named_and_the_rest_judged(hosts,
                                                                                    tmp_path):
    """16 hosts, one rank each, --plan screen: once the first round of pairs is recorded, host
    7's rank is SIGKILLed, in the second round. Host 7 alone is named unreachable ('its process
    is gone'), its partner in that round never (released, not waited out), within --timeout +
    30 s of the kill; every other round's pairs among the 15 live hosts carry their figures,
    and the screen goes on to its third round without host 7. Whatever load names slow among
    the live hosts is named as a suspect, not as lost (this test runs beside the others: what
    it asserts no neighbour sways)."""
    name, subnet = hosts(16)
    output = tmp_path / "killed.jsonl"
    procs = by_hand(name, subnet, 16, *QUICK, "--plan=screen", "--seed=4", "--timeout=60",
                    f"--output={output}")
    try:
        wait_for(output, procs, lambda records: any(r.get("phase") == "pairs" and
                                                    r.get("round") == 0 for r in records))
        pids = subprocess.run(["ip", "netns", "pids", f"{name}7"], capture_output=True,
                              text=True).stdout.split()
        subprocess.run(["kill", "-9", *pids], check=True)
        killed = time.monotonic()
        outputs = {0: procs[0].communicate(timeout=300)}  # a hang guard only
        named_in = time.monotonic() - killed
        outputs.update({r: procs[r].communicate(timeout=60) for r in range(1, 16) if r != 6})
    finally:
        for proc in procs:
            proc.kill()
    shown = "\n".join(f"--- rank {r}: exit {procs[r].returncode}\n{out}\n{err}"
                      for r, (out, err) in sorted(outputs.items()))
    assert [procs[r].returncode for r in range(16) if r != 6] == [1] * 15, shown
    _, records, final = verdict_of(output, shown)
    lost = f"{name}7"
    assert final["unreachable"] == [lost], shown  # not its partner of the round it died in
    (gone,) = final["lost"]
    assert gone["host"] == lost and gone["when"].startswith("round "), gone
    assert "its process is gone (its host refused a connection to it)" in gone["why"], gone
    assert set(final["exclude"]) - {lost} <= set(final["suspect_hosts"]), shown
    assert named_in < 60 + 30, f"{named_in:.1f} s\n{shown}"
    assert "did not answer within --timeout" not in shown, shown
    pairs = [r for r in records if r.get("phase") == "pairs" and "control_for" not in r]
    rounds = sorted({r["round"] for r in pairs})
    assert len(rounds) >= 3, rounds  # the screen went on past the round the host died in
    figures = {"latency_s", "forward_Bps", "backward_Bps", "both_Bps"}
    first = [r for r in pairs if r["round"] == 0]
    assert len(first) == 8 and all(figures <= set(r) for r in first), first  # 7 alive then
    for record in pairs:
        if lost not in record["hosts"]:
            assert figures <= set(record) and "failed" not in record, record
    after = {h for r in pairs if r["round"] == rounds[-1] for h in r["hosts"]}
    assert lost not in after and len(after) >= 14, after  # the rest judged, without it


def test_hosts_lost_at_once_killed_or_silent_are_named_and_no_live_host_for_them(hosts,
                                                                                 tmp_path):
    """8 hosts of 2 ranks (16 ranks), the full plan, --timeout 60; once the first round of pairs
    is recorded, host 4's ranks SIGKILLed and the interfaces of hosts 6 and 8 brought down (4
    ranks silent: no answer, not refused), all at the same moment. Whichever step each loss
    lands in (a pair's measurement, between steps), all three are named unreachable with when,
    host 4 'its process is gone' and hosts 6 and 8 'its host does not answer' (their pulses
    tried at once), and no live host is named for a partner that died (its measurement
    released, not waited out); the verdict within --timeout + 30 s of the losses (heartbeats
    10 s, the probe 1 s, the check's last rounds); every live rank exits 1, and the exit line,
    the verdict record and What to do name exactly the lost ones."""
    name, subnet = hosts(8)
    output = tmp_path / "lost.jsonl"
    procs = by_hand(name, subnet, 8, *QUICK, "--timeout=60", f"--output={output}", per_host=2)
    live_ranks = [r for r in range(16) if r // 2 + 1 in (1, 2, 3, 5, 7)]
    try:
        wait_for(output, procs, lambda records: any(r.get("phase") == "pairs" for r in records))
        pids = subprocess.run(["ip", "netns", "pids", f"{name}4"], capture_output=True,
                              text=True).stdout.split()
        subprocess.run(["kill", "-9", *pids], check=True)
        for host in (6, 8):
            subprocess.run(["ip", "-n", f"{name}{host}", "link", "set", "eth0", "down"],
                           check=True)
        lost = time.monotonic()
        outputs = {0: procs[0].communicate(timeout=300)}  # a hang guard only
        named_in = time.monotonic() - lost
        outputs.update({r: procs[r].communicate(timeout=60) for r in live_ranks[1:]})
    finally:
        for proc in procs:
            proc.kill()  # the silent hosts' ranks, cut off from the store, among them
    statuses = [proc.returncode for proc in procs]
    shown = "\n".join(f"--- rank {r}: exit {statuses[r]}\n{out}\n{err}"
                      for r, (out, err) in sorted(outputs.items()))
    assert [statuses[r] for r in live_ranks] == [1] * len(live_ranks), shown
    _, _, final = verdict_of(output, shown)
    gone = [f"{name}4", f"{name}6", f"{name}8"]
    assert final["unreachable"] == gone, shown  # no live host named for its partner's death
    assert [g["host"] for g in final["lost"]] == gone, shown
    assert all(g["when"].startswith("round ") for g in final["lost"]), shown
    four, six, eight = (g["why"] for g in final["lost"])
    assert "its process is gone (its host refused a connection to it)" in four, four
    for why in (six, eight):
        assert "its host does not answer (no connection in 1 s)" in why, why
    assert set(final["exclude"]) - set(gone) <= set(final["suspect_hosts"]), shown
    assert named_in < 60 + 30, f"{named_in:.1f} s\n{shown}"
    stdout, stderr = outputs[0]
    when = [f"{g['host']} ({g['when']})" for g in final["lost"]]
    assert f"lost during the check: {', '.join(when)}" in stderr, stderr
    assert f"  lost during the check: {', '.join(when)}: the rest were judged without them" \
        in stdout, stdout
    assert "Traceback" not in "".join(without_exit_barrier_race(err) for _, err in outputs.values())
    # named by its heartbeat, not by a deadline waited out
    assert "did not answer within --timeout" not in shown, shown
    # the lost hosts' rows show no figure (what they measured before they went is not their
    # own), their matrix cells nothing they did not measure: `unreach.`, or a figure of the
    # first round marked `*`
    for host in gone:
        row = next(r for r in stdout.splitlines() if r.startswith(f"{host} "))
        assert row.split() == [host, "-", "-", "-", "-", "unreachable"], stdout
        cells = [r.split()[1:] for r in stdout.splitlines() if r.startswith(f"{host} ")][1:]
        assert cells and all(c == "-" or c == "unreach." or c.endswith("*")
                             for r in cells for c in r), stdout
        assert all("unreach." in r for r in cells), stdout
    assert "(unreach.: not measured, a host of the pair did not answer; *: measured before " \
        in stdout, stdout
    # the live hosts were all measured against each other; the pairs of the killed host after
    # it went carry no figure, only why
    _, records, _ = verdict_of(output, shown)
    measured = {frozenset(r["hosts"]) for r in records
                if r.get("phase") == "pairs" and "failed" not in r}
    live = [f"{name}{i}" for i in (1, 2, 3, 5, 7)]
    assert {frozenset((a, b)) for a in live for b in live if a < b} <= measured, shown
    figures = {"latency_s", "forward_Bps", "backward_Bps", "both_Bps"}
    four = [r for r in records if r.get("phase") == "pairs" and gone[0] in r["hosts"]]
    assert four and all(figures <= set(r) or ("failed" in r and not figures & set(r))
                        for r in four), four


def test_one_host_checks_its_ranks_and_says_no_links(tmp_path):
    output, db = tmp_path / "one.jsonl", str(tmp_path / "results.db")
    earlier_checks(db, socket.gethostname(), 3)
    result = launch("doctor.py", "--dist=torch", "--backend=gloo", *QUICK, f"--output={output}",
                    "--db", db, "--baseline", db, nproc=2)
    assert result.returncode == 0, result
    assert "no links between hosts to check (one host)" in result.stderr
    assert "Verdict: healthy (one host: no links between hosts checked;" in result.stdout
    _, records, final = verdict_of(output)
    assert [r["phase"] for r in records if r.get("type") == "doctor"] == ["intra"]
    assert final["healthy"]
    # --baseline (doctor/baseline.py): the host against its 3 earlier checks (1 B/s each)
    assert "baseline: 1 host(s) and 0 link(s) against their own last 10 checks: median " \
        in result.stdout and "none slower than it was" in result.stdout, result.stdout
    ratio = final["baseline"]["hosts"][socket.gethostname()]
    assert ratio == pytest.approx(records[0]["busbw_Bps"], rel=1e-3)
    # ... and its latency against theirs (1 s each: as fast as it was means past / now)
    assert "baseline (latency): 1 host(s) and 0 link(s) against their own last 10 checks" \
        in result.stdout, result.stdout
    ratio = final["baseline"]["latency"]["hosts"][socket.gethostname()]
    assert ratio == pytest.approx(1.0 / records[0]["latency_s"], rel=1e-3)


def earlier_checks(path, host, count):
    from commbench.records.db.store import RunWriter, Store
    store = Store(path)
    for _ in range(count):
        writer = RunWriter(store, {"ops": ["doctor"], "hostnames": [host]})
        writer.add({"type": "doctor", "phase": "intra", "host": host, "busbw_Bps": 1.0,
                    "latency_s": 1.0})
        writer.close()
    store.close()


@pytest.mark.parametrize("args,message", [
    (["--min-fraction=1"], "argument --min-fraction: must be in (0, 1), got 1"),
    (["--min-fraction=0"], "argument --min-fraction: must be in (0, 1), got 0"),
    (["--expect-gbps=-1"], "argument --expect-gbps: must be >= 0, got -1"),
    (["--expect-latency-us=x"], "argument --expect-latency-us: 'x' is not a number"),
    (["--output=d.csv"], "--output: doctor.py writes .jsonl or .json"),
    (["--peak=fast"], "--peak fast: neither auto, a rate"),
    (["--peak=-4gbit"], "--peak -4gbit: a rate must be positive"),
    (["--peak=1gbit", "--peak-fraction=1.5"], "argument --peak-fraction: must be in (0, 1)"),
])
def test_bad_usage_is_one_line(args, message):
    result = launch("doctor.py", "--dist=torch", "--backend=gloo", *args)
    assert result.returncode == 2, result
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"commbench: error: {message}"), line


def test_uneven_ranks_per_host_is_one_line(hosts):
    """2 ranks on host 1, 1 on host 2: refused before anything is measured, on every rank."""
    name, subnet = hosts(2)
    port = free_port()
    layout = [(1, 0, 0, 2), (1, 1, 1, 2), (2, 2, 0, 1)]  # host, rank, local rank, local size
    procs = [spawn([sys.executable, str(ROOT / "tests" / "on_sim_host.py"), name, str(host),
                    "doctor.py", "--backend=gloo", "--dist=torch"],
                   rank_env(rank, 3, port, LOCAL_RANK=str(local), LOCAL_WORLD_SIZE=str(size),
                            MASTER_ADDR=f"{subnet}.1"))
             for host, rank, local, size in layout]  # forked into their hosts (by_hand)
    outputs = finish(procs, "doctor.py", 120)
    assert [proc.returncode for proc in procs] == [2, 2, 2], outputs
    errors = [line for _, err in outputs for line in err.splitlines()
              if line.startswith("commbench: error:")]
    assert errors == [f"commbench: error: uneven ranks per host ({name}1 2, {name}2 1): start the "
                      "same number of ranks on every host"], outputs


def test_doctor_under_mpirun_and_srun_on_one_host(tmp_path):
    """Launched like the op scripts: MPICH's mpirun and Slurm's srun find the ranks (one host).
    Under srun the check reads Slurm's topology (scripts/slurm-up.sh gives the node a leaf
    switch under a spine) and says so; under mpirun there is none to read."""
    for launcher in ("mpirun", "srun"):
        output = tmp_path / f"{launcher}.jsonl"
        result = launch("doctor.py", "--dist=torch", "--backend=gloo", *QUICK,
                        f"--output={output}", nproc=2, launcher=launcher)
        assert result.returncode == 0, result
        assert "Verdict: healthy (one host" in result.stdout, result
        meta = json.loads(output.read_text().splitlines()[0])
        said = [line for line in result.stderr.splitlines() if "topology" in line]
        if launcher == "srun":
            assert said == ["commbench: doctor: topology: Slurm's (scontrol show topology): the "
                            "hosts are behind 1 switch (leaf1)"], result.stderr
            assert meta["doctor"]["topology"] == "Slurm's (scontrol show topology)"
        else:
            assert said == [] and meta["doctor"]["topology"] is None, result.stderr


def test_a_peak_file_with_an_unknown_op_is_one_line(tmp_path):
    expected = tmp_path / "fleet.peak"
    expected.write_text("# op band rate\nsend 1M- 10gbit\n")
    result = launch("doctor.py", "--dist=torch", "--backend=gloo", f"--peak={expected}")
    assert result.returncode == 2, result
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"commbench: error: {expected}:2: unknown op 'send'"), line


@serial
def test_a_fleet_alike_is_healthy_at_its_bound_and_named_below_it(hosts, tmp_path):
    """Every host capped at 1 Gbit (alike: healthy by its peers). --peak 1gbit: healthy, every
    link at ~0.95 of it; --peak 4gbit: the whole fleet named below its bound, exit 1, nothing to
    leave out (issue 55). Both on the same 3 hosts."""
    name, subnet = hosts(3)
    for host in (1, 2, 3):
        slow_host(name, host, "1gbit")
    quick = ["--large-bytes=2M", "--trials=10", "--repeat=2"]
    output = tmp_path / "at.jsonl"
    stdout, stderrs, statuses = forked(name, subnet, 3, *quick, "--peak=1gbit",
                                       f"--output={output}")
    assert statuses == [0, 0, 0], stdout + stderrs[0]
    assert "commbench: doctor: bound: given 1 Gb/s (--peak); a link below 0.7 of it is named" \
        in stderrs[0].splitlines()
    assert "; every link at 0.7 of its bound or more (given 1 Gb/s (--peak); the lowest 0." \
        in stdout, stdout
    _, _, final = verdict_of(output, stdout)
    assert final["healthy"] and final["below_bound"] == []
    reached = [link["fraction"] for link in final["bound"]["links"]]
    assert len(reached) == 3 and all(0.7 <= f <= 1.05 for f in reached), reached
    output = tmp_path / "below.jsonl"
    stdout, stderrs, statuses = forked(name, subnet, 3, *quick, "--peak=4gbit",
                                       f"--output={output}")
    assert statuses == [1, 1, 1], stdout + stderrs[0]
    named = [line for line in stderrs[0].splitlines() if line.startswith("commbench: slow ")]
    (line,) = named or [stdout]  # the fleet and nothing else: its peers hold it healthy
    assert line.startswith("commbench: slow fleet (3 hosts, every link below its bound): every "
                           "one of its 3 links is below 0.7 of the bound 4 Gbps (given 4 Gb/s "
                           "(--peak)): median 0."), line
    _, _, final = verdict_of(output, stdout)
    assert final["below_bound"] == [f"{name}{i}" for i in (1, 2, 3)]
    assert (final["suspect_hosts"], final["suspect_links"], final["exclude"]) == ([], [], [])
    assert all(link["below"] and link["fraction"] < 0.3 for link in final["bound"]["links"])
