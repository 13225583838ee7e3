"""What a new user met in the first hour, each checked as they would try it: report.py buckets
at once and over the sizes it says, one bandwidth unit in every output, compare's layouts on a
run that stopped early and the sizes between the groups, plot refusing a document, no flag
abbreviations and a "did you mean", stdout holding only tables (and the deepspeed launcher's
own lines)."""

import json
import re
import subprocess
import sys
from types import SimpleNamespace

import pytest

from commbench.records import results
from commbench.report import buckets, cli as report_cli, strategy
from commbench.report.runs import Measurement
from support import ROOT, base_env, launch
from test_overlap_buckets import FIXTURE, MIB, exposed_model, fixture_curve, table_rows

PYTHON = sys.executable


def report(*args):
    return subprocess.run([PYTHON, "report.py", *map(str, args)], cwd=ROOT, env=base_env(),
                          capture_output=True, text=True, timeout=120)


def in_process(capsys, *args):
    """report.py's command in this process (commbench.report.cli.main, what report.py runs):
    its exit status, stdout and stderr as report() gives them. report.py's own process is run
    by the docs' examples (overlap.md's buckets) and by the refusals below."""
    capsys.readouterr()
    status = report_cli.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return SimpleNamespace(returncode=status, stdout=out, stderr=err)


# ------------------------------------------------------------------ report.py buckets

@pytest.mark.fast  # in-process
def test_buckets_read_the_curve_twice_a_size_whatever_the_bucket_count(monkeypatch):
    """100 MiB in 16 B buckets is 6.5 million buckets; the row of a bucket size reads the curve
    for one full bucket and the rest, not once a bucket (it took 30 s before)."""
    calls = []
    original = strategy.Curves.time

    def counted(self, op, size, layout=None):
        calls.append(size)
        return original(self, op, size, layout)
    monkeypatch.setattr(strategy.Curves, "time", counted)
    advice = buckets.advise(str(FIXTURE), 100, 200, min_bucket=16)
    assert advice.rows[0].bucket == 16 and advice.rows[0].buckets == 100 * MIB // 16
    assert len(calls) <= 2 * (len(advice.rows) + len(advice.defaults))


@pytest.mark.fast  # in-process
def test_buckets_closed_form_equals_the_bucket_by_bucket_model():
    """The closed form against the documented model written out bucket by bucket, on the
    recorded curve, for backward times from far shorter to far longer than the buckets."""
    curve = fixture_curve()
    curves = strategy.Curves({"all_reduce": {s: Measurement(s, t, 0.0)
                                             for s, (t, _) in curve.items()}})
    overlap = sorted((s, pct) for s, (_, pct) in curve.items())
    grad = 4 * MIB
    for size in [s for s in curve if s <= grad]:
        t, pct = curve[size]
        for backward in (1e-4, 3e-3, 0.03, 1.0, 100.0):
            row = buckets.evaluate(curves, grad, size, backward, overlap)
            assert row.exposed_s * 1e3 == pytest.approx(
                exposed_model(t, pct, grad, size, backward) * 1e3, rel=1e-9, abs=1e-9)


def test_buckets_consider_the_sizes_they_say_and_answer_at_once(tmp_path, capsys):
    result = in_process(capsys, "buckets", FIXTURE, "--grad-mb=100", "--backward-ms=200",
                        "--plot", tmp_path / "b.png")
    assert result.returncode == 0, result.stderr
    assert "Measured bucket sizes from 1 MiB up to the gradients (--min-bucket for smaller " \
           "ones)." in result.stdout
    rows = table_rows(result.stdout)
    assert list(rows)[0] == "1 MiB" and "16 B" not in rows and "8 KiB" not in rows
    lower = table_rows(in_process(capsys, "buckets", FIXTURE, "--grad-mb=100",
                                  "--min-bucket=64K").stdout)
    assert list(lower)[0] == "64 KiB"
    assert (tmp_path / "b.png").stat().st_size > 10_000


# ------------------------------------------------------------------ units

def test_compare_and_plot_use_the_runs_bandwidth_unit(two_runs, tmp_path, capsys):
    """The table's --bw-unit everywhere: a Gbps run compares and plots in Gbps (bits), a GBps
    run in GB/s, the same figure either way."""
    path = two_runs["torch"][0]
    gbps = in_process(capsys, "compare", path, path)
    assert gbps.returncode == 0, gbps.stderr
    head = next(line for line in gbps.stdout.splitlines() if line.strip().startswith("size"))
    assert "busbw A (Gbps)" in head and "GB/s" not in gbps.stdout
    _, records = results.read(str(path))
    record = records[-1]  # broadcast's largest
    row = next(line for line in gbps.stdout.splitlines()[::-1] if line.strip().startswith(
        f"{record['size_bytes'] // MIB} MiB") or line.strip().startswith(
        f"{record['size_bytes'] // 1024} KiB"))
    assert f"{record['busbw_Bps'] * 8 / 1e9:.3f}" in row.split()
    # the same run written with --bw-unit GBps
    lines = path.read_text().splitlines()
    meta = json.loads(lines[0])
    meta["bw_unit"] = "GBps"
    other = tmp_path / "gbytes.jsonl"
    other.write_text("\n".join([json.dumps(meta)] + lines[1:]) + "\n")
    gbytes = in_process(capsys, "compare", other, other)
    assert "busbw A (GB/s)" in gbytes.stdout and "(Gbps)" not in gbytes.stdout
    sys.path.insert(0, str(ROOT))
    from commbench.report.plot import plot
    from commbench.report.kinds import load_run
    figure = plot([load_run(str(path))], str(tmp_path / "c.png"))
    assert figure.axes[0].get_ylabel() == "bus bandwidth (Gbps)"
    x, y = figure.axes[0].get_lines()[0].get_data()
    data = load_run(str(path)).ops["all_reduce"]
    assert list(y) == pytest.approx([data[s].busbw * 8 / 1e9 for s in sorted(data)], rel=1e-12)


