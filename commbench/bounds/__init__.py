"""The bound of each measurement: what the hardware under it can carry (docs/peak.md). No
torch: `bound.py` (`Bound`, the fraction of it a row reaches), `rates.py` (`parse_rate`),
`spec.py` (`parse_peak`: --peak auto | RATE | FILE, and FILE's format), `sysfs.py` (between
hosts: the interface the process group uses and its line rate), `nvml.py` (within a host on
GPUs: NVLink and PCIe), `memcopy.py` (within a host on CPUs: the memory copy's timing and
cache). The ranks' side (the copy, the bound each row is held against) is
commbench/ranks/peak.py."""

from .bound import KINDS, Bound, fraction, unknown
from .memcopy import Host, cpu_model
from .nvml import gpu_bound, nvlink_bound, pcie_bound
from .rates import parse_rate
from .spec import AUTO, Band, PeakSpec, parse_peak, read_bands
from .sysfs import (infiniband_bound, infiniband_devices, interface_bound, named_interface,
                    network_bound, route_interface)

__all__ = ["AUTO", "KINDS", "Band", "Bound", "Host", "PeakSpec", "cpu_model", "fraction",
           "gpu_bound", "infiniband_bound", "infiniband_devices", "interface_bound",
           "named_interface", "network_bound", "nvlink_bound", "parse_peak", "parse_rate",
           "pcie_bound", "read_bands", "route_interface", "unknown"]
