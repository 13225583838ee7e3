"""A user's own DeepSpeed config (`parallel_bench.py --ds-config FILE`, and
`--ds-config-sweep KEY=V1,V2,...` over one of its keys).

The file is read as `deepspeed.initialize(config=...)` takes it. Its `zero_optimization.stage`
names the strategy (1, 2, 3: zero1, zero2, zero3); its `train_micro_batch_size_per_gpu`,
`gradient_accumulation_steps` and `bf16`/`fp16` set the batch and the dtype; the rest of it goes
to DeepSpeed as written. What the run cannot honour is one line naming the key, before any
process group starts: not JSON, no `zero_optimization`, a stage other than 1-3, a key or value
DeepSpeed's own ZeRO config refuses (checked with DeepSpeed's pydantic model), fp16 on CPU
ranks, an offload to NVMe, an offload to the CPU when the ranks are CPU ranks.

Records and the table carry the file's path and the SHA-256 of its bytes. `estimate()` is the
bytes per step per op report.py strategy's model gives for the config's bucket sizes.
"""

import copy
import math
import hashlib
import json
from dataclasses import dataclass, field

from ..errors import UsageError

STAGE_STRATEGY = {1: "zero1", 2: "zero2", 3: "zero3"}
# zero_optimization keys DeepSpeed 0.19.8 reads back from its engine under the same names
# (DeepSpeedZeroConfig dumped by alias), compared with the file's after initialize().
DEFAULT_REDUCE_BUCKET = 500_000_000  # DeepSpeed's default reduce/allgather bucket (elements)
DEFAULT_PREFETCH = 50_000_000
DEFAULT_MAX_LIVE = 1_000_000_000


@dataclass
class UserConfig:
    path: str
    sha256: str
    config: dict  # as read from the file
    sweep_key: str = None
    sweep_values: list = field(default_factory=list)

    @property
    def stage(self):
        return int(self.config["zero_optimization"]["stage"])

    def identity(self):
        """What records and the table say of the file."""
        return {"path": self.path, "sha256": self.sha256}

    def variants(self):
        """[(label, config)]: the file's own config alone, or one per sweep value (the file's
        own value first when the sweep does not list it)."""
        if not self.sweep_key:
            return [(None, self.config)]
        own = get(self.config, self.sweep_key)
        values = list(self.sweep_values)
        if own is not _MISSING and not any(_same(own, v) for v in values):
            values.insert(0, own)
        return [(_text(v), put(self.config, self.sweep_key, v)) for v in values]

    def own_label(self):
        """The label of the variant that is the file's own value (None: the key is not in
        the file, DeepSpeed's default applies, and no row is 'the config's own')."""
        own = get(self.config, self.sweep_key)
        return None if own is _MISSING else _text(own)


_MISSING = object()


def _same(a, b):
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return a == b


def _text(value):
    """A value as the sweep's rows show it: 5e6 stays 5e6, 5000000 stays 5000000."""
    if isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, float) and value.is_integer():
        return f"{value:g}"
    return value if isinstance(value, str) else json.dumps(value)


def get(config, key):
    node = config
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


def put(config, key, value):
    """A copy of config with the dotted key set to value (sections made as needed)."""
    result = copy.deepcopy(config)
    node = result
    *parents, last = key.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
    return result


def _integral(value):
    """JSON's 5e6 is a float: as an int where it is a whole number (DeepSpeed's fields are ints)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def parse_sweep(text):
    """`zero_optimization.reduce_bucket_size=5e6,5e7,5e8` -> (key, [values])."""
    key, sep, values = text.partition("=")
    key = key.strip()
    if not sep or not key or not values.strip():
        raise UsageError(f"--ds-config-sweep {text}: give KEY=V1,V2,... (e.g. "
                         "zero_optimization.reduce_bucket_size=5e6,5e7,5e8)")
    parsed = []
    for item in values.split(","):
        item = item.strip()
        try:
            value = json.loads(item)
        except ValueError:
            value = item  # a string value (e.g. a device name)
        parsed.append(_integral(value))
    if len(parsed) < 2:
        raise UsageError(f"--ds-config-sweep {text}: give at least two values to compare")
    if len({json.dumps(v) for v in parsed}) != len(parsed):
        raise UsageError(f"--ds-config-sweep {text}: a value is given twice")
    return key, parsed


def load(path, sweep=None, device_type="cpu"):
    """The file read and checked (each sweep variant too): a UserConfig, or a UsageError
    naming what cannot run. Standard library only until DeepSpeed's ZeRO model checks the
    zero_optimization section."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except OSError as error:
        raise UsageError(f"--ds-config {path}: cannot read it: {error.strerror or error}") \
            from None
    try:
        config = json.loads(raw)
    except ValueError as error:  # UnicodeDecodeError too
        raise UsageError(f"--ds-config {path}: not JSON ({error})") from None
    if not isinstance(config, dict):
        raise UsageError(f"--ds-config {path}: not a DeepSpeed config (a JSON object)")
    user = UserConfig(path, hashlib.sha256(raw).hexdigest(), config)
    if sweep:
        user.sweep_key, user.sweep_values = parse_sweep(sweep)
    variants = user.variants()
    for label, variant in variants:
        where = path if label is None else f"{path} with {user.sweep_key}={label}"
        check(variant, where, device_type)
    return user


