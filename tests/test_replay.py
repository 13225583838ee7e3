"""replay.py: traces recorded by the suite (parallel_bench.py --trace, commbench.trace.record),
written by PyTorch's ExecutionTraceObserver around a plain script, and in PARAM's basic format,
replayed on real ranks with --check; the replayed sequence is the recorded one, record by record;
bad traces are one line and exit 2 on every rank."""

import json
import re
import subprocess
import sys

import pytest

from support import ROOT, assert_no_traceback, free_port, launch, launch_ranks
from test_parallel_bench import TINY_3, check_three_ranks, read_records
from test_parallel_bench import flags as model_flags

DATA = ROOT / "tests" / "data"
SHAPE = ("op", "dtype", "in_numel", "out_numel", "group", "root", "peer", "in_split",
         "out_split", "reduce_op", "req", "waits", "batch")


def replay(directory, *args, nproc=2, timeout=240):
    return launch("replay.py", str(directory), *args, nproc=nproc, timeout=timeout)


def job_ranks(script, trace, nproc):
    """A user's job (`script TRACE` under torchrun in its docstring) on `nproc` ranks started
    by hand with torchrun's environment (forked: `commbench` is the fork server's, the
    checkout's, as its editable install or PYTHONPATH gives it): what it records is its
    ranks', not the launcher's."""
    status, _, stderr = launch_ranks([sys.executable, str(script), str(trace)], nproc,
                                     free_port())
    assert status == 0, stderr[-3000:]


