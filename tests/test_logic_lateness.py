"""Who is late and when stalls come (commbench/bench/lateness.py), the clocks' alignment and the time
a process did not run (commbench/ranks/clocks.py), in-process on made-up trials: each witness, the
rule that joins them, the spikes' kinds, a period in time. The real stalls (SIGSTOP from
outside, one host and simulated hosts with shifted clocks) are in test_trials.py."""

import random

import pytest

from commbench.ranks import clocks
from commbench.bench import lateness, trials as encoding

pytestmark = pytest.mark.fast


def made(calls, in_call, stopped=None, durations=None):
    """Trials from calls[rank][trial] and in_call[rank][trial] (seconds, one clock)."""
    count = len(calls[0])
    first = [min(c[i] for c in calls) for i in range(count)]
    arrivals = [[c[i] - first[i] for i in range(count)] for c in calls]
    durations = durations or [[c[i] + d[i] - (c[i - 1] + d[i - 1] if i else 0.0)
                               for i in range(count)] for c, d in zip(calls, in_call)]
    return encoding.Trials(list(range(len(calls))), durations, arrivals, 0.0, "shared", first,
                           in_call, stopped)


def ring(count, ranks=3, base=1e-3, late=None, every=3, by=20e-3, rhythm=0.0):
    """calls and in_call of `count` trials of a collective that ends when its last rank calls
    plus `base`: rank `late` calls `by` late every `every`-th trial; with `rhythm`, rank r
    always calls r x rhythm after rank 0 and every call lasts the same (a staggered rhythm)."""
    calls, in_call = [[] for _ in range(ranks)], [[] for _ in range(ranks)]
    t = 0.0
    for i in range(count):
        came = [t + r * rhythm + (by if r == late and i % every == 0 else 0.0) for r in range(ranks)]
        for r in range(ranks):
            end = (came[r] + base + 2 * rhythm) if rhythm else max(came) + base
            calls[r].append(came[r])
            in_call[r].append(end - came[r])
        t = max(calls[r][-1] + in_call[r][-1] for r in range(ranks)) + 1e-5
    return calls, in_call


def test_a_rank_late_every_third_trial_is_named_by_both_clock_and_call_times():
    calls, in_call = ring(60, late=2)
    verdict = lateness.judge(made(calls, in_call), "all_reduce", [0.0] * 3)
    assert verdict.named == 2 and verdict.why == "clock and call time", verdict
    assert verdict.clock.counts[2] == 20 and verdict.clock.chance <= lateness.CHANCE


def test_a_staggered_rhythm_is_no_straggler():
    """Rank 2 always calls 2 ms after rank 0, every call as long: the clocks see it last in
    every trial, the call times see no one waiting: not borne out, none named."""
    calls, in_call = ring(60, rhythm=1e-3)
    verdict = lateness.judge(made(calls, in_call), "all_reduce", [0.0] * 3)
    assert verdict.clock.named == 2 and verdict.named is None and verdict.why == "unconfirmed"


def test_a_rooted_op_has_no_call_time_witness_and_the_clocks_decide():
    calls, in_call = ring(60, rhythm=1e-3)
    verdict = lateness.judge(made(calls, in_call), "broadcast", [0.0] * 3)
    assert verdict.call is None and verdict.named == 2 and verdict.why == "clock"


def test_leads_within_the_clocks_bound_count_for_nothing():
    calls, in_call = ring(60, late=1, by=0.3e-3, every=1)
    bounds = [0.2e-3] * 3  # pairs: 0.4 ms, over the 0.3 ms lead
    verdict = lateness.judge(made(calls, in_call), "all_reduce", bounds)
    assert verdict.clock.undecided == 60 and sum(verdict.clock.waiting) == 0
    assert lateness.judge(made(calls, in_call), "all_reduce", [0.1e-3] * 3).clock.counts[1] == 60


def test_witnesses_naming_different_ranks_name_none():
    clock = lateness.Witness("clock", [0, 0, 9], [0.0, 0.0, 1.0], named=2)
    call = lateness.Witness("call time", [9, 0, 0], [1.0, 0.0, 0.0], named=0)
    assert lateness._decide(clock, call).why == "disagree"
    assert lateness._decide(clock, call).named is None


def test_a_few_big_waits_on_one_rank_could_be_chance():
    """Two waits of 30 ms, both on rank 1 among 3 ranks: one chance in three; not named. Ten
    of them: named."""
    assert lateness.chance([(1, 0.03), (1, 0.03)], 3) > lateness.CHANCE
    assert lateness.chance([(1, 0.03)] * 10 + [(0, 0.001), (2, 0.001)], 3) <= lateness.CHANCE
    assert lateness.chance([(1, 0.03)] * 10, 3, seed=5) == lateness.chance([(1, 0.03)] * 10, 3,
                                                                           seed=5)


