"""The harness's pure pieces in-process: bandwidth from each op's descriptor against SPEC §3's
table, the launcher environment (dicts passed in, os.environ untouched), --groups and
--split layouts, dtype lists, the overlap figure, the step accounting's sizes and the trace
model's calls. No ranks."""

import argparse
import importlib
from types import SimpleNamespace

import pytest
import torch

from commbench.bench import collective, overlap
from commbench import dtypes
from commbench.ranks import groups, launch
from commbench.errors import UsageError
from commbench.trace import accounting
from commbench.trace.model import Call, Part, Trace
from commbench.trace import calls

pytestmark = pytest.mark.fast

S, T = 1 << 20, 1e-3  # bytes per rank, seconds a trial


def descriptor(op):
    module = importlib.import_module(op)
    (found,) = [v for v in vars(module).values()
                if isinstance(v, collective.Collective) and v.name == op]
    return found


# SPEC §3: (Throughput, BusBW) in bytes/s for S bytes in t seconds on n ranks
SPEC = {
    "all_reduce": lambda n: (2 * S / T, (S / T) * 2 * (n - 1) / n),
    "all_gather": lambda n: (n * S / T, (n * S / T) * (n - 1) / n),
    "all_to_all": lambda n: (S / T, (S / T) * (n - 1) / n),
    "reduce_scatter": lambda n: (S / T, (S / T) * (n - 1) / n),
    "broadcast": lambda n: (S / T, S / T),
    "pt2pt": lambda n: (S / T, S / T),
}


@pytest.mark.parametrize("op", sorted(SPEC))
@pytest.mark.parametrize("n", [1, 2, 3, 8])
def test_get_bw_is_specs_formula_in_bytes_and_in_bits(op, n):
    expected = SPEC[op](n)
    assert collective.get_bw(descriptor(op), S, T, n, "GBps") == pytest.approx(expected)
    assert collective.get_bw(descriptor(op), S, T, n, "Gbps") == \
        pytest.approx(tuple(8 * x for x in expected))


def test_a_world_of_one_has_no_bus_bandwidth_but_for_broadcast_and_pt2pt():
    for op in SPEC:
        busbw = collective.get_bw(descriptor(op), S, T, 1, "GBps")[1]
        assert busbw == (S / T if op in ("broadcast", "pt2pt") else 0), op


def test_an_op_without_payload_has_no_bandwidth():
    assert collective.get_bw(descriptor("barrier"), 0, T, 4, "Gbps") == (None, None)


def test_bound_passes_async_op_only_when_true():
    calls = []

    def op(*args, **kwargs):
        calls.append((args, kwargs))
    collective.bound(op, 1, 2)()
    collective.bound(op, 1, async_op=True)()
    assert calls == [((1, 2), {}), ((1,), {"async_op": True})]


# --------------------------------------------------------------------------- launchers

def test_local_rank_beyond_the_local_world_size_is_refused():
    with pytest.raises(UsageError, match="LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2"):
        launch.discover_launch_env({"RANK": "1", "LOCAL_RANK": "2", "WORLD_SIZE": "4",
                                    "LOCAL_WORLD_SIZE": "2"})


def test_local_rank_flag_without_a_launcher():
    assert launch.discover_launch_env({}, local_rank_arg=0) == launch.LaunchEnv("none", 0, 0, 1)
    with pytest.raises(UsageError, match="--local_rank=1 given but no launcher environment"):
        launch.discover_launch_env({}, local_rank_arg=1)


def test_the_process_environment_is_read_when_none_is_passed(monkeypatch):
    monkeypatch.setenv("PMI_RANK", "1")
    monkeypatch.setenv("PMI_SIZE", "3")
    monkeypatch.setenv("MPI_LOCALRANKID", "0")
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
                 "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    assert launch.discover_launch_env() == launch.LaunchEnv("MPICH/Intel MPI", 1, 0, 3)


