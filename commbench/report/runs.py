"""Runs read back for reports: the suite's results files, its saved tables (a tee'd stdout,
--raw or not, several ops in one file), nccl-tests text output and DeepSpeed's comms logger
summary, as one `Run` each (the readers `from_*`; which one a file needs: kinds.py).
Standard library only."""

import functools
import json
import os
import re
from dataclasses import dataclass, field

from .. import defaults
from ..records import results
from ..opfacts import FACTS
from ..trace import dscomms

OPS = defaults.OPS  # report order: the suite's own ops first, others after


def op_order(keys):
    """Op keys in report order: the suite's ops in their order (each op's dtypes in the order
    they came, `all_reduce` before `all_reduce bfloat16`), then any other op by name."""
    keys = list(dict.fromkeys(keys))
    base = [k.split()[0] for k in keys]
    known = [k for op in OPS for k, b in zip(keys, base) if b == op]
    return known + sorted(k for k, b in zip(keys, base) if b not in OPS)


class ReportError(Exception):
    """A file that cannot be read or understood: one line, exit 1."""


class ReportUsageError(ReportError):
    """An input that is not there (a mistyped --db path): one line, exit 2, as a usage error."""


@dataclass
class Measurement:
    size: int  # bytes per rank, as the suite's Size column
    duration: float  # seconds
    busbw: float  # bytes per second
    bound: float | None = None  # bytes per second the row is held against (--peak), if any


@dataclass
class Run:
    path: str
    label: str
    world_size: object = None
    dtype: object = None
    # op -> {size: Measurement}; a run of several dtypes keys each as "op dtype"
    ops: dict = field(default_factory=dict)
    # op -> {size: [seconds of each window]}, for the sizes --repeat timed more than once
    windows: dict = field(default_factory=dict)
    bw_unit: str = "Gbps"  # the unit the run printed bandwidth in (--bw-unit): reports keep it
    bound_words: str = ""  # what its rows' bound is (--peak; report/bound.py), "" without one


BW_UNITS = {"Gbps": (8e-9, "Gbps"), "GBps": (1e-9, "GB/s")}


def bandwidth(bytes_per_second, unit):
    """A bandwidth in bytes/s in the unit of --bw-unit (Gbps: bits, GBps: bytes; 1e9)."""
    return bytes_per_second * BW_UNITS.get(unit, BW_UNITS["Gbps"])[0]


def bandwidth_label(unit):
    return BW_UNITS.get(unit, BW_UNITS["Gbps"])[1]


def _label(meta, path):
    if meta.get("dist"):
        layer = "deepspeed.comm" if meta["dist"] == "deepspeed" else "torch.distributed"
        return f"{layer} {meta.get('backend', '')} n={meta.get('world_size', '?')}".strip()
    return os.path.basename(path)


def _bound_Bps(record):
    """The bound a result record is held against (--peak's `bound`), in bytes a second."""
    found = record.get("bound") or {}
    return found["gbps"] * 1e9 / 8 if found.get("gbps") else None


def _bound_words(records):
    """The records' bound in words: `memory copy (measured, 2 threads)`, `given 4 Gb/s
    (--peak)` (a rate where every row has the same); "" without one."""
    bounds = [r["bound"] for r in records if (r.get("bound") or {}).get("gbps")]
    if not bounds:
        return ""
    rates = {b["gbps"] for b in bounds}
    in_bytes = bounds[0].get("kind") in ("memory copy", "nvlink", "pcie")  # as bounds/ says it
    rate = "" if len(rates) > 1 else \
        f" {rates.pop() / 8:.3g} GB/s" if in_bytes else f" {rates.pop():.3g} Gb/s"
    return f"{bounds[0].get('name', 'bound')}{rate} ({bounds[0].get('source', '?')})"


