"""parallel_bench.py: each strategy trains the tiny model on real ranks (torchrun, gloo), its loss
falls, and what the accounting counts equals the analytic volumes of that model.

Formulas (P parameters, es element size, n ranks, m micro-batches of b sequences of s tokens,
hidden h, L layers; activation A = b·s·h·es bytes):
- ddp: m-1 micro-batches under no_sync(), so one all_reduce of every gradient per step: es·P.
- zero1: es·P all-reduced (DeepSpeed 0.19.8 all-reduces the gradient bucket, not reduce-scatter)
  plus one 4-byte gradient-norm all_reduce; all_gather of the updated parameters: es·P'/n,
  P' = P padded to a multiple of 2n (DeepSpeed's nccl_start_alignment_factor 2 times n).
- zero2: as zero1 but the gradients are reduced at every micro-batch: m·es·P (+ 4).
- zero3: all_gather of at least one full copy of the parameters (es·P/n) and reduce_scatter of
  m·es·P (+ per-parameter padding to a multiple of n).
- tp: 4·L·m all_reduce of A each (2 forward, 2 backward per layer per micro-batch).
- pp: a stage sends m activations and receives m gradients per neighbour: 2·m·A for each of
  the first and last stages, 4·m·A for a middle one.
"""

import json
import re
import sys

import pytest

from support import ROOT, assert_no_traceback, finish, free_port, launch, rank_env, spawn

STEPS, WARMUP = 4, 1
TINY = dict(hidden=64, layers=3, heads=4, vocab=256, seq=16, micro_batch=4, micro_batches=2)
# At 3 ranks: heads divisible by 3, and P = 45 x 2189 not a multiple of 2n = 6 (ZeRO pads it).
TINY_3 = dict(TINY, hidden=45, heads=3)
ORDER = ["ddp", "zero1", "zero2", "zero3", "tp", "pp"]


def flags(model, **extra):
    values = dict(model, **{"steps": STEPS, "warmup": WARMUP, **extra})
    return [f"--{key.replace('_', '-')}={value}" for key, value in values.items()]


def params(model):
    h, v, s, layers = model["hidden"], model["vocab"], model["seq"], model["layers"]
    return 2 * v * h + s * h + layers * (12 * h * h + 13 * h) + 2 * h


def read_records(path):
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[0]["type"] == "meta"
    return lines[0], {r["strategy"]: r for r in lines[1:]}


def run_strategies(tmp_path_factory, nproc, model, strategies, existing=False, **extra):
    path = tmp_path_factory.mktemp("strategies") / "run.jsonl"
    if existing:  # an earlier run's file: kept, this run's goes to run.jsonl.1 and says so
        path.write_text("earlier\n")
    result = launch("parallel_bench.py", f"--strategy={strategies}", *flags(model, **extra),
                    f"--output={path}", nproc=nproc, timeout=400)
    assert result.returncode == 0, result
    assert_no_traceback(result)
    if existing:
        assert path.read_text() == "earlier\n"
        assert f"{path} exists; writing {path}.1 (--overwrite replaces it)" in result.stderr
        path = path.with_name(path.name + ".1")
    return result, *read_records(path)


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    return run_strategies(tmp_path_factory, 2, TINY, "all")


# 3 ranks: test_replay.py's job (all six strategies of TINY_3, traced) is checked with
# check_three_ranks below: one 3-rank launch for both files.


@pytest.fixture(scope="module")
def two_bf16(tmp_path_factory):
    return run_strategies(tmp_path_factory, 2, TINY, "ddp,zero2,tp,pp", existing=True,
                          dtype="bfloat16")


def table_rows(stdout):
    """{strategy: the row's cells} of the table on stdout."""
    rows = {}
    for line in stdout.splitlines():
        name = line.split(" ", 1)[0]
        if name in ORDER:
            rows[name] = re.split(r"\s{2,}", line.strip())
    return rows


