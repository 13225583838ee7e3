"""Between hosts: the line rate of the interface the process group uses, from sysfs. Every
reader takes `root` (a recorded tree in the tests, `/` on a host). Standard library only.

- The interface: the one the backend is told to use (GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME,
  oneCCL's FI_TCP_IFACE), else the route to the rendezvous address (/proc/net/route: the longest
  prefix that holds it; a loopback address goes over lo).
- Its rate: `/sys/class/net/<dev>/speed` (Mbit/s); an IPoIB interface's InfiniBand port's
  `/sys/class/infiniband/<hca>/ports/<n>/rate` ("100 Gb/sec (4X EDR)"). lo, a virtual
  interface (veth, bridge, tun: no `device` under it; a veth says 10000 of its own choosing) and
  a speed of -1 or none (a virtio NIC) give an unknown bound, saying which."""

import ipaddress
import os
import re
import socket

from .bound import Bound, unknown

# Which variable names the interface, by backend: the backend's own first.
_IFNAME_VARIABLES = {"gloo": ("GLOO_SOCKET_IFNAME",), "nccl": ("NCCL_SOCKET_IFNAME",),
                     "ccl": ("FI_TCP_IFACE",)}
IFNAME_VARIABLES = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "FI_TCP_IFACE")


def _read(path):
    try:
        with open(path, encoding="ascii") as file:
            return file.read().strip()
    except (OSError, UnicodeDecodeError):  # absent, or EINVAL (lo's speed, a link down)
        return None


def named_interface(environ, backend=None):
    """(interface, variable) from the backend's variable (or any of them); None if none is set.
    A list (eth0,eth1) gives its first; NCCL's `=eth0` its name; an exclusion (`^docker`) names
    none."""
    names = _IFNAME_VARIABLES.get(backend, ()) + IFNAME_VARIABLES
    for variable in names:
        value = environ.get(variable, "").split(",")[0].strip().lstrip("=")
        if value and not value.startswith("^"):
            return value, variable
    return None


def route_interface(address, root="/"):
    """The interface the route to `address` (an IPv4 address or host name) leaves by: lo for a
    loopback address, else the longest prefix of /proc/net/route that holds it; None if the name
    does not resolve or no route holds it."""
    try:
        ip = ipaddress.ip_address(socket.gethostbyname(address))
    except (OSError, UnicodeError, ValueError):
        return None
    if ip.is_loopback:
        return "lo"
    best = None
    for line in (_read(os.path.join(root, "proc/net/route")) or "").splitlines()[1:]:
        fields = line.split()
        if len(fields) < 8 or not int(fields[3], 16) & 1:  # RTF_UP
            continue
        # little-endian hex, as the kernel writes them
        destination = int.from_bytes(bytes.fromhex(fields[1]), "little")
        mask = int.from_bytes(bytes.fromhex(fields[7]), "little")
        if int(ip) & mask == destination and (best is None or mask > best[0]):
            best = (mask, fields[0])
    return best[1] if best else None


def interface_bound(dev, root="/", why_chosen=""):
    """The bound of one network interface (module docstring)."""
    base = os.path.join(root, "sys/class/net", dev)
    chosen = f" ({why_chosen})" if why_chosen else ""
    if not os.path.isdir(base):
        return unknown("link", dev, f"no interface {dev}{chosen} in sysfs")
    if dev == "lo":
        return unknown("link", dev, f"lo{chosen}: the loopback has no line rate")
    hcas = os.path.join(base, "device", "infiniband")
    if os.path.isdir(hcas):
        for hca in sorted(os.listdir(hcas)):
            return infiniband_bound(hca, root)
    if not os.path.exists(os.path.join(base, "device")):
        return unknown("link", dev, f"{dev}{chosen} is a virtual interface: its speed is not a "
                                    "line rate")
    speed = _read(os.path.join(base, "speed"))
    if speed is None or not re.fullmatch(r"\d+", speed) or int(speed) <= 0:
        return unknown("link", dev, f"{dev}{chosen} reports no speed")
    return Bound("link", dev, int(speed) / 1000, "sysfs")


def infiniband_bound(hca, root="/"):
    """An HCA's fastest active port: `ports/<n>/rate` ("100 Gb/sec (4X EDR)") where `state`
    says ACTIVE (or says nothing)."""
    ports = os.path.join(root, "sys/class/infiniband", hca, "ports")
    rates = []
    for port in sorted(os.listdir(ports)) if os.path.isdir(ports) else ():
        state = _read(os.path.join(ports, port, "state"))
        rate = re.match(r"\s*([\d.]+)\s*Gb/sec", _read(os.path.join(ports, port, "rate")) or "")
        if rate and (state is None or "ACTIVE" in state):
            rates.append(float(rate.group(1)))
    if not rates:
        return unknown("infiniband", hca, f"{hca} has no active port with a rate")
    return Bound("infiniband", hca, max(rates), "sysfs")


def infiniband_devices(root="/"):
    base = os.path.join(root, "sys/class/infiniband")
    return sorted(os.listdir(base)) if os.path.isdir(base) else []


def network_bound(environ, backend=None, root="/"):
    """The bound between hosts: the interface the process group uses (named by a variable, or
    the route to MASTER_ADDR), and its rate."""
    named = named_interface(environ, backend)
    if named is not None:
        return interface_bound(named[0], root, named[1])
    address = environ.get("MASTER_ADDR", "127.0.0.1")
    dev = route_interface(address, root)
    if dev is None:
        return unknown("link", address, f"no route to {address} found in /proc/net/route")
    return interface_bound(dev, root, f"route to {address}")
