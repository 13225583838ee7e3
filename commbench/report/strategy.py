"""Which parallel strategy can this network afford? Communication and model-state memory of one
training step, per strategy, priced with the *measured* curves of this suite.

Used by `report.py strategy`. Model states follow the ZeRO paper for mixed-precision Adam
(K = 12 bytes of optimizer state per parameter, 2 + 2 for fp16 weights and gradients).
Standard library only.
"""

import math
import re
from dataclasses import dataclass, field

from .. import units

GB = 1e9


class StrategyError(Exception):
    """Input the estimate cannot use: one line, exit 1 (or 2 for a bad flag value)."""


def parse_count(text):
    """`7B`, `1.3B`, `350M`, `70k`, `1e9` -> a number of parameters."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?\d+)?)\s*([kKmMbBtT]?)\s*", text)
    if not match:
        raise StrategyError(f"cannot read a parameter count from '{text}' (e.g. 7B, 350M, 1e9)")
    scale = {"": 1, "k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}[match.group(2).lower()]
    return float(match.group(1)) * scale


# --------------------------------------------------------------------------- measured curves

@dataclass
class Estimate:
    seconds: float
    extrapolated: bool = False  # beyond the largest measured size


class Curves:
    """Measured duration against message size, per op (sizes in the suite's Size convention:
    bytes per rank of the op's input)."""

    def __init__(self, ops):
        self.ops = {op: sorted((size, m.duration) for size, m in data.items())
                    for op, data in ops.items() if data}

    def curve(self, op, layout=None):
        """The key of the curve a collective is priced on: with both --groups layouts measured
        for `op` (`all_reduce intra`, `all_reduce inter`), `layout`'s; else the world's."""
        if layout and all(f"{op} {kind}" in self.ops for kind in ("intra", "inter")):
            return f"{op} {layout}"
        return op

    def time(self, op, size, layout=None):
        """Seconds for one `op` of `size` bytes: log-log interpolation between the two nearest
        measured sizes; beyond the largest, the largest's bandwidth (marked extrapolated);
        below the smallest, the smallest's duration (latency-bound). `layout`: see curve()."""
        points = self.ops.get(self.curve(op, layout))
        if not points:
            raise KeyError(op)
        if size <= points[0][0]:
            return Estimate(points[0][1])
        if size >= points[-1][0]:
            last_size, last_time = points[-1]
            return Estimate(last_time * size / last_size, extrapolated=size > last_size)
        for (s0, t0), (s1, t1) in zip(points, points[1:]):
            if s0 <= size <= s1:
                if size == s0:
                    return Estimate(t0)
                fraction = math.log(size / s0) / math.log(s1 / s0)
                return Estimate(math.exp(math.log(t0) + fraction * math.log(t1 / t0)))
        raise AssertionError("unreachable")


# --------------------------------------------------------------------------- the model

@dataclass
class Workload:
    params: float  # P
    world_size: int  # N
    gpu_mem_gb: float
    bucket_bytes: float = 25e6
    prefetch_bytes: float = 50e6
    hidden: int = 0
    layers: int = 0
    seq: int = 0
    micro_batch: int = 1
    tp: int = 0  # tensor-parallel degree; 0: not estimated
    pp: int = 0  # pipeline stages; 0: not estimated
    micro_batches: int = 1
    element_size: int = 2  # bytes of a weight, gradient or activation element (fp16/bf16: 2)
    # DeepSpeed's reduce_bucket_size / allgather_bucket_size (elements; its default 5e8)
    zero_bucket_elements: float = 5e8
    # ZeRO-1/2's all_gather of the updated partitions, in messages of this many elements (None:
    # zero_bucket_elements; DeepSpeed 0.19.8 gathers each partition in one all_gather_into_tensor
    # whatever allgather_bucket_size says, which infinity stands for)
    allgather_bucket_elements: float | None = None
    # ZeRO-3's reduce_scatter in messages of this many bytes (None: prefetch_bytes)
    reduce_scatter_bytes: float | None = None
    # ZeRO-3: parameters still gathered at the turn from forward to backward, not gathered again
    # in backward (DeepSpeed keeps a parameter whose next use is within stage3_max_reuse_distance)
    stage3_kept_elements: float = 0
    # DeepSpeed's stage3_max_live_parameters (elements; its default 1e9): a model within it
    # keeps its gathered parameters from forward to backward, with no re-gather
    stage3_max_live: float = 1e9

    @property
    def activation_bytes(self):
        """One micro-batch's activations at a layer boundary: b·s·h·element size."""
        return self.micro_batch * self.seq * self.hidden * self.element_size

    @property
    def regathers(self):
        """ZeRO-3 gathers the parameters again in backward: only when the model is beyond what
        stage3_max_live_parameters keeps gathered (measured: a 0.9M-parameter model under the
        default 1e9 gathered once per step; with 1e5, in forward and backward)."""
        return self.params > self.stage3_max_live


@dataclass
class Collective:
    op: str  # the suite's op name
    message: float  # bytes, in the suite's Size convention for that op
    count: int  # how many per step
    moved: float  # bytes each rank sends per call (ring algorithms)
    # The --groups layout whose curve prices it, when the run has both: tensor parallelism
    # within a host (intra), data parallelism and pipeline stages between hosts (inter).
    layout: str = "inter"


@dataclass
class Plan:
    name: str
    memory: float  # model-state bytes per rank
    collectives: list = field(default_factory=list)
    note: str = ""  # for the table
    price: str = ""  # what it costs besides communication, for the recommendation

    @property
    def bytes_per_step(self):
        return sum(c.count * c.moved for c in self.collectives)


def _bucketed(op, total, bucket, n, moved_per_byte, size_of_message):
    """`total` bytes in messages of `bucket` bytes (the last one smaller)."""
    full, rest = divmod(total, bucket)
    pieces = [Collective(op, size_of_message(bucket), int(full), bucket * moved_per_byte)]
    if rest:
        pieces.append(Collective(op, size_of_message(rest), 1, rest * moved_per_byte))
    return [p for p in pieces if p.count]


def plans(w):
    """Model-state memory and the collectives of one step for each strategy.

    ZeRO-1 and ZeRO-2 as DeepSpeed 0.19.8 runs them, measured (parallel_bench.py,
    tests/fixtures/strategies_2ranks.jsonl): the gradients are all-reduced in reduce_bucket_size
    buckets (not reduce-scattered, as the ZeRO paper has it), then each rank's updated partition
    is all-gathered; ZeRO-1 reduces once per step, ZeRO-2 in every micro-batch of the gradient
    accumulation (it keeps only its partition of the gradients). ZeRO-3 all-gathers the
    parameters in forward, again in backward only when the model exceeds
    stage3_max_live_parameters, and reduce-scatters the gradients, in every micro-batch."""
    p, n = w.params, w.world_size
    gradients = w.element_size * p  # bytes, as are the weights
    # Model states per parameter: weights and gradients of the element size, and Adam's: with
    # 2-byte elements (mixed precision) an fp32 master copy, momentum and variance (K = 12, the
    # ZeRO paper's), with fp32 ones momentum and variance alone (8). Both total 16 bytes.
    weight = grad = w.element_size
    k = 12 if w.element_size == 2 else 8
    states = weight + grad + k
    ring = (n - 1) / n
    def whole(b):
        return b

    def per_rank(b):  # all_gather's Size is the input of one rank
        return b / n
    zero_bucket = w.zero_bucket_elements * w.element_size
    m = w.micro_batches  # gradient accumulation steps
    gather_bucket = zero_bucket if w.allgather_bucket_elements is None else \
        w.allgather_bucket_elements * w.element_size
    gathered = _bucketed("all_gather", gradients, gather_bucket, n, ring, per_rank)
    gathers = 2 if w.regathers else 1
    result = [
        Plan("DDP", states * p,
             _bucketed("all_reduce", gradients, w.bucket_bytes, n, 2 * ring, whole)),
        Plan("ZeRO-1", (weight + grad) * p + k * p / n,
             _bucketed("all_reduce", gradients, zero_bucket, n, 2 * ring, whole) + gathered,
             note="DeepSpeed: all_reduce of the gradients once per step, all_gather of the "
                  "updated parameters"),
        # ZeRO-2 and ZeRO-3 keep only their gradient partition: they reduce every micro-batch
        Plan("ZeRO-2", weight * p + (grad + k) * p / n,
             _bucketed("all_reduce", m * gradients, zero_bucket, n, 2 * ring, whole) + gathered,
             note=f"DeepSpeed: all_reduce of the gradients in each of {m} micro-batch(es), "
                  "all_gather of the updated parameters"),
        Plan("ZeRO-3", states * p / n,
             _bucketed("all_gather", m * (gathers * gradients - (
                 w.stage3_kept_elements * w.element_size if w.regathers else 0)),
                 w.prefetch_bytes, n, ring, per_rank)
             + _bucketed("reduce_scatter", m * gradients,
                         w.reduce_scatter_bytes or w.prefetch_bytes, n, ring, whole),
             note="parameters gathered in forward" + (" and again in backward" if w.regathers
                                                      else " only (kept for backward)")
                  + f", gradients reduce-scattered, in each of {m} micro-batch(es)"),
    ]
    return result + _model_parallel(w, states, p)


def _model_parallel(w, states, p):
    """TP and PP's plans, when asked for (--tp, --pp)."""
    result = []
    if w.tp:
        if not w.activation_bytes or not w.layers:
            raise StrategyError("--tp needs --hidden, --layers, --seq and --micro-batch")
        t = w.tp
        result.append(Plan(f"TP={t}", states * p / t, [
            Collective("all_reduce", w.activation_bytes, 4 * w.layers * w.micro_batches,
                       w.activation_bytes * 2 * (t - 1) / t, layout="intra")],
            note=f"2 all_reduce per layer forward and 2 backward, within {t} ranks",
            price=f"splitting every layer across {t} ranks, which wants them in one node"))
    if w.pp:
        if not w.activation_bytes:
            raise StrategyError("--pp needs --hidden, --seq and --micro-batch")
        stages, m = w.pp, w.micro_batches
        bubble = (stages - 1) / (m + stages - 1)
        result.append(Plan(f"PP={stages}", states * p / stages, [
            Collective("pt2pt", w.activation_bytes, 2 * m, w.activation_bytes)],
            note=f"bubble {bubble:.0%} of the step ((p-1)/(m+p-1), m={m})",
            price=f"a pipeline bubble of {bubble:.0%} of the step"))
    return result


def price(plan, curves):
    """(seconds per step, extrapolated?, missing ops) of a plan on the measured curves."""
    seconds, extrapolated, missing = 0.0, False, []
    for c in plan.collectives:
        try:
            estimate = curves.time(c.op, c.message, c.layout)
        except KeyError:
            missing.append(c.op)
            continue
        seconds += c.count * estimate.seconds
        extrapolated |= estimate.extrapolated
    return seconds, extrapolated, sorted(set(missing))


# --------------------------------------------------------------------------- the report

def analyse(w, curves, measured_world_size=None):
    rows = []
    for plan in plans(w):
        seconds, extrapolated, missing = price(plan, curves)
        rows.append({
            "strategy": plan.name,
            "collectives": [{"op": c.op, "message_bytes": c.message, "count": c.count,
                             "curve": curves.curve(c.op, c.layout)} for c in plan.collectives],
            "bytes_per_rank_per_step": plan.bytes_per_step,
            "comm_seconds_per_step": None if missing else seconds,
            "extrapolated": extrapolated,
            "missing_ops": missing,
            "memory_bytes_per_rank": plan.memory,
            "fits": plan.memory <= w.gpu_mem_gb * GB,
            "note": plan.note,
            "price": plan.price,
        })
    warnings = []
    if measured_world_size and measured_world_size != w.world_size:
        warnings.append(f"the curves were measured on {measured_world_size} ranks, the estimate is "
                        f"for {w.world_size}: rerun the scan on {w.world_size} ranks for figures "
                        "that hold")
    layered = sorted({c["curve"] for row in rows for c in row["collectives"]
                      if c["curve"] != c["op"]})
    notes = []
    if layered:
        notes.append("priced on the --groups curves (a layout's slowest group): tensor "
                        "parallelism within a host, data parallelism and pipeline stages "
                        f"between hosts ({', '.join(layered)})")
    for op in sorted({op for row in rows for op in row["missing_ops"]}):
        warnings.append(f"the results have no {op}: run `run_all.py --scan "
                        f"--{op.replace('_', '-')}` on the same ranks, then report again")
    return {"params": w.params, "world_size": w.world_size, "gpu_mem_gb": w.gpu_mem_gb,
            "rows": rows, "warnings": warnings, "notes": notes,
            "recommendation": recommend(rows, w)}


def _time(row):
    if row["comm_seconds_per_step"] is None:
        return "unknown"
    mark = " (extrapolated)" if row["extrapolated"] else ""
    return units.duration(row["comm_seconds_per_step"]) + mark


def _traffic_change(row, base):
    change = row["bytes_per_rank_per_step"] / base["bytes_per_rank_per_step"] - 1
    return "the same traffic" if abs(change) < 0.001 else f"{change:+.0%} traffic"


def recommend(rows, w):
    """Gain, cost, and the conditions under which the choice changes. Among the data-parallel
    strategies that fit, the least measured communication time wins (within 5%, the one with
    less memory); without times for all of them, the least traffic."""
    data_parallel = [r for r in rows if r["strategy"] in ("DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3")]
    by_name = {r["strategy"]: r for r in rows}
    fitting = [r for r in data_parallel if r["fits"]]
    if not fitting:
        others = [r for r in rows if r["fits"] and r not in data_parallel]
        need = math.ceil(16 * w.params / (w.gpu_mem_gb * GB))
        text = (f"No data-parallel strategy fits {w.gpu_mem_gb:g} GB: even ZeRO-3 needs "
                f"{units.size(by_name['ZeRO-3']['memory_bytes_per_rank'])} per rank on "
                f"{w.world_size} ranks, so it needs at least {need} ranks")
        if others:
            text += "; " + ", ".join(f"{r['strategy']} fits "
                                     f"({units.size(r['memory_bytes_per_rank'])}, "
                                     f"{_time(r)} of communication)" for r in others)
        return text + "."
    timed = all(r["comm_seconds_per_step"] is not None for r in fitting)
    if timed:
        fastest = min(r["comm_seconds_per_step"] for r in fitting)
        near = [r for r in fitting if r["comm_seconds_per_step"] <= fastest * 1.05]
    else:
        least = min(r["bytes_per_rank_per_step"] for r in fitting)
        near = [r for r in fitting if r["bytes_per_rank_per_step"] <= least * 1.001]
    best = min(near, key=lambda r: r["memory_bytes_per_rank"])
    ddp = by_name["DDP"]
    cost = (f"{_time(best)} of communication per step" if timed else
            f"{units.size(best['bytes_per_rank_per_step'])} of traffic per rank per step")
    text = (f"{best['strategy']} fits {w.gpu_mem_gb:g} GB "
            f"({units.size(best['memory_bytes_per_rank'])} of model states per rank) and costs "
            f"{cost}")
    if best is not ddp:
        change = _traffic_change(best, ddp)
        text += (", the same traffic as DDP" if change == "the same traffic"
                 else f", {change} over DDP")
    leaner = sorted((r for r in fitting
                     if r["memory_bytes_per_rank"] < best["memory_bytes_per_rank"]),
                    key=lambda r: -r["memory_bytes_per_rank"])
    floor = best
    for row in leaner:
        text += (f"; {row['strategy']} only if memory must drop below "
                 f"{units.size(floor['memory_bytes_per_rank'])} per rank (to "
                 f"{units.size(row['memory_bytes_per_rank'])}), at {_traffic_change(row, best)}"
                 f" ({_time(row)})")
        floor = row
    if ddp["fits"] and best is not ddp:
        text += (f"; plain DDP also fits ({units.size(ddp['memory_bytes_per_rank'])}, "
                 f"{_time(ddp)})")
    for row in rows:  # model parallelism that fits and communicates less
        if row in data_parallel or not row["fits"] or row["comm_seconds_per_step"] is None \
                or not timed or row["comm_seconds_per_step"] >= best["comm_seconds_per_step"]:
            continue
        text += (f"; {row['strategy']} also fits ({units.size(row['memory_bytes_per_rank'])}) "
                 f"and communicates less ({_time(row)}), at the price of {row['price']}")
    return text + "."


def render(analysis, form):
    import json
    if form == "json":
        return json.dumps(analysis, indent=1)
    lines = [f"Model of {analysis['params']:.3g} parameters on {analysis['world_size']} ranks, "
             f"{analysis['gpu_mem_gb']:g} GB per rank", ""]
    lines += [f"> WARNING: {w}" for w in analysis["warnings"]]
    lines += [f"> {n}" for n in analysis.get("notes", [])]
    lines += ["| strategy | collectives | bytes per rank per step | comm time per step | "
              "model-state memory per rank | fits |", "|---|---|---|---|---|---|"]
    for row in analysis["rows"]:
        calls = "; ".join(f"{c['count']} x {c['curve']} of {units.size(c['message_bytes'])}"
                          for c in row["collectives"])
        if row["note"]:
            calls += f" ({row['note']})"
        lines.append(f"| {row['strategy']} | {calls} | "
                     f"{units.size(row['bytes_per_rank_per_step'])} | {_time(row)} | "
                     f"{units.size(row['memory_bytes_per_rank'])} | "
                     f"{'yes' if row['fits'] else 'no'} |")
    lines += ["", f"Recommendation: {analysis['recommendation']}"]
    return "\n".join(lines)
