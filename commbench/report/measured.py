"""`report.py strategy CURVES --measured RUNS`: the strategies parallel_bench.py measured, held
against what report.py strategy estimates for the same model on the same ranks from the
collective curves; every strategy against DDP; a recommendation from the measured figures.
Standard library only (but for the plot).

A strategy run's record (parallel_bench.py, `"type": "strategy"`) holds its step time, memory,
loss and, per op, the calls, bytes (the suite's Size convention) and time per step.
"""

import json
import math

from .. import units
from . import strategy
from .runs import ReportError

PLAN_NAMES = {"ddp": "DDP", "zero1": "ZeRO-1", "zero2": "ZeRO-2", "zero3": "ZeRO-3"}
ORDER = ("ddp", "zero1", "zero2", "zero3", "tp", "pp")
OFF = 0.10  # a measured/estimated ratio beyond 1 +- this is called wrong
TINY = 1024  # bytes per step below which an op is bookkeeping, not the strategy's traffic


def load(path):
    """(meta, records) of a parallel_bench.py results file; a file that is not one is an error
    naming it."""
    try:
        with open(path) as handle:
            lines = [json.loads(line) for line in handle if line.strip()]
    except OSError as error:
        raise ReportError(f"cannot read {path}: {error.strerror}") from None
    except ValueError as error:
        raise ReportError(f"{path}: not a results file of parallel_bench.py ({error})") from None
    meta: dict = next((line for line in lines if line.get("type") == "meta"), {})
    records = [line for line in lines if line.get("type") == "strategy"]
    if meta.get("kind") != "strategies" or not records:
        raise ReportError(f"{path}: no strategy runs in it (write one with parallel_bench.py "
                          "--output)")
    records.sort(key=lambda r: ORDER.index(r["strategy"]) if r["strategy"] in ORDER else 99)
    return meta, records


def workload(meta, records, gpu_mem_gb, **extra):
    """The Workload report.py strategy estimates for the measured model and ranks."""
    model, n = meta["model"], meta["world_size"]
    degrees = {r["strategy"]: r for r in records}
    ddp = degrees.get("ddp", {}).get("config", {})
    bucket = ddp.get("bucket_cap_mb")
    if bucket:
        extra.setdefault("bucket_bytes", bucket * 2 ** 20)
    zero3 = _zero_config(degrees.get("zero3"))
    if "stage3_max_live_parameters" in zero3:
        extra.setdefault("stage3_max_live", float(zero3["stage3_max_live_parameters"]))
    if "stage3_prefetch_bucket_size" in zero3:
        extra.setdefault("prefetch_bytes",
                         float(zero3["stage3_prefetch_bucket_size"]) * model["element_size"])
    zero12: dict = next((_zero_config(degrees[s]) for s in ("zero1", "zero2") if s in degrees), {})
    if "reduce_bucket_size" in zero12:
        extra.setdefault("zero_bucket_elements", float(zero12["reduce_bucket_size"]))
    return strategy.Workload(
        params=model["params"], world_size=n, gpu_mem_gb=gpu_mem_gb, hidden=model["hidden"],
        layers=model["layers"], seq=model["seq"], micro_batch=model["micro_batch"],
        micro_batches=model["micro_batches"], element_size=model["element_size"],
        tp=degrees.get("tp", {}).get("tp", 0), pp=degrees.get("pp", {}).get("pp", 0), **extra)


def _zero_config(record):
    """The zero_optimization section of a ZeRO run's DeepSpeed config, or {}."""
    config = (record or {}).get("config", {})
    return config.get("deepspeed", config).get("zero_optimization", {})


def _plan_name(record):
    return PLAN_NAMES.get(record["strategy"]) or \
        f"{record['strategy'].upper()}={record[record['strategy']]}"


def _ratio(measured, estimated):
    return measured / estimated if estimated else None


def _by_op(collectives):
    found: dict = {}
    for c in collectives:
        found[c.op] = found.get(c.op, 0.0) + c.count * c.message
    return found


