"""A strategy's record: every rank's figures (measure's gather) made one, the slowest rank's
step times and their spread, the communication a step per op and how much of it was exposed,
memory, loss; with --ds-config, the bytes measured against the estimate for its buckets."""

import math
import statistics

from ..trace.accounting import OPS
from . import dsconfig
from .train import optimizer_config


def _median(values):
    return statistics.median(values)


def _p90(values):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.9 * len(ordered)) - 1)]


def _comm_summary(ranks, steps):
    """Per op, rank 0's calls, bytes and time a step, and every rank's bytes a step."""
    comm_summary, comm_per_rank = {}, {}
    for index, op in enumerate(OPS):
        def mean_of(rank_counts, field):
            return sum(c[3 * index + field] for c in rank_counts) / steps
        if not any(mean_of(r["calls"], 0) for r in ranks):
            continue
        rank0 = ranks[0]["calls"]
        comm_summary[op] = {"calls": mean_of(rank0, 0), "bytes": mean_of(rank0, 1),
                            "time_s": mean_of(rank0, 2)}
        comm_per_rank[op] = [mean_of(r["calls"], 1) for r in ranks]
    return comm_summary, comm_per_rank


def strategy_record(run, name, ranks, built, memory):
    """A strategy's record from every rank's named figures (measure's gather)."""
    args, settings, samples = run.args, built["settings"], built["samples"]
    n, steps = run.comm.world_size, args.steps
    step_times = [max(r["step_s"][k] for r in ranks) for k in range(steps)]
    median = _median(step_times)
    blocked = [max(r["calls"][k][-1] for r in ranks) for k in range(steps)]
    comm_summary, comm_per_rank = _comm_summary(ranks, steps)
    if name == "ddp":
        no_sync = [max(r["no_sync_s"][k] for r in ranks) for k in range(steps)]
        exposed, method = max(0.0, median - _median(no_sync)), "no_sync difference"
        settings["no_sync_step_time_s"] = _spread(no_sync)
        settings["no_sync_step_times_s"] = no_sync
    else:
        exposed, method = _median(blocked), "blocked in calls"
    settings["optimizer"] = optimizer_config()
    settings["lm_head"] = "untied"
    settings["malloc_mmap_threshold"] = run.malloc
    # What each rank held before the strategy was built (libraries, earlier strategies' leftovers):
    # peak minus this is about what the strategy itself took.
    settings["memory_before_setup_bytes_per_rank"] = [int(r["before"]) for r in ranks]
    # After each measured step, the most a rank held (VmRSS or allocated): growth from step to
    # step is the allocator's (see settle_malloc), not the strategy's.
    settings["memory_after_step_bytes"] = [int(max(r["held"][k] for r in ranks))
                                           for k in range(steps)]
    if memory.source == "rss_high_water":
        settings["rss_high_water_reset"] = memory.reset_done
    record = {
        "type": "strategy", "strategy": name, "world_size": n, "dp": built["dp"],
        "tp": built["tp"], "pp": built["pp"],
        "params": run.model_config.params,
        "params_per_rank": [int(r["params"]) for r in ranks],
        "dtype": args.dtype, "steps": steps,
        "step_time_s": _spread(step_times),
        "step_times_s": step_times,
        "samples_per_s": samples / median,
        "tokens_per_s": samples * args.seq / median,
        "peak_memory_bytes_per_rank": [int(r["peak"]) for r in ranks],
        "memory_source": memory.source,
        "loss": [None if math.isnan(x) else x for x in ranks[built["loss_rank"]]["losses"]],
        "comm": comm_summary,
        "comm_bytes_per_rank": comm_per_rank,
        "exposed_comm_s": exposed,
        "exposed_method": method,
        "compute_s": median - exposed,
        "config": settings,
        # per measured step: the slowest rank's time blocked in calls, rank 0's bytes (all ops)
        "exposed_comm_per_step_s": blocked,
        "comm_bytes_per_step": [sum(ranks[0]["calls"][k][3 * i + 1] for i in range(len(OPS)))
                                for k in range(steps)],
    }
    if run.user is not None and name.startswith("zero"):
        record.update(user_config_figures(run, record))
    return record


def user_config_figures(run, record):
    """--ds-config: which file ran (and the sweep's value), the estimate for its buckets and the
    measured bytes against it, op by op (the strategy's own traffic: ops of 1 KiB a step or
    more; DeepSpeed's few-byte flags and norms left out)."""
    identity = dict(run.user.identity())
    if run.user.sweep_key:
        identity.update(sweep_key=run.user.sweep_key, sweep_value=run.ds_label)
    estimated = dsconfig.estimate(run.ds_variant, run.model_config, record["world_size"],
                                  run.dtype.itemsize)
    measured = {op: v["bytes"] for op, v in record["comm"].items()
                if op != "barrier" and v["bytes"] >= 1024}
    ratios = {op: measured.get(op, 0.0) / figures["bytes"] if figures["bytes"] else None
              for op, figures in estimated.items()}
    ratios.update({op: None for op in measured if op not in estimated})
    return {"ds_config": identity, "estimate": estimated, "bytes_vs_estimate": ratios}


def _spread(values):
    return {"median": _median(values), "min": min(values), "max": max(values), "p90": _p90(values)}
