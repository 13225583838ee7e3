"""commbench/bounds/: --peak's parsers, the sysfs and NVML readers over recorded trees and
answers, the memory copy's cache (in-process; the runs with --peak are in test_peak.py)."""

import json
from pathlib import Path

import pytest

from commbench import bounds
from commbench.bounds import memcopy
from commbench.errors import UsageError

pytestmark = pytest.mark.fast

DATA = Path(__file__).parent / "data"
SYSFS = DATA / "sysfs"


@pytest.mark.parametrize("text,gbps", [
    ("1gbit", 1), ("100Gb/s", 100), ("10.5GB/s", 84), ("400gbps", 400), ("25G", 25),
    ("12.5GBps", 100), ("800Mbit", 0.8), ("800mbit", 0.8), ("2Tbit/s", 2000), ("1.5GByte/s", 12),
    ("100 Gbit", 100), ("4e2Gbps", 400),
])
def test_a_rate_is_read_in_gbit_a_second(text, gbps):
    assert bounds.parse_rate(text) == pytest.approx(gbps)


@pytest.mark.parametrize("text,says", [
    ("fast", "not a rate"), ("-1gbit", "positive"), ("0G", "positive"), ("100", "give a unit"),
    ("1e999G", "positive"), ("10 GiB/s", "not a rate"), ("", "not a rate"),
])
def test_a_bad_rate_is_one_line(text, says):
    with pytest.raises(UsageError, match=says) as error:
        bounds.parse_rate(text)
    assert "\n" not in str(error.value)


def test_peak_is_auto_a_rate_or_a_file(tmp_path):
    assert bounds.parse_peak("auto").mode == "auto"
    given = bounds.parse_peak("4gbit").given("all_reduce", 1 << 20)
    assert (given.kind, given.gbps, given.source) == ("given", 4, "--peak")
    path = tmp_path / "ndv5.peak"
    path.write_text("# H100 NDv5, as NHC's config\n"
                    "all_reduce   1M-64M   40gbit   # mid sizes\n"
                    "all_reduce   64M-     45GB/s\n\n"
                    "*            *        10gbit\n")
    spec = bounds.parse_peak(str(path))
    assert spec.mode == "file"
    assert spec.given("all_reduce", 1 << 20).gbps == 40
    assert spec.given("all_reduce", (64 << 20) - 1).gbps == 40
    assert spec.given("all_reduce", 64 << 20).gbps == 360
    assert spec.given("all_reduce", 1024).gbps == 10  # below the op's bands: the * line
    expected = spec.given("all_gather", 8)
    assert (expected.kind, expected.gbps, expected.source) == ("expected", 10, f"{path}:5")
    assert bounds.parse_peak("auto").given("all_reduce", 8) is None


@pytest.mark.parametrize("lines,says", [
    ("all_reduce 1M-64M 40gbit\nallreduce * 1gbit\n", ":2: unknown op 'allreduce'"),
    ("all_reduce 64M-1M 40gbit\n", ":1: bad size band '64M-1M': HIGH must be above LOW"),
    ("all_reduce 1X-2M 40gbit\n", ":1: bad size band '1X-2M'"),
    ("all_reduce 1M 40gbit\n", ":1: bad size band '1M'"),
    ("all_reduce 1M-64M fast\n", ":1 fast: not a rate"),
    ("all_reduce 1M-64M\n", ":1: expected OP BAND RATE"),
    ("all_reduce 1M-64M 4G\nall_reduce 32M- 5G\n", ":2: size band 33554432- of all_reduce "
                                                   "overlaps"),
    ("# nothing\n", "no expected figures"),
])
def test_a_bad_peak_file_names_its_line(tmp_path, lines, says):
    path = tmp_path / "bad.peak"
    path.write_text(lines)
    with pytest.raises(UsageError) as error:
        bounds.parse_peak(str(path))
    assert says in str(error.value) and str(path) in str(error.value)
    assert "\n" not in str(error.value)


def test_a_word_that_is_no_file_nor_rate_is_one_line():
    with pytest.raises(UsageError, match=r"^--peak fast: neither auto, a rate .* nor a file$"):
        bounds.parse_peak("fast")
    with pytest.raises(UsageError, match="positive"):
        bounds.parse_peak("-4gbit")


