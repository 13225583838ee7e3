"""Who is late, and when the stalls come: the one rule behind every verdict that calls a rank
late or slowest (report.py trials, its HTML section, replay's --per-trial, --stats' slowest
rank), and the test for a period in time. Pure figures: no torch, no ranks.

Three witnesses, each counted per trial (commbench/bench/trials.py's figures, on rank 0's clock):

  clock      the rank that called last, and by how much after the next latest call (the lead:
             the least that any other rank waited for it). A lead counts only when it is larger
             than the clocks' bound for that pair of ranks (the two hosts' bounds added: 0 on
             one host, whose ranks read one clock); the others are "within the clocks' error".
  call time  needs no clock: in a collective where every rank waits for every other (all_reduce,
             all_gather, reduce_scatter, all_to_all(v), barrier, a replay's pass), the rank that
             calls last spends the least time in the call, and the others wait for it: the rank
             with the shortest call, and the shortest of the others' calls less its own (the
             least that any other waited for it: a rank stalled inside its own call does not
             make another look late). Not for rooted ops and pt2pt, whose root or sender may
             leave early by design.
  not run    needs no other clock either: each rank's process notes the time it did not run
             (clocks.Hiccups: stopped, descheduled, paused), so a stall that lands inside a
             collective, where every rank's call is long, still has an author: per trial, the
             rank that did not run the longest, by how much longer than the next one (--per-trial
             runs of this version; no figure in --stats or a replay).

Each witness names a rank when that rank caused more than half of the waiting it counted, that
waiting is at least MATERIAL of the trials' time (a rank last by a fraction of a millisecond in
most trials of a quiet run slows no one that matters), and chance would not put so much on one
rank: drawing each counted trial's rank at random, DRAWS times, puts as much on one rank in at
most CHANCE of the draws. The evidence so tested is the run's (every size's of the same ranks
pooled, in report.py trials: a real straggler is late in size after size, a quiet run's chance
concentrations are not), or the one size's (--stats, whose rows print as they are measured).

The verdict names a straggler when a witness names it and no witness names another (two
witnesses naming different ranks: none, and it says so); and the clocks alone do not name one
that the call times, where they can judge, do not bear out (the waiting they count for it at
least half the clocks'): on 2 busy cores 3 ranks fall into a staggered rhythm, each calling a
few ms after the next and each as long in the call, so the clocks see one rank always last
while no one waited for it.

A spike (a trial over FACTOR x the steady median) is a late call when a rank came late by at
least half the spike's excess (by the clocks or the call times), a rank not running when one
did not run for that long, and otherwise a stall inside the call, with the ranks whose calls
were long.
"""

import math
import random
import statistics
from dataclasses import dataclass, field

MATERIAL = 0.10  # a witness's waiting, at least this share of the trials' time
SYMMETRIC = frozenset({"all_reduce", "all_gather", "reduce_scatter", "all_to_all",
                       "all_to_allv", "barrier"})


def symmetric(op):
    """Whether the call-time witness holds for `op` (a replay's pass holds: its opening barrier
    waits for every rank)."""
    name = str(op or "")
    return name in SYMMETRIC or name.startswith("replay")


@dataclass
class Witness:
    """One witness's count: per rank index, trials it was named in and the waiting it caused."""
    name: str
    counts: list
    waiting: list
    undecided: int = 0  # trials whose lead was within the clocks' bound
    named: int | None = None  # rank index
    share: float = 0.0  # the top rank's waiting / the trials' time
    events: list = field(default_factory=list)  # (rank index, seconds) of each counted trial
    chance: float | None = None  # the top rank's concentration, by chance (p-value)

    def top(self):
        return max(range(len(self.waiting)), key=lambda r: self.waiting[r])


@dataclass
class Verdict:
    named: int | None  # rank index, or None
    why: str  # how it was named, or why none was
    clock: Witness = None
    call: Witness | None = None  # None: not applicable or not recorded
    stopped: Witness | None = None  # None: not recorded
    # trial (1-based) -> ("late", rank index, s), ("stopped", rank index, s not run) or
    # ("inside", [rank indexes with long calls], s)
    spikes: dict = field(default_factory=dict)


def _others(values, skip):
    return values[:skip] + values[skip + 1:]


