"""Single-size runs at --mem-factor 1 with 3 local ranks, inside a real memory limit.

Each run is started in a memory cgroup of its own (a few GB, so that the test is safe on a
shared machine): the kernel's OOM killer enforces the limit exactly as it would the host's RAM,
and the suite must read the limit (as it does inside a container or a Slurm job) and plan every
buffer against it. SPEC §4's rule alone asks for more than the limit at this factor, so a
planner that forgot a buffer would be killed here, not merely print a wrong figure.
"""

import json
import re
from pathlib import Path

import pytest

from conftest import MIB, PLAN, assert_no_traceback, launch, memory_cgroup
from formulas import CPU_FOOTPRINT, expected_ops

def records_of(path):
    lines = [json.loads(line) for line in Path(path).read_text().splitlines()]
    return {r["op"]: r for r in lines if r.get("type") == "result"}


@pytest.mark.parametrize("dist,launcher,ops,limit_mib", [
    ("torch", "torchrun", [], 2500),
    ("deepspeed", "deepspeed", ["--all-gather", "--reduce-scatter"], 3000),
])
def test_mem_factor_1_with_3_ranks_fits_a_memory_limit(tmp_path, dist, launcher, ops, limit_mib):
    output = tmp_path / "results.jsonl"
    with memory_cgroup(limit_mib * MIB) as group:
        result = launch("run_all.py", "--mem-factor=1", "--trials=2", "--warmups=1", "--check",
                        f"--dist={dist}", f"--output={output}", *ops, nproc=3, launcher=launcher,
                        preexec_fn=group.enter)
        peak, kills = group.peak(), group.oom_kills()
    assert result.returncode == 0, result
    # Not killed, and not safe by being small: the plans took the job most of the way up.
    assert kills == 0 and peak > group.limit / 2, (kills, peak)
    assert_no_traceback(result)

    plans = {m["op"]: m for m in map(PLAN.match, result.stderr.splitlines()) if m}
    wanted = [op.strip("-").replace("-", "_") for op in ops] or expected_ops(3)
    assert list(plans) == wanted, result
    records = records_of(output)
    for op, plan in plans.items():
        memory, usable, planned = int(plan["memory"]), int(plan["usable"]), int(plan["planned"])
        # The limit, not the host's MemAvailable, is what the ranks share.
        assert plan["source"] == "cgroup memory limit less usage / 3 local ranks", plan.string
        assert 3 * memory < group.limit
        # SPEC's rule alone would not fit: it is the plan that keeps the run alive.
        assert plan["verdict"] == "over" and 3 * int(plan["need"]) > group.limit, plan.string
        assert planned <= usable == int(memory * 0.9)
        numel = int(plan["numel"])
        assert planned == int(numel * 4 * CPU_FOOTPRINT[op](3)) + 128 * MIB  # with --check
        # SPEC's rounding (floor, or a power of two) may halve the buffers, never more.
        assert planned - 128 * MIB > (usable - 128 * MIB) / 2, plan.string
        # What each rank used (peak resident memory above its memory before the buffers) stays
        # within what was planned for it (test_model_counts_every_buffer checks the model
        # without its reserves).
        record = records[op]
        assert record["numel"] == numel and record["wrong"] == 0
        used = record["memory_used_per_rank_bytes"]
        assert len(used) == 3 and all(u is not None and u <= planned for u in used), (op, used)
    assert len(result.tables) == len(wanted)


def test_model_counts_every_buffer(tmp_path):
    """At the largest size of a 3-rank scan (24 MiB of input per rank) the memory each rank
    used is within the buffers the model counts, reserves left out, plus 16 MiB: a model
    without gloo's staging copy (72 MiB for all_gather here, 24 MiB for reduce_scatter) or
    without all_gather's n-fold output would fail."""
    output = tmp_path / "scan.jsonl"
    result = launch("run_all.py", "--scan", "--maxsize=22", "--trials=1", "--warmups=0",
                    "--dist=torch", f"--output={output}", nproc=3)
    assert result.returncode == 0, result
    for op, record in records_of(output).items():  # the last record of an op is its largest
        assert record["size_bytes"] == 3 * 2 ** 21 * 4
        model = record["size_bytes"] * CPU_FOOTPRINT[op](3)
        used = max(record["memory_used_per_rank_bytes"])
        assert used <= model + 16 * MIB, (op, used, model)


