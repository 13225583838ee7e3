"""Rank 0 at a deadline (commbench/ranks/whereabouts.py), in-process on a real store and real
sockets: the ranks whose pulse says they are gone or silent are not waited for; a live rank
that has not posted yet is, to the grace; what each wait was asked is counted, not timed."""

import socket
import time

import pytest
import torch.distributed

from commbench.ranks import pulse, whereabouts

pytestmark = pytest.mark.fast


@pytest.fixture
def silent_address():
    """An address whose connections are never completed: a listener with a full accept queue
    drops further SYNs, as a host whose interface is down does."""
    full = socket.socket()
    full.bind(("127.0.0.1", 0))
    full.listen(0)
    port = full.getsockname()[1]
    held = []
    for _ in range(3):
        client = socket.socket()
        client.setblocking(False)
        client.connect_ex(("127.0.0.1", port))
        held.append(client)
    time.sleep(0.2)
    yield f"127.0.0.1 {port}"
    for sock in held + [full]:
        sock.close()


def _rank0(store, world_size):
    return whereabouts.Whereabouts(0, world_size, [f"h{r}" for r in range(world_size)], store,
                                   store)


def _waits(monkeypatch):
    monkeypatch.setattr(whereabouts, "PROBE_S", 0.2)  # the same rules, a shorter wait
    monkeypatch.setattr(whereabouts, "GRACE_S", 0.6)
    asked = []
    real = whereabouts._wait

    def counted(store, keys, seconds):
        asked.append((sorted(keys), round(seconds, 1)))
        return real(store, keys, seconds)
    monkeypatch.setattr(whereabouts, "_wait", counted)
    return asked


def test_silent_and_gone_ranks_are_not_waited_for(monkeypatch, silent_address):
    store = torch.distributed.HashStore()
    gone = pulse.open_pulse("127.0.0.1")
    store.set("pulse/2", silent_address)
    store.set("pulse/3", "{} {}".format(*gone.getsockname()[:2]))
    gone.close()
    for rank in (0, 1):
        store.set(f"waiting/{rank}", '{"op": "all_reduce", "size": 8, "phase": "timed"}')
    store.set("seen/2", '{"op": "all_reduce", "size": 8, "phase": "timed", "time": 0}')
    asked = _waits(monkeypatch)
    posts, seen, states = _rank0(store, 4)._gather()
    assert [r for r, post in posts.items() if post is None] == [2, 3]
    assert states == {2: "silent", 3: "gone"} and seen[3] is None
    # no wait beyond the probe's PROBE_S: both answers are known after it
    assert asked == []


def test_a_live_rank_not_yet_posted_is_waited_for_to_the_grace(monkeypatch, silent_address):
    store = torch.distributed.HashStore()
    alive = pulse.open_pulse("127.0.0.1")
    store.set("pulse/1", "{} {}".format(*alive.getsockname()[:2]))
    store.set("pulse/2", silent_address)
    store.set("waiting/0", '{"op": "all_reduce", "size": 8, "phase": "timed"}')
    asked = _waits(monkeypatch)
    posts, _, states = _rank0(store, 3)._gather()
    alive.close()
    assert states == {1: "alive", 2: "silent"}
    # rank 1 (alive) waited for, to what is left of GRACE_S; rank 2 (silent) not
    (keys, seconds), = asked
    assert keys == ["waiting/1"] and 0 < seconds <= whereabouts.GRACE_S - whereabouts.PROBE_S + 0.05
