"""What every command line of the suite does alike (the op scripts', report.py's,
parallel_bench.py's): `--version`; a flag is spelled out in full (argparse's abbreviations would
take `--trial 3` for `--trials 3`, and a later flag could change what an old command line means),
and an unknown one gets a "did you mean". Standard library only."""

import argparse
import difflib
import os
import sys

from . import __version__
from .errors import UsageError


def prog(script):
    """The name a command line's usage gives: `script` (its file at the top of a checkout), or
    `commbench COMMAND` when it runs as `python -m commbench COMMAND` or the `commbench` command
    (commands.py leaves sys.argv as [its own path, COMMAND, flags...])."""
    if os.path.basename(sys.argv[0]) in ("__main__.py", "commbench") and len(sys.argv) > 1:
        return f"commbench {sys.argv[1]}"
    return script


class Parser(argparse.ArgumentParser):
    """argparse without abbreviations; usage errors go through `error`, which each command line
    makes its own one line and exit status 2."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self.add_argument("--version", action="version", version=f"commbench {__version__}",
                          help="print the suite's version and exit")

    def parse_args(self, args=None, namespace=None):
        namespace, extra = self.parse_known_args(args, namespace)
        if extra:
            self.error(unrecognized(self, extra))
        return namespace


class UsageParser(Parser):
    """The parser of a script run on ranks (parallel_bench.py, doctor.py, replay.py): a usage
    error is a UsageError, which the entry point makes one line and exit status 2."""

    def error(self, message):
        raise UsageError(f"{message} (see --help)")


def _options(parser):
    names = []
    for action in parser._actions:  # argparse offers no public view of them
        names += [name for name in action.option_strings if name.startswith("--")]
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                names += _options(sub)
    return names


def unrecognized(parser, extra):
    """`unrecognized arguments: --trial 3; did you mean --trials?`"""
    message = f"unrecognized arguments: {' '.join(extra)}"
    options = sorted(set(_options(parser)))
    guesses = []
    for word in extra:
        if word.startswith("--"):
            close = difflib.get_close_matches(word.split("=", 1)[0], options, n=1, cutoff=0.6)
            if close and close[0] not in guesses:
                guesses.append(close[0])
    if guesses:
        message += f"; did you mean {' or '.join(guesses)}?"
    return message


def argument(parse):
    """A flag's type from a parser that raises ValueError with the reason (argparse's line)."""
    def convert(text):
        try:
            return parse(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
    return convert
