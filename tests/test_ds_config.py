"""parallel_bench.py --ds-config FILE and --ds-config-sweep KEY=V1,V2,...: a user's own DeepSpeed
config drives the ZeRO strategy it names (docs/strategies.md).

Two runs with real ranks (gloo): ZeRO-1, 2 and 3 at 3 ranks (one file, swept over
zero_optimization.stage), and a sweep of three reduce bucket sizes at 2 ranks (ZeRO-2). (ZeRO-1,
2 and 3 at 2 ranks without a user's file: test_parallel_bench.py.) Each config sets non-default buckets, overlap_comm true and small stage-3 limits: the
engine's config, read back from the engine, equals the file's, and the bytes a step measured
equal the estimate for those buckets within 2%. The bad configs are checked in-process (what
load() refuses) and once on 2 ranks started by hand (one line, exit 2 on both).
"""

import json

import pytest

from support import assert_no_traceback, launch
from test_parallel_bench import TINY, TINY_3, errors, spawn_ranks

STEPS, WARMUP = 4, 1
ZERO = {"stage": 1, "reduce_bucket_size": 50000, "allgather_bucket_size": 60000,
        "overlap_comm": True, "contiguous_gradients": True,
        "stage3_prefetch_bucket_size": 20000, "stage3_max_live_parameters": 30000,
        "stage3_max_reuse_distance": 30000, "stage3_param_persistence_threshold": 0}


def model_flags(model):
    keys = ("hidden", "layers", "heads", "vocab", "seq")
    return [f"--{key}={model[key]}" for key in keys] + [f"--steps={STEPS}", f"--warmup={WARMUP}"]


def write_config(path, model, **zero):
    config = {"train_micro_batch_size_per_gpu": model["micro_batch"],
              "gradient_accumulation_steps": model["micro_batches"], "gradient_clipping": 1.0,
              "zero_optimization": dict(ZERO, **zero)}
    path.write_text(json.dumps(config, indent=1))
    return config


def run(tmp_path_factory, nproc, model, *extra, **zero):
    where = tmp_path_factory.mktemp("ds_config")
    config = write_config(where / "ds_config.json", model, **zero)
    output = where / "run.jsonl"
    result = launch("parallel_bench.py", f"--ds-config={where / 'ds_config.json'}", *extra,
                    *model_flags(model), f"--output={output}", nproc=nproc, timeout=300)
    assert result.returncode == 0, result
    assert_no_traceback(result)
    lines = [json.loads(line) for line in output.read_text().splitlines()]
    return result, config, lines


@pytest.fixture(scope="module")
def three(tmp_path_factory):
    return run(tmp_path_factory, 3, TINY_3, "--ds-config-sweep=zero_optimization.stage=1,2,3",
               reduce_bucket_size=40000, stage3_max_reuse_distance=15000)


@pytest.fixture(scope="module")
def buckets(tmp_path_factory):
    return run(tmp_path_factory, 2, TINY, "--ds-config-sweep=zero_optimization.reduce_bucket_size="
               "2e4,5e4,2e5", stage=2)


def check_engine_and_bytes(record, file_config, zero):
    """The engine holds what the file says; the measured bytes are the estimate's."""
    back = record["config"]["engine_read_back"]
    assert back["zero_optimization"] == zero, (back, zero)
    assert back["train_micro_batch_size_per_gpu"] == file_config["train_micro_batch_size_per_gpu"]
    assert back["gradient_accumulation_steps"] == file_config["gradient_accumulation_steps"]
    assert back["bf16"] == {"enabled": False} and back["fp16"] == {"enabled": False}
    assert back["gradient_clipping"] == file_config["gradient_clipping"] == 1.0
    assert "not_exposed" not in back  # every key the file (and the suite) set, read back
    ratios = record["bytes_vs_estimate"]
    assert set(ratios) == set(record["estimate"]), ratios
    for op, ratio in ratios.items():
        assert ratio == pytest.approx(1, abs=0.02), (record["strategy"], op, ratio)
    if record["strategy"] in ("zero1", "zero2"):
        # the gradients all-reduced in reduce_bucket_size buckets (closed at a parameter's edge,
        # so a few more than the estimate's), plus the gradient norm's call
        calls, estimated = record["comm"]["all_reduce"]["calls"], \
            record["estimate"]["all_reduce"]["calls"]
        assert estimated + 1 <= calls <= 1.25 * estimated + 1, (calls, estimated)


