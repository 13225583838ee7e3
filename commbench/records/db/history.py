"""report.py history: each op's figure run by run, per configuration and size band, and where it
changed, judged against the run-to-run noise of the runs themselves.

A series is one op in one configuration (dtype, reduce op, --groups layout and group, layer,
backend, device, world size) and one size band: small messages (under 64 KiB) by their latency,
medium (to 1 MiB) and large ones by bus bandwidth. A run's figure for a band is the geometric
mean over the band's sizes (a band covering other sizes is another series).

The change points: Pettitt's rank test (Pettitt 1979, "A non-parametric approach to the
change-point problem") says whether a series changed, by binary segmentation (each side tested
again, at most 3 changes, each side at least 5 runs). The test ranks the runs, so it weighs a
shift against the spread of the runs themselves and one wild run moves it little; a change is
claimed at p < 0.01 (below 40 runs the p is drawn from 4,000 permutations of the ranks, the
closed form being far too cautious there). Where it lies: the split of least squares of the log
figures (clamped to their 2.5 and 97.5 percentiles), which places a step more precisely than the
ranks.
Its size is the ratio of the medians after and before, with a 95% bootstrap interval (1,000
resamples of each side).
"""

import functools
import math
from dataclasses import dataclass, field

import numpy

BANDS = (("small", 0, 64 * 1024, "latency"), ("medium", 64 * 1024, 1024 * 1024, "busbw"),
         ("large", 1024 * 1024, math.inf, "busbw"))
ALPHA = 0.01
MIN_SEGMENT = 5
MAX_CHANGES = 3
BOOTSTRAP = 1000
EXACT_BELOW = 40  # shorter series: Pettitt's p drawn from permutations, not its closed form
PERMUTATIONS = 4000


@dataclass
class Change:
    at: int  # index of the first run after the change
    ratio: float  # median after / median before
    low: float
    high: float
    p: float


@dataclass
class Series:
    key: tuple  # op, dtype, reduce_op, groups, group, dist, backend, device, world_size, band
    metric: str  # latency (seconds, lower is better) or busbw (bytes/s)
    sizes: tuple  # the band's smallest and largest size, in bytes
    count: int  # how many sizes the band holds
    runs: list = field(default_factory=list)  # run ids, oldest first
    started: list = field(default_factory=list)
    values: list = field(default_factory=list)
    changes: list = field(default_factory=list)
    spread: float = math.nan  # robust run-to-run spread (MAD x 1.4826 / median) within regimes


def load(store, tag=None, ops=None, since=None):
    """The series of the database's op runs (complete ones and the finished sizes of runs that
    died), oldest run first. The bands' geometric means are taken by the database itself
    (exp(avg(ln(x))), which SQLite and PostgreSQL both have): a run's 200 rows come back as a
    few."""
    from sqlalchemy import and_, case, func, literal, select
    from .schema import results, runs
    size = results.c.size_bytes
    bands = [(and_(size >= low, size < high) if high != math.inf else size >= low, literal(name))
             for name, low, high, _ in BANDS]
    band = case(*bands, else_=literal(BANDS[-1][0]))
    small = BANDS[0][2]
    figure = case((size < small, results.c.duration_s), else_=results.c.busbw_Bps)
    columns = (results.c.run_id, results.c.op, results.c.dtype, results.c.reduce_op,
               results.c.groups, results.c.group_no)
    per_band = (select(*columns, band.label("band"), func.count().label("sizes"),
                       func.min(size).label("smallest"), func.max(size).label("largest"),
                       func.avg(func.ln(figure)).label("log_mean"))
                .where(results.c.kind == "result", results.c.window.is_(None),
                       size.isnot(None), figure > 0)
                .group_by(*columns, band))
    if ops:
        per_band = per_band.where(results.c.op.in_(list(ops)))
    b = per_band.subquery().c
    query = (select(runs.c.id, runs.c.started_at, runs.c.dist, runs.c.backend, runs.c.device,
                    runs.c.world_size, b.op, b.dtype, b.reduce_op, b.groups, b.group_no, b.band,
                    b.sizes, b.smallest, b.largest, b.log_mean)
             .join(runs, runs.c.id == b.run_id).order_by(runs.c.started_at, runs.c.id))
    if tag is not None:
        query = query.where(runs.c.tag == tag)
    if since is not None:
        query = query.where(runs.c.started_at >= since)
    with store.connection.begin():
        rows = store.connection.execute(query).all()
    found: dict = {}
    metric = {name: kind for name, _, _, kind in BANDS}
    for (run, when, dist, backend, device, world, op, dtype, reduce_op, groups, group, name,
         count, smallest, largest, value) in rows:
        key = (op, dtype, reduce_op, groups, group, dist, backend, device, world, name)
        covered = (smallest, largest) if count > 1 else (smallest,)
        series = found.get((key, covered, count))
        if series is None:
            series = found[(key, covered, count)] = Series(key, metric[name], covered, count)
        series.runs.append(run)
        series.started.append(when)
        series.values.append(math.exp(value))
    return sorted(found.values(), key=lambda s: (tuple(str(k) for k in s.key), s.sizes))


def _largest_u(ranks):
    """Pettitt's |U| at each allowed split, the largest of each row of `ranks` (runs x n)."""
    n = ranks.shape[-1]
    k = numpy.arange(1, n)  # values[:k] before the split
    u = numpy.abs(2 * numpy.cumsum(ranks, axis=-1)[..., :-1] - k * (n + 1))
    allowed = (k >= MIN_SEGMENT) & (k <= n - MIN_SEGMENT)
    return numpy.where(allowed, u, -1)