def check_record(record, meta, n, model, strategy, steps=STEPS, warmup=WARMUP):
    p = params(model)
    assert record["type"] == "strategy" and record["strategy"] == strategy
    assert record["world_size"] == n and record["params"] == p == meta["model"]["params"]
    assert record["dp"] * record["tp"] * record["pp"] == n
    assert record["steps"] == steps and len(record["step_times_s"]) == steps
    assert all(t > 0 for t in record["step_times_s"])
    spread = record["step_time_s"]
    assert spread["min"] <= spread["median"] <= spread["p90"] <= spread["max"]
    assert (spread["min"], spread["max"]) == (min(record["step_times_s"]),
                                              max(record["step_times_s"]))
    samples = model["micro_batch"] * model["micro_batches"] * record["dp"]
    assert record["samples_per_s"] == pytest.approx(samples / spread["median"])
    assert record["tokens_per_s"] == pytest.approx(record["samples_per_s"] * model["seq"])
    memory = record["peak_memory_bytes_per_rank"]
    assert len(memory) == n and all(m > 0 for m in memory)
    assert record["memory_source"] == "rss_high_water"
    assert len(record["params_per_rank"]) == n
    loss = record["loss"]
    assert len(loss) == warmup + steps and loss[-1] < loss[0], loss
    assert record["exposed_comm_s"] >= 0
    assert record["exposed_method"] == ("no_sync difference" if strategy == "ddp"
                                        else "blocked in calls")
    assert record["compute_s"] == pytest.approx(spread["median"] - record["exposed_comm_s"])
    for op, per_rank in record["comm_bytes_per_rank"].items():
        assert len(per_rank) == n and per_rank[0] == record["comm"][op]["bytes"]
    assert "optimizer" in record["config"]


def test_every_strategy_at_two_ranks(two):
    result, meta, records = two
    assert list(records) == ORDER
    assert meta["kind"] == "strategies" and meta["world_size"] == 2 and meta["dist"] == "torch"
    assert meta["backend"] == "gloo" and meta["device"] == "cpu" and len(meta["hostnames"]) == 2
    assert meta["model"] == dict(TINY, params=params(TINY), dtype="float32", element_size=4)
    assert (meta["steps"], meta["warmup"]) == (STEPS, WARMUP)
    assert {"python", "torch", "deepspeed"} <= set(meta["versions"])
    rows = table_rows(result.stdout)
    assert list(rows) == ORDER, result.stdout
    for name, record in records.items():
        check_record(record, meta, 2, TINY, name)
        assert rows[name][0] == name and "ms" in rows[name][1]
    # One seed, one model, rank 0's first batch: the first loss is the same whatever the strategy.
    first = [record["loss"][0] for record in records.values()]
    assert max(first) - min(first) < 1e-4, first


def activation(model, element_size):
    return model["micro_batch"] * model["seq"] * model["hidden"] * element_size


