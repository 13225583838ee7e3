"""The trace readers and the agreement check in-process: a directory of rank files
(commbench/trace/formats.py), PARAM's basic trace (param.py), PyTorch's execution trace
(etrace.py), each call validated, and do the ranks' sequences fit (agree.py). Traces are small
files written to tmp_path by hand; no ranks, no replay."""

import gzip
import json

import pytest

from commbench.trace import agree, etrace, formats, param
from commbench.trace.model import Call, Part, Trace, TraceError

pytestmark = pytest.mark.fast


def write_ranks(directory, documents, name="rank{}.json"):
    directory.mkdir(exist_ok=True)
    for rank, document in enumerate(documents):
        (directory / name.format(rank)).write_text(json.dumps(document))
    return str(directory)


def commbench_doc(rank, world, calls, **extra):
    return {"format": "commbench-trace", "version": 1, "world_size": world, "rank": rank,
            "calls": calls, **extra}


def read_commbench(tmp_path, per_rank):
    """The trace of `per_rank` call lists, each call's index its position (as the recorder
    writes it)."""
    world = len(per_rank)
    per_rank = [[{"index": i, **c} for i, c in enumerate(calls)] for calls in per_rank]
    return formats.read(write_ranks(tmp_path / "t", [commbench_doc(r, world, calls)
                                                     for r, calls in enumerate(per_rank)]))


# --------------------------------------------------------------------------- the directory

def test_rank_files_take_the_last_number_of_each_name(tmp_path):
    for name in ("job3-rank0.json", "job3-rank1.json.gz", ".hidden7.json", "rank2.json.tmp",
                 "notes.txt"):
        (tmp_path / name).write_text("{}")
    found = formats.rank_files(str(tmp_path))
    assert {rank: path.rsplit("/", 1)[1] for rank, path in found.items()} == \
        {0: "job3-rank0.json", 1: "job3-rank1.json.gz"}


@pytest.mark.parametrize("names,message", [
    ([], "no trace files"),
    (["rank0.json", "rank2.json"], "no file for rank 1 (found ranks 0, 2)"),
    (["rank0.json", "r0.json"], "two files for rank 0"),
])
def test_rank_files_that_do_not_make_a_world_are_one_line(tmp_path, names, message):
    for name in names:
        (tmp_path / name).write_text("{}")
    with pytest.raises(TraceError, match=message.replace("(", r"\(").replace(")", r"\)")):
        formats.rank_files(str(tmp_path))


def test_a_missing_directory_says_what_replay_reads(tmp_path):
    with pytest.raises(TraceError, match="no such directory"):
        formats.rank_files(str(tmp_path / "absent"))


def test_each_format_is_recognised_from_the_document():
    assert formats.recognise({"format": "commbench-trace"}) == "commbench"
    assert formats.recognise({"schema": "1.1.0", "nodes": []}) == "execution-trace"
    assert formats.recognise([{"comms": "all_reduce"}, {"compute": "gemm"}]) == "param-basic"
    assert formats.recognise([]) == "param-basic"  # a rank that made no call
    assert formats.recognise({"nodes": []}) is None
    assert formats.recognise([{"compute": "gemm"}]) is None
    assert formats.recognise("text") is None


def test_load_json_reads_gzip_and_names_a_file_that_is_not_json(tmp_path):
    packed = tmp_path / "rank0.json.gz"
    with gzip.open(packed, "wt") as out:
        json.dump({"a": 1}, out)
    assert formats.load_json(str(packed)) == {"a": 1}
    broken = tmp_path / "rank1.json"
    broken.write_text("{not json")
    with pytest.raises(TraceError, match=r"rank1.json: not JSON"):
        formats.load_json(str(broken))


def test_files_of_different_formats_are_refused(tmp_path):
    directory = write_ranks(tmp_path / "t", [commbench_doc(0, 2, []), []])
    with pytest.raises(TraceError, match="files of different formats"):
        formats.read(directory)


