"""Validators of numeric flags, shared by the suite's command line and report.py's: a value out
of range is argparse's usage error with the range in words. Standard library only."""

import argparse


def int_at_least(minimum):
    """A parser of integers >= `minimum`."""
    def parse(text):
        try:
            value = int(text)
        except ValueError:
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
