"""`report.py compare`: two runs size by size, the ratio of their durations, the geometric
mean at latency-bound (< 64 KiB) and bandwidth-bound (>= 1 MiB) sizes, and a verdict where the
runs hold the evidence for one. Two runs of one window each get their ratios and no verdict,
with what would let it judge (--repeat, or --db: report/history.py judges them against the
database's run-to-run spread).

When both runs timed their sizes in several windows (--repeat), each ratio gets a 95% interval
from the windows (the unit of repetition): Welch's t-interval of the difference of the mean
log window durations, so the ratio's interval is exp of it. A size is marked only when its
interval excludes 1 and the change is beyond the noise threshold (as criterion.rs does), and
the verdict of a group of sizes (the mean log ratio over them, its variance the sum of theirs)
says "no significant difference" when that is what the windows show. Welch rather than a
percentile bootstrap: with 5 windows a side the bootstrap's intervals come out too narrow
(they ignore the t tails and shrink the spread by (n-1)/n), which doubled the false alarms
between two runs of one command here (docs/report.md)."""

import json
import math

from .. import units
from ..numbers import t975
from .runs import bandwidth, bandwidth_label, op_order

SMALL = 64 * 1024  # below: latency-bound messages
LARGE = 1024 * 1024  # from here: bandwidth-bound messages


def geometric_mean(values):
    values = [v for v in values if v > 0]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def _percent(ratio):
    return f"{(ratio - 1) * 100:+.0f}%"


# What would let compare judge two runs that have one window each (their ratios carry no
# uncertainty): said where a verdict would stand, so that it is read before the ratios.
TO_JUDGE = ("one window a run cannot tell a change from the run-to-run noise; to judge, run both "
            "with --repeat 5, or give --db URL with a database that holds earlier runs of this "
            "command (docs/history.md)")


def _ratio_at(ratio, where):
    return f"B/A {ratio:.3f} at {where} messages" if ratio else f"no {where} messages to compare"


def verdict(op, small, large):
    """Two runs of one window each: the geometric mean ratios and no claim, with what would let
    it judge. (Their ratios carry no uncertainty: one window of a shared machine can be off by
    2x, and a sentence of "faster" or "slower" on them is read as a finding.)"""
    return (f"{op}: {_ratio_at(small, 'small')}, {_ratio_at(large, 'large')} (geometric means); "
            f"no verdict: {TO_JUDGE}.")


def _log_moments(windows):
    """(mean, variance of that mean, degrees of freedom) of the log window durations."""
    logs = [math.log(w) for w in windows if w > 0]
    n = len(logs)
    mean = sum(logs) / n
    variance = sum((x - mean) ** 2 for x in logs) / (n - 1)
    return mean, variance / n, n - 1


def _welch(parts):
    """(difference of means, 95% half-width) from [(mean B - mean A, var A, df A, var B, df B)]
    averaged over the parts (a size, or the sizes of a group): Welch-Satterthwaite df."""
    k = len(parts)
    diff = sum(p[0] for p in parts) / k
    terms = [(v, df) for p in parts for v, df in ((p[1], p[2]), (p[3], p[4]))]
    variance = sum(v for v, _ in terms) / k ** 2
    denominator = sum((v / k ** 2) ** 2 / df for v, df in terms if df > 0)
    df = variance ** 2 / denominator if denominator > 0 else 1e9
    return diff, t975(df) * math.sqrt(variance)


def _significance(row, windows_a, windows_b, noise):
    """Adds the 95% interval of B/A to a row; returns the row's part for the group verdicts."""
    mean_a, var_a, df_a = _log_moments(windows_a)
    mean_b, var_b, df_b = _log_moments(windows_b)
    part = (mean_b - mean_a, var_a, df_a, var_b, df_b)
    diff, half = _welch([part])
    low, high = math.exp(diff - half), math.exp(diff + half)
    row["ratio_ci"] = [low, high]
    # the interval in seconds, on A's mean: what a delay added to every trial should fall in
    row["diff_ci_s"] = [row["duration_a"] * (low - 1), row["duration_a"] * (high - 1)]
    row["windows"] = [len(windows_a), len(windows_b)]
    row["significant"] = low > 1 or high < 1
    row["within_noise"] = row["significant"] and abs(row["ratio"] - 1) < noise
    row["marked"] = row["significant"] and not row["within_noise"]
    return part


