"""--per-trial: every timed trial of every rank, kept compactly in a size's record.

A size's record gains "per_trial": {"ranks": [global ranks], "trials": T, "encoding":
"float32-le-base64-us", "duration_us": ..., "arrival_us": ..., "clock_error_us": E}.
duration_us: rank-major, T figures a rank: each trial end to end on that rank (the end of the
one before to its own end, as --stats' trials). arrival_us: rank-major too: when the rank called
the trial, after the first rank to call it. Both microseconds, float32 little-endian, base64:
8 bytes a trial and rank before base64, so 1,000 trials on 64 ranks make 512,000 bytes, 683 KB
of text a size.

Clocks: every rank reads its own monotonic clock from the exit of a barrier just before the
timed window (the origin); a rank leaves a barrier only after the last one entered it, so the
origins differ by at most the longest time a rank spent in that barrier: clock_error_us, the
bound of every arrival's error (the clocks' drift over the window aside: parts per million)."""

import base64
import struct

ENCODING = "float32-le-base64-us"


def _pack(values):
    return base64.b64encode(struct.pack(f"<{len(values)}f", *values)).decode("ascii")


def _unpack(text, count):
    raw = base64.b64decode(text.encode("ascii"), validate=True)
    if len(raw) != 4 * count:
        raise ValueError(f"{len(raw) // 4} figures where {count} were expected")
    return list(struct.unpack(f"<{count}f", raw))


def figures(timing):
    """What this rank gathers for its record: [origin error, trials..., arrivals...]."""
    return [timing.origin_error] + list(timing.trials) + list(timing.arrivals)


def encode(per_rank, ranks):
    """The record's "per_trial" from each rank's figures() (in the order of `ranks`)."""
    count = (len(per_rank[0]) - 1) // 2
    durations = [f[1:1 + count] for f in per_rank]
    starts = [f[1 + count:] for f in per_rank]
    first = [min(s[i] for s in starts) for i in range(count)]
    return {"ranks": list(ranks), "trials": count, "encoding": ENCODING,
            "duration_us": _pack([d * 1e6 for row in durations for d in row]),
            "arrival_us": _pack([(s[i] - first[i]) * 1e6 for s in starts for i in range(count)]),
            "clock_error_us": max(f[0] for f in per_rank) * 1e6}


def decode(entry):
    """(ranks, durations[rank index][trial] s, arrivals[rank index][trial] s, clock error s);
    ValueError when the entry is not what encode() writes."""
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
    except (KeyError, TypeError, AttributeError, base64.binascii.Error) as problem:
        raise ValueError(f"missing or malformed field ({problem})") from None

    def rows(flat):
        return [[v / 1e6 for v in flat[i * count:(i + 1) * count]] for i in range(len(ranks))]
    return ranks, rows(durations), rows(arrivals), error