@pytest.mark.parametrize("nodelist,hosts", [
    ("n[1-2]-ib[0-1]", ["n1-ib0", "n1-ib1", "n2-ib0", "n2-ib1"]),
    ("gpu[8-10]", ["gpu8", "gpu9", "gpu10"]),
    ("rack1-[001-002],login", ["rack1-001", "rack1-002", "login"]),
])
def test_nodelists_with_suffixes_and_padding(nodelist, hosts):
    assert launch.expand_nodelist(nodelist) == hosts


def test_a_nodelist_that_is_not_slurms_is_one_line():
    with pytest.raises(UsageError, match="cannot read Slurm node list entry 'node\\[a-b\\]'"):
        launch.expand_nodelist("node[a-b]")


def test_master_address_prefers_the_steps_node_list_and_the_local_world():
    where = launch.LaunchEnv("Slurm", 3, 1, 4)
    assert launch.master_address({"SLURM_STEP_NUM_NODES": "2", "SLURM_STEP_NODELIST": "a[5-6]",
                                  "SLURM_JOB_NODELIST": "b[1-9]"}, where) == "a5"
    torchrun = launch.LaunchEnv("torchrun/deepspeed", 1, 1, 4)
    assert launch.master_address({"LOCAL_WORLD_SIZE": "4"}, torchrun) == "127.0.0.1"


def test_master_port_default_and_master_address_checks():
    assert launch.master_port({}) == 29500  # torch.distributed's default
    assert launch.check_master_address("[::1]", 0) == "::1"
    assert launch.check_master_address("127.0.0.1", 0) == "127.0.0.1"
    for bad in ("a b", "$(touch x)", "host;rm"):
        with pytest.raises(UsageError, match="is not a host name or an IP address"):
            launch.check_master_address(bad, 0)


# --------------------------------------------------------------------------- layouts

def test_groups_kinds_in_the_order_given():
    assert groups.kinds("inter, intra") == ["inter", "intra"]
    with pytest.raises(ValueError, match="'cross' is not a group layout"):
        groups.kinds("intra,cross")
    with pytest.raises(ValueError, match="names a layout twice"):
        groups.kinds("world,world")


@pytest.mark.parametrize("text,rule", [("2", (2, "blocks")), ("4:strided", (4, "strided")),
                                       ("3:blocks", (3, "blocks"))])
def test_split_rule(text, rule):
    assert groups.split_rule(text) == rule


@pytest.mark.parametrize("text", ["1", "x", "2:random", "0:blocks"])
def test_split_rule_refuses(text):
    with pytest.raises(ValueError, match="is not a split"):
        groups.split_rule(text)


def test_split_groups_blocks_and_strided():
    assert groups.split_groups((2, "blocks"), 6) == [[0, 1, 2], [3, 4, 5]]
    assert groups.split_groups((2, "strided"), 6) == [[0, 2, 4], [1, 3, 5]]
    with pytest.raises(UsageError, match="3 groups does not divide a world of 4 ranks"):
        groups.split_groups((3, "blocks"), 4)
    with pytest.raises(UsageError, match="4 groups leaves groups of one rank in a world of 4"):
        groups.split_groups((4, "blocks"), 4)


def test_intra_and_inter_host_layouts():
    hosts = ["a", "a", "b", "b", "c", "c"]
    assert groups.layout("world", hosts) == [[0, 1, 2, 3, 4, 5]]
    assert groups.layout("intra", hosts) == [[0, 1], [2, 3], [4, 5]]
    assert groups.layout("inter", hosts) == [[0, 2, 4], [1, 3, 5]]
    # hosts in the order their first rank comes, whatever the ranks' order
    assert groups.layout("inter", ["b", "a", "b", "a"]) == [[0, 1], [2, 3]]
    with pytest.raises(UsageError, match=r"same number of ranks on every host \(a 2, b 1\)"):
        groups.layout("intra", ["a", "a", "b"])
    with pytest.raises(UsageError, match="2 ranks on 1 host make groups of one rank"):
        groups.layout("inter", ["a", "a"])
    with pytest.raises(UsageError, match="1 rank on each of 2 hosts make groups of one rank"):
        groups.layout("intra", ["a", "b"])