def _positive_int(config, key, where):
    value = config.get(key)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(_integral(value), int) or value < 1:
        raise UsageError(f"--ds-config {where}: {key} {json.dumps(value)}: a positive integer, "
                         "please")


def check(config, where, device_type):
    """One line naming the key for what this run cannot honour; nothing when it can."""
    zero = config.get("zero_optimization")
    if not isinstance(zero, dict):
        raise UsageError(f"--ds-config {where}: no zero_optimization section: parallel_bench.py "
                         "measures the ZeRO stage (1, 2 or 3) it names")
    stage = zero.get("stage", 0)
    if isinstance(stage, bool) or _integral(stage) not in STAGE_STRATEGY:
        extra = " (stage 0 is plain data parallelism: --strategy ddp)" if stage == 0 else ""
        raise UsageError(f"--ds-config {where}: zero_optimization.stage {json.dumps(stage)}: "
                         f"use 1, 2 or 3{extra}")
    for key in ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                "train_batch_size"):
        _positive_int(config, key, where)
    fp16, bf16 = (bool((config.get(k) or {}).get("enabled")) if isinstance(config.get(k), dict)
                  else False for k in ("fp16", "bf16"))
    if fp16 and bf16:
        raise UsageError(f"--ds-config {where}: fp16.enabled and bf16.enabled: DeepSpeed takes "
                         "one of them")
    if fp16 and device_type == "cpu":
        raise UsageError(f"--ds-config {where}: fp16.enabled: not measured on CPU ranks "
                         "(DeepSpeed's fp16 loss-scaling optimizer is for accelerators); use "
                         "bf16.enabled, or run on GPUs")
    for section in ("offload_optimizer", "offload_param"):
        offload = zero.get(section)
        device = offload.get("device") if isinstance(offload, dict) else None
        if device == "nvme":
            raise UsageError(f"--ds-config {where}: zero_optimization.{section}.device nvme: "
                             "ZeRO-Infinity's NVMe offload is not measured (it needs DeepSpeed's "
                             "async_io op and a swap path); remove it or use device cpu on GPUs")
        if device == "cpu" and device_type == "cpu":
            raise UsageError(f"--ds-config {where}: zero_optimization.{section}.device cpu: the "
                             "ranks already run on the CPU, there is nothing to offload from; "
                             "remove it")
    _deepspeed_check(zero, where)


def _deepspeed_check(zero, where):
    """DeepSpeed's own model of zero_optimization: an unknown key, a wrong type."""
    try:
        from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    except ImportError:
        return  # the ZeRO strategies' own import says what is missing
    try:
        DeepSpeedZeroConfig(**zero)
    except Exception as error:  # pydantic's ValidationError; DeepSpeed's own asserts
        errors = getattr(error, "errors", None)
        if callable(errors):
            first = error.errors()[0]
            key = ".".join(str(part) for part in first.get("loc", ())) or "?"
            raise UsageError(f"--ds-config {where}: zero_optimization.{key}: "
                             f"{first.get('msg', error)} (DeepSpeed "
                             f"{_deepspeed_version()} refuses it)") from None
        raise UsageError(f"--ds-config {where}: zero_optimization: {error}") from None


def _deepspeed_version():
    import deepspeed
    return deepspeed.__version__


def _dtype_name(dtype):
    """A torch dtype under the name a DeepSpeed config gives it (communication_data_type)."""
    import torch
    return {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}.get(
        dtype, str(dtype).replace("torch.", ""))


# The engine's view of each top-level key a config may set (DeepSpeed 0.19.8's accessors),
# under the config's names. A key set that is not here is named in `not_exposed`.
ENGINE_VIEW = {
    "train_micro_batch_size_per_gpu": lambda e: e.train_micro_batch_size_per_gpu(),
    "gradient_accumulation_steps": lambda e: e.gradient_accumulation_steps(),
    "train_batch_size": lambda e: e.train_batch_size(),
    "bf16": lambda e: {"enabled": bool(e.bfloat16_enabled())},
    "fp16": lambda e: {"enabled": bool(e.fp16_enabled()),
                       **({"loss_scale": e.loss_scale()} if e.fp16_enabled() else {})},
    "gradient_clipping": lambda e: e.gradient_clipping(),
    "steps_per_print": lambda e: e.steps_per_print(),
    "wall_clock_breakdown": lambda e: e.wall_clock_breakdown(),
    "memory_breakdown": lambda e: e.memory_breakdown(),
    "dump_state": lambda e: e.dump_state(),
    "prescale_gradients": lambda e: not e.postscale_gradients(),
    "gradient_predivide_factor": lambda e: e.gradient_predivide_factor(),
    "communication_data_type": lambda e: _dtype_name(e.communication_data_type),
    "zero_allow_untested_optimizer": lambda e: e.zero_allow_untested_optimizer(),
    # the optimizer that runs: the suite's client optimizer (torch's AdamW) over the file's
    "optimizer": lambda e: {"type": e.optimizer_name(), "params": e.optimizer_params()},
    "scheduler": lambda e: {"type": e.scheduler_name(), "params": e.scheduler_params()},
}