def test_a_stall_inside_the_call_is_told_by_the_time_not_run():
    """Every 6th trial every rank's call is 50 ms long (rank 3 was stopped inside it): no late
    call, and the time not run names rank 3; without that figure the spikes are a stall
    inside the call with every rank's call long."""
    count, ranks = 60, 4
    calls, in_call = ring(count, ranks=ranks)
    stopped = [[0.0] * count for _ in range(ranks)]
    for i in range(0, count, 6):
        for r in range(ranks):
            in_call[r][i] += 50e-3
        stopped[3][i] = 49e-3
    steady = 1e-3
    spiked = [i + 1 for i in range(count) if in_call[0][i] > 10e-3]
    verdict = lateness.judge(made(calls, in_call, stopped), "all_reduce", [0.0] * ranks, spiked,
                             steady)
    assert verdict.named == 3 and verdict.why == "not run", verdict
    assert {kind for kind, _, _ in verdict.spikes.values()} == {"stopped"}
    blind = lateness.judge(made(calls, in_call), "all_reduce", [0.0] * ranks, spiked, steady)
    assert blind.named is None and all(kind == "inside" and who == [0, 1, 2, 3]
                                       for kind, who, _ in blind.spikes.values()), blind.spikes


def test_a_period_in_time_is_found_and_random_spikes_have_none():
    rng = random.Random(1)
    samples, t = [], 0.0
    for _ in range(11):  # 11 sizes of 60 trials of 5-7 ms, 100 ms apart
        for _ in range(60):
            t += 0.005 + rng.random() * 0.002
            samples.append(t)
        t += 0.1
    events = []
    for k in range(int(t / 0.15) + 1):  # a stall every 150 ms: the trial it lands in
        hit = [x for x in samples if k * 0.15 <= x < k * 0.15 + 0.008]
        events += hit[:1]
    found, why = lateness.period_in_time(events, samples, 0.006)
    assert why is None and found.seconds == pytest.approx(0.15, rel=0.01), (found, why)
    assert found.p <= lateness.FALSE_ALARM and found.near >= 0.9 * found.events
    found, why = lateness.period_in_time(rng.sample(samples, len(events)), samples, 0.006)
    assert found is None and why.startswith("none found"), why
    assert lateness.period_in_time(events[:2], samples, 0.006)[1].startswith("2 spike events")


def test_consecutive_spikes_of_one_size_are_one_event():
    spikes = [(0, 4, 1.0, 0.01), (0, 5, 1.01, 0.02), (0, 9, 1.2, 0.05), (1, 10, 2.0, 0.01),
              (1, 11, 2.01, 0.01), (1, 20, 3.0, 0.001)]
    assert lateness.events_of(spikes) == [(1.01, 0.03), (1.2, 0.05), (2.0, 0.02)]  # 1 ms: jitter


def test_clock_alignment_puts_a_shifted_hosts_calls_on_rank_0s_clock():
    """Host b's clock reads 1.8e9 s + 37 ms ahead (a libfaketime host): the round trips found
    that within 0.1 ms, drifting by 10 us over the window; its rank's calls land on rank 0's
    clock where they were."""
    shift = 1.8e9 + 0.037
    before = clocks.Reading({"a": (0.0, 0.0, 100.0), "b": (shift, 50e-6, 100.0)})
    after = clocks.Reading({"a": (0.0, 0.0, 101.0), "b": (shift + 10e-6, 80e-6, 101.0)})
    aligned = clocks.alignment(before, after)
    assert aligned["b"][4] == 80e-6 and clocks.offset_at(aligned["b"], 100.5 + shift) == \
        pytest.approx(shift + 5e-6, abs=1e-7)

    class T:
        pass
    per_rank = []
    for start, late in ((100.0, 0.0), (100.0 + shift, 2e-3)):
        t = T()
        t.start, t.trials, t.stopped = start, [1e-3] * 3, None
        t.arrivals = [0.1, 0.2 + late, 0.3]
        t.in_call = [1e-3, 1e-3, 1e-3]
        per_rank.append(encoding.figures(t))
    entry = encoding.encode(per_rank, [0, 1], ["a", "b"], aligned)
    decoded = encoding.decode(entry)
    assert entry["clock"] == "measured" and entry["host_error_us"] == {"a": 0.0, "b": 80.0}
    assert entry["host_offset_s"]["b"] == shift and "stopped_us" not in entry
    # trial 2: 0.2 s into the window, the offset has drifted 2 us of its 10
    assert decoded.arrivals[1] == pytest.approx([0.0, 2e-3 - 2e-6, 0.0], abs=2e-7)
    assert decoded.arrivals[0] == pytest.approx([1e-6, 0.0, 3e-6], abs=2e-7)


def test_hiccups_sum_the_time_not_run_inside_each_window():
    meter = clocks.Hiccups()
    meter.gaps = [(1.0, 1.05), (1.2, 1.21), (2.0, 2.5)]
    assert meter.within([(0.0, 1.0), (0.99, 1.02), (1.02, 1.3), (1.9, 2.1), (2.1, 3.0)]) == \
        pytest.approx([0.0, 0.02, 0.04, 0.1, 0.4])