def analyse(meta, records, curves, w):
    """Per measured strategy: measured against estimated (bytes per step by op, comm time,
    memory, step time), against DDP, and what the estimate got wrong."""
    plans = {plan.name: plan for plan in strategy.plans(w)}
    rows = []
    for r in records:
        plan = plans.get(_plan_name(r))
        # bookkeeping messages (DeepSpeed's overflow flag, a few bytes) are not the strategy's
        measured_ops = {op: v for op, v in r["comm"].items()
                        if op != "barrier" and v["bytes"] >= TINY}
        measured_bytes = sum(v["bytes"] for v in measured_ops.values())
        measured_time = sum(v["time_s"] for v in measured_ops.values())
        estimated_ops = _by_op(plan.collectives) if plan else {}
        seconds, extrapolated, missing = strategy.price(plan, curves) if plan else (None, False, [])
        estimated_time = None if missing or plan is None else seconds
        step = r["step_time_s"]["median"]
        memory = max(r["peak_memory_bytes_per_rank"])
        before = r.get("config", {}).get("memory_before_setup_bytes_per_rank")
        grown = max(peak - start for peak, start in zip(r["peak_memory_bytes_per_rank"], before)) \
            if before else None
        rows.append({
            "strategy": r["strategy"], "plan": _plan_name(r),
            "step_s": step, "step_spread_s": [r["step_time_s"]["min"], r["step_time_s"]["max"]],
            "tokens_per_s": r["tokens_per_s"], "samples_per_s": r["samples_per_s"],
            "compute_s": r["compute_s"], "exposed_comm_s": r["exposed_comm_s"],
            "exposed_method": r["exposed_method"],
            "memory_bytes": memory, "memory_per_rank": r["peak_memory_bytes_per_rank"],
            "memory_above_start_bytes": grown,
            # what strategies are compared on: the growth over the rank's start when known (the
            # strategies run one after another in one process, each starting from what the
            # earlier left and DeepSpeed's import), else the peak
            "memory_compared_bytes": memory if grown is None else grown,
            "estimated_states_bytes": plan.memory if plan else None,
            "bytes": measured_bytes, "estimated_bytes": sum(estimated_ops.values()),
            "bytes_ratio": _ratio(measured_bytes, sum(estimated_ops.values())),
            "comm_s": measured_time, "estimated_comm_s": estimated_time,
            "comm_ratio": _ratio(measured_time, estimated_time),
            "extrapolated": extrapolated,
            # no overlap assumed: the strategy's measured compute plus the estimated comm
            "estimated_step_s": None if estimated_time is None else r["compute_s"] + estimated_time,
            "step_ratio": _ratio(step, None if estimated_time is None else
                                 r["compute_s"] + estimated_time),
            "ops": {op: {"calls": v["calls"], "bytes": v["bytes"], "time_s": v["time_s"],
                         "estimated_bytes": estimated_ops.get(op, 0.0)}
                    for op, v in measured_ops.items()},
            "estimated_only": {op: b for op, b in estimated_ops.items() if op not in measured_ops},
            "loss": [r["loss"][0], r["loss"][-1]],
        })
    for row in rows:
        row["wrong"] = _where_wrong(row)
    base = next((row for row in rows if row["strategy"] == "ddp"), None)
    return {"model": meta["model"], "world_size": meta["world_size"],
            "hostnames": meta.get("hostnames"), "steps": records[0].get("steps"),
            "rows": rows, "baseline": base and base["strategy"],
            "picked_by": "tokens_per_s",
            "recommended": best_row(rows)["strategy"] if rows else None,
            "recommendation": recommend(rows, base)}


def _where_wrong(row):
    """Sentences on where the estimate missed the measurement, and why as far as it shows."""
    said = []
    for op, figures in row["ops"].items():
        estimated = figures["estimated_bytes"]
        if not estimated:
            said.append(f"it has no {op}; {units.size(figures['bytes'])} per step were measured")
        elif abs(figures["bytes"] / estimated - 1) > OFF:
            said.append(f"{op} {units.size(figures['bytes'])} per step measured against "
                        f"{units.size(estimated)} estimated ({figures['bytes'] / estimated:.2f}x)")
    for op, estimated in row["estimated_only"].items():
        said.append(f"it expects {units.size(estimated)} of {op} per step, which the run never "
                    "issued")
    if row["comm_ratio"] and abs(row["comm_ratio"] - 1) > 0.5:
        if row["comm_ratio"] < 1:
            why = "faster than alone: messages overlapping each other"
        elif row["strategy"] == "pp":
            why = ("a receive waits for the other stage to compute its micro-batch, the "
                   "pipeline's bubble, which back-to-back messages of the curves never do")
        else:
            why = ("the curves were measured with nothing else running; in a step the "
                   "collectives share the cores with compute and with each other")
        said.append(f"communication took {row['comm_ratio']:.2f}x the time the collective curves "
                    f"give for these messages ({why})")
    return said


def _pct(ratio):
    return f"{(ratio - 1) * 100:+.0f}%"


def best_row(rows):
    """The strategy recommended: the most tokens/s. Not the shortest step: a step of TP or PP
    trains the samples of one data-parallel replica, a step of DDP or ZeRO those of every rank,
    so a shorter step can train fewer tokens a second."""
    return max(rows, key=lambda r: r["tokens_per_s"]) if rows else None


def _tokens_per_step(row):
    return row["tokens_per_s"] * row["step_s"]


