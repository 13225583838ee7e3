"""`--peak RATE`: a bandwidth written the ways users write one, into Gbit/s. Standard library
only.

Forms: a positive number, a decimal prefix (k, M, G, T; any case) and a unit. A `b` or `bit` is
bits, a `B` or `byte` bytes; `/s` or `ps` may follow: `1gbit`, `100Gb/s`, `400gbps`, `10.5GB/s`,
`12.5GBps`, `800Mbit`. A prefix alone is bits, as link speeds are quoted: `25G` is 25 Gbit/s.
A bare number is refused (bits or bytes? a factor of 8 apart)."""

import math
import re

from ..errors import UsageError

_PREFIX = {"k": 1e-6, "m": 1e-3, "g": 1.0, "t": 1e3}
_RATE = re.compile(r"\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([kKmMgGtT])"
                   r"((?i:bits?|bytes?)|b|B)?(?:/s|ps)?\s*")
FORMS = "100gbit, 25G, 400gbps, 12.5GB/s"


def parse_rate(text, flag="--peak"):
    """The rate in Gbit/s; a UsageError with one line where `text` is not a positive rate."""
    match = _RATE.fullmatch(text)
    if not match:
        if re.fullmatch(r"\s*[-+]?(\d+\.?\d*|\.\d+)\s*", text):
            raise UsageError(f"{flag} {text}: give a unit (bits or bytes?), as in {FORMS}")
        raise UsageError(f"{flag} {text}: not a rate; give one as {FORMS}")
    value = float(match.group(1))
    if not math.isfinite(value) or value <= 0:
        raise UsageError(f"{flag} {text}: a rate must be positive, as in {FORMS}")
    unit = match.group(3) or "b"
    in_bytes = unit == "B" or unit.lower().startswith("byte")
    return value * _PREFIX[match.group(2).lower()] * (8 if in_bytes else 1)