def test_header_qualifiers_name_ranks_and_hosts():
    hosts = ["n0", "n0", "n1", "n1"]
    assert groups.header_qualifier("intra", 1, [2, 3], hosts) == \
        "intra-host group 1 (ranks 2 3 on n1)"
    assert groups.header_qualifier("inter", 0, [0, 2], hosts) == "inter-host group 0 (ranks 0 2)"
    assert groups.header_qualifier("split", 1, [1, 2], hosts) == \
        "split group 1 (ranks 1 2 on n0 n1)"
    assert groups.header_qualifier("split", 0, [0, 1], ["h"] * 4) == "split group 0 (ranks 0 1)"


# --------------------------------------------------------------------------- dtypes

def test_dtype_lists():
    assert dtypes.dtype_list("float32, bfloat16") == ["float32", "bfloat16"]
    assert dtypes.dtype_list(" all ") is None
    with pytest.raises(argparse.ArgumentTypeError, match="float and float32 name the same dtype"):
        dtypes.dtype_list("float,float32")
    with pytest.raises(argparse.ArgumentTypeError, match="has an empty dtype name"):
        dtypes.dtype_list("float,,half")


def test_dtype_all_is_what_the_backend_moves():
    args = SimpleNamespace(dtype="all", op="sum")
    assert dtypes.dtypes_for(args, "gloo") == list(dtypes.ALL_DTYPES)
    assert dtypes.dtypes_for(SimpleNamespace(dtype="all", op="avg"), "gloo") == \
        ["float32", "float64", "float16", "bfloat16"]  # an average of integers is not exact
    assert dtypes.dtypes_for(SimpleNamespace(dtype="half,int8", op="sum"), "ccl") == \
        ["half", "int8"]


# --------------------------------------------------------------------------- overlap

@pytest.mark.parametrize("comm,compute,total,percent", [
    (10, 10, 10, 100.0),  # the collective added nothing to the compute phase
    (10, 10, 20, 0.0),  # it added all of itself
    (10, 10, 15, 50.0),
    (10, 10, 25, 0.0),  # slower than both one after the other: clipped
    (10, 20, 18, 100.0),  # faster than compute alone (noise): clipped
    (0, 10, 10, 0.0),
])
def test_overlap_percent_is_osus_share_clipped(comm, compute, total, percent):
    assert overlap.overlap_percent(comm, compute, total) == pytest.approx(percent)


def test_format_cpus():
    assert overlap.format_cpus({3, 1, 2}) == "1,2,3"


# --------------------------------------------------------------------------- accounting

def test_every_counted_function_has_an_op_and_torch_has_most_of_them():
    assert set(accounting.OP_NAMES) == set(calls.FUNCTIONS)
    assert set(accounting.OP_NAMES.values()) == set(accounting.OPS)
    # the table names torch's functions (a few are older or newer spellings of one of them)
    assert sum(hasattr(torch.distributed, name) for name in calls.FUNCTIONS) >= 20


def test_sizes_of_calls_in_the_suites_convention():
    x = torch.ones(8, dtype=torch.float32)  # 32 B
    shard = torch.ones(2, dtype=torch.bfloat16)  # 4 B
    size = {name: function.nbytes for name, function in calls.FUNCTIONS.items()}
    assert size["all_reduce"]({"tensor": x}) == 32
    assert size["all_gather_into_tensor"]({"input_tensor": shard, "output_tensor": x}) == 4
    assert size["reduce_scatter"]({"input_list": [x, x], "output": shard}) == 64  # whole input
    assert size["all_to_all"]({"input_tensor_list": [shard, shard, shard]}) == 12
    ops = [SimpleNamespace(tensor=x), SimpleNamespace(tensor=shard)]
    assert size["batch_isend_irecv"]({"p2p_op_list": ops}) == 36  # sent plus received
    assert size["barrier"]({}) == 0


def _where(ranks=(0, 1, 2), rank=0):
    return calls.Where(tuple(ranks), rank, lambda group: tuple(ranks) if group is None else group)