def _lead(calls, bounds):
    """(last rank, its lead over the next latest call, the pair's clock bound)."""
    last = max(range(len(calls)), key=lambda r: calls[r])
    rest = _others(calls, last)
    if not rest:
        return last, 0.0, 0.0
    second = max(range(len(calls)), key=lambda r: calls[r] if r != last else float("-inf"))
    return last, calls[last] - calls[second], bounds[last] + bounds[second]


def _waited(spent):
    """(shortest call's rank, the least another rank's call exceeded it)."""
    short = min(range(len(spent)), key=lambda r: spent[r])
    rest = _others(spent, short)
    return short, (min(rest) - spent[short]) if rest else 0.0


DRAWS = 199  # chance(): a p-value of 0.01 is at most one draw of 199 at or above the data
CHANCE = 0.01


def chance(events, ranks, seed=0):
    """The p-value of the largest rank's sum of `events` ([(rank, seconds)]) if each event's
    rank were drawn at random (every rank alike): how often DRAWS such draws put as much on one
    rank. Seeded: the same figures give the same answer."""
    if not events:
        return 1.0
    sums = [0.0] * ranks
    for rank, seconds in events:
        sums[rank] += seconds
    seen = max(sums) * (1 - 1e-9)
    rng = random.Random(seed)
    amounts = [seconds for _, seconds in events]
    above = 0
    for _ in range(DRAWS):
        drawn = [0.0] * ranks
        for seconds in amounts:
            drawn[rng.randrange(ranks)] += seconds
        above += max(drawn) >= seen
    return (1 + above) / (1 + DRAWS)


def _name(witness, total, pooled=None):
    """Sets witness.named, .share and .chance by the rule in the docstring. pooled: (rank, p)
    of this witness over the whole run (pooled()); None: this size alone is the run."""
    spent = sum(witness.waiting)
    if len(witness.waiting) < 2 or spent <= 0 or total <= 0:
        return witness
    top = witness.top()
    witness.share = witness.waiting[top] / total
    if witness.waiting[top] > spent / 2 and witness.share >= MATERIAL:
        if pooled is None:
            witness.chance = chance(witness.events, len(witness.waiting))
        else:
            witness.chance = pooled[1] if pooled[0] == top else 1.0
        if witness.chance <= CHANCE:
            witness.named = top
    return witness


def pooled(sizes):
    """{witness name: (rank index, p)} over several sizes of one set of ranks: each witness's
    events of every size together, the rank with the most of them and the chance of so much
    on one rank. sizes: a list of Witnesses tuples (witnesses())."""
    events, ranks = {}, 0
    for found in sizes:
        for w in found:
            if w is not None:
                events.setdefault(w.name, []).extend(w.events)
                ranks = len(w.waiting)
    out = {}
    for name, seen in events.items():
        sums = [0.0] * ranks
        for rank, seconds in seen:
            sums[rank] += seconds
        top = max(range(ranks), key=lambda r: sums[r]) if ranks else 0
        out[name] = (top, chance(seen, ranks))
    return out


def clock_witness(arrivals, bounds):
    """arrivals[rank][trial] (any common origin per trial), bounds[rank] (s)."""
    n = len(arrivals)
    w = Witness("clock", [0] * n, [0.0] * n)
    for i in range(len(arrivals[0])):
        last, lead, bound = _lead([a[i] for a in arrivals], bounds)
        if lead <= bound:
            w.undecided += 1
            continue
        w.counts[last] += 1
        w.waiting[last] += lead
        w.events.append((last, lead))
    return w


def call_witness(in_call):
    """in_call[rank][trial]: time from the call to its return."""
    n = len(in_call)
    w = Witness("call time", [0] * n, [0.0] * n)
    for i in range(len(in_call[0])):
        short, waited = _waited([c[i] for c in in_call])
        w.counts[short] += 1
        w.waiting[short] += max(0.0, waited)
        if waited > 0:
            w.events.append((short, waited))
    return w


def stopped_witness(stopped):
    """stopped[rank][trial]: the time its process did not run."""
    n = len(stopped)
    w = Witness("not run", [0] * n, [0.0] * n)
    for i in range(len(stopped[0])):
        top, beyond = _longest([s[i] for s in stopped])
        if beyond > 0:
            w.counts[top] += 1
            w.waiting[top] += beyond
            w.events.append((top, beyond))
    return w


def _longest(values):
    """(the rank with the largest figure, by how much over the next largest)."""
    top = max(range(len(values)), key=lambda r: values[r])
    rest = _others(values, top)
    return top, values[top] - (max(rest) if rest else 0.0)


