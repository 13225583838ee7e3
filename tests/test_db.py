"""--db, --prometheus, report.py import and history end to end (docs/history.md): real runs of
the suite writing to a real SQLite file and to a real PostgreSQL server that the test starts
(Debian's postgresql, installed by scripts/test-services.sh up); what a user reads back (the
database's records beside the results file's, the Prometheus file through prometheus_client's
parser, the history's lines, the one line on stderr and the exit status).

The logic (schema, migration, change points, the Prometheus format) is in
tests/test_logic_history.py, in-process."""

import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from support import ROOT, assert_no_traceback, base_env, free_port, launch, spawn

from commbench.records import results
from commbench.records.db import schema, store as stores
from commbench.report.cli import main as report

SCAN = ("--dist", "torch", "--scan", "--maxsize", "8", "--trials", "3", "--warmups", "1")


def same_as_file(store, run_id, path):
    meta, records = store.records(run_id)
    file_meta, file_records = results.read_all(path)
    assert meta == {k: v for k, v in file_meta.items() if k != "type"}
    assert records == [{k: v for k, v in r.items() if not (k == "type" and v == "result")}
                       for r in file_records]
    return records


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    """One real 2-rank run of two ops, into a results file, an SQLite database and a Prometheus
    file at once."""
    folder = tmp_path_factory.mktemp("db")
    paths = {"output": folder / "run.jsonl", "db": folder / "commbench.db",
             "prometheus": folder / "commbench.prom"}
    run = launch("run_all.py", *SCAN, "--all-reduce", "--all-gather", "--tag", "ci",
                 *(f"--{name}={path}" for name, path in paths.items()), nproc=2)
    assert run.returncode == 0, run.stderr
    return run, paths


def test_the_database_holds_what_the_results_file_holds(two_ranks):
    run, paths = two_ranks
    store = stores.Store(paths["db"])
    (row,) = store.runs(tag="ci")
    assert row["complete"] and row["kind"] == "ops" and row["world_size"] == 2
    assert row["backend"] == "gloo" and row["dist"] == "torch"
    assert json.loads(row["hosts"]) == json.loads(json.dumps(results.read(paths["output"])[0]
                                                              ["hostnames"]))
    records = same_as_file(store, row["id"], paths["output"])
    store.close()
    assert {r["op"] for r in records} == {"all_reduce", "all_gather"}
    assert len(records) == 2 * 7  # sizes 2^1 .. 2^7 elements x 2 ranks, two ops


def test_the_prometheus_file_has_every_size_figure(two_ranks):
    _, paths = two_ranks
    _, records = results.read(paths["output"])
    families = {f.name: f for f in text_string_to_metric_families(paths["prometheus"].read_text())}
    busbw = {(s.labels["op"], int(s.labels["size_bytes"])): s.value
             for s in families["commbench_busbw_bytes_per_second"].samples}
    assert busbw == {(r["op"], r["size_bytes"]): r["busbw_Bps"] for r in records}
    assert {s.labels["tag"] for s in families["commbench_latency_seconds"].samples} == {"ci"}


