"""What every results file's meta record says of where it ran, of the software and of the command
that made it (the op scripts', doctor.py's, replay.py's and parallel_bench.py's alike: `placed`
and `stamped`, each command's own fields between them)."""

import platform
import sys
import time

import torch

from .. import __version__


def placed(comm):
    """Where a run ran: the layer, backend, device type, the world and its ranks' hosts."""
    return {"dist": comm.name, "backend": comm.backend, "device": comm.device.type,
            "world_size": len(comm.hostnames), "hostnames": comm.hostnames}


def stamped(installed_deepspeed=False):
    """The software's versions (versions()), the command line and the start time."""
    return {"versions": versions(installed_deepspeed), **invocation()}


def versions(installed_deepspeed=False):
    """Python's, torch's, DeepSpeed's (when imported; with installed_deepspeed, also when only
    installed) and the suite's own version."""
    found = {"python": platform.python_version(), "torch": torch.__version__}
    if "deepspeed" in sys.modules:
        found["deepspeed"] = sys.modules["deepspeed"].__version__
    elif installed_deepspeed:
        from importlib.metadata import PackageNotFoundError, version
        try:
            found["deepspeed"] = version("deepspeed")
        except PackageNotFoundError:
            pass
    found["commbench"] = __version__
    return found


def invocation():
    """The command line and the start time of this run."""
    return {"command": [sys.executable] + sys.argv,
            "start_time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
