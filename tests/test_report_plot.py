"""report.py plot: one figure, a bandwidth and a latency panel per op, one line per run."""

import struct
import subprocess
import sys

from commbench.report.plot import plot
from commbench.report.kinds import load_run
from support import ROOT
from test_report_compare import FIXTURES


def png_size(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", data[16:24])


def test_plot_has_a_line_per_run_per_panel(two_runs, tmp_path):
    runs = [load_run(str(two_runs["torch"][0])), load_run(str(two_runs["deepspeed"][1])),
            load_run(str(FIXTURES / "all_reduce_perf.txt"))]
    output = tmp_path / "curves.png"
    figure = plot(runs, str(output))
    width, height = png_size(output)
    assert width >= 800 and height >= 600
    axes = figure.axes
    assert [axis.get_title() for axis in axes] == [
        "all_reduce: bus bandwidth", "all_reduce: latency",
        "broadcast: bus bandwidth", "broadcast: latency"]
    for axis in axes[:2]:  # all_reduce: three runs, nccl-tests included
        assert [line.get_label() for line in axis.get_lines()] == [
            "torch.distributed gloo n=2", "deepspeed.txt",
            "nccl-tests n=2"]
    for axis in axes[2:]:  # broadcast: the two suite runs
        assert len(axis.get_lines()) == 2
    assert axes[0].get_xscale() == "log" and axes[1].get_yscale() == "log"
    assert axes[0].xaxis.get_major_formatter()(1048576) == "1 MiB"
    # the plotted points are the runs' figures
    x, y = axes[1].get_lines()[0].get_data()
    data = runs[0].ops["all_reduce"]
    assert list(x) == sorted(data) and list(y) == [data[s].duration * 1e6 for s in sorted(data)]


def test_plot_command_line_svg(two_runs, tmp_path):
    output = tmp_path / "curves.svg"
    proc = subprocess.run([sys.executable, "report.py", "plot", str(two_runs["torch"][0]),
                           str(two_runs["deepspeed"][0]), "-o", str(output)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, env={"MPLBACKEND": "",
                                                                          "PATH": "/usr/bin"})
    assert proc.returncode == 0, proc.stderr
    assert output.read_text().lstrip().startswith(("<?xml", "<svg"))
