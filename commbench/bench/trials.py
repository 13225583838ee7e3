"""--per-trial: every timed trial of every rank, kept compactly in a size's record.

A size's record gains "per_trial": {"ranks": [global ranks], "trials": T, "encoding":
"float32-le-base64-us", "duration_us", "arrival_us", "first_us", "call_us", "origin_s",
"clock", "clock_error_us", "host_error_us"}.
duration_us: rank-major, T figures a rank: each trial end to end on that rank (the end of the
one before to its own end, as --stats' trials). arrival_us: rank-major too: when the rank called
the trial, after the first rank to call it. first_us: T figures: when the first rank called each
trial, after the origin (the earliest start of a timed window among the ranks), so a rank called
trial i at first_us[i] + its arrival_us[i]. call_us: rank-major: the time in the call, from the
call to its return (the trial's end on that rank). stopped_us (--per-trial): rank-major: the time
in each trial, end to end, that the rank's process did not run (clocks.Hiccups). Microseconds,
float32 little-endian, base64: 16 bytes a trial and rank and 4 a trial before base64, so 1,000
trials on 64 ranks make 1,028,000 bytes, 1.4 MB of text a size. host_offset_s: each host's clock
less rank 0's, before the trials. origin_s: the origin on rank 0's clock (seconds,
CLOCK_MONOTONIC: the sizes of one run on one time line).

Clocks (commbench/ranks/clocks.py): every figure is on rank 0's clock. "clock": "shared" when every
rank is on one host (one kernel clock: no error from alignment, clock_error_us 0), "measured"
when hosts' offsets were measured by round trips before and after the trials; host_error_us:
each host's bound, clock_error_us the largest. Files of earlier versions: "clock" absent (a
barrier's exit as the origin, clock_error_us its bound), no first_us and start_us."""

import base64
import math
import struct
from dataclasses import dataclass, field

from ..ranks import clocks

ENCODING = "float32-le-base64-us"


def _pack(values):
    return base64.b64encode(struct.pack(f"<{len(values)}f", *values)).decode("ascii")


def _unpack(text, count):
    raw = base64.b64decode(text.encode("ascii"), validate=True)
    if len(raw) != 4 * count:
        raise ValueError(f"{len(raw) // 4} figures where {count} were expected")
    return list(struct.unpack(f"<{count}f", raw))


def figures(timing):
    """What this rank gathers for its record, by name (gathered.py): its start on its clock, and
    a figure a trial of each: its time, its arrival (after the start), its time in the call, its
    time not run (NaN: not measured)."""
    stopped = timing.stopped if getattr(timing, "stopped", None) is not None else \
        [math.nan] * len(timing.trials)
    return {"start_s": timing.start, "trials_s": list(timing.trials),
            "arrivals_s": list(timing.arrivals), "in_call_s": list(timing.in_call),
            "stopped_s": list(stopped)}


def encode(per_rank, ranks, hostnames, aligned):
    """The record's "per_trial" from each rank's figures() (in the order of `ranks`, global
    ranks), the world's host names and rank 0's clock alignment (Timing.clocks)."""
    count = len(per_rank[0]["trials_s"])
    durations = [f["trials_s"] for f in per_rank]
    in_call = [f["in_call_s"] for f in per_rank]
    stopped = [f["stopped_s"] for f in per_rank]
    measured = not any(math.isnan(v) for row in stopped for v in row)
    hosts = [hostnames[r] for r in ranks]

    def on_ours(rank_index, t):  # a reading of that rank's clock, on rank 0's
        return t - clocks.offset_at(aligned[hosts[rank_index]], t)
    starts = [on_ours(k, f["start_s"]) for k, f in enumerate(per_rank)]
    origin = min(starts)
    calls = [[on_ours(k, f["start_s"] + a) - origin for a in f["arrivals_s"]]
             for k, f in enumerate(per_rank)]
    first = [min(c[i] for c in calls) for i in range(count)]
    bounds = {host: aligned[host][4] for host in dict.fromkeys(hosts)}
    return {"ranks": list(ranks), "trials": count, "encoding": ENCODING,
            "duration_us": _pack([d * 1e6 for row in durations for d in row]),
            "arrival_us": _pack([(c[i] - first[i]) * 1e6 for c in calls for i in range(count)]),
            "first_us": _pack([f * 1e6 for f in first]),
            "call_us": _pack([d * 1e6 for row in in_call for d in row]),
            "origin_s": origin,
            "clock": "shared" if len(set(hostnames)) == 1 else "measured",
            "clock_error_us": max(bounds.values()) * 1e6,
            "host_error_us": {host: bound * 1e6 for host, bound in bounds.items()},
            "host_offset_s": {host: aligned[host][0] for host in bounds},
            **({"stopped_us": _pack([v * 1e6 for row in stopped for v in row])}
               if measured else {})}


