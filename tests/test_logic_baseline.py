"""doctor.py --baseline in-process (commbench/doctor/baseline.py): synthetic histories of doctor
checks written into a real SQLite results database, each host and link judged against its own
past: a fleet that slowed as a whole named, a host always a little slower no alarm, one link
slower than it was named alone, too short a history said so. No ranks."""

import pytest

from commbench.records.db.store import RunWriter, Store
from commbench.doctor import baseline
from commbench.doctor.verdict import Figures, Host, Link

pytestmark = pytest.mark.fast

HOSTS = ["n1", "n2", "n3", "n4"]
GB = 1e9
# n3 always 0.85x its peers, within the host and on its links
SPEED = {"n1": 1.0, "n2": 1.02, "n3": 0.85, "n4": 0.98}


def link_speed(a, b):
    return min(SPEED[a], SPEED[b])


def write_check(store, scale=1.0, slow_link=None, tag="fleet", jitter=0.0, late=1.0):
    meta = {"ops": ["doctor"], "dist": "torch", "backend": "gloo", "world_size": 4,
            "hostnames": HOSTS}
    writer = RunWriter(store, meta, tag=tag)
    for i, host in enumerate(HOSTS):
        writer.add({"type": "doctor", "phase": "intra", "host": host, "ranks": [i],
                    "busbw_Bps": scale * SPEED[host] * (1 + jitter) * GB,
                    "latency_s": late * 1e-5 * (1 - jitter)})
    for a, b in pairs():
        bw = scale * link_speed(a, b) * (1 - jitter) * GB * (0.5 if (a, b) == slow_link else 1)
        writer.add({"type": "doctor", "phase": "pairs", "hosts": [a, b], "ranks": [0, 1],
                    "latency_s": late * 2e-5 * (1 + jitter), "forward_Bps": bw,
                    "backward_Bps": bw * 1.1,
                    "both_Bps": 2 * bw})
    writer.add({"type": "verdict", "healthy": True})
    writer.close()


def pairs():
    return [(a, b) for i, a in enumerate(HOSTS) for b in HOSTS[i + 1:]]


def figures_now(scale=1.0, slow_link=None, late=1.0, late_link=None):
    figures = Figures(HOSTS, 0.8)
    for i, host in enumerate(HOSTS):
        figures.hosts[i] = Host(scale * SPEED[host] * GB, late * 1e-5)
    for a, b in pairs():
        bw = scale * link_speed(a, b) * GB * (0.5 if (a, b) == slow_link else 1)
        latency = late * 2e-5 * (2.1 if (a, b) == late_link else 1)
        figures.links[(HOSTS.index(a), HOSTS.index(b))] = Link(latency, bw, bw * 1.1, 2 * bw)
    return figures


@pytest.fixture
def database(tmp_path):
    path = str(tmp_path / "results.db")
    store = Store(path)
    # 12 earlier checks, each a little off (+-3%); the oldest two much slower, outside the last 10
    for number in range(12):
        write_check(store, scale=0.5 if number < 2 else 1.0,
                    jitter=0.03 * (-1) ** number)
    write_check(store, scale=0.1, tag="other")  # another cluster's: not this one's past
    store.close()
    return path


def test_a_fleet_that_slowed_as_a_whole_is_named(database):
    part = baseline.check(database, figures_now(scale=0.68), tag="fleet")
    assert part["fleet_ratio"] == pytest.approx(0.68, abs=0.01)
    assert part["findings"] == ["every host's links 0.68x their median of the last 10 checks: "
                                "the fleet is slower than it was (its peers cannot see that)"]
    assert len(part["links"]) == 6 and len(part["hosts"]) == 4


def test_a_host_always_a_little_slower_is_no_new_alarm(database):
    part = baseline.check(database, figures_now(), tag="fleet")
    assert part["findings"] == []
    # n3 is 0.85x its peers today, as it always was: 1.0x its own past
    assert part["hosts"]["n3"] == pytest.approx(1.0, abs=0.01)
    line = part["lines"][0]
    assert "median 1.00x (slower below 0.80x" in line and line.endswith(
        "; none slower than it was"), line


def test_one_link_slower_than_it_was_is_named_alone(database):
    final = {"healthy": True}
    part = baseline.report(database, figures_now(slow_link=("n1", "n4")), final, tag="fleet")
    assert part["findings"] == ["link n1 - n4: 0.50x its median of the last 10 checks (the "
                                "others 1.00x)"]
    assert final["healthy"] is False


def test_latency_is_judged_against_its_own_past_too(database):
    """One link's latency twice what it was, its bandwidth as ever: named alone, by its latency;
    every latency 1.5x: the fleet, by its latency; the bandwidth's verdict untouched."""
    part = baseline.check(database, figures_now(late_link=("n2", "n3")), tag="fleet")
    assert part["findings"] == ["link n2 - n3: latency 2.10x its median of the last 10 checks "
                                "(the others latency 1.00x)"]
    assert part["latency"]["links"]["n2-n3"] == pytest.approx(1 / 2.1, abs=0.01)
    assert part["lines"][1].startswith("baseline (latency): 4 host(s) and 6 link(s) against "
                                       "their own last 10 checks: median latency 1.00x (slower "
                                       "above 1.25x: 1/0.8, or 3 run-to-run spreads"), part
    part = baseline.check(database, figures_now(late=1.5), tag="fleet")
    assert part["findings"] == ["every host's links' latency 1.50x their median of the last 10 "
                                "checks: the fleet is slower than it was (its peers cannot see "
                                "that)"], part
    assert part["fleet_ratio"] == pytest.approx(1.0, abs=0.01)


def test_the_older_checks_and_other_tags_are_not_the_baseline(database):
    store = Store(database)
    try:
        hosts, links = baseline.history(store, tag="fleet")
    finally:
        store.close()
    assert {len(v) for v in hosts.values()} == {10} and {len(v) for v in links.values()} == {10}
    assert min(hosts["n1"]) == pytest.approx(0.97 * GB)  # not the 0.5x of the first two


def test_a_drop_within_its_checks_own_noise_is_no_alarm(tmp_path):
    """Checks that differ by +-40% from run to run (this machine's, shared by other jobs):
    0.68x is their noise; 0.1x is not."""
    path = str(tmp_path / "noisy.db")
    store = Store(path)
    for number in range(10):
        write_check(store, jitter=0.4 * (-1) ** number)
    store.close()
    part = baseline.check(path, figures_now(scale=0.68), tag="fleet")
    assert part["findings"] == [] and part["floor"] < 0.5, part
    part = baseline.check(path, figures_now(scale=0.1), tag="fleet")
    assert part["findings"][0].startswith("every host's links 0.10x"), part


def test_too_short_a_history_is_said(tmp_path):
    path = str(tmp_path / "short.db")
    store = Store(path)
    write_check(store)
    write_check(store)
    store.close()
    part = baseline.check(path, figures_now(scale=0.5), tag="fleet")
    assert part["findings"] == [] and part["fleet_ratio"] is None
    assert "no host or link has 3 earlier checks" in part["lines"][0]


def test_a_file_that_is_no_database_is_one_warning(tmp_path, capsys):
    path = tmp_path / "not.db"
    path.write_text("not a database\n" * 100)
    assert baseline.check(str(path), figures_now()) is None
    err = capsys.readouterr().err
    assert err.startswith("commbench: warning: --baseline: ") and err.count("\n") == 1, err
