"""report.py compare keys runs and rows by everything that changes what was measured (pt2pt's
--pairs and --bidirectional, --groups layouts, dtype), says in one line where two runs measured an
op differently, and labels runs apart by what differs (issue 36, item 6)."""

import json
import subprocess
import sys

import pytest

from commbench.report import compare, runs
from support import ROOT


def report(*args):
    proc = subprocess.run([sys.executable, "report.py", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_pt2pt_one_way_against_bidirectional_is_compared_with_the_difference_named(run, tmp_path):
    one, both = tmp_path / "one.jsonl", tmp_path / "both.jsonl"
    for path, extra in ((one, []), (both, ["--bidirectional"])):
        result = run("pt2pt.py", "--scan", "--maxsize=6", "--trials=2", "--warmups=1",
                     "--dist=torch", f"--output={path}", *extra, nproc=2)
        assert result.returncode == 0, result
    data = json.loads(report("compare", one, both, "--format", "json"))
    assert data["a"] == "torch.distributed gloo n=2, pt2pt one way"
    assert data["b"] == "torch.distributed gloo n=2, pt2pt --bidirectional"
    (op,) = data["ops"]
    assert op["op"] == "pt2pt (A one way, B --bidirectional)"
    assert [row["size"] for row in op["rows"]] == [16, 32, 64, 128, 256]
    assert op["only_a"] == op["only_b"] == []
    assert op["difference"] == "A is pt2pt one way, B is pt2pt --bidirectional"
    text = report("compare", one, both)
    assert "no message size in both runs" not in text
    assert text.splitlines()[:3] == [
        "A: torch.distributed gloo n=2, pt2pt one way",
        "B: torch.distributed gloo n=2, pt2pt --bidirectional",
        "WARNING: A is pt2pt one way, B is pt2pt --bidirectional: not the same measurement; "
        "their sizes are set side by side below"], text


def run_of(ops, dtype="float32", path="run.jsonl", label="torch.distributed gloo n=2"):
    made = runs.Run(path, label, 2, dtype)
    for key, sizes in ops.items():
        made.ops[key] = {size: runs.Measurement(size, seconds, 1e9)
                         for size, seconds in sizes.items()}
    return made


@pytest.mark.fast
def test_pairs_layouts_and_dtypes_that_differ_are_named_and_label_the_runs_apart():
    report_ = compare.compare(run_of({"pt2pt": {8: 1e-5}}), run_of({"pt2pt pairs-all": {8: 2e-5}}),
                              1.1)
    assert (report_["a"], report_["b"]) == ("torch.distributed gloo n=2, pt2pt --pairs one",
                                            "torch.distributed gloo n=2, pt2pt --pairs all")
    assert "A is pt2pt --pairs one, B is pt2pt --pairs all: not the same measurement; their " \
           "sizes are set side by side below" in report_["warnings"]
    assert report_["ops"][0]["rows"][0]["ratio"] == pytest.approx(2)
    layouts = compare.compare(run_of({"all_reduce intra": {8: 1e-5}}),
                              run_of({"all_reduce": {8: 1e-5}}), 1.1)
    assert layouts["ops"][0]["difference"] == \
        "A is all_reduce intra-host groups, B is all_reduce the whole world"
    dtypes = compare.compare(run_of({"all_reduce": {8: 1e-5}}),
                             run_of({"all_reduce": {8: 1e-5}}, dtype="bfloat16"), 1.1)
    assert (dtypes["a"], dtypes["b"]) == ("torch.distributed gloo n=2, dtype float32",
                                          "torch.distributed gloo n=2, dtype bfloat16")


@pytest.mark.fast
def test_a_run_of_one_dtype_meets_the_same_dtype_of_a_run_of_several():
    single = run_of({"all_reduce": {8: 1e-5}}, dtype="bfloat16", path="bf16.jsonl")
    several = run_of({"all_reduce float32": {8: 1e-5}, "all_reduce bfloat16": {8: 2e-5}},
                     dtype=None, path="all.txt")
    report_ = compare.compare(single, several, 1.1)
    ops = {op["op"]: op for op in report_["ops"]}
    assert ops["all_reduce bfloat16"]["rows"][0]["ratio"] == pytest.approx(2)
    assert "difference" not in ops["all_reduce bfloat16"]
    assert ops["all_reduce float32"]["verdict"] == \
        "all_reduce float32: only in B; A measured all_reduce dtype bfloat16."


# --------------------------------------------------------------------------- replays


def write_replay(path, call_times, pass_times):
    """A replay.py --output file by hand: one rank, each call's time in each pass."""
    lines = [{"type": "meta", "kind": "replay", "backend": "gloo", "dist": "torch",
              "world_size": 1, "hostnames": ["h"], "repeat": len(pass_times), "trace": "t"}]
    lines += [{"type": "call", "rank": 0, "index": index, "op": "all_reduce", "dtype": "float32",
               "in_numel": 1024 * (index + 1), "out_numel": 1024 * (index + 1), "group": [0],
               "times_s": times} for index, times in enumerate(call_times)]
    lines.append({"type": "replay_summary", "pass_times_s": pass_times})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


@pytest.mark.fast
def test_replay_compare_lists_every_call_it_counts_and_states_medians(tmp_path):
    same = [1e-3, 1.01e-3, 0.99e-3, 1e-3, 1e-3]
    a = write_replay(tmp_path / "a.jsonl", [same, same, same, same],
                     [1.0, 1.0, 1.01, 0.99, 10.0])  # one slow pass: the mean 2.8, the median 1
    b = write_replay(tmp_path / "b.jsonl",
                     [[3 * t for t in same], [2 * t for t in same], [t / 2 for t in same], same],
                     [2.0, 2.0, 2.02, 1.98, 2.0])
    data = json.loads(report("compare", a, b, "--format", "json"))
    assert data["pass"]["a_s"] == pytest.approx(1.0) and data["pass"]["b_s"] == pytest.approx(2)
    assert data["pass"]["ratio"] == pytest.approx(2.0)
    assert [r["index"] for r in data["slower_calls"]] == [0, 1]  # the most slowed first
    assert [r["index"] for r in data["faster_calls"]] == [2]
    text = report("compare", a, b)
    listed = text.split("---- the 2 calls marked slower in B\n")[1].splitlines()
    assert [line.split()[:2] for line in listed[1:3]] == [["0", "0"], ["0", "1"]], text
    assert "---- the 1 call marked faster in B" in text
    assert "calls marked slower in B: 2, faster: 1, of 4" in text
    assert "the median of the passes, as replay.py prints it" in text