@dataclass
class Trials:
    """One size's per-trial figures, decoded (seconds; rows in the order of `ranks`)."""
    ranks: list
    durations: list  # [rank index][trial]: end to end
    arrivals: list  # [rank index][trial]: the call after the first rank's call of that trial
    error: float  # the bound of an arrival's error (the worst host's)
    clock: str  # "shared", "measured", or "barrier" (files of earlier versions)
    first: list | None = None  # [trial]: the first call after the origin
    in_call: list | None = None  # [rank index][trial]: from the call to its return
    stopped: list | None = None  # [rank index][trial]: the time its process did not run
    origin: float | None = None  # the origin on rank 0's clock
    host_errors: dict = field(default_factory=dict)

    @property
    def count(self):
        return len(self.durations[0])

    def calls(self):
        """[rank index][trial]: when it called each trial, after the origin; None without
        first_us (files of earlier versions)."""
        if self.first is None:
            return None
        return [[f + a for f, a in zip(self.first, row)] for row in self.arrivals]

    def ends(self):
        """[rank index][trial]: when each trial ended on that rank, after the origin; None
        without first_us and call_us (files of earlier versions)."""
        calls = self.calls()
        if calls is None or self.in_call is None:
            return None
        return [[c + d for c, d in zip(row, spent)] for row, spent in zip(calls, self.in_call)]


def decode(entry):
    """The Trials of a record's "per_trial"; ValueError when it is not what encode() writes."""
    if not isinstance(entry, dict) or entry.get("encoding") != ENCODING:
        raise ValueError(f"encoding {entry.get('encoding') if isinstance(entry, dict) else None!r}"
                         f" is not {ENCODING}")
    try:
        ranks, count = list(entry["ranks"]), int(entry["trials"])
        if count < 1 or not ranks:
            raise ValueError("no trials or no ranks")
        durations = _unpack(entry["duration_us"], count * len(ranks))
        arrivals = _unpack(entry["arrival_us"], count * len(ranks))
        error = float(entry["clock_error_us"]) / 1e6
        first = _unpack(entry["first_us"], count) if "first_us" in entry else None
        in_call = _unpack(entry["call_us"], count * len(ranks)) if "call_us" in entry else None
        stopped = _unpack(entry["stopped_us"], count * len(ranks)) \
            if "stopped_us" in entry else None
        origin = float(entry["origin_s"]) if "origin_s" in entry else None
        host_errors = {str(k): float(v) / 1e6
                       for k, v in (entry.get("host_error_us") or {}).items()}
    except (KeyError, TypeError, AttributeError, base64.binascii.Error) as problem:
        raise ValueError(f"missing or malformed field ({problem})") from None

    def rows(flat):
        return [[v / 1e6 for v in flat[i * count:(i + 1) * count]] for i in range(len(ranks))]
    return Trials(ranks, rows(durations), rows(arrivals), error, entry.get("clock", "barrier"),
                  None if first is None else [v / 1e6 for v in first],
                  None if in_call is None else rows(in_call),
                  None if stopped is None else rows(stopped), origin, host_errors)