def test_zero_1_2_3_at_three_ranks_as_the_file_says(three):
    """3 ranks: P is not a multiple of 2n, so each stage pads its partitions; the engine still
    holds the file's values and the bytes are the estimate's."""
    result, config, lines = three
    meta, records, verdict = lines[0], lines[1:-1], lines[-1]
    assert meta["ds_config"]["path"].endswith("ds_config.json")
    assert len(meta["ds_config"]["sha256"]) == 64
    assert f"sha256 {meta['ds_config']['sha256'][:12]}" in result.stdout
    assert [r["strategy"] for r in records] == ["zero1", "zero2", "zero3"]
    for stage, record in zip((1, 2, 3), records):
        assert record["world_size"] == 3
        assert record["ds_config"] == dict(meta["ds_config"], sweep_key="zero_optimization.stage",
                                           sweep_value=str(stage))
        check_engine_and_bytes(record, config, dict(config["zero_optimization"], stage=stage))
    # the stage-3 limits below the model: parameters gathered again in backward
    zero3 = records[2]
    assert zero3["comm"]["all_gather"]["bytes"] > 1.5 * 4 * TINY_3["micro_batches"] * \
        zero3["params"] / 3
    assert verdict["type"] == "ds_config_sweep" and verdict["own"] == "1"
    assert "DeepSpeed config" in result.stdout and "zero3" in result.stdout


def test_a_sweep_of_three_bucket_sizes(buckets):
    result, config, lines = buckets
    records, verdict = lines[1:-1], lines[-1]
    assert [r["ds_config"]["sweep_value"] for r in records] == ["20000", "50000", "200000"]
    calls = []
    for record in records:
        value = int(record["ds_config"]["sweep_value"])
        check_engine_and_bytes(record, config,
                               dict(config["zero_optimization"], reduce_bucket_size=value))
        calls.append(record["comm"]["all_reduce"]["calls"])
        low, mean, high = (record["sweep_figures"]["step_s"][i] for i in (1, 0, 2))
        assert low <= mean <= high and mean == pytest.approx(
            sum(record["step_times_s"]) / STEPS)
    assert calls[0] > calls[1] > calls[2]  # smaller buckets, more calls
    rows = [line for line in result.stdout.splitlines()
            if line.split(" ", 1)[0] in ("20000", "50000", "200000")]
    assert len(rows) == 3 and "50000 (file)" in rows[1], result.stdout
    assert verdict["own"] == "50000" and verdict["best"] in verdict["values"]
    assert verdict["sentence"] in result.stdout
    ours = [line for line in result.stdout.splitlines() if not line.startswith("[")]  # DeepSpeed's
    assert ours[-1].startswith(
        f"best: zero_optimization.reduce_bucket_size={verdict['best']}")


# ------------------------------------------------------------------------------ bad configs

def load(tmp_path, text, sweep=None, device="cpu"):
    from commbench.errors import UsageError
    from commbench.strategies import dsconfig
    path = tmp_path / "c.json"
    path.write_text(text)
    with pytest.raises(UsageError) as caught:
        dsconfig.load(str(path), sweep, device)
    return str(caught.value).replace(str(path), "FILE")


@pytest.mark.fast  # in-process
@pytest.mark.parametrize("text,sweep,said", [
    ('{"zero_optimization": {"stage": 3,', None, "--ds-config FILE: not JSON (Expecting"),
    ('[1]', None, "not a DeepSpeed config"),
    ('{"bf16": {"enabled": true}}', None, "no zero_optimization section"),
    ('{"zero_optimization": {"stage": 4}}', None, "zero_optimization.stage 4: use 1, 2 or 3"),
    ('{"zero_optimization": {"stage": 0}}', None, "(stage 0 is plain data parallelism"),
    ('{"fp16": {"enabled": true}, "zero_optimization": {"stage": 2}}', None,
     "fp16.enabled: not measured on CPU ranks"),
    ('{"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}}}', None,
     "zero_optimization.offload_param.device nvme"),
    ('{"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}', None,
     "zero_optimization.offload_optimizer.device cpu: the ranks already run on the CPU"),
    ('{"zero_optimization": {"stage": 2, "reduce_bucket_sise": 5}}', None,
     "zero_optimization.reduce_bucket_sise: Extra inputs are not permitted"),
    ('{"zero_optimization": {"stage": 2}, "gradient_accumulation_steps": 0}', None,
     "gradient_accumulation_steps 0: a positive integer"),
    ('{"zero_optimization": {"stage": 2}}', "zero_optimization.stage=2,4",
     "FILE with zero_optimization.stage=4: zero_optimization.stage 4"),
    ('{"zero_optimization": {"stage": 2}}', "zero_optimization.stage", "give KEY=V1,V2"),
    ('{"zero_optimization": {"stage": 2}}', "zero_optimization.stage=2", "at least two values"),
])
def test_what_a_config_cannot_run_is_named(tmp_path, text, sweep, said):
    assert said in load(tmp_path, text, sweep)