def recommend(rows, base):
    """From the measured figures: the highest throughput (tokens/s, the figure it picks by), its
    gain and cost against DDP, the shortest step where another strategy has it (and the tokens
    it trains), and when each leaner strategy is the choice."""
    if not rows:
        return "Nothing was measured."
    best = best_row(rows)
    text = (f"{best['plan']} trains fastest by tokens/s, the figure it is picked by (in bold in "
            f"the table; not step time: strategies train different numbers of tokens a step): "
            f"{best['tokens_per_s']:.0f} tokens/s (a step of {units.duration(best['step_s'])}), "
            f"{units.size(best['memory_compared_bytes'])} of memory per rank{_what(best)}")
    if base is not None and best is not base and base["bytes"]:
        text += (f"; against DDP {_pct(best['tokens_per_s'] / base['tokens_per_s'])} tokens/s, "
                 f"{_pct(best['memory_compared_bytes'] / base['memory_compared_bytes'])} memory, "
                 f"{_pct(best['bytes'] / base['bytes'])} traffic")
    elif base is best:
        text += "; the baseline is the choice"
    shortest = min(rows, key=lambda r: r["step_s"])
    if shortest is not best and shortest["step_s"] < best["step_s"]:
        text += (f"; {shortest['plan']} has the shortest step "
                 f"({units.duration(shortest['step_s'])})"
                 f" but trains {_tokens_per_step(shortest):.0f} tokens a step to {best['plan']}'s "
                 f"{_tokens_per_step(best):.0f}: {shortest['tokens_per_s']:.0f} tokens/s")
    # the trade-offs worth making: each strategy leaner than every faster one
    floor = best
    for row in sorted(rows, key=lambda r: -r["tokens_per_s"]):
        if row["memory_compared_bytes"] >= floor["memory_compared_bytes"]:
            continue
        text += (f"; {row['plan']} when memory must drop below "
                 f"{units.size(floor['memory_compared_bytes'])} per rank: it measured "
                 f"{units.size(row['memory_compared_bytes'])} "
                 f"({_pct(row['memory_compared_bytes'] / best['memory_compared_bytes'])}) at "
                 f"{_pct(row['tokens_per_s'] / best['tokens_per_s'])} tokens/s")
        floor = row
    exposed = max(rows, key=lambda r: r["exposed_comm_s"] / r["step_s"] if r["step_s"] else 0)
    if exposed["step_s"] and exposed["exposed_comm_s"] / exposed["step_s"] > 0.25:
        text += (f"; {exposed['plan']} spends {exposed['exposed_comm_s'] / exposed['step_s']:.0%} "
                 "of its step in exposed communication: a faster network or more overlap "
                 "helps it most")
    return text + "."


def _what(row):
    return "" if row["memory_above_start_bytes"] is None else " above its start"


def _cell(value, scale=1.0, digits=1):
    return "-" if value is None else f"{value * scale:.{digits}f}"


def _tokens(row, analysis):
    figure = f"{row['tokens_per_s']:.0f}"
    return f"**{figure}**" if row["strategy"] == analysis.get("recommended") else figure


def _r(value):
    return "-" if value is None or math.isnan(value) else f"{value:.2f}"


def _against_baseline(analysis):
    """The table of each strategy against DDP's figures (none without a DDP row)."""
    lines = []
    base = next((r for r in analysis["rows"] if r["strategy"] == analysis["baseline"]), None)
    if base:
        lines += ["### Against DDP (baseline)", "",
                  "| strategy | step time | tokens/s | memory (above start) | traffic "
                  "| exposed comm | loss first -> last |", "|---|---|---|---|---|---|---|"]
        for row in analysis["rows"]:
            traffic = _pct(row["bytes"] / base["bytes"]) if base["bytes"] else "-"
            lines.append(
                f"| {row['plan']} | {units.duration(row['step_s'])} "
                f"({_pct(row['step_s'] / base['step_s'])}) "
                f"| {row['tokens_per_s']:.0f} ({_pct(row['tokens_per_s'] / base['tokens_per_s'])}) "
                f"| {units.size(row['memory_compared_bytes'])} "
                f"({_pct(row['memory_compared_bytes'] / base['memory_compared_bytes'])}) "
                f"| {units.size(row['bytes'])} ({traffic}) "
                f"| {units.duration(row['exposed_comm_s'])} "
                f"| {row['loss'][0]:.3f} -> {row['loss'][1]:.3f} |")
        lines.append("")
    return lines