def witnesses(trials, op, bounds):
    """(clock, call time, not run) Witnesses of one size's Trials, counted, none named yet;
    None where a witness cannot judge (call time: rooted ops, pt2pt; not run: not recorded)."""
    n = len(trials.ranks)
    clock = clock_witness(trials.arrivals, bounds)
    call = call_witness(trials.in_call) \
        if trials.in_call is not None and symmetric(op) and n > 1 else None
    stopped = stopped_witness(trials.stopped) \
        if trials.stopped is not None and n > 1 else None
    return clock, call, stopped


def judge(trials, op, bounds, spiked=(), steady=0.0, pool=None):
    """The Verdict for one size's Trials (commbench.bench.trials), `bounds` per rank index (s);
    `spiked`: its spike trials (1-based) and the steady median, to tell a late call from a
    stall inside the call; `pool`: pooled() over the run's sizes (None: this size alone is
    the evidence, as for --stats, whose rows are printed as they are measured)."""
    n = len(trials.ranks)
    times = [max(d[i] for d in trials.durations) for i in range(trials.count)]
    total = sum(times)
    clock, call, stopped = witnesses(trials, op, bounds)
    for w in (clock, call, stopped):
        if w is not None:
            _name(w, total, None if pool is None else pool.get(w.name, (None, 1.0)))
    if n < 2:
        verdict = Verdict(None, "one rank: no arrivals to compare", clock, call)
    else:
        verdict = _decide(clock, call, stopped)
    verdict.stopped = stopped
    verdict.spikes = _spikes(trials, bounds, spiked, steady, times)
    return verdict


def _decide(clock, call, stopped=None):
    """The Verdict from the witnesses (the rule in the docstring); `why`: "disagree",
    "unconfirmed" (the clocks alone, not borne out by the call times), "none", or the names of
    the witnesses that named it, joined by " and "."""
    witnesses = [w for w in (clock, call, stopped) if w is not None]
    named = {w.named for w in witnesses if w.named is not None}
    if len(named) > 1:
        return Verdict(None, "disagree", clock, call)
    if not named:
        return Verdict(None, "none", clock, call)
    rank = named.pop()
    by = [w.name for w in witnesses if w.named == rank]
    if by == ["clock"] and call is not None and \
            call.waiting[rank] < clock.waiting[rank] / 2:
        return Verdict(None, "unconfirmed", clock, call)
    return Verdict(rank, " and ".join(by), clock, call)


def _spikes(trials, bounds, spiked, steady, times):
    out = {}
    n = len(trials.ranks)
    usual = [statistics.median(row) for row in trials.in_call] if trials.in_call else None
    for t in spiked:
        i = t - 1
        excess = times[i] - steady
        last, lead, bound = _lead([a[i] for a in trials.arrivals], bounds)
        if n > 1 and lead > bound and lead >= excess / 2:
            out[t] = ("late", last, lead)
            continue
        if trials.in_call is not None and n > 1:
            short, waited = _waited([c[i] for c in trials.in_call])
            if waited >= excess / 2 and waited > 0:
                out[t] = ("late", short, waited)
                continue
        if trials.stopped is not None and n > 1:
            top, beyond = _longest([s[i] for s in trials.stopped])
            if beyond >= excess / 2 and beyond > 0:
                out[t] = ("stopped", top, trials.stopped[top][i])
                continue
        long = [r for r in range(n) if usual is not None and
                trials.in_call[r][i] > usual[r] + excess / 2]
        out[t] = ("inside", long, excess)
    return out


# ---- a period in time -------------------------------------------------------------------
SHUFFLES = 199  # the null's draws: p <= 0.01 is at most one draw of 199 at or above the data
FALSE_ALARM = 0.01
LOWEST = 0.01  # s: the shortest period tried (and at least 2 trials' time)
STALL = 0.005  # s: an event's excess over the steady median, at least (a stall, not jitter)


@dataclass
class Period:
    seconds: float
    events: int  # spike events tested (runs of consecutive spike trials, one event each)
    near: int  # events within a tenth of a period of the comb
    p: float  # the shuffles' p-value
    low: float  # the periods tried, s
    high: float


