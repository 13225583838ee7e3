"""doctor.py when hosts are lost mid-check, in-process: a measurement released when its peer is
known gone (commbench/doctor/release.py), a heartbeat that stands still (control.Control.lost),
and what the verdict says of the lost hosts (the record's `lost`, the exit line, What to do).
End to end, on simulated hosts: test_doctor.py's chaos case."""

import threading

import pytest
import torch.distributed

from commbench.doctor import control, release, render, retest, verdict
from commbench.doctor.verdict import Figures

from test_logic_doctor import figures, links_of_host

pytestmark = pytest.mark.fast


class Watch:
    """control.Control's side that release.measured reads: rank, lost(peers), released."""

    def __init__(self, gone_after=None, rank=0):
        self.rank, self.released, self.looks = rank, False, 0
        self.gone_after, self.asked = gone_after, []

    def lost(self, peers):
        self.looks += 1
        self.asked.append(list(peers))
        if self.gone_after is not None and self.looks > self.gone_after:
            return [(peers[0], "its heartbeat in the store stood still for 10 s")]
        return []


def test_a_measurement_returns_its_value_or_raises_its_own_error():
    watch = Watch()
    assert release.measured(watch, [0, 3], lambda: {"latency_s": 1e-5}) == {"latency_s": 1e-5}
    assert watch.asked[0] == [3]  # this rank's own left out
    with pytest.raises(RuntimeError, match="Connection closed by peer"):
        release.measured(watch, [3], lambda: (_ for _ in ()).throw(
            RuntimeError("Connection closed by peer")))
    assert not watch.released


def test_a_measurement_blocked_on_a_lost_peer_is_released():
    """The work blocks forever (a recv from a dead peer): the peer's loss releases the rank
    within a few looks, with one line saying it was not at fault."""
    never = threading.Event()
    watch = Watch(gone_after=2)
    with pytest.raises(release.PeerLost) as caught:  # unreleased, it would return after 60 s
        release.measured(watch, [5], lambda: never.wait(60))
    assert str(caught.value) == ("released: rank 5 stopped answering (its heartbeat in the "
                                 "store stood still for 10 s); this rank was not at fault")
    assert isinstance(caught.value, RuntimeError)  # the phases' own handlers record it
    assert watch.released  # a thread left blocked: run.py ends the process with os._exit
    never.set()


def test_a_peer_known_lost_before_is_not_waited_for():
    ran = []
    with pytest.raises(release.PeerLost):
        release.measured(Watch(gone_after=0), [2], lambda: ran.append(1))
    assert ran == []


def _control(store):
    """A Control with only what lost() reads: its watch connection and what rank 0 said."""
    found = control.Control.__new__(control.Control)
    found._watch, found._watched, found.gone = store, {}, set()
    return found


class Clock:
    """time's monotonic() as this test sets it."""

    def __init__(self):
        self.now = 100.0

    def monotonic(self):
        return self.now


