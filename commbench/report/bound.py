"""A run's curve against its bound (--peak: each result record's `bound` and `peak_fraction`,
docs/peak.md): which sizes reach what fraction of it, and where the curve flattens below it.
Read by `report.py compare` (the lines after its tables), `html` (each run's section) and
`plot` (the bound drawn as a dashed line beside each curve). Standard library only.

Where the curve flattens: the smallest size from which bus bandwidth grows by no more than
FLAT (10%) to the best of the larger sizes; a curve still climbing at its largest size has not
flattened. "Below the bound": its best fraction there is under NEAR (0.7) of the bound."""

from dataclasses import dataclass

from .. import units
from .runs import Run, bandwidth, bandwidth_label, op_order

FLAT = 0.10
NEAR = 0.7


@dataclass(frozen=True)
class Reach:
    """One op of a run against its bound: (size, busbw B/s, bound B/s) of each sized row
    that has a bound, smallest first."""
    op: str
    points: tuple
    words: str  # the bound: `memory copy (measured, 2 threads)`

    def fractions(self):
        return [(size, busbw / bound) for size, busbw, bound in self.points]

    def best(self):
        """(size, fraction) of the row nearest its bound."""
        return max(self.fractions(), key=lambda p: p[1])

    def flattens(self):
        """(size, fraction there) where the curve flattens (module docstring), or None."""
        points = self.points
        for index, (size, busbw, bound) in enumerate(points[:-1]):
            later = max(p[1] for p in points[index:])
            if busbw >= later / (1 + FLAT):
                return size, busbw / bound
        return None


def reaches(run: Run) -> list:
    """A Reach per op of `run` whose rows carry a bound."""
    found = []
    for op in op_order(run.ops):
        rows = sorted((s, m) for s, m in run.ops[op].items() if s > 0)
        points = tuple((s, m.busbw, m.bound) for s, m in rows if m.bound and m.busbw)
        if points:
            found.append(Reach(op, points, run.bound_words or "the bound"))
    return found


def lines(run: Run) -> list:
    """What the run reaches of its bound, a line per op (none without a bound)."""
    out = []
    for reach in reaches(run):
        parts = ", ".join(f"{units.size(size)} {share:.2f}" for size, share in reach.fractions())
        size, share = reach.best()
        said = (f"{reach.op} ({run.label}) against its bound, {reach.words}: the fraction "
                f"reached {parts}; at best {share:.2f} ({units.size(size)})")
        flat = reach.flattens()
        if flat is None:
            said += "; still climbing at its largest size"
        else:
            at, there = flat
            busbw = dict((s, b) for s, b, _ in reach.points)[at]
            said += (f"; flattens from {units.size(at)} at {bandwidth(busbw, run.bw_unit):.3g} "
                     f"{bandwidth_label(run.bw_unit)}, {there:.2f} of the bound" +
                     (", below it" if there < NEAR else ""))
        out.append(said)
    return out


def series(run: Run, op: str) -> tuple:
    """(sizes, bound in the run's unit) of an op's rows that carry a bound, for the plot."""
    rows = sorted((s, m.bound) for s, m in run.ops.get(op, {}).items() if s > 0 and m.bound)
    return [s for s, _ in rows], [bandwidth(b, run.bw_unit) for _, b in rows]
