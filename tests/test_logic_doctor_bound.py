"""doctor.py's check against the bound (commbench/doctor/bound.py) in-process: links held
against what the network carries (--peak), on figures made up by hand; the fleet named when
every host is alike and below it, a host or a link when only they are; what the verdict says."""

import itertools

import pytest

from commbench.doctor import bound, render, verdict
from commbench.doctor.bound import HostBound
from commbench.doctor.verdict import Figures, Host, Judgement, Link

pytestmark = pytest.mark.fast

GBPS = 1e9 / 8
NAMES = ["n0", "n1", "n2", "n3"]


def figures(count, link_gbps, bound_gbps, slow=None, fraction=bound.DEFAULT_FRACTION):
    """`count` hosts, every link at `link_gbps` each way (`slow`: a pair's own), each host's
    bound `bound_gbps` (a list: per host; None: unknown)."""
    f = Figures(NAMES[:count], 0.5)
    for i, j in itertools.combinations(range(count), 2):
        bw = (slow or {}).get((i, j), link_gbps) * GBPS
        f.links[(i, j)] = Link(20e-6, bw, bw, 2 * bw)
    for h in range(count):
        f.hosts[h] = Host(10 * GBPS, 10e-6)
    per_host = bound_gbps if isinstance(bound_gbps, list) else [bound_gbps] * count
    f.bounds = {h: HostBound(None if g is None else g * GBPS, f"given {g} Gb/s (--peak)")
                for h, g in enumerate(per_host)}
    f.bound_fraction = fraction
    f.bound_words = bound._words(f, f.names)
    return f


def judged(f, judgement=None):
    judgement = judgement or Judgement()
    bound.judge(f, judgement)
    return judgement


def test_every_host_capped_at_the_bound_is_healthy_and_says_how_near():
    f = figures(3, 0.95, 1)
    assert judged(f).findings == []
    assert bound.healthy_words(f) == \
        "; every link at 0.7 of its bound or more (given 1 Gb/s (--peak); the lowest 0.95)"


def test_a_fleet_alike_below_its_bound_is_named_as_one_and_exits_1():
    f = figures(3, 0.95, 4)
    judgement = judged(f)
    (finding,) = judgement.findings
    assert (finding.kind, finding.hosts, finding.measure) == ("fleet", (0, 1, 2), "bound")
    line = render.findings(f, judgement)[0]
    assert line == ("slow fleet (3 hosts, every link below its bound): every one of its 3 links "
                    "is below 0.7 of the bound 4 Gbps (given 4 Gb/s (--peak)): median 0.95 Gbps, "
                    "0.24 of it (slowest 0.95 Gbps, fastest 0.95 Gbps)")
    record = render.verdict_record(f, judgement)
    assert not record["healthy"] and record["below_bound"] == ["n0", "n1", "n2"]
    assert record["exclude"] == []  # no host to leave out: the fleet is
    assert record["bound"]["fraction"] == 0.7
    assert [round(link["fraction"], 2) for link in record["bound"]["links"]] == [0.24] * 3
    assert any("the whole fleet is below 0.7 of its bound" in line
               for line in record["what_to_do"])
    table = render.report(f, judgement, 1)
    assert next(row for row in table if row.startswith("n1 ")).endswith("BELOW BOUND")


def test_two_hosts_one_link_below_is_the_fleet():
    (finding,) = judged(figures(2, 0.95, 4)).findings
    assert finding.kind == "fleet" and finding.hosts == (0, 1)


def test_a_host_whose_every_link_is_below_while_the_others_reach_it():
    f = figures(4, 9.4, 10, slow={(0, 2): 3.0, (1, 2): 3.0, (2, 3): 3.0})
    (finding,) = judged(f).findings
    assert (finding.kind, finding.hosts) == ("host", (2,))
    assert render.label(f, finding) == "slow host n2 (its links below their bound)"
    assert finding.text == "every link of it below 0.7 of its bound: median 3 Gbps, 0.30 of 10 Gbps"


def test_a_link_below_between_hosts_that_reach_it_otherwise():
    f = figures(4, 9.4, 10, slow={(1, 3): 2.5})
    (finding,) = judged(f).findings
    assert (finding.kind, finding.hosts) == ("link", (1, 3))
    assert finding.text == "2.5 Gbps, 0.25 of its bound 10 Gbps (under 0.7)"


def test_what_the_peers_named_already_is_not_named_twice():
    f = figures(4, 9.4, 10, slow={(0, 2): 3.0, (1, 2): 3.0, (2, 3): 3.0})
    judgement = Judgement(findings=[verdict.Finding("host", (2,), "slow", measure="bandwidth")])
    assert [x.kind for x in judged(f, judgement).findings] == ["host"]  # only the peers' one


def test_a_host_of_unknown_bound_leaves_its_links_unjudged():
    f = figures(3, 0.95, [4, 4, None])
    judged_links = bound.below(f)
    assert list(judged_links) == [(0, 1)]  # the two links of n2: no bound to hold them to
    (finding,) = judged(f).findings
    assert finding.kind == "fleet" and finding.hosts == (0, 1)


def test_a_retest_that_reached_the_bound_clears_its_link():
    f = figures(4, 9.4, 10, slow={(1, 3): 2.5})
    f.retests[(1, 3)] = Link(20e-6, 9.0 * GBPS, 9.0 * GBPS, 18 * GBPS)  # noise only slows
    assert judged(f).findings == []


def test_a_link_bound_is_the_lower_of_its_hosts():
    f = figures(3, 9.4, [100, 10, 10])
    assert bound.link_bound(f, 0, 1) == 10 * GBPS
    assert judged(f).findings == []