# --------------------------------------------------------------------------- the suite's format

def test_the_suites_trace_reads_back_with_groups_filled_and_splits_made_even(tmp_path):
    calls = [{"op": "all_reduce", "dtype": "float32", "in_numel": 8, "out_numel": 8,
              "reduce_op": "sum", "req": 5},
             {"op": "wait", "waits": [5]},
             {"op": "all_to_all", "dtype": "bfloat16", "in_numel": 6, "out_numel": 6}]
    trace = read_commbench(tmp_path, [calls, calls])
    assert trace.format == "commbench" and trace.world_size == 2
    first, wait, a2a = trace.calls(1)
    assert first.group == (0, 1) and first.asynchronous and first.nbytes == 32
    assert wait.waits == [5] and [c.index for c in trace.calls(1)] == [0, 1, 2]
    assert (a2a.in_split, a2a.out_split) == ([3, 3], [3, 3]) and a2a.nbytes == 12  # 6 x 2 B
    agree.check(trace)  # and they fit


@pytest.mark.parametrize("document,message", [
    ({"version": 2}, "commbench trace version 2; this replay reads version 1"),
    ({"world_size": 3}, "recorded on 3 ranks, but the directory holds 2 rank files"),
    ({"rank": 1}, "holds rank 1's calls, not rank 0's"),
])
def test_the_suites_trace_header_is_checked(tmp_path, document, message):
    docs = [{**commbench_doc(0, 2, []), **document}, commbench_doc(1, 2, [])]
    with pytest.raises(TraceError, match=message):
        formats.read(write_ranks(tmp_path / "t", docs))


@pytest.mark.parametrize("call,message", [
    ({"op": "all_scatter", "dtype": "float32"}, "an op the communication layer does not have"),
    ({"op": "all_reduce", "dtype": "float33", "in_numel": 1, "out_numel": 1},
     "unknown dtype 'float33'"),
    ({"op": "all_reduce", "dtype": "float32", "in_numel": -1, "out_numel": 1}, "element counts"),
    ({"op": "broadcast", "dtype": "float32", "in_numel": 1, "out_numel": 1, "root": 5},
     "root 5 is not a rank of the group"),
    ({"op": "all_reduce", "dtype": "float32", "group": [1], "in_numel": 1, "out_numel": 1},
     "rank 0 is not in its own call's group"),
    ({"op": "all_gather", "dtype": "float32", "in_numel": 4, "out_numel": 4},
     "gathers 4 elements from each of 2 ranks into 4"),
    ({"op": "reduce_scatter", "dtype": "float32", "in_numel": 4, "out_numel": 4},
     "reduces 4 elements to 4 per rank over 2 ranks"),
    ({"op": "all_to_all", "dtype": "float32", "in_numel": 3, "out_numel": 4},
     "3 elements do not split evenly among 2 ranks"),
    ({"op": "all_reduce", "dtype": "float32", "in_numel": 1, "out_numel": 1,
      "reduce_op": "xor"}, "reduction 'xor'"),
    ({"op": "wait", "waits": [9]}, "waits for request 9, which no earlier asynchronous call made"),
    ({"op": "send", "dtype": "float32", "in_numel": 1, "peer": 0}, "sends to or receives from itself"),
    ({"op": "recv", "dtype": "float32", "out_numel": 1, "peer": 2},
     "peer 2 is not a rank of the 2-rank world"),
    ({"op": "batch", "batch": []}, "a batch without sends or receives"),
])
def test_a_bad_call_is_one_line_naming_the_file_and_the_call(tmp_path, call, message):
    with pytest.raises(TraceError, match=message) as caught:
        read_commbench(tmp_path, [[call], []])
    assert "rank0.json: call 0 (" in str(caught.value)


# --------------------------------------------------------------------------- PARAM's

def param_read(tmp_path, per_rank):
    return formats.read(write_ranks(tmp_path / "p", per_rank))


