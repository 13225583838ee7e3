"""Which dtypes a run may use, by name, and which of them a backend can move."""

import argparse

import torch

from .errors import UsageError

# The dtypes a run may use: real floating point and integer types. Quantized, complex, bool
# and sub-byte types are not message payloads.
_DTYPE_NAMES = ("float32", "float64", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2",
                "float8_e4m3fnuz", "float8_e5m2fnuz", "int8", "int16", "int32", "int64", "uint8",
                "uint16", "uint32", "uint64")
PAYLOAD_DTYPES = frozenset(d for d in (getattr(torch, n, None) for n in _DTYPE_NAMES)
                           if isinstance(d, torch.dtype))
# What gloo moves (torch 2.13's ProcessGroupGloo): the others fail inside the op.
GLOO_DTYPES = frozenset((torch.float32, torch.float64, torch.float16, torch.bfloat16,
                         torch.int8, torch.uint8, torch.int32, torch.int64))
# What oneCCL's torch bindings move (their cclDatatypes): the others fail inside the op.
CCL_DTYPES = GLOO_DTYPES | {torch.int16}
# The CPU backends whose dtypes are known; any other backend is left to say for itself.
BACKEND_DTYPES = {"gloo": GLOO_DTYPES, "ccl": CCL_DTYPES}


def get_dtype(name):
    """The torch dtype called `name` (`float`, `half`, `bfloat16`, `int32`, ...)."""
    dtype = getattr(torch, name, None) if name.isidentifier() else None
    if not isinstance(dtype, torch.dtype):
        raise argparse.ArgumentTypeError(
            f"unknown dtype '{name}': use a torch dtype name such as float, half, bfloat16, "
            "double, int8, uint8, int32 or long")
    if dtype not in PAYLOAD_DTYPES:
        raise argparse.ArgumentTypeError(f"dtype '{name}' is not supported: use a real floating "
                                         "point or integer type")
    return dtype


# `--dtype all`, in this order: what every backend moves (gloo, nccl, oneCCL, MPI).
ALL_DTYPES = ("float32", "float64", "float16", "bfloat16", "int8", "uint8", "int32", "int64")


def dtype_list(text):
    """The dtype names of `--dtype` (one, or several separated by commas), or None for `all`
    (which the backend decides: dtypes_for)."""
    if text.strip() == "all":
        return None
    names = [name.strip() for name in text.split(",")]
    if "" in names:
        raise argparse.ArgumentTypeError(f"'{text}' has an empty dtype name; separate names with "
                                         "single commas, e.g. float32,bfloat16")
    for name in names:
        get_dtype(name)
    dtypes = [get_dtype(name) for name in names]
    repeated = [name for name, dtype in zip(names, dtypes) if dtypes.count(dtype) > 1]
    if repeated:
        raise argparse.ArgumentTypeError(f"{' and '.join(repeated)} name the same dtype; give "
                                         "each once")
    return names


def dtypes_for(args, backend):
    """The dtype names this run measures, in order: --dtype's list, or for `all` every dtype of
    ALL_DTYPES the backend moves (floating ones only with --op avg)."""
    names = dtype_list(args.dtype)
    if names is None:
        names = [name for name in ALL_DTYPES
                 if get_dtype(name) in BACKEND_DTYPES.get(backend, PAYLOAD_DTYPES)]
        if args.op == "avg":
            names = [name for name in names if get_dtype(name).is_floating_point]
    return names


def check_dtype_for_backend(args, backend):
    """Refuse, before any rank connects, a dtype the backend cannot move."""
    moved = BACKEND_DTYPES.get(backend, PAYLOAD_DTYPES)
    for name in dtypes_for(args, backend):
        if get_dtype(name) not in moved:
            names = ", ".join(sorted(str(d).replace("torch.", "") for d in moved))
            raise UsageError(f"--dtype {name}: the {backend} backend cannot move it; use one of "
                             f"{names}")
