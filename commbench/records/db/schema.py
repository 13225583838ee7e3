"""The results database's tables, its schema version, and the steps that migrate it forward.

SQLAlchemy Core (tables, not mapped classes): one API over SQLite (the embedded default) and
PostgreSQL (a team's shared database), each in its own SQL dialect; the figures themselves are
columns for the queries (history) and the whole record as JSON text beside them, so that what a
results file holds, the database holds, figure for figure.
"""

import time

from sqlalchemy import (BigInteger, Boolean, Column, Float, ForeignKey, Integer, MetaData,
                        String, Table, Text, select, text)

from ...errors import BenchmarkError

# Version 1: runs and their rows; version 2: the indexes that reading a run and history's
# --tag and --since use.
VERSION = 2

# SQLite autoincrements only an INTEGER PRIMARY KEY; PostgreSQL's ids may pass 2^31 rows.
_ID = BigInteger().with_variant(Integer, "sqlite")

metadata = MetaData()

schema_version = Table("schema_version", metadata, Column("version", Integer, nullable=False))

runs = Table(
    "runs", metadata,
    Column("id", _ID, primary_key=True, autoincrement=True),
    Column("started_at", String(40)),  # the meta's start_time (local time with its offset)
    Column("finished_at", String(40)),  # None: the run died (or still runs)
    Column("complete", Boolean, nullable=False, default=False),
    Column("tag", String(200)),  # --tag: the cluster, the experiment
    Column("kind", String(20), nullable=False),  # ops, doctor, replay, strategies
    Column("command", Text),  # JSON list: the command line
    Column("hosts", Text),  # JSON list: each rank's host name
    Column("world_size", Integer),
    Column("dist", String(40)), Column("backend", String(40)), Column("device", String(40)),
    Column("processor", Text),
    Column("versions", Text),  # JSON object
    Column("source", Text),  # report.py import: the file it came from
    Column("meta", Text, nullable=False),  # JSON: the results file's whole meta record
)

results = Table(
    "results", metadata,
    Column("id", _ID, primary_key=True, autoincrement=True),
    Column("run_id", _ID, ForeignKey("runs.id"), nullable=False),
    Column("seq", Integer, nullable=False),  # the record's place in the results file
    Column("kind", String(20), nullable=False),  # result, doctor, verdict, call, strategy...
    Column("op", String(40)), Column("dtype", String(40)), Column("reduce_op", String(20)),
    Column("groups", String(20)), Column("group_no", Integer),
    Column("size_bytes", BigInteger), Column("trials", Integer), Column("window", Integer),
    Column("duration_s", Float), Column("throughput_Bps", Float), Column("busbw_Bps", Float),
    Column("wrong", BigInteger),
    Column("record", Text, nullable=False),  # JSON: the whole record (NaN kept, as the file's)
)


class NewerSchema(BenchmarkError):
    """The database was written by a newer commbench."""


class NotADatabase(BenchmarkError):
    """A file a reader opened that no run's --db made (no schema)."""


def _create_tables(connection):
    metadata.create_all(connection, tables=[runs, results])


def _create_indexes(connection):
    connection.execute(text("CREATE INDEX IF NOT EXISTS ix_results_run ON results (run_id)"))
    connection.execute(text("CREATE INDEX IF NOT EXISTS ix_runs_tag ON runs (tag, started_at)"))


# STEPS[v] takes a database of version v - 1 to version v.
STEPS = {1: _create_tables, 2: _create_indexes}


def version_of(connection):
    """The schema version of the database on `connection`: 0 for an empty one."""
    if not connection.dialect.has_table(connection, "schema_version"):
        return 0
    return connection.execute(select(schema_version.c.version)).scalar() or 0


def migrate(connection, where, say=None):
    """Bring the database forward to VERSION, inside the caller's transaction (which holds the
    database's write lock: two runs that start at once migrate it once). Refuses a newer one.
    A database of an older version (not a new one) is said to be migrated, as it starts and
    as it ends, through `say(line)`: building an index over years of rows takes a while."""
    found = version_of(connection)
    if found > VERSION:
        raise NewerSchema(f"--db {where} has schema version {found}, newer than this commbench's "
                          f"{VERSION}: upgrade commbench to write to it")
    if found == VERSION:
        return found
    if found == 0:
        schema_version.create(connection, checkfirst=True)
        connection.execute(schema_version.insert().values(version=0))
    elif say is not None:
        say(f"migrating --db {where} from schema version {found} to {VERSION} (once; "
            "the database is locked meanwhile)")
    began = time.monotonic()
    for step in range(found + 1, VERSION + 1):
        STEPS[step](connection)
    connection.execute(schema_version.update().values(version=VERSION))
    if found and say is not None:
        say(f"migrated --db {where} to schema version {VERSION} in "
            f"{time.monotonic() - began:.1f} s")
    return found


def readable(connection, where):
    """A reader's check of the database on `connection`, changing nothing: its version, which
    must be one this commbench reads (an older one lacks indexes only)."""
    found = version_of(connection)
    if found > VERSION:
        raise NewerSchema(f"--db {where} has schema version {found}, newer than this commbench's "
                          f"{VERSION}: upgrade commbench to read it")
    if found == 0:
        raise NotADatabase(f"--db {where} holds no commbench runs (no schema_version table): "
                           "is it the database a run's --db wrote?")
    return found