def render(analysis, form):
    if form == "json":
        return json.dumps(analysis, indent=1)
    model = analysis["model"]
    lines = [f"Measured strategies: a model of {model['params'] / 1e6:.3g}M parameters "
             f"({model['layers']} layers, hidden {model['hidden']}, sequence {model['seq']}, "
             f"{model['micro_batches']} micro-batches of {model['micro_batch']}, {model['dtype']}) "
             f"on {analysis['world_size']} ranks, median of {analysis['steps']} steps", "",
             "### Measured against estimated", "",
             "| strategy | step time (ms) | est. | ratio | tokens/s | comm bytes per step (MiB) "
             "| est. | ratio | comm time per step (ms) | est. | ratio | exposed comm (ms) "
             "| peak memory per rank (MiB) | above start (MiB) | est. model states (MiB) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in analysis["rows"]:
        lines.append(
            f"| {row['plan']} | {_cell(row['step_s'], 1e3)} "
            f"| {_cell(row['estimated_step_s'], 1e3)} "
            f"| {_r(row['step_ratio'])} | {_tokens(row, analysis)} "
            f"| {_cell(row['bytes'], 2 ** -20, 3)} "
            f"| {_cell(row['estimated_bytes'], 2 ** -20, 3)} | {_r(row['bytes_ratio'])} "
            f"| {_cell(row['comm_s'], 1e3)} | {_cell(row['estimated_comm_s'], 1e3)}"
            f"{' (extrapolated)' if row['extrapolated'] else ''} | {_r(row['comm_ratio'])} "
            f"| {_cell(row['exposed_comm_s'], 1e3)} | {_cell(row['memory_bytes'], 2 ** -20, 0)} "
            f"| {_cell(row['memory_above_start_bytes'], 2 ** -20, 0)} "
            f"| {_cell(row['estimated_states_bytes'], 2 ** -20, 1)} |")
    lines += ["", "Estimated step = the strategy's measured compute + the estimated communication, "
              "none of it hidden. Tokens/s (the recommendation's figure, its best in bold) = the "
              "tokens a step trains / the step time. Peak memory is each rank's high-water mark "
              "over the measured steps (resident memory on CPU: the process, activations and "
              "buffers as well as the model states the estimate counts); above start, that peak "
              "less what the rank held before the strategy was set up (the largest over ranks).",
              ""]
    lines += _against_baseline(analysis)
    lines += ["### Communication per step, measured (rank 0)", "",
              "| strategy | op | calls | bytes (MiB) | estimated (MiB) | time (ms) |",
              "|---|---|---|---|---|---|"]
    for row in analysis["rows"]:
        for op, figures in row["ops"].items():
            lines.append(f"| {row['plan']} | {op} | {figures['calls']:g} "
                         f"| {figures['bytes'] / 2 ** 20:.3f} "
                         f"| {figures['estimated_bytes'] / 2 ** 20:.3f} "
                         f"| {figures['time_s'] * 1e3:.2f} |")
    lines += ["", "### Where the estimate was wrong", ""]
    wrong = [row for row in analysis["rows"] if row["wrong"]]
    lines += [f"- {row['plan']}: " + "; ".join(row["wrong"]) + "." for row in wrong] or \
        ["- nowhere beyond 10% in bytes or 50% in time."]
    lines += ["", f"Recommendation: {analysis['recommendation']}"]
    return "\n".join(lines)


def plot(analysis, output):
    """Step time split into compute and exposed communication, and peak memory per rank, per
    strategy."""
    from .plot import pyplot, save
    plt = pyplot()
    rows = analysis["rows"]
    names = [row["plan"] for row in rows]
    figure, (steps, memory) = plt.subplots(1, 2, figsize=(12, 4.2))
    compute = [row["compute_s"] * 1e3 for row in rows]
    exposed = [row["exposed_comm_s"] * 1e3 for row in rows]
    steps.bar(names, compute, label="compute")
    steps.bar(names, exposed, bottom=compute, label="exposed communication")
    estimated = [row["estimated_step_s"] * 1e3 if row["estimated_step_s"] else float("nan")
                 for row in rows]
    steps.plot(names, estimated, "k_", markersize=24, mew=2, label="estimated step")
    steps.set_ylabel("ms per step (median)")
    steps.set_title("step time")
    steps.legend(fontsize="small")
    ranks = len(rows[0]["memory_per_rank"])
    width = 0.8 / ranks
    for rank in range(ranks):
        memory.bar([i + (rank - (ranks - 1) / 2) * width for i in range(len(rows))],
                   [row["memory_per_rank"][rank] / 2 ** 20 for row in rows], width,
                   label=f"rank {rank}")
    memory.set_xticks(range(len(rows)), names)
    memory.set_ylabel("MiB (peak)")
    memory.set_title("peak memory per rank")
    memory.legend(fontsize="small")
    for axis in (steps, memory):
        axis.grid(True, axis="y", alpha=0.3)
    figure.suptitle(f"{analysis['model']['params'] / 1e6:.3g}M parameters on "
                    f"{analysis['world_size']} ranks")
    figure.tight_layout()
    save(figure, output)
    return figure
