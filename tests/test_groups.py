"""--groups: each op concurrently in sub-groups, across 2 simulated hosts x 2 ranks (under
torchrun's multi-node launch, both layers: the suite's own multi-node torchrun runs, read for
what a run across hosts shows beside its layouts too; --split's ranks started by hand in each
host with the environment torchrun gives them), read from the printed tables, the results file
and `report.py compare RUN`; on one host, the layouts it can and cannot make."""

import csv
import json
import subprocess
import sys

import pytest

from support import ROOT, parse_tables
from test_docs_examples import given_to, own_hosts, run_example
from test_many_hosts import across, by_hand

from commbench.errors import UsageError
from commbench.ranks.groups import kinds, layout


def _records(path):
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return lines[0], lines[1:]


ELEVEN = ["all_reduce", "all_gather", "all_to_all", "reduce_scatter", "pt2pt", "broadcast",
          "reduce", "gather", "scatter", "all_to_allv", "barrier"]


def test_layouts_across_two_hosts(hosts, tmp_path):
    """DeepSpeed's layer under torchrun: all eleven ops (roots: broadcast, reduce, gather,
    scatter, pt2pt's sender) in groups whose first rank is not rank 0 (inter's group 1), under a
    reducing operator other than sum, with --repeat and --stats. Torch's layer under torchrun:
    the test below; its eleven ops in groups: test_split_strided_and_pairs_across_two_hosts."""
    name, subnet = hosts(2)
    output = tmp_path / "groups.jsonl"
    stdout, stderrs, statuses = across(
        name, subnet, 2, 2, "--dist=deepspeed", "--scan", "--maxsize=4", "--trials=2", "--check",
        "--stats", "--groups=world,intra,inter", f"--output={output}", "--repeat=2", "--all",
        "--op=max", "--warmups=1")
    assert statuses == [0, 0], stderrs
    report = subprocess.run([sys.executable, "report.py", "compare", str(output)], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert report.returncode == 0, report.stderr
    check_layouts(name, subnet, stdout, stderrs[0], output, report.stdout, ELEVEN,
                  numels=[4, 8, 16], stats=True, repeat=True)


def test_layouts_across_two_hosts_as_cluster_md_runs_them(tmp_path):
    """docs/cluster.md's example, run as written (its hosts, subnet and results file renamed:
    other tests run beside it; each host's ports are its own), and not in
    test_docs_examples.py: torch's layer under torchrun, all_reduce and all_gather from 1 KiB
    to 4 MiB in every layout, then `report.py compare` (before it, on stdout, the tables)."""
    renames, name, subnet = own_hosts()
    output = tmp_path / "groups.jsonl"
    proc = run_example(*given_to("test_layouts_across_two_hosts_as_cluster_md_runs_them"),
                       tmp_path, renames={**renames, "groups.jsonl": output})
    tables, compare = proc.stdout.split("\nRun: ", 1)
    check_layouts(name, subnet, tables, proc.stderr, output, "Run: " + compare,
                  ["all_reduce", "all_gather"], numels=[256, 4096, 65536, 1048576], stats=False,
                  repeat=False)


def check_layouts(name, subnet, stdout, stderr, output, compare, ops, numels, stats, repeat):
    """What a run with --groups world,intra,inter across 2 hosts x 2 ranks shows: its start-up
    lines, its tables (--check's column, --stats' where given), its results file (--repeat's
    windows where given) and `report.py compare RUN`'s output, `compare`; then `report.py
    strategy` on it. `numels`: a grouped all_reduce table's element counts."""
    assert "4 ranks on 2 host(s)" in stderr
    h1, h2 = f"{name}1", f"{name}2"
    assert f"--groups intra: group 0 (ranks 0 1 on {h1}); group 1 (ranks 2 3 on {h2})" \
        in stderr
    assert "--groups inter: group 0 (ranks 0 2); group 1 (ranks 1 3)" in stderr
    tables = parse_tables(stdout)
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
        if stats:  # the straggler, where the evidence names one, is one of the group's own ranks
            slowest = {int(row.extra[-2].split("@")[0]) for row in table.rows
                       if row.extra[-2] != "-"}
            assert slowest <= set(table.qualifiers.get("ranks") or range(4))
        else:
            assert all(row.extra == ["0"] for row in table.rows)
        # a layout's sizes: the scan's n x 2^p follow the group's n = 2; a byte sweep's, bytes
        if grouped and table.op == "all_reduce":
            assert [row.numel for row in table.rows] == numels

    meta, records = _records(output)
    assert meta["world_size"] == 4 and meta["hostnames"] == [h1, h1, h2, h2]
    assert meta["master_addr"] == f"{subnet}.1"  # host 1's address, never loopback
    assert meta["groups"] == {"world": [[0, 1, 2, 3]], "intra": [[0, 1], [2, 3]],
                              "inter": [[0, 2], [1, 3]]}
    whole = [r for r in records if r.get("window") is None]
    assert all(r["wrong"] == 0 for r in whole)
    if stats:  # --stats names the straggler's host beside its rank, in the world's tables too
        check_stragglers(meta, [t for t in tables if "layout" not in t.qualifiers],
                         [r for r in whole if not r.get("groups")])
    intra = [r for r in whole if r.get("groups") == "intra" and r["op"] == "all_reduce"]
    # one record per size and group, as each size is measured
    assert [(r["size_bytes"], r["group"], r["group_ranks"], r["world_size"]) for r in intra] == \
        [(4 * numel, g, ranks, 2) for numel in numels for g, ranks in [(0, [0, 1]), (1, [2, 3])]]
    for r in intra:  # a group's figure is its first rank's; its spread, its own ranks'
        assert r["duration_s"] == r["durations_per_rank_s"][0]
        assert len(r["durations_per_rank_s"]) == 2
        if stats and r["slowest_rank"] is not None:  # None: no straggler beyond the evidence
            assert meta["hostnames"][r["slowest_rank"]] == r["slowest_host"]
            assert r["slowest_rank"] in r["group_ranks"]
        # algbw of all_reduce is 2S/t with the group's n = 2
        assert r["busbw_Bps"] == pytest.approx(r["throughput_Bps"] * 0.5)
    if repeat:  # --repeat: each group's earlier window recorded at once, then the whole record
        windows = [r for r in records if r.get("window") == 0 and r.get("groups") == "inter"]
        assert {(r["group"], r["size_bytes"]) for r in windows} == \
            {(r["group"], r["size_bytes"]) for r in whole if r.get("groups") == "inter"}
        assert all(len(r["windows_s"]) == 2 for r in whole if r["op"] != "barrier")

    assert "world (us)  intra-host (us)  inter-host (us)" in compare
    assert "all_reduce: inter-host / intra-host time" in compare
    # the layout's figure is its slowest group's
    slowest = max(r["duration_s"] for r in intra if r["size_bytes"] == 4 * numels[0])
    assert f"{slowest * 1e6:.3f}" in compare.split("---- all_gather")[0]

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
    if "reduce_scatter" in ops:  # measured: its inter-host curve, else priced without one
        assert "x reduce_scatter inter of" in rows["ZeRO-3"]
    assert "on 4 ranks" in plan.stdout  # the world's size, not a group's


def check_stragglers(meta, tables, records):
    """--stats across hosts: each row of these tables names its straggler as rank@host, the
    host the results file's record names beside the rank (or '-' where the evidence names
    none: commbench/bench/lateness.py)."""
    rows = [row for table in tables for row in table.rows]
    assert len(rows) == len(records) and records
    for row, record in zip(rows, records):
        rank, host = record["slowest_rank"], record["slowest_host"]
        if rank is None:
            assert host is None and row.extra[-2] == "-"
            continue
        assert host == meta["hostnames"][rank]
        assert row.extra[-2] == f"{rank}@{host}"


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
    across --bidirectional: rank i with i + 2, host 1 with host 2, both ways at once. Torch's
    layer, all eleven ops (roots in group 1, whose first rank is not rank 0) under a reducing
    operator other than sum, with --stats (its straggler, across hosts, named with its host)."""
    name, subnet = hosts(2)
    output = tmp_path / "split.jsonl"
    stdout, stderrs, statuses = by_hand(
        name, subnet, 2, 2, "--dist=torch", "--all", "--op=max", "--pairs=across",
        "--bidirectional", "--groups=world", "--split=2:strided", "--scan", "--maxsize=4",
        "--trials=2", "--warmups=1", "--check", "--stats", f"--output={output}")
    assert statuses == [0, 0], stderrs
    h1, h2 = f"{name}1", f"{name}2"
    assert f"--split 2 (strided): group 0 (ranks 0 2 on {h1} {h2}); group 1 (ranks 1 3 on " \
           f"{h1} {h2})" in stderrs[0]
    tables = parse_tables(stdout)
    shown = [(t.op, t.devices, t.qualifiers.get("ranks"), t.qualifiers.get("split"),
              t.qualifiers.get("pairs")) for t in tables]
    total = "aggregate of 2 groups at once"
    assert [row for row in shown if row[0] in ("all_reduce", "pt2pt")] == [
        ("all_reduce", 4, None, None, None), ("all_reduce", 2, [0, 2], None, None),
        ("all_reduce", 2, [1, 3], None, None), ("all_reduce", 4, None, total, None),
        ("pt2pt", 4, None, None, "across (0-2 1-3)"),
        ("pt2pt", 2, [0, 2], None, "across (0-1)"), ("pt2pt", 2, [1, 3], None, "across (0-1)"),
        ("pt2pt", 4, None, total, "across (0-1)")]
    assert [row[:4] for row in shown] == [
        (op, devices, ranks, split) for op in ELEVEN for devices, ranks, split in
        [(4, None, None), (2, [0, 2], None), (2, [1, 3], None), (4, None, total)]]
    assert all(row.extra[-1] == "0" for t in tables for row in t.rows)
    for table in tables:  # the straggler, where the evidence names one, is one of the group's
        slowest = {int(row.extra[-2].split("@")[0]) for row in table.rows
                   if row.extra[-2] != "-"}
        assert slowest <= set(table.qualifiers.get("ranks") or range(4))
    meta, records = _records(output)
    assert meta["groups"]["split"] == [[0, 2], [1, 3]] and meta["split"] == [2, "strided"]
    check_stragglers(meta, [t for t in tables if "ranks" not in t.qualifiers
                            and "split" not in t.qualifiers],
                     [r for r in records if not r.get("groups")])
    assert {r["reduce_op"] for r in records
            if r["op"] in ("all_reduce", "reduce") and not r.get("aggregate")} == {"max"}
    world = [r for r in records if r["op"] == "pt2pt" and not r.get("groups")]
    assert all(r["pairs"] == [[0, 2], [1, 3]] and r["bidirectional"] for r in world)
    # two pairs both ways: Throughput 4 messages' bytes a second, BusBW one pair's 2
    assert all(r["throughput_Bps"] == pytest.approx(2 * r["busbw_Bps"]) for r in world)