def test_param_names_in_any_case_and_its_dtypes():
    assert param.op_name("AllReduce") == "all_reduce"
    assert param.op_name("all_gather_base") == "all_gather"
    assert param.op_name("all_to_allv") == "all_to_all"
    assert param.op_name("isend") == "send" and param.op_name("irecv") == "recv"
    assert param.op_name("all_shuffle") is None
    assert param.DTYPES["float"] == "float32" and param.DTYPES["bf16"] == "bfloat16"


def test_a_param_trace_reads_with_its_groups_roots_and_waits(tmp_path):
    def rank(r):
        entries = [
            {"comms": "init", "pg_id": 1, "global_ranks": [0, 1]},
            {"compute": "gemm"},  # left out: communication only
            {"comms": "all_reduce", "req": 1, "in_msg_size": 256, "out_msg_size": 256,
             "dtype": "Float", "pg_id": 0, "startTime_ns": 2_000_000_000},
            {"comms": "broadcast", "req": 2, "in_msg_size": 16, "out_msg_size": 16,
             "dtype": "Half", "pg_id": 1},
            {"comms": "wait", "req": 1},
            {"comms": "gather", "req": 3, "in_msg_size": 4, "out_msg_size": 12, "dtype": "Int",
             "root": 2},
        ]
        return entries if r < 2 else entries[:3] + entries[4:]  # rank 2 is not in group 1
    trace = param_read(tmp_path, [rank(r) for r in range(3)])
    assert trace.format == "param-basic" and trace.groups == [(0, 1)]
    reduce_, bcast, wait, gather = trace.calls(0)
    assert (reduce_.op, reduce_.group, reduce_.dtype, reduce_.reduce_op) == \
        ("all_reduce", (0, 1, 2), "float32", "sum")
    assert reduce_.req == 1 and reduce_.start_s == 2.0  # waited for later: asynchronous
    assert (bcast.group, bcast.root, bcast.dtype, bcast.req) == ((0, 1), 0, "float16", None)
    assert wait.waits == [1]
    assert (gather.root, gather.in_numel, gather.out_numel) == (2, 4, 0)  # not the root's
    assert trace.calls(2)[2].out_numel == 12  # the root's
    agree.check(trace)


def test_param_use_batch_sends_and_receives_are_one_batch_with_one_completion(tmp_path):
    zero = [{"comms": "send", "req": 1, "in_msg_size": 8, "out_msg_size": 8, "dtype": "float",
             "dst_rank": 1, "use_batch": True},
            {"comms": "recv", "req": 2, "in_msg_size": 4, "out_msg_size": 4, "dtype": "float",
             "src_rank": 1, "use_batch": True},
            {"comms": "wait", "req": 1}, {"comms": "wait", "req": 2}]
    one = [{"comms": "recv", "in_msg_size": 8, "out_msg_size": 8, "dtype": "float",
            "src_rank": 0},
           {"comms": "send", "in_msg_size": 4, "out_msg_size": 4, "dtype": "float",
            "dst_rank": 0}]
    trace = param_read(tmp_path, [zero, one])
    batch, first, second = trace.calls(0)
    assert batch.op == "batch" and batch.batch == [Part("send", 1, 8, "float32"),
                                                  Part("recv", 1, 4, "float32")]
    assert (batch.in_numel, batch.out_numel, batch.req) == (8, 4, 1)
    assert first.waits == [1] and second.waits == [1]  # the recv's req is the batch's
    assert batch.nbytes == 48  # sent plus received, 4 B an element
    assert [c.op for c in trace.calls(1)] == ["recv", "send"]
    agree.check(trace)


@pytest.mark.parametrize("entry,message", [
    ({"comms": "all_shuffle"}, "'all_shuffle' is an op the communication layer does not have"),
    ({"comms": "all_reduce", "in_msg_size": 1, "out_msg_size": 1, "dtype": "quad"},
     "dtype 'quad'"),
    ({"comms": "all_reduce", "dtype": "float", "out_msg_size": 1}, "no 'in_msg_size'"),
    ({"in_msg_size": 1}, "no 'comms'"),
])
def test_a_bad_param_entry_is_one_line(tmp_path, entry, message):
    with pytest.raises(TraceError, match=message):
        param_read(tmp_path, [[{"comms": "barrier"}, entry], [{"comms": "barrier"}]])