def check_volumes(records, model, n, es):
    p, m, layers = params(model), model["micro_batches"], model["layers"]
    act = activation(model, es)
    if "ddp" in records:
        ddp = records["ddp"]
        assert set(ddp["comm"]) == {"all_reduce"}
        assert ddp["comm_bytes_per_rank"]["all_reduce"] == [es * p] * n
        assert ddp["params_per_rank"] == [p] * n
    for name, factor in (("zero1", 1), ("zero2", m)):
        if name not in records:
            continue
        zero = records[name]
        padded = -(-p // (2 * n)) * 2 * n
        assert set(zero["comm"]) == {"all_reduce", "all_gather"}, zero["comm"]
        for sent in zero["comm_bytes_per_rank"]["all_reduce"]:
            assert factor * es * p <= sent <= factor * es * p + 8, (name, sent)
        assert zero["comm_bytes_per_rank"]["all_gather"] == [es * padded // n] * n
        assert zero["params_per_rank"] == [p] * n
    if "zero3" in records:
        zero3 = records["zero3"]
        assert {"all_gather", "reduce_scatter"} <= set(zero3["comm"]), zero3["comm"]
        tensors = 5 + 12 * layers  # parameter tensors: 12 a block, 5 outside
        for gathered, scattered in zip(zero3["comm_bytes_per_rank"]["all_gather"],
                                       zero3["comm_bytes_per_rank"]["reduce_scatter"]):
            assert gathered >= es * p / n
            assert m * es * p <= scattered <= m * es * (p + n * tensors)
        assert zero3["config"]["deepspeed"]["zero_optimization"][
            "stage3_param_persistence_threshold"] == 0
    if "tp" in records:
        tp = records["tp"]
        assert tp["comm"]["all_reduce"]["calls"] == 4 * layers * m
        assert tp["comm_bytes_per_rank"]["all_reduce"] == [4 * layers * m * act] * n
        assert set(tp["comm"]) == {"all_reduce"}
        h = model["hidden"]
        shared = 2 * model["vocab"] * h + model["seq"] * h + 2 * h
        assert tp["params_per_rank"] == [shared + layers * ((12 * h * h + 7 * h) // n + 6 * h)] * n
        assert (tp["dp"], tp["tp"], tp["pp"]) == (1, n, 1)
    if "pp" in records:
        pp = records["pp"]
        assert set(pp["comm"]) == {"pt2pt"}
        expected = [2 * m * act] + [4 * m * act] * (n - 2) + [2 * m * act]
        assert pp["comm_bytes_per_rank"]["pt2pt"] == expected
        assert pp["comm"]["pt2pt"]["calls"] == 2 * m
        assert sum(pp["params_per_rank"]) == p and len(pp["params_per_rank"]) == n
        assert (pp["dp"], pp["tp"], pp["pp"]) == (1, 1, n)


def test_bytes_equal_the_analytic_volumes_at_two_ranks(two):
    check_volumes(two[2], TINY, 2, 4)


def check_three_ranks(stdout, meta, records, steps, warmup):
    """Every strategy of TINY_3 at 3 ranks (test_replay.py's traced job runs it): the records,
    the table's rows, the analytic volumes with ZeRO's padding."""
    assert list(records) == ORDER
    rows = table_rows(stdout)
    for name, record in records.items():
        check_record(record, meta, 3, TINY_3, name, steps, warmup)
        assert name in rows
    assert params(TINY_3) % 6 != 0  # ZeRO's padding is exercised
    check_volumes(records, TINY_3, 3, 4)
    assert records["pp"]["config"]["stage_layers"] == [[0, 1], [1, 2], [2, 3]]


def test_bfloat16_moves_two_bytes_an_element(two_bf16):
    result, meta, records = two_bf16
    assert meta["model"]["element_size"] == 2 and meta["model"]["dtype"] == "bfloat16"
    for name, record in records.items():
        check_record(record, meta, 2, TINY, name)
    check_volumes(records, TINY, 2, 2)
    assert records["zero2"]["config"]["deepspeed"]["bf16"] == {"enabled": True}


def spawn_ranks(n, *args):
    """n ranks started by hand (torchrun's environment), forked from the fork server, so every
    rank's exit status is seen."""
    port = free_port()
    cmd = [sys.executable, "parallel_bench.py", *map(str, args)]
    procs = [spawn(cmd, rank_env(r, n, port)) for r in range(n)]
    outputs = finish(procs, cmd, 120)
    return [proc.returncode for proc in procs], "".join(out for out, _ in outputs), \
        "".join(err for _, err in outputs)


def errors(stderr):
    return [line for line in stderr.splitlines() if line.startswith("commbench: error:")]


def test_unknown_strategy():
    result = launch("parallel_bench.py", "--strategy=ddp,fsdp")
    assert result.returncode == 2, result
    assert errors(result.stderr) == ["commbench: error: argument --strategy: unknown strategy "
                                     "'fsdp': use ddp, zero1, zero2, zero3, tp, pp or all (a comma "
                                     "list allowed) (see --help)"]
    assert "Traceback" not in result.stderr and result.stdout == ""


@pytest.mark.parametrize("args,text", [
    (["--strategy=tp", "--heads=4", "--hidden=64"],
     "--strategy tp: --heads 4 is not divisible by the 3 tensor-parallel ranks"),
    (["--strategy=ddp,pp", "--layers=2", "--hidden=48", "--heads=3"],
     "--strategy pp: --layers 2 is fewer than the 3 pipeline stages"),
])
def test_shapes_the_world_cannot_take(args, text):
    statuses, stdout, stderr = spawn_ranks(3, *args)
    assert statuses == [2, 2, 2], stderr
    found = errors(stderr)
    assert len(found) == 1 and text in found[0], stderr
    assert "Traceback" not in stderr and stdout == ""


@pytest.mark.fast  # in-process
def test_the_saved_fixture_is_a_run_of_every_strategy():
    """tests/fixtures/strategies_2ranks.jsonl (the report's input): the default model at 2 ranks,
    every strategy, in the format above, with the analytic volumes."""
    from pathlib import Path
    meta, records = read_records(Path(ROOT) / "tests" / "fixtures" / "strategies_2ranks.jsonl")
    default = dict(hidden=256, layers=4, heads=4, vocab=1024, seq=64, micro_batch=8,
                   micro_batches=4)
    assert meta["model"] == dict(default, params=params(default), dtype="float32",
                                 element_size=4)
    assert list(records) == ORDER and meta["world_size"] == 2
    check_volumes(records, default, 2, 4)
    for record in records.values():
        assert record["steps"] == meta["steps"] == len(record["step_times_s"])
        assert record["loss"][-1] < record["loss"][0]
