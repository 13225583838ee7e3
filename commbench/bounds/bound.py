"""A measurement's bound: what the hardware under it can carry, the kind of path, its name and
where the figure came from. Standard library only."""

from dataclasses import dataclass

# The kinds of bound, and the unit each is spoken of in: a network's line rate in bits (what
# ethtool and the switch say), a memory's or a GPU link's in bytes (what the datasheets say).
KINDS = ("link", "infiniband", "nvlink", "pcie", "memory copy", "given", "expected")
_IN_BYTES = ("nvlink", "pcie", "memory copy")


def figure(value):
    """`100`, `10.5`, `0.95`: three significant figures at most, no trailing zeros."""
    if value >= 100:
        return f"{value:.0f}"
    text = f"{value:.1f}" if value >= 10 else f"{value:.2f}"
    return text.rstrip("0").rstrip(".")


@dataclass(frozen=True)
class Bound:
    """What one path can carry. `gbps` in Gbit/s (the unit the tables print by default); None:
    unknown, and `why` says why (a virtual NIC reports no speed; nothing is guessed)."""

    kind: str
    name: str
    gbps: float | None
    source: str
    why: str = ""

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown bound kind {self.kind!r}")

    @property
    def known(self):
        return self.gbps is not None

    def rate(self):
        """`100 Gb/s` for a network, `10.5 GB/s` for a memory or a GPU link."""
        if self.gbps is None:
            return "unknown"
        if self.kind in _IN_BYTES:
            return f"{figure(self.gbps / 8)} GB/s"
        return f"{figure(self.gbps)} Gb/s"

    def line(self):
        """`bound: eth0 100 Gb/s (sysfs)`, `bound: memory copy 10.5 GB/s (measured, 2 threads)`,
        `bound: unknown (eth0 reports no speed)`."""
        if self.gbps is None:
            return f"bound: unknown ({self.why or self.name + ': no figure'})"
        return f"bound: {self.name} {self.rate()} ({self.source})"

    def record(self):
        """What the results file keeps of it."""
        return {"kind": self.kind, "name": self.name, "gbps": self.gbps, "source": self.source,
                **({"why": self.why} if self.why else {})}


def unknown(kind, name, why, source="sysfs"):
    return Bound(kind, name, None, source, why)


def fraction(busbw_gbps, bound):
    """The share of the bound a row's bus bandwidth reaches (docs/peak.md): busbw, not algbw,
    because busbw is defined so that it can be held against the bottleneck's bandwidth whatever
    the op and the number of ranks (nccl-tests' PERFORMANCE.md). None where the bound is
    unknown."""
    if bound is None or bound.gbps is None or busbw_gbps is None:
        return None
    return busbw_gbps / bound.gbps
