"""Traffic as jobs make it (docs/traffic.md): all_to_allv from a matrix file and from each skew,
checked; --check-every catching a wrong element in one trial of many and naming its trial, rank
and element; --split's groups and their aggregate; pt2pt both ways and in pairs; every bad
value one line, exit 2. Real ranks on gloo, read from the table, the results file and the exit
status. (--split and --pairs across two simulated hosts: test_groups.py.)"""

import json

import pytest

from support import assert_no_traceback, launch, usage_error

MATRIX_3 = [[0, 4096, 1024], [400, 0, 40000], [8, 8, 8]]  # bytes, row = sender


def records(path):
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[0]["type"] == "meta"
    return lines[0], [r for r in lines[1:] if "window" not in r]


def wrong(table):
    return [int(row.extra[-1]) for row in table.rows]


def errors(stderr):
    return [line for line in stderr.splitlines() if line.startswith("commbench: error:")]


def write_matrix(path, rows):
    path.write_text("# bytes, row = sender\n" + "\n".join(",".join(map(str, r)) for r in rows)
                    + "\n")
    return path


# ------------------------------------------------------------------ all_to_allv

def test_matrix_of_bytes_runs_as_written_at_three_ranks(tmp_path):
    """Without --scan the matrix is bytes: one size, every pair's bytes as in the file, the
    busiest sender's bytes the Size, the busiest receiver in the header, 0 wrong."""
    matrix = write_matrix(tmp_path / "m.csv", MATRIX_3)
    output = tmp_path / "v.jsonl"
    result = launch("all_to_allv.py", f"--a2a-matrix={matrix}", "--trials=3", "--check",
                    "--stats", "--dist=torch", f"--output={output}", nproc=3)
    assert result.returncode == 0, result
    assert_no_traceback(result)
    table = result.table("all_to_allv")
    assert table.qualifiers["splits"] == f"from {matrix}"
    assert table.qualifiers["busiest"] == "receiver rank 2"
    (row,) = table.rows
    assert row.extra[-1] == "0" and row.size == "39.45 KB"  # 40400 B: rank 1 sends most
    _, (record,) = records(output)
    assert record["matrix_bytes"] == MATRIX_3
    assert record["sent_bytes_per_rank"] == [sum(r) for r in MATRIX_3]
    assert record["received_bytes_per_rank"] == [sum(r[j] for r in MATRIX_3) for j in range(3)]
    assert record["size_bytes"] == 40400 and record["wrong"] == 0
    assert record["busiest_receiver"] == 2
    # BusBW: the busiest rank's bytes to or from the others (rank 2 gets 41024 B from them)
    assert record["busiest_bytes_between_ranks"] == 41024
    assert record["busbw_Bps"] == pytest.approx(41024 / record["duration_s"])
    assert record["throughput_Bps"] == pytest.approx(40400 / record["duration_s"])
    assert "slowest_rank" in record  # --stats: the straggler measured beside it


def test_each_skew_and_a_scaled_matrix_beside_pt2pt_both_ways(tmp_path):
    """zipf at 2 ranks, hot at 3, and a matrix under --scan (weights scaled so the busiest
    sender sends each size) in a run with pt2pt --bidirectional: every size 0 wrong, every
    record's matrix summing to its Size on the busiest sender."""
    weights = write_matrix(tmp_path / "w.csv", [[1, 3], [2, 2]])
    runs = {
        "zipf": (2, ["--a2a-skew=zipf:1.2", "--seed=7"]),
        "hot": (3, ["--a2a-skew=hot:1"]),
        "weights": (2, [f"--a2a-matrix={weights}", "--pt2pt", "--bidirectional"]),
    }
    for name, (nproc, flags) in runs.items():
        output = tmp_path / f"{name}.jsonl"
        result = launch("run_all.py", "--all-to-allv", *flags, "--scan", "--maxsize=8",
                        "--trials=2", "--check", "--dist=torch", f"--output={output}",
                        nproc=nproc)
        assert result.returncode == 0, (name, result)
        assert all(set(wrong(t)) == {0} for t in result.tables), (name, result.stdout)
        _, found = records(output)
        uneven = [r for r in found if r["op"] == "all_to_allv"]
        assert len(uneven) == 7
        for record in uneven:
            matrix = record["matrix_bytes"]
            assert len(matrix) == nproc and max(map(sum, matrix)) == record["size_bytes"]
            assert record["sent_bytes_per_rank"] == [sum(r) for r in matrix]
        if name == "hot":  # one receiver gets 8 times another's share from every sender
            big = uneven[-1]
            hot = big["busiest_receiver"]
            assert all(row[hot] > 7 * min(row) for row in big["matrix_bytes"])
        if name == "weights":
            assert all(r["matrix_bytes"][0][1] == 3 * r["matrix_bytes"][0][0] for r in uneven)
            both = result.table("pt2pt")
            assert both.qualifiers["pairs"] == "one (0-1)" and "both" in both.qualifiers
            assert both.columns[5:] == ["Msgs/s", "Wrong"]
            pt2pt = [r for r in found if r["op"] == "pt2pt"]
            for record, _row in zip(pt2pt, both.rows):
                assert record["bidirectional"] and record["pairs"] == [[0, 1]]
                # both directions counted: twice the bytes a second of one way
                assert record["throughput_Bps"] == pytest.approx(
                    2 * record["size_bytes"] / record["duration_s"])
                assert record["message_rate_per_s"] == pytest.approx(2 / record["duration_s"])


