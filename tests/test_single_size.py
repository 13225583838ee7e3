"""Single-size runs: E follows SPEC §4 from the per-rank memory the run reports on stderr."""

import re

import pytest

from formulas import expected_ops, single_size

PLAN = re.compile(r"commbench: (\w+): single size from per-rank memory (\d+) B x ([\d.e-]+) = "
                  r"(\d+) B -> (\d+) elements of (\d+) B")
MEM_FACTOR = 1e-6


def host_memory():
    fields = dict(line.split(":", 1) for line in open("/proc/meminfo"))
    return {k: int(v.split()[0]) * 1024 for k, v in fields.items() if k in ("MemTotal", "MemAvailable")}


@pytest.mark.parametrize("nproc,dist", [(1, "torch"), (3, "torch"), (2, "deepspeed")])
def test_single_size_follows_memory_rule(run, nproc, dist):
    before = host_memory()
    result = run("run_all.py", "--raw", f"--mem-factor={MEM_FACTOR}", "--trials=3", "--warmups=1",
                 f"--dist={dist}", nproc=nproc)
    assert result.returncode == 0, result
    plans = {m.group(1): m for m in map(PLAN.match, result.stderr.splitlines()) if m}
    assert list(plans) == expected_ops(nproc), result
    for op, plan in plans.items():
        memory, factor, numel = int(plan.group(2)), float(plan.group(3)), int(plan.group(5))
        # CPU: the host's available memory shared by the local ranks, never total RAM per rank.
        assert memory <= before["MemTotal"] // nproc
        assert memory >= 0.5 * before["MemAvailable"] // nproc
        want_factor, want_numel = single_size(op, memory, MEM_FACTOR, 4, nproc)
        assert factor == pytest.approx(want_factor, rel=1e-5)
        assert numel == want_numel, (op, memory)
        table = result.table(op)
        assert [row.description for row in table.rows] == [f"{numel}x4"]
        assert int(table.rows[0].size) == numel * 4
        if op in ("all_to_all", "reduce_scatter"):
            assert numel % nproc == 0


def test_single_size_half_precision(run):
    result = run("all_gather.py", "--raw", "--mem-factor=0.000001", "--dtype=half", "--trials=2",
                 "--dist=torch", nproc=3)
    assert result.returncode == 0, result
    (row,) = result.table("all_gather").rows
    assert row.element_size == 2
    assert row.numel & (row.numel - 1) == 0  # a power of two