def test_the_lines_say_the_bound_in_its_own_unit():
    assert bounds.Bound("link", "eth0", 100.0, "sysfs").line() == "bound: eth0 100 Gb/s (sysfs)"
    assert bounds.Bound("memory copy", "memory copy", 84.0, "measured, 2 threads").line() == \
        "bound: memory copy 10.5 GB/s (measured, 2 threads)"
    assert bounds.unknown("link", "eth0", "eth0 reports no speed").line() == \
        "bound: unknown (eth0 reports no speed)"
    assert bounds.fraction(50.0, bounds.Bound("given", "--peak", 100.0, "--peak")) == 0.5
    assert bounds.fraction(50.0, bounds.unknown("link", "lo", "lo")) is None


def test_this_machines_virtio_nic_says_no_speed_and_lo_has_no_line_rate():
    root = SYSFS / "virtio"
    eth0 = bounds.interface_bound("eth0", root)
    assert (eth0.gbps, eth0.why) == (None, "eth0 reports no speed")
    assert bounds.interface_bound("lo", root).gbps is None
    assert "virtual" in bounds.interface_bound("ifb0", root).why
    assert bounds.route_interface("192.0.2.77", root) == "eth0"  # the default route
    assert bounds.route_interface("127.0.0.1", root) == "lo"
    line = bounds.network_bound({"MASTER_ADDR": "127.0.0.1"}, "gloo", root).line()
    assert line == "bound: unknown (lo (route to 127.0.0.1): the loopback has no line rate)"


def test_a_servers_nic_infiniband_and_veth():
    root = SYSFS / "server"
    assert bounds.interface_bound("ens1f0np0", root).line() == \
        "bound: ens1f0np0 100 Gb/s (sysfs)"
    veth = bounds.interface_bound("veth3a1b2c", root)
    assert veth.gbps is None and "virtual" in veth.why  # it says 10000, of its own choosing
    assert bounds.interface_bound("ib0", root).line() == "bound: mlx5_1 200 Gb/s (sysfs)"
    assert bounds.infiniband_bound("mlx5_0", root).gbps == 400
    assert bounds.infiniband_devices(root) == ["mlx5_0", "mlx5_1"]
    # the longest prefix: 10.0/16 over the default route, 172.16.254/24 over 172.16/16
    assert bounds.route_interface("10.0.3.4", root) == "ens1f0np0"
    assert bounds.route_interface("8.8.8.8", root) == "ens1f0np0"
    assert bounds.route_interface("172.16.254.9", root) == "veth3a1b2c"
    assert bounds.route_interface("172.16.3.9", root) == "ib0"
    environ = {"MASTER_ADDR": "10.0.0.2", "FI_TCP_IFACE": "ib0", "GLOO_SOCKET_IFNAME": "veth3a1b2c"}
    assert bounds.network_bound(environ, "ccl", root).name == "mlx5_1"  # the backend's own
    assert bounds.network_bound(environ, "gloo", root).gbps is None
    assert bounds.network_bound({"MASTER_ADDR": "10.0.0.2"}, "gloo", root).gbps == 100
    assert bounds.named_interface({"NCCL_SOCKET_IFNAME": "=ens1f0np0,ib0"}, "nccl") == \
        ("ens1f0np0", "NCCL_SOCKET_IFNAME")
    assert bounds.named_interface({"NCCL_SOCKET_IFNAME": "^docker"}, "nccl") is None


def test_no_device_present():
    root = SYSFS / "empty"
    assert bounds.interface_bound("eth0", root).why == "no interface eth0 in sysfs"
    assert bounds.infiniband_devices(root) == []
    assert bounds.route_interface("10.0.0.1", root) is None
    assert bounds.network_bound({"MASTER_ADDR": "10.0.0.1"}, None, root).gbps is None
    assert bounds.network_bound({"MASTER_ADDR": "no-such-host.invalid"}, None, root).gbps is None


