"""Within a host on GPUs: NVLink (active links x each link's rate by generation) and PCIe
(generation x width), through NVML (`pynvml`, from the nvidia-ml-py package). Every reader
takes the pynvml module (or a recording of its answers, in the tests); without pynvml, or
without a GPU, there is no bound. Standard library only.

Rates are one direction's, the figure busbw is held against (nccl-tests' PERFORMANCE.md): an
NVLink carries 20 GB/s a direction in its first generation, 25 GB/s in the second to the fourth
(V100, A100, H100), 50 GB/s in the fifth (B200); a PCIe lane 0.25, 0.5, 0.985, 1.969, 3.938 and
7.563 GB/s in generations 1 to 6."""

import importlib

from .bound import Bound

_PCIE_LANE_GBYTES = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}
# NVML's nvmlNvlinkVersion_t by name: the GB/s of one link, one direction
_NVLINK_GBYTES = {"NVML_NVLINK_VERSION_1_0": 20, "NVML_NVLINK_VERSION_2_0": 25,
                  "NVML_NVLINK_VERSION_2_2": 25, "NVML_NVLINK_VERSION_3_0": 25,
                  "NVML_NVLINK_VERSION_3_1": 25, "NVML_NVLINK_VERSION_4_0": 25,
                  "NVML_NVLINK_VERSION_5_0": 50, "NVML_NVLINK_VERSION_6_0": 100}


def load():
    """The pynvml module, initialised; None where it is not installed or finds no driver."""
    try:
        pynvml = importlib.import_module("pynvml")
        pynvml.nvmlInit()
    except Exception:  # ImportError, or NVMLError: no driver, no GPU
        return None
    return pynvml


def _link_gbytes(pynvml, handle, version):
    gbytes = None
    for name, rate in _NVLINK_GBYTES.items():
        if getattr(pynvml, name, None) == version:
            gbytes = rate
    hopper = getattr(pynvml, "NVML_DEVICE_ARCH_HOPPER", None)
    if gbytes == 50 and hopper is not None:
        # some drivers report NVLink 5 for an H100's NVLink 4
        try:
            if pynvml.nvmlDeviceGetArchitecture(handle) == hopper:
                gbytes = 25
        except pynvml.NVMLError:
            pass
    return gbytes


def nvlink_bound(pynvml, handle):
    """Active NVLinks x their rate, or None where none is active."""
    links, total = 0, 0.0
    for link in range(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18)):
        try:
            if pynvml.nvmlDeviceGetNvLinkState(handle, link) != pynvml.NVML_FEATURE_ENABLED:
                continue
            gbytes = _link_gbytes(pynvml, handle, pynvml.nvmlDeviceGetNvLinkVersion(handle, link))
        except pynvml.NVMLError:  # no such link
            continue
        if gbytes is not None:
            links, total = links + 1, total + gbytes
    if not links:
        return None
    return Bound("nvlink", f"NVLink x{links}", total * 8, "nvml")


def pcie_bound(pynvml, handle):
    """The PCIe link at its most (an idle GPU's current generation drops): generation x width;
    None where NVML does not say."""
    try:
        generation = pynvml.nvmlDeviceGetMaxPcieLinkGeneration(handle)
        width = pynvml.nvmlDeviceGetMaxPcieLinkWidth(handle)
    except pynvml.NVMLError:
        return None
    if generation not in _PCIE_LANE_GBYTES or not width or width < 1:
        return None
    return Bound("pcie", f"PCIe gen{generation} x{width}",
                 _PCIE_LANE_GBYTES[generation] * width * 8, "nvml")


def gpu_bound(pynvml, index):
    """GPU `index`'s bound within a host: its NVLinks, else its PCIe link; None without pynvml,
    or where NVML knows no such GPU."""
    if pynvml is None:
        return None
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    except pynvml.NVMLError:
        return None
    return nvlink_bound(pynvml, handle) or pcie_bound(pynvml, handle)


def describe(pynvml):
    """scripts/gpu-check.sh's lines: each GPU's bound, or why there is none."""
    if pynvml is None:
        return ["bound: unknown (no pynvml, or NVML finds no driver: pip install nvidia-ml-py)"]
    try:
        count = pynvml.nvmlDeviceGetCount()
    except pynvml.NVMLError as error:
        return [f"bound: unknown (NVML: {error})"]
    lines = []
    for index in range(count):
        bound = gpu_bound(pynvml, index)
        lines.append(f"GPU {index}: " + (bound.line() if bound is not None else
                                         "bound: unknown (NVML names no NVLink or PCIe link)"))
    return lines
