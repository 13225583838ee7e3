"""`--ds-config-sweep KEY=V1,V2,...`: the figures of each value with their intervals, and which
value is best, with whether it is significantly better than the config's own.

A measured step is the unit of repetition (each after a barrier). Per value: the mean step time,
exposed communication and bytes per step, each with its 95% t-interval over the steps. Best:
the least mean step time. Against the config's own value: the ratio of the geometric mean step
times (best / own) with its 95% Welch interval on the log step times; significant when the
interval lies below 1. Standard library only.
"""

import math

from .. import units
from ..numbers import t975


def interval(values):
    """(mean, low, high): the mean and its 95% t-interval (the mean alone for one value)."""
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, mean, mean
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = t975(n - 1) * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def _log_moments(values):
    logs = [math.log(v) for v in values]
    n = len(logs)
    mean = sum(logs) / n
    variance = sum((x - mean) ** 2 for x in logs) / (n - 1) if n > 1 else 0.0
    return mean, variance / n, n - 1


def ratio_interval(best, own):
    """(ratio, low, high) of best's step time over own's: geometric means, 95% Welch interval."""
    mean_b, var_b, df_b = _log_moments(best)
    mean_a, var_a, df_a = _log_moments(own)
    variance = var_a + var_b
    denominator = sum(v ** 2 / df for v, df in ((var_a, df_a), (var_b, df_b)) if df > 0)
    df = variance ** 2 / denominator if denominator > 0 else 1e9
    half = t975(df) * math.sqrt(variance)
    diff = mean_b - mean_a
    return math.exp(diff), math.exp(diff - half), math.exp(diff + half)


def figures(record):
    """The row of one value: step, exposed communication, bytes per step, each (mean, low,
    high)."""
    return {"step_s": interval(record["step_times_s"]),
            "exposed_comm_s": interval(record["exposed_comm_per_step_s"]),
            "bytes_per_step": interval(record["comm_bytes_per_step"])}


def verdict(key, rows, own_label):
    """The sweep's summary: `rows` [(label, record)] in run order; a dict for the record and a
    sentence for the table."""
    means = {label: interval(record["step_times_s"])[0] for label, record in rows}
    best = min(means, key=means.get)
    result = {"type": "ds_config_sweep", "key": key, "values": [label for label, _ in rows],
              "best": best, "own": own_label, "step_mean_s": means}
    if own_label is None:
        result["significant"] = None
        result["sentence"] = (f"best: {key}={best} ({units.duration(means[best])} a step); the "
                              "file does not set it (DeepSpeed's default), so no row is the "
                              "config's own to compare with")
        return result
    if best == own_label:
        result["significant"] = False
        result["sentence"] = (f"best: {key}={best}, the config's own "
                              f"({units.duration(means[best])} a step): no other value is faster")
        return result
    records = dict(rows)
    ratio, low, high = ratio_interval(records[best]["step_times_s"],
                                      records[own_label]["step_times_s"])
    significant = high < 1
    result.update(significant=significant, ratio=ratio, ratio_ci=[low, high])
    result["sentence"] = (
        f"best: {key}={best} ({units.duration(means[best])} a step), {(1 - ratio) * 100:.0f}% "
        f"faster than the config's own {own_label} (step time ratio {ratio:.3f}, 95% interval "
        f"[{low:.3f}, {high:.3f}]): " + ("significantly better" if significant else
                                         "not significantly better (the interval reaches 1)"))
    return result