@functools.cache
def _null(n):
    """Pettitt's largest |U| over PERMUTATIONS orders of the ranks 1..n, sorted: the test's own
    distribution for a series of n runs, drawn once (a fixed seed: one series, one verdict)."""
    shuffled = numpy.random.default_rng(n).permuted(
        numpy.broadcast_to(numpy.arange(1.0, n + 1), (PERMUTATIONS, n)), axis=1)
    return numpy.sort(_largest_u(shuffled).max(axis=1))


def p_value(statistic, n):
    """Pettitt's p of the largest |U| `statistic` (a number, or an array of them) of a series of
    n runs: below EXACT_BELOW runs drawn (_null), from there the closed form."""
    statistic = numpy.asarray(statistic, dtype=float)
    if n < EXACT_BELOW:
        null = _null(n)
        as_large = len(null) - numpy.searchsorted(null, statistic, side="left")
        return (as_large + 1) / (len(null) + 1)
    return numpy.minimum(1.0, 2 * numpy.exp(-6 * statistic ** 2 / (n ** 3 + n ** 2)))


def ranks_of(values):
    """The ranks 1..n of the values of each row (ties in their order, as a stable sort)."""
    values = numpy.asarray(values, dtype=float)
    ranks = numpy.empty(values.shape)
    order = numpy.argsort(values, axis=-1, kind="stable")
    numpy.put_along_axis(ranks, order, numpy.broadcast_to(
        numpy.arange(1.0, values.shape[-1] + 1), values.shape), axis=-1)
    return ranks


def pettitt(values):
    """(index of the first value after the best split, p) by Pettitt's test over the splits
    that leave MIN_SEGMENT values on each side; (None, 1.0) for a series too short.

    Up to EXACT_BELOW runs the p is the test's own distribution, drawn: PERMUTATIONS orders of
    the ranks 1..n, each scored as the series is (_null). Pettitt's closed form,
    2 exp(-6 K^2 / (n^3 + n^2)), holds for long series and is far too cautious for short ones:
    at 10 runs, five all below the other five (a 1 in 126 order) has p = 0.066 by it, 0.008
    drawn, and no series under 16 runs could reach p < 0.01."""
    n = len(values)
    if n < 2 * MIN_SEGMENT:
        return None, 1.0
    u = _largest_u(ranks_of(values))
    best = int(numpy.argmax(u))
    return best + 1, float(p_value(u[best], n))


def locate(values):
    """Where a change found by pettitt() lies: the split that leaves the least squared deviation
    of the log figures from each side's mean (ranks say whether, magnitudes say where more
    precisely), the figures first clamped to their 2.5 and 97.5 percentiles so that one wild run
    pulls it little. `values` one series (an index), or one per row (an index per row)."""
    x = numpy.log(numpy.asarray(values, dtype=float))
    x = numpy.clip(x, *numpy.quantile(x, (0.025, 0.975), axis=-1, keepdims=True))
    n = x.shape[-1]
    k = numpy.arange(MIN_SEGMENT, n - MIN_SEGMENT + 1)
    total, squares = numpy.cumsum(x, axis=-1), numpy.cumsum(x * x, axis=-1)
    left = squares[..., k - 1] - total[..., k - 1] ** 2 / k
    right = ((squares[..., -1:] - squares[..., k - 1])
             - (total[..., -1:] - total[..., k - 1]) ** 2 / (n - k))
    at = k[numpy.argmin(left + right, axis=-1)]
    return int(at) if x.ndim == 1 else at


def _interval(before, after, rng):
    draws_before = rng.choice(before, (BOOTSTRAP, len(before)))
    draws_after = rng.choice(after, (BOOTSTRAP, len(after)))
    ratios = numpy.median(draws_after, axis=1) / numpy.median(draws_before, axis=1)
    return float(numpy.quantile(ratios, 0.025)), float(numpy.quantile(ratios, 0.975))


def split_points(values, alpha=ALPHA):
    """Where `values` changed, oldest first, by binary segmentation with Pettitt's test."""
    values = numpy.asarray(values, dtype=float)
    found: list = []

    def split(low, high):
        if len(found) >= MAX_CHANGES:
            return
        at, p = pettitt(values[low:high])
        if at is None or p >= alpha:
            return
        at = low + locate(values[low:high])
        found.append(at)
        split(low, at)
        split(at, high)

    split(0, len(values))
    return sorted(found)


def change_points(values, alpha=ALPHA, seed=0):
    """The changes in `values` (oldest first): split_points(), each with its size and interval."""
    values = numpy.asarray(values, dtype=float)
    rng = numpy.random.default_rng(seed)
    found = split_points(values, alpha)
    changes = []
    edges = [0] + found + [len(values)]
    for index, at in enumerate(found):
        before, after = values[edges[index]:at], values[at:edges[index + 2]]
        _, p = pettitt(values[edges[index]:edges[index + 2]])
        low, high = _interval(before, after, rng)
        changes.append(Change(at, float(numpy.median(after) / numpy.median(before)), low, high, p))
    return changes


def deviations(values, changes):
    """Each run's figure over the median of its regime (the runs between the changes): the
    series' run-to-run noise."""
    values = numpy.asarray(values, dtype=float)
    edges = [0] + [c.at for c in changes] + [len(values)]
    parts = [values[a:b] / numpy.median(values[a:b]) for a, b in zip(edges, edges[1:]) if b > a]
    return numpy.concatenate(parts) if parts else values


def spread(values, changes):
    """The robust run-to-run spread within the regimes between the changes."""
    relative = deviations(values, changes)
    return float(1.4826 * numpy.median(numpy.abs(relative - 1))) if len(relative) > 1 else math.nan


def judge(series_list):
    for series in series_list:
        series.changes = change_points(series.values)
        series.spread = spread(series.values, series.changes)
    return series_list
