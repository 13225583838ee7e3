"""An execution trace's compute ops (commbench/trace/etrace.py, etcompute.py) in-process: the
outermost ATen operators between calls kept with the call after them, and run again at their
shapes through torch.ops; what cannot be rebuilt skipped and said."""

import pytest

from commbench.trace import etcompute, formats
from commbench.trace.etrace import ComputeOp
from test_logic_trace import ALLREDUCE, init_node, node, tensor, write_ranks

pytestmark = pytest.mark.fast

LINEAR = "aten::linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor"
ADDMM = ("aten::addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1)"
         " -> Tensor")
RELU = "aten::relu(Tensor self) -> Tensor"


def linear(id):
    return node(id, "aten::linear", [tensor(7, 2048), tensor(8, 4096), tensor(9, 64)],
                ["Tensor(float)"] * 3, [[32, 64], [64, 64], [64]], LINEAR)


def et_doc():
    allreduce = [[tensor(1, 1024)], "<Object>", "<Object>", None, False, -1]
    kinds = ["GenericList[Tensor(float)]", "Object", "Object", "None", "Bool", "Int"]
    return {"schema": "1.1.1-chakra.0.0.4", "nodes": [
        node(1, "[pytorch|profiler|execution_trace|thread]"),
        init_node(2),
        linear(10),
        node(11, "aten::addmm", [tensor(9, 64), tensor(7, 2048), tensor(8, 4096), 1, 1],
             ["Tensor(float)"] * 3 + ["Int", "Int"], [[64], [32, 64], [64, 64], [], []], ADDMM,
             ctrl_deps=10),  # linear's own: not the job's call, not run twice
        node(12, "aten::relu", [tensor(7, 2048)], ["Tensor(float)"], [[32, 64]], RELU),
        node(13, "c10d::allreduce_", allreduce, kinds, [[[1024]], [], [], [], [], []], ALLREDUCE),
        node(14, "c10d::allreduce_", allreduce, kinds, [[[1024]], [], [], [], [], []], ALLREDUCE),
        node(15, "aten::relu", [tensor(7, 2048)], ["Tensor(float)"], [[32, 64]], RELU),
    ]}


def test_the_outermost_ops_before_a_call_are_kept_with_it(tmp_path):
    trace = formats.read(write_ranks(tmp_path / "et", [et_doc(), et_doc()]))
    first, second = trace.calls(0)
    assert [op.name for op in first.compute] == ["aten::linear", "aten::relu"]
    assert first.compute[0].shapes == [[32, 64], [64, 64], [64]]
    assert second.compute is None  # nothing between the calls; the relu after the last: not run
    assert etcompute.count(trace.calls(0)) == 2


def test_the_ops_run_at_their_shapes_and_what_cannot_is_said(tmp_path):
    trace = formats.read(write_ranks(tmp_path / "et", [et_doc(), et_doc()]))
    ops = list(trace.calls(0)[0].compute)
    ops.append(ComputeOp("aten::add_", "aten::add_.Tensor(Tensor(a!) self, Tensor other, *, "
                         "Scalar alpha=1) -> Tensor(a!)", [tensor(7, 2048), "<Object>"],
                         ["Tensor(float)", "Object"], [[32, 64], []]))
    ops.append(ComputeOp("aten::nothing", "aten::nothing(Tensor self) -> Tensor",
                         [tensor(7, 2048)], ["Tensor(float)"], [[32, 64]]))
    runner = etcompute.Runner("cpu")
    for _ in range(2):
        runner.run(ops)
    assert runner.ran == {"aten::linear": 2, "aten::relu": 2}
    assert runner.skipped == {"aten::add_": 2, "aten::nothing": 2}
    # one tensor per shape and dtype, reused: the input, the weight, the bias
    assert sorted(runner.tensors) == [((32, 64), "float32"), ((64,), "float32"),
                                      ((64, 64), "float32")]
    line = runner.said(passes=2)
    assert line.startswith("--pace compute: 2 compute ops of the execution trace replayed before "
                           "the calls a pass, at the job's shapes (aten::linear x1, aten::relu "
                           "x1); not replayed: aten::add_ x1 (an argument kept as '<Object>' "
                           "(Object)), aten::nothing x1 ("), line