def test_a_heartbeat_that_stands_still_is_lost_and_one_that_moves_is_not(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(control, "time", clock)
    store = torch.distributed.HashStore()
    store.set("beat/1", "1")
    store.set("beat/2", "1")
    found = _control(store)
    assert found.lost([1, 2]) == []  # the first look starts the clock
    for count in range(2, 22):
        clock.now += control.BEAT_S
        store.set("beat/2", str(count))  # rank 2 beats on, rank 1 stood still
        lost = found.lost([1, 2])
        if clock.now - 100.0 < control.DEAD_S:
            assert lost == [], count
    assert lost == [(1, f"its heartbeat in the store stood still for {control.DEAD_S:g} s")]
    found.gone = {2}  # rank 0 said so at a step: lost at once, whatever its heartbeat
    assert found.lost([2]) == [(2, "rank 0 named it unreachable")]


def test_the_verdict_says_which_hosts_were_lost_and_when():
    f = figures(6, slow=links_of_host(1, 6, 8.0))
    f.unreachable = {3, 5}
    f.unreachable_why = {3: "rank 3 stopped answering: its heartbeat in the store stood still "
                            "for 10 s (round 2 of the pairs); its process is gone (its host "
                            "refused a connection to it)",
                         5: "rank 5 stopped answering: ... (round 4 of the pairs); its host "
                            "does not answer (no connection in 1 s)"}
    f.lost_when = {3: "round 2 of the pairs", 5: "round 4 of the pairs"}
    found = retest.confirm(f, verdict.first_pass(f))
    record = render.verdict_record(f, found)
    assert record["unreachable"] == ["n3", "n5"]
    assert record["lost"] == [
        {"host": "n3", "when": "round 2 of the pairs", "why": f.unreachable_why[3]},
        {"host": "n5", "when": "round 4 of the pairs", "why": f.unreachable_why[5]}]
    assert record["exclude"] == ["n1", "n3", "n5"]  # the slow one and exactly the lost ones
    assert record["what_to_do"][-1] == (
        "  lost during the check: n3 (round 2 of the pairs), n5 (round 4 of the pairs): the "
        "rest were judged without them; bring them back, then check them with the others "
        "(--exclude=n[3,5] until then)")
    line = render.exit_line(1, "n2", record["lost"])
    assert line.startswith("doctor.py on n2 exits with status 1: its verdict (something is "
                           "suspect or unreachable: see the findings and 'What to do'; lost "
                           "during the check: n3 (round 2 of the pairs), n5 (round 4 of the "
                           "pairs)), not a crash;"), line


def test_no_host_lost_adds_nothing():
    f = Figures(["n0", "n1"], 0.5)
    f.unreachable = {1}  # unreachable, but at no step of the check: no `when` to give
    assert render.lost(f) == []
    assert "lost" not in render.exit_line(1)


def test_hosts_lost_at_one_step_are_probed_at_once(monkeypatch):
    """Two hosts of two ranks lost at the same step, one's process gone (its pulse refused), the
    other's host silent (its pulse unanswered): rank 0 tries both pulses in one probe_all, under
    one deadline (one after another, each silent host cost its own second: 16 silent hosts at
    a step, 16 s), one rank a host, and names each host once with what its pulse said."""
    from types import SimpleNamespace
    import socket
    from commbench.doctor.check import Check
    from commbench.ranks import pulse
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    refused = f"127.0.0.1 {closed.getsockname()[1]}"
    closed.close()  # nothing listens there: refused
    full = socket.socket()  # a listener whose queue is full: the kernel drops a new SYN, as a
    full.bind(("127.0.0.1", 0))  # host whose interface is down answers nothing
    full.listen(0)
    waiting = [socket.create_connection(full.getsockname())]  # its one place taken
    silent = f"127.0.0.1 {full.getsockname()[1]}"
    pulses = {4: refused, 5: refused, 6: silent, 7: silent}
    calls = []
    probe = pulse.probe_all

    def counted(texts, *args):
        calls.append(sorted(texts))
        return probe(texts, *args)
    monkeypatch.setattr(pulse, "probe_all", counted)
    check = Check.__new__(Check)
    check.comm = SimpleNamespace(hostnames=[f"n{r // 2}" for r in range(8)], global_rank=0,
                                 run=SimpleNamespace(whereabouts=SimpleNamespace(
                                     pulse_of=pulses.get)))
    check.hosts = [f"n{h}" for h in range(4)]
    check.args = SimpleNamespace(timeout=60, on_loss="continue")
    check.figures = Figures(check.hosts, 0.5)
    check.control = SimpleNamespace(step=lambda name: {4, 5, 6, 7},
                                    dead_why={r: "heartbeat" for r in range(4, 8)})
    said = []
    check.say = said.append
    try:
        check.sync("pairs-1")
    finally:
        for connection in waiting + [full]:
            connection.close()
    assert calls == [[4, 6]]  # at once, the first rank of each lost host
    assert check.figures.unreachable == {2, 3}
    assert check.figures.unreachable_why == {
        2: "rank 4 stopped answering: its heartbeat in the store stood still for 10 s (round 2 "
           "of the pairs); its process is gone (its host refused a connection to it)",
        3: "rank 6 stopped answering: its heartbeat in the store stood still for 10 s (round 2 "
           "of the pairs); its host does not answer (no connection in 1 s)"}
    assert check.figures.lost_when == {2: "round 2 of the pairs", 3: "round 2 of the pairs"}
    assert said == [f"host n{h} is unreachable: {check.figures.unreachable_why[h]}; the check "
                    "goes on without it" for h in (2, 3)]