def _group(rows, parts, where, noise):
    """The verdict of one group of sizes: the mean log ratio over them and its interval."""
    chosen = [i for i, r in enumerate(rows) if where(r["size"]) and i in parts]
    if not chosen:
        return None
    diff, half = _welch([parts[i] for i in chosen])
    point, low, high = math.exp(diff), math.exp(diff - half), math.exp(diff + half)
    significant = low > 1 or high < 1
    return {"ratio": point, "ci": [low, high], "significant": significant, "sizes": len(chosen),
            "within_noise": significant and abs(point - 1) < noise}


def _with_interval(group):
    return (f"{_percent(group['ratio'])} [{_percent(group['ci'][0])}, "
            f"{_percent(group['ci'][1])}]")


def uncertain_verdict(op, small, large, label_b, noise):
    """The verdict with intervals: per group, no significant difference, a change within the
    noise threshold, or the change with its interval."""
    def part(group, where):
        if group is None:
            return f"no repeated {where} messages to compare"
        if not group["significant"]:
            return f"no significant difference at {where} messages ({_with_interval(group)})"
        if group["within_noise"]:
            return (f"a change within the {noise * 100:g}% noise threshold at {where} messages "
                    f"({_with_interval(group)})")
        how = "slower" if group["ratio"] > 1 else "faster"
        return f"{how} at {where} messages: {_with_interval(group)}"
    return f"{op}: {label_b}: {part(small, 'small')}; {part(large, 'large')}."


# The words of a Run's op key after the op (runs.record_key) that are not its dtype.
_LAYOUT_WORDS = {"intra": "intra-host groups", "inter": "inter-host groups",
                 "split": "--split groups", "split-aggregate": "--split groups together"}


def _variant_words(key):
    """What an op key says was measured, in the flags' words: `pt2pt both-ways` ->
    ["--bidirectional"], `pt2pt` -> ["one way"], `all_reduce bfloat16 intra` -> ["dtype
    bfloat16", "intra-host groups"]."""
    op, *words = key.split()
    said = []
    for word in words:
        if word == "both-ways":
            said.append("--bidirectional")
        elif word.startswith("pairs-"):
            said.append(f"--pairs {word[len('pairs-'):]}")
        elif word in _LAYOUT_WORDS:
            said.append(_LAYOUT_WORDS[word])
        else:
            said.append(f"dtype {word}")
    if op == "pt2pt":
        if not any(word.startswith("--pairs") for word in said):
            said.insert(0, "--pairs one")
        if "--bidirectional" not in said:
            said.append("one way")
    return said


def _apart(mine, theirs):
    """The words of `mine` that `theirs` lacks; where none, what `mine` is by default."""
    said = [word for word in mine if word not in theirs]
    if said:
        return " ".join(said)
    return "the whole world" if any(w in _LAYOUT_WORDS.values() for w in theirs) else "as run"


def _dtype_keyed(run, other):
    """`run`'s op keys as `other`'s are made: a run of one dtype keys its ops bare, one of
    several (or a saved table that names its dtype) as `op dtype`; {key as other's: key}."""
    theirs = {word for key in other.ops for word in key.split()[1:2]
              if f"dtype {word}" in _variant_words(key)}
    if not theirs or not run.dtype:
        return {key: key for key in run.ops}
    keyed = {}
    for key in run.ops:
        op, *words = key.split()
        named = words[:1] and f"dtype {words[0]}" in _variant_words(key)
        keyed[key if named else " ".join([op, str(run.dtype), *words])] = key
    return keyed


def match(a, b):
    """[(op, key in A or None, key in B or None, difference or None)]: the op keys of both runs
    matched by everything that changes what was measured (the op, dtype, --groups layout, pt2pt's
    --pairs and --bidirectional). Where an op was measured once in each run, but not alike, the
    two are set side by side and `difference` names how they differ."""
    keyed_a, keyed_b = _dtype_keyed(a, b), _dtype_keyed(b, a)
    matched: list[tuple] = [(k, keyed_a[k], keyed_b[k], None) for k in keyed_a if k in keyed_b]
    only_a = [k for k in keyed_a if k not in keyed_b]
    only_b = [k for k in keyed_b if k not in keyed_a]
    for op in dict.fromkeys(k.split()[0] for k in only_a):
        mine = [k for k in only_a if k.split()[0] == op]
        theirs = [k for k in only_b if k.split()[0] == op]
        if len(mine) == 1 and len(theirs) == 1:
            words_a, words_b = _variant_words(mine[0]), _variant_words(theirs[0])
            said_a, said_b = _apart(words_a, words_b), _apart(words_b, words_a)
            matched.append((f"{op} (A {said_a}, B {said_b})", keyed_a[mine[0]],
                            keyed_b[theirs[0]], f"A is {op} {said_a}, B is {op} {said_b}"))
            only_a.remove(mine[0])
            only_b.remove(theirs[0])
    matched += [(k, keyed_a[k], None, None) for k in only_a]
    matched += [(k, None, keyed_b[k], None) for k in only_b]
    order = {key: i for i, key in enumerate(op_order([m[1] or m[2] for m in matched]))}
    return sorted(matched, key=lambda m: order[m[1] or m[2]])  # op names: keyed as the dtype-named