# --------------------------------------------------------------------------- PyTorch's

def tensor(storage, numel, element_size=4):
    return [storage * 10, storage, 0, numel, element_size, "cpu"]


ALLREDUCE = ("c10d::allreduce_(Tensor[] tensors, __torch__.torch.classes.c10d.ProcessGroup "
             "process_group, __torch__.torch.classes.c10d.ReduceOp reduce_op, Tensor? "
             "sparse_indices, bool async_op=True, int timeout=-1) -> (Tensor[], "
             "__torch__.torch.classes.c10d.Work)")
ALLTOALL = ("c10d::alltoall_base_(Tensor output, Tensor input, __torch__.torch.classes.c10d."
            "ProcessGroup process_group, int[] output_split_sizes, int[] input_split_sizes, bool "
            "async_op=True, int timeout=-1) -> __torch__.torch.classes.c10d.Work")
SEND = ("c10d::send(Tensor[] tensors, __torch__.torch.classes.c10d.ProcessGroup process_group, "
        "int dst, int tag) -> __torch__.torch.classes.c10d.Work")


def node(id, name, values=(), types=(), shapes=(), schema=None, **extra):
    found = {"id": id, "name": name, "ctrl_deps": 1,
             "inputs": {"values": list(values), "types": list(types), "shapes": list(shapes)},
             "outputs": {"values": [], "types": [], "shapes": []}, **extra}
    if schema:
        found["attrs"] = [{"name": "op_schema", "type": "string", "value": schema}]
    return found


def init_node(world):
    groups = [{"pg_name": "0", "pg_desc": "default_pg", "ranks": [], "group_size": world},
              {"pg_name": "1", "pg_desc": "undefined", "ranks": [0, 1], "group_size": 2}]
    return node(2, "## process_group:init ##", [json.dumps(groups)], ["String"])


def et_rank(rank, world=2):
    return {"schema": "1.1.1-chakra.0.0.4", "nodes": [
        init_node(world),
        node(10, "c10d::allreduce_",
             [[tensor(1, 256)], "<Object>", "<Object>", None, True, -1],
             ["GenericList[Tensor(float)]", "Object", "Object", "None", "Bool", "Int"],
             [[[256]], [], [], [], [], []], ALLREDUCE),
        node(11, "gloo:all_reduce", ctrl_deps=10),  # the backend's span: not a call
        node(12, "aten::mul", [tensor(2, 8)], ["Tensor(float)"]),  # touches none: no wait
        node(13, "aten::add_", [tensor(1, 256), 1.0], ["Tensor(float)", "Double"]),
        node(14, "c10d::alltoall_base_",
             [tensor(4, 8), tensor(3, 12), "<Object>", [1, 1], [2, 4], False, -1],
             ["Tensor(c10::BFloat16)", "Tensor(c10::BFloat16)", "Object", "GenericList[Int]",
              "GenericList[Int]", "Bool", "Int"],
             [[4, 2], [6, 2], [], [], [], [], []], ALLTOALL),
        node(15, "c10d::send" if rank == 0 else "c10d::recv_",
             [[tensor(5, 3)], "<Object>", 1 - rank, 0],
             ["GenericList[Tensor(long int)]", "Object", "Int", "Int"], [[[3]], [], [], []],
             SEND if rank == 0 else SEND.replace("send(", "recv_(").replace("int dst", "int src")),
    ]}