def test_what_a_trace_keeps_of_a_call():
    describe = {name: function.describe for name, function in calls.FUNCTIONS.items()}
    x = torch.ones(6, dtype=torch.float32)
    assert describe["all_reduce"](_where(), {"tensor": x}) == dict(
        op="all_reduce", dtype="float32", in_numel=6, out_numel=6, reduce_op="sum")
    assert describe["reduce_scatter_tensor"](_where(), {
        "input": x, "output": x[:2], "op": torch.distributed.ReduceOp.MAX})["reduce_op"] == "max"
    # torch's splits count rows; the trace counts elements
    rows = torch.ones(6, 2)
    split = describe["all_to_all_single"](_where(), {
        "input": rows, "output": rows, "input_split_sizes": [1, 2, 3],
        "output_split_sizes": None})
    assert split["in_split"] == [2, 4, 6] and split["out_split"] == [4, 4, 4]
    # a root given within its group is kept as a global rank; only the root gathers
    group = _where(ranks=(3, 5, 7), rank=5)
    assert describe["gather"](group, {"tensor": x, "group_dst": 1}) == dict(
        op="gather", dtype="float32", in_numel=6, root=5, out_numel=18)
    assert describe["scatter"](group, {"tensor": x, "src": 3})["in_numel"] == 0
    assert describe["isend"](group, {"tensor": x, "group_dst": 2})["peer"] == 7
    assert calls.FUNCTIONS["isend"].always_async and not calls.FUNCTIONS["send"].always_async


def test_a_batch_is_its_parts_each_with_its_peer():
    send = SimpleNamespace(op=torch.distributed.isend, peer=2, tensor=torch.ones(4), group=None)
    recv = SimpleNamespace(op=torch.distributed.irecv, peer=None, group_peer=1,
                           tensor=torch.ones(3, dtype=torch.bfloat16), group=(4, 6))
    batch = calls.FUNCTIONS["batch_isend_irecv"].describe(_where(), {"p2p_op_list": [send, recv]})
    assert [(p.op, p.peer, p.numel, p.dtype) for p in batch["batch"]] == [
        ("send", 2, 4, "float32"), ("recv", 6, 3, "bfloat16")]
    assert (batch["in_numel"], batch["out_numel"], batch["group"]) == (4, 3, ())


def test_step_counts_figures_in_the_ops_order_then_blocked_time():
    counts = accounting.StepCounts()
    entry = counts.entry("all_gather")
    entry[0] += 2
    entry[1] += 64
    entry[2] += 0.5
    counts.blocked_s = 0.25
    figures = counts.figures()
    assert len(figures) == 3 * len(accounting.OPS) + 1
    at = accounting.OPS.index("all_gather") * 3
    assert figures[at:at + 3] == [2.0, 64.0, 0.5] and figures[-1] == 0.25
    assert sum(figures[:-1]) == 66.5


# --------------------------------------------------------------------------- the trace model

def test_call_bytes_in_the_suites_convention():
    assert Call(0, "all_gather", dtype="bfloat16", in_numel=4, out_numel=16).nbytes == 8
    assert Call(0, "recv", dtype="float32", out_numel=5, peer=1).nbytes == 20
    batch = Call(0, "batch", batch=[Part("send", 1, 2, "float64"), Part("recv", 1, 3, "int8")])
    assert batch.nbytes == 19
    assert Call(0, "barrier").nbytes == 0 and Call(0, "send", peer=1).kind == "pt2pt"


def test_a_call_record_leaves_out_none_and_reads_back_equal():
    call = Call(3, "broadcast", group=(0, 2), dtype="float32", in_numel=4, out_numel=4, root=2,
                req=7)
    fields = call.record()
    assert fields == {"index": 3, "op": "broadcast", "group": [0, 2], "dtype": "float32",
                      "in_numel": 4, "out_numel": 4, "root": 2, "req": 7}
    assert Call.from_record({**fields, "unknown": 1}) == call  # fields it does not know: left


def test_trace_groups_and_origin_on_the_shared_clock():
    ranks = {0: [Call(0, "all_reduce", group=(0, 1), start_s=2.0),
                 Call(1, "all_reduce", group=(0, 1, 2), start_s=3.0)],
             1: [Call(0, "all_reduce", group=(0, 1), start_s=1.0)],
             2: [Call(0, "broadcast", group=(1, 2), start_s=None)]}
    trace = Trace("commbench", 3, ranks, groups=[(1, 2)], clocks={0: 10.0, 1: 10.5})
    assert trace.all_groups() == [(1, 2), (0, 1)]  # the job's first, then by first use
    assert trace.shared_start(0, ranks[0][0]) == 12.0
    assert trace.origin() == 11.5  # rank 1's call at 1.0 on a clock 10.5 s later


