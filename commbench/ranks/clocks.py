"""Every rank's clock put on rank 0's, for the arrivals of --per-trial and --stats.

Ranks of one host read one clock: CLOCK_MONOTONIC (time.perf_counter on Linux) is the
kernel's, system-wide, so their readings need no alignment ("shared"). A barrier's exit is no
clock: on a busy host ranks leave one up to tens of milliseconds apart.

Across hosts, each host's offset to rank 0's host is measured ("measured") the way Cristian's
algorithm and NTP do: rank 0 sends a ping at t0 (its clock), the first rank of the other host
reads its clock t1 on receipt and answers, rank 0 reads t2 on the answer. The other clock read
t1 at some moment between t0 and t2, so its offset is t1 - (t0 + t2) / 2 within +-(t2 - t0) / 2.
Of ROUNDS such round trips the shortest is kept (the least queueing, the tightest bound). It is
measured before and after the timed trials; an arrival between them takes the offset
interpolated on the clock (the drift of two crystals, parts per million, is followed), within
the larger of the two bounds.

Hosts are told apart by their host names (what every rank reports at start-up)."""

import time
from dataclasses import dataclass, field

ROUNDS = 24  # round trips a host, each measurement; the shortest is kept


def now():
    """The clock every mark of a timed window reads (CLOCK_MONOTONIC on Linux)."""
    return time.perf_counter()


@dataclass
class Reading:
    """Rank 0's view of every host's clock at one moment: per host name, (offset s, bound s,
    rank 0's clock when measured). Empty on the other ranks."""
    hosts: dict = field(default_factory=dict)


def leaders(hostnames):
    """{host: its first rank}, in rank order."""
    first = {}
    for rank, host in enumerate(hostnames):
        first.setdefault(host, rank)
    return first


def measure(comm, rounds=ROUNDS):
    """Every host's offset to rank 0's clock (a Reading on rank 0; an empty one elsewhere).
    Only rank 0 and each other host's first rank take part; the others return at once (the
    next collective waits for them all)."""
    hostnames = comm.hostnames
    first = leaders(hostnames)
    rank, home = comm.global_rank, hostnames[0]
    if len(first) == 1:
        return Reading({home: (0.0, 0.0, now())} if rank == 0 else {})
    import torch  # here: the readers of records (report/) import this module without torch
    import torch.distributed
    device = comm.device
    if rank == 0:
        reading = {home: (0.0, 0.0, now())}
        ping = torch.zeros(1, dtype=torch.float64, device=device)
        pong = torch.zeros(1, dtype=torch.float64, device=device)
        for host, peer in first.items():
            if peer == 0:
                continue
            best = None
            for _ in range(rounds):
                t0 = now()
                torch.distributed.send(ping, peer)
                torch.distributed.recv(pong, peer)
                comm.synchronize()
                t2 = now()
                if best is None or t2 - t0 < best[1] - best[0]:
                    best = (t0, t2, float(pong.item()))
            t0, t2, t1 = best
            reading[host] = (t1 - (t0 + t2) / 2, (t2 - t0) / 2, (t0 + t2) / 2)
        return Reading(reading)
    if first[hostnames[rank]] == rank:
        ping = torch.zeros(1, dtype=torch.float64, device=device)
        for _ in range(rounds):
            torch.distributed.recv(ping, 0)
            comm.synchronize()
            pong = torch.tensor([now()], dtype=torch.float64, device=device)
            torch.distributed.send(pong, 0)
    return Reading()


def alignment(before, after):
    """From rank 0's two Readings: {host: (offset at rank 0's time t -> s, bound s)} as plain
    figures for the record: {host: [offset_before, time_before, offset_after, time_after,
    bound]} (times on rank 0's clock)."""
    out = {}
    for host, (offset, bound, when) in before.hosts.items():
        later = after.hosts.get(host, (offset, bound, when))
        out[host] = [offset, when, later[0], later[2], max(bound, later[1])]
    return out


def offset_at(entry, t):
    """A host's offset at time t (its own clock, close enough: the offset is tiny against the
    interpolation's span), from an alignment() entry."""
    offset, when, later, then, _ = entry
    if then <= when:
        return offset
    share = min(1.0, max(0.0, (t - offset - when) / (then - when)))
    return offset + share * (later - offset)


class Hiccups:
    """Whether this process ran (--per-trial): a thread that sleeps TICK again and again, as
    jHiccup does, and keeps each wake-up later than TICK + SLACK as an interval in which the
    process did not run: stopped (SIGSTOP), descheduled, paused. A rank blocked inside a call
    still runs in this sense (its thread wakes on time); a stopped one does not, and that is
    what tells who stalled when a stall lands inside a collective, where every rank's call is
    long. The thread holds the GIL for microseconds a wake-up, 500 times a second at most."""

    TICK = 0.002
    # a wake-up this late beyond TICK counts: a scheduler's time slices (1-4 ms; a few on a
    # busy host) are not a stall
    SLACK = 0.010

    def __init__(self):
        import threading
        self.gaps = []  # (from, to) on this process's clock
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="commbench-hiccups", daemon=True)

    def _run(self):
        tick, slack, gaps = self.TICK, self.SLACK, self.gaps
        before = now()
        while not self._stop.is_set():
            time.sleep(tick)
            after = now()
            if after - before > tick + slack:
                gaps.append((before + tick, after))
            before = after

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        return False

    def within(self, windows):
        """Seconds not run inside each (from, to) window (ascending, not overlapping)."""
        out, k = [], 0
        gaps = self.gaps
        for low, high in windows:
            while k < len(gaps) and gaps[k][1] <= low:
                k += 1
            total, j = 0.0, k
            while j < len(gaps) and gaps[j][0] < high:
                total += max(0.0, min(high, gaps[j][1]) - max(low, gaps[j][0]))
                j += 1
            out.append(total)
        return out
