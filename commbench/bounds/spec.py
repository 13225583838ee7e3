"""`--peak auto | RATE | FILE`: what a run holds its bandwidth against, parsed before any rank
connects (argparse's `type=`). Standard library only.

FILE: a cluster's expected figures per op and size band, as Azure NHC keeps per SKU. One line
each, `#` starts a comment:

    # op          size band    busbw
    all_reduce    1M-64M       40gbit
    all_reduce    64M-         45GB/s
    *             -            10gbit

OP is an op of the suite (all_reduce, all_gather, ...) or `*` (every op); BAND is `LOW-HIGH` in
bytes per rank (8, 64K, 1M, 1G, as --min-bytes reads them), the row's Size, from LOW up to but
not including HIGH, either end left open, or `*` for every size; RATE as --peak RATE. An op's
lines come before `*`'s: the first line that covers a row gives its expected figure, and a row
no line covers has no bound. Two bands of one op that overlap are an error."""

import argparse
import os
from dataclasses import dataclass

from .. import defaults
from ..errors import UsageError
from ..numbers import byte_count
from .bound import Bound
from .rates import parse_rate

AUTO = "auto"


@dataclass(frozen=True)
class Band:
    """One line of a FILE: OP's rows of LOW <= size < HIGH (None: open) are expected at gbps."""

    op: str
    low: int
    high: int | None
    gbps: float
    where: str  # FILE:LINE

    def covers(self, op, nbytes):
        return (self.op in ("*", op) and self.low <= nbytes
                and (self.high is None or nbytes < self.high))


@dataclass(frozen=True)
class PeakSpec:
    """What --peak said: `auto` (detected), a rate (`gbps`) or a FILE's bands."""

    mode: str  # "auto", "rate" or "file"
    gbps: float | None = None
    path: str | None = None
    bands: tuple[Band, ...] = ()

    def given(self, op, nbytes):
        """The bound --peak gives a row of `op` at `nbytes` per rank; None in auto mode (the
        detected bound holds) and for a row no FILE line covers."""
        if self.mode == "rate":
            return Bound("given", "given", self.gbps, "--peak")
        if self.mode == "file":
            for band in self.bands:
                if band.covers(op, nbytes):
                    return Bound("expected", f"{band.op} {_band_text(band)}", band.gbps,
                                 band.where)
        return None


def _band_text(band):
    return f"{band.low}-{'' if band.high is None else band.high}"


def parse_peak(text):
    """--peak's value: `auto`, a rate, or a FILE (module docstring). A UsageError of one line
    otherwise (a FILE's names FILE:LINE)."""
    if text == AUTO:
        return PeakSpec(AUTO)
    if os.path.isfile(text):
        return PeakSpec("file", path=text, bands=read_bands(text))
    if text[:1].isdigit() or text[:1] in "+-.":
        return PeakSpec("rate", gbps=parse_rate(text))
    raise UsageError(f"--peak {text}: neither auto, a rate (100gbit, 25G, 12.5GB/s) nor a file")


def read_bands(path):
    try:
        with open(path, encoding="utf-8") as file:
            lines = file.read().splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"--peak {path}: cannot read it ({error})") from None
    bands: list[Band] = []
    for number, line in enumerate(lines, 1):
        words = line.split("#", 1)[0].split()
        if words:
            band = _band(words, f"{path}:{number}")
            _no_overlap(band, bands)
            bands.append(band)
    if not bands:
        raise UsageError(f"--peak {path}: no expected figures in it (docs/peak.md: OP BAND RATE)")
    # an op's own lines before the lines for every op
    return tuple(sorted(bands, key=lambda band: band.op == "*"))


def _band(words, where):
    if len(words) != 3:
        raise UsageError(f"{where}: expected OP BAND RATE (all_reduce 1M-64M 40gbit), got "
                         f"{' '.join(words)!r}")
    op, band, rate = words
    if op != "*" and op not in defaults.OPS:
        raise UsageError(f"{where}: unknown op {op!r}; one of {', '.join(defaults.OPS)} or *")
    low, high = _limits(band, where)
    try:
        gbps = parse_rate(rate, flag=where)
    except UsageError as error:
        raise UsageError(str(error)) from None
    return Band(op, low, high, gbps, where)


def _limits(band, where):
    if band in ("*", "-"):
        return 0, None
    low, dash, high = band.partition("-")
    if not dash:
        raise UsageError(f"{where}: bad size band {band!r}; give LOW-HIGH (1M-64M, 64M-, -1M) "
                         "or *")
    try:
        limits = (byte_count(low) if low else 0, byte_count(high) if high else None)
    except argparse.ArgumentTypeError as error:
        raise UsageError(f"{where}: bad size band {band!r}: {error}") from None
    if limits[1] is not None and limits[1] <= limits[0]:
        raise UsageError(f"{where}: bad size band {band!r}: HIGH must be above LOW")
    return limits


def _no_overlap(band, bands):
    for other in bands:
        if other.op == band.op and band.low < (other.high or float("inf")) \
                and other.low < (band.high or float("inf")):
            raise UsageError(f"{band.where}: size band {_band_text(band)} of {band.op} overlaps "
                             f"{other.where}'s")