def test_scan_stops_before_the_limit(tmp_path):
    """A scan to --maxsize 40 stops each op at the first size whose footprint exceeds what the
    ranks have free (an allocation would succeed; touching its pages would bring the OOM
    killer): one warning per op, the rows so far kept and recorded, the next op runs, exit 0."""
    output = tmp_path / "scan.csv"
    with memory_cgroup(1500 * MIB) as group:
        result = launch("run_all.py", "--scan", "--maxsize=40", "--trials=1", "--warmups=0",
                        "--dist=torch", "--all-gather", "--all-reduce", f"--output={output}",
                        nproc=2, preexec_fn=group.enter)
        kills = group.oom_kills()
    assert result.returncode == 0 and kills == 0, result
    assert_no_traceback(result)
    assert result.ops == ["all_reduce", "all_gather"]
    warnings = [line for line in result.stderr.splitlines() if "WARNING" in line]
    assert len(warnings) == 2, result
    for table, warning in zip(result.tables, warnings):
        rows = len(table.rows)
        assert 15 <= rows < 30, result  # hundreds of MB per rank, not the 2^39 of --maxsize 40
        assert [row.numel for row in table.rows] == [2 * 2 ** p for p in range(1, rows + 1)]
        stopped = 2 * 2 ** (rows + 1)
        match = re.fullmatch(rf"commbench: WARNING: {table.op}: {stopped} elements of float per "
                             r"rank take (\d+) B with the backend's copies, more than the (\d+) B "
                             r"a rank has free; stopping this op here \(lower --mem-factor or "
                             r"--maxsize\)", warning)
        assert match, warning
        need, free = int(match.group(1)), int(match.group(2))
        assert need == stopped * 4 * CPU_FOOTPRINT[table.op](2) + 64 * MIB and free < need
        assert 2 * free < group.limit
    lines = output.read_text().splitlines()
    assert len(lines) == 1 + sum(len(t.rows) for t in result.tables)


def test_async_scan_counts_a_staging_copy_per_op_in_flight(tmp_path):
    """With --async-op every trial is issued before the first is waited on, and gloo stages
    each reduce_scatter and all_gather through a copy of its own: 50 in flight at 32 MiB per
    rank take 1.6 GiB of copies. Counting one (as before) got this scan OOM-killed in 2 GiB at
    reduce_scatter's largest size; counting all, the two ops stop with their warning."""
    with memory_cgroup(2048 * MIB) as group:
        result = launch("run_all.py", "--scan", "--maxsize=24", "--async-op", "--trials=50",
                        "--warmups=2", "--dist=torch", "--all-gather", "--reduce-scatter",
                        "--all-reduce", preexec_fn=group.enter)
        kills = group.oom_kills()
    assert result.returncode == 0 and kills == 0, result
    assert_no_traceback(result)
    tables = {table.op: table for table in result.tables}
    assert len(tables["all_reduce"].rows) == 23  # no staging copy: the whole scan
    warnings = [line for line in result.stderr.splitlines() if "WARNING" in line]
    assert [w.split(":")[2].strip() for w in warnings] == ["all_gather", "reduce_scatter"], result
    for op, share in (("all_gather", 1 + 1 + 50), ("reduce_scatter", 1 + 1 + 50)):
        stopped = 2 * 2 ** len(tables[op].rows)
        match = re.search(rf"{op}: {stopped} elements of float per rank take (\d+) B", result.stderr)
        assert match and int(match.group(1)) == stopped * 4 * share + 64 * MIB, result.stderr