class RecordedNvml:
    """pynvml's surface the reader calls, answering from a recording (tests/data/nvml/)."""

    NVML_FEATURE_ENABLED = 1
    NVML_NVLINK_MAX_LINKS = 18
    NVML_DEVICE_ARCH_HOPPER = 9
    NVML_NVLINK_VERSION_1_0, NVML_NVLINK_VERSION_2_0, NVML_NVLINK_VERSION_2_2 = 1, 2, 3
    NVML_NVLINK_VERSION_3_0, NVML_NVLINK_VERSION_3_1, NVML_NVLINK_VERSION_4_0 = 4, 5, 6
    NVML_NVLINK_VERSION_5_0 = 7

    class NVMLError(Exception):
        pass

    def __init__(self, name):
        self.gpus = [json.loads((DATA / "nvml" / f"{name}.json").read_text())] if name else []

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        if index >= len(self.gpus):
            raise self.NVMLError("Invalid Argument")
        return self.gpus[index]

    def nvmlDeviceGetArchitecture(self, gpu):
        return gpu["arch"]

    def _link(self, gpu, link):
        if link >= len(gpu["links"]):
            raise self.NVMLError("Not Supported")
        return gpu["links"][link]

    def nvmlDeviceGetNvLinkState(self, gpu, link):
        return self._link(gpu, link)[0]

    def nvmlDeviceGetNvLinkVersion(self, gpu, link):
        return self._link(gpu, link)[1]

    def nvmlDeviceGetMaxPcieLinkGeneration(self, gpu):
        return gpu["pcie"][0]

    def nvmlDeviceGetMaxPcieLinkWidth(self, gpu):
        return gpu["pcie"][1]


@pytest.mark.parametrize("gpu,line", [
    ("h100-sxm", "bound: NVLink x18 450 GB/s (nvml)"),
    ("a100-sxm", "bound: NVLink x10 250 GB/s (nvml)"),
    ("l4-pcie", "bound: PCIe gen4 x16 31.5 GB/s (nvml)"),
])
def test_nvml_nvlink_else_pcie(gpu, line):
    assert bounds.gpu_bound(RecordedNvml(gpu), 0).line() == line


def test_no_gpu_or_no_pynvml_no_bound():
    assert bounds.gpu_bound(RecordedNvml(None), 0) is None
    assert bounds.gpu_bound(None, 0) is None


def test_gpu_checks_lines():
    from commbench.bounds import nvml
    assert nvml.describe(RecordedNvml("h100-sxm")) == ["GPU 0: bound: NVLink x18 450 GB/s (nvml)"]
    assert nvml.describe(RecordedNvml(None)) == []
    assert nvml.describe(None)[0].startswith("bound: unknown (no pynvml")


def test_the_copy_cache_keeps_each_host_and_refreshes(tmp_path):
    host = bounds.Host.here(ranks=2, threads=1, pinned=False, root=SYSFS / "virtio")
    assert host.cpu == "AMD EPYC" and host.source() == "measured, 2 threads"
    sizes = [8, 1 << 20, 1 << 30]
    assert memcopy.missing(host, sizes, folder=tmp_path) == [8, 1 << 20, memcopy.LARGEST_COPY]
    memcopy.store(host, {8: 0.01, 1 << 20: 80.0}, folder=tmp_path)
    other = bounds.Host("elsewhere", "AMD EPYC", 2, 1, False)
    memcopy.store(other, {8: 1.0}, folder=tmp_path)
    assert memcopy.cached(host, tmp_path) == {8: 0.01, 1 << 20: 80.0}
    assert memcopy.missing(host, sizes, folder=tmp_path) == [memcopy.LARGEST_COPY]
    assert memcopy.missing(host, sizes, refresh=True, folder=tmp_path) == \
        [8, 1 << 20, memcopy.LARGEST_COPY]
    assert memcopy.cached(bounds.Host("h", "c", 3, 1, False), tmp_path) == {}
    assert memcopy.bound_at({1 << 20: 80.0}, host, 1 << 20).line() == \
        "bound: memory copy 10 GB/s (measured, 2 threads)"
    (tmp_path / memcopy.CACHE_FILE).write_text("not json")
    assert memcopy.cached(host, tmp_path) == {}


def test_a_copys_pace_on_a_clock_it_is_handed():
    ticks = iter(range(100))
    copies = []
    rate = memcopy.pace(lambda: copies.append(1), 1000, clock=lambda: next(ticks) * 0.001)
    # two warm-up copies, then five (5 ms < 10 ms: on to 10 ms), each 1 ms of 1000 bytes
    assert len(copies) == 2 + 10 and rate == pytest.approx(1e6)
    # one copy interrupted for 50 ms: the fastest copy is the figure
    times = iter([0, 1, 2, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62])
    assert memcopy.pace(lambda: None, 1000, clock=lambda: next(times) * 0.001) == \
        pytest.approx(1e6)


