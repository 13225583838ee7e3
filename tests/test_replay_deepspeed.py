"""replay.py on DeepSpeed's comms logger (commbench/trace/dscomms.py, docs/replay.md): a plain
DeepSpeed job with the logger on (tests/data/ds_comms_job.py) saves log_summary(return_dict=True)
per rank by the documented lines; replayed with --check, every op and size DeepSpeed logged
comes back as its count of calls, and DeepSpeed's figures are printed beside the replay's. The
readers' refusals (another world size, an op the logger does not log, a point-to-point call)
and get_raw_data()'s form are checked in-process, and one refusal as a real run (one line,
exit 2)."""

import json
from collections import Counter

import pytest

from support import assert_no_traceback, launch



def logged(directory, *extra):
    """The job on 2 ranks started by hand (torchrun's environment, no agent)."""
    job = launch("tests/data/ds_comms_job.py", str(directory), *extra, nproc=2)
    assert job.returncode == 0, job.stderr[-3000:]


def test_a_comms_logger_summary_replays_op_by_op_and_size_by_size(tmp_path):
    directory = tmp_path / "comms"
    directory.mkdir()
    logged(directory)
    summary = json.loads((directory / "rank0.json").read_text())
    expected = Counter({(name, int(size)): figures["count"]
                        for name, sizes in summary["summary"].items()
                        if name != "log_summary_barrier" for size, figures in sizes.items()})
    assert sum(expected.values()) == 9 and len(expected) == 6, expected
    out = tmp_path / "replay.jsonl"
    result = launch("replay.py", str(directory), "--check", "--repeat=2", f"--output={out}",
                    nproc=2)
    assert result.returncode == 0, result
    assert_no_traceback(result)
    calls = [json.loads(line) for line in out.read_text().splitlines()]
    assert calls[0]["trace_format"] == "deepspeed-comms"
    for rank in (0, 1):
        mine = [c for c in calls if c.get("type") == "call" and c["rank"] == rank]
        sizes = Counter((c["function"], c.get("in_numel", 0) * (4 if c.get("dtype") else 0))
                        for c in mine)
        assert sizes == expected, (rank, sizes)
        assert all(c["time_s"] > 0 and c["recorded_s"] > 0 for c in mine)
    assert "--check: 0 wrong element(s) in 18 calls" in result.stdout
    # DeepSpeed's figures beside the replay's: a row per op and size, with its count
    from commbench.table import convert_size
    lines = result.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("DeepSpeed op"))
    rows = {}
    for line in lines[start + 1:]:
        if line.startswith("DS: "):
            break
        rows[line[:24].strip(), line[24:36].strip()] = int(line[36:44])
    assert rows == {(name, convert_size(size)): count for (name, size), count in
                    expected.items()}, rows
    assert "replayed as a weighted workload" in result.stderr


def write_logs(directory, documents):
    directory.mkdir()
    for rank, document in enumerate(documents):
        (directory / f"rank{rank}.json").write_text(json.dumps(document))


def summary(world_size=2, rank=0, ops=None):
    return {"summary": ops or {"all_reduce": {"4096": {"count": 3, "total_latency_ms": 3.0,
                                                        "avg_latency_ms": 1.0,
                                                        "tput_avg_gbps": 0.1,
                                                        "busbw_avg_gbps": 0.05,
                                                        "msg_size_bytes": 4096,
                                                        "msg_size_str": "4.0 KB"}}},
            "straggler_analysis": None,
            "metadata": {"world_size": world_size, "rank": rank, "timestamp": "t"}}


@pytest.mark.fast  # in-process
def test_get_raw_data_reads_each_calls_own_latency(tmp_path):
    from commbench.trace.formats import read
    raw = {"reduce_scatter_tensor": {"2048": [2, [1.5, 2.5], [0.1, 0.1], [0.05, 0.05]]},
           "all_reduce | [Caller Func: step]": {"8": [1, [0.5], [0.0], [0.0]]}}
    write_logs(tmp_path / "raw", [raw, raw])
    trace = read(str(tmp_path / "raw"))
    calls = trace.ranks[1]
    assert [(c.op, c.in_numel, c.out_numel, c.duration_s) for c in calls] == [
        ("all_reduce", 2, 2, 0.0005), ("reduce_scatter", 512, 256, 0.0015),
        ("reduce_scatter", 512, 256, 0.0025)]
    assert trace.source == "DeepSpeed comms logger, get_raw_data()"


@pytest.mark.fast  # in-process
@pytest.mark.parametrize("documents,said", [
    ([summary(3, 0), summary(3, 1)],
     "rank0.json: DeepSpeed's comms logger ran on 3 ranks, but the directory holds 2 rank files"),
    ([summary(2, r, {"all_reduce_fancy": {"8": {"count": 1}}}) for r in (0, 1)],
     "rank0.json: op 'all_reduce_fancy': not an op DeepSpeed's comms logger logs"),
    ([summary(2, r, {"send": {"8": {"count": 1}}}) for r in (0, 1)],
     "rank0.json: send: DeepSpeed's comms logger keeps no peer of a point-to-point call"),
    ([summary(2, 0), summary(2, 0)], "rank1.json: holds rank 0's log, not rank 1's"),
])
def test_a_log_the_replay_cannot_run_is_one_line(tmp_path, documents, said):
    from commbench.trace.formats import read
    from commbench.trace.model import TraceError
    write_logs(tmp_path / "logs", documents)
    with pytest.raises(TraceError) as caught:
        read(str(tmp_path / "logs"))
    assert said in str(caught.value), str(caught.value)


def test_another_world_size_ends_with_one_line_and_status_2(tmp_path):
    write_logs(tmp_path / "logs", [summary(3, 0), summary(3, 1)])
    result = launch("replay.py", str(tmp_path / "logs"), "--dry-run")
    assert result.returncode == 2, result
    lines = [line for line in result.stderr.splitlines() if "error" in line]
    assert len(lines) == 1 and "ran on 3 ranks, but the directory holds 2" in lines[0], result
    assert "Traceback" not in result.stderr


@pytest.mark.fast  # in-process
def test_report_reads_a_logger_summary_as_a_run(tmp_path):
    """report.py compare's reader: per op and size DeepSpeed's mean latency, the suite's busbw."""
    from commbench.report.kinds import load_run
    from commbench.report.runs import ReportError
    ops = {"all_reduce": {"4096": {"count": 3, "avg_latency_ms": 2.0}},
           "reduce_scatter_tensor": {"8192": {"count": 1, "avg_latency_ms": 4.0}},
           "barrier": {"0": {"count": 1, "avg_latency_ms": 0.5}}}
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps(summary(4, 0, ops)))
    run = load_run(str(path))
    assert run.world_size == 4 and run.label == "DeepSpeed comms logger n=4"
    assert set(run.ops) == {"all_reduce", "reduce_scatter"}
    reduce = run.ops["all_reduce"][4096]
    assert reduce.duration == 0.002 and reduce.busbw == pytest.approx(4096 / 0.002 * 2 * 3 / 4)
    scatter = run.ops["reduce_scatter"][8192]
    assert scatter.busbw == pytest.approx(8192 / 0.004 * 3 / 4)
    path.write_text(json.dumps({"all_reduce": {"8": [1, [0.5], [0.0], [0.0]]}}))
    with pytest.raises(ReportError, match="get_raw_data\\(\\) keeps no world size"):
        load_run(str(path))
    path.write_text(json.dumps(summary(2, 0, {"all_reduce_fancy": {"8": {"count": 1}}})))
    with pytest.raises(ReportError, match="not an op DeepSpeed's comms logger logs"):
        load_run(str(path))