def test_an_execution_trace_reads_as_calls_with_waits_where_their_tensors_are_next_touched(
        tmp_path):
    trace = formats.read(write_ranks(tmp_path / "et", [et_rank(0), et_rank(1)]))
    assert trace.format == "execution-trace"
    calls = trace.calls(0)
    assert [c.op for c in calls] == ["all_reduce", "wait", "all_to_all", "send"]
    reduce_, wait, a2a, send = calls
    assert (reduce_.dtype, reduce_.in_numel, reduce_.out_numel, reduce_.reduce_op) == \
        ("float32", 256, 256, "sum")
    assert reduce_.req == 0 and wait.waits == [0]  # before aten::add_, not before aten::mul
    # splits are rows of the first dimension: input [6, 2] split 2 + 4 rows -> 4 + 8 elements
    assert (a2a.dtype, a2a.in_split, a2a.out_split) == ("bfloat16", [4, 8], [2, 2])
    assert (a2a.in_numel, a2a.out_numel, a2a.req) == (12, 4, None)
    assert (send.peer, send.dtype, send.in_numel) == (1, "int64", 3)
    recv = trace.calls(1)[-1]
    assert (recv.op, recv.peer, recv.out_numel) == ("recv", 0, 3)
    assert any("the job made 1 other group: [0, 1]" in note for note in trace.notes)


def test_an_execution_trace_of_another_world_size_is_refused(tmp_path):
    docs = [et_rank(0, world=4), et_rank(1, world=4)]
    with pytest.raises(TraceError, match="recorded on 4 ranks, but the directory holds 2"):
        formats.read(write_ranks(tmp_path / "et", docs))


def test_an_execution_trace_op_the_layer_lacks_is_named():
    nodes = [node(3, "c10d::allreduce_sparse_", [], [], [], ALLREDUCE)]
    with pytest.raises(TraceError, match="c10d::allreduce_sparse_ is an op the communication"):
        etrace.read({0: {"nodes": nodes}}, {0: "rank0.json"}, 1)


def test_op_schema_argument_names_split_at_top_level_commas():
    assert etrace._names(SEND) == ["tensors", "process_group", "dst", "tag"]
    assert etrace._names("c10d::broadcast_(Tensor(a!) input, int src, Any group_name) -> "
                         "Tensor(a!)") == ["input", "src", "group_name"]


# --------------------------------------------------------------------------- agreement

def call(index, op, numel=4, dtype="float32", group=(0, 1), **extra):
    fields = {"in_numel": numel, "out_numel": numel}
    if op == "all_gather":
        fields["out_numel"] = numel * len(group)
    fields.update(extra)
    return Call(index, op, group=group, dtype=dtype, **fields)


def trace_of(*per_rank):
    return Trace("commbench", len(per_rank), dict(enumerate(per_rank)))


def test_sequences_that_fit_pass_the_check():
    def pair_calls():
        return [call(0, "all_reduce", reduce_op="sum"), call(1, "broadcast", root=1),
                call(2, "all_gather"), call(3, "barrier", 0)]

    def sub(index):
        return call(index, "all_reduce", 8, group=(0, 2), reduce_op="sum")
    # ranks 0 and 1 in their group, ranks 0 and 2 in theirs: each group's sequences fit
    agree.check(trace_of(pair_calls() + [sub(4)], pair_calls(), [sub(0)]))


@pytest.mark.parametrize("second,what", [
    (call(0, "broadcast", root=0), "rank 1 broadcast of 4 float32 root 0"),
    (call(0, "all_reduce", 8), "rank 1 all_reduce of 8 float32"),
    (call(0, "all_reduce", dtype="float16"), "rank 1 all_reduce of 4 float16"),
])
def test_an_op_size_or_dtype_that_differs_is_named_at_its_position(second, what):
    first = [call(0, "all_reduce")]
    with pytest.raises(TraceError) as caught:
        agree.check(trace_of(first, [second]))
    assert str(caught.value) == (
        "the trace's ranks disagree at the 1st call in group [0, 1]: rank 0 all_reduce of 4 "
        f"float32 (its call 0), {what} (its call 0); replayed, the ranks would wait for each "
        "other forever")


