"""Where rank 0's records go: the results file (--output), the results database (--db, or
COMMBENCH_DB) and the Prometheus file (--prometheus); one writer over all of them, with the
results file's interface (add, close).

The results file stays the record of last resort: a database that cannot be reached is one
warning line and the run goes on (the file is still written); a database that refuses the run
(a newer schema, a file that is no database) stops it before anything is measured, as an
unwritable results file does. A database write that fails later is a warning and the run goes on
without it.

What these read of a front end's settings is the same five flags every front end has, by their
attributes (output, overwrite, db, tag, prometheus): the op scripts' Settings, doctor.py's,
replay.py's and parallel_bench.py's own, none of them converted into another's.
"""

import os
import sys
from dataclasses import replace

from ..errors import PROG, BenchmarkError
from .db import ENVIRONMENT


def database(args):
    """--db, else COMMBENCH_DB, else None."""
    return args.db or os.environ.get(ENVIRONMENT) or None


def wanted(args):
    return bool(args.output or database(args) or args.prometheus)


def _warn(text):
    print(f"{PROG}: warning: {text}", file=sys.stderr, flush=True)


class Outputs:
    def __init__(self, file=None, db=None, prometheus=None, asked=None, note=None):
        self.file, self.db, self.prometheus = file, db, prometheus
        self.asked, self.note = asked, note  # --output as given; the run's note(line)

    def add(self, record):
        if self.file is not None:
            try:
                self.file.add(record)
            except BenchmarkError:  # the run stops: the database keeps what it has, incomplete
                self._drop_db(complete=False)
                self.prometheus = None
                raise
        if self.db is not None:
            from sqlalchemy.exc import SQLAlchemyError
            try:
                self.db.add(record)
            except SQLAlchemyError as error:
                from .db.store import _first_line
                _warn(f"--db {self.db.store.where}: a write failed ({_first_line(error)}); "
                      "the run goes on without the database")
                self._drop_db(complete=None)
        if self.prometheus is not None:
            self.prometheus.add(record)

    def _drop_db(self, complete):
        if self.db is None:
            return
        from sqlalchemy.exc import SQLAlchemyError
        try:
            if complete is not None:
                self.db.close(complete=complete)
        except SQLAlchemyError:
            pass
        self.db.store.close()
        self.db = None

    def add_failure(self, record):
        """A run that ends on a failure (--timeout's line): the results file keeps it."""
        if self.file is not None:
            self.file.add_failure(record)

    def close(self):
        if self.file is not None:
            self.file.close()
            from . import results
            moved = results.written_elsewhere(self.asked, self.file.path)
            if moved and self.note is not None:
                self.note(moved)  # after the tables, where the reader of the run looks last
        self._drop_db(complete=True)
        if self.prometheus is not None:
            try:
                self.prometheus.write()
            except OSError as error:
                _warn(f"--prometheus {self.prometheus.path} cannot be written: "
                      f"{error.strerror or error}")
            self.prometheus = None


def open_outputs(args, make_meta, note):
    """Rank 0's Outputs for this run (None when it writes nothing); raises BenchmarkError when
    the run must not start (the results file cannot be written, the database refuses it)."""
    if not wanted(args):
        return None
    from . import results
    meta = make_meta()
    outputs = Outputs(asked=args.output, note=note)
    if args.output:
        path = results.free_path(args.output, args.overwrite)
        outputs.file = results.open_writer(path, meta)
        if path != args.output:
            note(f"{args.output} exists; writing {path} (--overwrite replaces it)")
    where = database(args)
    if where:
        from .db.store import RunWriter, Store, StoreUnavailable
        try:
            store = Store(where)
        except StoreUnavailable as error:
            _warn(f"{error}; the run goes on without the database"
                  + (f" (its results are in {outputs.file.path})" if outputs.file else ""))
        else:
            from sqlalchemy.exc import SQLAlchemyError
            try:
                outputs.db = RunWriter(store, meta, tag=args.tag)
            except SQLAlchemyError as error:
                store.close()
                from .db.store import _first_line
                raise BenchmarkError(f"--db {store.where}: {_first_line(error)}") from None
    if args.prometheus:
        from .prometheus import PrometheusFile
        outputs.prometheus = PrometheusFile(args.prometheus, meta, args.tag)
    return outputs


class Beside:
    """A command's own results writer (replay.py's, parallel_bench.py's: write(record), close())
    with --db and --prometheus beside it, through one writer of the same interface."""

    def __init__(self, own, extras):
        self.own, self.extras = own, extras

    def write(self, record):
        if self.own is not None:
            self.own.write(record)
        self.extras.add(record)

    def write_many(self, records):
        if self.own is not None:
            self.own.write_many(records)
        for record in records:
            self.extras.add(record)

    def close(self):
        """At the run's end, or as an error stops it (called in a `finally`): then the database's
        run stays incomplete and no Prometheus file replaces the last good one."""
        failed = sys.exc_info()[0] is not None
        try:
            if self.own is not None:
                self.own.close()
        finally:
            if failed:
                self.extras._drop_db(complete=False)
                self.extras.prometheus = None
            self.extras.close()


def beside(own, args, comm, make_meta):
    """`own` (rank 0's writer of a command with its own results file, or None) with --db and
    --prometheus beside it when asked: rank 0 opens them, every rank learns whether it could
    (a database that refuses the run stops it before anything is measured)."""
    extras, failure = None, None
    if comm.global_rank == 0 and (database(args) or args.prometheus):
        try:  # the file is `own`
            extras = open_outputs(replace(args, output=None), make_meta, lambda text: None)
        except BenchmarkError as error:
            failure = str(error)
    if comm.any_rank(failure is not None):
        if own is not None:
            own.close()
        raise BenchmarkError(failure or "rank 0 cannot open --db")
    return own if extras is None else Beside(own, extras)
