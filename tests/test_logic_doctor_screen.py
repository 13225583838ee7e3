"""doctor.py at fleet scale, in-process: the screen's plan (plan.py), its verdict (fleet.py) on
the modelled fabric (model.py, small fleets), the topology.conf reader (topology.py)."""

import itertools
import math
from statistics import NormalDist

import pytest

from commbench.doctor import fleet, fleet_retest, model, plan, topology
from commbench.doctor.verdict import Figures, Link
from commbench.errors import UsageError

pytestmark = pytest.mark.fast

GBPS = 1e9 / 8


# --------------------------------------------------------------------------- the plans

def test_auto_is_full_up_to_the_stated_count_and_the_screen_above():
    assert plan.resolve("auto", plan.AUTO_FULL_HOSTS) == "full"
    assert plan.resolve("auto", plan.AUTO_FULL_HOSTS + 1) == "screen"
    assert plan.resolve("screen", 8) == "screen" and plan.resolve("full", 4096) == "full"
    assert len(plan.make("full", 8)) == 7 and len(plan.make("screen", 8, rounds=5)) == 5


@pytest.mark.parametrize("count", [8, 9, 64])
def test_screen_rounds_are_perfect_matchings_drawn_with_the_seed(count):
    screen = plan.Screen(count, rounds=3, seed=7)
    first = screen.round(0)
    hosts = [h for pair in first for h in pair]
    assert len(hosts) == len(set(hosts)) and len(first) == count // 2
    assert plan.Screen(count, 3, seed=7).round(0) == first
    assert plan.Screen(count, 3, seed=8).round(0) != first


def test_from_the_second_round_the_slowest_is_paired_with_the_fastest_and_no_pair_twice():
    screen = plan.Screen(8, rounds=3, seed=1)
    first = screen.round(0)
    figure = {h: float(h) for h in range(8)}  # host 0 slowest, 7 fastest
    second = screen.round(1, figure)
    assert (0, 7) in second or (0, 7) in first  # the slowest met the fastest (if not before)
    assert not set(first) & set(second)
    hosts = [h for pair in second for h in pair]
    assert sorted(hosts) == list(range(8))
    assert screen.round(2, figure, gone={3}) and all(3 not in p for p in screen.round(2, figure,
                                                                                      gone={3}))


