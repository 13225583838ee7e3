"""--precision's and --repeat's logic in-process (commbench/bench/precision.py) and the statistics
under it (commbench/bench/timing.py, numbers.t975): intervals, the budget's shares on a clock the
test moves, the passes a schedule makes from windows the test feeds it. No ranks: the one
broadcast of a schedule's decision, from rank 0 to itself, is left out."""

import math
from types import SimpleNamespace

import pytest

from commbench import numbers
from commbench.bench import precision, timing
from commbench.ranks.comm import Run
from commbench.settings import Settings

pytestmark = pytest.mark.fast


class Clock:
    """time.monotonic for precision.py, moved by the test."""

    def __init__(self):
        self.now = 1000.0

    def monotonic(self):
        return self.now


@pytest.fixture
def clock(monkeypatch):
    fake = Clock()
    monkeypatch.setattr(precision, "time", fake)
    return fake


# --------------------------------------------------------------------------- statistics

def test_t975_is_students_table_then_the_normal_quantile():
    assert numbers.t975(1) == 12.706 and numbers.t975(4) == 2.776 and numbers.t975(30) == 2.042
    assert numbers.t975(31) == 1.96 and numbers.t975(1e9) == 1.96
    assert numbers.t975(4.9) == 2.776  # rounded down: the wider interval
    assert numbers.t975(0) == 12.706  # never fewer than 1 degree of freedom


def test_interval_weights_the_mean_by_trials_and_spreads_by_windows():
    # windows 0.9, 1.0, 1.1 s of 10 trials each: mean 1.0, sd 0.1, t(2) = 4.303
    mean, low, high = timing.interval([0.9, 1.0, 1.1], [10, 10, 10])
    half = 4.303 * 0.1 / math.sqrt(3)
    assert mean == pytest.approx(1.0) and low == pytest.approx(1 - half)
    assert high == pytest.approx(1 + half)
    # unequal trial counts: the mean of all trials, (1 x 30 + 2 x 10) / 40
    assert timing.interval([1.0, 2.0], [30, 10])[0] == pytest.approx(1.25)
    assert timing.interval([2.0], [5]) == (2.0, 2.0, 2.0)  # one window: no interval


def test_half_width_is_relative_and_needs_two_windows():
    assert precision.half_width([0.9, 1.0, 1.1], [1, 1, 1]) == pytest.approx(
        4.303 * 0.1 / math.sqrt(3))  # mean 1.0: relative = absolute
    assert precision.half_width([2.0, 2.0, 2.0], [3, 3, 3]) == 0
    assert precision.half_width([1.0], [1]) is None
    assert precision.half_width([0.0, 0.0], [1, 1]) is None  # a mean of 0


def test_percentile_interpolates_between_neighbours():
    ordered = [1.0, 2.0, 3.0, 4.0, 5.0]
    assert timing.percentile(ordered, 50) == 3.0
    assert timing.percentile(ordered, 25) == 2.0
    assert timing.percentile(ordered, 99) == pytest.approx(4.96)  # 4 + 0.96 x (5 - 4)
    assert timing.percentile([7.0], 99) == 7.0


def test_summarize_gives_min_median_p99_max_and_cv():
    stats = timing.summarize([3.0, 1.0, 2.0])
    assert (stats["min_s"], stats["median_s"], stats["max_s"]) == (1.0, 2.0, 3.0)
    assert stats["p99_s"] == pytest.approx(2.98)  # position 1.98
    assert stats["cv"] == pytest.approx(math.sqrt(2 / 3) / 2)  # population sd / mean


def test_odd_window_names_the_first_window_and_a_later_one():
    assert timing.odd_window([1.0, 1.0]) is None  # too few to judge
    assert timing.odd_window([1.0, 1.02, 0.98, 1.01]) is None
    first = timing.odd_window([3.0, 1.0, 1.02, 0.98])
    assert first == "the first window took 3.0x the median of the others (warm-up not done: " \
                    "raise --warmups)"
    later = timing.odd_window([1.0, 1.02, 4.0, 0.98])
    assert later.startswith("window 3 of 4 took 4.0x the median") and "busy neighbour" in later


# --------------------------------------------------------------------------- the budget

def test_budget_shares_the_run_between_the_ops_left_and_an_op_between_its_tables(clock):
    budget = precision.Budget(60.0, ["all_reduce", "all_gather", "broadcast"])
    budget.start_op("all_reduce", tables=2)  # 60 s for 3 ops: 20 s
    assert budget.table_deadline() == pytest.approx(1000 + 10)  # 20 s for 2 tables
    clock.now += 4  # the first table spent 4 of its 10 s
    assert budget.table_deadline() == pytest.approx(1004 + 16)  # the second: the op's rest
    clock.now = 1012  # all_reduce ended 8 s early: the 48 s left go to the two ops after it
    budget.start_op("all_gather", tables=1)
    assert budget.table_deadline() == pytest.approx(1012 + 24)
    clock.now = 1040
    budget.start_op("broadcast", tables=1)  # the last op takes whatever is left
    assert budget.table_deadline() == pytest.approx(1060)