def labels_apart(a, b, matched):
    """The runs' labels, with what tells them apart when they read alike and measured an op
    differently (pt2pt one way and --bidirectional, say) or in another dtype."""
    if a.label != b.label:
        return a.label, b.label
    said_a, said_b = [], []
    for op, key_a, key_b, difference in matched:
        if difference:
            words_a, words_b = _variant_words(key_a), _variant_words(key_b)
            said_a.append(f"{op.split()[0]} {_apart(words_a, words_b)}")
            said_b.append(f"{op.split()[0]} {_apart(words_b, words_a)}")
    if a.dtype and b.dtype and a.dtype != b.dtype:
        said_a.append(f"dtype {a.dtype}")
        said_b.append(f"dtype {b.dtype}")
    if not said_a:  # the same measurement: the labels stay as they are, the files apart
        return a.label, b.label
    return (f"{a.label}, {', '.join(dict.fromkeys(said_a))}",
            f"{b.label}, {', '.join(dict.fromkeys(said_b))}")


def _unalike(a, b, matched, label_a, label_b):
    """The warnings of what differs between the runs beyond their figures."""
    warnings = [f"{difference}: not the same measurement; their sizes are set side by side "
                "below" for difference in (m[3] for m in matched) if difference]
    if a.world_size and b.world_size and a.world_size != b.world_size:
        warnings.append(f"world sizes differ: {a.world_size} ({label_a}) vs {b.world_size} "
                        f"({label_b})")
    if a.dtype and b.dtype and a.dtype != b.dtype:
        warnings.append(f"dtypes differ: {a.dtype} ({label_a}) vs {b.dtype} ({label_b})")
    return warnings


def compare(a, b, threshold, noise=0.05):
    """The comparison as data: per op rows, ratios, one-sided sizes, verdicts, warnings.
    With windows in both runs (--repeat), rows and verdicts carry 95% intervals."""
    matched = match(a, b)
    label_a, label_b = labels_apart(a, b, matched)
    warnings = _unalike(a, b, matched, label_a, label_b)
    ops = []
    for op, key_a, key_b, difference in matched:
        mine, theirs = a.ops.get(key_a, {}), b.ops.get(key_b, {})
        windows_a, windows_b = a.windows.get(key_a, {}), b.windows.get(key_b, {})
        rows: list = []
        samples: dict = {}
        for size in sorted(set(mine) & set(theirs)):
            x, y = mine[size], theirs[size]
            ratio = y.duration / x.duration if x.duration > 0 else None
            row = {"size": size, "duration_a": x.duration, "duration_b": y.duration,
                   "ratio": ratio, "busbw_a": x.busbw, "busbw_b": y.busbw,
                   "above_threshold": ratio is not None and ratio > threshold}
            if ratio and size in windows_a and size in windows_b:
                samples[len(rows)] = _significance(row, windows_a[size], windows_b[size], noise)
            rows.append(row)
        small = geometric_mean([r["ratio"] for r in rows if r["size"] < SMALL and r["ratio"]])
        large = geometric_mean([r["ratio"] for r in rows if r["size"] >= LARGE and r["ratio"]])
        entry = {"op": op, "rows": rows, "small_ratio": small, "large_ratio": large,
                 "only_a": sorted(set(mine) - set(theirs)),
                 "only_b": sorted(set(theirs) - set(mine)),
                 "verdict": verdict(op, small, large)
                 if rows else _one_sided(op, key_a, key_b, matched)}
        if difference:
            entry["difference"] = difference
        if samples:
            entry["small"] = _group(rows, samples, lambda size: size < SMALL, noise)
            entry["large"] = _group(rows, samples, lambda size: size >= LARGE, noise)
            if entry["small"] is None and entry["large"] is None:
                entry["all"] = _group(rows, samples, lambda size: True, noise)
                entry["verdict"] = uncertain_verdict(op, entry["all"], None, label_b, noise) \
                    .replace("small messages", "the sizes measured").replace(
                        "; no repeated large messages to compare", "")
            else:
                entry["verdict"] = uncertain_verdict(op, entry["small"], entry["large"],
                                                     label_b, noise)
        ops.append(entry)
    repeated = any("ratio_ci" in r for op in ops for r in op["rows"])
    if not repeated:
        which = " and ".join(side for side, run in (("A", a), ("B", b)) if not run.windows)
        warnings.append(f"{which or 'the runs'} {'have' if ' and ' in which else 'has'} no "
                        "repeated windows, so these ratios carry no uncertainty (one window on a "
                        "shared machine can be off by 2x); run both with --repeat 5 for "
                        "intervals and significance")
    return {"a": label_a, "b": label_b, "bw_unit": a.bw_unit, "threshold": threshold,
            "noise_threshold": noise,
            "repeated": repeated, "warnings": warnings, "ops": ops}