@pytest.mark.fast  # in-process
def test_the_sweep_lists_the_files_own_value_first(tmp_path):
    from commbench.strategies import dsconfig
    path = tmp_path / "c.json"
    path.write_text('{"zero_optimization": {"stage": 2, "reduce_bucket_size": 5e7}}')
    user = dsconfig.load(str(path), "zero_optimization.reduce_bucket_size=5e6,5e8")
    labels = [label for label, _ in user.variants()]
    assert labels == ["5e+07", "5000000", "500000000"] and user.own_label() == "5e+07"
    assert [v["zero_optimization"]["reduce_bucket_size"] for _, v in user.variants()] == \
        [5e7, 5_000_000, 500_000_000]


@pytest.mark.fast  # in-process
def test_the_verdict_says_whether_the_best_is_significantly_better():
    from commbench.strategies import sweep
    own = {"step_times_s": [0.100, 0.102, 0.098, 0.101]}
    fast = {"step_times_s": [0.080, 0.081, 0.079, 0.080]}
    noisy = {"step_times_s": [0.050, 0.150, 0.060, 0.120]}
    verdict = sweep.verdict("k", [("1", own), ("2", fast)], "1")
    assert verdict["best"] == "2" and verdict["significant"] is True
    assert verdict["ratio_ci"][1] < 1 and "significantly better" in verdict["sentence"]
    verdict = sweep.verdict("k", [("1", own), ("2", noisy)], "1")
    assert verdict["best"] == "2" and verdict["significant"] is False
    assert "not significantly better (the interval reaches 1)" in verdict["sentence"]
    verdict = sweep.verdict("k", [("1", fast), ("2", own)], "1")
    assert verdict["best"] == "1" and "the config's own" in verdict["sentence"]


def test_a_bad_config_is_one_line_on_every_rank(tmp_path):
    path = tmp_path / "c.json"
    path.write_text('{"zero_optimization": {"stage": 7}}')
    statuses, stdout, stderr = spawn_ranks(2, f"--ds-config={path}")
    assert statuses == [2, 2], stderr
    assert errors(stderr) == [f"commbench: error: --ds-config {path}: zero_optimization.stage 7: "
                              "use 1, 2 or 3"], stderr
    assert "Traceback" not in stderr and stdout == ""


@pytest.mark.fast  # in-process: DeepSpeed's own config and engine accessors, no ranks
def test_the_read_back_covers_every_key_the_file_sets(monkeypatch):
    """Issue 53: gradient_clipping was missing. Every key a config sets is read back through
    the engine's accessors (DeepSpeed's DeepSpeedConfig of the config, as initialize() makes
    it), or named in not_exposed when the engine does not report it."""
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    from deepspeed.runtime.config import DeepSpeedConfig
    from deepspeed.runtime.engine import DeepSpeedEngine
    from commbench.strategies import dsconfig
    config = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 3,
              "train_batch_size": 6, "gradient_clipping": 0.5, "prescale_gradients": False,
              "zero_optimization": {"stage": 2, "reduce_bucket_size": 20000},
              "bf16": {"enabled": True}, "steps_per_print": 1 << 30,
              "wall_clock_breakdown": False, "communication_data_type": "fp32",
              "optimizer": {"type": "AdamW", "params": {"lr": 0.001}},
              "flops_profiler": {"enabled": False}}
    engine = object.__new__(DeepSpeedEngine)  # its accessors read its config alone
    engine._config, engine.client_optimizer = DeepSpeedConfig(config), None
    back = dsconfig.read_back(engine, config)
    assert back.pop("not_exposed") == ["flops_profiler"]
    assert back.pop("fp16") == {"enabled": False}  # the dtype is always said
    assert back.pop("optimizer") == {"type": "adamw", "params": {"lr": 0.001}}
    assert back == {key: value for key, value in config.items()
                    if key not in ("optimizer", "flops_profiler")}
    for _key, view in dsconfig.ENGINE_VIEW.items():  # each accessor is DeepSpeed's
        view(engine)
