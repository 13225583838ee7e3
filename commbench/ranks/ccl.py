"""oneCCL (`--backend ccl`): its torch bindings, the environment a ccl run sets (and reports),
and its log kept off the table. docs/ccl.md says why each setting."""

import contextlib
import os
import sys

from ..errors import BenchmarkError


def import_bindings():
    """Whether oneCCL's torch bindings import (which registers the ccl backend)."""
    try:
        import oneccl_bindings_for_pytorch  # noqa: F401  (registers the ccl backend)
    except ImportError:
        return False
    return True


# oneCCL's environment for a ccl run, set before its process group starts; a user's own values
# win. oneCCL's defaults give every rank a worker thread that busy-waits for the others: with
# more ranks than spare cores a 1 KB all_reduce takes milliseconds, against tens of microseconds
# with the calling thread doing the work (CCL_WORKER_OFFLOAD=0) and ranks on one host talking
# through shared memory (CCL_ATL_SHM=1). CCL_LOG_LEVEL=error keeps its dozen start-up warnings
# per rank off stderr.
CCL_DEFAULTS = {"CCL_WORKER_OFFLOAD": "0", "CCL_ATL_SHM": "1", "CCL_LOG_LEVEL": "error"}
# The settings the start-up line and the results' meta report, with oneCCL's own defaults.
CCL_REPORTED = {"CCL_WORKER_OFFLOAD": "1", "CCL_ATL_SHM": "0", "CCL_ATL_TRANSPORT": "ofi",
                "CCL_WORKER_COUNT": "1", "CCL_LOG_LEVEL": "warn"}


def _ccl_root():
    """Where oneCCL's headers and library are (include/oneapi/ccl.hpp, lib/libccl.so): this
    environment's prefix (oneCCL from the registry, scripts/install-ccl.sh) or the bindings'
    own directory (Intel's prebuilt wheels); None when neither has them."""
    import importlib.util
    places = [sys.prefix]
    spec = importlib.util.find_spec("oneccl_bindings_for_pytorch")
    if spec is not None and spec.origin:
        places.append(os.path.dirname(spec.origin))
    for place in places:
        if os.path.exists(os.path.join(place, "include", "oneapi", "ccl.hpp")) and \
                os.path.exists(os.path.join(place, "lib", "libccl.so")):
            return place
    return None


_ccl_settings = {}  # the process's, once set: a later call (an op reusing the group) reports them


def environment(layer):
    """Set oneCCL's environment for a ccl run (CCL_DEFAULTS where unset; CCL_ROOT and CPATH,
    which DeepSpeed's build of its oneCCL op needs) and return what the run reports of it."""
    if _ccl_settings:
        return _ccl_settings
    defaulted = [name for name in CCL_DEFAULTS if name not in os.environ]
    for name in defaulted:
        os.environ[name] = CCL_DEFAULTS[name]
    # libfabric loads the InfiniPath PSM library, whose crash handler writes a backtrace file
    # (python.80s-PID,HOST.btr) into the working directory of a rank that aborts: not there.
    os.environ.setdefault("IPATH_NO_BACKTRACE", "1")
    root = os.environ.get("CCL_ROOT") or _ccl_root()
    if root:
        os.environ["CCL_ROOT"] = root
        include = os.path.join(root, "include")
        paths = [path for path in os.environ.get("CPATH", "").split(os.pathsep) if path]
        if include not in paths:
            os.environ["CPATH"] = os.pathsep.join([include] + paths)
    elif layer == "deepspeed":
        raise BenchmarkError("--dist deepspeed on ccl: DeepSpeed builds its oneCCL op against "
                             "oneCCL's headers and library, and none were found here (CCL_ROOT "
                             "is not set); set CCL_ROOT to oneCCL's directory (with include/ and "
                             "lib/; scripts/install-ccl.sh puts oneCCL in the venv), or use "
                             "--dist torch")
    unset = [name for name in CCL_REPORTED if name not in os.environ]
    _ccl_settings.update(
        env={name: os.environ.get(name, CCL_REPORTED[name]) for name in CCL_REPORTED},
        set_by_suite=defaulted, oneccl_defaults=unset, ccl_root=os.environ.get("CCL_ROOT"),
        versions=_ccl_versions())
    return _ccl_settings


@contextlib.contextmanager
def c_stdout_on_stderr(active=True):
    """While oneCCL starts, the C library's stdout is stderr: oneCCL writes its log there (at
    CCL_LOG_LEVEL=error still the line saying the level was changed), and stdout is the
    table's."""
    saved = None
    if active:
        import ctypes
        libc = ctypes.CDLL(None)
        try:
            if sys.stdout is not None:
                sys.stdout.flush()
            libc.fflush(None)
            kept = os.dup(1)
            try:
                os.dup2(2, 1)
            except OSError:
                os.close(kept)
                raise
            saved = kept
        except (OSError, ValueError):  # no stdout or stderr to redirect: nothing to keep apart
            saved = None
    try:
        yield
    finally:
        if saved is not None:
            libc.fflush(None)  # what oneCCL buffered goes where it was written: to stderr
            os.dup2(saved, 1)
            os.close(saved)


def _ccl_versions():
    from importlib import metadata
    found = {}
    for name, package in (("oneccl", "oneccl-cpu"), ("oneccl", "oneccl"),
                          ("bindings", "oneccl-bind-pt")):
        if name in found:
            continue
        try:
            found[name] = metadata.version(package)
        except metadata.PackageNotFoundError:
            pass
    if "bindings" not in found:
        found["bindings"] = getattr(sys.modules.get("oneccl_bindings_for_pytorch"), "__version__",
                                    None)
    return found


def describe(settings):
    """The start-up line's account of oneCCL's settings: whose each value is."""
    env = settings["env"]
    shown = [name for name in env if name != "CCL_LOG_LEVEL"]
    parts = []
    for label, names in (("the suite's defaults", settings["set_by_suite"]),
                         ("oneCCL's", settings["oneccl_defaults"])):
        mine = [name for name in shown if name in names]
        if mine:
            parts.append(" ".join(f"{name}={env[name]}" for name in mine) + f" ({label})")
    yours = [name for name in shown
             if name not in settings["set_by_suite"] + settings["oneccl_defaults"]]
    if yours:
        parts.insert(0, " ".join(f"{name}={env[name]}" for name in yours) + " (yours)")
    return "oneCCL " + ", ".join(parts)