def test_each_row_is_held_against_its_own_bound(tmp_path):
    from commbench.ranks.peak import Peak
    host = bounds.Host("vm", "AMD EPYC", 2, 1, False)
    copies = {1 << 20: 80.0, 2 << 20: 40.0, memcopy.LARGEST_COPY: 20.0}
    auto = Peak(bounds.parse_peak("auto"), memcopy.summary(copies, host), copies, host)
    assert auto.line() == "bound: memory copy 10 GB/s (measured, 2 threads)"
    # 3 MiB is held against the 2 MiB copy, 1 GiB against the largest one
    assert auto.at("all_reduce", 3 << 20).gbps == 40 and auto.at("all_reduce", 1 << 30).gbps == 20
    text, fields = auto.row("all_reduce", 1 << 20, 5e9, raw=False)  # 40 Gbit/s of 80
    assert text == "50.0" and fields["peak_fraction"] == 0.5
    assert fields["bound"] == {"kind": "memory copy", "name": "memory copy", "gbps": 80.0,
                               "source": "measured, 2 threads"}
    assert auto.row("all_reduce", 1 << 20, 5e9, raw=True)[0] == "0.500"
    assert auto.row("barrier", 0, None, raw=False) == ("-", {"bound": None, "peak_fraction": None})
    path = tmp_path / "f.peak"
    path.write_text("all_reduce - 40gbit\n")
    given = Peak(bounds.parse_peak(str(path)), None)
    assert given.row("all_reduce", 8, 2.5e9, raw=False)[0] == "50.0"
    assert given.row("all_gather", 8, 2.5e9, raw=False)[0] == "-"  # no line covers it
    assert given.line() == f"bound: the expected figures of {path} (1 line, --peak)"
    assert given.record() == {"spec": str(path), "bound": None}
    unknown = Peak(None, bounds.unknown("link", "eth0", "eth0 reports no speed"))
    assert not unknown.column and unknown.line() == "bound: unknown (eth0 reports no speed)"


def test_a_copy_timed_on_a_busy_host_is_not_kept_and_a_beaten_one_is_dropped(tmp_path):
    # the run that filled a cache at a third of the truth: load 8-29 on 2 CPUs
    assert memcopy.busy(8.1, 2, ranks=2) and not memcopy.busy(2.4, 2, ranks=2)
    assert not memcopy.busy(None, 2, ranks=2)  # no load average kept: nothing to judge by
    host = bounds.Host("vm", "AMD EPYC", 2, 1, False)
    memcopy.store(host, {8: 0.01}, load=1.5, cpus=2, folder=tmp_path)
    assert memcopy.entry(host, tmp_path)["load"] == 1.5
    assert memcopy.drop(host, tmp_path) and memcopy.cached(host, tmp_path) == {}
    assert not memcopy.drop(host, tmp_path)


def test_a_row_above_its_bound_names_the_bound_stale(tmp_path, monkeypatch):
    from commbench.ranks.peak import Peak
    monkeypatch.setenv("COMMBENCH_CACHE", str(tmp_path))
    host = bounds.Host("vm", "AMD EPYC", 2, 1, False)
    copies = {4 << 20: 20.0, 64 << 20: 10.0}
    memcopy.store(host, copies, load=17.0, cpus=2)
    auto = Peak(bounds.parse_peak("auto"), memcopy.summary(copies, host), copies, host,
                "cached 2026-12-05T13:02:00Z, load 17.0")
    auto.row("all_reduce", 4 << 20, 2e9, raw=False)  # 16 Gbit/s of 20: 80%
    assert auto.beaten() is None and memcopy.cached(host) == copies
    assert auto.row("all_reduce", 64 << 20, 4.15e9, raw=False)[0] == "332.0"
    auto.row("all_gather", 64 << 20, 2.5e9, raw=False)
    line = auto.beaten()
    assert line.startswith("2 rows above their bound, up to 332% (all_reduce at 67108864 B a "
                           "rank, memory copy 1.25 GB/s (measured, 2 threads)): the memory copy "
                           "(cached 2026-12-05T13:02:00Z, load 17.0) was slower"), line
    assert "--peak-refresh" in line and memcopy.cached(host) == {}
    path = tmp_path / "f.peak"
    path.write_text("all_reduce - 10gbit\n")
    given = Peak(bounds.parse_peak(str(path)), None)
    given.row("all_reduce", 8, 2.5e9, raw=False)
    assert given.beaten() == (f"1 row above its bound, up to 200% (all_reduce at 8 B a rank, "
                              f"all_reduce 0- 10 Gb/s ({path}:1)): the bound is below what was "
                              f"measured; check the rate or the file --peak gave")
