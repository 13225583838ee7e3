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


def check_dtype_for_backend(args, backend):
    """Refuse, before any rank connects, a dtype the backend cannot move."""
    if backend == "gloo" and get_dtype(args.dtype) not in GLOO_DTYPES:
        names = ", ".join(sorted(str(d).replace("torch.", "") for d in GLOO_DTYPES))
        raise UsageError(f"--dtype {args.dtype}: the gloo backend cannot move it; use one of "
                         f"{names}")