def events_of(spike_ends):
    """Spike trials -> events: [(size key, trial, end time, excess s)] -> [(time, weight)]
    sorted, a run of consecutive trials of one size one event: the time of its largest spike
    (a stall's own trial, not a small one beside it), the run's excess over the steady median
    its weight; only events of STALL or more (what the OS, a daemon or a collector stops a
    process for; a short trial's jitter makes many smaller spikes, at no period)."""
    runs, previous = [], None
    for key, trial, end, excess in sorted(spike_ends):
        if previous is not None and previous[0] == key and previous[1] == trial - 1:
            runs[-1].append((end, excess))
        else:
            runs.append([(end, excess)])
        previous = (key, trial)
    events = [(max(run, key=lambda spike: spike[1])[0], sum(e for _, e in run)) for run in runs]
    return [(t, excess) for t, excess in events if excess >= STALL]


def _fundamental(grid, seen, best, numpy):
    """The fundamental frequency near the strongest one (grid[best]): a stall's start and end
    both make spikes, so a harmonic can outweigh it. Each f/n (n = 8 .. 2) is tested at its own
    frequency, not searched for: its power is beyond chance when above -ln(FALSE_ALARM / 7) (a
    Rayleigh power is exponential under the null; 7 of them tried); the longest such period,
    the grid's local peak near it."""
    bar = -math.log(FALSE_ALARM / 7)
    for n in range(8, 1, -1):
        if grid[best] / n < grid[0]:
            continue
        k = int(numpy.abs(grid - grid[best] / n).argmin())
        near = slice(max(0, k - 3), k + 4)
        k = near.start + int(seen[near].argmax())
        if seen[k] > bar:
            return grid[k]
    return grid[best]


def period_in_time(events, samples, trial_time, seed=0):
    """The period of spike events in seconds (a Period), or (None, why). events: [(time,
    weight)] (events_of; a bare time weighs 1); samples: every trial's end time (where a spike
    could have been); trial_time: the median trial (no period under 2 of them). The test: the
    largest Rayleigh power of the events' phases, each weighted by its excess (a 50 ms stall
    counts for more than a 3 ms blip), over periods from max(LOWEST, 2 trials) to a third of
    the span, held against the same largest power of the same weights on as many trials drawn
    at random from `samples`, SHUFFLES times (seeded: the same file gives the same answer); a
    period only when p <= FALSE_ALARM."""
    try:
        import numpy
    except ImportError:
        return None, "needs numpy (pip install numpy)"
    if len(events) < 3:
        return None, f"{len(events)} spike event{'s' if len(events) != 1 else ''}, fewer than 3"
    times = numpy.asarray(sorted(samples), dtype=float)
    span = times[-1] - times[0]
    low, high = max(LOWEST, 2 * trial_time), span / 3
    if high <= low:
        return None, "the run is too short for 3 periods"
    step = 1 / (4 * span)
    grid = numpy.arange(1 / high, 1 / low + step, step)
    if len(grid) > 20000:  # a long run of short trials: the grid's cost bounded
        grid = numpy.linspace(1 / high, 1 / low, 20000)

    events = [e if isinstance(e, tuple) else (e, 1.0) for e in events]
    weights = numpy.asarray([w for _, w in events], dtype=float)
    weights = weights / weights.sum() if weights.sum() > 0 else numpy.ones(len(events))
    scale = 1 / (weights ** 2).sum()

    def powers(t):
        t = numpy.asarray(t, dtype=float) - times[0]
        phase = 2 * math.pi * numpy.outer(grid, t)
        return ((numpy.cos(phase) @ weights) ** 2 + (numpy.sin(phase) @ weights) ** 2) * scale
    seen = powers([t for t, _ in events])
    best = int(seen.argmax())
    rng = random.Random(seed)
    null = [powers(rng.sample(list(times), len(events))).max() for _ in range(SHUFFLES)]
    above = sum(1 for power in null if power >= seen[best])
    p = (1 + above) / (1 + SHUFFLES)
    if p > FALSE_ALARM:
        return None, f"none found (p={p:.2f}, over {SHUFFLES} shuffles)"
    period = 1 / _fundamental(grid, seen, best, numpy)
    phases = [((e - times[0]) / period) % 1 for e, _ in events]
    centre = math.atan2(sum(math.sin(2 * math.pi * x) for x in phases),
                        sum(math.cos(2 * math.pi * x) for x in phases)) / (2 * math.pi) % 1
    near = sum(1 for x in phases if min(abs(x - centre), 1 - abs(x - centre)) <= 0.1)
    return Period(float(period), len(events), near, p, float(low), float(high)), None
