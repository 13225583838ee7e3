"""The results database: connecting (a bare path is an SQLite file, `postgresql://` a server),
writing a run as it goes, reading runs back, importing results files written before.

A run is a row of `runs` (its provenance, the meta record whole) and one row of `results` per
record, each committed as it is added: a run that dies keeps every record written, and stays
`complete = false`; close() marks it complete. SQLite runs in WAL mode with a busy timeout, and
every write transaction takes the write lock at its start (BEGIN IMMEDIATE), so that two jobs
writing one file at once both land, one waiting for the other's few milliseconds.
"""

import json
import math
import os
import time
from typing import cast

from ...errors import BenchmarkError
from . import schema

BUSY_TIMEOUT_S = 60
CONNECT_TIMEOUT_S = 5
_PG_LOCK = 38_0001  # pg_advisory_xact_lock's key: migrations one at a time


class StoreError(BenchmarkError):
    """The database cannot be used (a bad URL, a file that is no database)."""


class StoreUnavailable(StoreError):
    """The database server cannot be reached."""


class StoreMissing(StoreError):
    """A database a reader asked for does not exist (a mistyped path): readers never create one."""


def database_url(where, create=True):
    """The SQLAlchemy URL for --db: a bare path (or sqlite:///path) is an SQLite file (its
    folder made when `create`); postgresql:// and postgres:// go through psycopg (version 3)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError
    where = os.fspath(where)
    if "://" not in where:
        path = os.path.abspath(where)
        if create:
            os.makedirs(os.path.dirname(path), exist_ok=True)
        return make_url("sqlite://").set(database=path)
    for prefix in ("postgresql://", "postgres://"):
        if where.startswith(prefix):
            where = "postgresql+psycopg://" + where[len(prefix):]
    try:
        return make_url(where)
    except ArgumentError:
        raise StoreError(f"--db {where}: not a database URL (a path, sqlite:///PATH or "
                         "postgresql://USER@HOST/DATABASE)") from None


def shown(url):
    """The URL as a message may print it: no password."""
    if url.get_backend_name() == "sqlite":
        return url.database
    return url.render_as_string(hide_password=True).replace("+psycopg", "")


def _first_line(error):
    original = getattr(error, "orig", None) or error
    text = str(original).strip().splitlines()
    return text[0] if text else type(original).__name__


class Store:
    """One database: its engine, migrated forward on opening (refused when newer). `read_only`
    (the report commands that only read: history, compare --db, html --db): a database that
    does not exist is a StoreMissing and nothing is created, nothing migrated, nothing written
    (SQLite opened with mode=ro, PostgreSQL's transactions read-only)."""

    def __init__(self, where, read_only=False, say=None):
        from sqlalchemy import create_engine, event
        from sqlalchemy.exc import ArgumentError, NoSuchModuleError, SQLAlchemyError
        self.url = database_url(where, create=not read_only)
        self.where = shown(self.url)
        self.sqlite = self.url.get_backend_name() == "sqlite"
        self.read_only = read_only
        try:
            if self.sqlite and read_only:
                self.engine = create_engine("sqlite://", creator=_read_only(self.url.database,
                                                                            self.where))
                event.listen(self.engine, "connect", _sqlite_connect_read_only)
                event.listen(self.engine, "begin", _sqlite_begin_read)
            elif self.sqlite:
                self.engine = create_engine(self.url, connect_args={"timeout": BUSY_TIMEOUT_S})
                event.listen(self.engine, "connect", _sqlite_connect)
                event.listen(self.engine, "begin", _sqlite_begin)
            else:
                postgresql = self.url.get_backend_name() == "postgresql"
                options: dict = {"connect_timeout": CONNECT_TIMEOUT_S} if postgresql else {}
                if postgresql and read_only:
                    options["options"] = "-c default_transaction_read_only=on"
                self.engine = create_engine(self.url, connect_args=options)
        except (NoSuchModuleError, ImportError, ArgumentError) as error:
            raise StoreError(f"--db {self.where}: {_first_line(error)}") from None
        try:
            self.connection = self.engine.connect()
        except StoreError:
            raise
        except SQLAlchemyError as error:
            kind = StoreError if self.sqlite else StoreUnavailable
            text = _first_line(error)
            if read_only and not self.sqlite and "does not exist" in text:
                kind = StoreMissing
            raise kind(f"--db {self.where} cannot be reached: {text}") from None
        try:
            with self.connection.begin():
                if read_only:
                    self.migrated_from = schema.readable(self.connection, self.where)
                    return
                if not self.sqlite and self.url.get_backend_name() == "postgresql":
                    from sqlalchemy import text
                    self.connection.execute(text(f"SELECT pg_advisory_xact_lock({_PG_LOCK})"))
                self.migrated_from = schema.migrate(self.connection, self.where, say or _say)
        except SQLAlchemyError as error:
            self.close()
            raise StoreError(f"--db {self.where}: {_first_line(error)}") from None
        except BenchmarkError:
            self.close()
            raise

    def close(self):
        self.connection.close()
        self.engine.dispose()

    def runs(self, tag=None, since=None):
        """The runs, oldest first, as dicts of the runs table's columns."""
        from sqlalchemy import select
        query = select(schema.runs).order_by(schema.runs.c.id)
        if tag is not None:
            query = query.where(schema.runs.c.tag == tag)
        if since is not None:
            query = query.where(schema.runs.c.started_at >= since)
        with self.connection.begin():
            return [dict(row._mapping) for row in self.connection.execute(query)]

    def records(self, run_id):
        """(meta, records) of one run, as the results file had them."""
        from sqlalchemy import select
        with self.connection.begin():
            meta = self.connection.execute(select(schema.runs.c.meta).where(
                schema.runs.c.id == run_id)).scalar()
            rows = self.connection.execute(select(schema.results.c.record).where(
                schema.results.c.run_id == run_id).order_by(schema.results.c.seq)).all()
        # the id is one the database gave: its run is there
        return json.loads(cast(str, meta)), [json.loads(row.record) for row in rows]


def _sqlite_connect(dbapi_connection, _record):
    # SQLAlchemy's own transactions (below), not the sqlite3 module's implicit ones
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_S * 1000}")
    cursor.execute("PRAGMA journal_mode = WAL")
    cursor.execute("PRAGMA synchronous = NORMAL")  # WAL: durable at each checkpoint, never torn
    cursor.execute("PRAGMA foreign_keys = ON")
    cursor.close()


