"""What a check measures, each as R windows of T trials (as --repeat: the window is the unit of
repetition, and the figure carries a 95% interval over the windows):

- a host's ranks among themselves (when a host has several), in the host's own group: an
  all_reduce of the small message (latency: the median op of a window; one host after the
  other) and of the large one (bus bandwidth; every host at once);
- a pair of hosts, through one rank of each in a group of two: the small message's one-way
  latency (ping-pong, half the round trip), the large message's bandwidth each way in turn
  (timed by the receiver), and both ways at once (both directions counted, as osu_bibw).

Figures are in seconds and bytes per second; the host clock times CPU ranks, and an
accelerator is synchronised before the clock is read."""

import statistics
import time

import torch
import torch.distributed

from ..opfacts import FACTS
from ..bench.timing import interval


def _windows(run_window, repeat):
    """(mean, [low, high]) of `repeat` windows, each run_window() seconds a trial."""
    values = [run_window() for _ in range(repeat)]
    mean, low, high = interval(values, [1] * len(values))
    return mean, [low, high]


def _bandwidth(nbytes, seconds):
    mean, (low, high) = seconds
    return nbytes / mean, [nbytes / high, nbytes / low if low > 0 else None]


class Pair:
    """Rank `me` and rank `peer` (global ranks) of a group of two; `first`: this is the lower
    host's rank, which keeps the figures."""

    def __init__(self, comm, group, me, peer, small_bytes, large_bytes):
        self.comm, self.group, self.me, self.peer = comm, group, me, peer
        self.first = me < peer
        device = comm.device
        self.small = torch.ones(max(1, small_bytes // 4), dtype=torch.float32, device=device)
        self.large = torch.ones(max(1, large_bytes // 4), dtype=torch.float32, device=device)
        self.large_in = torch.empty_like(self.large)
        self.small_bytes, self.large_bytes = self.small.nbytes, self.large.nbytes
        self.token = torch.zeros(1, dtype=torch.float32, device=device)

    def _send(self, tensor):
        torch.distributed.send(tensor, self.peer, group=self.group)

    def _recv(self, tensor):
        torch.distributed.recv(tensor, self.peer, group=self.group)

    def _sync(self):
        """Both ranks at the same point: a token there and back."""
        if self.first:
            self._send(self.token)
            self._recv(self.token)
        else:
            self._recv(self.token)
            self._send(self.token)
        self.comm.synchronize()

    def ping_pong(self, trials):
        """Seconds one way for the small message: the median round trip of `trials`, halved,
        on the first rank (a median: a descheduled rank makes one round trip 10x slower, not
        the link), shared with the second."""
        self._sync()
        trips = []
        for _ in range(trials):
            started = time.perf_counter()
            if self.first:
                self._send(self.small)
                self._recv(self.small)
            else:
                self._recv(self.small)
                self._send(self.small)
            self.comm.synchronize()
            trips.append(time.perf_counter() - started)
        mine = statistics.median(trips) / 2 if self.first else 0.0
        return self._share(mine)

    def one_way(self, trials, sender_is_first):
        """Seconds a large message from one rank to the other, timed by the receiver from the
        end of the sync (the sender starts within one small message's latency of it) to the
        last message's arrival."""
        sending = self.first == sender_is_first
        self._sync()
        started = time.perf_counter()
        if sending:
            for _ in range(trials):
                self._send(self.large)
            self.comm.synchronize()
            seconds = 0.0
        else:
            for _ in range(trials):
                self._recv(self.large_in)
            self.comm.synchronize()
            seconds = (time.perf_counter() - started) / trials
        return self._share(seconds)

    def both_ways(self, trials):
        """Seconds for a large message each way at once (the slower rank's window)."""
        self._sync()
        started = time.perf_counter()
        for _ in range(trials):
            works = [torch.distributed.isend(self.large, self.peer, group=self.group),
                     torch.distributed.irecv(self.large_in, self.peer, group=self.group)]
            for work in works:
                work.wait()
        self.comm.synchronize()
        return self._share((time.perf_counter() - started) / trials, take=max)

    def _share(self, seconds, take=sum):
        """Both ranks' figure: the receiver's (the other sends 0), or the slower of both."""
        mine = torch.tensor([seconds], dtype=torch.float64, device=self.comm.device)
        theirs = torch.empty_like(mine)
        if self.first:
            self._send(mine)
            self._recv(theirs)
        else:
            self._recv(theirs)
            self._send(mine)
        return take([float(mine.item()), float(theirs.item())])

    def latency(self, trials, repeat, warmups, warm_s=0.05):
        """The small message's figures, as a record's fields (every pair of a round measures
        its latency at once, before any of them moves large messages). Untimed windows first,
        `warmups` of them and for at least `warm_s`: round trips after a pause (a new group, a
        virtual machine whose CPUs went idle) take 10-20x a settled one for a while."""
        started, windows = time.perf_counter(), 0
        while True:
            self.ping_pong(trials)
            windows += 1
            # the first rank decides when the warm-up is over, for both (the other adds 0)
            more = self.first and (windows < max(1, warmups) or
                                   time.perf_counter() - started < warm_s) and windows < 200
            if not self._share(1.0 if more else 0.0):
                break
        latency, latency_ci = _windows(lambda: self.ping_pong(trials), repeat)
        return {"latency_s": latency, "latency_ci_s": [max(0.0, latency_ci[0]), latency_ci[1]],
                "small_bytes": self.small_bytes, "trials": trials}

    def bandwidth(self, trials, repeat, window_s=0.25):
        """The large message's figures, as a record's fields. A window is about `window_s`
        long (at most trials/5 messages, at least one): a slow link, the finding a check looks
        for, must not make the check slow."""
        pace = max(self.one_way(1, True), self.one_way(1, False))  # the same on both ranks
        bw_trials = max(1, min(max(2, trials // 5), int(window_s / pace) if pace > 0 else 1))
        forward = _bandwidth(self.large_bytes, _windows(lambda: self.one_way(bw_trials, True),
                                                        repeat))
        backward = _bandwidth(self.large_bytes, _windows(lambda: self.one_way(bw_trials, False),
                                                         repeat))
        both = _bandwidth(2 * self.large_bytes, _windows(lambda: self.both_ways(bw_trials),
                                                         repeat))
        return {"forward_Bps": forward[0], "forward_ci_Bps": forward[1],
                "backward_Bps": backward[0], "backward_ci_Bps": backward[1],
                "both_Bps": both[0], "both_ci_Bps": both[1], "large_bytes": self.large_bytes,
                "bandwidth_trials": bw_trials, "windows": repeat}


class Host:
    """A host's ranks among themselves in their own group, as its first rank times them: the
    small message's all_reduce time (the median of each window's, hosts one after the other)
    and the large message's bus bandwidth (every host at once)."""

    def __init__(self, comm, group, ranks, small_bytes, large_bytes):
        self.comm, self.group, self.size = comm, group, len(ranks)
        self.first = ranks[0]  # global rank: the one whose figures the host posts
        size = self.size
        self.large = torch.ones(max(size, large_bytes // 4), dtype=torch.float32,
                                device=comm.device)
        self.small = torch.ones(max(1, small_bytes // 4), dtype=torch.float32,
                                device=comm.device)

    def _window(self, tensor, count):
        torch.distributed.barrier(group=self.group)
        self.comm.synchronize()
        started = time.perf_counter()
        for _ in range(count):
            torch.distributed.all_reduce(tensor, group=self.group)
        self.comm.synchronize()
        return (time.perf_counter() - started) / count

    def _median_op(self, count):
        """Seconds of the small all_reduce: the median of `count`, each timed alone (a
        descheduled rank makes one of them 10x slower, not the host; a window's mean would
        carry it)."""
        torch.distributed.barrier(group=self.group)
        self.comm.synchronize()
        times = []
        for _ in range(count):
            started = time.perf_counter()
            torch.distributed.all_reduce(self.small, group=self.group)
            self.comm.synchronize()
            times.append(time.perf_counter() - started)
        return statistics.median(times)

    def latency(self, trials, repeat, warmups, warm_s=0.05):
        """The small message's figures, as a record's fields. Untimed windows first, `warmups`
        of them and for at least `warm_s` (as a pair's: ranks that waited for the other hosts'
        turns come back slow for a while); the host's first rank decides when that is over."""
        started, windows = time.perf_counter(), 0
        more = torch.zeros(1, dtype=torch.float32, device=self.comm.device)
        while True:
            self._median_op(trials)
            windows += 1
            more.fill_(1.0 if (windows < max(1, warmups) or
                               time.perf_counter() - started < warm_s) and windows < 200 else 0.0)
            torch.distributed.broadcast(more, self.first, group=self.group)
            if not more.item():
                break
        latency, latency_ci = _windows(lambda: self._median_op(trials), repeat)
        return {"latency_s": latency, "latency_ci_s": [max(0.0, latency_ci[0]), latency_ci[1]],
                "small_bytes": self.small.nbytes, "trials": trials}

    def bandwidth(self, trials, repeat, warmups):
        for _ in range(max(1, warmups)):
            self._window(self.large, 1)
        seconds = _windows(lambda: self._window(self.large, max(2, trials // 5)), repeat)
        factor = FACTS["all_reduce"].busbw_factor(self.size)  # its bus bandwidth, (S/t)·2(n−1)/n
        busbw = _bandwidth(self.large.nbytes * factor, seconds)
        return {"busbw_Bps": busbw[0], "busbw_ci_Bps": busbw[1],
                "large_bytes": self.large.nbytes, "windows": repeat}