def read_back(engine, config):
    """What the engine holds for each key the config sets, under the config's names:
    zero_optimization's keys (as DeepSpeed's ZeRO model holds them, defaults filled), the
    batch, the accumulation, the dtype (always), and every other key in ENGINE_VIEW.
    `not_exposed`: the keys set (`section.key` inside a section) that the engine does not
    report, sorted; absent when there are none."""
    held = engine._config.zero_config.model_dump(by_alias=True)
    zero = config["zero_optimization"]
    back = {"zero_optimization": {key: _plain(held[key]) for key in zero if key in held}}
    hidden = [f"zero_optimization.{key}" for key in zero if key not in held]
    for key in ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "bf16", "fp16",
                *config):
        if key in back:
            continue
        if key not in ENGINE_VIEW:
            hidden.append(key)
            continue
        back[key] = _plain(ENGINE_VIEW[key](engine))
        if isinstance(config.get(key), dict) and isinstance(back[key], dict):
            hidden += [f"{key}.{sub}" for sub in config[key] if sub not in back[key]]
    if hidden:
        back["not_exposed"] = sorted(hidden)
    return back


def _plain(value):
    """JSON's form of what the engine holds (its stage is an int enum, its sections models)."""
    if hasattr(value, "model_dump"):
        return value.model_dump(by_alias=True)
    if isinstance(value, int) and not isinstance(value, bool):
        return int(value)
    return value


def workload_settings(config, element_size):
    """report.py strategy's Workload fields for a config's buckets (DeepSpeed's defaults where
    the file is silent)."""
    zero = config["zero_optimization"]
    reduce_bucket = float(zero.get("reduce_bucket_size", DEFAULT_REDUCE_BUCKET))
    return {
        "zero_bucket_elements": reduce_bucket,
        # DeepSpeed 0.19.8 gathers ZeRO-1/2's partitions with one all_gather_into_tensor per
        # parameter group where torch has it (runtime/utils.py all_gather_dp_groups), whatever
        # allgather_bucket_size says
        "allgather_bucket_elements": math.inf,
        "prefetch_bytes": float(zero.get("stage3_prefetch_bucket_size", DEFAULT_PREFETCH))
        * element_size,
        "reduce_scatter_bytes": reduce_bucket * element_size,
        "stage3_max_live": float(zero.get("stage3_max_live_parameters", DEFAULT_MAX_LIVE)),
    }


def kept_at_the_turn(config, model_config):
    """ZeRO-3: the parameters of the suite's model still gathered when backward begins, so not
    gathered again: the modules of forward taken from its end (LM head, final LayerNorm, then
    the last block's MLP down, up, LayerNorm, attention out, QKV, LayerNorm, biases, ...) while
    their parameters add up to no more than stage3_max_live_parameters. Measured on DeepSpeed
    0.19.8 (tests/test_ds_config.py): 2 ranks, hidden 64, vocab 256, limit 30000: the head and
    final norm (16512) not gathered again in each micro-batch's backward; 3 ranks, hidden 45,
    limit 30000 (stage3_max_reuse_distance 15000): head to the last block's LayerNorm (28080)."""
    live = float(config["zero_optimization"].get("stage3_max_live_parameters", DEFAULT_MAX_LIVE))
    h, v = model_config.hidden, model_config.vocab
    block = (4 * h * h, 4 * h * h + 4 * h, 2 * h, h * h, 3 * h * h + 3 * h, 2 * h, 2 * h)
    order = (v * h, 2 * h) + block * model_config.layers + (model_config.seq * h, v * h)
    kept = 0
    for numel in order:
        if kept + numel > live:
            break
        kept += numel
    return kept


def estimate(config, model_config, world_size, element_size):
    """{op: {"bytes", "calls"}} per step and rank (the suite's Size convention) of the config's
    ZeRO stage, from report.py strategy's model with the config's buckets."""
    from ..report import strategy as model
    w = model.Workload(params=model_config.params, world_size=world_size, gpu_mem_gb=1e9,
                       micro_batches=int(config["gradient_accumulation_steps"]),
                       element_size=element_size,
                       stage3_kept_elements=kept_at_the_turn(config, model_config),
                       **workload_settings(config, element_size))
    stage = int(config["zero_optimization"]["stage"])
    plan = {p.name: p for p in model.plans(w)}[f"ZeRO-{stage}"]
    ops = {}
    for c in plan.collectives:
        entry = ops.setdefault(c.op, {"bytes": 0.0, "calls": 0})
        entry["bytes"] += c.count * c.message
        entry["calls"] += c.count
    return ops
