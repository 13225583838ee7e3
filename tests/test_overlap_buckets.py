"""--overlap (OSU's non-blocking overlap: pure collective, a compute phase as long, both) and
`report.py buckets` (which gradient bucket size, from a measured all_reduce curve)."""

import json
import re

import pytest

from commbench import units
from support import ROOT, assert_no_traceback, launch


OVERLAP_COLUMNS = ["Comm (us)", "Compute (us)", "Overlapped (us)", "Overlap %"]
FIXTURE = ROOT / "tests" / "fixtures" / "all_reduce_overlap.jsonl"
MIB = 1 << 20


def overlap_rows(table):
    """(comm, compute, total, pct) of each row of a --raw table, from its last four columns
    (before Wrong when --check is on)."""
    start = table.columns.index("Comm (us)") - 5
    return [tuple(float(x) for x in row.extra[start:start + 4]) for row in table.rows]


def osu(comm, compute, total):
    return min(100.0, max(0.0, 100 * (1 - (total - compute) / comm)))


@pytest.mark.parametrize("nproc,dist", [(2, "torch"), (3, "deepspeed")])
def test_overlap_columns_are_consistent(run, tmp_path, nproc, dist):
    """The four columns agree with each other and with the results file, whatever the machine
    does to the three windows. No bound between the windows' times: each is its own window, and
    beside another test on 2 cores a neighbour can stretch any one of them several times (CI saw
    the compute-alone window at 4-6x the op it is sized to match, 18.2 ms against both at 6.5
    ms), so which of them comes out longer is a race (it failed 2 of 8 CI runs, issue 35). That
    the collective hides behind compute is measured, with a spare core and best of three, by
    test_a_long_compute_phase_hides_the_collective_with_a_spare_core."""
    output = tmp_path / "overlap.jsonl"
    result = run("all_reduce.py", "--scan", "--maxsize=14", "--overlap", "--raw", "--trials=5",
                 f"--dist={dist}", f"--output={output}", nproc=nproc)
    assert result.returncode == 0, result
    assert_no_traceback(result)
    table = result.table("all_reduce")
    assert table.columns[5:] == OVERLAP_COLUMNS
    assert re.search(r"commbench: --overlap: the compute phase is 128x128 float32 matmuls, "
                     r"[\d.]+ us each on rank 0, in 1 thread \(OMP_NUM_THREADS=1\) on \d+ cores; "
                     r"the gloo progress threads compete with it for them", result.stderr), result
    lines = [json.loads(line) for line in output.read_text().splitlines()]
    meta, found = lines[0], lines[1:]
    assert meta["overlap"] is True and meta["overlap_factor"] == 1.0
    for row, record in zip(overlap_rows(table), found):
        comm, compute, total, pct = row
        assert comm > 0 and compute > 0 and total > 0
        assert 0 <= pct <= 100
        assert pct == pytest.approx(osu(comm, compute, total), abs=0.06)  # printed to 0.1 / 1 us
        figures = record["overlap"]
        assert set(figures) == {"comm_s", "compute_s", "total_s", "overlap_pct"}
        assert figures["comm_s"] * 1e6 == pytest.approx(comm, abs=0.002)
        assert figures["compute_s"] * 1e6 == pytest.approx(compute, abs=0.002)
        assert figures["total_s"] * 1e6 == pytest.approx(total, abs=0.002)
        assert figures["overlap_pct"] == pytest.approx(pct, abs=0.06)
        assert len(record["overlap_pct_per_rank"]) == nproc
        assert all(0 <= p <= 100 for p in record["overlap_pct_per_rank"])
    assert len(found) == len(table.rows) == 13  # every size of the scan, 2^1 to 2^13 elements


def test_overlap_on_every_op_keeps_check_last(run):
    result = run("run_all.py", "--all", "--scan", "--maxsize=5", "--overlap", "--check", "--raw",
                 "--trials=2", "--dist=torch", nproc=3)
    assert result.returncode == 0, result
    assert len(result.tables) == 11
    for table in result.tables:
        assert table.columns[5:] == OVERLAP_COLUMNS + ["Wrong"], table.op
        assert all(row.extra[-1] == "0" for row in table.rows)
        assert all(0 <= pct <= 100 for *_, pct in overlap_rows(table))