@pytest.mark.fast  # in-process
def test_buckets_plot_labels_sizes_in_bytes(tmp_path):
    """Its x axis in bytes a person reads (it said 2^21)."""
    advice = buckets.advise(str(FIXTURE), 4, 30, min_bucket=1)
    figure = buckets.plot(advice, str(tmp_path / "b.png"))
    axis = figure.axes[0]
    assert axis.get_xlabel() == "bucket size"
    assert axis.xaxis.get_major_formatter()(2 ** 21) == "2 MiB"
    assert axis.xaxis.get_major_formatter()(512) == "512 B"


# ------------------------------------------------------------------ compare

def _layout_run(path, layouts, sizes):
    meta = {"type": "meta", "ops": ["all_reduce"], "dist": "torch", "backend": "gloo",
            "world_size": 4, "groups": {"intra": [[0, 1], [2, 3]], "inter": [[0, 2], [1, 3]]}}
    lines = [meta]
    for layout in layouts:
        for size in sizes:
            record = {"type": "result", "op": "all_reduce", "world_size": 2 if layout != "world"
                      else 4, "size_bytes": size, "numel": size // 4, "element_size": 4,
                      "dtype": "float32", "duration_s": 1e-4 * (3 if layout == "world" else 1)
                      + size / 1e9, "throughput_Bps": 1.0, "busbw_Bps": 1.0}
            if layout != "world":
                record.update(groups=layout, group=0, group_ranks=[0, 1])
            lines.append(record)
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")


def test_layouts_of_a_run_that_stopped_before_inter(tmp_path, capsys):
    """A --groups world,intra,inter run interrupted during inter: world and intra have figures
    for 32 B to 4 MiB; the verdict compares them, not 'no size measured in two layouts'."""
    path = tmp_path / "partial.jsonl"
    _layout_run(path, ["world", "intra"], [32 * 4 ** k for k in range(9)])
    result = in_process(capsys, "compare", path)
    assert result.returncode == 0, result.stderr
    verdict = result.stdout.strip().splitlines()[-1]
    assert verdict.startswith("all_reduce: world / intra-host time ") and \
        "at large messages" in verdict and "at small messages" in verdict, result.stdout


def test_sizes_between_the_groups_are_said(tmp_path, capsys):
    path = tmp_path / "mid.jsonl"
    _layout_run(path, ["world"], [128 * 1024, 256 * 1024])
    both = in_process(capsys, "compare", path, path)
    assert "2 sizes from 64 KiB to under 1 MiB in neither group" in both.stdout, both.stdout
    layouts = tmp_path / "mid-layouts.jsonl"
    _layout_run(layouts, ["world", "intra"], [128 * 1024, 256 * 1024])
    verdict = in_process(capsys, "compare", layouts).stdout.strip().splitlines()[-1]
    assert "over the 2 sizes both have (128 KiB to 256 KiB, between the small and the large " \
           "group)" in verdict, verdict


# ------------------------------------------------------------------ refusals and flags

def test_plot_and_compare_refuse_a_document_that_quotes_tables(tmp_path, capsys):
    """plot in this process, compare as report.py's own process (its one line and status)."""
    for args, way in ((["plot", ROOT / "README.md", "-o", tmp_path / "r.png"], in_process),
                      (["compare", ROOT / "README.md", ROOT / "docs" / "running.md"], None)):
        result = way(capsys, *args) if way else report(*args)
        assert result.returncode == 1 and not (tmp_path / "r.png").exists()
        assert result.stderr.strip() == (
            f"report.py: error: {ROOT / 'README.md'}: a document that quotes tables (in markdown "
            "code blocks), not a saved table of this suite; give a run's own stdout (> "
            "results.txt) or its --output file")


def test_no_abbreviations_and_a_did_you_mean():
    ours = launch("all_reduce.py", "--scan", "--maxsize=3", "--trial", "3", "--dist=torch")
    assert ours.returncode == 2
    assert ours.stderr.strip().splitlines() == [
        "commbench: error: unrecognized arguments: --trial 3; did you mean --trials? "
        "(see --help)"]
    theirs = report("compare", FIXTURE, FIXTURE, "--threshhold=2")
    assert theirs.returncode == 2
    assert theirs.stderr.strip() == ("report.py: error: unrecognized arguments: --threshhold=2; "
                                     "did you mean --threshold? (see --help)")
    bench = launch("parallel_bench.py", "--strategy=ddp", "--step=1")
    assert bench.returncode == 2 and "did you mean --steps?" in bench.stderr, bench


def test_stdout_is_tables_and_the_deepspeed_launchers_own_lines():
    """README: stdout holds the tables only, but for the deepspeed launcher's own log lines,
    which its process writes before the ranks start (they start with `[`)."""
    result = launch("all_reduce.py", "--scan", "--maxsize=3", "--trials=2", "--dist=deepspeed",
                    nproc=1, launcher="deepspeed")  # its runner, launch.py and one rank
    assert result.returncode == 0, result
    for line in result.stdout.splitlines():
        assert (not line or line.startswith(("----", "Size (Bytes)", "[")) or
                re.match(r"^[\d.]+ [KMG]?B ", line) or set(line) == {"-"}), line


@pytest.mark.fast  # in-process
def test_readme_relates_throughput_to_nccl_tests_algbw():
    text = (ROOT / "README.md").read_text()
    assert "not** nccl-tests' `algbw` for all_reduce (2S/t here, S/t there: twice theirs)" in text
    assert "compare BusBW" in text
