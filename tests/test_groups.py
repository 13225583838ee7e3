"""--groups: each op concurrently in sub-groups, across 2 simulated hosts x 2 ranks (started by
hand in each host with the environment torchrun's multi-node launch gives them, both layers),
read from the printed tables, the results file and `report.py compare RUN`; on one host, the
layouts it can and cannot make."""

import csv
import json
import subprocess
import sys

import pytest

from support import ROOT, parse_tables
from test_many_hosts import by_hand

from commbench.errors import UsageError
from commbench.ranks.groups import kinds, layout


def _records(path):
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return lines[0], lines[1:]


@pytest.mark.parametrize("dist", ["torch", "deepspeed"])
def test_layouts_across_two_hosts(hosts, tmp_path, dist):  # noqa: F811
    name, subnet = hosts(2)
    output = tmp_path / "groups.jsonl"
    repeat = ["--repeat=2"] if dist == "deepspeed" else []
    # torch: all eleven ops (roots: broadcast, reduce, gather, scatter, pt2pt's sender) in groups
    # whose first rank is not rank 0 (inter's group 1), under a reducing operator other than sum
    every = ["--all", "--op=max"] if dist == "torch" else []
    stdout, stderrs, statuses = by_hand(
        name, subnet, 2, 2, f"--dist={dist}", "--scan", "--maxsize=4", "--trials=2", "--check",
        "--stats", "--groups=world,intra,inter", f"--output={output}", *repeat, *every)
    assert statuses == [0, 0], stderrs
    h1, h2 = f"{name}1", f"{name}2"
    assert f"--groups intra: group 0 (ranks 0 1 on {h1}); group 1 (ranks 2 3 on {h2})" \
        in stderrs[0]
    assert "--groups inter: group 0 (ranks 0 2); group 1 (ranks 1 3)" in stderrs[0]
    tables = parse_tables(stdout)
    ops = ["all_reduce", "all_gather", "all_to_all", "reduce_scatter", "pt2pt", "broadcast"]
    if every:
        ops += ["reduce", "gather", "scatter", "all_to_allv", "barrier"]
    # per op: the world's table, then each layout's group 0 (live) and group 1 (after the op)
    expected = [(op, layout_, group, ranks, host)
                for op in ops for layout_, group, ranks, host in
                [(None, None, None, None), ("intra", 0, [0, 1], h1), ("intra", 1, [2, 3], h2),
                 ("inter", 0, [0, 2], None), ("inter", 1, [1, 3], None)]]
    assert [(t.op, t.qualifiers.get("layout"), t.qualifiers.get("group"),
             t.qualifiers.get("ranks"), t.qualifiers.get("host")) for t in tables] == expected
    for table in tables:
        grouped = "layout" in table.qualifiers
        assert table.devices == (2 if grouped or table.op == "pt2pt" else 4)
        assert table.rows and all(row.extra[-1] == "0" for row in table.rows)
        # the straggler, where the evidence names one, is one of the group's own ranks
        slowest = {int(row.extra[-2].split("@")[0]) for row in table.rows
                   if row.extra[-2] != "-"}
        assert slowest <= set(table.qualifiers.get("ranks") or range(4))
        # sizes follow the group's size: the scan's n x 2^p with n = 2 in a layout
        if grouped and table.op == "all_reduce":
            assert [row.numel for row in table.rows] == [4, 8, 16]

    meta, records = _records(output)
    assert meta["world_size"] == 4 and meta["hostnames"] == [h1, h1, h2, h2]
    assert meta["groups"] == {"world": [[0, 1, 2, 3]], "intra": [[0, 1], [2, 3]],
                              "inter": [[0, 2], [1, 3]]}
    whole = [r for r in records if r.get("window") is None]
    assert all(r["wrong"] == 0 for r in whole)
    intra = [r for r in whole if r.get("groups") == "intra" and r["op"] == "all_reduce"]
    # one record per size and group, as each size is measured
    assert [(r["size_bytes"], r["group"], r["group_ranks"], r["world_size"]) for r in intra] == \
        [(size, g, ranks, 2) for size in (16, 32, 64) for g, ranks in [(0, [0, 1]), (1, [2, 3])]]
    for r in intra:  # a group's figure is its first rank's; its spread, its own ranks'
        assert r["duration_s"] == r["durations_per_rank_s"][0]
        assert len(r["durations_per_rank_s"]) == 2
        if r["slowest_rank"] is not None:  # None: no straggler beyond the evidence
            assert meta["hostnames"][r["slowest_rank"]] == r["slowest_host"]
            assert r["slowest_rank"] in r["group_ranks"]
        # algbw of all_reduce is 2S/t with the group's n = 2
        assert r["busbw_Bps"] == pytest.approx(r["throughput_Bps"] * 0.5)
    if repeat:  # --repeat: each group's earlier window recorded at once, then the whole record
        windows = [r for r in records if r.get("window") == 0 and r.get("groups") == "inter"]
        assert {(r["group"], r["size_bytes"]) for r in windows} == \
            {(r["group"], r["size_bytes"]) for r in whole if r.get("groups") == "inter"}
        assert all(len(r["windows_s"]) == 2 for r in whole if r["op"] != "barrier")

    report = subprocess.run([sys.executable, "report.py", "compare", str(output)], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert report.returncode == 0, report.stderr
    assert "world (us)  intra-host (us)  inter-host (us)" in report.stdout
    assert "all_reduce: inter-host / intra-host time" in report.stdout
    # the layout's figure is its slowest group's
    slowest = max(r["duration_s"] for r in intra if r["size_bytes"] == 16)
    assert f"{slowest * 1e6:.3f}" in report.stdout.split("---- all_gather")[0]

    # the strategy estimate prices tensor parallelism on the intra-host curve, data
    # parallelism on the inter-host one
    plan = subprocess.run([sys.executable, "report.py", "strategy", str(output), "--params=1M",
                           "--hidden=64", "--layers=2", "--seq=8", "--tp=2"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert plan.returncode == 0, plan.stderr
    rows = {line.split(" | ")[0].strip("| "): line for line in plan.stdout.splitlines()
            if line.startswith("| ")}
    assert "x all_reduce inter of" in rows["DDP"] and "x all_reduce intra of" in rows["TP=2"]
    assert "x all_gather inter of" in rows["ZeRO-1"]
    assert "x reduce_scatter inter of" in rows["ZeRO-3"]
    assert "on 4 ranks" in plan.stdout  # the world's size, not a group's


def test_intra_on_one_host_is_one_group(run, tmp_path):
    """On one host, intra is one group of every rank (through a sub-group all the same), and
    inter cannot be made: one line, exit 2."""
    output = tmp_path / "intra.csv"
    result = run("all_reduce.py", "--scan", "--maxsize=4", "--trials=2", "--check",
                 "--groups=intra", f"--output={output}", nproc=3)
    assert result.returncode == 0, result
    table = result.table("all_reduce")
    assert table.qualifiers["layout"] == "intra" and table.qualifiers["ranks"] == [0, 1, 2]
    assert table.devices == 3 and [row.numel for row in table.rows] == [6, 12, 24]
    assert all(row.extra == ["0"] for row in table.rows)
    rows = list(csv.DictReader(output.open()))  # the CSV's rows name their group too
    assert [(r["groups"], r["group"], r["group_ranks"], r["world_size"]) for r in rows] == \
        [("intra", "0", "0 1 2", "3")] * 3

    result = run("all_reduce.py", "--groups=world,inter", nproc=2)
    assert result.returncode == 2, result
    errors = [line for line in result.stderr.splitlines() if "error" in line]
    assert errors == ["commbench: error: --groups inter: 2 ranks on 1 host make groups of one "
                      "rank; inter needs ranks on 2 or more hosts"]
    assert "Traceback" not in result.stderr
    assert result.tables == []


@pytest.mark.parametrize("text", ["intra,bogus", "intra,intra", ""])
def test_bad_groups_flag(run, text):
    result = run("all_reduce.py", f"--groups={text}")
    assert result.returncode == 2
    assert "--groups" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.fast  # in-process
def test_layouts_of_hosts():
    """The layouts: hosts in the order their first rank comes, ranks in rank order."""
    names = ["b", "a", "b", "a", "b", "a"]  # ranks interleaved over two hosts
    assert layout("world", names) == [[0, 1, 2, 3, 4, 5]]
    assert layout("intra", names) == [[0, 2, 4], [1, 3, 5]]
    assert layout("inter", names) == [[0, 1], [2, 3], [4, 5]]
    assert layout("inter", ["a", "b", "c"]) == [[0, 1, 2]]
    with pytest.raises(UsageError, match=r"same number of ranks on every host \(a 2, b 1\)"):
        layout("intra", ["a", "a", "b"])
    with pytest.raises(UsageError, match="1 rank on each of 3 hosts"):
        layout("intra", ["a", "b", "c"])
    assert kinds("inter,world") == ["inter", "world"]


def test_split_strided_and_pairs_across_two_hosts(hosts, tmp_path):
    """--split 2:strided on 2 hosts x 2 ranks: every 2nd rank together, each group across both
    hosts (as data parallelism's), beside the whole world (--groups world); pt2pt --pairs
    across --bidirectional: rank i with i + 2, host 1 with host 2, both ways at once."""
    name, subnet = hosts(2)
    output = tmp_path / "split.jsonl"
    stdout, stderrs, statuses = by_hand(
        name, subnet, 2, 2, "--dist=torch", "--all-reduce", "--pt2pt", "--pairs=across",
        "--bidirectional", "--groups=world", "--split=2:strided", "--scan", "--maxsize=4",
        "--trials=2", "--check", f"--output={output}")
    assert statuses == [0, 0], stderrs
    h1, h2 = f"{name}1", f"{name}2"
    assert f"--split 2 (strided): group 0 (ranks 0 2 on {h1} {h2}); group 1 (ranks 1 3 on " \
           f"{h1} {h2})" in stderrs[0]
    tables = parse_tables(stdout)
    shown = [(t.op, t.devices, t.qualifiers.get("ranks"), t.qualifiers.get("split"),
              t.qualifiers.get("pairs")) for t in tables]
    total = "aggregate of 2 groups at once"
    assert shown == [
        ("all_reduce", 4, None, None, None), ("all_reduce", 2, [0, 2], None, None),
        ("all_reduce", 2, [1, 3], None, None), ("all_reduce", 4, None, total, None),
        ("pt2pt", 4, None, None, "across (0-2 1-3)"),
        ("pt2pt", 2, [0, 2], None, "across (0-1)"), ("pt2pt", 2, [1, 3], None, "across (0-1)"),
        ("pt2pt", 4, None, total, "across (0-1)")]
    assert all(row.extra[-1] == "0" for t in tables for row in t.rows)
    meta, records = _records(output)
    assert meta["groups"]["split"] == [[0, 2], [1, 3]] and meta["split"] == [2, "strided"]
    world = [r for r in records if r["op"] == "pt2pt" and not r.get("groups")]
    assert all(r["pairs"] == [[0, 2], [1, 3]] and r["bidirectional"] for r in world)
    # two pairs both ways: Throughput 4 messages' bytes a second, BusBW one pair's 2
    assert all(r["throughput_Bps"] == pytest.approx(2 * r["busbw_Bps"]) for r in world)
