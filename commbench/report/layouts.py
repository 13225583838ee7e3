"""One run's `--groups` layouts held against each other (`report.py compare RUN` of a run with
layouts, and its section of the HTML page): per op, the world against intra-host and inter-host
groups and `--split`'s, at small and large messages."""

import json

from .. import units
from .compare import LARGE, SMALL, _table, _us, geometric_mean
from .runs import bandwidth, bandwidth_label, op_order


LAYOUTS = ("world", "intra", "inter", "split", "split-aggregate")
_LAYOUT_NAMES = {"world": "world", "intra": "intra-host", "inter": "inter-host",
                 "split": "split", "split-aggregate": "split together"}


def split_layout(key):
    """(`all_reduce bfloat16`, `inter`) of an op key of runs.Run; the world's layout is bare."""
    words = key.split()
    if len(words) > 1 and words[-1] in LAYOUTS[1:]:
        return " ".join(words[:-1]), words[-1]
    return key, "world"


def layouts(run):
    """One run of --groups with its layouts side by side: per op and size each layout's
    duration and bus bandwidth (a layout's figure is its slowest group's), and a verdict on
    where the time goes: inter-host against intra-host, the world against inter-host."""
    by_op: dict = {}
    for key in op_order(run.ops):
        op, kind = split_layout(key)
        by_op.setdefault(op, {})[kind] = run.ops[key]
    if not any(len(kinds) > 1 or "world" not in kinds for kinds in by_op.values()):
        raise ValueError(f"{run.path} holds the whole world's figures only: run it with "
                         "--groups world,intra,inter (or --groups world --split N) to put "
                         "layouts side by side, or give a second run to compare against")
    ops = []
    for op, kinds in by_op.items():
        shown = [kind for kind in LAYOUTS if kind in kinds]
        sizes = sorted(set().union(*(kinds[kind] for kind in shown)))
        rows = [{"size": size, **{kind: ({"duration": kinds[kind][size].duration,
                                          "busbw": kinds[kind][size].busbw}
                                         if size in kinds[kind] else None) for kind in shown}}
                for size in sizes]
        ops.append({"op": op, "layouts": shown, "rows": rows,
                    "verdict": _layout_verdict(op, rows, shown)})
    return {"run": run.label, "path": run.path, "bw_unit": run.bw_unit, "ops": ops}


def _ratio(rows, slow, fast, where):
    return geometric_mean([r[slow]["duration"] / r[fast]["duration"] for r in rows
                           if where(r["size"]) and r.get(slow) and r.get(fast)
                           and r[fast]["duration"] > 0])


def _layout_verdict(op, rows, shown):
    """Where the time goes, pair by pair of the layouts measured: inter-host against intra-host
    and the world against inter-host, or the world against intra-host when inter-host is
    missing (a run stopped before it); at small and large messages, or over the sizes both
    have when none falls in those groups."""
    parts = []
    pairs = [("inter", "intra"), ("world", "inter"), ("world", "split")]
    if "inter" not in shown:
        pairs.append(("world", "intra"))
    for slow, fast in pairs:
        if slow not in shown or fast not in shown:
            continue
        large = _ratio(rows, slow, fast, lambda size: size >= LARGE)
        small = _ratio(rows, slow, fast, lambda size: size < SMALL)
        figures = ", ".join(f"{ratio:.2f}x at {where} messages" for ratio, where in
                            ((large, "large"), (small, "small")) if ratio is not None)
        if large is None and small is None:
            both = [r["size"] for r in rows if r.get(slow) and r.get(fast)]
            middle = _ratio(rows, slow, fast, lambda size: True)
            if middle is None:
                continue
            figures = (f"{middle:.2f}x over the {len(both)} size{'s' if len(both) > 1 else ''} "
                       f"both have ({units.size(min(both))} to {units.size(max(both))}, between "
                       "the small and the large group)")
        parts.append(f"{_LAYOUT_NAMES[slow]} / {_LAYOUT_NAMES[fast]} time {figures}")
    if not parts:
        return f"{op}: no size measured in two layouts."
    return f"{op}: " + "; ".join(parts) + "."


def render_layouts(report, form):
    if form == "json":
        return json.dumps(report, indent=1)
    lines = [f"Run: {report['run']} ({report['path']}); a layout's figure is its slowest group's"]
    for op in report["ops"]:
        shown = op["layouts"]
        heads = ["size"] + [f"{_LAYOUT_NAMES[k]} (us)" for k in shown] + \
            [f"{_LAYOUT_NAMES[k]} busbw ({bandwidth_label(report['bw_unit'])})" for k in shown]
        table = [[units.size(r["size"])] +
                 [_us(r[k]["duration"]) if r[k] else "-" for k in shown] +
                 [f"{bandwidth(r[k]['busbw'], report['bw_unit']):.3f}" if r[k] else "-"
                  for k in shown]
                 for r in op["rows"]]
        lines += _table(op["op"], heads, table, form)
        lines.append(op["verdict"])
    return "\n".join(lines)
