"""report.py's logic in-process: every kind of input read back (results files in the three
formats, saved tables, nccl-tests text; commbench/report/runs.py over commbench/records/results.py),
compare's ratios and verdicts (compare.py), the bucket model (buckets.py), the strategy
estimate's pieces (strategy.py) and doctor's heatmap (doctor.py). Inputs are written to
tmp_path; no ranks, no report.py."""

import json
import math
import random
import re

import pytest

from commbench.records import results
from commbench.report import buckets, compare, kinds, layouts, measured, runs, strategy
from support import ROOT

pytestmark = pytest.mark.fast

FIXTURES = ROOT / "tests" / "fixtures"
META = {"type": "meta", "dist": "torch", "backend": "gloo", "world_size": 2, "dtype": "float",
        "bw_unit": "Gbps"}


def record(op, size, duration, busbw=1e9, **extra):
    return {"type": "result", "op": op, "dist": "torch", "backend": "gloo", "world_size": 2,
            "dtype": "float", "size_bytes": size, "numel": size // 4, "element_size": 4,
            "duration_s": duration, "busbw_Bps": busbw, "throughput_Bps": busbw, **extra}


def write(path, records, meta=META):
    writer = results.open_writer(str(path), dict(meta))
    for r in records:
        writer.add(r)
    writer.close()
    return str(path)


def test_a_commands_own_lines_keep_an_earlier_file_and_end_in_a_whole_line(tmp_path):
    """parallel_bench.py's and replay.py's JSON lines, by the results file's rules."""
    path = tmp_path / "run.out"
    path.write_text("earlier\n")
    writer = results.open_lines(str(path), False, {"type": "meta", "kind": "strategies"})
    assert writer.path == f"{path}.1" and path.read_text() == "earlier\n"
    writer.write({"type": "strategy", "strategy": "ddp"})
    writer.write_many([{"type": "call", "index": i} for i in range(3)])
    writer.close()
    lines = [json.loads(line) for line in open(writer.path)]
    assert [line["type"] for line in lines] == ["meta", "strategy", "call", "call", "call"]
    again = results.open_lines(str(path), True, {"type": "meta"})  # --overwrite
    assert again.path == str(path)
    again.close()
    with pytest.raises(OSError):  # a full disk at the meta line: the command's one line says so
        results.open_lines("/dev/full", True, {"type": "meta"})
    with pytest.raises(results.ResultsError, match="is a directory; give a file name$"):
        results.open_lines(str(tmp_path), False, {"type": "meta"})


