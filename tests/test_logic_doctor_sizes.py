"""doctor.py's verdict at any size, in-process (issue 57): a host slow in every pair it is in is
named by both plans also where its pairs are the majority, 3, 4 and 5 hosts with one slow and 8
with three slow; the full plan on figures made up by hand, the screen on the modelled fabric
(commbench/doctor/model.py) it is measured against in benchmarks/doctor_scale.py."""

import itertools

import pytest

from commbench.doctor import fleet, model, retest, schedule, verdict
from commbench.doctor.verdict import Figures, Host, Link

pytestmark = pytest.mark.fast

GBPS = 1e9 / 8
CASES = [(3, (1,)), (4, (2,)), (5, (3,)), (8, (1, 4, 6))]


def full_plan(count, slow, factor=0.2, gbps=10.0):
    """Every pair once in its round-robin round; the slow hosts' every link at `factor`."""
    f = Figures([f"n{i}" for i in range(count)], 0.5)
    for i, j in itertools.combinations(range(count), 2):
        bw = gbps * (factor if i in slow or j in slow else 1.0) * GBPS
        f.links[(i, j)] = Link(latency_s=20e-6, forward_Bps=bw, backward_Bps=bw, both_Bps=2 * bw)
    for h in range(count):
        f.hosts[h] = Host(busbw_Bps=160 * GBPS, latency_s=10e-6)
    for number, pairs in enumerate(schedule.round_robin(count)):
        f.measured += [(number, i, j, f.links[(i, j)]) for i, j in pairs]
    return f


@pytest.mark.parametrize("count,slow", CASES)
def test_the_full_plan_names_the_slow_hosts_even_as_the_majority_of_pairs(count, slow):
    f = full_plan(count, slow)
    judgement = fleet.consistent_hosts(f, verdict.first_pass(f))
    for pair, *control in retest.retest_rounds(f, judgement):
        bw = (2.0 if set(pair) & set(slow) else 10.0) * GBPS
        f.retests[pair] = Link(20e-6, bw, bw)
        if control:
            f.control_of[pair] = control[0]
            f.controls[pair] = Link(20e-6, 10 * GBPS, 10 * GBPS)
    found = retest.confirm(f, judgement)
    assert sorted((x.kind, x.hosts) for x in found.findings) == \
        [("host", (h,)) for h in slow], [x.text for x in judgement.suspects]


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("count,slow", CASES[1:])
def test_the_screen_names_the_slow_hosts_even_as_the_majority_of_pairs(count, slow, seed):
    """(3 hosts: the screen cannot judge, and doctor.py runs the full plan there:
    tests/test_doctor.py's three-host screen.) 8 hosts with three slow: after the screen's
    first round each slow host meets a fast one, so most pairs are slow; a retest without a
    control pair is held against the pairs of unsuspected hosts, not all of them (two of the
    three were cleared as noise before)."""
    outcome = model.check(model.Fabric(count, seed=seed,
                                       slow_hosts={h: 0.2 for h in slow}), seed=seed)
    assert outcome.named() == {("host", f"n{h + 1:04d}") for h in slow}, \
        outcome.judgement.cleared
