"""The results database's logic in-process (commbench/records/db, commbench/records/prometheus.py): the schema
and its migration, a run written and read back, import of results files written before, the
change points on series made up here, the Prometheus file parsed back by prometheus_client's own
parser. Real SQLite files in a temporary folder; no ranks."""

import argparse
import json
import math
import re
import sqlite3
from pathlib import Path

import numpy
import pytest
from prometheus_client.parser import text_string_to_metric_families

from commbench.records import outputs, results
from commbench.records.db import history, power, schema, store as stores
from commbench.settings import Settings
from commbench.records.prometheus import PrometheusFile
from commbench.report import history as report_history

pytestmark = pytest.mark.fast

FIXTURES = Path(__file__).parent / "fixtures"
META = {"ops": ["all_reduce"], "dist": "torch", "backend": "gloo", "device": "cpu",
        "world_size": 2, "hostnames": ["h0", "h0"], "reduce_op": "sum",
        "command": ["python", "all_reduce.py"], "versions": {"torch": "2.13.0"}}


def record(size, seconds, op="all_reduce"):
    return {"op": op, "dtype": "float32", "world_size": 2, "size_bytes": size,
            "numel": size // 4, "element_size": 4, "duration_s": seconds,
            "busbw_Bps": size / seconds, "throughput_Bps": 2 * size / seconds, "wrong": 0,
            "stats": {"min_s": seconds * 0.9, "cv": float("nan")}}


def write_run(store, figures, tag=None, complete=True):
    writer = stores.RunWriter(store, {**META, "start_time": "2026-12-03T05:00:00+0000"}, tag)
    for size, seconds in figures:
        writer.add(record(size, seconds))
    if complete:
        writer.close()
    return writer.run_id


def test_a_run_reads_back_as_written_nan_and_all(tmp_path):
    store = stores.Store(tmp_path / "r.db")
    run = write_run(store, [(8, 1e-5), (1 << 20, 1e-3)], tag="nightly")
    meta, records = store.records(run)
    assert meta["hostnames"] == ["h0", "h0"]
    assert records[0]["size_bytes"] == 8 and records[1]["busbw_Bps"] == (1 << 20) / 1e-3
    assert math.isnan(records[0]["stats"]["cv"])
    (row,) = store.runs(tag="nightly")
    assert row["complete"] and row["kind"] == "ops" and row["world_size"] == 2
    assert json.loads(row["command"]) == ["python", "all_reduce.py"]
    assert store.runs(tag="other") == []
    with sqlite3.connect(tmp_path / "r.db") as plain:
        assert plain.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    store.close()


def test_an_unclosed_run_keeps_its_records_marked_incomplete(tmp_path):
    store = stores.Store(tmp_path / "r.db")
    run = write_run(store, [(8, 1e-5), (16, 1e-5)], complete=False)
    store.close()  # the process died here
    store = stores.Store(tmp_path / "r.db")
    (row,) = store.runs()
    assert not row["complete"] and row["finished_at"] is None
    assert len(store.records(run)[1]) == 2
    store.close()


def test_an_old_schema_migrates_forward_and_a_newer_one_is_refused(tmp_path):
    path = tmp_path / "v1.db"
    engine_store = stores.Store(path)  # then take it back to version 1, as an old one wrote it
    engine_store.close()
    with sqlite3.connect(path) as plain:
        plain.execute("DROP INDEX ix_runs_tag")
        plain.execute("DROP INDEX ix_results_run")
        plain.execute("UPDATE schema_version SET version = 1")
    reader = stores.Store(path, read_only=True)  # a report that reads migrates nothing
    assert reader.migrated_from == 1 and reader.runs() == []
    reader.close()
    said = []
    store = stores.Store(path, say=said.append)
    assert store.migrated_from == 1
    store.close()
    assert said[0] == f"migrating --db {path} from schema version 1 to {schema.VERSION} (once; " \
        "the database is locked meanwhile)"
    assert re.fullmatch(rf"migrated --db {re.escape(str(path))} to schema version "
                        rf"{schema.VERSION} in \d+\.\d s", said[1]) and len(said) == 2
    with sqlite3.connect(path) as plain:
        assert plain.execute("SELECT version FROM schema_version").fetchone()[0] == schema.VERSION
        names = {r[0] for r in plain.execute("SELECT name FROM sqlite_master WHERE type='index'")}
        assert {"ix_runs_tag", "ix_results_run"} <= names
        plain.execute("UPDATE schema_version SET version = ?", (schema.VERSION + 1,))
    with pytest.raises(schema.NewerSchema) as refused:
        stores.Store(path)
    assert "newer than this commbench's" in str(refused.value) and "\n" not in str(refused.value)


