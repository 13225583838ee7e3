"""commbench/ranks/gathered.py: named figures through one flat all_gather, in-process (the gather
itself, across real ranks, is every op script's, parallel_bench's and replay's tests)."""

import math

import pytest

from commbench.ranks import gathered

pytestmark = pytest.mark.fast


class OneProcessComm:
    """Comm.gather_figures as `ranks` ranks that each gave the same-shaped figures: what each
    rank's figures are is given, the flat lists go through as an all_gather hands them back."""

    def __init__(self, per_rank):
        self.per_rank = per_rank

    def gather_figures(self, figures):
        rows = [gathered.flatten(fields)[1] for fields in self.per_rank]
        assert rows[0] == figures and {len(row) for row in rows} == {len(figures)}
        return rows


def test_fields_come_back_by_name_with_their_shapes():
    fields = {"mean_s": 1.5e-5, "trials": 50, "windows_s": [1.0, 2.0, 3.0],
              "calls": [[1, 2, 3], [4, 5, 6]], "none": [], "missing": math.nan}
    layout, values = gathered.flatten(fields)
    assert [name for name, _ in layout] == list(fields)
    assert [shape for _, shape in layout] == [(), (), (3,), (2, 3), (0,), ()]
    assert len(values) == 1 + 1 + 3 + 6 + 0 + 1
    back = gathered.unflatten(layout, values)
    assert back["calls"] == [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]] and back["trials"] == 50.0
    assert back["windows_s"] == [1.0, 2.0, 3.0] and back["none"] == []
    assert math.isnan(back["missing"])


def test_every_ranks_dict_in_rank_order():
    per_rank = [{"mean_s": float(r), "stats": [r, 2 * r]} for r in range(3)]
    rows = gathered.gather(OneProcessComm(per_rank), per_rank[0])
    assert [row["mean_s"] for row in rows] == [0.0, 1.0, 2.0]
    assert rows[2]["stats"] == [2.0, 4.0]


def test_ragged_rows_and_a_layout_that_does_not_fit_are_refused():
    with pytest.raises(ValueError, match="calls: rows of different lengths"):
        gathered.flatten({"calls": [[1, 2], [3]]})
    layout, _ = gathered.flatten({"a": [1.0, 2.0]})
    with pytest.raises(ValueError, match="3 figures for a layout of 2"):
        gathered.unflatten(layout, [1.0, 2.0, 3.0])


def test_per_trial_figures_cross_by_name_into_the_record():
    """trials.figures (--per-trial's, onesize's and replay's) through the gather: each rank's
    dict back whole (NaN where a replay has no time not run), and its record as before it."""
    from commbench.bench import trials

    class Timing:
        def __init__(self, rank, count=4):
            self.start, self.stopped = 100.0, None
            self.trials = [1e-3 * (i + 1) for i in range(count)]
            self.arrivals = [0.01 * i + 1e-4 * rank for i in range(count)]
            self.in_call = [t / 2 for t in self.trials]
    mine = [trials.figures(Timing(rank)) for rank in range(3)]
    rows = gathered.gather(OneProcessComm(mine), mine[0])
    assert [set(row) for row in rows] == [set(mine[0])] * 3
    assert rows[2]["arrivals_s"] == mine[2]["arrivals_s"] and math.isnan(rows[1]["stopped_s"][0])
    aligned = {"h": [0.0, 0.0, 0.0, 0.0, 0.0]}
    entry = trials.encode(rows, [0, 1, 2], ["h"] * 3, aligned)
    assert entry == trials.encode(mine, [0, 1, 2], ["h"] * 3, aligned) and entry["trials"] == 4
    assert trials.decode(entry).arrivals[2][0] == pytest.approx(2e-4, abs=1e-6)
