"""The passes over an op's sizes. --repeat R: every size in each of R passes, the last giving the
rows. --precision P: each size measured in windows until the 95% interval of its figure is
within P of it, the run's --time-budget shared between its tables, --max-windows the last word.

--precision's passes (one window of a size per pass, as --repeat interleaves them, so that
drift spreads over every size):

  pass 0      a warm-up window of every size: measured and recorded, left out of the figure
              (insurance, for accelerators above all: a window after a pause can run before
              a GPU's clocks are back up, and one outlier costs a tight interval many windows;
              on a CPU rank --warmups' untimed calls already do it: docs/verdicts.md)
  pass 1-3    a window of every size: no interval is drawn from fewer than 3 windows
  pass 4 ...  a window of each size whose interval is still wider than P, while the table's
              share of the budget has room for the pass and the rows' pass after it
  last pass   the rows: a window of every size for its --check, --stats and --overlap, not
              counted: a row's figure is the mean over its counted windows, with their 95%
              interval, exactly what the decision to stop saw (a last window counted after
              the decision could widen a settled interval: on oneCCL's occasional 10x windows
              it did, to ±300%)

Rank 0 decides which sizes the next pass measures, from every group's figures (each row's
figure must be within P), and broadcasts it: every rank runs the same windows in the same order.
"""

import time

import torch

from ..table import note
from .timing import interval

MIN_WINDOWS = 3  # counted windows: the fewest an interval comes from


def half_width(means, counts):
    """The 95% interval's half-width relative to the mean of windows `means` (with `counts`
    trials each); None from fewer than 2 windows or a mean of 0."""
    if len(means) < 2:
        return None
    mean, low, high = interval(means, counts)
    return (high - mean) / mean if mean > 0 else None


class Budget:
    """--time-budget under --precision: seconds for the whole run, shared equally between the
    ops still to run, and an op's share equally between its tables (dtypes, --groups layouts)
    still to run; what a table leaves unspent goes to the ones after it. Rank 0's clock."""

    def __init__(self, seconds, ops):
        self.ops = list(ops)
        self.deadline = None if seconds is None else time.monotonic() + seconds
        self.op_deadline, self.tables_left = None, 0

    def start_op(self, name, tables):
        if self.deadline is None:
            return
        now = time.monotonic()
        later = self.ops[self.ops.index(name) + 1:] if name in self.ops else []
        self.op_deadline = now + max(0.0, self.deadline - now) / (1 + len(later))
        self.tables_left = tables

    def table_deadline(self):
        """The deadline of the table about to start (None without a budget)."""
        if self.deadline is None:
            return None
        now = time.monotonic()
        share = max(0.0, self.op_deadline - now) / max(1, self.tables_left)
        self.tables_left -= 1
        return now + share


class Schedule:
    """Which sizes (positions in the op's list) each pass measures, for one table."""

    def __init__(self, args, comm, count, groups):
        self.target, self.most = args.precision, args.max_windows
        self.comm, self.count = comm, count
        self.deadline = comm.run.budget.table_deadline() if comm.run.budget is not None else None
        if comm.global_rank != 0:
            self.deadline = None  # rank 0's clock decides
        self.means = [[[] for _ in groups] for _ in range(count)]  # position -> group -> means
        self.trials = [[] for _ in range(count)]
        self.cost = [0.0] * count  # rank 0's seconds of a size's latest window
        self.open = list(range(count))
        self.why = {}  # position -> "budget" or "max-windows": why it stopped short of P
        self.number = 0

    def truncate(self, position):
        """The sizes from `position` on could not be allocated: no pass measures them."""
        self.count = position
        self.open = [p for p in self.open if p < position]

    def passes(self):
        """(pass number, positions, last) for each pass; the last pass gives the rows."""
        while True:
            if self.number <= MIN_WINDOWS:
                positions = list(range(self.count))
            else:
                positions = self._decide()
            if not positions:
                break
            yield self.number, positions, False
            self.number += 1
        yield self.number, list(range(self.count)), True

    def measured(self, position, everyone, groups, seconds):
        """A window of `position`: every rank's {"mean_s", "trials"} (gathered), the layout's
        groups (global ranks), rank 0's wall seconds for it. Pass 0's is the warm-up."""
        self.cost[position] = seconds
        if self.number == 0:
            return
        for index, ranks in enumerate(groups):
            self.means[position][index].append(everyone[ranks[0]]["mean_s"])
        self.trials[position].append(int(everyone[groups[0][0]]["trials"]))

    def _settled(self, position):
        counts = self.trials[position]
        widths = [half_width(means, counts) for means in self.means[position]]
        return all(w is not None and w <= self.target for w in widths)

    def _decide(self):
        """On rank 0, the positions the next pass measures (those still wider than P, while
        the budget and --max-windows allow), broadcast to every rank."""
        flags = torch.zeros(max(1, self.count), dtype=torch.int32, device=self.comm.device)
        if self.comm.global_rank == 0:
            still = []
            for position in self.open:
                if self._settled(position):
                    continue
                if len(self.trials[position]) >= self.most:
                    self.why[position] = "max-windows"
                    continue
                still.append(position)
            if still and self.deadline is not None:
                needed = sum(self.cost[p] for p in still) + sum(self.cost[:self.count])
                if time.monotonic() + needed > self.deadline:
                    self.why.update((p, "budget") for p in still)
                    still = []
            for position in still:
                flags[position] = 1
        torch.distributed.broadcast(flags, 0)
        self.open = [p for p in range(self.count) if flags[p].item()]
        return self.open

    def shortfalls(self):
        """{position: why} for the sizes that stopped before P (rank 0's view)."""
        return dict(self.why)


class FixedPasses:
    """--repeat R's passes: every size in each of R passes; the last gives the rows."""

    def __init__(self, repeat, count):
        self.repeat, self.count = repeat, count

    def truncate(self, position):
        self.count = position

    def passes(self):
        for number in range(self.repeat):
            yield number, list(range(self.count)), number == self.repeat - 1


def note_shortfalls(op_name, args, comm, records, why, numels):
    """--precision: one line on stderr for the rows (marked !) whose interval stayed wider than
    asked, with each one's figure and why it stopped."""
    missed = [r for r in records if r and r.get("precision_met") is False]
    if not missed:
        return
    reasons = {"budget": "the time budget ran out", "max-windows": "--max-windows reached"}
    stops = {reasons.get(why.get(p), "stopped early")
             for p, numel in enumerate(numels)
             if any(r["numel"] == numel for r in missed)}
    sizes = ", ".join(f"{r['size_bytes']} B " + ("-" if r["precision_reached"] is None else
                                                 f"±{r['precision_reached'] * 100:.1f}%") +
                      f" in {r['repeat']} windows" for r in missed[:4])
    more = f" and {len(missed) - 4} more" if len(missed) > 4 else ""
    note(comm, f"{op_name}: {len(missed)} of {len(records)} rows did not reach "
               f"±{args.precision * 100:g}% (marked !; {'; '.join(sorted(stops))}): "
               f"{sizes}{more}")