def from_results(path, text=None):
    """A results file of --output (read again by commbench/records/results.py: `text` unused). One
    that holds no result (empty, or another program's JSON or CSV) is an error naming the file, not
    an empty report."""
    try:
        meta, records = results.read(path)
        repeated = results.windows(records)
        records = results.final(records)
        if not records:
            raise ReportError(f"{path}: no results in it (" + (
                "an empty file" if os.path.getsize(path) == 0 else
                "the meta record alone: the run measured nothing" if meta else
                "not a results file of this suite") + ")")
        # --groups: records carry their group's size; the meta the world's
        world_sizes = {meta["world_size"]} if (meta or {}).get("groups") else \
            {r["world_size"] for r in records}
        dtypes = {r.get("dtype") or meta.get("dtype") for r in records if "dtype" not in r
                  or r["dtype"] is not None}
        run = Run(path, _label(meta or records[0], path),
                  world_sizes.pop() if len(world_sizes) == 1 else None,
                  next(iter(dtypes)) if len(dtypes) == 1 else None,
                  bw_unit=(meta or {}).get("bw_unit") or "Gbps")
        for r in records:
            key = record_key(r, len(dtypes) > 1)
            busbw = r["busbw_Bps"]  # None: an op without payload (barrier)
            measured = Measurement(r["size_bytes"], float(r["duration_s"]),
                                   0.0 if busbw is None else float(busbw), _bound_Bps(r))
            if not _slower(run, key, measured):
                continue
            run.ops.setdefault(key, {})[r["size_bytes"]] = measured
            found = repeated.get(results.series(r))
            if found and len(found) > 1:
                run.windows.setdefault(key, {})[r["size_bytes"]] = found
            elif key in run.windows:
                run.windows[key].pop(r["size_bytes"], None)
        run.bound_words = _bound_words(records)
    except KeyError as error:
        raise ReportError(f"{path}: not a results file of this suite (" + (
            'a JSON document without the "meta" and "results" of one'
            if error.args and error.args[0] in ("meta", "results") else
            f"a record without its {error}") + ")") from None
    except (ValueError, TypeError, AttributeError) as error:
        raise ReportError(f"{path}: not a results file of this suite ({type(error).__name__}: "
                          f"{error})") from None
    except OSError as error:
        raise ReportError(f"cannot read {path}: {error.strerror}") from None
    return run


def record_key(record, several_dtypes):
    """The op key of a results record in a Run: its op (and dtype, in a run of several), its
    --groups layout, its pt2pt variant."""
    key = f"{record['op']} {record['dtype']}" if several_dtypes and record.get("dtype") \
        else record["op"]
    return layout_key(key, record.get("groups"), record.get("aggregate")) + _variant(record)


def layout_key(key, kind, aggregate=False):
    """The op key of a --groups layout's figures: `all_reduce intra`; the world's stays bare;
    --split's: `all_reduce split`, and its aggregate table's `all_reduce split-aggregate`."""
    if kind in (None, "world"):
        return key
    return f"{key} {kind}-aggregate" if aggregate else f"{key} {kind}"


def _variant(record):
    """What sets a pt2pt apart from another: `pairs-all`, `both-ways` (--pairs, --bidirectional)."""
    words = []
    if record.get("pairs_mode") not in (None, "one"):
        words.append(f"pairs-{record['pairs_mode']}")
    if record.get("bidirectional"):
        words.append("both-ways")
    return "".join(f" {word}" for word in words)


def _slower(run, key, measured):
    """A layout's groups all measure each size at once: its figure is the slowest group's (the
    one a step in which every group communicates waits for). True: `measured` is that one."""
    if len(key.split()) < 2 or key.split()[-1] not in ("intra", "inter", "split"):
        return True
    earlier = run.ops.get(key, {}).get(measured.size)
    return earlier is None or measured.duration > earlier.duration


HEADER = re.compile(r"^---- Performance of (\w+) on (\d+) devices(?:, dtype (\w+))?"
                    r"(?:, op \w+)?(?:, (intra|inter)-host group \d+)?")


def from_table(path, text):
    """Saved stdout: sizes from the Description (exact E x element size), durations and busbw
    converted back to seconds and bytes/s from the header's units."""
    run, op, raw, scale, world = Run(path, os.path.basename(path)), None, False, 8, set()
    for line in text.splitlines():
        header = HEADER.match(line)
        if header:
            op = layout_key(header.group(1) + (f" {header.group(3)}" if header.group(3) else ""),
                            header.group(4))
            if header.group(1) != "pt2pt" and not header.group(4):  # pt2pt's says 2 devices
                world.add(int(header.group(2)))
            continue
        if line.startswith("Size (Bytes)"):
            raw = "Duration (us)" in line
            scale = 8 if "(Gbps)" in line else 1
            run.bw_unit = "Gbps" if scale == 8 else "GBps"
            continue
        fields = line.split()
        if op is None or len(fields) < 5:
            continue
        if not raw and fields[0] == "0B":  # convert_size(0), barrier's Size: one word, not two
            fields.insert(1, "B")
        if fields[1 if raw else 2] == "-":  # an op without payload (barrier): latency alone
            duration = float(fields[2]) * 1e-6 if raw else \
                float(fields[3]) * (1e-3 if fields[4] == "ms" else 1e-6)
            run.ops.setdefault(op, {})[0] = Measurement(0, duration, 0.0)
            continue
        if not re.fullmatch(r"\d+x\d+", fields[1 if raw else 2]):
            continue
        if raw:
            description, duration, busbw = fields[1], float(fields[2]) * 1e-6, float(fields[4])
        else:
            description = fields[2]
            value, unit = float(fields[3]), fields[4]
            duration = value * (1e-3 if unit == "ms" else 1e-6)
            busbw = float(fields[6])
        numel, element_size = map(int, description.split("x"))
        size = numel * element_size
        measured = Measurement(size, duration, busbw * 1e9 / scale)
        if _slower(run, op, measured):
            run.ops.setdefault(op, {})[size] = measured
    run.world_size = world.pop() if len(world) == 1 else None
    if not run.ops:
        raise ReportError(f"{path}: no table rows found")
    return run


