"""What ranks tell each other at start-up, before anything is measured: each rank's host name
and a digest of its arguments (ranks that disagree on a size or a loop count would wait for each
other forever, so they are refused, naming the flag that differs). Through torch.distributed's
one-tensor all_gather of bytes: not all_gather_object, which needs numpy, which torch's wheel
does not install (a `--dist torch` user may have torch alone)."""

import hashlib

import torch

from ..errors import UsageError

_EXCHANGE_BYTES = 512  # a host name (at most 253 bytes) and a digest (64), with room


def exchange(parts, all_gather, world_size, device, size=_EXCHANGE_BYTES):
    """Every rank's strings `parts` (joined by NUL, at most `size` bytes), on every rank,
    through one all_gather of bytes. Not all_gather_object: it needs numpy, which torch's wheel
    does not install, and a `--dist torch` user may have torch alone."""
    data = "\0".join(parts).encode()[:size]
    mine = torch.zeros(size, dtype=torch.uint8, device=device)
    mine[:len(data)] = torch.tensor(list(data), dtype=torch.uint8, device=device)
    everyone = torch.empty(world_size * size, dtype=torch.uint8, device=device)
    all_gather(everyone, mine)
    rows = everyone.view(world_size, size).cpu().tolist()
    return [tuple(bytes(row).rstrip(b"\0").decode(errors="replace").split("\0"))
            for row in rows]


# Flags that need not agree: each rank's own (its local rank), or what only rank 0 does with
# them (the results file: a multi-node launch often names it on the first node's line alone).
OWN = ("local_rank", "output", "overwrite")


def _shared_arguments(command_line):
    """The flags that must agree, of a command line's sorted (flag, value) pairs
    (settings.command_line)."""
    return [(k, v) for k, v in command_line if k not in OWN]


def argument_digest(command_line):
    """A digest of everything that shapes the measurement: ranks that disagree on a size or a
    loop count would wait for each other forever, so they are refused at start-up."""
    return hashlib.sha256(repr(_shared_arguments(command_line)).encode()).hexdigest()


def _flag(name):
    return f"--{name.replace('_', '-')}"


def differing_arguments(command_line, other, all_gather, world_size, device):
    """The one line for ranks started with different arguments, naming the first flag in which
    rank `other` differs from rank 0 and both values (every rank calls this: one exchange)."""
    lines = [f"{k}={v!r}" for k, v in _shared_arguments(command_line)]
    everyone = exchange(lines, all_gather, world_size, device, size=16384)

    def values(rank):
        return dict(line.split("=", 1) for line in everyone[rank] if "=" in line)
    first, theirs = values(0), values(other)
    names = [k for k in sorted(set(first) | set(theirs)) if first.get(k) != theirs.get(k)]
    where = ""
    if names:
        shown = "; ".join(f"{_flag(k)}: {first.get(k, 'unset')} on rank 0, "
                          f"{theirs.get(k, 'unset')} on rank {other}" for k in names[:3])
        where = f" in {shown}" + (f" (and {len(names) - 3} more)" if len(names) > 3 else "")
    return UsageError(f"ranks were started with different arguments (rank {other} differs from "
                      f"rank 0{where}); start every rank with the same command line")
