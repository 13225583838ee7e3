"""Expected failures: one exception type, turned into one line and an exit status at the
entry point (entry.cli). Unexpected failures are not caught and keep their traceback."""

PROG = "commbench"


class BenchmarkError(Exception):
    """An expected failure: bad input or a missing part. One line, no traceback.

    Most such failures happen alike on every rank, and rank 0 alone reports them;
    `rank_local` ones happen on one rank, which reports its own.
    """

    exit_code = 1
    reported = False  # its line is already on stderr

    def __init__(self, message, rank_local=False):
        super().__init__(message)
        self.rank_local = rank_local


class UsageError(BenchmarkError):
    """The command line or the launcher environment is wrong."""

    exit_code = 2


class OutputClosed(BenchmarkError):
    """Whoever reads the output stopped reading (`... | head -5`): the run ends quietly, every
    rank with exit status 0, as a Unix tool in a pipeline does. Not 141 (SIGPIPE's): a launcher
    takes a rank's non-zero status for a failed job and prints a failure report of its own."""

    exit_code = 0

    def __init__(self):
        super().__init__("the reader of the output closed it", rank_local=True)
