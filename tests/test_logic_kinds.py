"""report.py's kinds of input in-process (commbench/report/kinds.py): each kind recognised from
a small file written to tmp_path, the order of KINDS where two kinds' tests would both take a
file, and the one line of every kind that holds no run, as `load_run` (compare, plot,
strategy) and `section_of` (html) say it. No ranks, no report.py."""

import json

import pytest

from commbench.report import doctor, kinds
from commbench.report.runs import ReportError
from support import ROOT

pytestmark = pytest.mark.fast

FIXTURES = ROOT / "tests" / "fixtures"
TABLE = """---- Performance of all_reduce on 2 devices ------------------------------------------------
Size (Bytes)         Description               Duration             Throughput (Gbps)    BusBW (Gbps)
----------------------------------------------------------------------------------------------------
16.0 B               4x4                       10.174 us            0.025                0.013
"""
SUMMARY = {"summary": {"all_reduce": {"4096": {"count": 3, "avg_latency_ms": 1.0}}},
           "metadata": {"world_size": 2, "rank": 0}}
DOCTOR = [{"type": "meta", "ops": ["doctor"], "hosts": ["h0", "h1"], "bw_unit": "Gbps"},
          {"type": "doctor", "phase": "pairs", "hosts": ["h0", "h1"], "forward_Bps": 1e9,
           "backward_Bps": 1e9, "both_Bps": 1e9, "latency_s": 5e-5}]


def lines(*records):
    return "".join(json.dumps(r) + "\n" for r in records)


# (name, file name, content): one small file of each kind
EXAMPLES = [
    ("replay", "replay.jsonl", lines({"type": "meta", "kind": "replay"},
                                     {"type": "replay_summary"})),
    ("deepspeed-logger", "rank0.json", json.dumps(SUMMARY)),
    ("deepspeed-raw", "raw.json", json.dumps({"all_reduce": {"8": [1, [0.5], [0.0], [0.0]]}})),
    ("report-page", "report.html",
     "<!DOCTYPE html>\n<html><head><title>commbench report: 1 run</title></head></html>\n"),
    ("html-page", "page.html", "<html><head><title>x</title></head><body></body></html>"),
    ("image", "curves.png", "\x89PNG\r\n\x1a\n"),
    ("image", "curves.svg", '<?xml version="1.0"?>\n<svg></svg>\n'),
    ("image", "curves.pdf", "%PDF-1.4\n"),
    ("commbench-trace", "rank0.json", json.dumps({"format": "commbench-trace", "calls": []})),
    ("execution-trace", "et.json", json.dumps({"schema": "1.0.1", "nodes": []})),
    ("param-trace", "param.json", json.dumps([{"comms": "all_reduce", "in_msg_size": 4}])),
    ("doctor", "doctor.jsonl", lines(*DOCTOR)),
    ("strategies", "pb.jsonl", lines({"type": "meta", "kind": "strategies"})),
    ("results", "r.jsonl", lines({"type": "meta", "dist": "torch"})),
    ("results", "r.csv", "op,size_bytes\n"),
    ("results", "r.json", json.dumps({"meta": {}, "results": []})),
    ("quoted-tables", "README.md", "A run:\n\n```\n" + TABLE + "```\n"),
    ("table", "saved.txt", TABLE),
    ("nccl-tests", "all_reduce_perf.txt", "# nccl-tests\n#  size count type redop\n"),
]