def _sqlite_begin(connection):
    connection.exec_driver_sql("BEGIN IMMEDIATE")


def _read_only(path, where):
    """SQLite's connection maker for a reader: the file must exist, and is opened read-only
    (mode=ro: SQLite neither creates nor writes it; a WAL file's -shm may be made beside it)."""
    import sqlite3
    from urllib.parse import quote
    if not path or not os.path.isfile(path):
        raise StoreMissing(f"--db {where}: no such database file; a report reads a database "
                           "and creates none (check the path; a run's --db writes one)")
    uri = f"file:{quote(os.path.abspath(path))}?mode=ro"
    return lambda: sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S,
                                   check_same_thread=False)


def _sqlite_connect_read_only(dbapi_connection, _record):
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_S * 1000}")
    cursor.close()


def _sqlite_begin_read(connection):
    connection.exec_driver_sql("BEGIN")


def _say(line):
    import sys
    from ...errors import PROG
    print(f"{PROG}: {line}", file=sys.stderr, flush=True)


def _number(value, kind):
    if isinstance(value, bool) or value is None:
        return int(value) if isinstance(value, bool) and kind is int else None
    try:
        number = kind(value)
    except (TypeError, ValueError):
        return None
    return number if kind is int or math.isfinite(number) else None


def _text(value, width):
    return None if value is None else str(value)[:width]


def _run_row(meta, tag, kind, source, started):
    return {
        "started_at": meta.get("start_time") or started or time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "complete": False, "tag": _text(tag, 200), "kind": kind,
        "command": json.dumps(meta.get("command")), "hosts": json.dumps(meta.get("hostnames")),
        "world_size": _number(meta.get("world_size"), int),
        "dist": _text(meta.get("dist"), 40), "backend": _text(meta.get("backend"), 40),
        "device": _text(meta.get("device"), 40), "processor": _text(meta.get("processor"), 2000),
        "versions": json.dumps(meta.get("versions")), "source": source,
        "meta": json.dumps(meta),
    }


class RunWriter:
    """Rank 0's run in the database: the run row at once, each record committed as it is added,
    the run marked complete by close()."""

    def __init__(self, store, meta, tag=None, source=None, kind=None, started=None):
        self.store, self.seq = store, 0
        self._reduce_op = meta.get("reduce_op")
        # ops, doctor, replay (replay.py), strategies (parallel_bench.py)
        kind = kind or ("doctor" if meta.get("ops") == ["doctor"] else meta.get("kind") or "ops")
        with store.connection.begin():
            self.run_id = store.connection.execute(schema.runs.insert().values(
                **_run_row(meta, tag, kind, source, started))).inserted_primary_key[0]

    def add(self, record):
        self.add_many([record])

    def add_many(self, records):
        rows = []
        for record in records:
            rows.append(self._row(record))
            self.seq += 1
        with self.store.connection.begin():
            self.store.connection.execute(schema.results.insert(), rows)

    def _row(self, record):
        kind = record.get("type", "result")
        return {
            "run_id": self.run_id, "seq": self.seq, "kind": _text(kind, 20),
            "op": _text(record.get("op"), 40), "dtype": _text(record.get("dtype"), 40),
            "reduce_op": _text(record.get("reduce_op", self._reduce_op if kind == "result"
                                          else None), 20),
            "groups": _text(record.get("groups"), 20),
            "group_no": _number(record.get("group"), int),
            "size_bytes": _number(record.get("size_bytes"), int),
            "trials": _number(record.get("trials"), int),
            "window": _number(record.get("window"), int),
            "duration_s": _number(record.get("duration_s"), float),
            "throughput_Bps": _number(record.get("throughput_Bps"), float),
            "busbw_Bps": _number(record.get("busbw_Bps"), float),
            "wrong": _number(record.get("wrong"), int),
            "record": json.dumps(record),
        }

    def close(self, complete=True):
        with self.store.connection.begin():
            self.store.connection.execute(schema.runs.update().where(
                schema.runs.c.id == self.run_id).values(
                complete=complete, finished_at=time.strftime("%Y-%m-%dT%H:%M:%S%z")))


def import_file(store, path, tag=None):
    """Load one results file written before (any of the three formats) as a run; a file already
    imported (the same meta and source) is skipped. The run's id, or None when skipped."""
    from sqlalchemy import select
    from .. import results
    meta, records = results.read_all(path)
    meta = {k: v for k, v in meta.items() if k != "type"}  # a .jsonl meta line says its type
    source = os.path.abspath(path)
    text = json.dumps(meta)
    with store.connection.begin():
        known = store.connection.execute(select(schema.runs.c.id).where(
            schema.runs.c.source == source, schema.runs.c.meta == text)).first()
    if known is not None:
        return None
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(os.path.getmtime(path)))
    writer = RunWriter(store, meta, tag=tag, source=source, started=started)
    # a .jsonl line says its type; "result" is what the other formats leave unsaid
    writer.add_many([{k: v for k, v in r.items() if not (k == "type" and v == "result")}
                     for r in records])
    writer.close(complete=True)
    return writer.run_id
