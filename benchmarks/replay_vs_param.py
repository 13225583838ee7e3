"""replay.py against PARAM's legacy comms replay, call for call, on one PARAM basic trace.

The trace: 8 op-size rows (all_reduce of 4 KiB, 64 KiB and 1 MiB; all_gather of 64 KiB and 1
MiB; reduce_scatter of 64 KiB and 1 MiB, the whole input; all_to_all of 1 MiB: PARAM's legacy
replay fails on a basic trace's broadcast, its commsArgs having no srcOrDst), 5 calls each,
round robin: 40 calls a rank. Each round runs, one after the other on the same ranks: PARAM's
replay
(train/comms/pt/commsTraceReplay.py through /work/shared/peer/param-replay's wrapper), replay.py
back to back, replay.py --isolated, and the variants that isolate a cause of a difference:

  fresh      back to back, every call's buffers allocated anew and filled (as PARAM's
             prepComm does, reuse_tensors off), none reused from the pool
  untouched  back to back, every call's buffers allocated anew with torch.empty: the pages'
             first touch inside the call
  isolated-fresh  --isolated with fresh's buffers: PARAM's way on both counts
  isolated-param-timer  --isolated, the timer as PARAM's paramProfile: time.monotonic inside
             torch's record_function
  lateness   --isolated's barriers, but the timer started before the barrier: the call's
             time with the peer's lateness in it

Per row, rank 0's median over the row's calls and every pass (PARAM: every replay), each
variant's median over the rounds' medians, and its ratio to PARAM's.

  .venv/bin/python benchmarks/replay_vs_param.py --param /tmp/param --rounds 3 --passes 10

--param: a PARAM checkout (facebookresearch/param at 1e115ffc) with a `param_bench` link to
itself beside it (PYTHONPATH=<its parent>:<it>); --deps: where intervaltree, pydot and future
are installed (pip install --target DIR ...).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
WRAPPER = Path("/work/shared/peer/param-replay/legacy_replay_wrapper.py")
KIB = 1024
ROWS = [("all_reduce", 4 * KIB), ("all_reduce", 64 * KIB), ("all_reduce", 1024 * KIB),
        ("all_gather_base", 64 * KIB), ("all_gather_base", 1024 * KIB),
        ("reduce_scatter_base", 64 * KIB), ("reduce_scatter_base", 1024 * KIB),
        ("all_to_all", 1024 * KIB)]
NAMES = {"all_gather_base": "all_gather", "reduce_scatter_base": "reduce_scatter",
         "all_to_allv": "all_to_all"}
VARIANTS = ("back to back", "isolated", "fresh", "untouched", "isolated-fresh",
            "isolated-param-timer", "lateness")


def trace(folder, world_size, calls_a_row=5):
    """The basic trace, per rank `<rank>.json` (PARAM's naming; replay.py reads it too)."""
    folder.mkdir(parents=True, exist_ok=True)
    for rank in range(world_size):
        entries = []
        for _ in range(calls_a_row):
            for op, nbytes in ROWS:
                numel = nbytes // 4  # float32; all_gather: the shard in, the whole out
                out = {"all_gather_base": numel * world_size,
                       "reduce_scatter_base": numel // world_size}.get(op, numel)
                entry = {"comms": op, "in_msg_size": numel, "out_msg_size": out,
                         "dtype": "Float", "world_size": world_size}
                if op == "all_to_all":
                    entry.update(comms="all_to_allv", in_split=[numel // world_size] * world_size,
                                 out_split=[numel // world_size] * world_size)
                entries.append(entry)
        (folder / f"{rank}.json").write_text(json.dumps(entries))


def run(command, env=None):
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900,
                          env={**os.environ, **(env or {})})
    if done.returncode:
        sys.exit(f"{' '.join(map(str, command))} failed:\n{done.stderr[-3000:]}")
    return done


def torchrun(nproc, port, *args):
    return [str(BIN / "torchrun"), f"--nproc_per_node={nproc}", f"--master_port={port}",
            *map(str, args)]


def param_round(args, folder, out):
    if not args.again:
        env = {"PYTHONPATH": f"{Path(args.param).parent}:{args.param}:{args.deps}"}
        run(torchrun(args.nproc, args.port, WRAPPER, "--trace-path", folder, "--trace-type",
                     "basic", "--backend", "gloo", "--device", "cpu", "--num-replays",
                     args.passes, "--output-path", out), env)
    rows = {}
    for entry in json.loads((out / "replayedCommsPerf.rank0.json").read_text()):
        name = entry.get("comms")
        if name in ("all_reduce", *NAMES):
            key = (NAMES.get(name, name), entry["in_msg_size"] * 4)
            rows.setdefault(key, []).append(entry["latency_us"] * 1e-6)
    return rows


def ours_round(args, folder, out, variant):
    flags = ["--isolated"] if variant.startswith("isolated") or variant == "lateness" else []
    if not args.again:
            run(torchrun(args.nproc, args.port, Path(__file__), "--variant", variant, "--", folder,
                     "--backend", "gloo", "--repeat", args.passes, "--top", "0", "--output",
                     out, "--overwrite", *flags), {"PYTHONPATH": str(ROOT)})
    rows = {}
    for line in out.read_text().splitlines():
        record = json.loads(line)
        if record.get("type") == "call" and record["rank"] == 0:
            key = (record["op"], record["in_numel"] * 4)
            rows.setdefault(key, []).extend(record["times_s"])
    return rows


def variant_main(variant, argv):
    """On a rank: replay.py with one cause changed (the module's docstring)."""
    import torch

    from commbench.trace import engine
    from commbench.trace.model import dtype_of
    from commbench.trace.replay import main
    if variant.endswith("fresh") or variant == "untouched":
        make = torch.empty if variant == "untouched" else torch.zeros
        engine.Pool.take = lambda self, dtype, numel: make(numel, dtype=dtype_of(dtype),
                                                          device=self.device)
        engine.Pool.give = lambda self, tensors: None
    if variant == "lateness":
        isolated = engine.Replayer._isolated

        def late(self, call, inp, out):
            began = time.perf_counter()
            start, _ = isolated(self, call, inp, out)
            return start, time.perf_counter() - began  # the barrier's wait counted in
        engine.Replayer._isolated = late
    if variant == "isolated-param-timer":
        engine.Replayer._isolated = param_timed
    main(argv)


def param_timed(self, call, inp, out):
    """_isolated with PARAM's timer (paramProfile): record_function entered, then
    time.monotonic around the issue and the wait."""
    from torch.autograd.profiler import record_function
    group = self._barrier_group(call)
    self.comm.synchronize()
    self.dist.barrier(group=group)
    self.comm.synchronize()
    with record_function("# PARAM replay"):
        start = time.monotonic()
        for work in self.issue(call, inp, out):
            work.wait()
        self.comm.synchronize()
        seconds = time.monotonic() - start
    self.dist.barrier(group=group)
    return start, seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--param", default="/tmp/replay-param")
    parser.add_argument("--deps", default="/tmp/param-deps")
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--passes", type=int, default=10)
    parser.add_argument("--port", type=int, default=37100)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--again", default=None, metavar="DIR",
                        help="print the tables of a finished run's files again, running nothing")
    args = parser.parse_args()
    folder = Path(args.again) if args.again else Path(tempfile.mkdtemp(prefix="replay-vs-param-"))
    if not args.again:
        trace(folder / "trace", args.nproc)
    variants = args.variants.split(",")
    medians = {name: [] for name in ("PARAM", *variants)}  # per round: {row: median}
    for number in range(args.rounds):
        order = ["PARAM", *variants]
        shift = number % len(order)  # each round starts with another: no one always first
        for name in order[shift:] + order[:shift]:
            if name == "PARAM":
                out = folder / f"param-{number}"
                out.mkdir(exist_ok=True)
                rows = param_round(args, folder / "trace", out)
            else:
                rows = ours_round(args, folder / "trace",
                                  folder / f"{name.replace(' ', '-')}-{number}.jsonl", name)
            medians[name].append({k: statistics.median(v) for k, v in rows.items()})
        if not args.again:
            print(f"round {number + 1} of {args.rounds} done", file=sys.stderr)
    print(table(medians, variants, args, statistics.median, "the median of the rounds' medians"))
    print()
    print(table(medians, variants, args, min, "the least of the rounds' medians (the round "
                "least disturbed by the machine's other users)"))
    print(f"(trace and results in {folder})", file=sys.stderr)


def table(medians, variants, args, pick, picked):
    lines = [f"{args.nproc} ranks, gloo, {args.rounds} interleaved rounds of {args.passes} "
             f"passes; rank 0's median per call (us), {picked}; x PARAM in brackets; PARAM's "
             "each round in square brackets",
             "| op | size | PARAM | " + " | ".join(variants) + " |",
             "|---|---|---|" + "---|" * len(variants)]
    for op, nbytes in ROWS:
        key = (NAMES.get(op, op), nbytes)
        param = pick(m[key] for m in medians["PARAM"])
        cells = []
        for variant in variants:
            ours = pick(m[key] for m in medians[variant])
            cells.append(f"{ours * 1e6:.0f} ({ours / param:.2f})")
        rounds = "/".join(f"{m[key] * 1e6:.0f}" for m in medians["PARAM"])
        lines.append(f"| {key[0]} | {nbytes // KIB} KiB | {param * 1e6:.0f} [{rounds}] | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--variant":
        variant_main(sys.argv[2], sys.argv[4:])
    else:
        main()
