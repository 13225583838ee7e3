"""The timing loop (SPEC §5): warmups, then trials back to back inside one timed window;
device events on accelerators, the host clock on CPU; per-trial marks and statistics with
--stats; the trial count with --time-budget."""

import contextlib
import functools
import math
import os
import statistics
import time
from dataclasses import dataclass

import torch
import torch.distributed

from ..numbers import t975
from ..ranks import clocks, whereabouts


class _HostMarks:
    """Host clock readings (CPU ranks), into a list allocated before the timed window."""

    def __init__(self, count, comm):
        self._t = [0.0] * count

    def done(self):
        """How many marks are taken (read by the hang guard's thread, not by the loop)."""
        low, high = 0, len(self._t)
        while low < high:  # marks fill in order: the first zero
            middle = (low + high) // 2
            if self._t[middle]:
                low = middle + 1
            else:
                high = middle
        return low

    def mark(self, i):
        self._t[i] = time.perf_counter()

    def between(self, i, j):
        return self._t[j] - self._t[i]


class _NoMarks:
    def mark(self, i):
        pass


class _EventMarks:
    """Device timing events (accelerators): marks on the stream, read after a sync."""

    def __init__(self, count, comm):
        if comm.accelerator is not None:
            make = functools.partial(comm.accelerator.Event, enable_timing=True)
        else:
            make = functools.partial(torch.Event, device=comm.device, enable_timing=True)
        self._events, self._comm, self._synced = [make() for _ in range(count)], comm, False

    def mark(self, i):
        self._events[i].record()
        self._synced = False

    def between(self, i, j):
        if not self._synced:
            self._comm.synchronize()
            self._synced = True
        return self._events[i].elapsed_time(self._events[j]) / 1e3


def _issue(call, count, async_op, delay=(0.0, 1)):
    """Issue the op `count` times back to back; with async_op, wait on every handle at the end.
    `delay` (a test hook: seconds, every) sleeps before every `every`-th trial, inside the
    window."""
    if delay[0]:
        _issue_marked(call, count, async_op, _NoMarks(), delay)
    elif async_op:
        works = [call() for _ in range(count)]
        for work in works:
            if work is not None:
                work.wait()
    else:
        for _ in range(count):
            call()


def _wait_for(seconds):
    """The test hook's delay: exact for short ones (a spin: sleep overshoots by a scheduler tick
    on a busy host), a sleep for long ones (a stuck rank)."""
    if seconds > 0.05:
        time.sleep(seconds)
        return
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _issue_marked(call, count, async_op, marks, delay):
    """As _issue, with marks around every trial (--stats): mark 2i-1 before trial i is called,
    mark 2i after it returns. With async_op a trial is its launch; the final waits belong to
    the last trial. `delay` (a test hook: seconds, every) sleeps before every `every`-th
    trial, outside the op."""
    works = []
    seconds, every = delay
    for i in range(1, count + 1):
        if seconds and i % every == 0:
            _wait_for(seconds)
        marks.mark(2 * i - 1)
        work = call()
        if async_op:
            works.append(work)
        marks.mark(2 * i)
    for work in works:
        if work is not None:
            work.wait()


@dataclass
class Timing:
    mean: float  # seconds of one trial: the timed window / trials (SPEC §5)
    count: int  # trials timed
    trials: list | None = None  # with --stats: seconds of each trial, end to end
    late: float = 0.0  # with --stats: mean seconds between a trial's end and the next call
    # with --per-trial or --stats: seconds from this rank's start of the timed window to each
    # trial's call; `start`: that start on this rank's clock (clocks.now()); `clocks`: on rank 0,
    # every host's offset to its clock, before and after the trials (clocks.alignment)
    arrivals: list | None = None
    start: float = 0.0
    clocks: dict | None = None
    in_call: list | None = None  # seconds from each trial's call to its return
    stopped: list | None = None  # --per-trial: seconds of each trial this process did not run


DELAY_VARIABLE = "COMMBENCH_INJECT_DELAY"


def _injected_delay(comm):
    """Test hook: COMMBENCH_INJECT_DELAY=rank:seconds[:every] makes that rank late for every
    trial (or every `every`-th: trials every, 2 every, ...). (seconds, every)."""
    target = os.environ.get(DELAY_VARIABLE, "")
    rank, _, rest = target.partition(":")
    seconds, _, every = rest.partition(":")
    if rank != str(comm.global_rank):
        return 0.0, 1
    return float(seconds), int(every or 1)


MIN_BUDGET_TRIALS = 5


def trial_count(args, comm, pace):
    """--trials, or with --time-budget the count that fills the budget at `pace` seconds a
    trial (at least 5, at most --trials). Rank 0 decides and every rank uses its number: ranks
    that disagreed on a loop count would leave one waiting in a collective forever."""
    if args.time_budget is None or args.precision is not None:
        return args.trials  # --precision: the budget is the run's, and windows are --trials long
    budget = args.time_budget / args.repeat  # the budget covers every window
    wanted = budget / pace if pace > 0 else args.trials
    count = torch.tensor([max(MIN_BUDGET_TRIALS, min(args.trials, int(wanted)))],
                         dtype=torch.int64, device=comm.device)
    torch.distributed.broadcast(count, 0)
    return int(count.item())


