"""`report.py compare`: two runs size by size, the ratio of their durations, the geometric
mean at latency-bound (< 64 KiB) and bandwidth-bound (>= 1 MiB) sizes, and a verdict."""

import json
import math

from .runs import op_order

SMALL = 64 * 1024  # below: latency-bound messages
LARGE = 1024 * 1024  # from here: bandwidth-bound messages


def geometric_mean(values):
    values = [v for v in values if v > 0]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def _percent(ratio):
    return f"{(ratio - 1) * 100:+.0f}%"


def verdict(op, small, large, label_b):
    """One sentence: where B is slower than A."""
    def part(ratio, where):
        if ratio is None:
            return f"no {where} messages to compare"
        if ratio > 1.02:
            return f"adds {(ratio - 1) * 100:.0f}% at {where} messages"
        if ratio < 0.98:
            return f"is {(1 - ratio) * 100:.0f}% faster at {where} messages"
        return f"adds nothing at {where} messages"
    return f"{op}: {label_b} {part(small, 'small')}, {part(large, 'large')}."


def compare(a, b, threshold):
    """The comparison as data: per op rows, ratios, one-sided sizes, verdicts, warnings."""
    warnings = []
    if a.world_size and b.world_size and a.world_size != b.world_size:
        warnings.append(f"world sizes differ: {a.world_size} ({a.label}) vs {b.world_size} "
                        f"({b.label})")
    if a.dtype and b.dtype and a.dtype != b.dtype:
        warnings.append(f"dtypes differ: {a.dtype} ({a.label}) vs {b.dtype} ({b.label})")
    ops = []
    for op in op_order(list(a.ops) + list(b.ops)):
        mine, theirs = a.ops.get(op, {}), b.ops.get(op, {})
        rows = []
        for size in sorted(set(mine) & set(theirs)):
            x, y = mine[size], theirs[size]
            ratio = y.duration / x.duration if x.duration > 0 else None
            rows.append({"size": size, "duration_a": x.duration, "duration_b": y.duration,
                         "ratio": ratio, "busbw_a": x.busbw, "busbw_b": y.busbw,
                         "slower": ratio is not None and ratio > threshold})
        small = geometric_mean([r["ratio"] for r in rows if r["size"] < SMALL and r["ratio"]])
        large = geometric_mean([r["ratio"] for r in rows if r["size"] >= LARGE and r["ratio"]])
        ops.append({"op": op, "rows": rows, "small_ratio": small, "large_ratio": large,
                    "only_a": sorted(set(mine) - set(theirs)),
                    "only_b": sorted(set(theirs) - set(mine)),
                    "verdict": verdict(op, small, large, b.label) if rows else
                    f"{op}: no message size in both runs."})
    return {"a": a.label, "b": b.label, "threshold": threshold, "warnings": warnings, "ops": ops}


def human_size(size):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:g} {unit}" if unit == "B" else f"{size:.4g} {unit}"
        size /= 1024


def _us(seconds):
    return f"{seconds * 1e6:.3f}"


def render(report, form):
    if form == "json":
        return json.dumps(report, indent=1)
    lines = [f"A: {report['a']}", f"B: {report['b']}"]
    lines += [f"WARNING: {w}" for w in report["warnings"]]
    heads = ["size", "duration A (us)", "duration B (us)", "B/A", "busbw A (GB/s)",
             "busbw B (GB/s)"]
    for op in report["ops"]:
        table = [[human_size(r["size"]), _us(r["duration_a"]), _us(r["duration_b"]),
                  (f"{r['ratio']:.3f}" if r["ratio"] else "-") + (" *" if r["slower"] else ""),
                  f"{r['busbw_a'] / 1e9:.3f}", f"{r['busbw_b'] / 1e9:.3f}"] for r in op["rows"]]
        lines.append("")
        if form == "markdown":
            lines += [f"### {op['op']}", "", "| " + " | ".join(heads) + " |",
                      "|" + "---|" * len(heads)]
            lines += ["| " + " | ".join(row) + " |" for row in table]
            lines.append("")
        else:
            lines.append(f"---- {op['op']}")
            widths = [max(len(h), *(len(row[i]) for row in table)) if table else len(h)
                      for i, h in enumerate(heads)]
            lines.append("  ".join(h.rjust(w) for h, w in zip(heads, widths)))
            lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in table]
        means = [f"geometric mean B/A: small (< 64 KiB) "
                 f"{op['small_ratio']:.3f}" if op["small_ratio"] else "small: -",
                 f"large (>= 1 MiB) {op['large_ratio']:.3f}" if op["large_ratio"] else "large: -"]
        lines.append(", ".join(means))
        for side, sizes in (("A", op["only_a"]), ("B", op["only_b"])):
            if sizes:
                lines.append(f"only in {side}: {', '.join(map(human_size, sizes))}")
        lines.append(op["verdict"])
    lines.append(f"(* B/A above {report['threshold']:g})")
    return "\n".join(lines)