def test_budget_spent_gives_deadlines_now_and_no_budget_gives_none(clock):
    budget = precision.Budget(10.0, ["all_reduce"])
    clock.now += 30
    budget.start_op("all_reduce", tables=1)
    assert budget.table_deadline() == clock.now
    unbounded = precision.Budget(None, ["all_reduce"])
    unbounded.start_op("all_reduce", tables=3)
    assert unbounded.table_deadline() is None


# --------------------------------------------------------------------------- the schedule

def schedule(count, target=0.05, most=8, groups=1, budget=None, rank=0):
    args = Settings(precision=target, max_windows=most)
    comm = SimpleNamespace(run=Run(budget=budget), global_rank=rank, device="cpu")
    return precision.Schedule(args, comm, count, [None] * groups)


@pytest.fixture
def one_rank(monkeypatch):
    """Rank 0 of a world of one: its broadcast of the decision leaves the flags as they are."""
    monkeypatch.setattr(precision.torch.distributed, "broadcast", lambda tensor, src: None)


def drive(sched, window, seconds=0.01, clock=None):
    """Run the schedule's passes as the harness does, feeding window(position, pass) as each
    window's mean (10 trials, one group of rank 0); the rows' pass (last) is not fed to the
    schedule. Returns [(pass, positions, last)]."""
    seen = []
    for number, positions, last in sched.passes():
        seen.append((number, positions, last))
        for position in positions if not last else ():
            if clock is not None:
                clock.now += seconds
            sched.measured(position, [{"mean_s": window(position, number), "trials": 10}],
                           [[0]], seconds)
        assert number < 50, "the schedule does not end"
    return seen


def test_schedule_stops_a_steady_size_after_three_windows_and_a_noisy_one_at_max_windows(one_rank):
    sched = schedule(2, target=0.05, most=6)
    # size 0: always 1 ms (settled from the third counted window); size 1: 1 or 3 ms
    seen = drive(sched, lambda p, n: 1e-3 if p == 0 else (1e-3 if n % 2 else 3e-3))
    assert seen[:4] == [(n, [0, 1], False) for n in range(4)]  # warm-up, then 3 counted
    assert [positions for _, positions, last in seen[4:-1]] == [[1]] * 3  # up to 6 windows
    assert seen[-1] == (7, [0, 1], True)  # the rows' pass, every size
    assert [len(t) for t in sched.trials] == [3, 6]  # the warm-up is not counted
    assert sched.shortfalls() == {1: "max-windows"}


def test_schedule_with_every_size_settled_goes_straight_to_the_rows(one_rank):
    sched = schedule(3)
    seen = drive(sched, lambda p, n: 1e-3 * (p + 1))
    assert [n for n, _, _ in seen] == [0, 1, 2, 3, 4] and seen[-1][2]
    assert sched.shortfalls() == {}


def test_schedule_stops_at_the_budget_when_the_next_pass_and_the_rows_would_overrun(one_rank,
                                                                                    clock):
    budget = precision.Budget(1.0, ["all_reduce"])
    budget.start_op("all_reduce", tables=1)  # this table: 1 s
    sched = schedule(2, most=100, budget=budget)
    # each window takes 0.1 s on rank 0's clock: passes 0-3 take 0.8 s; a 5th pass (0.2 s for
    # both sizes still wide) plus the rows' pass (0.2 s) would end after the deadline
    seen = drive(sched, lambda p, n: 1e-3 if n % 2 else 3e-3, seconds=0.1, clock=clock)
    assert [n for n, _, _ in seen] == [0, 1, 2, 3, 4] and seen[-1] == (4, [0, 1], True)
    assert sched.shortfalls() == {0: "budget", 1: "budget"}


def test_a_truncated_schedule_measures_only_the_sizes_that_fit(one_rank):
    sched = schedule(4)
    sched.truncate(2)
    seen = drive(sched, lambda p, n: 1e-3)
    assert all(max(positions) < 2 for _, positions, _ in seen)


def test_fixed_passes_are_repeat_passes_of_every_size_the_last_giving_the_rows():
    passes = precision.FixedPasses(3, 2)
    assert list(passes.passes()) == [(0, [0, 1], False), (1, [0, 1], False), (2, [0, 1], True)]
    passes.truncate(1)
    assert list(passes.passes())[-1] == (2, [0], True)