def test_a_report_warns_of_a_newer_run_beside_its_input(tmp_path, capsys):
    """report.py reading PATH while PATH.N is there (a later run given --output PATH wrote it,
    issue 53): one warning naming PATH.N; reading the newest, none."""
    from commbench.report.cli import main as report
    record = {"op": "all_reduce", "dtype": "float32", "world_size": 2, "size_bytes": 8,
              "numel": 2, "element_size": 4, "duration_s": 1e-5, "busbw_Bps": 8e5,
              "throughput_Bps": 1.6e6}
    path = tmp_path / "run.jsonl"
    for name in ("run.jsonl", "run.jsonl.1", "run.jsonl.2"):
        write(tmp_path / name, [record])
    (tmp_path / "run.jsonl.x").write_text("not a run of the suite's\n")
    assert report(["compare", str(path), f"{path}.1"]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert warnings == [
        f"report.py: warning: {path} has a newer run beside it, {path}.2 (a later run given "
        f"--output {path} wrote it and kept {path}); this reads {path}",
        f"report.py: warning: {path}.1 has a newer run beside it, {path}.2 (a later run given "
        f"--output {path} wrote it and kept {path}); this reads {path}.1"]
    assert report(["plot", f"{path}.2", "-o", str(tmp_path / "c.png")]) == 0
    assert "warning" not in capsys.readouterr().err


def run_of(label, ops, windows=None, world_size=2, dtype="float"):
    """A runs.Run from {op: {size: seconds}} (busbw: size / seconds)."""
    run = runs.Run(f"{label}.jsonl", label, world_size, dtype)
    for op, sizes in ops.items():
        run.ops[op] = {s: runs.Measurement(s, t, s / t) for s, t in sizes.items()}
    for op, sizes in (windows or {}).items():
        run.windows[op] = sizes
    return run


# --------------------------------------------------------------------------- reading runs

@pytest.mark.parametrize("extension", [".jsonl", ".csv", ".json"])
def test_a_results_file_of_each_format_reads_back_as_the_same_run(tmp_path, extension):
    path = write(tmp_path / f"run{extension}",
                 [record("all_reduce", 1024, 1e-4, 2e7), record("all_reduce", 4096, 2e-4, 4e7),
                  record("broadcast", 1024, 5e-5, 2e7)])
    run = kinds.load_run(path)
    assert sorted(run.ops) == ["all_reduce", "broadcast"]
    assert run.ops["all_reduce"][4096] == runs.Measurement(4096, 2e-4, 4e7)
    assert (run.world_size, run.dtype, run.bw_unit) == (2, "float", "Gbps")
    assert run.label == "torch.distributed gloo n=2"  # the .csv has no meta: from its records


def test_repeat_windows_are_kept_with_the_whole_record_and_partial_runs_read_their_windows(
        tmp_path):
    whole = record("all_reduce", 1024, 2e-4, windows_s=[1e-4, 2e-4, 3e-4], repeat=3)
    partial = [record("all_reduce", 4096, t, window=i) for i, t in enumerate((4e-4, 5e-4))]
    run = kinds.load_run(write(tmp_path / "r.jsonl", [whole] + partial))
    assert run.windows["all_reduce"] == {1024: [1e-4, 2e-4, 3e-4], 4096: [4e-4, 5e-4]}
    # a size whose run ended before --repeat's last pass: its last window stands for it
    assert run.ops["all_reduce"][4096].duration == 5e-4


def test_several_dtypes_key_each_op_by_dtype_in_report_order(tmp_path):
    recs = [record("broadcast", 64, 1e-5), record("all_reduce", 64, 1e-5, dtype="bfloat16"),
            record("all_reduce", 64, 2e-5), record("custom_op", 64, 1e-5)]
    run = kinds.load_run(write(tmp_path / "d.jsonl", recs))
    assert runs.op_order(run.ops) == ["all_reduce bfloat16", "all_reduce float", "broadcast float",
                                      "custom_op float"]
    assert run.dtype is None


def test_a_layouts_figure_is_its_slowest_groups(tmp_path):
    recs = [record("all_reduce", 64, t, groups="intra", group=g) for g, t in
            ((0, 1e-5), (1, 3e-5), (2, 2e-5))]
    run = kinds.load_run(write(tmp_path / "g.jsonl", recs, {**META, "groups": ["intra"]}))
    assert run.ops["all_reduce intra"][64].duration == 3e-5


TABLE = """[2026-01-01 10:00:00,000] [INFO] [runner.py:555:main] cmd = deepspeed all_reduce.py
---- Performance of all_reduce on 2 devices ---------------------------------------------------------
Size (Bytes)         Description               Duration             Throughput (Gbps)    BusBW (Gbps)
----------------------------------------------------------------------------------------------------
16.0 B               4x4                       10.174 us            0.025                0.013
1.0 MB               262144x4                  178.704 us           93.883               46.941
16.0 MB              4194304x4                 2.769 ms             96.939               48.470

---- Performance of barrier on 2 devices ------------------------------------------------------------
Size (Bytes)         Description               Duration             Throughput (Gbps)    BusBW (Gbps)
----------------------------------------------------------------------------------------------------
0B                   -                         25.000 us            -                    -
"""


def test_a_saved_table_reads_sizes_from_the_description_and_converts_units_back(tmp_path):
    path = tmp_path / "saved.txt"
    path.write_text(TABLE)
    run = kinds.load_run(str(path))
    assert run.world_size == 2 and run.bw_unit == "Gbps"
    assert sorted(run.ops["all_reduce"]) == [16, 1 << 20, 16 << 20]  # E x element size
    large = run.ops["all_reduce"][16 << 20]
    assert large.duration == pytest.approx(2.769e-3)
    assert large.busbw == pytest.approx(48.470e9 / 8)  # Gbps back to bytes/s
    assert run.ops["all_reduce"][16].duration == pytest.approx(10.174e-6)
    assert run.ops["barrier"] == {0: runs.Measurement(0, pytest.approx(25e-6), 0.0)}


def test_a_raw_table_in_gbytes_reads_microseconds_and_bytes(tmp_path):
    path = tmp_path / "raw.txt"
    path.write_text("---- Performance of broadcast on 3 devices, dtype bfloat16 ------\n"
                    "Size (Bytes)         Description               Duration (us)        "
                    "Throughput (GBps)    BusBW (GBps)\n" + "-" * 100 + "\n"
                    "2048                 1024x2                    12.500               "
                    "0.164                0.164\n")
    run = kinds.load_run(str(path))
    measured = run.ops["broadcast bfloat16"][2048]
    assert measured.duration == pytest.approx(12.5e-6) and measured.busbw == pytest.approx(0.164e9)
    assert (run.bw_unit, run.world_size) == ("GBps", 3)


def test_nccl_tests_output_reads_the_out_of_place_columns():
    run = kinds.load_run(str(FIXTURES / "all_reduce_perf.txt"))
    assert run.world_size == 2 and run.dtype == "float" and run.bw_unit == "GBps"
    assert sorted(run.ops["all_reduce"]) == [8, 16, 1048576, 2097152]
    assert run.ops["all_reduce"][1048576] == runs.Measurement(1048576, pytest.approx(40e-6),
                                                              pytest.approx(26.21e9))


def test_nccl_tests_all_gather_sizes_become_the_input_per_rank(tmp_path):
    text = (FIXTURES / "all_reduce_perf.txt").read_text().replace("all_reduce", "x")
    path = tmp_path / "all_gather_perf.txt"
    path.write_text(text)
    run = kinds.load_run(str(path))
    assert sorted(run.ops["all_gather"]) == [4, 8, 524288, 1048576]  # the output / 2 ranks


@pytest.mark.parametrize("name,text,message", [
    ("empty.jsonl", "", "no results in it (an empty file)"),
    ("meta.jsonl", '{"type": "meta", "dist": "torch"}\n',
     "the meta record alone: the run measured nothing"),
    ("other.json", '{"meta": {}, "results": [{"x": 1}]}', "not a results file of this suite"),
    ("page.md", "```\n---- Performance of all_reduce on 2 devices ---\n```\n",
     "a document that quotes tables"),
    ("notes.txt", "hello\n", "neither a results file, a saved table of this suite, nor"),
    ("perf.txt", "# nccl-tests\n#  size count type\n", "which collective?"),
])
def test_inputs_that_hold_no_run_are_one_line(tmp_path, name, text, message):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(runs.ReportError, match=re.escape(message)):
        kinds.load_run(str(path))


def test_bandwidth_in_the_runs_unit():
    assert runs.bandwidth(1.25e9, "Gbps") == pytest.approx(10.0)
    assert runs.bandwidth(1.25e9, "GBps") == pytest.approx(1.25)
    assert runs.bandwidth_label("GBps") == "GB/s" and runs.bandwidth_label("other") == "Gbps"


# --------------------------------------------------------------------------- compare

def test_compare_ratios_geometric_means_and_the_verdict():
    a = run_of("A", {"all_reduce": {1024: 1e-4, 4096: 1e-4, 1 << 20: 1e-3, 1 << 22: 2e-3,
                                    1 << 18: 5e-4}})
    b = run_of("B", {"all_reduce": {1024: 2e-4, 4096: 0.5e-4, 1 << 20: 0.9e-3, 1 << 22: 1.8e-3,
                                    1 << 18: 1e-3, 1 << 24: 9e-3}})
    report = compare.compare(a, b, threshold=1.1)
    (op,) = report["ops"]
    ratios = {r["size"]: r["ratio"] for r in op["rows"]}
    assert ratios[1024] == pytest.approx(2.0) and ratios[1 << 20] == pytest.approx(0.9)
    assert [r["size"] for r in op["rows"] if r["above_threshold"]] == [1024, 1 << 18]  # > 1.1
    assert op["small_ratio"] == pytest.approx(1.0)  # sqrt(2 x 0.5): sizes under 64 KiB
    assert op["large_ratio"] == pytest.approx(0.9)  # 1 MiB and up; 256 KiB in neither
    assert op["only_b"] == [1 << 24] and op["only_a"] == []
    assert op["verdict"] == ("all_reduce: B/A 1.000 at small messages, B/A 0.900 at large "
                             "messages (geometric means); no verdict: " + compare.TO_JUDGE + ".")
    assert any("no repeated windows" in w for w in report["warnings"])
    text = compare.render(report, "text")
    assert "1 size from 64 KiB to under 1 MiB in neither group" in text
    assert "only in B: 16 MiB" in text and "(* B/A above 1.1: a ratio, not a verdict)" in text
    assert not re.search(r"faster|slower|adds", text), text


def test_compare_warns_of_different_world_sizes_and_dtypes():
    a = run_of("A", {"broadcast": {8: 1e-5}}, world_size=2, dtype="float")
    b = run_of("B", {"broadcast": {8: 1e-5}}, world_size=4, dtype="half")
    warnings = compare.compare(a, b, 1.1)["warnings"]
    assert "world sizes differ: 2 (A) vs 4 (B)" in warnings
    assert "dtypes differ: float (A) vs half (B)" in warnings


@pytest.mark.parametrize("small,large,text", [
    (1.5, None, "B/A 1.500 at small messages, no large messages to compare"),
    (0.25, 1.01, "B/A 0.250 at small messages, B/A 1.010 at large messages"),
    (None, 3.0, "no small messages to compare, B/A 3.000 at large messages"),
])
def test_single_runs_get_their_ratios_and_what_would_let_compare_judge(small, large, text):
    """One window a run: however far apart, the ratios and no claim; --repeat or --db named."""
    said = compare.verdict("op", small, large)
    assert said == f"op: {text} (geometric means); no verdict: {compare.TO_JUDGE}."
    assert "--repeat 5" in said and "--db URL" in said and "earlier runs of this command" in said
    assert not re.search(r"faster|slower|adds", said)


def test_windows_that_overlap_are_no_significant_difference():
    windows = [1.0e-3, 1.1e-3, 0.9e-3, 1.05e-3, 0.95e-3]
    a = run_of("A", {"all_reduce": {1024: 1e-3}}, {"all_reduce": {1024: windows}})
    b = run_of("B", {"all_reduce": {1024: 1e-3}}, {"all_reduce": {1024: windows[::-1]}})
    op = compare.compare(a, b, 1.1)["ops"][0]
    row = op["rows"][0]
    assert row["ratio_ci"][0] < 1 < row["ratio_ci"][1] and not row["significant"]
    assert op["small"]["significant"] is False
    assert op["verdict"].startswith("all_reduce: B: no significant difference at small messages")


def test_windows_twice_as_long_are_significant_with_welchs_interval_by_hand():
    wa = [1.0e-3, 1.1e-3, 0.9e-3, 1.05e-3, 0.95e-3]
    wb = [2.0e-3, 2.4e-3, 1.6e-3, 2.2e-3, 1.8e-3]  # twice as long, a wider spread
    a = run_of("A", {"all_reduce": {1 << 20: 1e-3}}, {"all_reduce": {1 << 20: wa}})
    b = run_of("B", {"all_reduce": {1 << 20: 2e-3}}, {"all_reduce": {1 << 20: wb}})
    op = compare.compare(a, b, 1.1)["ops"][0]
    row = op["rows"][0]

    def moments(windows):  # mean of the logs, variance of that mean
        logs = [math.log(w) for w in windows]
        mean = sum(logs) / len(logs)
        return mean, sum((x - mean) ** 2 for x in logs) / (len(logs) - 1) / len(logs)
    (ma, va), (mb, vb) = moments(wa), moments(wb)
    df = (va + vb) ** 2 / (va ** 2 / 4 + vb ** 2 / 4)  # Welch-Satterthwaite
    assert 5 < df < 6  # so t = 2.571 (5 degrees, rounded down)
    half = 2.571 * math.sqrt(va + vb)
    low, high = math.exp(mb - ma - half), math.exp(mb - ma + half)
    assert row["ratio_ci"] == [pytest.approx(low), pytest.approx(high)]
    assert 1 < low < 2 < high and row["significant"] and row["marked"]
    assert op["verdict"] == (f"all_reduce: B: no repeated small messages to compare; slower at "
                             f"large messages: +{(math.exp(mb - ma) - 1) * 100:.0f}% "
                             f"[{(low - 1) * 100:+.0f}%, {(high - 1) * 100:+.0f}%].")


def test_layouts_put_intra_and_inter_host_side_by_side():
    run = run_of("G", {"all_reduce intra": {1 << 20: 1e-3, 1024: 1e-5},
                       "all_reduce inter": {1 << 20: 4e-3, 1024: 2e-5}})
    report = layouts.layouts(run)
    (op,) = report["ops"]
    assert op["layouts"] == ["intra", "inter"]
    assert op["verdict"] == "all_reduce: inter-host / intra-host time 4.00x at large messages, " \
                            "2.00x at small messages."
    with pytest.raises(ValueError, match="holds the whole world's figures only"):
        layouts.layouts(run_of("W", {"all_reduce": {8: 1e-5}}))


def test_split_layout_and_geometric_mean():
    assert layouts.split_layout("all_reduce bfloat16 inter") == ("all_reduce bfloat16", "inter")
    assert layouts.split_layout("all_reduce split-aggregate") == ("all_reduce", "split-aggregate")
    assert layouts.split_layout("all_reduce bfloat16") == ("all_reduce bfloat16", "world")
    assert compare.geometric_mean([2.0, 8.0, 0.0]) == pytest.approx(4.0)  # 0 left out
    assert compare.geometric_mean([]) is None


# --------------------------------------------------------------------------- buckets

MIB = 1 << 20


def curve(points):
    return strategy.Curves({"all_reduce": {s: runs.Measurement(s, t, 0) for s, t in points}})


def simulated_exposure(tau, pace, count, backward, hidden):
    """Bucket i (1..count) ready at i x pace, one stream, each tau long; the exposed time after
    backward plus the not-hidden share of the stream's time before it."""
    end, busy = 0.0, 0.0
    for i in range(1, count + 1):
        start = max(i * pace, end)
        end = start + tau
        busy += max(0.0, min(end, backward) - min(start, backward))
    return max(0.0, end - backward) + busy * (1 - hidden)


def test_buckets_back_to_back_and_spaced_out_by_hand():
    c = curve([(MIB, 1e-3), (4 * MIB, 3e-3)])
    # 8 MiB in 1 MiB buckets over a 4 ms backward: ready every 0.5 ms, each 1 ms: back to back
    # from 0.5 ms, the last ends at 8.5 ms: 4.5 ms after backward
    row = buckets.evaluate(c, 8 * MIB, MIB, backward_s=4e-3)
    assert (row.buckets, row.comm_s, row.exposed_s) == (8, pytest.approx(8e-3),
                                                        pytest.approx(4.5e-3))
    # over a 16 ms backward: ready every 2 ms, each done before the next; the last at 17 ms
    assert buckets.evaluate(c, 8 * MIB, MIB, backward_s=16e-3).exposed_s == pytest.approx(1e-3)
    # 4 MiB buckets over 4 ms: two of 3 ms, ready at 2 and 4 ms: ends at 8 ms
    assert buckets.evaluate(c, 8 * MIB, 4 * MIB, backward_s=4e-3).exposed_s == pytest.approx(4e-3)


def test_a_partial_last_bucket_runs_after_backward_at_the_curves_time():
    c = curve([(MIB, 1e-3), (4 * MIB, 3e-3)])
    row = buckets.evaluate(c, 8 * MIB + 512 * 1024, MIB, backward_s=None)
    assert row.buckets == 9  # 8 full and one of 512 KiB (below the curve: its smallest's time)
    assert row.comm_s == pytest.approx(9e-3) and row.exposed_s is None


def test_overlap_measured_slows_the_stream_under_backward():
    c = curve([(MIB, 1e-3)])
    overlap = [(MIB, 25.0)]  # 25% of each bucket hidden
    row = buckets.evaluate(c, 8 * MIB, MIB, backward_s=4e-3, overlap=overlap)
    # busy 3.5 ms before backward ends (0.5 to 4 ms), 75% of it not hidden: 4.5 + 2.625 ms
    assert row.exposed_s == pytest.approx(4.5e-3 + 3.5e-3 * 0.75)


def test_the_closed_form_equals_a_bucket_by_bucket_simulation():
    rng = random.Random(35)
    for _ in range(200):
        count = rng.randint(1, 40)
        tau, pace = rng.uniform(1e-4, 3e-3), rng.uniform(1e-4, 3e-3)
        # evaluate's pace is backward x bucket / G: the last full bucket is ready by backward's end
        backward = pace * count * rng.uniform(1.0, 1.5)
        hidden = rng.choice([0.0, 0.3, 1.0])
        busy = buckets._busy_before(pace, pace, tau, count, backward)
        end = max(pace + count * tau, count * pace + tau)
        closed = max(0.0, end - backward) + busy * (1 - hidden)
        assert closed == pytest.approx(simulated_exposure(tau, pace, count, backward, hidden),
                                       abs=1e-12), (tau, pace, count, backward)


def test_smallest_bucket_considered():
    assert buckets.smallest_bucket(64 * MIB) == MIB
    assert buckets.smallest_bucket(4 * MIB) == 4 * MIB // 16
    assert buckets.smallest_bucket(4 * MIB, min_bucket=123) == 123


# --------------------------------------------------------------------------- strategy pieces

@pytest.mark.parametrize("text,count", [("7B", 7e9), ("1.3b", 1.3e9), ("350M", 350e6),
                                        ("70k", 70e3), ("1e9", 1e9), (" 2T ", 2e12), ("42", 42)])
def test_parse_count(text, count):
    assert strategy.parse_count(text) == pytest.approx(count)


@pytest.mark.parametrize("text", ["seven", "7 GB", "", "1.2.3B"])
def test_parse_count_refuses_what_is_not_a_count(text):
    with pytest.raises(strategy.StrategyError, match="cannot read a parameter count"):
        strategy.parse_count(text)


def test_the_curve_of_a_layout_only_when_both_layouts_were_measured():
    both = strategy.Curves({"all_reduce": {8: runs.Measurement(8, 1, 0)},
                            "all_reduce intra": {8: runs.Measurement(8, 1, 0)},
                            "all_reduce inter": {8: runs.Measurement(8, 2, 0)}})
    assert both.curve("all_reduce", "inter") == "all_reduce inter"
    assert both.time("all_reduce", 8, "inter").seconds == 2
    one = strategy.Curves({"all_reduce": {8: runs.Measurement(8, 1, 0)},
                           "all_reduce intra": {8: runs.Measurement(8, 1, 0)}})
    assert one.curve("all_reduce", "inter") == "all_reduce"


def test_a_plan_priced_on_curves_that_lack_an_op_names_it():
    plan = strategy.Plan("X", 0, [strategy.Collective("all_reduce", 8, 3, 8),
                                  strategy.Collective("pt2pt", 8, 1, 8)])
    seconds, extrapolated, missing = strategy.price(plan, curve([(8, 1e-5), (16, 2e-5)]))
    assert seconds == pytest.approx(3e-5) and not extrapolated and missing == ["pt2pt"]


def test_bucketed_messages_are_full_buckets_then_the_rest():
    pieces = strategy._bucketed("all_reduce", 10, 4, 2, 1.5, lambda b: b)
    assert [(p.message, p.count, p.moved) for p in pieces] == [(4, 2, 6.0), (2, 1, 3.0)]
    assert strategy._bucketed("all_reduce", 3, 4, 2, 1.0, lambda b: b)[0].count == 1  # rest only


def measured_analysis(**shifted):
    """report.py strategy --measured on the recorded run (tests/fixtures), each strategy's
    tokens/s in `shifted` multiplied by its factor."""
    meta, records = measured.load(str(FIXTURES / "strategies_2ranks.jsonl"))
    for record in records:
        record["tokens_per_s"] *= shifted.get(record["strategy"], 1.0)
    curves = strategy.Curves(kinds.load_run(str(FIXTURES / "curves_2ranks.jsonl")).ops)
    return measured.analyse(meta, records, curves, measured.workload(meta, records, 80))


def _bold_tokens(text):
    """{plan: tokens/s cell} of the "Measured against estimated" table."""
    table = text.split("### Measured against estimated")[1].split("\n\n")[1].splitlines()
    column = table[0].split(" | ").index("tokens/s")
    return {row.split(" | ")[0].strip("| "): row.split(" | ")[column] for row in table[2:]}


@pytest.mark.parametrize("shifted,best", [({}, "DDP"), ({"tp": 2.5}, "TP=2")])
def test_the_strategy_recommendation_is_the_tables_best_and_names_its_figure(shifted, best):
    """The recorded run: TP=2 has the shortest step (461 ms against DDP's 511) but trains half
    the tokens a step; the recommendation is the strategy the table marks best by tokens/s, says
    that is its figure, and names the shortest step apart."""
    analysis = measured_analysis(**shifted)
    text = measured.render(analysis, "markdown")
    cells = _bold_tokens(text)
    marked = [plan for plan, cell in cells.items() if cell.startswith("**")]
    tokens = {row["plan"]: row["tokens_per_s"] for row in analysis["rows"]}
    assert marked == [best] == [max(tokens, key=tokens.get)]
    recommendation = text.split("Recommendation: ")[1]
    assert recommendation.startswith(f"{best} trains fastest by tokens/s, the figure it is picked "
                                     f"by (in bold in the table; not step time")
    assert f"a step): {tokens[best]:.0f} tokens/s (a step of" in recommendation
    shortest = min(analysis["rows"], key=lambda row: row["step_s"])
    said = f"{shortest['plan']} has the shortest step"
    assert (said in recommendation) == (shortest["plan"] != best), recommendation
    assert analysis["picked_by"] == "tokens_per_s"


# --------------------------------------------------------------------------- doctor's heatmap

def test_a_doctor_runs_heatmap_has_its_matrices_suspects_and_verdict(tmp_path):
    from commbench.report import doctor
    hosts = ["h0", "h1", "h2"]
    lines = [{"type": "meta", "ops": ["doctor"], "hosts": hosts, "backend": "gloo",
              "bw_unit": "Gbps"}]
    for (a, b), gbps in {("h0", "h1"): 9.0, ("h0", "h2"): 2.0, ("h1", "h2"): 2.5}.items():
        lines.append({"type": "doctor", "phase": "pairs", "hosts": [a, b],
                      "forward_Bps": gbps * 1.25e8, "backward_Bps": gbps * 1.25e8 / 2,
                      "both_Bps": gbps * 1.25e8 * 1.5, "latency_s": 50e-6})
    lines.append({"type": "verdict", "healthy": False, "suspect_hosts": ["h2"],
                  "suspect_links": [["h0", "h1"]], "unreachable": []})
    path = tmp_path / "doctor.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    one_way, both, latency = doctor._matrices(hosts, doctor.load(path)[1], "Gbps")
    assert one_way[0][2] == pytest.approx(2.0) and one_way[2][0] == pytest.approx(1.0)
    assert both[1][2] == both[2][1] == pytest.approx(3.75) and latency[0][1] == pytest.approx(50)
    assert math.isnan(one_way[1][1])
    figure = doctor.heatmap(path, tmp_path / "map.png")
    assert (tmp_path / "map.png").stat().st_size > 10_000
    assert figure._suptitle.get_text() == \
        "doctor: 3 hosts, gloo: suspect host h2; suspect link h0-h1"
    # a row and a column for the host, two cells for the link, in each of the three panels
    assert [len(axis.patches) for axis in figure.axes[:3]] == [4, 4, 4]
    assert doctor._verdict(None) == "no verdict (the run ended early)"