def test_a_file_that_is_no_database_is_one_error(tmp_path):
    path = tmp_path / "not.db"
    path.write_text("hello " * 1000)
    with pytest.raises(stores.StoreError) as error:
        stores.Store(path)
    assert str(path) in str(error.value) and "\n" not in str(error.value)


def test_import_of_results_files_written_before_is_figure_for_figure(tmp_path):
    store = stores.Store(tmp_path / "r.db")
    for name in ("curves_2ranks.jsonl", "all_reduce_overlap.jsonl"):
        path = FIXTURES / name
        run = stores.import_file(store, path, tag="old")
        assert run is not None
        meta, records = store.records(run)
        file_meta, file_records = results.read_all(path)
        assert meta == {k: v for k, v in file_meta.items() if k != "type"}
        assert records == [{k: v for k, v in r.items() if k != "type"} for r in file_records]
        assert stores.import_file(store, path) is None  # once only
    assert len(store.runs(tag="old")) == 2
    store.close()


def test_a_csv_file_imports_too(tmp_path):
    path = tmp_path / "run.csv"
    writer = results.open_writer(str(path), dict(META))
    writer.add(record(1024, 2e-5))
    writer.close()
    store = stores.Store(tmp_path / "r.db")
    run = stores.import_file(store, path)
    (row,) = store.records(run)[1]
    assert row["size_bytes"] == 1024 and row["duration_s"] == 2e-5 and row["backend"] == "gloo"
    store.close()


def test_urls_map_to_their_drivers(tmp_path):
    assert stores.database_url("postgresql://u:secret@h/db").drivername == "postgresql+psycopg"
    assert stores.database_url("postgres://u@h/db").drivername == "postgresql+psycopg"
    url = stores.database_url(str(tmp_path / "sub" / "x.db"))
    assert url.drivername == "sqlite" and (tmp_path / "sub").is_dir()
    assert "secret" not in stores.shown(stores.database_url("postgresql://u:secret@h/db"))


def test_the_database_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("COMMBENCH_DB", "/tmp/x.db")
    assert outputs.database(Settings()) == "/tmp/x.db"
    assert outputs.database(Settings(db="/tmp/y.db")) == "/tmp/y.db"
    assert outputs.database(argparse.Namespace(db="/tmp/z.db")) == "/tmp/z.db"


# --------------------------------------------------------------------------- change points

def noisy(count, spread, rng, drop_at=None, drop=0.10):
    values = 1e9 * (1 + spread * rng.standard_normal(count))
    if drop_at is not None:
        values[drop_at:] *= 1 - drop
    return values


def test_a_drop_is_found_at_its_run_with_an_interval_around_it():
    rng = numpy.random.default_rng(5)
    hits = 0
    for _ in range(40):
        changes = history.change_points(noisy(100, 0.03, rng, drop_at=50))
        assert len(changes) >= 1
        nearest = min(changes, key=lambda c: abs(c.at - 50))
        hits += abs(nearest.at - 50) <= 2
        assert nearest.low < nearest.ratio < nearest.high
        assert nearest.low < 0.9 < nearest.high or abs(nearest.ratio - 0.9) < 0.03
    assert hits >= 36


def test_no_change_is_claimed_in_steady_series():
    rng = numpy.random.default_rng(6)
    claimed = sum(bool(history.change_points(noisy(100, 0.05, rng))) for _ in range(200))
    assert claimed <= 6  # alpha 0.01 per test, binary segmentation only below a first claim


