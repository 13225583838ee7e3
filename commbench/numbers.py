"""Validators of numeric flags, shared by the suite's command line and report.py's: a value out
of range is argparse's usage error with the range in words. Standard library only."""

import argparse


def int_at_least(minimum, exponent=False):
    """A parser of integers >= `minimum`; with `exponent`, written as 1e5 too."""
    def parse(text):
        try:
            value = int(float(text)) if exponent and "e" in text.lower() else int(text)
        except (ValueError, OverflowError):
            raise argparse.ArgumentTypeError(f"'{text}' is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value
    return parse


def float_in(low, high, what):
    """A parser of floats in (low, high]; `what` says the range in the error message."""
    def parse(text):
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not a number") from None
        if not low < value <= high:
            raise argparse.ArgumentTypeError(f"must be {what}, got {text}")
        return value
    return parse


def percentage(text):
    """A percentage above 0% and below 100% ("5%", "2.5%"), as a fraction. The sign is required:
    a bare 5 could mean 5% or 500%."""
    body = text.strip()
    try:
        if not body.endswith("%"):
            raise ValueError
        value = float(body[:-1])
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a percentage: give one such as 5%") \
            from None
    if not 0 < value < 100:
        raise argparse.ArgumentTypeError(f"must be above 0% and below 100%, got {text}")
    return value / 100


_BYTE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def byte_count(text):
    """A message size in bytes: 8, 1K, 128M, 1G (1024-based, as nccl-tests' -b and -e read
    them; a trailing B or iB is allowed: 4KiB, 4KB)."""
    import re
    match = re.fullmatch(r"\s*(\d+)\s*([KMGT]?)(?:i?B)?\s*", text, re.I)
    if not match:
        raise argparse.ArgumentTypeError(f"'{text}' is not a byte count: give one such as 8, 1K, "
                                         "128M or 1G")
    value = int(match.group(1)) * _BYTE_UNITS[match.group(2).upper()]
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 byte, got {text}")
    return value


# Student's t at 97.5% for 1..30 degrees of freedom (a 95% two-sided interval); 1.96 beyond.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t975(df):
    """Student's t at 97.5% for `df` degrees of freedom, rounded down (the wider interval)."""
    whole = max(1, int(df))
    return _T975[whole - 1] if whole <= len(_T975) else 1.96
