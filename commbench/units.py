"""Sizes and durations as text, one way for every report and note (the op scripts' table keeps
the original's: table.convert_size, "32.0 KB").

size(1536) is "1.5 KiB": 1024-based IEC units, 4 significant digits, whole bytes as "512 B";
a size that rounds to 1024 of a unit is shown in the next (1048572 B is "1 MiB", not
"1024 KiB"). duration(2.5e-3) is "2.500 ms": us under a millisecond, ms under a second, s
above (as rounded), 3 decimals unless the caller asks for fewer (doctor.py's latencies: 1,
"25.0 us"); "-" for None."""

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def size(nbytes):
    value = nbytes
    for unit in _UNITS:
        if unit == "B" and value < 1024:
            return f"{value:g} B"
        if unit == _UNITS[-1] or float(f"{value:.4g}") < 1024:
            return f"{value:.4g} {unit}"
        value /= 1024


def duration(seconds, decimals=3):
    if seconds is None:
        return "-"
    for scale, unit in ((1e6, "us"), (1e3, "ms")):
        value = round(seconds * scale, decimals)
        if abs(value) < 1000:  # as rounded: 999.9996 us is "1.000 ms", not "1000.000 us"
            return f"{value:.{decimals}f} {unit}"
    return f"{seconds:.{decimals}f} s"