def written(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("kind,name,text", EXAMPLES, ids=[f"{k}-{n}" for k, n, _ in EXAMPLES])
def test_each_kind_is_recognised_from_its_content(tmp_path, kind, name, text):
    assert kinds.kind_of(written(tmp_path, name, text)).name == kind


def test_every_kind_has_an_example_and_says_what_it_holds():
    names = [kind.name for kind in kinds.KINDS]
    assert len(set(names)) == len(names)
    assert set(names) == {kind for kind, _, _ in EXAMPLES}
    for kind in kinds.KINDS:
        # a run, or the one line that says why there is none; a section only of a kind that
        # can say what it holds
        assert (kind.run is None) == bool(kind.refusal), kind.name
        assert kind.section is not None or kind.run is None, kind.name
    assert [k.name for k in kinds.KINDS if k.compare] == ["replay"]
    assert {k.name: k.plot for k in kinds.KINDS if k.plot} == {"doctor": doctor.heatmap}


@pytest.mark.parametrize("kind,name,text,expected", [
    ("doctor", "doctor.csv", "op,size_bytes\n", "results"),  # a .csv has no meta: no doctor run
    ("doctor", "doctor.txt", lines(*DOCTOR), None),  # named as no results file
    ("table", "saved.jsonl", TABLE, "results"),  # the name says a results file
    ("nccl-tests", "perf.json", "# nccl-tests\n", "results"),
    ("deepspeed-logger", "rank0.jsonl", json.dumps(SUMMARY), "deepspeed-logger"),
    ("deepspeed-logger", "rank0.log", json.dumps(SUMMARY), "deepspeed-logger"),
    ("report-page", "page.json", "<!doctype html><html><title>commbench report</title>",
     "report-page"),
    ("replay", "replay.txt", lines({"type": "meta", "kind": "replay"}), "replay"),
    ("strategies", "pb.json", json.dumps({"meta": {"kind": "strategies"}, "results": []}),
     "strategies"),
    ("results", "list.json", json.dumps([{"a": 1}]), "results"),  # no trace: no "comms"
])
def test_the_order_of_kinds_where_two_tests_could_take_a_file(tmp_path, kind, name, text,
                                                                expected):
    path = written(tmp_path, name, text)
    if expected is None:
        with pytest.raises(ReportError, match="neither a results file"):
            kinds.kind_of(path)
    else:
        assert kinds.kind_of(path).name == expected


def test_a_results_file_that_is_not_utf8_is_no_doctor_run(tmp_path):
    """As commbench.records.results reads it: a doctor.py run's meta in a file that is not UTF-8 is not
    read, so the file is taken as a results file (whose reader says what is wrong)."""
    path = tmp_path / "doctor.jsonl"
    path.write_bytes(lines(*DOCTOR).encode() + b"\xff\n")
    assert kinds.kind_of(str(path)).name == "results"


REFUSALS = {
    "deepspeed-raw": "DeepSpeed's get_raw_data() keeps no world size: save "
                     "log_summary(return_dict=True) for report.py (replay.py reads both)",
    "report-page": "a page report.py html wrote, not a results file: give the runs it shows",
    "html-page": "an HTML page, not a results file (report.py reads --output files, saved "
                 "tables of this suite and nccl-tests output)",
    "image": "an image or a PDF, not a results file (report.py reads --output files, saved "
             "tables of this suite and nccl-tests output)",
    "commbench-trace": "a trace of commbench.trace.record (replay.py's input), not a results "
                       "file: `replay.py TRACE_DIR --output replay.jsonl` replays it into one",
    "execution-trace": "a PyTorch execution trace (replay.py's input), not a results file: "
                       "`replay.py TRACE_DIR --output replay.jsonl` replays it into one",
    "param-trace": "a PARAM basic comms trace (replay.py's input), not a results file: "
                   "`replay.py TRACE_DIR --output replay.jsonl` replays it into one",
    "doctor": "a doctor.py run (hosts and links, not sizes): `report.py plot` draws its heatmaps",
    "quoted-tables": "a document that quotes tables (in markdown code blocks), not a saved table "
                     "of this suite; give a run's own stdout (> results.txt) or its --output file",
}


@pytest.mark.parametrize("kind", sorted(REFUSALS))
def test_each_kind_that_holds_no_run_refuses_in_one_line(tmp_path, kind):
    name, text = next((n, t) for k, n, t in EXAMPLES if k == kind)
    path = written(tmp_path, name, text)
    with pytest.raises(ReportError) as caught:
        kinds.load_run(path)
    assert str(caught.value) == f"{path}: {REFUSALS[kind]}"
    if kind != "doctor":  # html shows a doctor.py run: its heatmaps and verdict
        with pytest.raises(ReportError) as caught:
            kinds.section_of(path)
        assert str(caught.value) == f"{path}: {REFUSALS[kind]}"


def test_a_file_that_cannot_be_read_or_is_of_no_kind_is_one_line(tmp_path):
    missing, folder = tmp_path / "none.jsonl", tmp_path / "folder"
    folder.mkdir()
    notes = written(tmp_path, "notes.txt", "hello\n")
    for path, said in ((missing, f"cannot read {missing}: No such file or directory"),
                       (folder, f"cannot read {folder}: Is a directory"),
                       (notes, f"{notes}: neither a results file, a saved table of this suite, "
                               "nor nccl-tests output")):
        for read in (kinds.kind_of, kinds.load_run, kinds.section_of):
            with pytest.raises(ReportError) as caught:
                read(str(path))
            assert str(caught.value) == said


def test_a_replay_holds_no_run_of_sizes_and_compares_only_with_a_replay(tmp_path):
    replay = written(tmp_path, "replay.jsonl", lines({"type": "meta", "kind": "replay"}))
    with pytest.raises(ReportError, match="the meta record alone"):
        kinds.load_run(replay)  # read as the results file its name says it is
    with pytest.raises(ReportError, match="neither a results file"):
        kinds.load_run(written(tmp_path, "replay.txt", lines({"type": "meta", "kind": "replay"})))
    compared = kinds.kind_of(replay).compare
    other = str(FIXTURES / "curves_2ranks.jsonl")
    for b in (other, str(tmp_path / "none.jsonl")):  # a run; a file that is not there
        with pytest.raises(ReportError) as caught:
            compared(replay, b, 0.05, "text")
        assert str(caught.value) == f"{replay} is a replay (replay.py --output) and {b} is " \
                                    "not: compare two replays of one trace"


def test_the_runs_each_kind_reads(tmp_path):
    """The kinds that hold a run read it with their reader (runs.from_*)."""
    assert kinds.load_run(str(FIXTURES / "all_reduce_perf.txt")).label == "nccl-tests n=2"
    assert kinds.load_run(written(tmp_path, "s.txt", TABLE)).ops["all_reduce"][16].size == 16
    logged = kinds.load_run(written(tmp_path, "rank0.json", json.dumps(SUMMARY)))
    assert logged.label == "DeepSpeed comms logger n=2" and set(logged.ops) == {"all_reduce"}
    curves = kinds.load_run(str(FIXTURES / "curves_2ranks.jsonl"))
    assert curves.world_size == 2 and "all_reduce" in curves.ops
    with pytest.raises(ReportError, match="the meta record alone"):  # read as a results file
        kinds.load_run(str(written(tmp_path, "pb.jsonl",
                                   lines({"type": "meta", "kind": "strategies"}))))


def test_sections_of_the_kinds_that_show_without_a_run(tmp_path):
    section, run = kinds.section_of(written(tmp_path, "doctor.jsonl", lines(*DOCTOR)))
    assert (section["kind"], run) == ("doctor", None)
    section, run = kinds.section_of(str(FIXTURES / "strategies_2ranks.jsonl"))
    assert (section["kind"], run) == ("table", None) and "strategies" in section["tables"]
    with pytest.raises(ReportError, match="no strategy measured in it$"):
        kinds.section_of(written(tmp_path, "pb.jsonl", lines({"type": "meta",
                                                               "kind": "strategies"})))
    section, run = kinds.section_of(written(tmp_path, "saved.txt", TABLE))
    assert section["what"] == [("source", "a saved table or nccl-tests output (no meta record)")]
    assert run.ops["all_reduce"][16].size == 16


@pytest.mark.parametrize("name", ["rank0.json", "rank0.jsonl", "rank0.log"])
def test_a_deepspeed_logger_summary_is_a_section_whatever_its_name(tmp_path, name):
    """docs/replay.md saves it as comms/rank0.json: html refused that name as a results file
    without a meta record ("('meta')"), while compare and plot read it."""
    section, run = kinds.section_of(written(tmp_path, name, json.dumps(SUMMARY)))
    assert section["what"] == [("source", "DeepSpeed's comms logger, one rank's "
                                          "log_summary(return_dict=True)")]
    assert list(section["tables"]) == ["all_reduce"] and run.world_size == 2
    assert section["tables"]["all_reduce"]["rows"][0][1]["text"] == "1.000 ms"


def test_a_json_list_named_as_results_is_one_line_in_every_command(tmp_path):
    """A JSON list that is no trace, saved as .json: commbench.records.results cannot read it (its meta
    is looked up in a list). html's section said so with a traceback before kinds.py."""
    path = written(tmp_path, "list.json", json.dumps([{"a": 1}, {"b": 2}]))
    said = f"{path}: not a results file of this suite (TypeError: "
    for read in (kinds.load_run, kinds.section_of):
        with pytest.raises(ReportError) as caught:
            read(path)
        assert str(caught.value).startswith(said)
    for command in ("trials", "buckets"):
        with pytest.raises(ReportError) as caught:
            kinds.records_of(path, command, ("results",))
        assert str(caught.value).startswith(said)


def test_the_commands_that_read_records_name_what_else_they_were_given(tmp_path):
    """trials, buckets and strategy --measured read a file's records, not its Run: a file of
    another kind is one line naming what it is and what the command reads (a saved table gave
    trials a traceback before)."""
    table = written(tmp_path, "saved.txt", TABLE)
    with pytest.raises(ReportError) as caught:
        kinds.records_of(table, "trials", ("results", "replay", "strategies"))
    assert str(caught.value) == (
        f"{table}: a saved table of this suite, not what `report.py trials` reads (a results "
        "file or a replay.py run or a parallel_bench.py run)")
    doctor_run = written(tmp_path, "doctor.jsonl", lines(*DOCTOR))
    with pytest.raises(ReportError, match=r"doctor.jsonl: a doctor.py run, not what "
                                          r"`report.py buckets` reads \(a results file\)$"):
        kinds.records_of(doctor_run, "buckets", ("results",))
    with pytest.raises(ReportError, match=r"saved.txt: a saved table of this suite, not what "
                                          r"`report.py strategy --measured` reads \(a "
                                          r"parallel_bench.py run\)$"):
        kinds.records_of(table, "strategy --measured", ("strategies", "results"),
                         reads="a parallel_bench.py run")
    results_file = written(tmp_path, "r.jsonl", lines({"type": "meta", "dist": "torch"}))
    kinds.records_of(results_file, "buckets", ("results",))  # taken: no error
    kinds.records_of(written(tmp_path, "pb.jsonl", lines({"type": "meta", "kind": "strategies"})),
                     "trials", ("results", "replay", "strategies"))
