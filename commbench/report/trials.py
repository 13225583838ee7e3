"""`report.py trials RUN`: what a run of --per-trial says trial by trial, per op and size.

  first     the first timed trial against the steady median (the median of trials 2..T)
  spikes    trials over FACTOR x the steady median (default 2), each a late call (by which
            rank) or a stall inside the call (which ranks' calls were long), by
            commbench/bench/lateness.py's witnesses; and their period in trials: the spacing p (2 to
            T/3 trials) of a comb k, k+p, k+2p, ... of which at least 60% are spikes, at least 3
            of them, and so many that chance would put them there with probability below 1% (the
            binomial tail at the share of spikes off the comb, times the number of combs tried);
            the most spikes on the comb first, then the shortest p; in milliseconds, the median
            time between its spikes. Fewer than 3 spikes, or no comb that fits: no period.
  stragglers the two witnesses of commbench/bench/lateness.py: the rank last to call each trial by
            more than the clocks' error, and the rank with the shortest call; the straggler is
            named by their rule (more than half of a witness's waiting and at least 10% of the
            trials' time; two witnesses naming different ranks name none)
  drift     the least-squares slope of the trial time over trials 2..T, spikes left out, with
            its 95% interval: drift only when the interval leaves out 0

A trial's time is the slowest rank's, end to end (each rank's trial runs from the end of the one
before to its own end). Arrivals are on rank 0's clock (commbench/ranks/clocks.py): one clock on one
host, measured offsets across hosts, the bound printed with each size. After the sizes, the
period in time of every size's spikes on that one time line (lateness.period_in_time).
Here the figures (analyse) and the plot; trials_text.py words them (render).
"""

import math
import statistics

from ..bench import lateness, trials
from ..records import results
from .. import units
from ..numbers import t975
from .runs import ReportError

MIN_SPIKES = 3
COMB_SHARE = 0.6
CHANCE = 0.01  # family-wise: the chance of a comb so full with spikes that come at random


def load(path):
    """The records of RUN that carry per-trial data, each with its decoded figures."""
    try:
        meta, records = results.read_all(path)  # the measured sizes, and replay.py's summary
    except (OSError, ValueError, KeyError, TypeError) as error:
        first = str(error).splitlines()[0] if str(error) else error
        raise ReportError(f"cannot read {path}: {first}") from None
    found = []
    for record in records:
        if not isinstance(record, dict) or "per_trial" not in record:
            continue
        if record.get("type") == "replay_summary":  # replay.py --per-trial: a trial is a pass
            record = {**record, "op": "replay (a trial is a pass)", "size_bytes": None}
        try:
            decoded = trials.decode(record["per_trial"])
        except ValueError as problem:
            raise ReportError(f"{path}: {record.get('op')} at {record.get('size_bytes')} bytes: "
                              f"per-trial data unreadable: {problem}") from None
        found.append((record, decoded))
    if not found and str(path).endswith(".csv"):
        raise ReportError(f"{path}: a .csv results file does not keep per-trial data: run with "
                          "--per-trial --output RUN.jsonl (or .json)")
    if not found:
        raise ReportError(f"{path} holds no per-trial data: run the op with --per-trial "
                          "(and --output)")
    return meta, found


def spikes(times, factor):
    """(steady median, the 1-based trials over factor x it, among trials 2..T)."""
    steady = statistics.median(times[1:]) if len(times) > 1 else times[0]
    return steady, [i + 1 for i, t in enumerate(times) if i > 0 and t > factor * steady]