@pytest.mark.fast
def test_a_failure_that_a_stop_signal_explains_is_left_to_the_stop(monkeypatch):
    """guard.stop_signalled: a stop signal's byte waiting on the wakeup socket (the watcher has
    not read it yet) or the watcher already acting counts; another signal's byte does not. The
    harness then lets the watcher end the rank with 130/143 instead of saying that it lost its
    peers (a Ctrl-C reaches every rank; one that acted first closes its connections)."""
    import signal
    import socket
    from commbench.ranks import guard
    reader, writer = socket.socketpair()
    monkeypatch.setattr(guard, "_STOP_SOCKETS", (reader, writer))
    monkeypatch.setattr(guard, "_STOPPING", __import__("threading").Event())
    try:
        assert not guard.stop_signalled()
        writer.send(bytes([signal.SIGCHLD]))
        assert not guard.stop_signalled(wait=0.05)
        reader.recv(1)
        writer.send(bytes([signal.SIGINT]))
        assert guard.stop_signalled()
        assert reader.recv(1) == bytes([signal.SIGINT])  # peeked, not taken from the watcher
        assert not guard.stop_signalled()
        guard._STOPPING.set()
        assert guard.stop_signalled()
    finally:
        reader.close()
        writer.close()


def test_a_slow_start_up_step_says_what_it_is_doing_and_when_it_ended():
    """oneCCL's first start (comm.init_comm): quick, nothing said; slow, a line once it has
    taken `after` seconds and one at its end with its time; a step that fails says no more."""
    import time
    from commbench.progress import SlowStep
    said = []
    with SlowStep(said.append, "starting oneCCL", "oneCCL started in {:.1f} s", after=0.2):
        pass
    assert said == []
    with SlowStep(said.append, "starting oneCCL", "oneCCL started in {:.1f} s", after=0.05):
        time.sleep(0.3)
    assert said[0] == "starting oneCCL" and said[1].startswith("oneCCL started in 0.")
    said.clear()
    with pytest.raises(RuntimeError):
        with SlowStep(said.append, "starting oneCCL", "oneCCL started in {:.1f} s", after=0.05):
            time.sleep(0.2)
            raise RuntimeError("oneCCL did not start")
    assert said == ["starting oneCCL"]
    with SlowStep(None, "starting oneCCL", "done", after=0.01):  # the quiet ranks
        time.sleep(0.05)


def test_a_build_file_of_another_venvs_is_told_from_this_ones(tmp_path):
    """builds.built_elsewhere: torch rewrites a build file whose paths are another venv's and
    ninja rebuilds the op (issue 53: a silent minute); one of this venv's, or none, is not."""
    import importlib.util
    import os
    import sysconfig
    from commbench.ranks import builds
    torch_dir = os.path.dirname(importlib.util.find_spec("torch").origin)
    ds = importlib.util.find_spec("deepspeed")
    ds_dir = os.path.dirname(ds.origin) if ds else "/nowhere/deepspeed"
    mine = (f"cflags = -I{ds_dir}/ops/csrc/cpu/includes -isystem {torch_dir}/include "
            f"-isystem {sysconfig.get_paths()['include']} -fPIC\n")
    (tmp_path / "build.ninja").write_text(mine)
    assert builds.built_elsewhere(str(tmp_path)) is None
    other = "/opt/venv2/lib/python3.11/site-packages"
    (tmp_path / "build.ninja").write_text(mine.replace(os.path.dirname(torch_dir), other))
    assert builds.built_elsewhere(str(tmp_path)) == "/opt/venv2"
    (tmp_path / "build.ninja").write_text("rule cp\n  command = cp $in $out\n")
    assert builds.built_elsewhere(str(tmp_path)) is None  # not torch's: nothing to tell
    assert builds.built_elsewhere(str(tmp_path / "none")) is None
