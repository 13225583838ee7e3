"""How large a change report.py history finds (docs/history.md): the model benchmarks/history.py
measures the method by, here also for the product, so that a "no change" says what it could
have missed.

A series like the one judged: `runs` runs whose run-to-run noise is drawn, with replacement, from
real deviations (each run's figure over its regime's median: benchmarks/history.py's noise
files, or the judged series' own), with a step after run runs // 2, the figures from there on
multiplied by a factor. The step is found when change_points places a change within TOLERANCE
runs of it. smallest_found(): the smallest step down and the smallest step up found so in FOUND
of SERIES such series. Every step tried meets the same draws (a fixed seed: one series, one
figure), so that the share found grows with the step and a bisection finds where it passes FOUND.
"""

import math

import numpy

from . import history

TOLERANCE = 2  # runs: a change placed this near the step is the step found
FOUND = 0.95  # of the series drawn
SERIES = 200
LARGEST = 10.0  # the largest factor tried each way (-90%, +900%)
BISECTIONS = 8  # of the log factor (0 to ln LARGEST): the figure to within 1%
# The longest series the model draws for a judged one, so that history over 1,000 runs stays
# near a second (a series of 1,000 runs takes 0.6 s, of 50 0.08 s). Past 30 runs or so the
# figure moves little with the length (a change placed within 2 runs rests on the runs near
# it): on benchmarks/history.py's noise, 50 and 200 runs gave drops of -72%/-74%, -62%/-63%,
# -53%/-53%, -66%/-60%, -49%/-46%, rises less steady (+366%/+228%, +107%/+104%). The sentence
# says how many runs were drawn.
LONGEST = 50


def detection(noise, count, runs, at, drop, rng):
    """(found within TOLERANCE runs, found anywhere, claimed without a change), each out of
    `count` series of `runs` runs drawn from `noise`, a drop of `drop` after run `at`."""
    right = anywhere = false = 0
    for _ in range(count):
        changed = rng.choice(noise, runs) * 1.0
        changed[at:] *= 1 - drop
        changes = history.change_points(changed)
        anywhere += bool(changes)
        right += any(abs(c.at - at) <= TOLERANCE for c in changes)
        steady = rng.choice(noise, runs)
        false += bool(history.change_points(steady))
    return right, anywhere, false


def found(series, at):
    """Per row of `series` (series x runs): whether change_points places a change within
    TOLERANCE runs of `at`, as detection() counts it. The first split of every row at once (the
    same ranks, p and place as pettitt and locate give); only a row whose first split lies
    elsewhere is segmented in full."""
    series = numpy.asarray(series, dtype=float)
    n = series.shape[1]
    statistic = history._largest_u(history.ranks_of(series)).max(axis=1)
    changed = history.p_value(statistic, n) < history.ALPHA
    hit = changed & (numpy.abs(history.locate(series) - at) <= TOLERANCE)
    for row in numpy.flatnonzero(changed & ~hit):
        hit[row] = any(abs(c - at) <= TOLERANCE for c in history.split_points(series[row]))
    return hit


def smallest_found(noise, runs, series=SERIES, seed=0):
    """(drop, rise): the smallest step down (the figure x (1 - drop)) and up (x (1 + rise)) that
    change_points finds within TOLERANCE runs in FOUND of `series` series of `runs` runs drawn
    from `noise`, the step after run runs // 2; each None where even a factor of LARGEST is not
    found so. None for a series too short to judge, or without two deviations to draw from."""
    noise = numpy.asarray(noise, dtype=float)
    noise = noise[numpy.isfinite(noise) & (noise > 0)]
    if runs < 2 * history.MIN_SEGMENT or len(noise) < 2:
        return None
    draws = numpy.random.default_rng(seed).choice(noise, (series, runs))
    at = runs // 2

    def share(factor):
        stepped = draws.copy()
        stepped[:, at:] *= factor
        return found(stepped, at).mean()

    def smallest(sign):
        low, high = 0.0, math.log(LARGEST)
        if share(math.exp(sign * high)) < FOUND:
            return None
        for _ in range(BISECTIONS):
            middle = (low + high) / 2
            low, high = (low, middle) if share(math.exp(sign * middle)) >= FOUND else (middle, high)
        return math.exp(sign * high)

    down, up = smallest(-1), smallest(1)
    return (None if down is None else 1 - down, None if up is None else up - 1)


def of_series(series):
    """(smallest_found(), runs drawn) for a judged history series: its own run-to-run deviations
    and its length, up to LONGEST runs."""
    runs = min(len(series.values), LONGEST)
    return smallest_found(history.deviations(series.values, series.changes), runs), runs