def records(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def shape(record):
    return {key: record.get(key) for key in SHAPE if record.get(key) not in (None, [], ())}


def recorded_calls(directory, world_size):
    calls = []
    for rank in range(world_size):
        document = json.loads((directory / f"rank{rank}.json").read_text())
        calls += [{"rank": rank, **call} for call in document["calls"]]
    return calls


def assert_same_sequence(trace_calls, replay_records):
    replayed = [r for r in replay_records if r["type"] == "call"]
    assert [(c["rank"], c["index"]) for c in trace_calls] == \
        [(r["rank"], r["index"]) for r in replayed]
    for recorded, ours in zip(trace_calls, replayed):
        assert shape(recorded) == shape(ours), (recorded, ours)


def assert_one_line(result, *needles):
    assert result.returncode == 2, result
    lines = [line for line in result.stderr.splitlines() if "error:" in line]
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert_no_traceback(result)


def assert_checked(result, calls):
    """Exit 0 and every element right, in every call but the waits of `calls` (records)."""
    assert result.returncode == 0, result
    assert_no_traceback(result)
    count = sum(1 for call in calls if call["op"] != "wait")
    assert re.search(rf"--check: 0 wrong element\(s\) in {count} calls", result.stdout), \
        result.stdout


# ---------------------------------------------------------------------------- the suite's own

# At 3 ranks, where uneven shards show; replay.md's example (test_docs_examples.py) replays
# zero3 and pp at 2.
@pytest.mark.parametrize("nproc", [3])
def test_parallel_bench_traces_of_all_six_strategies_replay(tmp_path, nproc):
    trace, db = tmp_path / "trace", tmp_path / "results.db"
    # test_parallel_bench.py's 3-rank model (uneven ZeRO partitions); its checks of the job
    # (records, table, analytic volumes) run on this launch too
    job = launch("parallel_bench.py", "--strategy", "all", *model_flags(TINY_3, steps=2, warmup=1),
                 "--trace", trace, "--output", tmp_path / "job.jsonl", "--db", db, "--tag", "t",
                 "--prometheus", tmp_path / "job.prom", nproc=nproc, timeout=400)
    assert job.returncode == 0, job
    assert_no_traceback(job)
    check_three_ranks(job.stdout, *read_records(tmp_path / "job.jsonl"), steps=2, warmup=1)
    strategies = [r["strategy"] for r in records(tmp_path / "job.jsonl") if r["type"] == "strategy"]
    assert strategies == ["ddp", "zero1", "zero2", "zero3", "tp", "pp"]
    # --db and --prometheus (docs/history.md): the strategy rows as the file has them
    assert_in_database(db, "strategies", records(tmp_path / "job.jsonl"))
    assert_gauges(tmp_path / "job.prom", "commbench_strategy_step_seconds",
                  {r["strategy"]: r["step_time_s"]["median"]
                   for r in records(tmp_path / "job.jsonl")[1:]})
    for name in strategies:
        directory = trace / name
        calls = recorded_calls(directory, nproc)
        assert calls, name
        if name in ("ddp", "zero2", "zero3"):
            # ddp's all_reduce and zero2's calls are zero1's kinds; zero3 replays below through
            # deepspeed.comm: three replays fewer, half a minute on 2 cores
            continue
        out = tmp_path / f"{name}.jsonl"
        result = replay(directory, "--check", "--repeat", "2", "--warmup", "0", "--output", out,
                        nproc=nproc)
        assert_checked(result, calls)
        assert_same_sequence(calls, records(out))
        # the job's time beside the replay's, per op kind and in total
        assert "the job's communication (parallel_bench.py --strategy " + name in result.stdout
        total = re.search(r"^total(\s+\S+ \S+){2}\s+[\d.]+(\s+\S+ \S+){2}\s+[\d.]+$",
                          result.stdout, re.M)
        assert total, result.stdout
        summary = records(out)[-1]
        assert summary["type"] == "replay_summary" and summary["wrong"] == 0
        total = summary["prediction"]["total"]
        assert total["ratio"] > 0 and total["in_flight_ratio"] > 0
        assert total["job_in_flight_s"] <= total["job_s"] + 1e-9
        assert summary["steps"] == 2
    # the same calls through deepspeed.comm (its own ReduceOp, its own call forms)
    out = tmp_path / "zero3-deepspeed.jsonl"
    result = replay(trace / "zero3", "--dist", "deepspeed", "--check", "--repeat", "1",
                    "--output", out, "--db", db, "--prometheus", tmp_path / "replay.prom",
                    nproc=nproc)
    assert_checked(result, recorded_calls(trace / "zero3", nproc))
    assert_same_sequence(recorded_calls(trace / "zero3", nproc), records(out))
    assert records(out)[0]["dist"] == "deepspeed"
    assert_in_database(db, "replay", records(out))
    assert_gauges(tmp_path / "replay.prom", "commbench_replay_pass_seconds",
                  {None: records(out)[-1]["pass_s"]["median"]})


def assert_in_database(path, kind, lines):
    """The database's last run: of this kind, complete, its records the file's, figure for
    figure (the file's meta line aside)."""
    from commbench.records.db.store import Store
    store = Store(str(path))
    try:
        run = store.runs()[-1]
        assert (run["kind"], run["complete"]) == (kind, True), run
        meta, rows = store.records(run["id"])
    finally:
        store.close()
    assert meta["type"] == "meta" and meta["world_size"] == lines[0]["world_size"]
    assert rows == lines[1:]


def assert_gauges(path, name, expected):
    """FILE parsed back with prometheus_client's parser: `name`'s samples, by strategy label."""
    from prometheus_client.parser import text_string_to_metric_families
    found = {sample.labels.get("strategy"): sample.value
             for family in text_string_to_metric_families(path.read_text())
             for sample in family.samples if sample.name == name}
    assert found == pytest.approx(expected), found


@pytest.mark.parametrize("nproc", [1, 3])
def test_a_job_recording_itself_replays_and_two_replays_compare(tmp_path, nproc):
    """commbench.trace.record in a plain job: async calls and their waits, a batch, uneven
    all-to-all, a subgroup, roots and peers; replayed on gloo and on oneCCL, report.py compare
    of the two; the dry run as one plain process."""
    trace = tmp_path / "trace"
    job_ranks(DATA / "traced_job.py", trace, nproc)
    calls = recorded_calls(trace, nproc)
    ops = [c["op"] for c in calls if c["rank"] == 0]
    assert ops[:8] == ["all_reduce", "all_reduce", "broadcast", "all_gather", "reduce_scatter",
                       "wait", "all_to_all", "reduce"]
    async_call = next(c for c in calls if c["rank"] == 0 and c.get("reduce_op") == "max")
    wait = next(c for c in calls if c["rank"] == 0 and c["op"] == "wait")
    assert wait["waits"] == [async_call["req"]] and wait["index"] == 5
    last = nproc - 1
    a2a = next(c for c in calls if c["rank"] == last and c["op"] == "all_to_all")
    assert a2a["in_split"] == [3 * (last + j + 1) for j in range(nproc)]  # rows of 3 elements
    if nproc > 1:
        assert "batch" in ops and "send" in ops
        pair = [c for c in calls if c["op"] == "all_reduce" and c.get("dtype") == "bfloat16"]
        assert {c["rank"] for c in pair} == {0, 1} and all(c["group"] == [0, 1] for c in pair)
    outputs = []
    for backend in ("gloo", "ccl") if nproc > 1 else ("gloo",):
        out = tmp_path / f"replay-{backend}.jsonl"
        result = replay(trace, "--check", "--repeat", "3", "--backend", backend, "--output", out,
                        nproc=nproc)
        assert_checked(result, calls)
        assert_same_sequence(calls, records(out))
        assert re.search(r"per step \S+ \S+ over 2 steps", result.stdout), result.stdout
        outputs.append(out)
    if nproc == 3:
        assert_modes_check(trace, calls, tmp_path, nproc)
    if nproc == 1:
        paced = replay(trace, "--pace", "--repeat", "2", nproc=1)
        assert paced.returncode == 0 and "paced" in paced.stdout, paced
        outputs.append(tmp_path / "again.jsonl")
        assert replay(trace, "--repeat", "3", "--output", outputs[-1], nproc=1).returncode == 0
    compared = subprocess.run([sys.executable, "report.py", "compare", *map(str, outputs)],
                              cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert compared.returncode == 0, compared.stderr
    assert re.search(r"one pass\s+[\d.]+\s+[\d.]+\s+[\d.]+ ?\*?\s+\[[\d.]+, [\d.]+\]",
                     compared.stdout), compared.stdout
    assert re.search(r"the pass: .*calls marked slower in B: \d+, faster: \d+, of "
                     rf"{sum(1 for c in calls if c['op'] != 'wait')}", compared.stdout)
    page = tmp_path / "replays.html"  # report.py html of replays: their tables, the prediction
    made = subprocess.run([sys.executable, "report.py", "html", *map(str, outputs), "-o",
                           str(page)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    text = page.read_text()
    assert text.count("<h3>the job against the replay</h3>") == len(outputs)
    total = records(outputs[0])[-1]["prediction"]["total"]
    assert f'data-value="{total["job_s"]!r}"' in text
    dry = launch("replay.py", trace, "--dry-run", backend=None, timeout=60)  # one process
    assert dry.returncode == 0, dry
    assert f"{nproc} ranks" in dry.stdout and "nothing was sent" in dry.stdout


MODES = (("--isolated",), ("--pace", "compute"))
TITLES = {"--isolated": "isolated", "--pace": "paced, gaps filled with matmul compute"}


def assert_modes_check(trace, calls, tmp_path, nproc):
    """--isolated and --pace compute, one launch each: 0 wrong, the mode in the table's title
    and the results file, the calibration in the start-up lines."""
    for flags in MODES:
        out = tmp_path / f"mode{flags[0]}.jsonl"
        result = replay(trace, "--check", "--repeat", "2", "--top", "0", "--backend", "gloo",
                        "--output", out, *flags, nproc=nproc)
        assert_checked(result, calls)
        title = TITLES[flags[0]]
        assert f"after 1 warmup, {title} " in result.stdout, result.stdout
        assert records(out)[0]["mode"] == title
        if flags[0] == "--pace":
            assert re.search(r"--pace compute: the job's gaps filled with matmul compute .*"
                             r"calibrated on every rank at once .*: [\d,]+(, [\d,]+)+ units/s",
                             result.stderr), result.stderr


def test_isolated_and_pace_compute_at_2_ranks_and_their_bad_combination(tmp_path):
    """A trace the suite recorded (tests/data/traced-2ranks: traced_job.py on 2 ranks)."""
    trace = DATA / "traced-2ranks"
    assert_modes_check(trace, recorded_calls(trace, 2), tmp_path, 2)
    refused = replay(trace, "--pace", "--isolated", timeout=120)
    assert_one_line(refused, "--isolated and --pace do not go together")


# ------------------------------------------------------------------------ others' formats

def test_an_execution_trace_of_a_plain_script_replays(tmp_path):
    trace = tmp_path / "et"
    trace.mkdir()
    job_ranks(DATA / "et_job.py", trace, 2)
    out = tmp_path / "replay.jsonl"
    result = replay(trace, "--check", "--output", out)
    calls = [r for r in records(out) if r["type"] == "call"]
    assert_checked(result, calls)
    mine = [(c["op"], c.get("dtype"), c.get("in_numel"), c.get("out_numel"))
            for c in calls if c["rank"] == 0 and c["op"] != "wait"]
    assert mine == [("all_reduce", "float32", 1000, 1000), ("broadcast", "float32", 1000, 1000),
                    ("all_gather", "float32", 1000, 2000), ("all_reduce", "float32", 1000, 1000),
                    ("reduce_scatter", "float32", 2000, 1000),
                    ("all_to_all", "float32", 16, 16), ("all_to_all", "float32", 6, 6),
                    ("send", "bfloat16", 10, 0), ("barrier", None, 0, 0)], mine
    # what the replay assumes of an execution trace, said before the run
    assert "it does not say which group a call used, nor its reduction" in result.stderr
    assert "waited for before the first later operator that touches its tensors" in result.stderr


def param_trace(directory, world_size=3, broken=None):
    """A PARAM basic comms trace: per rank a JSON list, PARAM's own names and fields."""
    directory.mkdir(parents=True, exist_ok=True)
    for rank in range(world_size):
        everyone, last = list(range(world_size)), world_size - 1
        entries = [{"comms": "init", "pg_id": 1, "global_ranks": [0, last]},
                   {"comms": "all_reduce", "req": 0, "in_msg_size": 1024, "out_msg_size": 1024,
                    "dtype": "Float", "pg_id": 0, "global_ranks": everyone,
                    "world_size": world_size, "startTime_ns": 1000},
                   {"comms": "wait", "req": 0},
                   {"comms": "all_to_allv", "req": 1, "dtype": "Float",
                    "in_msg_size": sum(rank + j + 1 for j in everyone),
                    "out_msg_size": sum(j + rank + 1 for j in everyone),
                    "in_split": [rank + j + 1 for j in everyone],
                    "out_split": [j + rank + 1 for j in everyone], "global_ranks": everyone},
                   {"comms": "broadcast", "req": 2, "root": 1, "in_msg_size": 64,
                    "out_msg_size": 64, "dtype": "Half"},
                   {"comms": "_allgather_base", "req": 3, "in_msg_size": 10,
                    "out_msg_size": 10 * world_size, "dtype": "bfloat16"},
                   {"comms": "reduce_scatter_base", "req": 4, "in_msg_size": 10 * world_size,
                    "out_msg_size": 10, "dtype": "Int"}]
        if rank in (0, last):
            entries.append({"comms": "all_reduce", "req": 5, "pg_id": 1, "in_msg_size": 5,
                            "out_msg_size": 5, "dtype": "Double"})
        entries += [{"comms": "isend", "req": 6, "src_rank": rank,
                     "dst_rank": (rank + 1) % world_size, "in_msg_size": 33, "out_msg_size": 33,
                     "dtype": "Float", "use_batch": True},
                    {"comms": "irecv", "req": 7, "src_rank": (rank - 1) % world_size,
                     "dst_rank": rank, "in_msg_size": 33, "out_msg_size": 33, "dtype": "Float",
                     "use_batch": True},
                    {"comms": "wait", "req": 6}, {"comms": "wait", "req": 7},
                    {"comms": "barrier", "req": 8}]
        if broken and rank in broken:
            entries = broken[rank](entries)
        (directory / f"rank{rank}.json").write_text(json.dumps(entries))
    return directory


def test_a_param_basic_trace_replays(tmp_path):
    """3 ranks, with --per-trial: each pass a trial in the summary, as report.py trials reads
    it (every rank's pass times, whose slowest is the summary's pass time)."""
    trace = param_trace(tmp_path / "param")
    out = tmp_path / "replay.jsonl"
    result = replay(trace, "--check", "--repeat", "6", "--per-trial", "--output", out, nproc=3)
    summary = next(r for r in records(out) if r["type"] == "replay_summary")
    from commbench.bench import trials
    decoded = trials.decode(summary["per_trial"])
    ranks, durations, arrivals, error = (decoded.ranks, decoded.durations, decoded.arrivals,
                                         decoded.error)
    assert decoded.clock == "shared" and error == 0
    assert ranks == [0, 1, 2] and len(durations[0]) == 6 and 0 <= error < 1, summary["per_trial"]
    slowest = [max(d[k] for d in durations) for k in range(6)]
    assert slowest == pytest.approx(summary["pass_times_s"], rel=1e-6, abs=1e-6)
    assert all(min(a[k] for a in arrivals) == 0 for k in range(6))  # after the first to come
    shown = subprocess.run([sys.executable, "report.py", "trials", str(out)], cwd=ROOT,
                           capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("replay (a trial is a pass): 6 trials on 3 ranks"), shown.stdout
    assert "  first trial   " in shown.stdout and "  drift         " in shown.stdout
    calls = [r for r in records(out) if r["type"] == "call"]
    assert_checked(result, calls)
    rank0 = [(c["op"], c.get("dtype"), c.get("in_numel"), c.get("req") is not None)
             for c in calls if c["rank"] == 0]
    assert rank0 == [("all_reduce", "float32", 1024, True), ("wait", None, 0, False),
                     ("all_to_all", "float32", 6, False), ("broadcast", "float16", 64, False),
                     ("all_gather", "bfloat16", 10, False),
                     ("reduce_scatter", "int32", 30, False), ("all_reduce", "float64", 5, False),
                     ("batch", None, 33, True), ("wait", None, 0, False),
                     ("wait", None, 0, False), ("barrier", None, 0, False)], rank0
    assert next(c for c in calls if c["rank"] == 2 and c.get("dtype") == "float64")["group"] == \
        [0, 2]
    assert "PARAM basic trace" in result.stderr


# ------------------------------------------------------------------------------- bad traces

def _replace(index, entry):
    return lambda entries: entries[:index] + [entry] + entries[index + 1:]


BAD = {
    "missing rank": (lambda d: (param_trace(d, 3), (d / "rank1.json").unlink()),
                     ["no file for rank 1"]),
    "not JSON": (lambda d: (param_trace(d, 2), (d / "rank1.json").write_text("[{\"comms\": ")),
                 ["rank1.json: not JSON"]),
    "unknown op": (lambda d: param_trace(d, 2, {0: _replace(1, {"comms": "all_reduce_magic"}),
                                                 1: _replace(1, {"comms": "all_reduce_magic"})}),
                   ["'all_reduce_magic' is an op the communication layer does not have"]),
    "too big": (lambda d: param_trace(d, 2, {r: _replace(1, {
        "comms": "all_reduce", "req": 0, "in_msg_size": 10 ** 13, "out_msg_size": 10 ** 13,
        "dtype": "Float"}) for r in (0, 1)}), ["more than the", "a rank has here"]),
    "world size": (lambda d: param_trace(d, 3), ["holds a 3-rank trace; this run has 2 ranks"]),
    "disagree": (lambda d: param_trace(d, 2, {1: _replace(1, {
        "comms": "all_reduce", "req": 0, "in_msg_size": 999, "out_msg_size": 999, "dtype": "Float"})}),
        ["disagree at the 1st call in group [0, 1]", "rank 1 all_reduce of 999 float32"]),
}


# A trace that cannot be read (a missing rank's file, a file that is not JSON, an unknown op) is
# one TraceError on the same path to every rank's line and exit 2: the unknown op's run here,
# each reader's message in-process (tests/test_logic_trace.py: rank_files, load_json, PARAM's
# entries). The others need the ranks: their memory, their world size, their agreement.
@pytest.mark.parametrize("case", ["unknown op", "too big", "world size", "disagree"])
def test_a_bad_trace_is_one_line_on_every_rank(tmp_path, case):
    make, needles = BAD[case]
    make(tmp_path / "trace")
    result = replay(tmp_path / "trace", nproc=2, timeout=120)
    assert_one_line(result, *needles)


@pytest.mark.fast  # in-process: the reader replay.py's ranks call first
@pytest.mark.parametrize("case", ["missing rank", "not JSON"])
def test_an_unreadable_trace_is_one_error(tmp_path, case):
    from commbench.trace import formats
    from commbench.trace.model import TraceError
    make, needles = BAD[case]
    make(tmp_path / "trace")
    with pytest.raises(TraceError) as caught:
        formats.read(str(tmp_path / "trace"))
    assert "\n" not in str(caught.value)
    for needle in needles:
        assert needle in str(caught.value)