@pytest.mark.serial  # a spare core is what it measures: run alone (make test's second part)
def test_a_long_compute_phase_hides_the_collective_with_a_spare_core(run):
    """2 ranks on 2 cores leave no core to gloo's progress threads; --compute-cpus 0 puts both
    ranks' compute on CPU 0 and so leaves CPU 1 to them. With the compute phase 20x the
    collective, most of it then hides (measured here: medians of 72% and 89% over the sizes,
    against 0-25% without the spare core). A measurement on a shared 2-core host: a busy
    neighbour can take the spare core for a whole run (seen once in CI: a median of 22%), so
    the best of three runs is held to it."""
    medians = []
    for _ in range(3):
        result = run("all_reduce.py", "--scan", "--minsize=2", "--maxsize=12", "--overlap",
                     "--overlap-factor=20", "--compute-cpus=0", "--raw", "--trials=5",
                     "--dist=torch", nproc=2)
        assert result.returncode == 0, result
        assert "on CPUs 0 (--compute-cpus), the backend's progress threads on any of" in \
            result.stderr
        rows = overlap_rows(result.table("all_reduce"))
        for comm, compute, _total, _pct in rows:
            assert compute >= 5 * comm
        pcts = sorted(pct for *_, pct in rows)
        medians.append(pcts[len(pcts) // 2])  # the median size
        if medians[-1] >= 50:
            break
    assert max(medians) >= 50, medians


# --------------------------------------------------------------------------- report.py buckets

def fixture_curve():
    lines = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    return {r["size_bytes"]: (r["duration_s"], r["overlap"]["overlap_pct"])
            for r in lines[1:] if r["op"] == "all_reduce"}


def buckets(*args):
    result = launch("report.py", "buckets", *map(str, args))
    assert result.returncode == 0, result
    return result


def table_rows(stdout):
    """{bucket label: (buckets, comm ms, exposed ms or None)} of the report's table."""
    rows = {}
    for line in stdout.splitlines():
        match = re.match(r"^\s*([\d.]+ (?:B|KiB|MiB|GiB))\s+(\d+)\s+([\d.]+)(?:\s+([\d.]+))?", line)
        if match:
            rows[match.group(1)] = (int(match.group(2)), float(match.group(3)),
                                    float(match.group(4)) if match.group(4) else None)
    return rows


def label(nbytes):
    return units.size(nbytes)


def exposed_model(t, pct, grad, bucket, backward):
    """The documented model, written out again: k buckets ready evenly over backward, one after
    the other on one stream; the unhidden share of their time under backward adds to it."""
    k = grad // bucket
    end = slowed = 0.0
    for i in range(1, k + 1):
        start = max(end, backward * i / k)
        end = start + t
        slowed += max(0.0, min(end, backward) - start) * (1 - pct / 100)
    return max(0.0, end - backward) + slowed


def test_bucket_arithmetic_on_a_recorded_curve():
    curve = fixture_curve()
    grad = 4 * MIB  # a multiple of every measured size up to it: no partial bucket
    result = buckets(FIXTURE, "--grad-mb=4", "--backward-ms=30", "--min-bucket=1")
    rows = table_rows(result.stdout)
    measured = [size for size in sorted(curve) if size <= grad]
    assert [label(s) for s in measured] == [k for k in rows][:len(measured)]
    best, best_exposed = None, None
    for size in measured:
        t, pct = curve[size]
        count, comm_ms, exposed_ms = rows[label(size)]
        assert count == grad // size
        assert comm_ms == pytest.approx(count * t * 1e3, abs=0.0006)
        expected = exposed_model(t, pct, grad, size, 0.030)
        assert exposed_ms == pytest.approx(expected * 1e3, abs=0.0006)
        if best_exposed is None or expected < best_exposed:
            best, best_exposed = size, expected
    assert f"Best bucket size: {label(best)} ({grad // best} buckets, " \
           f"{units.duration(best_exposed)} exposed per step)." in result.stdout
    assert "DDP default (bucket_cap_mb=25)" in result.stdout
    assert "DeepSpeed reduce_bucket_size default (5e8 elements x 4 B)" in result.stdout


def test_bucket_limits_without_backward_and_with_a_long_one():
    curve = fixture_curve()
    # No backward time: all buckets back to back, so the fewest calls win.
    plain = buckets(FIXTURE, "--grad-mb=4", "--min-bucket=1")
    rows = table_rows(plain.stdout)
    assert all(exposed is None for *_, exposed in rows.values())
    assert "give --backward-ms to weigh their late start" in plain.stdout
    # A backward so long that every bucket but the last finishes under it: the exposed time is
    # the last bucket's all_reduce plus the unhidden share of the others.
    backward = 100.0  # seconds
    long = table_rows(buckets(FIXTURE, "--grad-mb=4", f"--backward-ms={backward * 1e3:g}",
                              "--min-bucket=1").stdout)
    checked = 0
    for size in (s for s in curve if s <= 4 * MIB):
        t, pct = curve[size]
        count = 4 * MIB // size
        if t > backward / count:  # tiny buckets: each takes longer than backward's pace
            continue
        expected = t + (count - 1) * t * (1 - pct / 100)
        assert long[label(size)][2] == pytest.approx(expected * 1e3, abs=0.0006)
        checked += 1
    assert checked >= 8


def test_buckets_on_a_fresh_scan_with_overlap(tmp_path):
    output = tmp_path / "scan.jsonl"
    scan = launch("all_reduce.py", "--scan", "--maxsize=16", "--overlap", "--trials=5",
                  "--dist=torch", f"--output={output}", nproc=2)
    assert scan.returncode == 0, scan
    plot = tmp_path / "buckets.png"
    result = buckets(output, "--grad-mb=1", "--backward-ms=5", f"--plot={plot}")
    assert re.search(r"^Best bucket size: [\d.]+ (B|KiB|MiB) \(\d+ buckets, [\d.]+ (us|ms|s) "
                     r"exposed per step\)\.$", result.stdout, re.M), result
    assert "hidden share: the run's --overlap figures" in result.stdout
    assert plot.stat().st_size > 10_000


@pytest.mark.parametrize("args,message", [
    (["--grad-mb=0"], "argument --grad-mb: must be a positive number"),
    (["--grad-mb=1", "--backward-ms=-3"], "argument --backward-ms: must be a positive number"),
])
def test_bucket_usage_errors(args, message):
    result = launch("report.py", "buckets", str(FIXTURE), *args)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"report.py: error: {message}, got "
                                                  f"{args[-1].split('=')[1]} (see --help)"]


def test_buckets_needs_an_all_reduce_curve(tmp_path):
    other = tmp_path / "bcast.jsonl"
    other.write_text(FIXTURE.read_text().replace('"op": "all_reduce"', '"op": "broadcast"'))
    result = launch("report.py", "buckets", str(other), "--grad-mb=4")
    assert result.returncode == 1
    assert result.stderr.strip() == (f"report.py: error: {other}: no all_reduce results in it; "
                                     "measure a curve with all_reduce.py --scan --output FILE "
                                     "(add --overlap for exposed time)")
