"""report.py against the bound (commbench/report/bound.py) in-process: a recorded --peak auto run
(tests/fixtures/peak_auto_2ranks.jsonl: gloo, 2 ranks, all_reduce and all_gather, 64 KiB-64 MiB,
each row held against the memory copy) and runs written by hand: which sizes reach what
fraction, where the curve flattens, and compare, html and plot saying and drawing it."""

import pytest

from commbench.records import results
from commbench.report import bound, cli, html, kinds, plot, runs
from support import ROOT

pytestmark = pytest.mark.fast

RECORDED = str(ROOT / "tests" / "fixtures" / "peak_auto_2ranks.jsonl")
META = {"type": "meta", "dist": "torch", "backend": "gloo", "world_size": 2, "dtype": "float",
        "bw_unit": "Gbps"}
MIB = 1 << 20


def write(path, busbws_gbps, bound_gbps=None):
    """all_reduce at 1, 4, 16 and 64 MiB with these bus bandwidths (Gbps); each row held
    against `bound_gbps` (None: a run without --peak)."""
    writer = results.open_writer(str(path), dict(META))
    for size, gbps in zip((MIB, 4 * MIB, 16 * MIB, 64 * MIB), busbws_gbps):
        extra = {} if bound_gbps is None else {
            "bound": {"kind": "given", "name": "given", "gbps": bound_gbps, "source": "--peak"},
            "peak_fraction": gbps / bound_gbps}
        writer.add({"type": "result", "op": "all_reduce", "world_size": 2, "dtype": "float32",
                    "size_bytes": size, "numel": size // 4, "element_size": 4,
                    "duration_s": size / (gbps * 1e9 / 8), "busbw_Bps": gbps * 1e9 / 8,
                    "throughput_Bps": gbps * 1e9 / 8, **extra})
    writer.close()
    return str(path)


def test_a_recorded_run_reads_each_rows_bound_and_says_the_fraction_by_size():
    run = kinds.load_run(RECORDED)
    assert run.bound_words == "memory copy (measured, 2 threads)"
    assert round(run.ops["all_reduce"][16 * MIB].bound * 8e-9, 2) == 8.19
    all_reduce, all_gather = bound.lines(run)
    assert all_reduce == (
        "all_reduce (torch.distributed gloo n=2) against its bound, memory copy (measured, 2 "
        "threads): the fraction reached 64 KiB 0.01, 256 KiB 0.02, 1 MiB 0.03, 4 MiB 0.15, "
        "16 MiB 0.38, 64 MiB 0.30; at best 0.38 (16 MiB); still climbing at its largest size")
    # gloo's all_gather peaks at 4 MiB (3.6 Gbps) and falls: flat from there, far below
    assert all_gather.endswith("at best 0.20 (16 MiB); flattens from 4 MiB at 3.61 Gbps, 0.13 "
                               "of the bound, below it"), all_gather


def test_where_a_curve_flattens_and_whether_below_its_bound(tmp_path):
    near = kinds.load_run(write(tmp_path / "near.jsonl", [40, 90, 95, 96], bound_gbps=100))
    (line,) = bound.lines(near)
    assert line.endswith("; at best 0.96 (64 MiB); flattens from 4 MiB at 90 Gbps, 0.90 of the "
                         "bound"), line
    low = kinds.load_run(write(tmp_path / "low.jsonl", [10, 30, 31, 30], bound_gbps=100))
    (line,) = bound.lines(low)
    assert "the fraction reached 1 MiB 0.10, 4 MiB 0.30, 16 MiB 0.31, 64 MiB 0.30" in line
    assert line.endswith("flattens from 4 MiB at 30 Gbps, 0.30 of the bound, below it"), line
    assert low.bound_words == "given 100 Gb/s (--peak)"


def test_a_run_without_a_bound_says_and_draws_nothing_of_one(tmp_path):
    run = kinds.load_run(write(tmp_path / "plain.jsonl", [10, 30, 31, 30]))
    assert bound.lines(run) == [] and bound.series(run, "all_reduce") == ([], [])
    assert run.bound_words == "" and run.ops["all_reduce"][MIB].bound is None


def test_plot_draws_the_bound_dashed_beside_its_curve(tmp_path):
    figure = plot.plot([kinds.load_run(RECORDED)], str(tmp_path / "curves.png"))
    busbw = figure.axes[0]
    dashed = [line for line in busbw.get_lines() if line.get_linestyle() == "--"]
    (line,) = dashed
    assert line.get_label() == ("torch.distributed gloo n=2 bound: memory copy (measured, 2 "
                                "threads)")
    assert [round(y, 2) for y in line.get_ydata()] == [67.73, 69.97, 60.5, 27.37, 8.19, 20.58]
    assert "38%" in [text.get_text() for text in busbw.texts]


def test_compare_and_html_say_the_fraction(tmp_path, capsys):
    plain = write(tmp_path / "plain.jsonl", [10, 30, 31, 30])
    given = write(tmp_path / "given.jsonl", [10, 30, 31, 30], bound_gbps=100)
    assert cli.main(["compare", plain, given]) == 0
    out = capsys.readouterr().out
    assert out.rstrip().splitlines()[-1].startswith(
        "all_reduce (torch.distributed gloo n=2) against its bound, given 100 Gb/s (--peak): ")
    page = html.render([RECORDED])
    assert page.count('<div class="bound">') == 2
    assert "at best 0.38 (16 MiB)" in page


def test_bound_words_of_a_link_and_of_an_nvlink():
    rows = [{"bound": {"kind": "link", "name": "eth0", "gbps": 100.0, "source": "sysfs"}}]
    assert runs._bound_words(rows) == "eth0 100 Gb/s (sysfs)"
    rows = [{"bound": {"kind": "nvlink", "name": "NVLink x18", "gbps": 3600.0,
                       "source": "nvml"}}]
    assert runs._bound_words(rows) == "NVLink x18 450 GB/s (nvml)"