def _one_sided(op, key_a, key_b, matched):
    """The verdict of an op measured in one run only: which, and what the other measured of it."""
    side, other = ("A", 2) if key_a else ("B", 1)
    there = [m[0] for m in matched if m[other] and not m[3] and m[0].split()[0] == op.split()[0]]
    if not there:
        return f"{op}: only in {side}."
    return (f"{op}: only in {side}; {'B' if side == 'A' else 'A'} measured " + "; ".join(
        f"{op.split()[0]} {', '.join(_variant_words(k)) or 'as run'}" for k in there) + ".")


def _us(seconds):
    return f"{seconds * 1e6:.3f}"


def _table(title, heads, table, form):
    """One op's table: a markdown section, or right-aligned text columns under `---- title`;
    preceded by an empty line."""
    if form == "markdown":
        return (["", f"### {title}", "", "| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
                + ["| " + " | ".join(row) + " |" for row in table] + [""])
    widths = [max(len(h), *(len(row[i]) for row in table)) if table else len(h)
              for i, h in enumerate(heads)]
    return (["", f"---- {title}", "  ".join(h.rjust(w) for h, w in zip(heads, widths))]
            + ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in table])


def render(report, form):
    if form == "json":
        return json.dumps(report, indent=1)
    lines = [f"A: {report['a']}", f"B: {report['b']}"]
    lines += [f"WARNING: {w}" for w in report["warnings"]]
    unit = report.get("bw_unit", "Gbps")
    heads = ["size", "duration A (us)", "duration B (us)", "B/A",
             f"busbw A ({bandwidth_label(unit)})", f"busbw B ({bandwidth_label(unit)})"]
    repeated = report.get("repeated")
    if repeated:
        heads.insert(4, "95% interval of B/A")

    def mark(r):
        return r.get("marked") if "ratio_ci" in r else (r["above_threshold"] and not repeated)

    def cells(r):
        row = [units.size(r["size"]), _us(r["duration_a"]), _us(r["duration_b"]),
               (f"{r['ratio']:.3f}" if r["ratio"] else "-") + (" *" if mark(r) else ""),
               f"{bandwidth(r['busbw_a'], unit):.3f}", f"{bandwidth(r['busbw_b'], unit):.3f}"]
        if repeated:
            row.insert(4, f"[{r['ratio_ci'][0]:.3f}, {r['ratio_ci'][1]:.3f}]"
                       if "ratio_ci" in r else "-")
        return row
    for op in report["ops"]:
        lines += _table(op["op"], heads, [cells(r) for r in op["rows"]], form)
        means = [f"geometric mean B/A: small (< 64 KiB) "
                 f"{op['small_ratio']:.3f}" if op["small_ratio"] else "small: -",
                 f"large (>= 1 MiB) {op['large_ratio']:.3f}" if op["large_ratio"] else "large: -"]
        middle = [r["size"] for r in op["rows"] if SMALL <= r["size"] < LARGE]
        if middle:
            means.append(f"{len(middle)} size{'s' if len(middle) > 1 else ''} from 64 KiB to "
                         "under 1 MiB in neither group")
        lines.append(", ".join(means))
        for side, sizes in (("A", op["only_a"]), ("B", op["only_b"])):
            if sizes:
                lines.append(f"only in {side}: {', '.join(map(units.size, sizes))}")
        lines.append(op["verdict"])
    if repeated:
        lines.append(f"(* the 95% interval of B/A excludes 1 and the change is beyond the "
                     f"{report['noise_threshold'] * 100:g}% noise threshold)")
    else:
        lines.append(f"(* B/A above {report['threshold']:g}: a ratio, not a verdict)")
    return "\n".join(lines)