def _paced_warmups(call, count, async_op, comm):
    """Issue the warmups one at a time, each waited for, and return the median seconds of one:
    the pace --time-budget plans with. A median, because on a shared host one warmup in a few
    meets a descheduled rank and takes 10x the others; a mean would halve the trials."""
    seconds = []
    for _ in range(count):
        started = time.perf_counter()
        work = call()
        if async_op and work is not None:
            work.wait()
        comm.synchronize()
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds)


def time_op(call, args, comm):
    """Time the trials on this rank (trial_count of them), after `args.warmups` untimed ones."""
    where = whereabouts.of(comm)
    if where is not None:
        where.at("warmups")
    comm.sync_all()
    pace = 0.0
    if args.time_budget is not None and args.precision is None:
        # it needs a pace even without warmups: one call then
        pace = _paced_warmups(call, args.warmups or 1, args.async_op, comm)
    else:
        _issue(call, args.warmups, args.async_op)
    if where is not None:
        where.at("trials")  # before the barrier: the store's round trip does not skew the start
    comm.sync_all()
    count = trial_count(args, comm, pace)
    per_trial = args.per_trial
    marked = args.stats or per_trial
    marks = (_EventMarks if comm.on_accelerator else _HostMarks)(2 * count + 1 if marked else 2,
                                                                 comm)
    if where is not None and marked:
        where.marks = marks  # read by the deadline's thread only
    if marked:  # arrivals on rank 0's clock: each host's offset to it, before the trials
        before = clocks.measure(comm)
        comm.sync_all()
    hiccups = clocks.Hiccups() if per_trial else contextlib.nullcontext()
    with hiccups:
        marks.mark(0)
        if marked:
            start = clocks.now()
            _issue_marked(call, count, args.async_op, marks, _injected_delay(comm))
            marks.mark(2 * count)  # after the waits of async ops
    if marked:
        trials = [marks.between(2 * i - 2, 2 * i) for i in range(1, count + 1)]
        late = sum(marks.between(2 * i - 2, 2 * i - 1) for i in range(1, count + 1)) / count
        arrivals = [marks.between(0, 2 * i - 1) for i in range(1, count + 1)]
        in_call = [marks.between(2 * i - 1, 2 * i) for i in range(1, count + 1)]
        if where is not None:
            where.at("after trials")
        aligned = clocks.alignment(before, clocks.measure(comm))  # and after them (drift)
        stopped = None
        if per_trial:  # the time this process did not run in each trial, end to end
            ends = [start + marks.between(0, 2 * i) for i in range(count + 1)]
            stopped = hiccups.within(list(zip(ends, ends[1:])))
        return Timing(marks.between(0, 2 * count) / count, count, trials, late, arrivals,
                      start, aligned, in_call, stopped)
    _issue(call, count, args.async_op, _injected_delay(comm))
    marks.mark(1)
    if where is not None:
        where.at("after trials")
    return Timing(marks.between(0, 1) / count, count)


def window(fn, count, comm):
    """Seconds of one fn() on this rank: `count` calls back to back between two marks, from a
    point where every rank is idle and in step (--overlap's windows)."""
    comm.sync_all()
    marks = (_EventMarks if comm.on_accelerator else _HostMarks)(2, comm)
    marks.mark(0)
    for _ in range(count):
        fn()
    marks.mark(1)
    return marks.between(0, 1) / count


def interval(windows, counts):
    """(mean, low, high) seconds a trial over windows of `counts` trials each: the mean of all
    trials, and the 95% t-interval of it from the spread between the windows (the unit of
    repetition: trials within a window are not independent of each other)."""
    total = sum(counts)
    mean = sum(w * c for w, c in zip(windows, counts)) / total
    r = len(windows)
    if r < 2:
        return mean, mean, mean
    plain = sum(windows) / r
    sd = math.sqrt(sum((w - plain) ** 2 for w in windows) / (r - 1))
    half = t975(r - 1) * sd / math.sqrt(r)
    return mean, mean - half, mean + half


def odd_window(windows):
    """A window far outside the others' spread, as a sentence, or None: more than 1.5x the
    median of the others and beyond 5 robust deviations of them (hyperfine warns likewise)."""
    if len(windows) < 3:
        return None
    for i, w in enumerate(windows):
        others = sorted(windows[:i] + windows[i + 1:])
        middle = percentile(others, 50)
        spread = 1.4826 * percentile(sorted(abs(o - middle) for o in others), 50)
        if middle > 0 and w > 1.5 * middle and w > middle + 5 * spread:
            what = "the first window" if i == 0 else f"window {i + 1} of {len(windows)}"
            why = ("warm-up not done: raise --warmups" if i == 0 else
                   "a descheduled rank or a busy neighbour")
            return f"{what} took {w / middle:.1f}x the median of the others ({why})"
    return None


def percentile(ordered, q):
    """The q-th percentile of an ascending list, interpolated linearly between neighbours."""
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


STATS = ("min_s", "median_s", "p99_s", "max_s", "cv")


def summarize(durations):
    """min, median, p99, max and coefficient of variation of one rank's trial durations."""
    ordered = sorted(durations)
    mean = sum(ordered) / len(ordered)
    spread = math.sqrt(sum((d - mean) ** 2 for d in ordered) / len(ordered))
    figures = (ordered[0], percentile(ordered, 50), percentile(ordered, 99), ordered[-1],
               spread / mean if mean > 0 else 0.0)
    return dict(zip(STATS, figures))