def test_ten_runs_can_show_a_change_and_steady_short_series_rarely_do():
    """Below 40 runs Pettitt's p is drawn from permutations of the ranks: ten runs whose last
    five are all slower than the first five (1 order in 126) show the change (p about 0.008;
    the closed form said 0.066, and no series under 16 runs could show one), while short steady
    series claim one at about the 1% the test promises."""
    values = [1.0, 1.02, 0.99, 1.01, 0.98, 1.3, 1.31, 1.29, 1.32, 1.28]
    (change,) = history.change_points(values)
    assert change.at == 5 and change.p < 0.01 and change.ratio == pytest.approx(1.3)
    assert history.change_points(values[:4] + values[5:6] + values[4:5] + values[6:]) == []
    rng = numpy.random.default_rng(9)
    claimed = sum(bool(history.change_points(noisy(n, 0.05, rng)))
                  for n in (10, 12, 15, 20, 30, 39) for _ in range(100))
    assert claimed <= 18, claimed  # 6 expected of 600


def test_one_wild_run_is_not_a_change():
    values = noisy(60, 0.02, numpy.random.default_rng(7))
    values[30] *= 10
    assert history.change_points(values) == []


def test_too_few_runs_are_said_so(tmp_path):
    store = stores.Store(tmp_path / "r.db")
    for seconds in (1e-5, 1.1e-5):
        write_run(store, [(8, seconds), (16, seconds)])
    (series,) = history.judge(history.load(store))
    store.close()
    assert series.metric == "latency" and series.count == 2 and len(series.values) == 2
    assert series.values[0] == pytest.approx(1e-5)
    assert report_history.verdict(series).startswith(
        "no change claimed: 2 runs are too few to judge one (it takes 10)")


def test_history_bands_and_a_change_through_the_database(tmp_path):
    store = stores.Store(tmp_path / "r.db")
    rng = numpy.random.default_rng(8)
    for number in range(30):
        slow = 1.5 if number >= 20 else 1.0
        write_run(store, [(size, slow * (1e-5 + size / 1e9) * (1 + 0.01 * rng.standard_normal()))
                          for size in (8, 1024, 1 << 17, 1 << 21)], tag="lab")
    write_run(store, [(8, 1.0)], tag="elsewhere")
    found = history.judge(history.load(store, tag="lab"))
    store.close()
    assert [s.key[-1] for s in found] == ["large", "medium", "small"]
    for series in found:
        assert len(series.values) == 30
        (change,) = series.changes
        assert change.at == 20 and series.runs[change.at] == 21
        expected = 1.5 if series.metric == "latency" else 1 / 1.5
        assert change.ratio == pytest.approx(expected, rel=0.03)
    text = report_history.render(found, last=5)
    assert "(25 earlier runs not shown" in text and "<- changed" not in text.split("\n")[2]
    assert "changed at run 21 (2026-12-03T05:00:00+0000; 21 of the 30 runs here): +" in text
    assert re.search(r": \+(49|50)\.\d% \[\+\d+\.\d%, \+\d+\.\d%\] \(worse", text)
    assert "-33." in text and "-33." in text.split("medium")[1]  # bandwidth: 1 / 1.5


# --------------------------------------------------------------------------- what "no change" misses

def deviations_of(spread, count=40, seed=4):
    """`count` run-to-run deviations (figure over median) of robust spread `spread` exactly."""
    logs = numpy.random.default_rng(seed).standard_normal(count)
    ratios = numpy.exp(logs)
    ratios /= numpy.median(ratios)
    return 1 + (ratios - 1) * spread / (1.4826 * numpy.median(numpy.abs(ratios - 1)))


def counted(series, at):
    """As benchmarks/history.py counts: change_points places a change within 2 runs of `at`."""
    return numpy.array([any(abs(c.at - at) <= 2 for c in history.change_points(row))
                        for row in series])


@pytest.mark.parametrize("runs,factor", [(10, 0.4), (17, 0.7), (17, 1.6), (45, 0.8),
                                         (45, 1.25)])