def test_a_root_that_differs_is_named():
    with pytest.raises(TraceError, match=r"rank 0 broadcast of 4 float32 root 0 \(its call 1\), "
                                         r"rank 1 broadcast of 4 float32 root 1 \(its call 1\)"):
        agree.check(trace_of([call(0, "barrier", 0), call(1, "broadcast", root=0)],
                             [call(0, "barrier", 0), call(1, "broadcast", root=1)]))


def test_a_rank_with_more_calls_in_a_group_has_no_partner():
    with pytest.raises(TraceError, match=r"rank 1 makes 2 calls in it, rank 0 1; rank 1's 2nd "
                                         r"\(all_reduce, its call 1\) has no partner"):
        agree.check(trace_of([call(0, "all_reduce")],
                             [call(0, "all_reduce"), call(1, "all_reduce")]))


def test_all_to_all_splits_must_match_pairwise():
    a = call(0, "all_to_all", 6, in_split=[3, 3], out_split=[3, 3])
    b = call(0, "all_to_all", 6, in_split=[2, 4], out_split=[3, 3])
    agree.check(trace_of([a], [call(0, "all_to_all", 6, in_split=[3, 3], out_split=[3, 3])]))
    with pytest.raises(TraceError, match=r"rank 1 sends 2 elements to rank 0 \(its call 0\), "
                                         r"which expects 3"):
        agree.check(trace_of([a], [b]))


def test_a_send_and_its_receive_must_have_one_size_and_come_in_equal_numbers():
    def send(n):
        return Call(0, "send", dtype="float32", in_numel=n, peer=1)

    def recv(n):
        return Call(0, "recv", dtype="float32", out_numel=n, peer=0)
    agree.check(trace_of([send(4)], [recv(4)]))
    with pytest.raises(TraceError, match=r"rank 0's 1st send to rank 1 is 4 float32 \(its call "
                                         r"0\), rank 1's 1st receive from it 5 float32"):
        agree.check(trace_of([send(4)], [recv(5)]))
    with pytest.raises(TraceError, match="rank 0 sends 2 message.s. to rank 1, which receives 1"):
        agree.check(trace_of([send(4), send(4)], [recv(4)]))


def test_a_batch_meets_plain_sends_and_receives_part_by_part():
    batch = Call(0, "batch", batch=[Part("send", 1, 8, "float32"), Part("recv", 1, 2, "float32")])
    agree.check(trace_of([batch], [Call(0, "recv", dtype="float32", out_numel=8, peer=0),
                                   Call(1, "send", dtype="float32", in_numel=2, peer=0)]))


@pytest.mark.parametrize("position,text", [(0, "1st"), (1, "2nd"), (2, "3rd"), (3, "4th"),
                                           (10, "11th"), (11, "12th"), (12, "13th"),
                                           (20, "21st"), (21, "22nd"), (110, "111th")])
def test_ordinals(position, text):
    assert agree._ordinal(position) == text


GATHER = ("c10d::gather_(Tensor[][] output_tensors, Tensor[] input_tensors, "
          "__torch__.torch.classes.c10d.ProcessGroup process_group, int root_rank=0, "
          "int timeout=-1) -> __torch__.torch.classes.c10d.Work")
SCATTER = ("c10d::scatter_(Tensor[] output_tensors, Tensor[][] input_tensors, "
           "__torch__.torch.classes.c10d.ProcessGroup process_group, int root_rank=0, "
           "bool asyncOp=True, int timeout=-1) -> (Tensor[], __torch__.torch.classes.c10d.Work)")