def test_with_a_topology_the_first_round_is_inside_switches_the_next_across():
    leaf = [h // 4 for h in range(16)]
    screen = plan.Screen(16, rounds=3, seed=2, leaf=leaf)
    assert all(leaf[a] == leaf[b] for a, b in screen.round(0))
    figure = {h: float(h % 5) for h in range(16)}
    assert all(leaf[a] != leaf[b] for a, b in screen.round(1, figure))


@pytest.mark.parametrize("count,per_switch", [(16, 4), (12, 4), (24, 8), (10, 2)])
def test_every_round_after_the_first_is_across_switches_whatever_the_figures(count, per_switch):
    """The greedy slowest-with-fastest pairing can leave its last two hosts behind one switch
    (a real 16-host check did, in 1 of 3 runs beside a busy loop): they swap partners with
    another pair. 200 draws of figures, every round a perfect matching, every pair across."""
    import random
    leaf = [h // per_switch for h in range(count)]
    draw = random.Random(7)
    for seed in range(200):
        screen = plan.Screen(count, rounds=3, seed=seed, leaf=leaf)
        screen.round(0)
        for number in (1, 2):
            pairs = screen.round(number, {h: draw.lognormvariate(0, 0.3) for h in range(count)})
            assert sorted(h for pair in pairs for h in pair) == list(range(count)), pairs
            assert all(leaf[a] != leaf[b] for a, b in pairs), (seed, number, pairs)


# --------------------------------------------------------------------------- the verdict's rule

def test_the_bar_gives_the_stated_false_alarm_rate_at_normal_noise():
    for count, pairs in [(64, 3), (1024, 3), (4096, 5)]:
        t = fleet.bar(count, pairs)
        assert fleet.host_bar(count, pairs) == max(t, fleet.RETEST_Z)
        assert count * NormalDist().cdf(-t) ** pairs == pytest.approx(fleet.ALPHA)


def _check(**faults):
    return model.check(model.Fabric(64, seed=faults.pop("seed", 0), **faults), seed=3)


@pytest.mark.parametrize("seed", range(4))
def test_healthy_modelled_fleets_name_nothing(seed):
    outcome = _check(seed=seed)
    assert outcome.named() == set(), [f.text for f in outcome.judgement.findings]
    assert outcome.rounds <= 5


@pytest.mark.parametrize("factor", [0.5, 0.1, 0.02])
def test_a_slow_host_is_named_exactly_in_a_few_rounds(factor):
    outcome = _check(slow_hosts={21: factor}, seed=5)
    assert outcome.named() == {("host", "n0022")}, outcome.judgement.cleared
    assert outcome.rounds <= 5  # 3 of the screen, 2 of retests
    (finding,) = outcome.judgement.findings
    assert "slow in all of its 3 pairs" in finding.text and "retested:" in finding.text


def test_a_slow_uplink_names_its_switch_not_its_hosts():
    outcome = _check(slow_uplinks={2: 0.5}, seed=6)
    assert outcome.named() == {("switch", "s3")}, [f.text for f in outcome.judgement.suspects]
    (finding,) = outcome.judgement.findings
    assert sorted(finding.hosts) == list(range(32, 48))


def test_without_the_topology_a_slow_uplink_is_its_hosts():
    outcome = model.check(model.Fabric(64, seed=6, slow_uplinks={2: 0.5}), seed=3,
                          topology=False)
    named = outcome.named()  # never a switch: nothing says which; at most hosts behind it
    behind = {f"n{h + 1:04d}" for h in range(32, 48)}
    assert all(kind in ("host", "link") and set(names) & behind for kind, *names in named), named
    suspects = [f for f in outcome.judgement.suspects]
    assert suspects and all(f.kind != "switch" for f in suspects)


def test_a_dead_host_is_named_unreachable_and_the_rest_goes_on():
    outcome = _check(dead={9: 1}, seed=2)
    assert outcome.named() == {("unreachable", "n0010")}


def _eight_screened():
    """8 hosts screened in 3 rounds, host 0 at 3 Gbps in all its pairs, the rest 6.2-6.6."""
    figures = Figures([f"n{h}" for h in range(8)], 0.5)
    for number, pairs in enumerate([[(0, 1), (2, 3), (4, 5), (6, 7)],
                                    [(0, 7), (1, 6), (2, 5), (3, 4)],
                                    [(0, 6), (1, 7), (2, 4), (3, 5)]]):
        for a, b in pairs:
            bw = (3.0 if a == 0 else 6.0 + 0.05 * (a + b)) * GBPS
            figures.measured.append((number, a, b, Link(20e-6, bw, bw, 2 * bw)))
            figures.links[(a, b)] = figures.measured[-1][3]
    return figures


def _by_hand(retest_gbps, control_gbps):
    """8 hosts screened, host 0 slow in all its pairs; its retests and their control pairs at
    the figures given."""
    figures = _eight_screened()
    judgement = fleet.first_pass(figures)
    assert [(f.kind, f.hosts) for f in judgement.suspects] == [("host", (0,))]
    rounds, controls = fleet_retest.retest_plan(figures, judgement)
    assert len(rounds) == 2 and [len(beside) for beside in controls] == [1, 1]
    for number, (pairs, beside) in enumerate(zip(rounds, controls), 3):
        hosts = [h for p in pairs for h in p]
        assert len(hosts) == len(set(hosts))  # disjoint: measured at once
        for pair in pairs:
            bw = (control_gbps if pair in beside else retest_gbps) * GBPS
            link = Link(20e-6, bw, bw, 2 * bw)
            figures.retest_log.append((number, pair, link, beside.get(pair)))
    return fleet_retest.confirm(figures, judgement)


def test_every_suspect_is_retested_when_the_good_hosts_run_short_in_a_round():
    """12 hosts, hosts 0-3 slow in every pair (6 and 7 met only them: suspects too), 6 good
    hosts: a round retests two suspects (a good partner and a control pair of two good hosts
    each); the others wait for the next round. They gave up instead, and were named "not
    retested" (CI, 2026-12-06: host 15 of 16 simulated hosts, slow in the screen by noise, named
    so beside the real slow host)."""
    figures = Figures([f"n{h}" for h in range(12)], 0.5)
    for number, pairs in enumerate([[(0, 4), (1, 5), (2, 6), (3, 7), (8, 9), (10, 11)],
                                    [(0, 5), (1, 6), (2, 7), (3, 8), (4, 9), (10, 11)],
                                    [(0, 6), (1, 7), (2, 8), (3, 9), (4, 10), (5, 11)]]):
        for a, b in pairs:
            bw = (1.0 if a < 4 else 6.0 + 0.05 * (a + b)) * GBPS
            figures.measured.append((number, a, b, Link(20e-6, bw, bw, 2 * bw)))
            figures.links[(a, b)] = figures.measured[-1][3]
    judgement = fleet.first_pass(figures)
    assert [f.hosts for f in judgement.suspects] == [(0,), (1,), (2,), (3,), (6,), (7,)]
    rounds, controls = fleet_retest.retest_plan(figures, judgement)
    for finding in judgement.suspects:
        assert len(finding.pairs) == 2, (finding.hosts, rounds)  # per_host, each
    for pairs in rounds:
        hosts = [h for p in pairs for h in p]
        assert len(hosts) == len(set(hosts))  # disjoint: measured at once
    assert len(rounds) == 6 and all(any(p in beside for p in pairs)
                                    for pairs, beside in zip(rounds, controls))


@pytest.mark.parametrize("retest_gbps,named", [(4.0, False), (2.0, True)])
def test_a_retest_without_a_control_is_held_to_the_fraction_of_the_typical_pair(retest_gbps,
                                                                               named):
    """8 hosts, host 0 slow in the screen (3 Gbps beside pairs of 6.2-6.6), retested with no
    control pair measured (none ran): 4 Gbps, 0.63x the typical pair, is what a busy retest
    round does to a healthy host (z -6 by the spread alone: it was named); 2 Gbps, below
    --min-fraction 0.5 of it, is named."""
    figures = _eight_screened()
    judgement = fleet.first_pass(figures)
    rounds, _ = fleet_retest.retest_plan(figures, judgement)
    (host,) = judgement.suspects
    for number, pairs in enumerate(rounds, 3):
        for pair in set(pairs) & set(host.pairs):  # the retests alone: no control ran
            bw = retest_gbps * GBPS
            figures.retest_log.append((number, pair, Link(20e-6, bw, bw, 2 * bw), None))
    judgement = fleet_retest.confirm(figures, judgement)
    assert [f.hosts for f in judgement.findings] == ([(0,)] if named else [])
    if named:
        assert "against the fleet's typical pair" in judgement.findings[0].text
    else:
        (line,) = judgement.cleared
        assert line.startswith("host n0 was slow in the screen") and line.endswith(
            "and when retested with no control pair beside it, but not below --min-fraction "
            "0.5 of the fleet's typical pair (n0-n6 4 Gbps, n0-n2 4 Gbps): the machine was "
            "busy, or noise"), line


def test_a_retest_slow_beside_a_fast_control_names_the_host():
    judgement = _by_hand(retest_gbps=3.0, control_gbps=6.0)
    assert [f.hosts for f in judgement.findings] == [(0,)]
    assert "beside" in judgement.findings[0].text


def test_a_host_suspect_behind_a_suspect_switch_is_retested_inside_it():
    """16 hosts behind 4 switches of 4, switch 1's uplink slowed: its hosts slow to everyone
    outside, and host 0 also a little slow inside (z -3.0, at the bar: seen on real simulated
    hosts; host 1 too, its partner there). Retested against hosts outside, they crossed the
    slow uplink and were named beside the switch; they meet their own switch's hosts instead, at
    full speed there, and are cleared."""
    figures, judgement = _sixteen_behind_four(
        lambda a, b, across: 0.3 if across and 0 in (a // 4, b // 4)
        else 4.8 if 0 in (a, b) else 6.0 + 0.01 * (a + b))
    # hosts 0 and 1 (their inside pair the slow one), and the switch
    assert sorted((f.kind, f.hosts[0]) for f in judgement.suspects) == \
        [("host", 0), ("host", 1), ("switch", 0)], [f.text for f in judgement.suspects]
    retests, controls = fleet_retest.retest_plan(figures, judgement)
    for host in [f for f in judgement.suspects if f.kind == "host"]:
        assert host.pairs and all(set(p) <= {0, 1, 2, 3} for p in host.pairs), host.pairs
    for number, (pairs, beside) in enumerate(zip(retests, controls), 3):
        for pair in pairs:
            crosses = len({figures.leaf[h] for h in pair}) > 1 and \
                0 in {figures.leaf[h] for h in pair}
            gbps = 0.3 if crosses else 6.0
            link = Link(20e-6, gbps * GBPS, gbps * GBPS, 2 * gbps * GBPS)
            figures.retest_log.append((number, pair, link, beside.get(pair)))
    judgement = fleet_retest.confirm(figures, judgement)
    assert [(f.kind, f.switch) for f in judgement.findings] == [("switch", "s1")]
    assert sorted(c.split(" was ")[0] for c in judgement.cleared) == ["host n0", "host n1"], \
        judgement.cleared


# The 16-host screen that named healthy host 2 (CI, quiet machine, 2026-12-06 18:35): round,
# hosts (0-based; switches of 4, switch 0's uplink at 1 Gbit, host 10 at 300 Mbit), Gbps each way.
# Rounds 0-2 the screen, 3-6 the retests and their controls, as its results file has them.
SCREEN_18_35 = """
0 0 3 5.178 6.829 | 0 1 2 2.749 2.811 | 0 4 7 3.998 5.345 | 0 5 6 4.316 3.760
0 8 11 3.967 4.412 | 0 9 10 0.286 0.289 | 0 12 14 2.431 3.182 | 0 13 15 5.638 3.071
1 0 9 0.294 0.290 | 1 1 11 0.305 0.393 | 1 2 8 0.293 0.297 | 1 3 10 0.184 0.225
1 4 12 4.631 3.988 | 1 5 15 4.477 5.072 | 1 6 13 2.930 5.422 | 1 7 14 4.214 5.265
2 0 14 0.269 0.281 | 2 1 13 0.277 0.297 | 2 2 12 0.277 0.253 | 2 3 15 0.295 0.380
2 4 8 5.280 4.146 | 2 5 10 0.286 0.286 | 2 6 11 5.879 3.666 | 2 7 9 4.243 4.726
3 0 5 0.288 0.286 | 3 1 15 0.299 0.316 | 3 2 4 0.294 0.354 | 3 3 7 0.315 0.316
3 8 11 9.056 11.728
4 0 1 3.026 3.070 | 4 2 3 4.641 4.743 | 4 4 7 2.898 2.711 | 4 5 15 2.385 3.499
4 6 13 4.424 2.569 | 4 8 10 0.285 0.287 | 4 9 11 2.554 4.369 | 4 12 14 2.185 2.738
5 1 2 5.216 3.583 | 5 4 10 0.287 0.287 | 5 5 15 5.523 4.571 | 5 6 13 4.007 3.669
5 7 8 2.891 4.174 | 5 9 11 3.784 3.233 | 5 12 14 3.369 3.114
6 0 2 7.205 19.110 | 6 5 15 13.311 11.184
"""


def test_each_retest_is_held_against_the_control_beside_it_in_its_own_round():
    """The figures of a 16-host screen that named healthy host 1 (0-based) slow. Behind the
    slowed switch, its only evidence was one pair inside (1-2 at 2.75 Gbps beside 3.1-5.2);
    retested inside the switch at 3.03 Gbps (round 4) and 3.58 (round 5), each beside control
    pair 5-15 at 2.39 and 4.57: in line. But the plan kept one control -> pair map for all
    rounds, and 5-15, the control of 0-1, then 1-2, then 0-2, was recorded as 0-2's in all
    three: host 1's retests went without a control and were held against the first pass's
    typical pair (z -3.8), "against the control". Each round's controls are its own now; the
    switch and host 10 (0.29 Gbps, 0.08x) are still named, beside their controls."""
    measured = [tuple(float(x) if "." in x else int(x) for x in row.split())
                for line in SCREEN_18_35.strip().splitlines() for row in line.split("|")]
    figures = Figures([f"n{h}" for h in range(16)], 0.5)
    figures.leaf = [h // 4 for h in range(16)]
    figures.switch_names = ["s1", "s2", "s3", "s4"]
    figure = {}
    for number, a, b, forward, backward in measured:
        link = Link(80e-6, forward * GBPS, backward * GBPS, (forward + backward) * GBPS)
        figure[(number, (a, b))] = link
        if number < 3:
            figures.measured.append((number, a, b, link))
            figures.links[(a, b)] = link
    judgement = fleet.first_pass(figures)
    assert sorted((f.kind, f.hosts) for f in judgement.suspects if f.kind != "link") == \
        [("host", (1,)), ("host", (2,)), ("host", (10,)), ("switch", (0, 1, 2, 3))]
    rounds, controls = fleet_retest.retest_plan(figures, judgement)
    assert [sorted(p for (n, p) in figure if n == number) for number in range(3, 7)] == rounds
    # control 5-15 beside host 1's retests in rounds 4 and 5, host 2's in round 6
    assert [beside.get((5, 15)) for beside in controls] == [None, (0, 1), (1, 2), (0, 2)]
    for number, (pairs, beside) in enumerate(zip(rounds, controls), 3):
        for pair in pairs:
            figures.retest_log.append((number, pair, figure[(number, pair)], beside.get(pair)))
    judgement = fleet_retest.confirm(figures, judgement)
    named = {f.kind: [] for f in judgement.findings}
    for f in judgement.findings:
        named[f.kind].append(f.switch or f.hosts)
    assert named == {"switch": ["s1"], "host": [(10,)]}, [f.text for f in judgement.findings]
    assert "n4-n10 0.287 Gbps beside n7-n8 2.89 Gbps" in judgement.findings[1].text
    cleared = [c for c in judgement.cleared if c.startswith("host n1 ")]
    assert cleared and "n0-n1 3.03 Gbps beside n5-n15 2.39 Gbps" in cleared[0], \
        judgement.cleared


def _sixteen_behind_four(gbps_of):
    """The screen's first pass over 16 hosts behind 4 switches of 4, each pair at gbps_of(a, b,
    across): the figures and the judgement."""
    figures = Figures([f"n{h}" for h in range(16)], 0.5)
    figures.leaf = [h // 4 for h in range(16)]
    figures.switch_names = ["s1", "s2", "s3", "s4"]
    rounds = [[(h, h + 1) for h in range(0, 16, 2)],  # inside the switches
              [(h, h + 4) for h in range(0, 16, 8) for h in range(h, h + 4)],
              [(h, (h + 8) % 16) for h in range(8)]]
    for number, pairs in enumerate(rounds):
        for a, b in pairs:
            bw = gbps_of(a, b, figures.leaf[a] != figures.leaf[b]) * GBPS
            figures.measured.append((number, a, b, Link(20e-6, bw, bw, 2 * bw)))
            figures.links[(a, b)] = figures.measured[-1][3]
    return figures, fleet.first_pass(figures)


def _suspects(gbps_of):
    return sorted((f.kind, f.hosts) for f in _sixteen_behind_four(gbps_of)[1].suspects)


def test_one_noisy_pair_inside_a_switch_does_not_hide_its_slow_uplink():
    """Seen on 16 simulated hosts (1 run in 3): switch 1's uplink at 1 Gbit, and its pair 0-1
    inside measured at 2.2 Gbps one way beside the others' 6 (z -5): the median of its two pairs
    inside fell below -3 and the switch was not suspected; hosts 0 and 1 were named as hosts and
    hosts 2 and 3's links outside as slow links. Inside is now also fine at half way back from
    the switch's z outside (-39)."""
    found = _suspects(lambda a, b, across: 0.3 if across and 0 in (a // 4, b // 4)
                                 else 2.2 if {a, b} == {0, 1} else 6.0 + 0.01 * (a + b))
    assert found == [("host", (0,)), ("host", (1,)), ("switch", (0, 1, 2, 3))], found


def test_two_slow_hosts_behind_one_switch_are_hosts_not_the_switch():
    found = _suspects(lambda a, b, across: 0.3 if {a, b} & {0, 1}
                                 else 6.0 + 0.01 * (a + b))
    assert found == [("host", (0,)), ("host", (1,))], found


def test_a_retest_as_slow_as_its_control_names_nothing_the_machine_was_busy():
    judgement = _by_hand(retest_gbps=3.0, control_gbps=3.1)
    assert judgement.findings == []
    (line,) = judgement.cleared
    assert "so was the control pair beside it: the machine was busy" in line


# --------------------------------------------------------------------------- topology.conf

CONF = """# a two-level tree
SwitchName=s1 Nodes=node[01-03] LinkSpeed=100
SwitchName=s2 Nodes=node[04-05,07],gpu1
SwitchName=spine Switches=s[1-2]
"""


def test_topology_conf_with_hostlist_ranges():
    topo = topology.parse("t.conf", CONF)
    assert topo.leaf_of == {"node01": "s1", "node02": "s1", "node03": "s1", "node04": "s2",
                            "node05": "s2", "node07": "s2", "gpu1": "s2"}
    assert topo.switches["spine"].switches == ["s1", "s2"]
    names = ["node01", "node04", "gpu1", "node02", "node03", "node05", "node07"]
    assert topology.check(topo, names).leaf_index(names) == [0, 1, 1, 0, 0, 1, 1]
    assert topology.expand("r[1-2]n[08-09]") == ["r1n08", "r1n09", "r2n08", "r2n09"]


@pytest.mark.parametrize("text,message", [
    (CONF + "SwitchName=s3 Nodes=node02\n",
     "t.conf:5: host node02 is under two switches, s1 (line 2) and s3"),
    ("SwitchName=a Switches=b\nSwitchName=b Switches=a\nSwitchName=c Nodes=n1\n",
     "t.conf:1: a cycle of switches: "),
    ("SwitchName=a Switches=zz\n", "t.conf:1: switch a names switch zz, which no SwitchName="),
    ("SwitchName=a Nodes=n[3-1]\n", "t.conf:1: '3-1' in 'n[3-1]' is not a number or a range"),
    ("Nodes=n1\n", "t.conf:1: a line names its switch with SwitchName="),
])
def test_a_bad_topology_is_one_line_naming_the_line(text, message):
    with pytest.raises(UsageError) as error:
        topology.parse("t.conf", text)
    assert str(error.value).startswith(f"--topology {message}"), str(error.value)


def test_a_topology_held_against_the_check_s_hosts():
    topo = topology.parse("t.conf", CONF)
    with pytest.raises(UsageError, match=r"t.conf:3: unknown host gpu1: the check runs on"):
        topology.check(topo, ["node01", "node02", "node03", "node04", "node05", "node07"])
    with pytest.raises(UsageError, match=r"host node09 of the check is under no switch"):
        topology.check(topo, list(topo.leaf_of) + ["node09"])


# What Slurm 22.05's `scontrol show topology` prints (a cluster's whole tree, Level= and
# LinkSpeed= besides the file's keys).
SCONTROL = """SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=gpu[001-004]
SwitchName=leaf2 Level=0 LinkSpeed=1 Nodes=gpu[005-008]
SwitchName=leaf3 Level=0 LinkSpeed=1 Nodes=cpu[01-64]
SwitchName=spine Level=1 LinkSpeed=1 Nodes=cpu[01-64],gpu[001-008] Switches=leaf[1-3]
"""


def test_slurm_s_topology_is_cut_to_the_check_s_hosts():
    """Slurm's tree names every node of the cluster; the check keeps its own hosts, matched by
    name or by the name up to the first dot, and the switches' places in the tree."""
    names = ["gpu002.cluster.example", "gpu006.cluster.example", "gpu001.cluster.example"]
    found, why = topology.from_slurm(SCONTROL, names)
    assert why == "" and found.path == topology.SLURM
    assert [(s.name, s.hosts) for s in found.leaves()] == [
        ("leaf1", ["gpu001.cluster.example", "gpu002.cluster.example"]),
        ("leaf2", ["gpu006.cluster.example"])]
    assert found.leaf_index(names) == [0, 1, 0]
    assert found.switches["spine"].switches == ["leaf1", "leaf2", "leaf3"]


def test_slurm_s_topology_that_misses_a_host_or_does_not_parse_is_not_used():
    found, why = topology.from_slurm(SCONTROL, ["gpu001", "login1"])
    assert found is None and why == "host login1 of the check is under no switch in it"
    found, why = topology.from_slurm("SwitchName=a Switches=b\nSwitchName=b Switches=a\n",
                                     ["n1"])
    assert found is None and "a cycle of switches: a -> b -> a" in why, why


def test_slurm_s_topology_is_read_only_under_slurm(tmp_path):
    assert topology.slurm_text(environ={}) == (None, "not under Slurm")
    # scontrol as a cluster without the tree plugin answers it (a script on PATH stands in for
    # it; the real one runs in test_doctor.py under srun).
    fake = tmp_path / "scontrol"
    fake.write_text("#!/bin/sh\necho 'No topology information available'\n")
    fake.chmod(0o755)
    environ = {"SLURM_JOB_ID": "7", "PATH": str(tmp_path)}
    text, why = topology.slurm_text(environ=environ)
    assert text is None and why == ("Slurm has no switches to say (No topology information "
                                    "available)"), why


def test_every_pair_in_the_full_plan_still():
    full = plan.make("full", 6)
    pairs = [p for n in range(len(full)) for p in full.round(n)]
    assert sorted(pairs) == list(itertools.combinations(range(6), 2))


# --------------------------------------------------------------------------- the whole fleet

def test_halves_are_whole_switches_with_a_topology_else_host_order():
    from commbench.doctor import bisect
    leaf = [h // 4 for h in range(16)]
    assert bisect.halves(list(range(16)), leaf) == (list(range(8)), list(range(8, 16)))
    assert bisect.halves(list(range(4, 16)), leaf) == (list(range(4, 12)), list(range(12, 16)))
    assert bisect.halves([8, 9, 10, 11], leaf) == ([8, 9], [10, 11])  # one switch: by order
    assert bisect.halves(list(range(6)), None) == ([0, 1, 2], [3, 4, 5])


@pytest.mark.parametrize("topology,want", [
    (True, {("switch", "s3")}),
    (False, {("group",) + tuple(f"n{h + 1:04d}" for h in range(32, 48))})])
def test_a_switch_congested_under_a_collective_only_is_bisected_to(topology, want):
    """No pair shows it (the screen names nothing); the fleet-wide collective runs at about
    0.5x its pairs' prediction, the halves at once, the slower split again: the switch (or
    without the topology its 16 hosts, as a group)."""
    fabric = model.Fabric(64, seed=0, congested={2: 0.5})
    outcome = model.check(fabric, seed=3, topology=topology, whole=True)
    assert outcome.named() == want, [f.text for f in outcome.judgement.findings]
    (finding,) = outcome.judgement.findings
    whole = outcome.figures.fleet_log[0]
    assert whole[2] / whole[3] < 0.75  # the fleet's collective against its pairs' prediction
    assert f"the fleet-wide collective ran at {whole[2] / whole[3]:.2f}x what its pairs " \
        "predict; bisected in" in finding.text, finding.text
    sizes = [len(group) for _, group, _, _ in outcome.figures.fleet_log]
    assert sizes[0] == 64 and sizes[1:3] == [32, 32]  # the whole fleet, then its halves
    assert outcome.rounds == 3 + len({number for number, *_ in outcome.figures.fleet_log})


@pytest.mark.parametrize("seed", range(4))
def test_the_fleet_wide_collective_names_nothing_on_healthy_fleets(seed):
    outcome = model.check(model.Fabric(64, seed=seed), seed=3, whole=True)
    assert outcome.named() == set(), [f.text for f in outcome.judgement.findings]
    assert outcome.figures.fleet_log[0][1] == tuple(range(64))


def test_halves_alike_name_nothing_the_machine_was_busy():
    """The whole fleet slow and both halves as slow (a busy machine, or the whole fabric)."""
    from commbench.doctor import bisect
    figures = Figures([f"h{i}" for i in range(8)], 0.5)
    link = Link(latency_s=1e-5, forward_Bps=GBPS, backward_Bps=GBPS, both_Bps=2 * GBPS)
    figures.measured = [(0, a, a + 1, link) for a in range(0, 8, 2)]
    judgement = fleet.first_pass(figures)
    fleet_retest.confirm(figures, judgement)
    rounds = bisect.run(figures, judgement, lambda groups, n: [0.5 * GBPS] * len(groups), 1)
    assert rounds == 3 and judgement.findings == []  # the fleet, its halves twice
    assert "its halves alike: the machine was busy" in judgement.cleared[-1]


SEVEN_AND_FOUR = [0] * 4 + [1] * 3 + [2] * 4  # 11 live hosts behind switches of 4, 3 and 4


@pytest.mark.parametrize("count,leaf,gaps,cleared,whole", [
    # CI's 16 simulated hosts on 2 cores (2026-12-06): 11 live hosts, halves of 7 and 4 (whole
    # switches, no host outside to pad them), the 7-rank half at 0.89x, then 0.65x the 4-rank
    # one (more ranks on the same two cores, not a switch): from their sizes alone, in a fleet
    # at 0.48x, the 7 are expected at 0.80x the 4, so the halves are alike
    (11, SEVEN_AND_FOUR, (-0.12, -0.43), "its halves alike: the machine was busy, or the whole "
     "fabric (nothing named)", 0.48),
    # the same gaps between halves of equal size, then the split again at 0.698x: two past the
    # bar (0.705x) by a hair, the mean 0.738x not
    (10, None, (-0.12, -0.43, 0.0, 0.0, -0.36), "its last split measured again did not hold: "
     "the slower half at 0.698x the other, 0.738x on the mean of its 3 measurements (the bar "
     "0.705x; nothing named)", 0.48),
    # the smaller half the slower is not made slower by the sizes: 16 simulated hosts beside
    # 2 busy loops (2026-12-06), a fleet of 11 at 0.36x, the 7 at 1.02x the 4 then 0.93x
    (11, SEVEN_AND_FOUR, (0.018, -0.07), "its halves alike: the machine was busy, or the "
     "whole fabric (nothing named)", 0.358),
    # a half at 0.5x the other every time is named, at 7 against 4 as between equals
    (11, SEVEN_AND_FOUR, (-0.69, 0.0, 0.0, -0.69), None, 0.48),
    (10, None, (-0.69, 0.0, 0.0, -0.69), None, 0.48)])
def test_halves_are_held_apart_beyond_their_sizes_and_on_the_mean(count, leaf, gaps, cleared,
                                                                   whole):
    """The halves of a slow fleet, measured at once: a larger half slower than the smaller
    counts only beyond what their sizes alone make of the fleet's slowness (bisect.size_term),
    a smaller half slower counts as measured, and the last split must hold on the mean of every
    measurement of it; a half at 0.5x is still named."""
    from commbench.doctor import bisect
    figures = Figures([f"h{i}" for i in range(count)], 0.5)
    link = Link(latency_s=1e-5, forward_Bps=GBPS, backward_Bps=GBPS, both_Bps=2 * GBPS)
    figures.measured = [(0, a, a + 1, link) for a in range(0, count - 1, 2)]
    judgement = fleet.first_pass(figures)
    fleet_retest.confirm(figures, judgement)
    figures.leaf = leaf
    splits = iter(gaps)

    def collective(groups, number):
        if len(groups) == 1:
            return [whole * GBPS]
        gap = next(splits)
        return [0.5 * GBPS * math.exp(gap), 0.5 * GBPS]
    bisect.run(figures, judgement, collective, 1)
    if cleared is None:
        assert [f.kind for f in judgement.findings] == ["group"], judgement.cleared
    else:
        assert judgement.findings == [], [f.text for f in judgement.findings]
        assert judgement.cleared[-1].endswith(cleared), judgement.cleared[-1]


def test_a_larger_half_is_expected_slower_by_its_size_alone():
    from commbench.doctor import bisect
    whole = math.log(0.5)
    seven, four = (math.exp(bisect.size_term(whole, k, 11)) for k in (7, 4))
    assert (round(seven, 2), round(four, 2)) == (0.60, 0.75)
    assert bisect.size_term(whole, 11, 11) == pytest.approx(whole)  # the whole fleet: itself
    assert bisect.size_term(whole, 2, 11) == 0.0  # a pair: what the prediction is made of
    assert bisect.size_term(0.1, 7, 11) == 0.0  # a fleet not slow: nothing to share out


def test_under_the_full_plan_the_fleet_is_predicted_from_every_pair():
    """--plan full keeps its pairs in figures.links, not in the screen's log: the prediction is
    their median, and a host whose best pair is 0.4x it lowers the prediction of its groups."""
    from commbench.doctor import bisect
    figures = Figures([f"h{i}" for i in range(5)], 0.5)
    fast = Link(latency_s=1e-5, forward_Bps=GBPS, backward_Bps=GBPS, both_Bps=2 * GBPS)
    slow = Link(latency_s=1e-5, forward_Bps=0.4 * GBPS, backward_Bps=0.4 * GBPS,
                both_Bps=0.8 * GBPS)
    figures.links = {(a, b): slow if 4 in (a, b) else fast
                     for a, b in itertools.combinations(range(5), 2)}
    middle, factor = bisect.host_factors(figures)
    assert middle == GBPS and factor == {4: pytest.approx(0.4)}
    judgement = fleet.first_pass(figures)
    fleet_retest.confirm(figures, judgement)
    judgement.findings = []  # the fleet-wide step alone: every host takes part
    asked = []
    bisect.run(figures, judgement, lambda groups, n: asked.append(groups) or [0.4 * GBPS], 1)
    assert asked == [[[0, 1, 2, 3, 4]]] and figures.fleet_log[0][3] == pytest.approx(0.4 * GBPS)


@pytest.mark.fast
def test_a_screen_of_too_few_hosts_runs_the_full_plan_and_says_why():
    from commbench.doctor import plan
    assert [plan.resolve("screen", n) for n in (2, 3, 7, 8, 64)] == \
        ["full", "full", "full", "screen", "screen"]
    assert plan.resolve("auto", 3) == "full" and plan.resolve("full", 64) == "full"
    line = plan.screen_fallback("screen", 3)
    assert "3 hosts make 1 a round" in line and "every pair in 3 rounds" in line, line
    assert "every pair in 5 rounds" in plan.screen_fallback("screen", 6)
    assert plan.screen_fallback("screen", 8) is None and plan.screen_fallback("auto", 3) is None


def test_the_screen_retests_a_link_below_the_fraction_however_spread_its_round():
    """12 hosts, 3 rounds of 6 pairs spread 1.8-26 Gbps (z of a 0.13x pair about -2 against the
    fleet's own spread, above the link bar -3.9): below --min-fraction, it is a suspect all the
    same, and its retest beside a control decides, as for the noisy pairs below the fraction
    (1.8 Gbps); none at or above the fraction is."""
    spread = [1.8, 3.9, 5.5, 7.0, 9.4, 26.0]
    f = Figures([f"n{i}" for i in range(12)], 0.5)
    rounds = [[(0, 1), (2, 4), (3, 9), (5, 6), (7, 8), (10, 11)],
              [(0, 2), (1, 3), (4, 5), (6, 9), (7, 10), (8, 11)],
              [(0, 3), (1, 2), (4, 6), (5, 7), (8, 9), (10, 11)]]
    for number, pairs in enumerate(rounds):
        for index, (i, j) in enumerate(pairs):
            gbps = 0.95 if (i, j) == (3, 9) else spread[(index + 2 * number) % len(spread)]
            f.measured.append((number, i, j, Link(20e-6, gbps * GBPS, gbps * GBPS)))
    judgement = fleet.first_pass(f)
    scores = judgement.scores
    (z,) = [z for _, i, j, z in scores.z if (i, j) == (3, 9)]
    assert z > -fleet.bar(len(scores.z), 1)  # the old rule alone cleared it unretested
    suspects = [x.hosts for x in judgement.suspects]
    assert (3, 9) in suspects and all(x.kind == "link" for x in judgement.suspects)
    middle = {n: sorted(lk.bandwidth for m, _, _, lk in f.measured if m == n)[3] for n in range(3)}
    below = [(i, j) for n, i, j, lk in f.measured if lk.bandwidth < 0.5 * middle[n]]
    assert sorted(suspects) == sorted(below), (suspects, below)
