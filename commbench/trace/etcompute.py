"""replay.py --pace compute on a PyTorch execution trace: before each call, the compute ops the
job ran before it (etrace.ComputeOp), each called again through torch.ops at the trace's
shapes and dtypes, on tensors of random values (values do not change an op's cost, shapes
do), as PARAM's et_replay replays compute. The trace keeps no times, so no gap is kept: the
ops are the gaps.

An op's arguments are rebuilt from its schema (torch's parser: which are keyword-only) and
the trace's values: a tensor from its shape and dtype (one tensor per shape and dtype, made
once and reused: an in-place op writes into it), a list of tensors alike, a scalar, a list,
None, a device as given. An op whose arguments cannot be rebuilt (a type the trace keeps as
"<Object>", an index tensor whose random values would be out of range) or which raises is
skipped, counted by name, and said once after the first pass: what is not replayed is never
hidden."""

import re
from collections import Counter

import torch

from .etrace import DTYPES

_TENSOR = re.compile(r"^Tensor\(([^)]*)\)$")
_LIST = re.compile(r"^GenericList\[(.*)\]$")


class Unbuildable(Exception):
    """An argument the trace does not keep enough of to rebuild."""


class Runner:
    """Runs ComputeOps on one device; counts what ran and what was skipped."""

    def __init__(self, device):
        self.device = torch.device(device)
        self.tensors = {}  # (shape, dtype) -> a tensor of random values
        self.ran, self.skipped = Counter(), Counter()
        self.why = {}  # op name -> the first reason it was skipped
        self.prepared = {}  # id(op) -> (callable, args, kwargs) or None

    def run(self, ops):
        for op in ops:
            ready = self.prepared.get(id(op), False)
            if ready is False:
                ready = self.prepared[id(op)] = self._prepare(op)
            if ready is None:
                self.skipped[op.name] += 1
                continue
            function, args, kwargs = ready
            try:
                function(*args, **kwargs)
            except Exception as error:  # an op its rebuilt arguments do not suit
                self.prepared[id(op)] = None
                self.skipped[op.name] += 1
                self.why.setdefault(op.name, str(error).splitlines()[0][:120])
                continue
            self.ran[op.name] += 1
        if self.device.type != "cpu":
            torch.accelerator.synchronize(self.device)

    def _prepare(self, op):
        try:
            schema = torch._C.parse_schema(op.schema)
            packet = getattr(torch.ops.aten, schema.name.split("::", 1)[1])
            function = getattr(packet, schema.overload_name or "default")
            args, kwargs = [], {}
            for index, argument in enumerate(schema.arguments):
                if index >= len(op.values):
                    break
                value = self._value(op.values[index], op.types[index], op.shapes[index])
                if argument.kwarg_only:
                    kwargs[argument.name] = value
                else:
                    args.append(value)
            return function, args, kwargs
        except (Unbuildable, RuntimeError, AttributeError, IndexError, TypeError,
                ValueError) as error:
            self.why.setdefault(op.name, str(error).splitlines()[0][:120] if str(error) else
                                type(error).__name__)
            return None

    def _value(self, value, kind, shape):
        kind = kind or ""
        found = _TENSOR.match(kind)
        if found:
            return self._tensor(found.group(1), shape)
        listed = _LIST.match(kind)
        if listed and listed.group(1).startswith("Tensor(") and isinstance(value, list):
            kinds = re.findall(r"Tensor\(([^)]*)\)", listed.group(1))
            return [self._tensor(k, s) for k, s in zip(kinds, shape)]
        if value == "<None>":
            return None
        if value == "<Object>" or kind.startswith("Tensor"):
            raise Unbuildable(f"an argument kept as {value!r} ({kind})")
        if kind == "Device":
            return torch.device(self.device)  # the job's device, on this rank's
        return value

    def _tensor(self, dtype_text, shape):
        name = DTYPES.get(dtype_text)
        if name is None or not isinstance(shape, list):
            raise Unbuildable(f"a tensor of {dtype_text!r}")
        key = (tuple(shape), name)
        if key not in self.tensors:
            dtype = getattr(torch, name)
            if dtype.is_floating_point:
                self.tensors[key] = torch.rand(shape, dtype=dtype, device=self.device)
            else:  # indices: zeros are in range of any dimension
                self.tensors[key] = torch.zeros(shape, dtype=dtype, device=self.device)
        return self.tensors[key]

    def said(self, passes=1):
        """What ran and what did not, a pass, in a line."""
        passes = max(1, passes)
        ran = sum(self.ran.values()) // passes
        line = (f"--pace compute: {ran} compute op{'s' if ran != 1 else ''} of the execution "
                f"trace replayed before the calls a pass, at the job's shapes ("
                + ", ".join(f"{name} x{count // passes}"
                            for name, count in self.ran.most_common(4))
                + (", ..." if len(self.ran) > 4 else "") + ")")
        if self.skipped:
            line += ("; not replayed: " + ", ".join(
                f"{name} x{count // passes} ({self.why.get(name, 'its arguments')})"
                for name, count in self.skipped.most_common(3))
                + (", ..." if len(self.skipped) > 3 else ""))
        return line


def count(calls):
    """The compute ops before the calls of one rank's trace."""
    return sum(len(call.compute or ()) for call in calls)