def test_history_shows_the_run(two_ranks, capsys):
    _, paths = two_ranks
    assert report(["history", "--db", str(paths["db"]), "--op", "all_reduce"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("all_reduce float32 sum, torch gloo cpu, 2 ranks: small messages "
                          "(16 B..1 KiB, 7 sizes), latency")
    assert "verdict: no change claimed: 1 run is too few to judge one (it takes 10)" in out
    assert "all_gather" not in out


def test_two_runs_writing_one_sqlite_file_at_once_both_land(tmp_path):
    db = tmp_path / "shared.db"
    procs = [spawn([sys.executable, "all_reduce.py", *SCAN, "--backend", "gloo",
                    "--maxsize", "10", "--db", str(db), "--output",
                    str(tmp_path / f"run{n}.jsonl")], base_env(MASTER_PORT=str(free_port())))
             for n in range(2)]  # forked from the fork server, both at once
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    store = stores.Store(db)
    runs = store.runs()
    assert [r["complete"] for r in runs] == [True, True]
    by_file = {}
    for row in runs:
        command = json.loads(row["command"])
        by_file[command[command.index("--output") + 1]] = row["id"]
    for n in range(2):
        assert len(same_as_file(store, by_file[str(tmp_path / f"run{n}.jsonl")],
                                tmp_path / f"run{n}.jsonl")) == 9
    store.close()


def _rows_of(db, op):
    import sqlite3
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as plain:
            return plain.execute("SELECT count(*) FROM results WHERE op = ?", (op,)).fetchone()[0]
    except sqlite3.Error:  # not created yet
        return 0


def test_a_killed_run_keeps_its_finished_ops_marked_incomplete(tmp_path):
    db, output = tmp_path / "killed.db", tmp_path / "killed.jsonl"
    # every trial 50 ms late: all_reduce's 5 sizes take about a second, all_gather's as long
    proc = spawn([sys.executable, "run_all.py", "--dist", "torch", "--backend", "gloo",
                  "--scan", "--maxsize", "6", "--trials", "3", "--warmups", "1",
                  "--all-reduce", "--all-gather", "--db", str(db), "--output", str(output)],
                 base_env(MASTER_PORT=str(free_port()), COMMBENCH_INJECT_DELAY="0:0.05"))
    deadline = time.monotonic() + 120
    while not _rows_of(db, "all_gather"):  # committed: the file gets each record just before
        assert proc.poll() is None and time.monotonic() < deadline, "ended before all_gather"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    store = stores.Store(db)
    (row,) = store.runs()
    assert not row["complete"] and row["finished_at"] is None
    records = store.records(row["id"])[1]
    store.close()
    assert [r["size_bytes"] for r in records if r["op"] == "all_reduce"] == [8, 16, 32, 64, 128]
    assert any(r["op"] == "all_gather" for r in records)


def test_an_unreachable_server_is_one_line_and_the_results_file_is_written(tmp_path):
    output = tmp_path / "run.jsonl"
    port = free_port()  # nothing listens there
    run = launch("all_reduce.py", *SCAN, "--maxsize", "4", "--output", output,
                 "--db", f"postgresql://commbench:secret@127.0.0.1:{port}/commbench")
    assert run.returncode == 0, run.stderr
    lines = [line for line in run.stderr.splitlines() if "--db" in line]
    assert len(lines) == 1 and lines[0].startswith(f"commbench: warning: --db postgresql://"
                                                   f"commbench:***@127.0.0.1:{port}/commbench "
                                                   "cannot be reached: ")
    assert lines[0].endswith(f"the run goes on without the database (its results are in {output})")
    assert len(results.read(output)[1]) == 3


def test_a_database_of_a_newer_schema_is_refused_in_one_line(tmp_path):
    db = tmp_path / "newer.db"
    stores.Store(db).close()
    import sqlite3
    with sqlite3.connect(db) as plain:
        plain.execute("UPDATE schema_version SET version = ?", (schema.VERSION + 1,))
    run = launch("all_reduce.py", *SCAN, "--maxsize", "4", "--db", db)
    assert run.returncode == 1
    assert_no_traceback(run)
    assert run.stderr.strip().splitlines()[-1] == (
        f"commbench: error: --db {db} has schema version {schema.VERSION + 1}, newer than this "
        f"commbench's {schema.VERSION}: upgrade commbench to write to it")
    assert run.stdout == ""


# --------------------------------------------------------------------------- PostgreSQL

def _postgres_bin():
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


@pytest.fixture(scope="module")
def postgres():
    """A PostgreSQL server of Debian's package on a free port, in a folder of its own, run as the
    postgres user (it refuses root); its URL. Skipped where it is not installed (failed under
    CI's COMMBENCH_REQUIRE_LAUNCHERS: scripts/test-services.sh up installs it)."""
    binaries = _postgres_bin()
    as_user = []
    if os.geteuid() == 0:
        as_user = ["runuser", "-u", "postgres", "--"]
    if binaries is None or (as_user and shutil.which("runuser") is None):
        why = "PostgreSQL is not installed here (scripts/test-services.sh up installs it, as root)"
        if os.environ.get("COMMBENCH_REQUIRE_LAUNCHERS"):
            pytest.fail(why)
        pytest.skip(why)
    folder = Path(tempfile.mkdtemp(prefix="commbench-pg-"))
    if as_user:
        shutil.chown(folder, "postgres", "postgres")
    data, port = folder / "data", free_port()
    subprocess.run(as_user + [str(binaries / "initdb"), "-D", str(data), "-A", "trust", "-U",
                              "commbench", "--no-sync"], check=True, capture_output=True)
    subprocess.run(as_user + [str(binaries / "pg_ctl"), "-D", str(data), "-l", str(folder / "log"),
                              "-w", "-o", f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 "
                                          "-c fsync=off", "start"],
                   check=True, capture_output=True)
    try:
        yield f"postgresql://commbench@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(as_user + [str(binaries / "pg_ctl"), "-D", str(data), "-m", "immediate",
                                  "stop"], capture_output=True)
        shutil.rmtree(folder, ignore_errors=True)


def test_postgresql_holds_a_real_run_and_old_files_and_their_history(postgres, tmp_path, capsys):
    output = tmp_path / "run.jsonl"
    run = launch("all_reduce.py", *SCAN, "--output", output, "--db", postgres, "--tag", "pg")
    assert run.returncode == 0, run.stderr
    assert "--db" not in run.stderr
    fixture = ROOT / "tests" / "fixtures" / "curves_2ranks.jsonl"
    assert report(["import", str(fixture), "--db", postgres, "--tag", "old"]) == 0
    store = stores.Store(postgres)
    (row,) = store.runs(tag="pg")
    assert row["complete"]
    same_as_file(store, row["id"], output)
    (old,) = store.runs(tag="old")
    same_as_file(store, old["id"], fixture)
    store.close()
    capsys.readouterr()
    assert report(["history", "--db", postgres, "--tag", "pg", "--format", "json"]) == 0
    series = json.loads(capsys.readouterr().out)
    assert [s["key"]["band"] for s in series] == ["small"]
    _, records = results.read(output)
    assert series[0]["sizes"] == [records[0]["size_bytes"], records[-1]["size_bytes"]]


def test_postgresql_reports_read_only_and_a_missing_database_is_exit_2(postgres, capsys):
    """A report reads PostgreSQL in read-only transactions; a database that is not on the server
    is one line and exit 2, as a missing SQLite file is, and nothing is created."""
    fixture = ROOT / "tests" / "fixtures" / "curves_2ranks.jsonl"
    assert report(["import", str(fixture), "--db", postgres]) == 0  # or imported before
    reader = stores.Store(postgres, read_only=True)
    from sqlalchemy import text
    with reader.connection.begin():
        assert reader.connection.execute(text("SHOW transaction_read_only")).scalar() == "on"
    assert any((row["source"] or "").endswith("curves_2ranks.jsonl") for row in reader.runs())
    reader.close()
    capsys.readouterr()
    missing = postgres.rsplit("/", 1)[0] + "/nonexist"
    assert report(["history", "--db", missing]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("report.py: error: --db postgresql://") and \
        'database "nonexist" does not exist' in err, err