def test_an_execution_traces_gather_and_scatter_give_the_whole_to_the_root_alone():
    def rooted(rank, world=3):
        chunks = [tensor(20 + i, 4) for i in range(world)] if rank == 1 else []
        return [node(20, "c10d::gather_", [[chunks], [tensor(5, 4)], "<Object>", 1, -1],
                     ["GenericList[GenericList[Tensor(float)]]", "GenericList[Tensor(float)]",
                      "Object", "Int", "Int"], schema=GATHER),
                node(21, "c10d::scatter_", [[tensor(6, 4)], [chunks], "<Object>", 1, False, -1],
                     ["GenericList[Tensor(float)]", "GenericList[GenericList[Tensor(float)]]",
                      "Object", "Int", "Bool", "Int"], schema=SCATTER)]
    for rank, whole in ((1, 12), (0, 0), (2, 0)):
        gather, scatter = etrace._calls(rooted(rank), rank, 3, "rank.json")
        assert (gather.op, gather.root, gather.in_numel, gather.out_numel) == \
            ("gather", 1, 4, whole)
        assert (scatter.op, scatter.root, scatter.in_numel, scatter.out_numel) == \
            ("scatter", 1, whole, 4)
        assert gather.group == scatter.group == (0, 1, 2) and scatter.req is None


# ------------------------------------------------------------------- the replay's --check

def test_every_op_a_reader_makes_is_one_row_of_the_replay():
    from commbench.trace.model import OPS
    from commbench.trace.replayed import REPLAYED
    assert set(REPLAYED) == set(OPS) - {"wait"}


def _simulated(op, n=3, root=1, corrupt=None):
    """Each rank's wrong count for `op` over a world of n ranks simulated in-process: inputs
    filled as the engine fills them, outputs made by the op's meaning, checked by its row.
    `corrupt`: (rank, element) of one output changed after the op."""
    import torch
    from commbench.trace.replayed import REPLAYED
    splits = [[1 + (s + r) % 3 for r in range(n)] for s in range(n)]  # s sends splits[s][r] to r
    calls, bufs = [], []
    for rank in range(n):
        numel = 6 if op != "all_to_all" else sum(splits[rank])
        call = Call(0, op, group=tuple(range(n)), dtype="float32", root=root, reduce_op="sum")
        if op == "all_to_all":
            call.in_numel, call.out_numel = numel, sum(splits[s][rank] for s in range(n))
            call.in_split, call.out_split = splits[rank], [splits[s][rank] for s in range(n)]
        else:
            whole = numel * n
            call.in_numel, call.out_numel = {
                "all_gather": (numel, whole), "reduce_scatter": (whole, numel),
                "gather": (numel, whole if rank == root else 0),
                "scatter": (whole if rank == root else 0, numel)}.get(op, (numel, numel))
        row = REPLAYED[op]
        inp, out = row.buffers(lambda dtype, count: torch.zeros(count), call)
        row.fill(call, rank, inp)
        calls.append(call)
        bufs.append((inp, out))
    ins = [inp for inp, _ in bufs]
    for rank, (_inp, out) in enumerate(bufs):  # what the op leaves on each rank
        if op == "all_gather":
            out.copy_(torch.cat(ins))
        elif op == "reduce_scatter":
            out.copy_(sum(i.chunk(n)[rank] for i in ins))
        elif op == "all_to_all":
            out.copy_(torch.cat([ins[s].split(splits[s])[rank] for s in range(n)]))
        elif op == "gather" and rank == root:
            out.copy_(torch.cat(ins))
        elif op == "scatter":
            out.copy_(ins[root].chunk(n)[rank])
        elif op == "broadcast":
            out.copy_(ins[root].clone())
    if corrupt is not None:
        bufs[corrupt[0]][1][corrupt[1]] += 1
    return [sum(int((t != torch.full_like(t, v)).sum())
                for t, v in REPLAYED[op].expected(calls[r], r, *bufs[r]) if t.numel())
            for r in range(n)]


@pytest.mark.parametrize("op", ["all_gather", "reduce_scatter", "all_to_all", "gather", "scatter",
                                "broadcast"])
def test_the_replays_check_passes_a_right_result_and_names_a_wrong_element(op):
    assert _simulated(op) == [0, 0, 0]
    assert _simulated(op, corrupt=(1, 2)) == [0, 1, 0]  # rank 1: the root (gather's output)