def from_nccl_tests(path, text):
    """nccl-tests: `size count type redop root time algbw busbw #wrong` out-of-place, then the
    same in place; `#` lines are comments. The op comes from the file or its name."""
    named = re.search(r"(all_reduce|all_gather|alltoall|all_to_all|reduce_scatter|broadcast|"
                      r"sendrecv)", text + " " + os.path.basename(path))
    if not named:
        raise ReportError(f"{path}: nccl-tests output, but which collective? name the file "
                          "after it (e.g. all_reduce_perf.txt)")
    op = {"alltoall": "all_to_all", "sendrecv": "pt2pt"}.get(named.group(1), named.group(1))
    ranks = len(re.findall(r"^#\s+Rank\s+\d+", text, re.M)) or None
    run = Run(path, f"nccl-tests n={ranks or '?'}", ranks, bw_unit="GBps")  # it prints GB/s
    for line in text.splitlines():
        fields = line.split()
        if not fields or line.lstrip().startswith("#") or not fields[0].isdigit():
            continue
        try:
            size, dtype = int(fields[0]), fields[2]
            time_us, busbw_gbs = float(fields[5]), float(fields[7])
        except (IndexError, ValueError):
            continue
        run.dtype = dtype
        if op == "all_gather" and ranks:
            size //= ranks  # nccl-tests counts the gathered output; the suite the input per rank
        run.ops.setdefault(op, {})[size] = Measurement(size, time_us * 1e-6, busbw_gbs * 1e9)
    if not run.ops:
        raise ReportError(f"{path}: no nccl-tests data rows found")
    return run


# ------------------------------------------------------------------ DeepSpeed's comms logger

# deepspeed.comm's logged functions -> the suite's ops (the replay's reader's, point-to-point as
# pt2pt); barriers have no size
DEEPSPEED_OPS = {**{name: op for name, op in dscomms.OPS.items() if op != "barrier"},
                 **{name: "pt2pt" for name in dscomms.SEND_RECV}}
DEEPSPEED_SKIPPED = tuple(name for name, op in dscomms.OPS.items() if op == "barrier") + \
    dscomms.SKIPPED


@functools.lru_cache(maxsize=1)  # each kind's recogniser asks of the same text in turn
def json_document(text):
    """The JSON document `text` holds when it starts as one (`{`, `[`), or None; not to be
    changed by the caller (cached)."""
    if text.lstrip()[:1] not in ("{", "["):
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def _suite_busbw(op, size, seconds, n):
    """The suite's BusBW (SPEC 3) in bytes/s for `size` bytes of `op` in `seconds`."""
    return size / seconds * FACTS[op].busbw_factor(n)


def from_deepspeed_logger(path, text):
    """One rank's log_summary: per op and size DeepSpeed's mean latency (its trimmed mean),
    the busbw recomputed by the suite's formulas (DeepSpeed's own differs for reduce_scatter,
    whose size it multiplies by n); barriers left out (no size)."""
    document = json_document(text)
    n = document["metadata"].get("world_size")
    if not isinstance(n, int) or n < 1:
        raise ReportError(f"{path}: DeepSpeed comms logger summary without a world size")
    run = Run(path, f"DeepSpeed comms logger n={n}", n)
    for name, sizes in document["summary"].items():
        base = str(name).split(" | ", 1)[0].strip()
        if base in DEEPSPEED_SKIPPED:
            continue
        op = DEEPSPEED_OPS.get(base)
        if op is None:
            raise ReportError(f"{path}: op {name!r}: not an op DeepSpeed's comms logger logs")
        for size_key, figures in (sizes or {}).items():
            try:
                size, latency = int(size_key), float(figures["avg_latency_ms"]) / 1e3
            except (KeyError, TypeError, ValueError):
                raise ReportError(f"{path}: {name} of {size_key!r} B: no size and average "
                                  "latency") from None
            if size <= 0 or latency <= 0:
                continue
            run.ops.setdefault(op, {})[size] = Measurement(size, latency,
                                                           _suite_busbw(op, size, latency, n))
    if not run.ops:
        raise ReportError(f"{path}: DeepSpeed comms logger summary with no op of a size")
    return run
