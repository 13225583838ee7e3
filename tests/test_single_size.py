"""Single-size runs: E follows SPEC §4 from the per-rank memory the run reports on stderr, capped
so that every buffer the op allocates fits (see test_memory.py for runs against a real limit)."""

import pytest

from support import PLAN
from formulas import CPU_FOOTPRINT, expected_ops, planned_single_size, single_size

MEM_FACTOR = 1e-6


def host_memory():
    fields = dict(line.split(":", 1) for line in open("/proc/meminfo"))
    return {k: int(v.split()[0]) * 1024 for k, v in fields.items() if k in ("MemTotal", "MemAvailable")}


def plans_of(result):
    return {m["op"]: m for m in map(PLAN.match, result.stderr.splitlines()) if m}


@pytest.mark.parametrize("nproc,dist", [(1, "torch"), (3, "torch"), (2, "deepspeed")])
def test_single_size_follows_memory_rule(run, nproc, dist):
    """The six by SPEC §4's rule, and reduce (whole), scatter (SPLIT: n x a power of two) and
    barrier (no size) beside them; --check on, 0 wrong (its reserve is in every plan)."""
    # all_gather and gather plan on mem-factor + 0.2 of the host's memory (SPEC §4): gigabytes
    # of buffers and minutes of allocation here; their rules are checked below, in a memory
    # cgroup.
    ops = [op for op in expected_ops(nproc) if op != "all_gather"]
    more = ["reduce", "scatter", "barrier"]
    before = host_memory()
    result = run("run_all.py", "--raw", f"--mem-factor={MEM_FACTOR}", "--trials=3", "--warmups=1",
                 "--check", f"--dist={dist}",
                 *[f"--{op.replace('_', '-')}" for op in ops + more], nproc=nproc)
    assert result.returncode == 0, result
    assert all(wrong(table) == [0] for table in result.tables), result
    plans = plans_of(result)
    assert list(plans) == ops + more[:-1], result  # a barrier has nothing to plan
    for op in ops:
        plan = plans[op]
        memory, factor, numel = int(plan["memory"]), float(plan["factor"]), int(plan["numel"])
        # CPU: the host's available memory shared by the local ranks, never total RAM per rank.
        assert memory <= before["MemTotal"] // nproc
        assert memory >= 0.5 * before["MemAvailable"] // nproc
        assert plan["source"] == "MemAvailable / " + \
            (f"{nproc} local ranks" if nproc > 1 else "1 local rank")
        want_factor, want_nominal = single_size(op, memory, MEM_FACTOR, 4, nproc)
        assert factor == pytest.approx(want_factor, rel=1e-5)
        assert int(plan["nominal"]) == want_nominal, (op, memory)
        assert numel == planned_single_size(op, memory, MEM_FACTOR, 4, nproc, check=True), \
            (op, memory)
        # What the plan counts: every buffer, the backend's staging copy, and its reserve and
        # --check's.
        assert int(plan["planned"]) == int(numel * 4 * CPU_FOOTPRINT[op](nproc)) + 128 * 2 ** 20
        assert int(plan["planned"]) <= int(plan["usable"]) == int(memory * 0.9)
        table = result.table(op)
        assert [row.description for row in table.rows] == [f"{numel}x4"]
        assert int(table.rows[0].size) == numel * 4
        if op in ("all_to_all", "reduce_scatter"):
            assert numel % nproc == 0
    (reduce,) = result.table("reduce").rows
    assert reduce.numel == int(plans["reduce"]["numel"]) > 0
    (scatter,) = result.table("scatter").rows
    assert scatter.numel % nproc == 0 and (scatter.numel // nproc) & (scatter.numel // nproc - 1) == 0
    assert [row.size for row in result.table("barrier").rows] == ["0"]


def wrong(table):
    return [int(row.extra[-1]) for row in table.rows]


def test_all_gather_single_size_in_half_precision(run):
    """all_gather's rule (mem-factor + 0.2 with the one-tensor API, a power of two per rank) and
    gather's (GATHERED: a power of two) at 3 ranks, --check on, in a 2 GiB memory cgroup (their
    plans over the host's memory would allocate GBs)."""
    from support import MIB, memory_cgroup
    with memory_cgroup(2048 * MIB) as group:
        result = run("run_all.py", "--all-gather", "--gather", "--raw", "--mem-factor=0.000001",
                     "--dtype=half", "--trials=2", "--warmups=0", "--check", "--dist=torch",
                     nproc=3, preexec_fn=group.enter)
    assert result.returncode == 0, result
    assert all(wrong(table) == [0] for table in result.tables), result
    (gather,) = result.table("gather").rows
    assert gather.numel & (gather.numel - 1) == 0 and gather.element_size == 2
    (row,) = result.table("all_gather").rows
    assert row.element_size == 2
    assert row.numel & (row.numel - 1) == 0  # a power of two
    plan = plans_of(result)["all_gather"]
    memory = int(plan["memory"])
    want_factor, want_nominal = single_size("all_gather", memory, 1e-6, 2, 3)
    assert float(plan["factor"]) == pytest.approx(want_factor, rel=1e-5)
    assert int(plan["nominal"]) == want_nominal
    assert int(plan["planned"]) == row.numel * 2 * 7 + 128 * 2 ** 20  # and --check's reserve