def test_the_models_count_is_change_points_own(runs, factor):
    """power.found (the first split of every series at once) counts what change_points finds."""
    draws = numpy.random.default_rng(runs).choice(deviations_of(0.3), (120, runs))
    draws[:, runs // 2:] *= factor
    found = power.found(draws, runs // 2)
    assert 0 < found.sum() < len(found)  # neither all nor none: the count is tried both ways
    assert (found == counted(draws, runs // 2)).all()


def test_the_smallest_change_found_is_where_95_percent_of_series_find_it():
    noise, runs = deviations_of(0.2), 20
    drop, rise = power.smallest_found(noise, runs)
    draws = numpy.random.default_rng(0).choice(noise, (power.SERIES, runs))  # the model's draws
    for factor, found in (((1 - drop), True), ((1 - drop) ** 0.9, False),
                          ((1 + rise), True), ((1 + rise) ** 0.9, False)):
        stepped = draws.copy()
        stepped[:, runs // 2:] *= factor
        assert (counted(stepped, runs // 2).mean() >= 0.95) == found, factor


def test_the_smallest_change_found_grows_with_the_spread_and_shrinks_with_more_runs():
    figures = {spread: power.smallest_found(deviations_of(spread), 20)
               for spread in (0.05, 0.2, 0.5)}
    drops, rises = zip(*figures.values())
    assert list(drops) == sorted(drops) and list(rises) == sorted(rises), figures
    assert drops[0] < 0.25 < drops[-1], figures
    ten, twenty = (power.smallest_found(deviations_of(0.2), n) for n in (10, 20))
    # 10 runs find a change only where the last 5 are all beyond the first 5; 20 runs less
    assert ten[0] > twenty[0] and ten[1] > twenty[1], (ten, twenty)
    assert power.smallest_found(deviations_of(0.2), 9) is None  # too short to judge


def test_no_change_says_the_smallest_change_it_could_have_shown(tmp_path):
    store = stores.Store(tmp_path / "r.db")
    noise = deviations_of(0.25, count=14)
    for ratio in noise:  # 14 runs of one command, no change: spread 25%
        write_run(store, [(8, 1e-5 * ratio)])
    (series,) = history.judge(history.load(store))
    store.close()
    assert series.changes == [] and series.spread == pytest.approx(0.25, rel=1e-6)
    drop, rise = power.smallest_found(noise, 14)
    assert 0.1 < drop < 0.9 and 0.1 < rise < 9
    assert report_history.verdict(series) == (
        f"no change over 14 runs (run-to-run spread 25.0%; Pettitt p >= 0.01); a change smaller "
        f"than -{drop:.0%} or +{rise:.0%} could have been missed at this spread: a step of that "
        f"size halfway through 14 runs is found within 2 runs of it in 95% of series with this "
        f"series' run-to-run deviations")
    (data,) = json.loads(report_history.as_json([series]))
    assert data["smallest_found"] == {"drop": drop, "rise": rise, "runs": 14, "within_runs": 2,
                                      "share": 0.95, "series": 200}


def test_a_long_series_says_how_many_runs_the_model_drew():
    series = history.Series(("all_reduce",) + (None,) * 9, "latency", (8,), 1)
    series.values = list(1e-5 * numpy.resize(deviations_of(0.1), 80))
    series.runs, series.started = list(range(80)), ["-"] * 80
    history.judge([series])
    assert not series.changes
    figures, drawn = power.of_series(series)
    assert drawn == power.LONGEST == 50
    assert figures == power.smallest_found(history.deviations(series.values, []), 50)
    assert "halfway through 50 runs (the model draws at most 50; 80 here) is found within 2 " \
           "runs" in report_history.verdict(series)


# --------------------------------------------------------------------------- Prometheus

def test_the_prometheus_file_parses_back_with_its_figures(tmp_path):
    path = tmp_path / "commbench.prom"
    sink = PrometheusFile(str(path), META, "nightly")
    sink.add(record(8, 1e-5))
    sink.add({**record(1024, 3e-5), "window": 0})  # a --repeat window: not the figure
    sink.add(record(1024, 2e-5))
    sink.write()
    families = {f.name: f for f in text_string_to_metric_families(path.read_text())}
    busbw = {s.labels["size_bytes"]: s
             for s in families["commbench_busbw_bytes_per_second"].samples}
    assert busbw["1024"].value == 1024 / 2e-5
    assert busbw["8"].labels == {"backend": "gloo", "dist": "torch", "tag": "nightly",
                                 "op": "all_reduce", "dtype": "float32", "groups": "world",
                                 "group": "", "size_bytes": "8"}
    latency = {s.labels["size_bytes"]: s.value
               for s in families["commbench_latency_seconds"].samples}
    assert latency == {"8": 1e-5, "1024": 2e-5}
    assert not list(tmp_path.glob("*.tmp*"))  # written beside and renamed


def test_doctor_findings_are_gauges_with_host_labels(tmp_path):
    path = tmp_path / "doctor.prom"
    sink = PrometheusFile(str(path), {**META, "ops": ["doctor"]}, None)
    sink.add({"type": "doctor", "phase": "intra", "host": "n0", "busbw_Bps": 5e9,
              "latency_s": 1e-5})
    sink.add({"type": "doctor", "phase": "pairs", "hosts": ["n0", "n1"], "latency_s": 2e-5,
              "forward_Bps": 1e9, "backward_Bps": 2e9, "both_Bps": 3e9})
    sink.add({"type": "doctor", "phase": "fleet", "round": 3, "hosts": ["n0", "n1", "n2"],
              "busbw_Bps": 7e8})  # --fleet-wide's collective: not a pair
    sink.add({"type": "verdict", "healthy": False, "suspect_hosts": ["n1"], "unreachable": [],
              "suspect_links": [["n0", "n1"]], "suspect_switches": ["s2"]})
    sink.write()
    samples = [s for f in text_string_to_metric_families(path.read_text()) for s in f.samples]
    named = {(s.name, s.labels.get("host"), s.labels.get("direction")): s.value for s in samples}
    assert named[("commbench_doctor_healthy", None, None)] == 0
    assert named[("commbench_doctor_suspect_host", "n1", None)] == 1
    assert named[("commbench_doctor_suspect_host", "n0", None)] == 0
    assert named[("commbench_doctor_link_bytes_per_second", None, "backward")] == 2e9
    assert named[("commbench_doctor_host_busbw_bytes_per_second", "n0", None)] == 5e9
    assert named[("commbench_doctor_suspect_link", None, None)] == 1
    switch = [s for s in samples if s.name == "commbench_doctor_suspect_switch"]
    assert [(s.labels["switch"], s.value) for s in switch] == [("s2", 1.0)]


# --------------------------------------------------------------------------- compare --db

def results_file(path, seconds_by_size):
    writer = results.open_writer(str(path), {**META, "dtype": "float32"})
    for size, seconds in seconds_by_size:
        writer.add(record(size, seconds))
    writer.close()
    return str(path)


def test_compare_of_single_runs_knows_the_run_to_run_spread_from_the_database(tmp_path, capsys):
    from commbench.report.cli import main as report
    sizes = (8, 1024, 1 << 20, 1 << 21)
    store = stores.Store(tmp_path / "r.db")
    rng = numpy.random.default_rng(9)
    for _ in range(12):  # the same command again and again: 10% apart run to run
        write_run(store, [(s, (1e-5 + s / 1e9) * math.exp(0.1 * rng.standard_normal()))
                          for s in sizes])
    store.close()
    a = results_file(tmp_path / "a.jsonl", [(s, 1e-5 + s / 1e9) for s in sizes])
    near = results_file(tmp_path / "near.jsonl", [(s, 1.1 * (1e-5 + s / 1e9)) for s in sizes])
    far = results_file(tmp_path / "far.jsonl", [(s, 3 * (1e-5 + s / 1e9)) for s in sizes])
    assert report(["compare", a, near]) == 0
    out = capsys.readouterr().out
    assert "B/A 1.100 at small messages, B/A 1.100 at large messages (geometric means); no " \
           "verdict: one window a run cannot tell" in out and "slower" not in out
    assert report(["compare", a, near, "--db", str(tmp_path / "r.db")]) == 0
    out = capsys.readouterr().out
    assert "no difference beyond the run-to-run noise at small messages (+10% [" in out
    assert "against the spread of 12 runs in the database" in out and "no verdict" not in out
    missed = re.findall(r"\): a change smaller than -(\d+)% or \+(\d+)% could have been missed at "
                        r"this spread: a step of that size halfway through 12 runs is found "
                        r"by report.py history within 2 runs of it in 95% of series with the database's runs' "
                        r"run-to-run deviations", out)
    assert len(missed) == 2, out  # small and large messages: each no difference, each its power
    assert report(["compare", a, far, "--db", str(tmp_path / "r.db")]) == 0
    out = capsys.readouterr().out
    assert "slower at small messages: +200% [" in out and "slower at large messages: +200% [" in out


def test_a_missing_database_is_one_line_exit_2_and_reading_creates_nothing(tmp_path, capsys):
    """report.py history --db with a mistyped path (issue 53): one line, exit 2, no file made;
    compare --db and html --db alike. A database that is there is read without a write."""
    from commbench.report.cli import main as report
    a = results_file(tmp_path / "a.jsonl", [(8, 1e-5)])
    for where in (tmp_path / "nonexist.db", tmp_path / "no" / "such" / "folder.db"):
        for argv in (["history", "--db", str(where)], ["compare", a, a, "--db", str(where)],
                     ["html", a, "--db", str(where), "-o", str(tmp_path / "r.html")]):
            assert report(argv) == 2, argv
            err = capsys.readouterr().err
            assert err == f"report.py: error: --db {where}: no such database file; a report " \
                "reads a database and creates none (check the path; a run's --db writes one)\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.jsonl"]
    path = tmp_path / "r.db"
    store = stores.Store(path)
    write_run(store, [(8, 1e-5), (16, 1e-5)])
    store.close()
    before = path.read_bytes()
    assert report(["history", "--db", str(path)]) == 0
    assert "all_reduce float32 sum, torch gloo cpu, 2 ranks" in capsys.readouterr().out
    assert path.read_bytes() == before
    path.chmod(0o444)  # a database a reader may not write (another user's) reads all the same
    try:
        assert report(["history", "--db", str(path), "--format", "json"]) == 0
    finally:
        path.chmod(0o644)
    empty = tmp_path / "empty.db"
    empty.touch()
    assert report(["history", "--db", str(empty)]) == 1
    assert "holds no commbench runs" in capsys.readouterr().err and empty.stat().st_size == 0


def test_beside_a_commands_own_writer_a_run_stopped_by_an_error_stays_incomplete(tmp_path):
    """replay.py's and parallel_bench.py's --db (outputs.Beside): the rows as the file gets them;
    closed as an error stops the run, the run incomplete and no Prometheus file written."""
    class Lines:
        def __init__(self):
            self.records, self.closed = [], False

        def write(self, record):
            self.records.append(record)

        def close(self):
            self.closed = True

    path = str(tmp_path / "r.db")
    for fails in (False, True):
        own, prom = Lines(), tmp_path / f"fails-{fails}.prom"
        extras = outputs.Outputs(db=stores.RunWriter(stores.Store(path), {"kind": "replay"}),
                                 prometheus=PrometheusFile(str(prom), {}, None))
        writer = outputs.Beside(own, extras)
        try:
            try:
                writer.write({"type": "replay_summary", "pass_s": {"median": 0.5}})
                if fails:
                    raise RuntimeError("stopped")
            finally:
                writer.close()
        except RuntimeError:
            pass
        assert own.closed and own.records == [{"type": "replay_summary",
                                               "pass_s": {"median": 0.5}}]
        assert prom.exists() is not fails
    store = stores.Store(path)
    try:
        runs = store.runs()
        assert [(r["kind"], r["complete"]) for r in runs] == [("replay", True), ("replay", False)]
        assert store.records(runs[1]["id"])[1] == own.records
    finally:
        store.close()
