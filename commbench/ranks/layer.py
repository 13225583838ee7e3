"""Which layer, device and backend a run uses: DeepSpeed imported (or one line saying why it
cannot be), the device and backend detected and checked to exist, DeepSpeed's accelerator told
the backend the run measures, and the one line for a process group that did not start."""

import contextlib
import os
import platform
import sys
import traceback

import torch
import torch.distributed

from .. import caches
from . import ccl as oneccl
from ..errors import BenchmarkError


def _torch_accelerator():
    """The device type of torch's current accelerator ('cuda', 'xpu', ...), or None."""
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and accelerator.is_available():
        return accelerator.current_accelerator().type
    return "cuda" if torch.cuda.is_available() else None


def resolve_device_and_backend(args, ds_accelerator=None):
    """The device type and backend this run uses, checked to exist; raises BenchmarkError."""
    if ds_accelerator is not None:
        available = ds_accelerator.device_name()
        device = args.device or available
        backend = args.backend or (ds_accelerator.communication_backend_name()
                                   if device == available else "gloo")
    else:
        available = _torch_accelerator()
        device = args.device or ("cuda" if available == "cuda" else "cpu")
    if device != "cpu" and device != available:
        raise BenchmarkError(f"--device {device}: no {device} device is available on this machine; "
                             "use --device cpu")
    if ds_accelerator is None:
        if args.backend:
            backend = args.backend
        elif device == "cuda":
            backend = "nccl"
        elif device == "cpu":
            backend = "ccl" if oneccl.import_bindings() else "gloo"
        else:
            backend = torch.distributed.get_default_backend_for_device(device)
    if backend == "nccl" and (device != "cuda" or not torch.cuda.is_available()):
        raise BenchmarkError("--backend nccl needs CUDA devices and there are none here "
                             "(or --device is not cuda); use --backend gloo --device cpu")
    if backend == "ccl" and not oneccl.import_bindings():
        raise BenchmarkError("--backend ccl needs oneccl_bindings_for_pytorch, which is not "
                             "installed: `make ccl` in the checkout builds it into .venv "
                             "(another venv: scripts/install-ccl.sh VENV; docs/ccl.md), or use "
                             "--backend gloo")
    if backend == "mpi" and not torch.distributed.is_mpi_available():
        raise BenchmarkError("--backend mpi: this torch was built without MPI support; "
                             "use --backend gloo (CPU) or nccl (GPU)")
    if not torch.distributed.is_backend_available(backend):
        raise BenchmarkError(f"--backend {backend} is not available in this torch build")
    return device, backend


def import_deepspeed(device, needed_by="--dist deepspeed", instead="or use --dist torch"):
    """deepspeed, deepspeed.comm and its accelerator, or one line saying what needs DeepSpeed."""
    caches.keep_in_venv("TORCH_EXTENSIONS_DIR")  # where make built DeepSpeed's CPU ops
    if device == "cpu":
        # Spares DeepSpeed's accelerator probe and its warning when the user said cpu.
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    try:
        # DeepSpeed logs to stdout; the table owns stdout, so its handler is bound to stderr.
        with contextlib.redirect_stdout(sys.stderr):
            import deepspeed
            import deepspeed.comm
            from deepspeed.accelerator import get_accelerator
    except ImportError as error:
        raise BenchmarkError(f"{needed_by} needs DeepSpeed, which cannot be imported ({error}); "
                             f"pip install deepspeed{', ' + instead if instead else ''}") from None
    return deepspeed, deepspeed.comm, get_accelerator()


def init_error(error, port, rank):
    """The one line for a process group that did not start."""
    text = str(error)
    if "EADDRINUSE" in text or "address already in use" in text.lower():
        return BenchmarkError(f"MASTER_PORT {port} is already in use on this host: another job "
                              "holds it; set MASTER_PORT to a free port", rank_local=True)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    first = (lines[0] if lines else type(error).__name__)[:300]
    frames = traceback.extract_tb(error.__traceback__)
    if "CCL_ROOT" in text:  # DeepSpeed's ccl backend found no oneCCL to build its op against
        return BenchmarkError(f"rank {rank}: DeepSpeed's ccl backend needs CCL_ROOT, oneCCL's "
                              "directory (with include/ and lib/); set it, or use --dist torch",
                              rank_local=True)
    if any("cpp_extension" in frame.filename for frame in frames):
        # DeepSpeed JIT-builds its CPU communication op at the first init_distributed().
        cause = next((line for line in lines if "fatal error" in line or " error:" in line), first)
        if "ccl.hpp" in cause:
            return BenchmarkError(f"rank {rank}: DeepSpeed could not build its oneCCL op "
                                  f"({cause[:200]}); CCL_ROOT={os.environ.get('CCL_ROOT')} must "
                                  "hold oneCCL's include/ and lib/, or use --dist torch",
                                  rank_local=True)
        return BenchmarkError(f"rank {rank}: DeepSpeed could not build its CPU communication "
                              f"extension ({cause[:200]}); it needs a C++ compiler, ninja and "
                              "about 1 GB of free memory once (TORCH_EXTENSIONS_DIR keeps the "
                              "build), or use --dist torch", rank_local=True)
    return BenchmarkError(f"rank {rank}: the process group did not start: {first}",
                          rank_local=True)


def tell_deepspeed_backend(ds_accelerator, backend):
    """DeepSpeed 0.19's init_distributed (deepspeed.initialize's too) starts its accelerator's
    backend whatever it is asked (on CPU: ccl once oneCCL's bindings import, with its own oneCCL
    op): the accelerator is told the backend this run measures."""
    if backend != ds_accelerator.communication_backend_name() and \
            hasattr(ds_accelerator, "_communication_backend_name"):
        ds_accelerator._communication_backend_name = backend


def processor_model(device):
    """The CPU's model name (/proc/cpuinfo), and the accelerator's where the run used one: what
    a results file's reader needs to know about the machine."""
    cpu = None
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            cpu = next((line.split(":", 1)[1].strip() for line in info
                        if line.startswith("model name")), None)
    except OSError:
        pass
    models = {"cpu": cpu or platform.processor() or None, "cpus": os.cpu_count()}
    if device.type != "cpu":
        try:
            models["accelerator"] = torch.get_device_module(device.type).get_device_name(device)
        except (AttributeError, RuntimeError, AssertionError):
            models["accelerator"] = None
    return models


def pin(local_rank):
    """This rank, and the threads it starts from here on (the backend's progress threads), on
    one CPU of its own: the local rank's, among the CPUs this process may use. Returns it."""
    cpus = sorted(os.sched_getaffinity(0))
    cpu = cpus[local_rank % len(cpus)]
    os.sched_setaffinity(0, {cpu})
    return cpu


def select_device(device_type, local_rank, ds_accelerator):
    """This rank's device: the CPU, or its local rank's accelerator, made current."""
    if device_type == "cpu":
        return torch.device("cpu")
    if ds_accelerator is not None:
        index = local_rank % ds_accelerator.device_count()
        ds_accelerator.set_device(index)
    else:
        index = local_rank % torch.accelerator.device_count()
        torch.accelerator.set_device_index(index)
    return torch.device(device_type, index)
