"""The results database (docs/history.md): `--db URL` keeps every run with its provenance and
records; `report.py history` reads the figures run by run and names where they changed.

  schema   the tables, the schema version, the steps that migrate it forward
  store    connecting (SQLite file or PostgreSQL server), writing a run, reading, importing
  history  the series per op, configuration and size band, and their change points
"""

# The results database when no --db says one. Here, not in store.py, so that outputs.py reads it
# without importing SQLAlchemy: a run without a database (--dist torch) needs torch alone.
ENVIRONMENT = "COMMBENCH_DB"