def test_single_size_plans_for_the_busiest_receiver():
    """Without --scan and without a matrix: SPEC's rule at --mem-factor (no extra share, as
    all_gather's one-tensor form has), n x a power of two as all_to_all's, and the output buffer
    the busiest receiver needs (hot:1 at 3 ranks: 2.4 times the input) in the plan."""
    result = launch("all_to_allv.py", "--a2a-skew=hot:1", "--mem-factor=0.001", "--trials=2",
                    "--check", "--dist=torch", nproc=3)
    assert result.returncode == 0, result
    plan = next(line for line in result.stderr.splitlines() if "per-rank memory" in line)
    assert " B x 0.001 = " in plan and "(input 1 + output 2.4)" in plan, plan
    (row,) = result.table("all_to_allv").rows
    assert row.numel % 3 == 0 and (row.numel // 3) & (row.numel // 3 - 1) == 0
    assert row.extra == ["0"]


# ------------------------------------------------------------------ --check-every

def test_check_every_names_the_wrong_trial_rank_and_element(tmp_path):
    """One element of one trial of ten altered (trial 4, rank 1, element 3): caught and named;
    the other op of the run, all_to_allv with every trial checked, 0 wrong; the table says the
    check was on (Checked) and keeps the unchecked Duration."""
    output = tmp_path / "every.jsonl"
    result = launch("run_all.py", "--all-reduce", "--all-to-allv", "--a2a-skew=zipf:1",
                    "--scan", "--maxsize=4", "--trials=10", "--check-every", "--dist=torch",
                    f"--output={output}", nproc=3,
                    env={"COMMBENCH_INJECT_WRONG": "all_reduce:1:4:3"})
    assert result.returncode == 1, result
    assert_no_traceback(result)
    reduce, uneven = result.table("all_reduce"), result.table("all_to_allv")
    assert reduce.columns[5:] == ["Checked", "Wrong"]
    assert wrong(reduce) == [1, 1, 1] and set(wrong(uneven)) == {0}
    assert errors(result.stderr) == [
        "commbench: error: --check found wrong elements: all_reduce at 24 bytes per rank: 1 "
        "wrong element (the first in trial 4 of 10, rank 1, element 3) (and 2 more)"]
    meta, found = records(output)
    assert meta["check_every"] and meta["check"]
    for record in found:
        assert record["check_every"] and record["checked_duration_s"] > 0
        assert record["duration_s"] != record["checked_duration_s"]  # two windows, kept apart
        if record["op"] == "all_reduce":
            assert record["first_wrong"] == {"trial": 4, "rank": 1, "element": 3}
        else:
            assert record["first_wrong"] is None and record["wrong"] == 0


# ------------------------------------------------------------------ --split, --pairs

def test_split_two_on_four_ranks_and_pairs_all(tmp_path):
    """--split 2: each group's table and their aggregate, 0 wrong; pt2pt --pairs all in the
    same run (within each group: one pair) and alone at 4 ranks: 2 pairs at once."""
    output = tmp_path / "split.jsonl"
    result = launch("run_all.py", "--all-reduce", "--pt2pt", "--pairs=all", "--split=2",
                    "--scan", "--maxsize=4", "--trials=3", "--check", "--dist=torch",
                    f"--output={output}", nproc=4)
    assert result.returncode == 0, result
    reduce = [t for t in result.tables if t.op == "all_reduce"]
    assert [(t.qualifiers.get("ranks"), t.qualifiers.get("split")) for t in reduce] == \
        [([0, 1], None), ([2, 3], None), (None, "aggregate of 2 groups at once")]
    assert all(set(wrong(t)) == {0} for t in result.tables)
    _, found = records(output)
    totals = [r for r in found if r.get("aggregate") and r["op"] == "all_reduce"]
    groups = [r for r in found if r["op"] == "all_reduce" and not r.get("aggregate")]
    assert len(totals) == 3 and len(groups) == 6
    for total in totals:
        parts = [g for g in groups if g["size_bytes"] == total["size_bytes"]]
        assert total["duration_s"] == max(g["duration_s"] for g in parts)
        assert total["busbw_Bps"] == pytest.approx(sum(g["busbw_Bps"] for g in parts))
        assert total["wrong"] == 0 and total["group_count"] == 2

    pairs = launch("pt2pt.py", "--pairs=all", "--scan", "--maxsize=4", "--trials=3", "--check",
                   "--async-op", "--dist=torch", nproc=4)
    assert pairs.returncode == 0, pairs
    (table,) = pairs.tables
    assert table.devices == 4 and table.qualifiers["pairs"] == "all (0-1 2-3)"
    assert set(wrong(table)) == {0} and table.columns[5:] == ["Msgs/s", "Wrong"]
    for row in table.rows:  # Throughput: both pairs together; BusBW: one pair's
        assert float(row.throughput) == pytest.approx(2 * float(row.busbw), rel=0.01, abs=0.002)


# ------------------------------------------------------------------ bad values

def _matrices(tmp_path):
    write_matrix(tmp_path / "short.csv", [[1, 2], [3]])
    write_matrix(tmp_path / "negative.csv", [[1, -5], [3, 4]])
    write_matrix(tmp_path / "square.csv", [[1, 2], [3, 4]])


@pytest.mark.fast
@pytest.mark.parametrize("flags,message", [
    (["--a2a-matrix={tmp}/short.csv"],
     "argument --a2a-matrix: {tmp}/short.csv: row 2 has 1 entries and the matrix 2 rows; it must "
     "be n x n (row = sender, column = receiver)"),
    (["--a2a-matrix={tmp}/negative.csv"],
     "argument --a2a-matrix: {tmp}/negative.csv: row 1, column 2: -5 is not a byte count or "
     "weight (it must be 0 or more)"),
    (["--a2a-skew=zipf:x"], "argument --a2a-skew: 'zipf:x' is not a skew"),
    (["--a2a-skew=hot:1", "--a2a-matrix={tmp}/square.csv"],
     "--a2a-matrix and --a2a-skew both set all_to_allv's splits: give one"),
    (["--split=2:diagonal"], "argument --split: '2:diagonal' is not a split"),
])
def test_bad_values_the_command_line_shows_are_usage_errors(tmp_path, flags, message):
    """In-process (the parser refuses them before any rank starts); those that need the world
    size, below, on real ranks."""
    _matrices(tmp_path)
    flags = [flag.format(tmp=tmp_path) for flag in flags]
    said = usage_error([*flags, "--scan", "--maxsize=3", "--dist=torch"])
    assert said.startswith(message.format(tmp=tmp_path)), said


@pytest.mark.parametrize("flags,nproc,message", [
    (["--a2a-matrix={tmp}/square.csv"], 3,
     "--a2a-matrix {tmp}/square.csv is 2 x 2, for 2 ranks; this run's all_to_allv has 3"),
    (["--a2a-skew=hot:2"], 2, "--a2a-skew hot:2: 2 hot receivers of 2 ranks leave none cold"),
    (["--split=2"], 3, "--split 2: 2 groups does not divide a world of 3 ranks"),
    (["--pt2pt", "--pairs=all"], 3, "--pairs all pairs every rank with another: this world has 3"),
])
def test_bad_values_are_one_line_and_exit_2(tmp_path, flags, nproc, message):
    _matrices(tmp_path)
    flags = [flag.format(tmp=tmp_path) for flag in flags]
    script = "run_all.py" if "--pt2pt" in flags else "all_to_allv.py"
    result = launch(script, *flags, "--scan", "--maxsize=3", "--dist=torch", nproc=nproc)
    assert result.returncode == 2, result
    (line,) = errors(result.stderr)
    assert line.startswith("commbench: error: " + message.format(tmp=tmp_path)), line
    assert_no_traceback(result)
    assert result.tables == [], result.stdout  # refused before anything is measured