def period(spiked, count):
    """(p, phase, hits) of the comb that fits the spikes (the docstring's rule), or None."""
    if len(spiked) < MIN_SPIKES:
        return None
    best = None
    on = set(spiked)
    combs = sum(range(2, count // 3 + 1))
    for p in range(2, count // 3 + 1):
        for phase in range(p):
            comb = [i for i in range(phase if phase else p, count + 1, p) if i >= 2]
            hits = sum(1 for i in comb if i in on)
            if hits < MIN_SPIKES or hits < COMB_SHARE * len(comb):
                continue
            off = max((len(spiked) - hits) / max(1, count - 1 - len(comb)), 1 / count)
            if _tail(len(comb), hits, min(off, 1.0)) * combs < CHANCE:
                if best is None or hits > best[2]:
                    best = (p, phase, hits)
    return best


def _tail(n, k, q):
    """P(at least k of n) for a binomial of rate q."""
    return sum(math.comb(n, j) * q ** j * (1 - q) ** (n - j) for j in range(k, n + 1))


def period_seconds(times, p, phase, spiked):
    """The median time between consecutive spikes on the comb (end to end)."""
    ends, total = {}, 0.0
    for i, t in enumerate(times, start=1):
        total += t
        ends[i] = total
    on = [i for i in spiked if i % p == phase % p]
    gaps = [ends[b] - ends[a] for a, b in zip(on, on[1:]) if b - a == p]
    return statistics.median(gaps) if gaps else None


def drift(times, spiked):
    """(slope s a trial, low, high) over trials 2..T without the spikes, or None (< 4 trials)."""
    points = [(i, t) for i, t in enumerate(times, start=1) if i > 1 and i not in set(spiked)]
    n = len(points)
    if n < 4:
        return None
    mx = sum(i for i, _ in points) / n
    my = sum(t for _, t in points) / n
    sxx = sum((i - mx) ** 2 for i, _ in points)
    slope = sum((i - mx) * (t - my) for i, t in points) / sxx
    residual = sum((t - my - slope * (i - mx)) ** 2 for i, t in points) / (n - 2)
    half = t975(n - 2) * math.sqrt(residual / sxx)
    return slope, slope - half, slope + half


def analyse(path, factor=2.0):
    """One dict per op and size: the figures of the four parts (and what the run-level period
    in time needs: each spike's end and every trial's end, on rank 0's clock)."""
    meta, found = load(path)
    hosts = meta.get("hostnames") or []
    cpus = (meta.get("processor") or {}).get("cpus")

    def bounds_of(t):
        return [t.host_errors.get(hosts[r] if r < len(hosts) else "?", t.error) for r in t.ranks]
    pools: dict = {}  # the evidence of every size of the same ranks (and op kind) together
    for record, t in found:
        key = (tuple(t.ranks), lateness.symmetric(record.get("op")))
        pools.setdefault(key, []).append(lateness.witnesses(t, record.get("op"), bounds_of(t)))
    pools = {key: lateness.pooled(sizes) for key, sizes in pools.items()}
    sizes = []
    for record, t in found:
        ranks = t.ranks
        times = [max(d[i] for d in t.durations) for i in range(t.count)]
        steady, spiked = spikes(times, factor)
        comb = period(spiked, len(times))
        named_hosts = [hosts[r] if r < len(hosts) else "?" for r in ranks]
        bounds = bounds_of(t)
        verdict = lateness.judge(t, record.get("op"), bounds, spiked, steady,
                                 pools[(tuple(ranks), lateness.symmetric(record.get("op")))])
        clock = verdict.clock
        order = sorted(range(len(ranks)), key=lambda r: clock.waiting[r], reverse=True)
        ends = t.ends()
        trial_ends = None if ends is None or t.origin is None else \
            [t.origin + max(e[i] for e in ends) for i in range(t.count)]
        sizes.append({
            "op": record.get("op"), "size_bytes": record.get("size_bytes"),
            "group": record.get("group"), "trials": len(times), "ranks": ranks,
            "hosts": named_hosts, "clock": t.clock, "clock_error_s": t.error,
            "host_errors": t.host_errors, "first_s": times[0], "steady_s": steady,
            "factor": factor, "spikes": spiked,
            "period": None if comb is None else {
                "trials": comb[0], "first": comb[1] or comb[0], "on_comb": comb[2],
                "seconds": period_seconds(times, comb[0], comb[1], spiked)},
            "stragglers": [{"rank": ranks[r], "last": clock.counts[r],
                            "total_late_s": clock.waiting[r]} for r in order],
            "undecided": clock.undecided,
            "by_call": _rows(verdict.call, ranks, "shortest"),
            "straggler": None if verdict.named is None else ranks[verdict.named],
            "how": verdict.why,
            "by_stopped": _rows(verdict.stopped, ranks, "longest"),
            "witnesses": {w.name: (None if w.named is None else ranks[w.named], w.share)
                          for w in (verdict.clock, verdict.call, verdict.stopped)
                          if w is not None},
            "chances": {w.name: w.chance for w in (verdict.clock, verdict.call, verdict.stopped)
                        if w is not None},
            "spike_kinds": {i: (kind, [ranks[r] for r in who] if kind == "inside" else ranks[who],
                                seconds) for i, (kind, who, seconds) in verdict.spikes.items()},
            "trial_ends": trial_ends, "cpus": cpus,
            "drift": drift(times, spiked), "times": times, "durations": t.durations})
    return sizes


def _rows(witness, ranks, count):
    """A witness's ranks, the most waiting first: [{"rank", count: trials, "caused_s"}], or
    None where it could not judge."""
    if witness is None:
        return None
    order = sorted(range(len(ranks)), key=lambda r: witness.waiting[r], reverse=True)
    return [{"rank": ranks[r], count: witness.counts[r], "caused_s": witness.waiting[r]}
            for r in order]


def run_period(sizes):
    """The period in time of every size's spikes on one time line (rank 0's clock): (Period,
    None) or (None, why)."""
    usable = [s for s in sizes if s["trial_ends"] is not None]
    if not usable:
        return None, "not recorded (a file of an earlier version: no clock alignment)"
    spiked, samples = [], []
    for key, s in enumerate(usable):
        samples += s["trial_ends"]
        spiked += [(key, i, s["trial_ends"][i - 1], s["times"][i - 1] - s["steady_s"])
                   for i in s["spikes"]]
    trial = statistics.median(t for s in usable for t in s["times"])
    return lateness.period_in_time(lateness.events_of(spiked), samples, trial)


def plot(sizes, output):
    """Trial time against trial number, one line per rank, a panel per op and size."""
    from .plot import pyplot, save
    plt = pyplot()
    shown = sizes[:12]
    figure, axes = plt.subplots(len(shown), 1, figsize=(8, 2.6 * len(shown)), squeeze=False)
    for ax, s in zip(axes[:, 0], shown):
        for rank, durations in zip(s["ranks"], s["durations"]):
            ax.plot(range(1, len(durations) + 1), [d * 1e3 for d in durations],
                    label=f"rank {rank}", linewidth=0.8)
        size = f" {units.size(s['size_bytes'])}" if s["size_bytes"] is not None else ""
        ax.set_title(f"{s['op']}{size}", fontsize=9)
        ax.set_xlabel("trial")
        ax.set_ylabel("ms")
        ax.legend(fontsize=7)
    figure.tight_layout()
    save(figure, output)
    plt.close(figure)
    return len(shown)
